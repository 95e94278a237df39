/* kbear._cdispatch's Pending and RecordingSend: the compiled record of a message
 * pending on a cluster, for the take-back of #27 item 3 (the behaviour, and the
 * reference pure-Python code, are in kbear/producer/_pending.py).
 *
 * Pending(own, headers, partition, timestamp, rescue) is a message's delivery
 * callback: called (err, msg) by confluent-kafka, it
 *   - on a delivery (err None): ends the cluster's suspicion if it is suspected
 *     (rescue.call.record set: rescue.suspect(False));
 *   - on a purge (err.code() in _PURGE_QUEUE/_PURGE_INFLIGHT) while a take-back is
 *     under way (rescue.resend not None): offers it to rescue.resend(err, msg, self),
 *     and says nothing more when that re-sent it;
 *   - else calls ``own`` (the message's own callback) or, when None,
 *     ``rescue.report`` (the configuration's on_delivery; ``rescue.user`` itself
 *     while ``rescue.logical`` is empty) with (err, msg).
 *
 * RecordingSend(produce, rescue, fallback) is called like
 * confluent_kafka.Producer.produce(topic, value=None, key=None, partition=-1,
 * callback=None, on_delivery=None, timestamp=0, headers=None); it builds the
 * message's Pending (own: callback, else on_delivery, as confluent-kafka; headers: as given, a list
 * as a tuple; timestamp: the one given,
 * else the wall clock's now in ms) and calls produce() with what it was given, by
 * position only (absent: produce()'s defaults), the Pending as its callback
 * (kbear_produce_positional: confluent-kafka reads keywords slowly). A call
 * with a callback and no partition, timestamp or headers while the cluster is not
 * suspect shares its callback's Pending (timestamp 0: no CreateTime kept; at most
 * SHARED_MAX callbacks). A call it cannot read (an unknown keyword, an argument
 * given twice, too many, no topic) goes to ``fallback`` untouched (the pure-Python
 * recording send, whose errors are Python's).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <time.h>

/* in _dispatch.c: a PlainCall's record flag (1/0), or -1 when ``call`` is no PlainCall */
int kbear_plain_record(PyObject *call);

static PyObject *s_call, *s_record, *s_resend, *s_report, *s_suspect, *s_code, *s_user, *s_logical;
static PyObject *purge_queue, *purge_inflight; /* KafkaError._PURGE_QUEUE / _PURGE_INFLIGHT */
static PyObject *minus_one, *zero_long;

typedef struct {
    PyObject_HEAD
    PyObject *own;       /* the message's own callback, or None */
    PyObject *headers;   /* as given, or None */
    PyObject *partition; /* as given, or -1 */
    PyObject *timestamp; /* as given, or its CreateTime (epoch ms) */
    PyObject *rescue;    /* the client's kbear.producer._pending.Rescue */
    vectorcallfunc vectorcall;
} Pending;

static PyTypeObject PendingType;

/* rescue.<name> (a new reference). Rescue is a class with __slots__: the offset of
 * each slot is read once from its member descriptor, and an instance of exactly
 * that class is read at that offset (a generic getattr per report cost about 25 ns
 * each, three per report); anything else is read by getattr. */
enum { R_CALL, R_USER, R_LOGICAL, R_REPORT, R_RESEND, R_COUNT };
static PyObject *rescue_names[R_COUNT];
static PyTypeObject *rescue_type; /* the class whose offsets are known (a strong reference) */
static Py_ssize_t rescue_offsets[R_COUNT];

static PyObject *
rescue_get(PyObject *rescue, int which)
{
    if (Py_TYPE(rescue) != rescue_type) {
        PyTypeObject *type = Py_TYPE(rescue);
        Py_ssize_t offsets[R_COUNT];
        int ok = rescue_type == NULL; /* (only the first class met, Rescue itself) */
        for (int i = 0; i < R_COUNT && ok; i++) {
            PyObject *descr = _PyType_Lookup(type, rescue_names[i]); /* borrowed */
            if (descr != NULL && Py_IS_TYPE(descr, &PyMemberDescr_Type) &&
                ((PyMemberDescrObject *)descr)->d_member->type == T_OBJECT_EX) {
                offsets[i] = ((PyMemberDescrObject *)descr)->d_member->offset;
            }
            else {
                ok = 0;
            }
        }
        if (!ok) {
            return PyObject_GetAttr(rescue, rescue_names[which]);
        }
        memcpy(rescue_offsets, offsets, sizeof(offsets));
        Py_INCREF(type);
        rescue_type = type;
    }
    {
        PyObject *value = *(PyObject **)((char *)rescue + rescue_offsets[which]);
        if (value == NULL) {
            return PyObject_GetAttr(rescue, rescue_names[which]); /* (its AttributeError) */
        }
        Py_INCREF(value);
        return value;
    }
}

/* Whether the rescue's cluster is suspected (1/0), -1 on error. */
static int
suspected(PyObject *rescue)
{
    PyObject *call = rescue_get(rescue, R_CALL);
    int on;
    if (call == NULL) {
        return -1;
    }
    if (call == Py_None) {
        Py_DECREF(call);
        return 0;
    }
    on = kbear_plain_record(call);
    if (on < 0) {
        PyObject *record = PyObject_GetAttr(call, s_record);
        on = record == NULL ? -1 : PyObject_IsTrue(record);
        Py_XDECREF(record);
    }
    Py_DECREF(call);
    return on;
}

/* Whether ``err`` is a purge's (1/0), -1 on error. */
static int
purged(PyObject *err)
{
    PyObject *code;
    int found;
    if (purge_queue == NULL) {
        PyObject *module = PyImport_ImportModule("confluent_kafka");
        PyObject *cls = module == NULL ? NULL : PyObject_GetAttrString(module, "KafkaError");
        Py_XDECREF(module);
        if (cls == NULL) {
            return -1;
        }
        purge_queue = PyObject_GetAttrString(cls, "_PURGE_QUEUE");
        purge_inflight = purge_queue == NULL ? NULL : PyObject_GetAttrString(cls, "_PURGE_INFLIGHT");
        Py_DECREF(cls);
        if (purge_inflight == NULL) {
            Py_CLEAR(purge_queue);
            return -1;
        }
    }
    code = PyObject_CallMethodNoArgs(err, s_code);
    if (code == NULL) {
        return -1;
    }
    found = PyObject_RichCompareBool(code, purge_queue, Py_EQ);
    if (found == 0) {
        found = PyObject_RichCompareBool(code, purge_inflight, Py_EQ);
    }
    Py_DECREF(code);
    return found;
}

/* The report of a message without a callback of its own (a new reference): the
 * configuration's on_delivery itself (rescue.user) while no topic of the client is
 * remapped (rescue.logical empty: nothing to rename, no Python frame in between),
 * else rescue.report (renames, then calls it). */
static PyObject *
configured(PyObject *rescue)
{
    PyObject *logical = rescue_get(rescue, R_LOGICAL), *user;
    int empty;
    if (logical == NULL) {
        return NULL;
    }
    empty = PyDict_CheckExact(logical) && PyDict_GET_SIZE(logical) == 0;
    Py_DECREF(logical);
    if (empty) {
        user = rescue_get(rescue, R_USER);
        if (user == NULL || user != Py_None) {
            return user;
        }
        Py_DECREF(user);
    }
    return rescue_get(rescue, R_REPORT);
}

static PyObject *
pending_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Pending *self = (Pending *)op;
    PyObject *rescue = self->rescue, *err, *report, *result, *pair[3];

    if (PyVectorcall_NARGS(nargsf) != 2 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError, "Pending takes (err, msg)");
        return NULL;
    }
    if (rescue == NULL) {
        PyErr_SetString(PyExc_ReferenceError, "kbear pending record already cleared");
        return NULL;
    }
    Py_INCREF(rescue);
    err = args[0];
    if (err == Py_None) {
        int on = suspected(rescue);
        if (on < 0) {
            goto error;
        }
        if (on) { /* delivered: the cluster is reachable again */
            result = PyObject_CallMethodOneArg(rescue, s_suspect, Py_False);
            if (result == NULL) {
                goto error;
            }
            Py_DECREF(result);
        }
    }
    else {
        PyObject *resend = rescue_get(rescue, R_RESEND);
        if (resend == NULL) {
            goto error;
        }
        if (resend != Py_None) {
            int found = purged(err), done;
            if (found < 0) {
                Py_DECREF(resend);
                goto error;
            }
            if (found) {
                pair[0] = args[0];
                pair[1] = args[1];
                pair[2] = op;
                result = PyObject_Vectorcall(resend, pair, 3, NULL);
                Py_DECREF(resend);
                if (result == NULL) {
                    goto error;
                }
                done = PyObject_IsTrue(result);
                Py_DECREF(result);
                if (done < 0) {
                    goto error;
                }
                if (done) {
                    Py_DECREF(rescue);
                    Py_RETURN_NONE;
                }
                resend = NULL;
            }
        }
        Py_XDECREF(resend);
    }
    if (self->own != NULL && self->own != Py_None) {
        report = self->own;
        Py_INCREF(report);
    }
    else {
        report = configured(rescue);
        if (report == NULL) {
            goto error;
        }
    }
    Py_DECREF(rescue);
    result = PyObject_Vectorcall(report, args, 2, NULL);
    Py_DECREF(report);
    if (result == NULL) {
        return NULL;
    }
    Py_DECREF(result);
    Py_RETURN_NONE;
error:
    Py_DECREF(rescue);
    return NULL;
}

static PyObject *
pending_make(PyTypeObject *type, PyObject *own, PyObject *headers, PyObject *partition, PyObject *timestamp,
             PyObject *rescue, int tracked)
{
    Pending *self = (Pending *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    if (!tracked) {
        PyObject_GC_UnTrack(self);
    }
    Py_INCREF(own);
    self->own = own;
    Py_INCREF(headers);
    self->headers = headers;
    Py_INCREF(partition);
    self->partition = partition;
    Py_INCREF(timestamp);
    self->timestamp = timestamp;
    Py_INCREF(rescue);
    self->rescue = rescue;
    self->vectorcall = pending_vectorcall;
    return (PyObject *)self;
}

static PyObject *
pending_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"own", "headers", "partition", "timestamp", "rescue", NULL};
    PyObject *own, *headers, *partition, *timestamp, *rescue;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOO:Pending", kwlist, &own, &headers, &partition,
                                     &timestamp, &rescue)) {
        return NULL;
    }
    return pending_make(type, own, headers, partition, timestamp, rescue, 1);
}

/* A message's own record is not tracked by the garbage collector (pending_make):
 * it is referenced only by librdkafka's message (and, briefly, by a take-back's
 * resend call), so it is never part of a reference cycle, and tracking each of
 * the (up to millions of) pending records made the collector's passes cost about
 * 300 ns per message. A shared record (RecordingSend's dict, a cycle through its
 * rescue) and one made from Python are tracked. */
static int
pending_traverse(Pending *self, visitproc visit, void *arg)
{
    Py_VISIT(self->own);
    Py_VISIT(self->headers);
    Py_VISIT(self->partition);
    Py_VISIT(self->timestamp);
    Py_VISIT(self->rescue);
    return 0;
}

static int
pending_clear(Pending *self)
{
    Py_CLEAR(self->own);
    Py_CLEAR(self->headers);
    Py_CLEAR(self->partition);
    Py_CLEAR(self->timestamp);
    Py_CLEAR(self->rescue);
    return 0;
}

static void
pending_dealloc(Pending *self)
{
    PyObject_GC_UnTrack(self);
    pending_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef pending_members[] = {
    {"own", T_OBJECT, offsetof(Pending, own), READONLY, "the message's own callback (None: on_delivery)"},
    {"headers", T_OBJECT, offsetof(Pending, headers), READONLY, "its headers as given, a list as a tuple (None: none)"},
    {"partition", T_OBJECT, offsetof(Pending, partition), READONLY, "its partition as given (-1: any)"},
    {"timestamp", T_OBJECT, offsetof(Pending, timestamp), READONLY, "its timestamp or CreateTime (epoch ms)"},
    {"rescue", T_OBJECT, offsetof(Pending, rescue), READONLY, "the rescue of its client"},
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(Pending, vectorcall), READONLY, NULL},
    {NULL},
};

static PyTypeObject PendingType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kbear._cdispatch.Pending",
    .tp_basicsize = sizeof(Pending),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = pending_new,
    .tp_dealloc = (destructor)pending_dealloc,
    .tp_traverse = (traverseproc)pending_traverse,
    .tp_clear = (inquiry)pending_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Pending, vectorcall),
    .tp_members = pending_members,
};

/* RecordingSend */

typedef struct {
    PyObject_HEAD
    PyObject *produce;  /* the cluster client's bound produce */
    PyObject *rescue;   /* its Rescue */
    PyObject *fallback; /* the pure-Python recording send (calls not read here) */
    PyObject *shared;   /* dict: callback -> its shared Pending (see send_vectorcall) */
    vectorcallfunc vectorcall;
} RecordingSend;

/* at most this many callbacks get a shared Pending (a callback made per call: none) */
#define SHARED_MAX 64

/* produce()'s parameters, in positional order */
enum { P_TOPIC, P_VALUE, P_KEY, P_PARTITION, P_CALLBACK, P_ON_DELIVERY, P_TIMESTAMP, P_HEADERS, P_COUNT };
static PyObject *param_names[P_COUNT];

static int
param_index(PyObject *name)
{
    for (int i = 0; i < P_COUNT; i++) {
        if (name == param_names[i]) {
            return i;
        }
    }
    for (int i = 0; i < P_COUNT; i++) {
        if (PyUnicode_Compare(name, param_names[i]) == 0) {
            return i;
        }
    }
    return -1;
}

/* The wall clock's now in epoch ms. */
static PyObject *
now_ms(void)
{
    struct timespec ts;
    if (timespec_get(&ts, TIME_UTC) != TIME_UTC) {
        PyErr_SetString(PyExc_OSError, "kbear: timespec_get failed");
        return NULL;
    }
    return PyLong_FromLongLong((long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
}

/* Reads produce()'s arguments (confluent-kafka's order) into p[P_COUNT] (borrowed;
 * NULL: not given). Returns 0, or -1 (no exception set) for a call read nowhere here:
 * too many arguments, an unknown keyword, one given twice, no topic. */
int
kbear_produce_args(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, PyObject **p)
{
    for (int i = 0; i < P_COUNT; i++) {
        p[i] = NULL;
    }
    if (nargs > P_COUNT) {
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) {
        p[i] = args[i];
    }
    if (kwnames != NULL) {
        Py_ssize_t n = PyTuple_GET_SIZE(kwnames);
        for (Py_ssize_t i = 0; i < n; i++) {
            int at = param_index(PyTuple_GET_ITEM(kwnames, i));
            if (at < 0 || p[at] != NULL) {
                return -1;
            }
            p[at] = args[nargs + i];
        }
    }
    return p[P_TOPIC] == NULL ? -1 : 0;
}

/* produce(topic, value, key, partition, callback, on_delivery, timestamp, headers) by
 * position only, up to the last one given (headers None: not given), produce()'s
 * defaults before it (None, None, -1, None, None, 0); ``record`` (when not NULL) is
 * the callback (confluent-kafka: callback wins over on_delivery). confluent-kafka
 * reads a keyword argument by making and hashing a str per name it tries (about
 * 400 ns per call with callback=, 600 ns with headers=): by position it reads none. */
PyObject *
kbear_produce_positional(PyObject *produce, PyObject *const *p, PyObject *record)
{
    PyObject *call[P_COUNT];
    Py_ssize_t npos = 1;
    call[P_TOPIC] = p[P_TOPIC];
    call[P_VALUE] = p[P_VALUE] != NULL ? p[P_VALUE] : Py_None;
    call[P_KEY] = p[P_KEY] != NULL ? p[P_KEY] : Py_None;
    call[P_PARTITION] = p[P_PARTITION] != NULL ? p[P_PARTITION] : minus_one;
    call[P_CALLBACK] = record != NULL ? record : (p[P_CALLBACK] != NULL ? p[P_CALLBACK] : Py_None);
    call[P_ON_DELIVERY] = record != NULL || p[P_ON_DELIVERY] == NULL ? Py_None : p[P_ON_DELIVERY];
    call[P_TIMESTAMP] = p[P_TIMESTAMP] != NULL ? p[P_TIMESTAMP] : zero_long;
    call[P_HEADERS] = p[P_HEADERS];
    for (int i = P_VALUE; i < P_COUNT; i++) {
        if (p[i] != NULL && (i != P_HEADERS || p[i] != Py_None)) {
            npos = i + 1;
        }
    }
    if (record != NULL && npos <= P_CALLBACK) {
        npos = P_CALLBACK + 1;
    }
    return PyObject_Vectorcall(produce, call, npos, NULL);
}

static PyTypeObject RecordingSendType;

/* Whether ``send`` is a RecordingSend (for _dispatch.c's PlainCall). */
int
kbear_is_recording_send(PyObject *send)
{
    return Py_TYPE(send) == &RecordingSendType;
}

/* The recorded call of RecordingSend ``op`` with produce()'s arguments read (p). */
PyObject *
kbear_record_call(PyObject *op, PyObject *const *p)
{
    RecordingSend *self = (RecordingSend *)op;
    PyObject *own, *stamp, *kept, *pending, *result;
    int truth;

    if (self->produce == NULL || self->rescue == NULL || self->fallback == NULL) {
        PyErr_SetString(PyExc_ReferenceError, "kbear recording send already cleared");
        return NULL;
    }
    own = p[P_CALLBACK] != NULL && p[P_CALLBACK] != Py_None ? p[P_CALLBACK] : p[P_ON_DELIVERY];
    if (own == NULL) {
        own = Py_None;
    }
    if (own != Py_None && p[P_PARTITION] == NULL && p[P_TIMESTAMP] == NULL &&
        (p[P_HEADERS] == NULL || p[P_HEADERS] == Py_None)) {
        /* a callback and nothing a report does not give back, the cluster not
         * suspect: the record is the callback's shared Pending (no CreateTime
         * kept: a re-send gets a new one), one allocation less per message */
        int on = suspected(self->rescue);
        if (on < 0) {
            return NULL;
        }
        if (!on) {
            pending = PyDict_GetItemWithError(self->shared, own); /* borrowed */
            if (pending == NULL && PyErr_Occurred()) {
                return NULL;
            }
            if (pending == NULL && PyDict_GET_SIZE(self->shared) < SHARED_MAX) {
                pending = pending_make(&PendingType, own, Py_None, minus_one, zero_long, self->rescue, 1);
                if (pending == NULL) {
                    return NULL;
                }
                if (PyDict_SetItem(self->shared, own, pending) < 0) {
                    Py_DECREF(pending);
                    return NULL;
                }
                Py_DECREF(pending); /* (the dict holds it) */
            }
            if (pending != NULL) {
                Py_INCREF(pending);
                result = kbear_produce_positional(self->produce, p, pending);
                Py_DECREF(pending);
                return result;
            }
        }
    }
    truth = p[P_TIMESTAMP] == NULL ? 0 : PyObject_IsTrue(p[P_TIMESTAMP]);
    if (truth < 0) {
        return NULL;
    }
    if (truth) {
        stamp = p[P_TIMESTAMP];
        Py_INCREF(stamp);
    }
    else {
        stamp = now_ms();
        if (stamp == NULL) {
            return NULL;
        }
    }
    /* a list of headers is kept as a tuple: a tuple of (str, bytes) pairs leaves the
     * garbage collector's watch at its first pass; a list kept while the message
     * is pending would be walked by every pass (about 400 ns per message) */
    if (p[P_HEADERS] != NULL && PyList_CheckExact(p[P_HEADERS])) {
        kept = PyList_AsTuple(p[P_HEADERS]);
        if (kept == NULL) {
            Py_DECREF(stamp);
            return NULL;
        }
    }
    else {
        kept = p[P_HEADERS] == NULL ? Py_None : p[P_HEADERS];
        Py_INCREF(kept);
    }
    pending = pending_make(&PendingType, own, kept, p[P_PARTITION] == NULL ? minus_one : p[P_PARTITION], stamp,
                           self->rescue, 0);
    Py_DECREF(stamp);
    Py_DECREF(kept);
    if (pending == NULL) {
        return NULL;
    }
    /* produce() gets what it was given, by position, the record as its callback */
    result = kbear_produce_positional(self->produce, p, pending);
    Py_DECREF(pending);
    return result;
}

static PyObject *
send_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    RecordingSend *self = (RecordingSend *)op;
    PyObject *p[P_COUNT];

    if (kbear_produce_args(args, PyVectorcall_NARGS(nargsf), kwnames, p) < 0) {
        if (self->fallback == NULL) {
            PyErr_SetString(PyExc_ReferenceError, "kbear recording send already cleared");
            return NULL;
        }
        return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    }
    return kbear_record_call(op, p);
}

static PyObject *
send_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"produce", "rescue", "fallback", NULL};
    PyObject *produce, *rescue, *fallback;
    RecordingSend *self;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO:RecordingSend", kwlist, &produce, &rescue, &fallback)) {
        return NULL;
    }
    if (!PyCallable_Check(produce) || !PyCallable_Check(fallback)) {
        PyErr_SetString(PyExc_TypeError, "RecordingSend: produce and fallback must be callable");
        return NULL;
    }
    self = (RecordingSend *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    Py_INCREF(produce);
    self->produce = produce;
    Py_INCREF(rescue);
    self->rescue = rescue;
    Py_INCREF(fallback);
    self->fallback = fallback;
    self->shared = PyDict_New();
    if (self->shared == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    self->vectorcall = send_vectorcall;
    return (PyObject *)self;
}

static int
send_traverse(RecordingSend *self, visitproc visit, void *arg)
{
    Py_VISIT(self->produce);
    Py_VISIT(self->rescue);
    Py_VISIT(self->fallback);
    Py_VISIT(self->shared);
    return 0;
}

static int
send_clear(RecordingSend *self)
{
    Py_CLEAR(self->produce);
    Py_CLEAR(self->rescue);
    Py_CLEAR(self->fallback);
    Py_CLEAR(self->shared);
    return 0;
}

static void
send_dealloc(RecordingSend *self)
{
    PyObject_GC_UnTrack(self);
    send_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef send_members[] = {
    {"produce", T_OBJECT, offsetof(RecordingSend, produce), READONLY, "the client's produce"},
    {"rescue", T_OBJECT, offsetof(RecordingSend, rescue), READONLY, "the client's rescue"},
    {"fallback", T_OBJECT, offsetof(RecordingSend, fallback), READONLY, "calls not read here"},
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(RecordingSend, vectorcall), READONLY, NULL},
    {NULL},
};

static PyTypeObject RecordingSendType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kbear._cdispatch.RecordingSend",
    .tp_basicsize = sizeof(RecordingSend),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = send_new,
    .tp_dealloc = (destructor)send_dealloc,
    .tp_traverse = (traverseproc)send_traverse,
    .tp_clear = (inquiry)send_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(RecordingSend, vectorcall),
    .tp_members = send_members,
};

static int
add_type(PyObject *module, const char *name, PyTypeObject *type)
{
    if (PyType_Ready(type) < 0) {
        return -1;
    }
    Py_INCREF(type);
    if (PyModule_AddObject(module, name, (PyObject *)type) < 0) {
        Py_DECREF(type);
        return -1;
    }
    return 0;
}

/* Called by PyInit__cdispatch: adds Pending and RecordingSend to ``module``. */
int
kbear_pending_init(PyObject *module)
{
    static const char *names[P_COUNT] = {"topic",    "value",       "key",       "partition",
                                         "callback", "on_delivery", "timestamp", "headers"};
    for (int i = 0; i < P_COUNT; i++) {
        param_names[i] = PyUnicode_InternFromString(names[i]);
        if (param_names[i] == NULL) {
            return -1;
        }
    }
    s_call = PyUnicode_InternFromString("call");
    s_record = PyUnicode_InternFromString("record");
    s_resend = PyUnicode_InternFromString("resend");
    s_report = PyUnicode_InternFromString("report");
    s_suspect = PyUnicode_InternFromString("suspect");
    s_code = PyUnicode_InternFromString("code");
    s_user = PyUnicode_InternFromString("user");
    s_logical = PyUnicode_InternFromString("logical");
    rescue_names[R_CALL] = s_call;
    rescue_names[R_USER] = s_user;
    rescue_names[R_LOGICAL] = s_logical;
    rescue_names[R_REPORT] = s_report;
    rescue_names[R_RESEND] = s_resend;
    minus_one = PyLong_FromLong(-1);
    zero_long = PyLong_FromLong(0);
    if (s_call == NULL || s_record == NULL || s_resend == NULL || s_report == NULL || s_suspect == NULL ||
        s_code == NULL || s_user == NULL || s_logical == NULL || minus_one == NULL || zero_long == NULL) {
        return -1;
    }
    if (add_type(module, "Pending", &PendingType) < 0 || add_type(module, "RecordingSend", &RecordingSendType) < 0) {
        return -1;
    }
    return 0;
}
