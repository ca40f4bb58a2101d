/* lens_rl.record._speedups: the C entry point of traced_phase (optional; lens_rl/record/_impl.py chooses).
 *
 * Why: with telemetry off, `with traced_phase("x"):` must cost a few tens of
 * nanoseconds. A Python function taking **rl_attributes costs more than that on its
 * own (CPython builds a kwargs dict on every call). This function answers the two
 * hot shapes without that dict, and hands every other call, unchanged, to the
 * pure-Python implementation, which stays the one source of the semantics:
 *
 *   traced_phase(name)              -> the cached Phase for name (a dict lookup)
 *   traced_phase(name, **kwargs)    -> while on, the Phase kept for these arguments
 *                                      (made by the Python implementation on a miss);
 *                                      while off, a lazy record of (name, kwargs);
 *                                      the name a str not starting with white space,
 *                                      the step an int within int64 or None,
 *                                      the bucket a Bucket member, a canonical bucket
 *                                      string (replaced by its member) or None,
 *                                      `parent` / `attributes` a dict or None
 *                                      (anything else, and the staleness keywords
 *                                      `trajectory_versions`, `trajectory_tokens`,
 *                                      `policy_version`, `max_staleness`: the Python
 *                                      path validates)
 *   anything else                   -> the Python implementation
 *
 * The on/off flag is read from the one runtime object (`lens_rl._runtime.RUNTIME.on`).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <structmember.h>

/* Set once by configure() (see below); ScopeBase reads them on every `with`. */
static PyObject *runtime = NULL;
static Py_ssize_t runtime_on_offset = -1;      /* where the `on` slot lives in the runtime object */
static Py_ssize_t runtime_stacked_offset = -1; /* where the `stacked` slot lives */
static PyObject *noop_span = NULL;
static PyObject *str_on = NULL;
static PyObject *str_stacked = NULL;
static PyObject *str_enter_on = NULL;
static PyObject *str_exit_on = NULL;

/* A runtime flag (borrowed; NULL with no error set when it cannot be read). */
static PyObject *
runtime_flag(Py_ssize_t offset, PyObject *name)
{
    if (runtime == NULL) {
        return NULL;
    }
    if (offset >= 0) {
        return *(PyObject **)((char *)runtime + offset);
    }
    PyObject *value = PyObject_GetAttr(runtime, name);
    if (value == NULL) {
        PyErr_Clear();
        return NULL;
    }
    Py_DECREF(value); /* only its identity with True / False is compared */
    return value;
}

/* ScopeBase: `with` for phases. While telemetry is off, `__enter__` returns the no-op
 * span and `__exit__` does nothing, without a Python frame; otherwise they call the
 * subclass's `_enter_on()` / `_exit_on(exc)`, where every decision is made. */
static PyObject *
Scope_enter(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *on = runtime_flag(runtime_on_offset, str_on);
    if (on == Py_False && noop_span != NULL) {
        Py_INCREF(noop_span);
        return noop_span;
    }
    return PyObject_CallMethodNoArgs(self, str_enter_on);
}

static PyObject *
Scope_exit(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *stacked = runtime_flag(runtime_stacked_offset, str_stacked);
    if (stacked == Py_False) {
        Py_RETURN_NONE;
    }
    PyObject *exc = nargs >= 2 ? args[1] : Py_None;
    PyObject *result = PyObject_CallMethodOneArg(self, str_exit_on, exc);
    if (result == NULL) {
        return NULL;
    }
    Py_DECREF(result);
    Py_RETURN_NONE; /* never swallows the block's exception */
}

static PyMethodDef Scope_methods[] = {
    {"__enter__", (PyCFunction)Scope_enter, METH_NOARGS, "Enter the phase (the no-op span while off)."},
    {"__exit__", (PyCFunction)(void (*)(void))Scope_exit, METH_FASTCALL, "Close what this object's entry opened."},
    {NULL},
};

static PyTypeObject ScopeBaseType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "lens_rl.record._speedups.ScopeBase",
    .tp_doc = "The `with` protocol of phases (decisions live in the Python subclass).",
    .tp_basicsize = sizeof(PyObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_new = PyType_GenericNew,
    .tp_methods = Scope_methods,
};

/* The keyword arguments are kept as the call site's names tuple plus a tuple of the
 * values; the dict is built only when someone reads `kwargs` (the cold path). */
typedef struct {
    PyObject_HEAD
    PyObject *name;
    PyObject *kwnames;
    PyObject *values;
    PyObject *kwargs;
    PyObject *phase;
} LazyObject;

static int
Lazy_traverse(LazyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->name);
    Py_VISIT(self->kwnames);
    Py_VISIT(self->values);
    Py_VISIT(self->kwargs);
    Py_VISIT(self->phase);
    return 0;
}

static int
Lazy_clear(LazyObject *self)
{
    Py_CLEAR(self->name);
    Py_CLEAR(self->kwnames);
    Py_CLEAR(self->values);
    Py_CLEAR(self->kwargs);
    Py_CLEAR(self->phase);
    return 0;
}

static PyObject *
Lazy_get_kwargs(LazyObject *self, void *closure)
{
    if (self->kwargs == NULL) {
        PyObject *kwargs = PyDict_New();
        if (kwargs == NULL) {
            return NULL;
        }
        if (self->kwnames != NULL && self->values != NULL) {
            for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(self->kwnames); i++) {
                if (PyDict_SetItem(kwargs, PyTuple_GET_ITEM(self->kwnames, i), PyTuple_GET_ITEM(self->values, i)) < 0) {
                    Py_DECREF(kwargs);
                    return NULL;
                }
            }
        }
        self->kwargs = kwargs;
    }
    Py_INCREF(self->kwargs);
    return self->kwargs;
}

static int
Lazy_set_kwargs(LazyObject *self, PyObject *value, void *closure)
{
    Py_XINCREF(value);
    Py_XSETREF(self->kwargs, value);
    Py_CLEAR(self->kwnames);
    Py_CLEAR(self->values);
    return 0;
}

static PyGetSetDef Lazy_getset[] = {
    {"kwargs", (getter)Lazy_get_kwargs, (setter)Lazy_set_kwargs, "the keyword arguments, unprocessed", NULL},
    {NULL},
};

static void
Lazy_dealloc(LazyObject *self)
{
    PyObject_GC_UnTrack(self);
    Lazy_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef Lazy_members[] = {
    {"name", T_OBJECT, offsetof(LazyObject, name), 0, "the phase name"},
    {"phase", T_OBJECT, offsetof(LazyObject, phase), 0, "the materialised Phase, once entered while on"},
    {NULL},
};

static PyTypeObject LazyBaseType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "lens_rl.record._speedups.LazyBase",
    .tp_doc = "Storage for a lazily made phase (methods live in the Python subclass).",
    .tp_basicsize = sizeof(LazyObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_traverse = (traverseproc)Lazy_traverse,
    .tp_clear = (inquiry)Lazy_clear,
    .tp_dealloc = (destructor)Lazy_dealloc,
    .tp_members = Lazy_members,
    .tp_getset = Lazy_getset,
    .tp_base = &ScopeBaseType,
};

/* Set once by configure(): the phase cache, the Python implementation, the lazy
 * subclass, the Bucket type, and the dict holding the hot-path flag `_ON`. */
static PyObject *cache = NULL;
static PyObject *slow = NULL;
static PyObject *lazy_type = NULL;
static PyObject *bucket_type = NULL;
static PyObject *bucket_by_value = NULL;
static PyObject *str_bucket = NULL;
static PyObject *str_parent = NULL;
static PyObject *str_attributes = NULL;
static PyObject *str_step = NULL;
/* traced_phase's staleness keywords (lens_rl.record.consumed.KEYWORDS): checked in Python, on and off */
static PyObject *str_consumed[4] = {NULL, NULL, NULL, NULL};
static PyObject *key_marker = NULL; /* starts a keyword phase's key in the cache (lens_rl.record.phases's) */

/* The offset of a slot of `obj`'s type named `name`, or -1 (then it is read by attribute). */
static Py_ssize_t
slot_offset(PyObject *obj, PyObject *name)
{
    Py_ssize_t offset = -1;
    PyObject *descr = PyObject_GetAttr((PyObject *)Py_TYPE(obj), name);
    if (descr == NULL) {
        PyErr_Clear();
        return -1;
    }
    if (Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
        PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
        if (member->type == T_OBJECT_EX || member->type == T_OBJECT) {
            offset = member->offset;
        }
    }
    Py_DECREF(descr);
    return offset;
}

static PyObject *
configure(PyObject *module, PyObject *args)
{
    PyObject *c, *s, *l, *b, *f, *v, *n, *k;
    if (!PyArg_ParseTuple(args, "O!OO!O!OO!OO:configure", &PyDict_Type, &c, &s, &PyType_Type, &l, &PyType_Type, &b,
                          &f, &PyDict_Type, &v, &n, &k)) {
        return NULL;
    }
    if (!PyType_IsSubtype((PyTypeObject *)l, &LazyBaseType)) {
        PyErr_SetString(PyExc_TypeError, "configure: the lazy type must subclass LazyBase");
        return NULL;
    }
    Py_INCREF(c);
    Py_INCREF(s);
    Py_INCREF(l);
    Py_INCREF(b);
    Py_INCREF(f);
    Py_INCREF(v);
    Py_INCREF(n);
    Py_INCREF(k);
    Py_XSETREF(key_marker, k);
    Py_XSETREF(noop_span, n);
    Py_XSETREF(cache, c);
    Py_XSETREF(slow, s);
    Py_XSETREF(lazy_type, l);
    Py_XSETREF(bucket_type, b);
    Py_XSETREF(runtime, f);
    Py_XSETREF(bucket_by_value, v);
    runtime_on_offset = slot_offset(f, str_on);
    runtime_stacked_offset = slot_offset(f, str_stacked);
    Py_RETURN_NONE;
}

/* Put `value` at `*at` of `key` as three items: `name`, `value`, its type (1, 1.0 and True are equal and hash
 * alike, but record apart). */
static void
put_triple(PyObject *key, Py_ssize_t *at, PyObject *name, PyObject *value)
{
    Py_INCREF(name);
    PyTuple_SET_ITEM(key, (*at)++, name);
    Py_INCREF(value);
    PyTuple_SET_ITEM(key, (*at)++, value);
    Py_INCREF((PyObject *)Py_TYPE(value));
    PyTuple_SET_ITEM(key, (*at)++, (PyObject *)Py_TYPE(value));
}

/* traced_phase(name, **kwargs) while on: the Phase made once per distinct arguments, kept in the phase cache
 * under a flat key (marker, name, then name / value / type of each keyword, an `attributes` dict's items the
 * same way after the marker again): the very key lens_rl.record.phases builds, so one call shape is one
 * entry whichever implementation met it. On a miss the Python implementation makes (and keeps) it, and
 * decides every case this does not answer: an unhashable value, a keyword built at run time. */
/* A value whose hash would cost in proportion to its size: text or bytes past the attribute cap (4096
 * characters, lens_rl._attributes.MAX_VALUE_CHARS). A call with one is never keyed: the Python path makes its
 * phase each time, capping the value first (SPEC: coercing any value takes bounded time). */
#define MAX_KEY_CHARS 4096
/* A tuple or list of more items (lens_rl.record.phases.MAX_KEY_ITEMS): a batch would stay alive in the key. */
#define MAX_KEY_ITEMS 64
static int
too_long(PyObject *value)
{
    return (PyUnicode_CheckExact(value) && PyUnicode_GET_LENGTH(value) > MAX_KEY_CHARS) ||
           (PyBytes_CheckExact(value) && PyBytes_GET_SIZE(value) > MAX_KEY_CHARS) ||
           (PyTuple_Check(value) && PyTuple_GET_SIZE(value) > MAX_KEY_ITEMS) ||
           (PyList_Check(value) && PyList_GET_SIZE(value) > MAX_KEY_ITEMS);
}

static PyObject *
keyword_phase_on(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, Py_ssize_t nkw)
{
    PyObject *attributes = NULL;
    Py_ssize_t attributes_at = -1;
    Py_ssize_t size = 2 + 3 * nkw;
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *value = args[nargs + i];
        PyObject *kw = PyTuple_GET_ITEM(kwnames, i);
        if (too_long(value) || kw == str_consumed[0] || kw == str_consumed[1] || kw == str_consumed[2] ||
            kw == str_consumed[3]) { /* what a phase consumed: never keyed (the Python path makes it each time) */
            return PyObject_Vectorcall(slow, args, nargs, kwnames);
        }
        if (PyTuple_GET_ITEM(kwnames, i) == str_attributes && PyDict_CheckExact(value)) {
            attributes = value;
            attributes_at = i;
            size += 1 + 3 * PyDict_GET_SIZE(attributes) - 3;
            PyObject *k, *v;
            Py_ssize_t pos = 0;
            while (PyDict_Next(attributes, &pos, &k, &v)) {
                if (too_long(v) || too_long(k)) {
                    return PyObject_Vectorcall(slow, args, nargs, kwnames);
                }
            }
        }
    }
    PyObject *key = PyTuple_New(size);
    if (key == NULL) {
        return NULL;
    }
    Py_ssize_t at = 0;
    Py_INCREF(key_marker);
    PyTuple_SET_ITEM(key, at++, key_marker);
    Py_INCREF(args[0]);
    PyTuple_SET_ITEM(key, at++, args[0]);
    for (Py_ssize_t i = 0; i < nkw; i++) {
        if (i != attributes_at) {
            put_triple(key, &at, PyTuple_GET_ITEM(kwnames, i), args[nargs + i]);
        }
    }
    if (attributes != NULL) {
        Py_INCREF(key_marker);
        PyTuple_SET_ITEM(key, at++, key_marker);
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        while (PyDict_Next(attributes, &pos, &k, &v) && at + 3 <= size) {
            put_triple(key, &at, k, v);
        }
    }
    if (at != size) { /* (cannot happen: filled from what was counted) */
        Py_DECREF(key);
        return PyObject_Vectorcall(slow, args, nargs, kwnames);
    }
    PyObject *hit = PyDict_GetItemWithError(cache, key);
    if (hit != NULL) {
        Py_DECREF(key);
        Py_INCREF(hit);
        return hit;
    }
    if (PyErr_Occurred()) { /* an unhashable value: made each time, by the Python path */
        PyErr_Clear();
        Py_DECREF(key);
        return PyObject_Vectorcall(slow, args, nargs, kwnames);
    }
    Py_DECREF(key);
    return PyObject_Vectorcall(slow, args, nargs, kwnames); /* it keeps the Phase under this same key */
}

static PyObject *
traced_phase(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    if (slow == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "lens_rl.record._speedups is not configured");
        return NULL;
    }
    if (nargs != 1) {
        return PyObject_Vectorcall(slow, args, nargs, kwnames);
    }
    if (nkw == 0) {
        PyObject *hit = PyDict_GetItemWithError(cache, args[0]);
        if (hit != NULL) {
            Py_INCREF(hit);
            return hit;
        }
        PyErr_Clear(); /* a miss or an unhashable name: the Python path decides */
        return PyObject_Vectorcall(slow, args, nargs, NULL);
    }
    PyObject *on = runtime_flag(runtime_on_offset, str_on);
    if (on == Py_True) {
        return keyword_phase_on(args, nargs, kwnames, nkw);
    }
    if (on != Py_False) {
        return PyObject_Vectorcall(slow, args, nargs, kwnames);
    }
    PyObject *name = args[0];
    if (!PyUnicode_CheckExact(name) || PyUnicode_GET_LENGTH(name) == 0 ||
        Py_UNICODE_ISSPACE(PyUnicode_READ_CHAR(name, 0))) {
        return PyObject_Vectorcall(slow, args, nargs, kwnames); /* validated (and refused) in Python */
    }
    PyObject *values = PyTuple_New(nkw);
    if (values == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, i);
        PyObject *value = args[nargs + i];
        if (!PyUnicode_CHECK_INTERNED(key)) {
            Py_DECREF(values); /* a key built at run time: compare it the slow way, in Python */
            return PyObject_Vectorcall(slow, args, nargs, kwnames);
        }
        if (key == str_bucket) { /* keyword names are interned: identity is equality */
            if (value != Py_None && (PyObject *)Py_TYPE(value) != bucket_type) {
                PyObject *member = PyUnicode_CheckExact(value) ? PyDict_GetItemWithError(bucket_by_value, value) : NULL;
                if (member == NULL) {
                    PyErr_Clear();
                    Py_DECREF(values); /* not canonical, or not a bucket: validated by the Python path */
                    return PyObject_Vectorcall(slow, args, nargs, kwnames);
                }
                value = member; /* borrowed from the dict, which lives as long as the module */
            }
        }
        else if (key == str_step) { /* an int within int64, or None; anything else: checked in Python */
            if (value != Py_None) {
                int overflow = 0;
                if (!PyLong_CheckExact(value) || (PyLong_AsLongLongAndOverflow(value, &overflow), overflow != 0)) {
                    Py_DECREF(values);
                    return PyObject_Vectorcall(slow, args, nargs, kwnames);
                }
            }
        }
        else if (key == str_parent || key == str_attributes) {
            if (value != Py_None && !PyDict_Check(value)) {
                Py_DECREF(values); /* validated (and refused, or accepted as a Mapping) in Python */
                return PyObject_Vectorcall(slow, args, nargs, kwnames);
            }
        }
        else if (key == str_consumed[0] || key == str_consumed[1] || key == str_consumed[2] ||
                 key == str_consumed[3]) {
            Py_DECREF(values); /* what a training phase consumed: checked by the Python path */
            return PyObject_Vectorcall(slow, args, nargs, kwnames);
        }
        Py_INCREF(value);
        PyTuple_SET_ITEM(values, i, value);
    }
    LazyObject *lazy = (LazyObject *)((PyTypeObject *)lazy_type)->tp_alloc((PyTypeObject *)lazy_type, 0);
    if (lazy == NULL) {
        Py_DECREF(values);
        return NULL;
    }
    Py_INCREF(args[0]);
    lazy->name = args[0];
    Py_INCREF(kwnames);
    lazy->kwnames = kwnames;
    lazy->values = values;
    return (PyObject *)lazy;
}

/* Replaced at configure time by set_doc(): the one docstring is the Python implementation's. */
PyDoc_STRVAR(traced_phase_doc,
             "traced_phase(name, /, *, bucket=None, parent=None, attributes=None, **rl_attributes)\n--\n\n"
             "A training phase (C entry point of lens_rl.record.phases.traced_phase).");

static PyObject *set_doc(PyObject *module, PyObject *doc);

static PyMethodDef speedups_methods[] = {
    {"traced_phase", (PyCFunction)(void (*)(void))traced_phase, METH_FASTCALL | METH_KEYWORDS, traced_phase_doc},
    {"configure", configure, METH_VARARGS,
     "Set the cache, fallback, lazy type, Bucket type, runtime, bucket-by-value dict, no-op span and key marker."},
    {"set_doc", set_doc, METH_O, "Make str doc traced_phase's docstring (its first line the text signature)."},
    {NULL, NULL, 0, NULL},
};

/* The docstring traced_phase shows: kept alive here, read through its method table entry on each access. */
static PyObject *doc_text = NULL;

static PyObject *
set_doc(PyObject *module, PyObject *doc)
{
    const char *text = PyUnicode_AsUTF8(doc);
    if (text == NULL) {
        return NULL;
    }
    Py_INCREF(doc);
    Py_XSETREF(doc_text, doc);
    speedups_methods[0].ml_doc = text;
    Py_RETURN_NONE;
}

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT, "lens_rl.record._speedups", "C accelerator for lens_rl's hot path.", -1, speedups_methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    if (PyType_Ready(&ScopeBaseType) < 0 || PyType_Ready(&LazyBaseType) < 0) {
        return NULL;
    }
    str_bucket = PyUnicode_InternFromString("bucket");
    str_step = PyUnicode_InternFromString("step");
    str_parent = PyUnicode_InternFromString("parent");
    str_attributes = PyUnicode_InternFromString("attributes");
    str_consumed[0] = PyUnicode_InternFromString("trajectory_versions");
    str_consumed[1] = PyUnicode_InternFromString("trajectory_tokens");
    str_consumed[2] = PyUnicode_InternFromString("policy_version");
    str_consumed[3] = PyUnicode_InternFromString("max_staleness");
    str_on = PyUnicode_InternFromString("on");
    str_stacked = PyUnicode_InternFromString("stacked");
    str_enter_on = PyUnicode_InternFromString("_enter_on");
    str_exit_on = PyUnicode_InternFromString("_exit_on");
    if (str_bucket == NULL || str_step == NULL || str_parent == NULL || str_attributes == NULL || str_on == NULL || str_stacked == NULL ||
        str_enter_on == NULL || str_exit_on == NULL || str_consumed[0] == NULL || str_consumed[1] == NULL ||
        str_consumed[2] == NULL || str_consumed[3] == NULL) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&speedups_module);
    if (m == NULL) {
        return NULL;
    }
    Py_INCREF(&LazyBaseType);
    if (PyModule_AddObject(m, "LazyBase", (PyObject *)&LazyBaseType) < 0) {
        Py_DECREF(&LazyBaseType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&ScopeBaseType);
    if (PyModule_AddObject(m, "ScopeBase", (PyObject *)&ScopeBaseType) < 0) {
        Py_DECREF(&ScopeBaseType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
