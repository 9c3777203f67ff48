"""A minimal Redis client (RESP2 over a socket) for the shared PGO store: no new dependency.

Only what a merge-on-write store needs: GET, SET, DEL, PING and optimistic transactions
(WATCH / MULTI / EXEC), so that concurrent jobs merging into one key lose nothing.

>>> url = parse_url("redis://:secret@cache.internal:6380/2")
>>> (url.host, url.port, url.db, url.password)
('cache.internal', 6380, 2, 'secret')
"""
from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit


MAX_REPLY = 64 << 20  # bytes: larger than any profile we write (the local reader refuses the same)
MAX_LINE = 1 << 16  # a RESP header line is a few bytes
MAX_ITEMS = 1 << 16  # array replies we read are a handful of items


class RedisError(Exception):
    """The server answered with an error, or the connection failed."""


@dataclass(frozen=True)
class RedisURL:
    host: str
    port: int  # 6379 unless given
    db: int  # logical database selected after connecting
    username: str | None
    password: str | None

    def __str__(self) -> str:
        return f"redis://{self.host}:{self.port}/{self.db}"  # never print the password


def parse_url(url: str) -> RedisURL:
    """`redis://[[user]:password@]host[:port][/db]`."""
    parts = urlsplit(url)
    if parts.scheme != "redis":
        raise ValueError(f"config.pgo_remote must look like 'redis://host:port/db', got {url!r}")
    db = parts.path.strip("/")
    if db and not db.isdigit():
        raise ValueError(f"the Redis database in {url!r} must be a number, got {db!r}")
    return RedisURL(parts.hostname or "127.0.0.1", parts.port or 6379, int(db or 0),
                    unquote(parts.username) if parts.username else None,
                    unquote(parts.password) if parts.password else None)


class Redis:
    """One connection; use as a context manager.

    `timeout` is the budget, in seconds, for everything done on this connection (connect,
    authenticate, and every command until it is closed), not for each socket read: a server that
    answers slowly or trickles bytes costs at most `timeout`, then `RedisError`. A reply longer
    than `max_reply` bytes is refused before it is read.
    """

    def __init__(self, url: str | RedisURL, timeout: float = 2.0, max_reply: int = MAX_REPLY):
        self.url = parse_url(url) if isinstance(url, str) else url
        self.max_reply = max_reply
        self._deadline = time.monotonic() + timeout
        self._buf = bytearray()
        try:
            self._sock = socket.create_connection((self.url.host, self.url.port), timeout=max(timeout, 1e-3))
        except OSError as e:
            raise RedisError(f"cannot connect to {self.url}: {e}") from None
        try:
            if self.url.password is not None:
                auth = [self.url.username, self.url.password] if self.url.username else [self.url.password]
                self.execute("AUTH", *auth)
            if self.url.db:
                self.execute("SELECT", self.url.db)
        except BaseException:
            self.close()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self) -> None:
        try:
            self._sock.close()
        except OSError:
            pass

    # ------------------------------------------------------------------ protocol
    def execute(self, *args):
        """Send one command, return its decoded reply (bytes, int, list, None or 'OK'-like str)."""
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            b = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(b), b))
        try:
            self._arm()
            self._sock.sendall(b"".join(out))
            return self._read()
        except socket.timeout:
            raise RedisError(f"{self.url} did not answer within the time budget") from None
        except OSError as e:
            raise RedisError(f"connection to {self.url} failed: {e}") from None

    def _arm(self) -> None:
        """Give the next socket operation what is left of the budget."""
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout()
        self._sock.settimeout(left)

    def _fill(self) -> None:
        self._arm()
        chunk = self._sock.recv(65536)
        if not chunk:
            raise RedisError(f"connection to {self.url} closed mid-reply")
        self._buf += chunk

    def _line(self) -> bytes:
        while True:
            i = self._buf.find(b"\r\n")
            if i >= 0:
                line = bytes(self._buf[:i])
                del self._buf[:i + 2]
                return line
            if len(self._buf) > MAX_LINE:
                raise RedisError(f"unexpected reply from {self.url}: a header line longer than {MAX_LINE} bytes")
            self._fill()

    def _exactly(self, n: int) -> bytes:
        while len(self._buf) < n:
            self._fill()
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data

    def _count(self, body: bytes) -> int:
        try:
            return int(body)
        except ValueError:
            raise RedisError(f"unexpected reply from {self.url}: {body[:40]!r}") from None

    def _read(self, depth: int = 0):
        line = self._line()
        kind, body = line[:1], line[1:]
        if kind == b"+":
            return body.decode(errors="replace")
        if kind == b"-":
            raise RedisError(body.decode(errors="replace"))
        if kind == b":":
            return self._count(body)
        if kind == b"$":
            n = self._count(body)
            if n < 0:
                return None
            if n > self.max_reply:  # refused before buffering it: a hostile server may announce gigabytes
                raise RedisError(f"{self.url} sent a reply of {n} bytes, more than the {self.max_reply} accepted")
            return self._exactly(n + 2)[:-2]
        if kind == b"*":
            n = self._count(body)
            if n > MAX_ITEMS or depth > 8:
                raise RedisError(f"unexpected reply from {self.url}: an array of {n} items")
            return None if n < 0 else [self._read(depth + 1) for _ in range(n)]
        raise RedisError(f"unexpected reply from {self.url}: {line[:40]!r}")

    # ------------------------------------------------------------------ commands
    def ping(self) -> bool:
        return self.execute("PING") == "PONG"

    def get(self, key: str) -> bytes | None:
        return self.execute("GET", key)

    def set(self, key: str, value: bytes) -> None:
        self.execute("SET", key, value)

    def delete(self, key: str) -> int:
        return self.execute("DEL", key)

    def update(self, key: str, merge, retries: int = 50) -> bytes:
        """Replace the value of `key` by `merge(old_bytes_or_None) -> bytes`, atomically.

        Optimistic: WATCH the key, read it, merge, and write inside MULTI/EXEC; EXEC fails
        (a null reply) if another client wrote the key meanwhile, and we merge again.
        """
        for _ in range(retries):
            self.execute("WATCH", key)
            try:
                new = merge(self.get(key))
            except BaseException:
                self.execute("UNWATCH")
                raise
            self.execute("MULTI")
            self.execute("SET", key, new)
            if self.execute("EXEC") is not None:
                return new
        raise RedisError(f"gave up writing {key!r} to {self.url} after {retries} conflicting writers")
