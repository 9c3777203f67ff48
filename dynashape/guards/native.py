"""Watching dicts for change in a few nanoseconds: the module checks of a guard run only when one changed.

A guard re-checks every module's structure and plain attributes on each call: objects can change
without `Module.__setattr__` (`m._parameters[k] = p` as `torch.func.functional_call` does,
`Sequential.append`, `m.__dict__[k] = v`), so the module epoch cannot tell. But every such
change writes one of a few dicts (a module's `__dict__`, its `_parameters`, `_buffers`,
`_modules` and hook dicts), and CPython gives every dict a version tag that a write moves to a
new, process-unique value (PEP 509). `Watch(dicts)` compares those tags with the ones recorded
when the checks last passed, in C, for about 3 ns a dict:

    w = watch((vars(m), m._parameters))
    if not w():             # some dict changed since the last commit (or none was made yet)
        snap = w.snap()     # the tags before the checks read the dicts
        ...                 # the checks; on failure, no commit
        w.commit(snap)

The tag is not reachable from Python, so a small extension is built once with the system C
compiler and kept on disk (named by a hash of its source and the Python build). Where that
cannot happen (no compiler, no Python headers, a Python whose dicts lack the tag), `watch()`
returns a stand-in that always answers "changed": the checks then run on every call, as before.
"""
from __future__ import annotations

import collections
import hashlib
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading

log = logging.getLogger("dynashape.guards")

SOURCE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#if PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030D0000 || defined(Py_GIL_DISABLED)
#error "dict version tags are read only on CPython 3.11 and 3.12 with the GIL"
#endif

typedef struct {
    PyObject_HEAD
    PyObject *dicts;    /* tuple of dicts (an OrderedDict's reordering alone moves no tag) */
    PyObject *owners;   /* tuple of objects whose __dict__ must still be the dict given with them */
    PyObject *owned;    /* those dicts */
    PyObject *types;    /* the owners' classes (`m.__class__ = Other` writes no dict either) */
    uint64_t *tags;     /* the dicts' tags at the last commit */
    Py_ssize_t n;
    int valid;          /* a commit was made */
} Watch;

static inline uint64_t tag_of(PyObject *d) {
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif
    return ((PyDictObject *)d)->ma_version_tag;
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
}

static PyObject *watch_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    PyObject *dicts, *owners = NULL, *owned = NULL;
    if (!PyArg_ParseTuple(args, "O!|O!O!:Watch", &PyTuple_Type, &dicts, &PyTuple_Type, &owners,
                          &PyTuple_Type, &owned)) return NULL;
    if (owners == NULL) owners = owned = PyTuple_New(0);
    else if (owned == NULL || PyTuple_GET_SIZE(owned) != PyTuple_GET_SIZE(owners)) {
        PyErr_SetString(PyExc_ValueError, "Watch(dicts, owners, their dicts)");
        return NULL;
    }
    else { Py_INCREF(owners); Py_INCREF(owned); }
    if (owners == NULL) return NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(owners); i++) {
        PyObject **slot = _PyObject_GetDictPtr(PyTuple_GET_ITEM(owners, i));
        if (slot == NULL || *slot != PyTuple_GET_ITEM(owned, i)) {
            Py_DECREF(owners); Py_DECREF(owned);
            PyErr_SetString(PyExc_ValueError, "an owner's __dict__ is not the dict given with it");
            return NULL;
        }
    }
    Py_ssize_t n = PyTuple_GET_SIZE(dicts);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyDict_Check(PyTuple_GET_ITEM(dicts, i))) {
            Py_DECREF(owners); Py_DECREF(owned);
            PyErr_SetString(PyExc_TypeError, "Watch takes a tuple of dicts");
            return NULL;
        }
    }
    PyObject *types = PyTuple_New(PyTuple_GET_SIZE(owners));
    if (types == NULL) { Py_DECREF(owners); Py_DECREF(owned); return NULL; }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(owners); i++) {
        PyObject *t = (PyObject *)Py_TYPE(PyTuple_GET_ITEM(owners, i));
        Py_INCREF(t);
        PyTuple_SET_ITEM(types, i, t);
    }
    Watch *self = (Watch *)type->tp_alloc(type, 0);
    if (self == NULL) { Py_DECREF(owners); Py_DECREF(owned); Py_DECREF(types); return NULL; }
    self->owners = owners;
    self->owned = owned;
    self->types = types;
    self->tags = (uint64_t *)PyMem_Calloc(n ? n : 1, sizeof(uint64_t));
    if (self->tags == NULL) { Py_DECREF(self); return PyErr_NoMemory(); }
    Py_INCREF(dicts);
    self->dicts = dicts;
    self->n = n;
    self->valid = 0;
    return (PyObject *)self;
}

static int watch_traverse(Watch *self, visitproc visit, void *arg) {
    Py_VISIT(self->dicts);
    Py_VISIT(self->owners);
    Py_VISIT(self->owned);
    Py_VISIT(self->types);
    return 0;
}

static int watch_clear(Watch *self) {
    Py_CLEAR(self->dicts);
    Py_CLEAR(self->owners);
    Py_CLEAR(self->owned);
    Py_CLEAR(self->types);
    self->n = 0;
    self->valid = 0;
    return 0;
}

static void watch_dealloc(Watch *self) {
    PyObject_GC_UnTrack(self);
    watch_clear(self);
    PyMem_Free(self->tags);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* w() -> True when no dict changed since the last commit and every owner still has its dict
   (`m.__dict__ = {...}` writes none of the watched dicts) and its class */
static PyObject *watch_call(Watch *self, PyObject *args, PyObject *kw) {
    if (!self->valid || self->dicts == NULL) Py_RETURN_FALSE;
    for (Py_ssize_t i = 0; i < self->n; i++) {
        if (tag_of(PyTuple_GET_ITEM(self->dicts, i)) != self->tags[i]) Py_RETURN_FALSE;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(self->owners); i++) {
        PyObject **slot = _PyObject_GetDictPtr(PyTuple_GET_ITEM(self->owners, i));
        if (slot == NULL || *slot != PyTuple_GET_ITEM(self->owned, i)) Py_RETURN_FALSE;
        if ((PyObject *)Py_TYPE(PyTuple_GET_ITEM(self->owners, i)) != PyTuple_GET_ITEM(self->types, i))
            Py_RETURN_FALSE;
    }
    Py_RETURN_TRUE;
}

/* w.snap() -> the tags now, as bytes */
static PyObject *watch_snap(Watch *self, PyObject *unused) {
    PyObject *out = PyBytes_FromStringAndSize(NULL, self->n * (Py_ssize_t)sizeof(uint64_t));
    if (out == NULL) return NULL;
    uint64_t *p = (uint64_t *)PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < self->n; i++) p[i] = tag_of(PyTuple_GET_ITEM(self->dicts, i));
    return out;
}

/* w.commit(snap): the checks passed on the state `snap` was taken from */
static PyObject *watch_commit(Watch *self, PyObject *snap) {
    if (!PyBytes_Check(snap) || PyBytes_GET_SIZE(snap) != self->n * (Py_ssize_t)sizeof(uint64_t)) {
        PyErr_SetString(PyExc_TypeError, "commit takes what snap() returned");
        return NULL;
    }
    memcpy(self->tags, PyBytes_AS_STRING(snap), self->n * sizeof(uint64_t));
    self->valid = 1;
    Py_RETURN_NONE;
}

/* w.reset(): the next call answers "changed" */
static PyObject *watch_reset(Watch *self, PyObject *unused) {
    self->valid = 0;
    Py_RETURN_NONE;
}

static PyMethodDef watch_methods[] = {
    {"snap", (PyCFunction)watch_snap, METH_NOARGS, "the dicts' version tags now"},
    {"commit", (PyCFunction)watch_commit, METH_O, "record tags taken by snap() before checks that passed"},
    {"reset", (PyCFunction)watch_reset, METH_NOARGS, "forget the recorded tags"},
    {NULL, NULL, 0, NULL}
};

static PyTypeObject WatchType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_dsguard.Watch",
    .tp_basicsize = sizeof(Watch),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Watch(dicts, owners=(), owned=()): w() is True while no dict changed since the last commit "
              "and owners[i].__dict__ is owned[i], owners[i] of the class it had",
    .tp_new = watch_new,
    .tp_dealloc = (destructor)watch_dealloc,
    .tp_traverse = (traverseproc)watch_traverse,
    .tp_clear = (inquiry)watch_clear,
    .tp_call = (ternaryfunc)watch_call,
    .tp_methods = watch_methods,
};

/* Same(tensors, state, getters=None): s() is True while every tensor's (requires_grad, shape, dtype,
   device) is the one in state: a tuple of (bool, tuple of ints, dtype, where), `where` True for "on
   the CPU" (read through is_cpu, which makes no device object) or the torch.device. The getters are
   torch's own: read through getattr, or called directly when `getters` gives the five getset
   descriptors (requires_grad, shape, dtype, is_cpu, device) every tensor's type resolves to. */
#define NGET 5
static const char *GET_NAMES[NGET] = {"requires_grad", "shape", "dtype", "is_cpu", "device"};
static PyObject *get_names[NGET];

typedef struct {
    PyObject_HEAD
    PyObject *tensors;  /* tuple */
    PyObject *state;    /* tuple of (bool, tuple of ints, dtype, True or device) */
    PyObject *getters;  /* tuple of NGET getset descriptors, or NULL */
    PyGetSetDef *get[NGET];
} Same;

static PyObject *same_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    PyObject *tensors, *state, *getters = Py_None;
    if (!PyArg_ParseTuple(args, "O!O!|O:Same", &PyTuple_Type, &tensors, &PyTuple_Type, &state, &getters))
        return NULL;
    if (getters != Py_None) {
        if (!PyTuple_Check(getters) || PyTuple_GET_SIZE(getters) != NGET) {
            PyErr_SetString(PyExc_TypeError, "getters: the getset descriptors of " "requires_grad, shape, dtype, "
                            "is_cpu and device");
            return NULL;
        }
        for (int k = 0; k < NGET; k++) {
            PyObject *d = PyTuple_GET_ITEM(getters, k);
            if (!PyObject_TypeCheck(d, &PyGetSetDescr_Type)) {
                PyErr_SetString(PyExc_TypeError, "getters: getset descriptors");
                return NULL;
            }
            for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(tensors); i++) {
                if (!PyObject_TypeCheck(PyTuple_GET_ITEM(tensors, i), PyDescr_TYPE(d))) {
                    PyErr_SetString(PyExc_TypeError, "a tensor is not of the getters' type");
                    return NULL;
                }
            }
        }
    }
    if (PyTuple_GET_SIZE(tensors) != PyTuple_GET_SIZE(state)) {
        PyErr_SetString(PyExc_ValueError, "one state per tensor");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(state); i++) {
        PyObject *st = PyTuple_GET_ITEM(state, i);
        if (!PyTuple_Check(st) || PyTuple_GET_SIZE(st) != 4 || !PyBool_Check(PyTuple_GET_ITEM(st, 0))
                || !PyTuple_Check(PyTuple_GET_ITEM(st, 1))) {
            PyErr_SetString(PyExc_TypeError, "a state is (requires_grad, shape tuple, dtype, True or device)");
            return NULL;
        }
    }
    Same *self = (Same *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    Py_INCREF(tensors);
    Py_INCREF(state);
    self->tensors = tensors;
    self->state = state;
    self->getters = NULL;
    if (getters != Py_None) {
        Py_INCREF(getters);
        self->getters = getters;
        for (int k = 0; k < NGET; k++) self->get[k] = ((PyGetSetDescrObject *)PyTuple_GET_ITEM(getters, k))->d_getset;
    }
    return (PyObject *)self;
}

static int same_traverse(Same *self, visitproc visit, void *arg) {
    Py_VISIT(self->tensors);
    Py_VISIT(self->state);
    Py_VISIT(self->getters);
    return 0;
}

static int same_clear(Same *self) {
    Py_CLEAR(self->tensors);
    Py_CLEAR(self->state);
    Py_CLEAR(self->getters);
    return 0;
}

static void same_dealloc(Same *self) {
    PyObject_GC_UnTrack(self);
    same_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* a torch.Size and a tuple of ints: the same length and items (small ints compare by identity first) */
static int same_shape(PyObject *now, PyObject *want) {
    if (!PyTuple_Check(now)) return 0;
    Py_ssize_t n = PyTuple_GET_SIZE(now);
    if (n != PyTuple_GET_SIZE(want)) return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *a = PyTuple_GET_ITEM(now, i), *b = PyTuple_GET_ITEM(want, i);
        if (a != b) {
            int eq = PyObject_RichCompareBool(a, b, Py_EQ);
            if (eq <= 0) return eq;
        }
    }
    return 1;
}

static inline PyObject *same_get(Same *self, PyObject *t, int k) {
    return self->getters ? self->get[k]->get(t, self->get[k]->closure) : PyObject_GetAttr(t, get_names[k]);
}

/* 1 when getter k of t gives `want` (identity; == for a shape or a device), 0 when not, -1 on error */
static int same_value(Same *self, PyObject *t, int k, PyObject *want) {
    PyObject *v = same_get(self, t, k);
    if (v == NULL) return -1;
    int ok = k == 1 ? same_shape(v, want) : v == want ? 1 : k == 4 ? PyObject_RichCompareBool(v, want, Py_EQ) : 0;
    Py_DECREF(v);
    return ok;
}

static PyObject *same_call(Same *self, PyObject *args, PyObject *kw) {
    if (self->tensors == NULL) Py_RETURN_FALSE;
    Py_ssize_t n = PyTuple_GET_SIZE(self->tensors);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = PyTuple_GET_ITEM(self->tensors, i), *st = PyTuple_GET_ITEM(self->state, i);
        PyObject *where = PyTuple_GET_ITEM(st, 3);
        int ok = same_value(self, t, 0, PyTuple_GET_ITEM(st, 0));
        if (ok == 1) ok = same_value(self, t, 2, PyTuple_GET_ITEM(st, 2));
        if (ok == 1) ok = same_value(self, t, 1, PyTuple_GET_ITEM(st, 1));
        if (ok == 1) ok = where == Py_True ? same_value(self, t, 3, Py_True) : same_value(self, t, 4, where);
        if (ok < 0) return NULL;
        if (!ok) Py_RETURN_FALSE;
    }
    Py_RETURN_TRUE;
}

static PyTypeObject SameType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_dsguard.Same",
    .tp_basicsize = sizeof(Same),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Same(tensors, state, getters=None): s() is True while each tensor's (requires_grad, shape, dtype, "
              "device) is as in state",
    .tp_new = same_new,
    .tp_dealloc = (destructor)same_dealloc,
    .tp_traverse = (traverseproc)same_traverse,
    .tp_clear = (inquiry)same_clear,
    .tp_call = (ternaryfunc)same_call,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_dsguard", NULL, -1, NULL};

PyMODINIT_FUNC PyInit__dsguard(void) {
    if (PyType_Ready(&WatchType) < 0 || PyType_Ready(&SameType) < 0) return NULL;
    for (int k = 0; k < NGET; k++) {
        get_names[k] = PyUnicode_InternFromString(GET_NAMES[k]);
        if (get_names[k] == NULL) return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&WatchType);
    Py_INCREF(&SameType);
    if (PyModule_AddObject(m, "Watch", (PyObject *)&WatchType) < 0
            || PyModule_AddObject(m, "Same", (PyObject *)&SameType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
"""


class Unwatched:
    """The stand-in without the extension: every call counts as a change, so the checks always run."""

    __slots__ = ("dicts", "upgrade")

    def __init__(self, dicts: tuple, upgrade=None):
        self.dicts = dicts
        self.upgrade = upgrade  # module -> the extension's watcher, to replace this one once loaded

    def __call__(self) -> bool:
        return False

    def snap(self):
        return None

    def commit(self, snap) -> None:
        pass

    def reset(self) -> None:
        pass


class Checked:
    """A stand-in check in Python (`fn()`), replaced by the extension's (`upgrade(module)`) once loaded."""

    __slots__ = ("fn", "upgrade")

    def __init__(self, fn, upgrade):
        self.fn, self.upgrade = fn, upgrade

    def __call__(self) -> bool:
        return self.fn()


directory = [None]  # fn() -> the folder for the built extension; set by the runtime (runtime/compile.py)
_state: dict = {}  # "module": the loaded extension, or "error": why there is none
_lock = threading.Lock()  # held while loading
_ulock = threading.Lock()  # held while publishing the result, and for the lists below
_loading: list = []  # the thread loading it (start()), while it runs
_upgrades: list = []  # (namespace, key, stand-in) to replace once the extension is loaded


def start() -> None:
    """Load the extension on a thread of its own (the first time in a cache folder: a C build of
    0.1-0.4 s), so that no compile waits for it: until it is loaded, `watch` and `same` give
    stand-ins, swapped for the extension's objects when it is. Called by `ds.compile`."""
    if "module" in _state or "error" in _state or _loading:
        return
    with _ulock:
        if _loading or "module" in _state or "error" in _state:
            return
        t = threading.Thread(target=extension, name="dynashape-guard-extension", daemon=True)
        _loading.append(t)
    t.start()


def ready():
    """The extension if it is loaded, else None at once (its loading started)."""
    mod = _state.get("module")
    if mod is None and "error" not in _state:
        start()
    return mod


def _later(ns: dict | None, key: str | None, factory, standin):
    """The extension's object `factory(module)` if it is loaded, else `standin` (with `ns` and `key`:
    put in `ns[key]`, and replaced there by the extension's once it is loaded: `adopt`)."""
    mod = ready()
    if mod is not None:
        obj = factory(mod)
    elif standin is not None:
        standin.upgrade, obj = factory, standin
    else:
        return None
    if ns is not None:
        ns[key] = obj
        if obj is standin:
            _adopt(ns, [(key, obj)])
    return obj


def adopt(ns: dict) -> None:
    """The stand-ins in `ns` (a guard's namespace, or a copy of one) are replaced there by the
    extension's objects once it is loaded, or now if it was meanwhile. A guard reads each name once
    per call (a watcher's `snap` and `commit` are one object's), so a swap may happen between two
    calls, on the loading thread."""
    _adopt(ns, [(k, v) for k, v in ns.items() if type(v) in (Unwatched, Checked) and v.upgrade is not None])


def _adopt(ns: dict, todo: list) -> None:
    with _ulock:
        mod = _state.get("module")
        if mod is None:
            if "error" not in _state:
                _upgrades.extend((ns, k, v) for k, v in todo)
            return
    for k, v in todo:
        if ns.get(k) is v:
            ns[k] = v.upgrade(mod)


def watch(dicts, owners=(), ns: dict | None = None, key: str | None = None) -> object:
    """A watcher of `dicts`, and of `owners` keeping their `__dict__` (`m.__dict__ = {...}` writes
    no dict: the old one is still watched): the extension's, or the stand-in. A dict subclass's
    writes move its tag too, but `OrderedDict.move_to_end` reorders without a write: the caller
    checks the order of such dicts itself where it matters. With `ns` and `key` it is put in
    `ns[key]`, and a stand-in given while the extension loads is replaced there when it is loaded."""
    dicts, owners = tuple(dicts), tuple(owners)
    return _later(ns, key, lambda m: m.Watch(dicts, owners, tuple(vars(o) for o in owners)), Unwatched(dicts))


def same(tensors, state, getters=None, ns: dict | None = None, key: str | None = None, fallback=None):
    """A checker `s()` that is True while each tensor's (requires_grad, shape, dtype, device) is the
    one in `state` (a tuple of such, shapes as tuples, the device True for "on the CPU"), or None
    without the extension. `getters`: the getset descriptors of requires_grad, shape, dtype, is_cpu
    and device, when every tensor's type resolves to them (their C getters are then called without
    an attribute lookup: 2.0 -> 1.4 us for 16 parameters). With `ns` and `key`: as for `watch`,
    where `fallback()`, the same check in Python, stands in while the extension loads."""
    tensors, state = tuple(tensors), tuple(state)
    standin = Checked(fallback, None) if fallback is not None and why_not() is None else None
    return _later(ns, key, lambda m: m.Same(tensors, state, getters), standin)


def extension():
    """The loaded extension module, or None (the reason in `why_not()`); waits while it loads."""
    mod = _state.get("module")
    if mod is not None or "error" in _state:
        return mod
    upgrades = []
    with _lock:
        if "module" not in _state and "error" not in _state:
            try:
                got = {"module": _load()}
            except Exception as e:  # noqa: BLE001 - any failure means: the checks run on every call
                got = {"error": f"{type(e).__name__}: {e}"[:500]}
                log.info("dynashape: guard checks of module state run on every call (%s)", got["error"])
            with _ulock:
                _state.update(got)
                upgrades = _upgrades[:]
                _upgrades.clear()
                _loading.clear()
    mod = _state.get("module")
    for ns, key, standin in upgrades if mod is not None else ():
        if ns.get(key) is standin:
            ns[key] = standin.upgrade(mod)
    return mod


def _after_fork_in_child() -> None:
    """A loading thread does not exist in a forked child: its lock may be held by it; start over."""
    global _lock, _ulock
    if "module" not in _state and "error" not in _state:
        _lock, _ulock = threading.Lock(), threading.Lock()
        _loading.clear()  # the stand-ins to replace stay listed: the child's own load replaces them


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def why_not() -> str | None:
    """Why the extension is not in use (None when it is, or was not asked for yet)."""
    return _state.get("error")


def _compiler() -> list[str] | None:
    for cc in (os.environ.get("CC"), "cc", "gcc", "clang"):
        path = cc and shutil.which(cc)
        if path:
            return [path]
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    return [cxx, "-x", "c"] if cxx else None


def _load():
    include = sysconfig.get_paths().get("include") or ""
    if not os.path.exists(os.path.join(include, "Python.h")):
        raise RuntimeError(f"no Python.h in {include!r}")
    cc = _compiler()
    if cc is None:
        raise RuntimeError("no C compiler (cc, gcc, clang, g++)")
    flags = ["-O2", "-shared", "-fPIC", f"-I{include}"]
    key = hashlib.sha256("\0".join([SOURCE, sys.version, sysconfig.get_config_var("EXT_SUFFIX") or "",
                                    *cc, *flags]).encode()).hexdigest()[:20]
    where = (directory[0]() if directory[0] is not None else None) or _default_directory()
    os.makedirs(where, exist_ok=True)
    path = os.path.join(where, f"_dsguard-{key}{sysconfig.get_config_var('EXT_SUFFIX') or '.so'}")
    if not os.path.exists(path):
        _build(cc, flags, path)
    spec = importlib.util.spec_from_file_location("_dsguard", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    _self_test(mod)
    return mod


def _default_directory() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "dynashape", "native")


def _build(cc: list, flags: list, path: str) -> None:
    """Compile to a temporary name and rename into place: a concurrent loader sees all of it or none."""
    fd, src = tempfile.mkstemp(suffix=".c", dir=os.path.dirname(path))
    tmp = src[:-2] + ".so"
    try:
        with os.fdopen(fd, "w") as f:
            f.write(SOURCE)
        out = subprocess.run([*cc, *flags, src, "-o", tmp], capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise RuntimeError(f"the C compiler failed: {(out.stderr or out.stdout).strip()[:400]}")
        os.replace(tmp, path)
    finally:
        for p in (src, tmp):
            if os.path.exists(p):
                os.remove(p)


def _self_test(mod) -> None:
    """Every kind of write a module's dicts see moves the tag (else the extension is not used)."""
    class Obj:
        pass

    o = Obj()
    o.a = 1
    d = vars(o)
    writes = [lambda: d.__setitem__("a", 2), lambda: d.__setitem__("b", 3), lambda: d.pop("b"),
              lambda: setattr(o, "a", 4), lambda: object.__setattr__(o, "a", 5), lambda: delattr(o, "a"),
              lambda: d.update(a=6), lambda: d.setdefault("c", 7), lambda: d.popitem(), lambda: d.clear()]
    od = collections.OrderedDict(a=1)
    writes += [lambda: od.__setitem__("a", 2), lambda: od.__setitem__("b", 3), lambda: od.pop("a"),
               lambda: od.clear()]
    w = mod.Watch((d, od), (o,), (d,))
    writes.append(lambda: setattr(o, "__dict__", {}))  # last: the owner's dict is another one now
    for write in writes:
        w.commit(w.snap())
        if not w():
            raise RuntimeError("a committed watch answered 'changed' with nothing written")
        write()
        if w():
            raise RuntimeError("a dict write did not move its version tag")
