/* kbear._cdispatch: RoutedProducer.produce() over several clusters, in C.
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
            result = PyObject_Vectorcall(target, args, nargsf, kwnames);
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

static struct PyModuleDef cdispatch_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "kbear._cdispatch",
    .m_doc = "Compiled produce() dispatch of kbear.RoutedProducer over several clusters.",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__cdispatch(void)
{
    PyObject *module;

    topic_name = PyUnicode_InternFromString("topic");
    if (topic_name == NULL) {
        return NULL;
    }
    if (PyType_Ready(&DispatcherType) < 0) {
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
    return module;
}
