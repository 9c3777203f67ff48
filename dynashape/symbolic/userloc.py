"""Finding the user's line: the first frame outside dynashape and torch."""
from __future__ import annotations

import linecache
import os
import sys
import sysconfig
from dataclasses import dataclass

_DYNASHAPE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_SKIP_PARTS = (os.sep + "torch" + os.sep, os.sep + "sympy" + os.sep, os.sep + "contextlib.py")


@dataclass(frozen=True)
class Location:
    filename: str
    lineno: int
    function: str
    code: str  # the stripped source line, '' when unavailable

    def short(self) -> str:
        return f"{os.path.basename(self.filename)}:{self.lineno}"

    def __str__(self) -> str:
        """`model.py:12 'if x.size(0) > 2:'` (or `model.py:12 in f` without source)."""
        text = self.__dict__.get("_text")  # written once: generated code comments every call with it
        if text is None:
            text = f"{self.short()} {self.code!r}" if self.code else f"{self.short()} in {self.function}"
            self.__dict__["_text"] = text  # (frozen: not through __setattr__; not a field, so eq/hash ignore it)
        return text


_internal: dict = {}  # filename -> is_internal (a trace asks for every op, over the same few files)
_locations: dict = {}  # (filename, lineno, function) -> Location


def is_internal(filename: str) -> bool:
    """True for frames that belong to dynashape, torch, sympy or generated code."""
    r = _internal.get(filename)
    if r is None:
        r = _internal[filename] = is_ours(filename) or any(p in filename for p in _SKIP_PARTS)
        if len(_internal) > 4096:  # generated file names (exec'd code) must not grow it without bound
            _internal.clear()
    return r


_INSTALLED = tuple({p for k, p in sysconfig.get_paths().items() if k in ("stdlib", "platstdlib", "purelib", "platlib")})


_library: dict = {}  # filename -> is_library_file (asked at every call a trace makes)


def is_library_file(filename: str) -> bool:
    """Code that is not the user's: dynashape's, torch's, sympy's, the standard library's or an
    installed package's (exec'd code and `<stdin>` are the user's)."""
    r = _library.get(filename)
    if r is None:
        r = _library[filename] = is_internal(filename) or filename.startswith(_INSTALLED) \
            or "site-packages" in filename or "dist-packages" in filename or filename.startswith("<frozen ")
        if len(_library) > 4096:
            _library.clear()
    return r


_EVAL_CODE: dict = {}


def evaluate(text: str, globals_: dict, locals_=None):
    """`eval(text, ...)` whose code is dynashape's own (`<dynashape-eval>`, is_ours): a trace that
    meets its frame does not take our namespace for one of the user's (runtime/outer.py)."""
    code = _EVAL_CODE.get(text)
    if code is None:
        if len(_EVAL_CODE) > 4096:
            _EVAL_CODE.clear()
        code = _EVAL_CODE[text] = compile(text, "<dynashape-eval>", "eval")
    return eval(code, globals_, locals_)  # noqa: S307 - our own generated text


def is_ours(filename: str) -> bool:
    """dynashape's own code (its modules, the code it generates)."""
    return filename.startswith(_DYNASHAPE_DIR) or filename.startswith("<dynashape")


def location_at(frame, lineno: int) -> Location:
    co = frame.f_code
    return Location(co.co_filename, lineno, co.co_name, linecache.getline(co.co_filename, lineno).strip())


def user_location(skip: int = 1) -> Location | None:
    """The innermost frame that is the user's own code, or None."""
    f = sys._getframe(skip)
    known = _internal.get
    while f is not None:
        co = f.f_code
        fn = co.co_filename
        internal = known(fn)
        if internal is None:
            internal = is_internal(fn)
        if not internal:
            key = (fn, f.f_lineno, co.co_name)
            loc = _locations.get(key)
            if loc is None:
                if len(_locations) > 4096:
                    _locations.clear()
                code = linecache.getline(fn, f.f_lineno).strip()
                loc = _locations[key] = Location(fn, f.f_lineno, co.co_name, code)
            return loc
        f = f.f_back
    return None


def user_frames(tb):
    """A traceback with dynashape's (and torch's) own frames dropped, for errors shown to users."""
    frames = []
    while tb is not None:
        if not is_internal(tb.tb_frame.f_code.co_filename):
            frames.append(tb)
        tb = tb.tb_next
    for a, b in zip(frames, frames[1:]):
        a.tb_next = b
    if frames:
        frames[-1].tb_next = None
        return frames[0]
    return None
