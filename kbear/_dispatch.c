/* kbear._cdispatch: RoutedProducer.produce() (Dispatcher) and RoutedConsumer.poll() /
 * consume() (TurnTaker) over several clusters, in C.
 *
 * A Dispatcher(table, fallback) is called like confluent_kafka.Producer.produce.
 * It finds the topic (the first positional argument, or the ``topic=`` keyword),
 * looks it up in ``table`` (a dict: topic -> the cluster client's bound
 * ``produce``) and forwards the call to that method with the positional and
 * keyword arguments untouched (vectorcall: no tuple or dict is built here).
 * Every call the table does not serve exactly -- a topic not in it (first use,
 * remapped topic, topic unbound by a reload), a topic that is not an exact str,
 * no topic at all, a topic given both by position and by name -- goes to
 * ``fallback`` (kbear's pure-Python dispatcher) with the same arguments, so the
 * errors and the behaviour are those of the fallback.
 *
 * The table is read without a lock, as the Python dispatcher reads it: the lookup
 * and the call to the client happen while this thread holds the GIL, and the
 * method found is kept alive (a new reference) for the call even if a reload
 * removes it from the table meanwhile.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

typedef struct {
    PyObject_HEAD
    PyObject *table;    /* dict: topic (str) -> callable taking produce()'s arguments */
    PyObject *fallback; /* callable: every call the table does not serve */
    vectorcallfunc vectorcall;
} Dispatcher;

static PyObject *topic_name; /* interned "topic" */

/* A PlainCall (see below): produce() over one cluster's client, recorded or not. */
typedef struct {
    PyObject_HEAD
    PyObject *target;
    PyObject *fallback;
    vectorcallfunc vectorcall;
    char record;   /* every call to ``fallback`` (a cluster suspected lost) */
    char reported; /* the client has a configured on_delivery */
} PlainCall;

static PyTypeObject PlainCallType;

/* ``send(*args)`` for a send function found by the Dispatcher or a FastMethod: a
 * PlainCall's plain call (at most topic, value, key by position, not suspect) goes
 * straight to its client's produce (one call less per produce()). */
static inline PyObject *
call_send(PyObject *send, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    if (Py_TYPE(send) == &PlainCallType && kwnames == NULL && PyVectorcall_NARGS(nargsf) <= 3) {
        PlainCall *plain = (PlainCall *)send;
        if (!plain->record && plain->target != NULL) {
            return PyObject_Vectorcall(plain->target, args, nargsf, NULL);
        }
    }
    return PyObject_Vectorcall(send, args, nargsf, kwnames);
}

/* Whether the keyword names include "topic". */
static int
names_topic(PyObject *kwnames, Py_ssize_t *index)
{
    Py_ssize_t n = PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, i);
        if (name == topic_name || PyUnicode_Compare(name, topic_name) == 0) {
            *index = i;
            return 1;
        }
    }
    return 0;
}

static PyObject *
dispatcher_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Dispatcher *self = (Dispatcher *)op;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *topic = NULL;
    Py_ssize_t index;

    if (self->table == NULL || self->fallback == NULL) {
        PyErr_SetString(PyExc_ReferenceError, "kbear dispatcher already cleared");
        return NULL;
    }
    if (nargs > 0) {
        /* a topic also given by name: the fallback raises Python's TypeError */
        if (kwnames == NULL || !names_topic(kwnames, &index)) {
            topic = args[0];
        }
    }
    else if (kwnames != NULL && names_topic(kwnames, &index)) {
        topic = args[index];
    }
    if (topic != NULL && PyUnicode_CheckExact(topic)) {
        PyObject *target = PyDict_GetItemWithError(self->table, topic); /* borrowed */
        if (target != NULL) {
            PyObject *result;
            Py_INCREF(target);
            result = call_send(target, args, nargsf, kwnames);
            Py_DECREF(target);
            return result;
        }
        if (PyErr_Occurred()) {
            return NULL;
        }
    }
    return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
}

static PyObject *
dispatcher_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"table", "fallback", NULL};
    PyObject *table, *fallback;
    Dispatcher *self;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!O:Dispatcher", kwlist, &PyDict_Type, &table,
                                     &fallback)) {
        return NULL;
    }
    if (!PyCallable_Check(fallback)) {
        PyErr_SetString(PyExc_TypeError, "Dispatcher: fallback must be callable");
        return NULL;
    }
    self = (Dispatcher *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    Py_INCREF(table);
    self->table = table;
    Py_INCREF(fallback);
    self->fallback = fallback;
    self->vectorcall = dispatcher_vectorcall;
    return (PyObject *)self;
}

static int
dispatcher_traverse(Dispatcher *self, visitproc visit, void *arg)
{
    Py_VISIT(self->table);
    Py_VISIT(self->fallback);
    return 0;
}

static int
dispatcher_clear(Dispatcher *self)
{
    Py_CLEAR(self->table);
    Py_CLEAR(self->fallback);
    return 0;
}

static void
dispatcher_dealloc(Dispatcher *self)
{
    PyObject_GC_UnTrack(self);
    dispatcher_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
dispatcher_get_doc(Dispatcher *self, void *closure)
{
    if (self->fallback == NULL) {
        Py_RETURN_NONE;
    }
    return PyObject_GetAttrString(self->fallback, "__doc__");
}

static PyObject *
dispatcher_repr(Dispatcher *self)
{
    return PyUnicode_FromFormat("<kbear compiled produce dispatcher, %zd topic(s)>",
                                self->table == NULL ? (Py_ssize_t)0 : PyDict_GET_SIZE(self->table));
}

static PyMemberDef dispatcher_members[] = {
    {"table", T_OBJECT, offsetof(Dispatcher, table), READONLY,
     "dict: topic -> the callable the call is forwarded to"},
    {"fallback", T_OBJECT, offsetof(Dispatcher, fallback), READONLY,
     "callable: every call the table does not serve"},
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(Dispatcher, vectorcall), READONLY, NULL},
    {NULL},
};

static PyGetSetDef dispatcher_getset[] = {
    {"__doc__", (getter)dispatcher_get_doc, NULL, "the fallback's docstring", NULL},
    {NULL},
};

static PyTypeObject DispatcherType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kbear._cdispatch.Dispatcher",
    .tp_basicsize = sizeof(Dispatcher),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = dispatcher_new,
    .tp_dealloc = (destructor)dispatcher_dealloc,
    .tp_traverse = (traverseproc)dispatcher_traverse,
    .tp_clear = (inquiry)dispatcher_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Dispatcher, vectorcall),
    .tp_repr = (reprfunc)dispatcher_repr,
    .tp_members = dispatcher_members,
    .tp_getset = dispatcher_getset,
};

/* ------------------------------------------------------------------ TurnTaker
 *
 * RoutedConsumer.poll() / consume() over several clusters with nothing to
 * translate: each call first asks the next cluster's client in turn without
 * waiting (``methods[i](0)`` or ``methods[i](num_messages, 0)``) and returns what
 * it got; when that client has nothing, the call goes to ``slow`` (the class
 * method bound to the consumer: every client, then the wait) with its arguments
 * untouched. Arguments of another shape than ``poll([timeout])`` /
 * ``consume([num_messages], [timeout])`` with an exact int in 1..1000000 go to
 * ``pure`` (kbear's pure-Python turn-taking function), so errors are its own.
 */

typedef struct {
    PyObject_HEAD
    PyObject *methods; /* tuple: the clients' bound poll (or consume) */
    PyObject *slow;    /* callable: the full path, same arguments */
    PyObject *pure;    /* callable: the pure-Python turn taking, same arguments */
    int consume;       /* 0: poll(timeout=None); 1: consume(num_messages=1, timeout=-1) */
    Py_ssize_t turn;
    vectorcallfunc vectorcall;
} TurnTaker;

static PyObject *zero;          /* 0: the timeout of the first, non-waiting ask */
static PyObject *timeout_name;  /* interned "timeout" */
static PyObject *num_name;      /* interned "num_messages" */

static int
is_name(PyObject *name, PyObject *wanted)
{
    return name == wanted || PyUnicode_Compare(name, wanted) == 0;
}

static PyObject *
turns_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    TurnTaker *self = (TurnTaker *)op;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    Py_ssize_t n, i;
    PyObject *got;

    if (self->methods == NULL || self->slow == NULL || self->pure == NULL) {
        PyErr_SetString(PyExc_ReferenceError, "kbear turn taker already cleared");
        return NULL;
    }
    n = PyTuple_GET_SIZE(self->methods);
    if (n == 0) {
        return PyObject_Vectorcall(self->pure, args, nargsf, kwnames);
    }
    if (!self->consume) {
        /* poll(), poll(timeout), poll(timeout=...) */
        if (!(nkw == 0 ? nargs <= 1 : (nargs == 0 && nkw == 1 && is_name(PyTuple_GET_ITEM(kwnames, 0), timeout_name)))) {
            return PyObject_Vectorcall(self->pure, args, nargsf, kwnames);
        }
        i = self->turn = (self->turn + 1) % n;
        got = PyObject_Vectorcall(PyTuple_GET_ITEM(self->methods, i), &zero, 1, NULL);
        if (got == NULL || got != Py_None) {
            return got;
        }
        Py_DECREF(got);
        return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
    }
    else {
        /* consume([num_messages], [timeout]), by position or by name */
        PyObject *num = NULL;
        long long value = 1;
        if (nargs > 2) {
            return PyObject_Vectorcall(self->pure, args, nargsf, kwnames);
        }
        if (nargs >= 1) {
            num = args[0];
        }
        for (Py_ssize_t k = 0; k < nkw; k++) {
            PyObject *name = PyTuple_GET_ITEM(kwnames, k);
            if (nargs == 0 && is_name(name, num_name)) {
                num = args[nargs + k];
            }
            else if (!(nargs < 2 && is_name(name, timeout_name))) {
                return PyObject_Vectorcall(self->pure, args, nargsf, kwnames);
            }
        }
        if (num != NULL) {
            if (!PyLong_CheckExact(num)) {
                return PyObject_Vectorcall(self->pure, args, nargsf, kwnames);
            }
            value = PyLong_AsLongLong(num);
            if (value == -1 && PyErr_Occurred()) {
                PyErr_Clear();
                return PyObject_Vectorcall(self->pure, args, nargsf, kwnames);
            }
        }
        i = self->turn = (self->turn + 1) % n;
        if (value >= 1 && value <= 1000000) {
            PyObject *call[2];
            PyObject *boxed = NULL;
            if (num == NULL) {
                boxed = PyLong_FromLongLong(value);
                if (boxed == NULL) {
                    return NULL;
                }
            }
            call[0] = num != NULL ? num : boxed;
            call[1] = zero;
            got = PyObject_Vectorcall(PyTuple_GET_ITEM(self->methods, i), call, 2, NULL);
            Py_XDECREF(boxed);
            if (got == NULL) {
                return NULL;
            }
            if (!PyList_CheckExact(got) || PyList_GET_SIZE(got) > 0) {
                return got;
            }
            Py_DECREF(got);
        }
        return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
    }
}

static PyObject *
turns_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"kind", "methods", "slow", "pure", NULL};
    const char *kind;
    PyObject *methods, *slow, *pure;
    TurnTaker *self;
    int consume;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "sO!OO:TurnTaker", kwlist, &kind, &PyTuple_Type,
                                     &methods, &slow, &pure)) {
        return NULL;
    }
    if (strcmp(kind, "poll") == 0) {
        consume = 0;
    }
    else if (strcmp(kind, "consume") == 0) {
        consume = 1;
    }
    else {
        PyErr_SetString(PyExc_ValueError, "TurnTaker: kind must be 'poll' or 'consume'");
        return NULL;
    }
    if (!PyCallable_Check(slow) || !PyCallable_Check(pure)) {
        PyErr_SetString(PyExc_TypeError, "TurnTaker: slow and pure must be callable");
        return NULL;
    }
    self = (TurnTaker *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    Py_INCREF(methods);
    self->methods = methods;
    Py_INCREF(slow);
    self->slow = slow;
    Py_INCREF(pure);
    self->pure = pure;
    self->consume = consume;
    self->turn = 0;
    self->vectorcall = turns_vectorcall;
    return (PyObject *)self;
}

static int
turns_traverse(TurnTaker *self, visitproc visit, void *arg)
{
    Py_VISIT(self->methods);
    Py_VISIT(self->slow);
    Py_VISIT(self->pure);
    return 0;
}

static int
turns_clear(TurnTaker *self)
{
    Py_CLEAR(self->methods);
    Py_CLEAR(self->slow);
    Py_CLEAR(self->pure);
    return 0;
}

static void
turns_dealloc(TurnTaker *self)
{
    PyObject_GC_UnTrack(self);
    turns_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
turns_get_doc(TurnTaker *self, void *closure)
{
    if (self->pure == NULL) {
        Py_RETURN_NONE;
    }
    return PyObject_GetAttrString(self->pure, "__doc__");
}

static PyObject *
turns_repr(TurnTaker *self)
{
    return PyUnicode_FromFormat("<kbear compiled %s over %zd clusters>", self->consume ? "consume" : "poll",
                                self->methods == NULL ? (Py_ssize_t)0 : PyTuple_GET_SIZE(self->methods));
}

static PyMemberDef turns_members[] = {
    {"methods", T_OBJECT, offsetof(TurnTaker, methods), READONLY, "tuple: the clients' bound methods"},
    {"slow", T_OBJECT, offsetof(TurnTaker, slow), READONLY, "callable: the full path"},
    {"pure", T_OBJECT, offsetof(TurnTaker, pure), READONLY, "callable: the pure-Python turn taking"},
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(TurnTaker, vectorcall), READONLY, NULL},
    {NULL},
};

static PyGetSetDef turns_getset[] = {
    {"__doc__", (getter)turns_get_doc, NULL, "the pure-Python function's docstring", NULL},
    {NULL},
};

static PyTypeObject TurnTakerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kbear._cdispatch.TurnTaker",
    .tp_basicsize = sizeof(TurnTaker),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = turns_new,
    .tp_dealloc = (destructor)turns_dealloc,
    .tp_traverse = (traverseproc)turns_traverse,
    .tp_clear = (inquiry)turns_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(TurnTaker, vectorcall),
    .tp_repr = (reprfunc)turns_repr,
    .tp_members = turns_members,
    .tp_getset = turns_getset,
};

/* ------------------------------------------------------------------ FastMethod
 *
 * A method of a routed client class whose instances may each bind a fast path:
 * FastMethod(slot, slow) placed on the class under the method's name. ``slot``
 * is the member descriptor of a ``__slots__`` entry of that class; ``slow`` is
 * the method's Python function. Called on an instance (``routed.produce(t, v)``,
 * as people write it), it reads the instance's slot: a callable there (the one
 * cluster's own ``produce``, or a Dispatcher) gets the call without ``self``;
 * an empty slot (None or unset) calls ``slow(self, ...)``.
 *
 * It is a method descriptor (Py_TPFLAGS_METHOD_DESCRIPTOR) in a class without
 * ``__getattr__``: the interpreter then looks ``routed.produce`` up as it looks up
 * a method of a class (specialized, no bound-method object, no instance
 * dictionary lookup), which an instance attribute over a class method is not.
 * ``__get__`` answers as such an instance attribute did: the slot's callable when
 * set (``produce = routed.produce`` hoisted, as fast as before), else ``slow``
 * bound to the instance; on the class, ``slow`` itself (its signature and doc).
 */

typedef struct {
    PyObject_HEAD
    PyObject *slot;          /* the member descriptor of the __slots__ entry */
    PyObject *slow;          /* the Python function */
    PyTypeObject *owner;     /* the class whose slot it is */
    Py_ssize_t offset;       /* the slot's offset in an instance */
    vectorcallfunc vectorcall;
} FastMethod;

/* The instance's fast path (a new reference), or NULL when its slot is empty. */
static PyObject *
fast_target(FastMethod *self, PyObject *obj)
{
    PyObject *target;
    if (!PyObject_TypeCheck(obj, self->owner)) {
        return NULL;
    }
    target = *(PyObject **)((char *)obj + self->offset);
    if (target == NULL || target == Py_None) {
        return NULL;
    }
    Py_INCREF(target);
    return target;
}

static PyObject *
fast_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    FastMethod *self = (FastMethod *)op;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *target, *result;

    if (nargs >= 1 && (target = fast_target(self, args[0])) != NULL) {
        /* args[0] (self) may be overwritten by the callee: PY_VECTORCALL_ARGUMENTS_OFFSET */
        result = call_send(target, args + 1, (size_t)(nargs - 1) | PY_VECTORCALL_ARGUMENTS_OFFSET, kwnames);
        Py_DECREF(target);
        return result;
    }
    return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
}

static PyObject *
fast_descr_get(PyObject *op, PyObject *obj, PyObject *type)
{
    FastMethod *self = (FastMethod *)op;
    PyObject *target;
    if (obj == NULL || obj == Py_None) {
        Py_INCREF(self->slow);
        return self->slow;
    }
    target = fast_target(self, obj);
    if (target != NULL) {
        return target;
    }
    return PyMethod_New(self->slow, obj);
}

static PyObject *
fast_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"slot", "slow", NULL};
    PyObject *slot, *slow;
    PyMemberDescrObject *member;
    FastMethod *self;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!O:FastMethod", kwlist, &PyMemberDescr_Type, &slot,
                                     &slow)) {
        return NULL;
    }
    member = (PyMemberDescrObject *)slot;
    if (member->d_member->type != T_OBJECT_EX && member->d_member->type != T_OBJECT) {
        PyErr_SetString(PyExc_TypeError, "FastMethod: slot must be a __slots__ entry");
        return NULL;
    }
    if (!PyCallable_Check(slow)) {
        PyErr_SetString(PyExc_TypeError, "FastMethod: slow must be callable");
        return NULL;
    }
    self = (FastMethod *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    Py_INCREF(slot);
    self->slot = slot;
    Py_INCREF(slow);
    self->slow = slow;
    self->owner = PyDescr_TYPE(member);
    Py_INCREF(self->owner);
    self->offset = member->d_member->offset;
    self->vectorcall = fast_vectorcall;
    return (PyObject *)self;
}

static int
fast_traverse(FastMethod *self, visitproc visit, void *arg)
{
    Py_VISIT(self->slot);
    Py_VISIT(self->slow);
    Py_VISIT(self->owner);
    return 0;
}

static int
fast_clear(FastMethod *self)
{
    Py_CLEAR(self->slot);
    Py_CLEAR(self->slow);
    Py_CLEAR(self->owner);
    return 0;
}

static void
fast_dealloc(FastMethod *self)
{
    PyObject_GC_UnTrack(self);
    fast_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
fast_get_doc(FastMethod *self, void *closure)
{
    if (self->slow == NULL) {
        Py_RETURN_NONE;
    }
    return PyObject_GetAttrString(self->slow, "__doc__");
}

static PyObject *
fast_repr(FastMethod *self)
{
    return PyUnicode_FromFormat("<kbear fast method %R>", self->slow);
}

static PyMemberDef fast_members[] = {
    {"slot", T_OBJECT, offsetof(FastMethod, slot), READONLY, "the __slots__ entry holding each instance's fast path"},
    {"slow", T_OBJECT, offsetof(FastMethod, slow), READONLY, "the method's Python function"},
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(FastMethod, vectorcall), READONLY, NULL},
    {NULL},
};

static PyGetSetDef fast_getset[] = {
    {"__doc__", (getter)fast_get_doc, NULL, "the Python function's docstring", NULL},
    {NULL},
};

static PyTypeObject FastMethodType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kbear._cdispatch.FastMethod",
    .tp_basicsize = sizeof(FastMethod),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL |
                Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_new = fast_new,
    .tp_dealloc = (destructor)fast_dealloc,
    .tp_traverse = (traverseproc)fast_traverse,
    .tp_clear = (inquiry)fast_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(FastMethod, vectorcall),
    .tp_descr_get = fast_descr_get,
    .tp_repr = (reprfunc)fast_repr,
    .tp_members = fast_members,
    .tp_getset = fast_getset,
};

/* PlainCall(target, fallback, reported=False): produce() forwarded to ``target`` (a
 * cluster client's bound ``produce``) when kbear keeps no record of the message, and
 * to ``fallback`` (the recording send, see kbear/producer/_pending.py) when it does:
 *   - every call while ``record`` is set (the cluster is suspected lost);
 *   - a call with a delivery callback of its own (``callback``/``on_delivery`` not None);
 *   - a call with a partition, a timestamp or headers (which a purge's report does
 *     not give back) when ``reported`` is set (the client has a configured
 *     on_delivery: the report reaches Python anyway); without it such a call has no
 *     delivery callback at all: its purge report would be dropped by librdkafka,
 *     so a record would cost a report per delivery for nothing;
 *   - a call it cannot read (an unknown keyword, too many arguments): the fallback's
 *     errors are Python's.
 * A plain call (at most topic, value, key) and the calls not recorded go to
 * ``target``: untouched when given by position, else the same call by position
 * (confluent-kafka reads a keyword by making and hashing a str per name it tries:
 * by position, about 400-600 ns less per call). A recorded call read here goes to
 * the RecordingSend's recorded call directly (read once). */

/* in _pending.c (see there) */
int kbear_produce_args(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, PyObject **p);
PyObject *kbear_produce_positional(PyObject *produce, PyObject *const *p, PyObject *record);
int kbear_is_recording_send(PyObject *send);
PyObject *kbear_record_call(PyObject *send, PyObject *const *p);

/* produce()'s parameters, in positional order (as in _pending.c) */
enum { A_TOPIC, A_VALUE, A_KEY, A_PARTITION, A_CALLBACK, A_ON_DELIVERY, A_TIMESTAMP, A_HEADERS, A_COUNT };

static PyObject *
plain_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    PlainCall *self = (PlainCall *)op;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *p[A_COUNT];
    int own, extra; /* a callback of its own; a partition, a timestamp or headers */

    if (self->target == NULL || self->fallback == NULL) {
        PyErr_SetString(PyExc_ReferenceError, "kbear plain call already cleared");
        return NULL;
    }
    if (kwnames == NULL && nargs <= 3 && !self->record) {
        return PyObject_Vectorcall(self->target, args, nargsf, NULL); /* plain, by position */
    }
    if (kbear_produce_args(args, nargs, kwnames, p) < 0) {
        goto fallback; /* (its errors are Python's) */
    }
    own = (p[A_CALLBACK] != NULL && p[A_CALLBACK] != Py_None) ||
          (p[A_ON_DELIVERY] != NULL && p[A_ON_DELIVERY] != Py_None);
    extra = p[A_PARTITION] != NULL || p[A_TIMESTAMP] != NULL || p[A_HEADERS] != NULL;
    if (self->record || own || (extra && self->reported)) {
        if (kbear_is_recording_send(self->fallback)) {
            return kbear_record_call(self->fallback, p); /* (read once) */
        }
        goto fallback;
    }
    if (kwnames == NULL) {
        return PyObject_Vectorcall(self->target, args, nargsf, NULL);
    }
    /* keywords: the same call by position (confluent-kafka reads keywords slowly) */
    return kbear_produce_positional(self->target, p, NULL);
fallback:
    return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
}

static PyObject *
plain_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"target", "fallback", "reported", NULL};
    PyObject *target, *fallback;
    int reported = 0;
    PlainCall *self;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|p:PlainCall", kwlist, &target, &fallback, &reported)) {
        return NULL;
    }
    if (!PyCallable_Check(target) || !PyCallable_Check(fallback)) {
        PyErr_SetString(PyExc_TypeError, "PlainCall: target and fallback must be callable");
        return NULL;
    }
    self = (PlainCall *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    Py_INCREF(target);
    self->target = target;
    Py_INCREF(fallback);
    self->fallback = fallback;
    self->vectorcall = plain_vectorcall;
    self->reported = (char)reported;
    return (PyObject *)self;
}

static int
plain_traverse(PlainCall *self, visitproc visit, void *arg)
{
    Py_VISIT(self->target);
    Py_VISIT(self->fallback);
    return 0;
}

static int
plain_clear(PlainCall *self)
{
    Py_CLEAR(self->target);
    Py_CLEAR(self->fallback);
    return 0;
}

static void
plain_dealloc(PlainCall *self)
{
    PyObject_GC_UnTrack(self);
    plain_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef plain_members[] = {
    {"target", T_OBJECT, offsetof(PlainCall, target), READONLY, "the client's produce (plain calls)"},
    {"fallback", T_OBJECT, offsetof(PlainCall, fallback), READONLY, "every other call"},
    {"record", T_BOOL, offsetof(PlainCall, record), 0, "every call to fallback (a cluster suspected lost)"},
    {"reported", T_BOOL, offsetof(PlainCall, reported), READONLY, "the client has a configured on_delivery"},
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(PlainCall, vectorcall), READONLY, NULL},
    {NULL},
};

static PyTypeObject PlainCallType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kbear._cdispatch.PlainCall",
    .tp_basicsize = sizeof(PlainCall),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = plain_new,
    .tp_dealloc = (destructor)plain_dealloc,
    .tp_traverse = (traverseproc)plain_traverse,
    .tp_clear = (inquiry)plain_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(PlainCall, vectorcall),
    .tp_members = plain_members,
};

/* A PlainCall's record flag (1/0), or -1 when ``call`` is no PlainCall (for _pending.c). */
int
kbear_plain_record(PyObject *call)
{
    if (Py_TYPE(call) != &PlainCallType) {
        return -1;
    }
    return ((PlainCall *)call)->record ? 1 : 0;
}

/* _pending.c: adds Pending and RecordingSend to the module */
int kbear_pending_init(PyObject *module);
int kbear_counted_init(PyObject *module); /* kbear/_counted.c */

static struct PyModuleDef cdispatch_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "kbear._cdispatch",
    .m_doc = "Compiled produce() / poll() / consume() of kbear's routed clients over several clusters.",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__cdispatch(void)
{
    PyObject *module;

    topic_name = PyUnicode_InternFromString("topic");
    timeout_name = PyUnicode_InternFromString("timeout");
    num_name = PyUnicode_InternFromString("num_messages");
    zero = PyLong_FromLong(0);
    if (topic_name == NULL || timeout_name == NULL || num_name == NULL || zero == NULL) {
        return NULL;
    }
    if (PyType_Ready(&DispatcherType) < 0 || PyType_Ready(&TurnTakerType) < 0 ||
        PyType_Ready(&FastMethodType) < 0 || PyType_Ready(&PlainCallType) < 0) {
        return NULL;
    }
    module = PyModule_Create(&cdispatch_module);
    if (module == NULL) {
        return NULL;
    }
    Py_INCREF(&DispatcherType);
    if (PyModule_AddObject(module, "Dispatcher", (PyObject *)&DispatcherType) < 0) {
        Py_DECREF(&DispatcherType);
        Py_DECREF(module);
        return NULL;
    }
    Py_INCREF(&TurnTakerType);
    if (PyModule_AddObject(module, "TurnTaker", (PyObject *)&TurnTakerType) < 0) {
        Py_DECREF(&TurnTakerType);
        Py_DECREF(module);
        return NULL;
    }
    Py_INCREF(&FastMethodType);
    if (PyModule_AddObject(module, "FastMethod", (PyObject *)&FastMethodType) < 0) {
        Py_DECREF(&FastMethodType);
        Py_DECREF(module);
        return NULL;
    }
    Py_INCREF(&PlainCallType);
    if (PyModule_AddObject(module, "PlainCall", (PyObject *)&PlainCallType) < 0) {
        Py_DECREF(&PlainCallType);
        Py_DECREF(module);
        return NULL;
    }
    if (kbear_pending_init(module) < 0 || kbear_counted_init(module) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
