/* kbear._cdispatch.Counted: a consumer's poll() or consume() that counts, per topic,
 * the messages it returns to the application (kbear_consumer_messages_total, see
 * kbear/metrics/_delivered.py, whose pure-Python CountingConsumer does the same).
 *
 * ``Counted(target, counts)`` calls ``target`` with the arguments it is given,
 * untouched, and returns its answer, untouched; on the way, each message of the
 * answer (one message, or a list of them; None: none) that carries no error adds one
 * to ``counts[msg.topic()]``. ``counts`` is a dict the metrics collector copies:
 * it is only ever changed here with the GIL held (no Python code runs between the
 * read and the write of an entry), so no lock is needed. A Python frame per call
 * cost poll() about 0.6 us of the calling thread's CPU per message (one cluster,
 * librdkafka's mock: 0.7 us without counting, 1.35 us with the Python wrapper). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

typedef struct {
    PyObject_HEAD
    PyObject *target;
    PyObject *counts;
    vectorcallfunc vectorcall;
} Counted;

static PyObject *error_name, *topic_name_c, *one;

/* Count ``msg`` in ``counts`` when it carries no error; -1 with an exception set on failure. */
static int
count_one(PyObject *counts, PyObject *msg)
{
    PyObject *err, *topic, *old, *new;
    int rc;

    if (msg == Py_None) {
        return 0;
    }
    err = PyObject_CallMethodNoArgs(msg, error_name);
    if (err == NULL) {
        return -1;
    }
    if (err != Py_None) {
        Py_DECREF(err);
        return 0; /* an error event is no message */
    }
    Py_DECREF(err);
    topic = PyObject_CallMethodNoArgs(msg, topic_name_c);
    if (topic == NULL) {
        return -1;
    }
    old = PyDict_GetItemWithError(counts, topic); /* borrowed */
    if (old == NULL && PyErr_Occurred()) {
        Py_DECREF(topic);
        return -1;
    }
    new = old == NULL ? Py_NewRef(one) : PyNumber_Add(old, one);
    if (new == NULL) {
        Py_DECREF(topic);
        return -1;
    }
    rc = PyDict_SetItem(counts, topic, new);
    Py_DECREF(new);
    Py_DECREF(topic);
    return rc;
}

static PyObject *
counted_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Counted *self = (Counted *)op;
    PyObject *answer;

    if (self->target == NULL || self->counts == NULL) {
        PyErr_SetString(PyExc_ReferenceError, "kbear counted call already cleared");
        return NULL;
    }
    answer = PyObject_Vectorcall(self->target, args, nargsf, kwnames);
    if (answer == NULL || answer == Py_None) {
        return answer;
    }
    if (PyList_CheckExact(answer)) {
        Py_ssize_t n = PyList_GET_SIZE(answer);
        for (Py_ssize_t i = 0; i < n; i++) {
            if (count_one(self->counts, PyList_GET_ITEM(answer, i)) < 0) {
                Py_DECREF(answer);
                return NULL;
            }
        }
    } else if (count_one(self->counts, answer) < 0) {
        Py_DECREF(answer);
        return NULL;
    }
    return answer;
}

static int
counted_init(PyObject *op, PyObject *args, PyObject *kwds)
{
    Counted *self = (Counted *)op;
    static char *kwlist[] = {"target", "counts", NULL};
    PyObject *target, *counts;

    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO!:Counted", kwlist, &target, &PyDict_Type, &counts)) {
        return -1;
    }
    if (!PyCallable_Check(target)) {
        PyErr_SetString(PyExc_TypeError, "Counted: target must be callable");
        return -1;
    }
    Py_INCREF(target);
    Py_XSETREF(self->target, target);
    Py_INCREF(counts);
    Py_XSETREF(self->counts, counts);
    self->vectorcall = counted_vectorcall;
    return 0;
}

static int
counted_traverse(PyObject *op, visitproc visit, void *arg)
{
    Counted *self = (Counted *)op;
    Py_VISIT(self->target);
    Py_VISIT(self->counts);
    return 0;
}

static int
counted_clear(PyObject *op)
{
    Counted *self = (Counted *)op;
    Py_CLEAR(self->target);
    Py_CLEAR(self->counts);
    return 0;
}

static void
counted_dealloc(PyObject *op)
{
    PyObject_GC_UnTrack(op);
    counted_clear(op);
    Py_TYPE(op)->tp_free(op);
}

static PyMemberDef counted_members[] = {
    {"target", T_OBJECT, offsetof(Counted, target), READONLY, "the method counted"},
    {"counts", T_OBJECT, offsetof(Counted, counts), READONLY, "topic -> messages returned"},
    {NULL},
};

static PyTypeObject CountedType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kbear._cdispatch.Counted",
    .tp_doc = "poll()/consume() of a consumer, counting the messages it returns per topic.",
    .tp_basicsize = sizeof(Counted),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = PyType_GenericNew,
    .tp_init = counted_init,
    .tp_dealloc = counted_dealloc,
    .tp_traverse = counted_traverse,
    .tp_clear = counted_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Counted, vectorcall),
    .tp_members = counted_members,
};

/* Adds ``Counted`` to the module; called by PyInit__cdispatch (kbear/_dispatch.c). */
int
kbear_counted_init(PyObject *module)
{
    error_name = PyUnicode_InternFromString("error");
    topic_name_c = PyUnicode_InternFromString("topic");
    one = PyLong_FromLong(1);
    if (error_name == NULL || topic_name_c == NULL || one == NULL || PyType_Ready(&CountedType) < 0) {
        return -1;
    }
    Py_INCREF(&CountedType);
    if (PyModule_AddObject(module, "Counted", (PyObject *)&CountedType) < 0) {
        Py_DECREF(&CountedType);
        return -1;
    }
    return 0;
}
