"""Profile-guided automatic dynamic (PGO): what varied in earlier runs is dynamic from the start.

A *profile* ("code state") holds, per compiled function, what each input source was seen
with: sizes and strides per dim of tensors, values of ints. A value seen with two different
values becomes `?` (dynamic). At a compile, the profile and the current inputs are merged and
every `?` makes that size or int dynamic, so a warm run compiles once where a cold run compiled
twice. The profile is written after each recompile and at exit, merged into what is already
stored (a local JSON file per key, and optionally a Redis server shared by a fleet of jobs).

    >>> import dynashape as ds
    >>> print(ds.pgo.render())                                     # doctest: +SKIP
    /home/me/train.py:12:forward:
      L['x']: tensor size=[?, 128] stride=[S(1), 1]
      L['n']: fully dynamic scalar or tensor
    <BLANKLINE>
    PGO saw these inputs vary; to compile them dynamically from the start, set DYNASHAPE_DYNAMIC_SOURCES="L['x'],L['n']"

The profile key is `config.job_id` (env DYNASHAPE_JOB_ID) when set, otherwise the absolute path
of the main script (no script: the REPL, `python -c`, a test under pytest: no PGO without a job
id); under torch.distributed the rank is appended, or, with compiler collectives on, `:ranks`:
one profile for all ranks (they agree on what is dynamic), which a job of any size starts from. The store is `config.pgo_dir` (env DYNASHAPE_CACHE_DIR, default
`~/.cache/dynashape/pgo`); `config.pgo=False` turns all of this off.

Writes are off the compile path: a recompile hands the profile to one background writer thread;
`flush()` (also run at exit) writes synchronously and waits for a write in progress. A compile
waits for Redis only to read the profile once per key, at most `config.pgo_remote_timeout`.
"""
from __future__ import annotations

import atexit
import inspect
import logging
import os
import sys
import threading
import weakref
import zlib

import torch

from ..symbolic import tracehook as _th
from ..symbolic.sources import SizeSource, Source
from . import pgo_store as _store
from ..runtime.config import config
from .pgo_profile import (DYN, FunctionId, Profile, atom_at, dynamic_parts, merge_atom, merge_entry, observe,
                          render_entry)

log = logging.getLogger("dynashape.pgo")


__all__ = ["Profile", "clear", "current_key", "flush", "keys", "profile", "render"]


# ---------------------------------------------------------------------------- keys and identity
def current_key() -> str | None:
    """`config.job_id`, else the main script's absolute path; `:rank<N>` under torch.distributed,
    or `:ranks` with compiler collectives on: the ranks then make the same decisions, so they share
    one profile, and a later job of any number of ranks starts from it.

    None (PGO off) without a job id when there is no script to key on: the REPL, `python -c`,
    and test suites under pytest, whose runs must not change each other's compile counts.
    """
    key = config.job_id or _script_key()
    if key is None:
        return None
    rank = _rank()
    if rank is None:
        return key
    return f"{key}:ranks" if config.enable_compiler_collectives else f"{key}:rank{rank}"


def _script_key() -> str | None:
    if os.environ.get("PYTEST_CURRENT_TEST"):
        return None
    main = sys.argv[0] if sys.argv else ""
    return os.path.abspath(main) if main and os.path.isfile(main) else None


def _rank() -> int | None:
    dist = getattr(torch, "distributed", None)
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return None


_IDS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_BY_CODE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # code object -> FunctionId


def function_id(cf) -> FunctionId | None:
    """Who `cf` compiles: file, first line, name and a hash of its source (cached per cf)."""
    try:
        return _IDS[cf]
    except KeyError:
        pass
    fn = inspect.unwrap(cf._orig)
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    ident = _BY_CODE.get(code)  # ds.compile(f) again (after ds.reset()): no second read of the file
    if ident is None:
        try:
            text = inspect.getsource(fn).encode()
        except (OSError, TypeError):  # defined in a REPL or by exec: hash what the code does
            text = code.co_code + repr((code.co_names, code.co_varnames)).encode()
        ident = FunctionId(code.co_filename, code.co_firstlineno, code.co_name, f"{zlib.crc32(text):08x}")
        _BY_CODE[code] = ident
    _IDS[cf] = ident
    return ident


# ---------------------------------------------------------------------------- the profiles in memory
_PROFILES: dict[tuple[str, str, str], Profile] = {}  # (dir, remote, key) -> profile
_LOCK = threading.RLock()  # guards _PROFILES, every profile's contents and _PENDING; never held over I/O
_WRITING = threading.Lock()  # one write at a time: the background writer's, or flush()'s
_WAKE = threading.Condition(_LOCK)
_PENDING: set = set()  # locations the background writer is to write
_WRITER: threading.Thread | None = None


def _location(key: str | None = None) -> tuple[str, str, str] | None:
    key = key or current_key()
    return None if key is None else (_store.pgo_dir(), config.pgo_remote, key)


def _loaded(loc) -> Profile:
    p = _PROFILES.get(loc)
    if p is None:
        stored = _load_stored(loc) or Profile(loc[2])  # outside the lock: may wait for Redis
        with _LOCK:
            p = _PROFILES.setdefault(loc, stored)
    return p


def _parse(data: bytes | None, where: str) -> Profile | None:
    if data is None:
        return None
    try:
        return Profile.from_json(data)
    except (ValueError, TypeError, KeyError, RecursionError, MemoryError) as e:  # anything malformed
        _store.warn_once(("bad", where), f"dynashape PGO: ignoring {where}: {e}; it will be replaced "
                                         f"when the profile is next written")
        return None


def _load_stored(loc) -> Profile | None:
    """The local file merged with the remote entry; None when neither exists (or both are bad)."""
    directory, remote, key = loc
    found = [_parse(_store.read_local(directory, key), _store.local_path(directory, key))]
    if remote:
        found.append(_parse(_store.read_remote(remote, key), f"the remote profile {key!r} at {remote}"))
    found = [p for p in found if p is not None]
    if _th.on: _th.emit("pgo_read", key, directory, remote, found)  # noqa: E701
    if not found:
        return None
    p = Profile(key)
    for q in found:
        p.absorb(q)
    return p


def _write(p: Profile, loc) -> None:
    """Merge `p` into the stored profiles (under a lock / a Redis transaction), and back into `p`.

    Works on a snapshot, so the compile path may keep updating `p` meanwhile; `p` stays dirty
    if it changed during the write or the write failed (the next recompile or the exit retries).
    """
    directory, remote, key = loc
    with _LOCK:
        snap, generation = p.copy(), p.generation

    def merge(where):
        def fn(old: bytes | None) -> bytes:
            q = _parse(old, where)
            if q is not None:
                snap.absorb(q)
            return snap.to_json().encode()
        return fn

    ok = _store.update_local(directory, key, merge(_store.local_path(directory, key)))
    if remote:
        ok = _store.update_remote(remote, key, merge(f"the remote profile {key!r} at {remote}")) or ok
    with _LOCK:
        p.absorb(snap)  # what the other writers had stored
        if ok and p.generation == generation:
            p.replaced.clear()
            p.dirty = False
    if _th.on: _th.emit("pgo_write", key, directory, remote, snap, ok)  # noqa: E701


def _schedule(loc) -> None:
    """Hand `loc` to the background writer (started on first use, and again after a fork)."""
    global _WRITER
    with _WAKE:
        _PENDING.add(loc)
        if _WRITER is None or not _WRITER.is_alive():
            _WRITER = threading.Thread(target=_writer_loop, name="dynashape-pgo-writer", daemon=True)
            _WRITER.start()
        _WAKE.notify()


def _writer_loop() -> None:
    while True:
        with _WAKE:
            while not _PENDING:
                _WAKE.wait()
            loc = _PENDING.pop()
        with _WRITING:
            p = _PROFILES.get(loc)
            if p is not None and p.dirty:
                _write_quietly(p, loc)


def _write_quietly(p: Profile, loc) -> None:
    try:
        _write(p, loc)
    except Exception as e:  # never fail the user's program for a profile
        _store.warn_once(("flush", loc), f"dynashape PGO: could not write the profile {loc[2]!r}: {e}")


def _after_fork_in_child() -> None:
    global _LOCK, _WRITING, _WAKE, _WRITER
    _LOCK, _WRITING, _WRITER = threading.RLock(), threading.Lock(), None  # the parent's writer is not here
    _WAKE = threading.Condition(_LOCK)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


# ---------------------------------------------------------------------------- runtime hooks
def _profile_of(cf):
    """(the function's identity, the loaded profile of this job, its location), or None when PGO
    does not apply."""
    ident = function_id(cf)
    loc = _location() if ident is not None else None
    if loc is None:
        return None
    return ident, _loaded(loc), loc


def seed(cf, L: dict) -> None:
    """Before a compile: sources the profile (merged with these inputs) marks `?` become dynamic."""
    if not config.pgo or cf.dynamic is not None or not config.automatic_dynamic_shapes:
        return
    found = _profile_of(cf)
    with _LOCK:
        f = found[1].functions.get(found[0].fid) if found else None
        f = None if f is None else {"sources": {k: v for k, v in f["sources"].items()}}
    if f is None:
        return
    fs = cf.frame_state
    fs.update(L)  # as make_policy will: what varied within this run is "automatic", not "PGO"
    for src, now in observe(L, skip_params=config.force_parameter_static_shapes):
        old = f["sources"].get(src.name())
        for part in dynamic_parts(src, merge_entry(old, now), now):
            if part not in fs.dynamic:
                fs.dynamic.add(part)
                prior, cur = atom_at(old, part), atom_at(now, part)
                fs.why[part] = ("PGO profile: seen with several values in earlier runs" if prior == DYN else
                                f"PGO profile: seen with {prior} in an earlier run, now {cur}")
                log.info("PGO: %s is dynamic from the start (%s)", part.name(), fs.why[part])


def record(cf, L: dict) -> None:
    """After a compile: merge what was seen into the profile; write it if this was a recompile."""
    if not config.pgo:
        return
    found = _profile_of(cf)
    if found is None:
        return
    ident, p, loc = found
    with _LOCK:
        _record(cf, L, ident, p)
    if p.dirty and len(cf.entries) > 1:
        _schedule(loc)  # written in the background: a compile never waits for a store


def _record(cf, L: dict, ident: FunctionId, p: Profile) -> None:
    f = p.function(ident)
    srcs = f["sources"]
    changed = False
    overwrite = cf.dynamic is False or not config.automatic_dynamic_shapes
    for src, e in observe(L, skip_params=config.force_parameter_static_shapes):
        name = src.name()
        new = e if overwrite else merge_entry(srcs.get(name), e)
        if overwrite:
            p.replaced.add((ident.fid, name))
        if new != srcs.get(name):
            srcs[name] = new
            changed = True
    if not overwrite:
        fs = cf.frame_state
        for src, v in fs.seen.items():
            changed |= _merge_at(srcs, src, v)
        for src in fs.dynamic:
            changed |= _merge_at(srcs, src, DYN)
    if changed:
        p.dirty = True
        p.generation += 1


def _merge_at(srcs: dict, src: Source, v) -> bool:
    """Merge one frame-state fact (a size of a dim, or an int's value) into its entry."""
    if isinstance(src, SizeSource):
        e = srcs.get(src.base.name())
        if e is None or e["kind"] != "tensor" or e["size"] == DYN or src.dim >= len(e["size"]):
            return False
        new = merge_atom(e["size"][src.dim], v)
        if new == e["size"][src.dim]:
            return False
        e["size"][src.dim] = new
        return True
    e = srcs.get(src.name())
    if e is None or e["kind"] != "int":
        return False
    new = merge_atom(e["value"], v)
    if new == e["value"]:
        return False
    e["value"] = new
    return True


@atexit.register
def flush() -> None:
    """Write every profile changed since it was last written, now (also runs at interpreter exit);
    waits for a background write in progress. A Redis server costs at most its timeout here."""
    with _WRITING:
        with _LOCK:
            todo = [(loc, p) for loc, p in _PROFILES.items() if p.dirty]
            _PENDING.clear()
        for loc, p in todo:
            _write_quietly(p, loc)


# ---------------------------------------------------------------------------- user API
def profile(key: str | None = None) -> Profile:
    """A snapshot of the profile `key` (default: this process's): memory, local store and remote."""
    loc = _location(key)
    if loc is None:
        return Profile("")
    with _LOCK:
        p = _PROFILES[loc].copy() if loc in _PROFILES else Profile(loc[2])
    stored = _load_stored(loc)
    if stored is not None:
        p.absorb(stored)
    return p


def render(key: str | None = None) -> str:
    """The profile in the seed's format, ending with the DYNASHAPE_DYNAMIC_SOURCES suggestion.

    >>> import dynashape as ds
    >>> with ds.config.patch(job_id="doc-render-example"):
    ...     ds.pgo.render().startswith("no PGO profile")
    True
    """
    p = profile(key)
    if not p.key:
        return ("no PGO key: this process has no main script (REPL, `python -c` or pytest); "
                "set DYNASHAPE_JOB_ID (ds.config.job_id) to use PGO here")
    if not p.functions:
        return f"no PGO profile for key {p.key!r} in {_store.pgo_dir()}"
    blocks = []
    for f in sorted(p.functions.values(), key=lambda f: (f["file"], f["line"], f["name"])):
        lines = [f"{f['file']}:{f['line']}:{f['name']}:"]
        lines += [f"  {name}: {render_entry(e)}" for name, e in f["sources"].items()]
        blocks.append("\n".join(lines))
    text = "\n".join(blocks)
    dyn = p.dynamic_sources()
    if dyn:
        text += ("\n\nPGO saw these inputs vary; to compile them dynamically from the start, "
                 f'set DYNASHAPE_DYNAMIC_SOURCES="{",".join(dyn)}"')
    else:
        text += "\n\nNothing varied: every input was seen with one shape."
    return text


def keys() -> list[str]:
    """The keys stored in the local PGO directory."""
    out = []
    for path in _store.local_files(_store.pgo_dir()):
        p = _parse(_store.read_path(path), path)
        if p is not None:
            out.append(p.key)
    return sorted(out)


def clear(key: str | None = None) -> bool:
    """Forget the profile `key` (default: this process's) here, on disk and on the remote store."""
    loc = _location(key)
    if loc is None:
        return False
    with _LOCK:
        _PROFILES.pop(loc, None)
    found = _store.remove_local(loc[0], loc[2])
    if loc[1]:
        found = _store.remove_remote(loc[1], loc[2]) or found
    return found


