"""Where PGO profiles live: one JSON file per key in a local directory, and optionally Redis.

Bytes in, bytes out: parsing and merging belong to `pgo.py`. Every write is a
read-merge-write that cannot lose a concurrent writer's data: locally under an exclusive
`fcntl` lock on a side file, then an atomic `os.replace` of a temp file (readers never see a
half-written file); remotely in a WATCH/MULTI/EXEC transaction, retried on conflict. A store
that fails is one warning, never an exception in the user's program.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tempfile
import time
import warnings

from ..runtime.config import config
from .pgo_profile import MAX_PROFILE_BYTES
from .redis_store import Redis, RedisError, parse_url

try:
    import fcntl
except ImportError:  # Windows: atomic replace still holds; concurrent writers may drop an update
    fcntl = None

MAX_LOCAL_BYTES = MAX_REMOTE_BYTES = MAX_PROFILE_BYTES
LOCK_TIMEOUT = 10.0  # seconds to wait for another process's write before giving up on ours
REMOTE_PREFIX = "dynashape:pgo:v1:"
BREAKER_FAILURES = 2  # consecutive failed operations after which a server is not tried again

_WARNED: set = set()
_REMOTE_DOWN: set[str] = set()  # servers whose breaker is open: not tried again in this process
_FAILURES: dict[str, int] = {}  # consecutive failed operations per server


def warn_once(tag, msg: str) -> None:
    if tag not in _WARNED:
        _WARNED.add(tag)
        warnings.warn(msg, RuntimeWarning, stacklevel=3)


# ---------------------------------------------------------------------------- local
def pgo_dir() -> str:
    if config.pgo_dir:
        return os.path.expanduser(config.pgo_dir)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "dynashape", "pgo")


def local_path(directory: str, key: str) -> str:
    """A readable, collision-free file name: the key's tail, sanitized, plus a hash of all of it."""
    tail = re.sub(r"[^A-Za-z0-9._-]+", "_", key).strip("_")[-80:]
    return os.path.join(directory, f"{tail}-{hashlib.sha1(key.encode()).hexdigest()[:12]}.json")


def local_files(directory: str) -> list[str]:
    try:
        return sorted(os.path.join(directory, n) for n in os.listdir(directory) if n.endswith(".json"))
    except OSError:
        return []


def read_path(path: str) -> bytes | None:
    """The file's bytes; a file over MAX_LOCAL_BYTES is read only that far (the parser refuses it)."""
    try:
        with open(path, "rb") as f:
            return f.read(MAX_LOCAL_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as e:
        warn_once(("read", path), f"dynashape PGO: cannot read {path}: {e}; starting without it")
        return None


def read_local(directory: str, key: str) -> bytes | None:
    return read_path(local_path(directory, key))


@contextlib.contextmanager
def _locked(path: str):
    if fcntl is None:
        yield
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + LOCK_TIMEOUT
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{path} stayed locked for {LOCK_TIMEOUT:g}s") from None
                time.sleep(0.01)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def update_local(directory: str, key: str, merge) -> bool:
    """Under the lock: new = merge(current bytes or None), written atomically. False on failure."""
    path = local_path(directory, key)
    try:
        os.makedirs(directory, exist_ok=True)
        with _locked(path + ".lock"):
            new = merge(read_path(path))
            fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".json")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(new)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        return True
    except (OSError, TimeoutError) as e:
        warn_once(("write", path), f"dynashape PGO: cannot write {path}: {e}; the profile stays in memory")
        return False


def remove_local(directory: str, key: str) -> bool:
    path = local_path(directory, key)
    found = os.path.exists(path)
    for p in (path, path + ".lock"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(p)
    return found


# ---------------------------------------------------------------------------- remote
def _remote(url: str):
    """A connection whose whole use is bounded by `config.pgo_remote_timeout`, or None if the
    server's breaker is open or it cannot be reached."""
    if url in _REMOTE_DOWN:
        return None
    try:
        return Redis(parse_url(url), timeout=config.pgo_remote_timeout, max_reply=MAX_REMOTE_BYTES)
    except (RedisError, ValueError) as e:
        _remote_failed(url, e)
        return None


def _remote_ok(url: str) -> None:
    _FAILURES.pop(url, None)


def _remote_failed(url: str, e: Exception) -> None:
    """Count a failed operation; at BREAKER_FAILURES in a row the breaker opens (one warning) and
    the rest of the process uses the local store only: each failure may have cost a timeout."""
    n = _FAILURES[url] = _FAILURES.get(url, 0) + 1
    if n < BREAKER_FAILURES and not isinstance(e, ValueError):
        return
    _REMOTE_DOWN.add(url)
    try:
        shown = str(parse_url(url))  # without the password
    except ValueError:
        shown = "(unparsable URL)"
    warn_once(("remote", url), f"dynashape PGO: the remote profile store {shown} is unavailable ({e}); "
                               f"using the local store {pgo_dir()} only for the rest of this process")


def read_remote(url: str, key: str) -> bytes | None:
    r = _remote(url)
    if r is None:
        return None
    try:
        with r:
            data = r.get(REMOTE_PREFIX + key)
        _remote_ok(url)
        return data
    except RedisError as e:
        _remote_failed(url, e)
        return None


def update_remote(url: str, key: str, merge) -> bool:
    r = _remote(url)
    if r is None:
        return False
    try:
        with r:
            r.update(REMOTE_PREFIX + key, merge)
        _remote_ok(url)
        return True
    except RedisError as e:
        _remote_failed(url, e)
        return False


def remove_remote(url: str, key: str) -> bool:
    r = _remote(url)
    if r is None:
        return False
    try:
        with r:
            found = r.delete(REMOTE_PREFIX + key) > 0
        _remote_ok(url)
        return found
    except RedisError as e:
        _remote_failed(url, e)
        return False
