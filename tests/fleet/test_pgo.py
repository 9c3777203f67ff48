"""Profile-guided automatic dynamic: PyTorch's test_pgo.py behaviours, the stores, the CLI."""
import contextlib
import importlib.util
import json
import os
import re
import runpy
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
import time
import warnings

import pytest
import torch

import dynashape as ds
from dynashape.fleet import pgo, pgo_store
from dynashape.fleet.pgo_profile import FunctionId, Profile
from dynashape.fleet.redis_store import Redis, RedisError


def times_two(x):
    return x * 2


def compiles(cf, shapes):
    for s in shapes:
        x = torch.randn(*s)
        torch.testing.assert_close(cf(x), x * 2)
    return cf.stats.compiles


def pgo_warnings(record):
    return [w for w in record if "dynashape PGO" in str(w.message)]


def test_a_warm_run_compiles_once_where_the_cold_run_compiled_twice():
    with ds.config.patch(job_id="warm"):
        cf = ds.compile(times_two)
        assert compiles(cf, [(2, 3), (2, 4)]) == 2
        ds.reset()
        assert compiles(cf, [(2, 5), (2, 6)]) == 1
        assert cf.entries[0].dynamic_sources["L['x'].size()[1]"].startswith("PGO profile")
        assert "L['x'].size()[0]" not in cf.entries[0].dynamic_sources  # never varied: stays static


def test_a_different_job_id_does_not_share_the_profile():
    cf = ds.compile(times_two)
    with ds.config.patch(job_id="foo"):
        assert compiles(cf, [(2, 3), (2, 4)]) == 2
    ds.reset()
    with ds.config.patch(job_id="bar"):
        assert compiles(cf, [(2, 5), (2, 6)]) == 2
    ds.reset()
    with ds.config.patch(job_id="foo"):
        assert compiles(cf, [(2, 7), (2, 8)]) == 1


def test_pgo_off_compiles_twice_again():
    with ds.config.patch(job_id="off"):
        cf = ds.compile(times_two)
        assert compiles(cf, [(2, 3), (2, 4)]) == 2
        ds.reset()
        with ds.config.patch(pgo=False):
            assert compiles(cf, [(2, 5), (2, 6)]) == 2


EXAMPLE = """\
import torch
import dynashape as ds
def run():
    @ds.compile
    def func(x):
        return x * 10
    func(torch.rand(10))
    func(torch.rand(20))
    func(torch.rand(30))
    return func.stats.compiles
"""


def test_the_same_file_under_two_paths_shares_a_profile(tmp_path):
    def load_and_run(path):
        path.parent.mkdir()
        path.write_text(EXAMPLE)
        spec = importlib.util.spec_from_file_location("example", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.run()

    with ds.config.patch(job_id="two-paths"):
        assert load_and_run(tmp_path / "a" / "example.py") == 2
        state = ds.pgo.render()
        assert "/a/example.py:4:func:" in state
        assert "\n  L['x']: tensor size=[?] stride=[1]" in state
        assert load_and_run(tmp_path / "b" / "example.py") == 1  # a job restarted from another checkout


def test_render_prints_the_seed_format_and_ends_with_the_suggestion():
    def f(x, y, n):
        return x.sum() + y + n

    with ds.config.patch(job_id="render"):
        cf = ds.compile(f)
        for size, n in ((4, 1), (5, 2), (6, 3)):
            cf(torch.randn(size), torch.randn(3), n)
        state = ds.pgo.render()
    code = f.__code__
    assert state.splitlines()[0] == f"{code.co_filename}:{code.co_firstlineno}:f:"
    assert "\n  L['x']: tensor size=[?] stride=[1]\n" in state
    assert "\n  L['y']: tensor size=[3] stride=[1]\n" in state
    assert "\n  L['n']: fully dynamic scalar or tensor\n" in state
    assert state.endswith('set DYNASHAPE_DYNAMIC_SOURCES="L[\'x\'],L[\'n\']"')


def test_render_without_a_profile_says_so():
    with ds.config.patch(job_id="nothing-here"):
        assert ds.pgo.render() == f"no PGO profile for key 'nothing-here' in {ds.config.pgo_dir}"


class Foo(torch.nn.Module):
    def forward(self, x, y):
        return x + 2, y * 2


def test_dynamic_false_overwrites_the_profile_with_static_sizes():
    with ds.config.patch(job_id="dynamic-false"):
        automatic = ds.compile(Foo())
        automatic(torch.randn(2, 4), torch.randn(2, 4))
        automatic(torch.randn(3, 4), torch.randn(2, 5))
        assert ds.pgo.profile().sources("forward")["L['x']"]["size"] == ["?", 4]
        static = ds.compile(Foo(), dynamic=False)
        static(torch.randn(2, 4), torch.randn(2, 4))
        static(torch.randn(4, 4), torch.randn(6, 8))
        assert static.stats.compiles == 2
        ds.pgo.flush()  # the overwrite reaches the file, too: a fresh read agrees
        pgo._PROFILES.clear()
        srcs = ds.pgo.profile().sources("forward")
    assert srcs["L['x']"]["size"] == [4, 4]
    assert srcs["L['y']"]["size"] == [6, 8]


def test_the_suggested_sources_when_used_give_one_compile():
    def f(x, y):
        return x.sum() + y.sum()

    shapes = [((2, 4), (4,)), ((4, 4), (4,)), ((8, 8), (8,))]
    with ds.config.patch(job_id="suggest-cold"):
        cold = ds.compile(f)
        for a, b in shapes:
            cold(torch.randn(*a), torch.randn(*b))
        assert cold.stats.compiles == 3
        sources = re.search(r'DYNASHAPE_DYNAMIC_SOURCES="(.*)"', ds.pgo.render()).group(1)
    assert sources == "L['x'],L['y']"
    with ds.config.patch(job_id="suggest-warm", pgo=False, dynamic_sources=sources):
        warm = ds.compile(f)
        for a, b in shapes:
            warm(torch.randn(*a), torch.randn(*b))
    assert warm.stats.compiles == 1


def test_parameters_forced_static_are_not_profiled():
    def f(p):
        return p * 2

    with ds.config.patch(job_id="params"):
        cf = ds.compile(f)
        for n in (2, 3):
            cf(torch.nn.Parameter(torch.randn(n)))
        assert "L['p']" not in ds.pgo.profile().sources("f")


# ---------------------------------------------------------------------------- the local store
BAD_FILES = {
    "corrupt": b"{this is not json",
    "truncated": b'{"format": "dynashape-pgo", "version": 1, "key": "bad", "functions": {"ab',
    "foreign-version": json.dumps({"format": "dynashape-pgo", "version": 999, "functions": {}}).encode(),
    "not-a-profile": b"[1, 2, 3]",
    "deeply-nested": b"[" * 100000 + b"]" * 100000,  # json.loads raises RecursionError
    "garbage-bytes": bytes(range(256)) * 4,
    "key-of-wrong-type": json.dumps({"format": "dynashape-pgo", "version": 1, "key": [1], "functions": {}}).encode(),
    "line-of-wrong-type": json.dumps({"format": "dynashape-pgo", "version": 1, "key": "bad", "functions": {
        "x:1:f": {"file": "f.py", "line": True, "name": "f", "hash": "x", "sources": {}}}}).encode(),
    "size-of-wrong-type": json.dumps({"format": "dynashape-pgo", "version": 1, "key": "bad", "functions": {
        "x:1:f": {"file": "f.py", "line": 1, "name": "f", "hash": "x",
                  "sources": {"L['x']": {"kind": "tensor", "size": {"a": 1}, "stride": [1]}}}}}).encode(),
    "malformed-entry": json.dumps({"format": "dynashape-pgo", "version": 1, "key": "bad", "functions": {
        "x:1:f": {"file": "f.py", "line": 1, "name": "f", "hash": "x", "sources": {"L['x']": {"kind": 7}}}}}
    ).encode(),
}


@pytest.mark.parametrize("kind", sorted(BAD_FILES))
def test_a_bad_profile_file_is_one_warning_and_is_replaced(kind):
    path = pgo_store.local_path(ds.config.pgo_dir, "bad")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(BAD_FILES[kind])
    with ds.config.patch(job_id="bad"), warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        cf = ds.compile(times_two)
        assert compiles(cf, [(2, 3), (2, 4), (2, 5)]) == 2  # the bad file counts for nothing
        ds.pgo.flush()
    found = pgo_warnings(record)
    assert len(found) == 1, [str(w.message) for w in found]
    assert path in str(found[0].message) and "replaced" in str(found[0].message)
    replaced = Profile.from_json(open(path, "rb").read())  # now a valid profile
    assert replaced.sources("times_two")["L['x']"]["size"] == [2, "?"]


def test_concurrent_writers_lose_nothing():
    loc = (ds.config.pgo_dir, "", "concurrent")

    def writer(i):
        p = Profile("concurrent")
        p.function(FunctionId("f.py", i, f"f{i}", "h"))["sources"]["L['x']"] = {"kind": "int", "value": i}
        pgo._write(p, loc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stored = Profile.from_json(open(pgo_store.local_path(*loc[::2]), "rb").read())
    assert sorted(f["line"] for f in stored.functions.values()) == list(range(16))


def test_the_default_store_is_not_in_the_home_directory_during_tests():
    assert not pgo_store.pgo_dir().startswith(os.path.expanduser("~/.cache"))


# ---------------------------------------------------------------------------- across processes
SCRIPT = """\
import json, torch
import dynashape as ds

@ds.compile
def f(x, n):
    return x * n

for size, n in ((3, 2), (4, 2), (5, 2)):
    f(torch.randn(size, 2), n)
print(json.dumps({"compiles": f.stats.compiles, "dynamic": sorted(f.entries[0].dynamic_sources)}))
"""


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DYNASHAPE_") and k != "PYTEST_CURRENT_TEST"}
    env.update(extra)
    return env


def _run_script(script, **env):
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=_env(**env),
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


def _cli(capsys, *args):
    from dynashape.__main__ import main
    assert main(["pgo", *args]) == 0
    return capsys.readouterr().out


def test_a_second_process_compiles_once(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    cache = str(tmp_path / "cache")
    first, _ = _run_script(script, DYNASHAPE_CACHE_DIR=cache)
    second, _ = _run_script(script, DYNASHAPE_CACHE_DIR=cache)
    assert first["compiles"] == 2 and second["compiles"] == 1
    assert second["dynamic"] == ["L['x'].size()[0]"]


def test_without_a_job_id_a_test_under_pytest_has_no_profile():
    with ds.config.patch(job_id=""):
        assert ds.pgo.current_key() is None  # test runs must not change each other's compile counts
        cf = ds.compile(times_two)
        assert compiles(cf, [(2, 3), (2, 4)]) == 2
        ds.reset()
        assert compiles(cf, [(2, 5), (2, 6)]) == 2
        assert ds.pgo.render().startswith("no PGO key")


def test_the_cli_shows_lists_and_clears_profiles(tmp_path, capsys, monkeypatch):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    monkeypatch.delenv("PYTEST_CURRENT_TEST")
    with ds.config.patch(job_id=""), _argv(str(script)):  # as if train.py were the main script
        assert ds.pgo.current_key() == str(script)
        runpy.run_path(str(script))
        capsys.readouterr()
        ds.pgo.flush()
    assert _cli(capsys, "list").split() == [str(script)]
    shown = _cli(capsys, "show", str(script))
    assert f"{script}:4:f:\n  L['x']: tensor size=[?, 2] stride=[S(1), 1]\n  L['n']: scalar 2\n" in shown
    assert shown.rstrip().endswith('set DYNASHAPE_DYNAMIC_SOURCES="L[\'x\']"')
    assert shown == _cli(capsys, "show")  # no key: every stored profile (here, one)
    assert "removed" in _cli(capsys, "clear", str(script))
    assert "no PGO profiles" in _cli(capsys, "show")


@contextlib.contextmanager
def _argv(main):
    saved = sys.argv[:]
    sys.argv[:] = [main]
    try:
        yield
    finally:
        sys.argv[:] = saved


# ---------------------------------------------------------------------------- the remote store
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def redis_url():
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (make test installs it with apt-get when run as root)")
    port = _free_port()
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        for _ in range(100):
            try:
                with Redis(url) as r:
                    if r.ping():
                        break
            except RedisError:
                time.sleep(0.05)
        else:
            pytest.skip("redis-server did not start")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_two_processes_with_different_local_dirs_share_the_profile_through_redis(tmp_path, redis_url):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    with ds.config.patch(job_id="fleet-job", pgo_remote=redis_url, pgo_dir=str(tmp_path / "machine-a")):
        runpy.run_path(str(script))  # this process: compiles twice, the profile goes to Redis too
    second, err = _run_script(script, DYNASHAPE_CACHE_DIR=str(tmp_path / "machine-b"),
                              DYNASHAPE_JOB_ID="fleet-job", DYNASHAPE_PGO_REMOTE=redis_url)
    assert second["compiles"] == 1, err  # another machine: nothing local, everything from Redis
    assert os.listdir(tmp_path / "machine-a")  # the local store is written as well
    with ds.config.patch(pgo_remote=redis_url, pgo_dir=str(tmp_path / "machine-c")):
        assert "L['x']: tensor size=[?, 2]" in ds.pgo.render("fleet-job")
        assert ds.pgo.clear("fleet-job")
        assert ds.pgo.render("fleet-job").startswith("no PGO profile")


def test_a_concurrent_redis_writer_is_merged_not_lost(redis_url):
    key = "dynashape:test:merge"
    with Redis(redis_url) as a, Redis(redis_url) as b:
        a.delete(key)

        def merge(old):
            if old is None:
                b.set(key, b"theirs")  # another job writes between our read and our write
                return b"mine"
            return old + b"+mine"

        assert a.update(key, merge) == b"theirs+mine"
        assert a.get(key) == b"theirs+mine"
        a.delete(key)


def test_an_unreachable_redis_is_one_warning_and_the_local_store_keeps_working(monkeypatch):
    url = f"redis://127.0.0.1:{_free_port()}/0"  # nothing listens there
    monkeypatch.setattr(pgo_store, "_REMOTE_DOWN", set())
    with ds.config.patch(job_id="no-redis", pgo_remote=url), warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        cf = ds.compile(times_two)
        assert compiles(cf, [(2, 3), (2, 4), (3, 4), (4, 4)]) == 3
        ds.pgo.flush()
    found = pgo_warnings(record)
    assert len(found) == 1 and "unavailable" in str(found[0].message), [str(w.message) for w in found]
    stored = Profile.from_json(open(pgo_store.local_path(ds.config.pgo_dir, "no-redis"), "rb").read())
    assert stored.sources("times_two")["L['x']"]["size"] == ["?", "?"]


def test_redis_urls_are_parsed_and_never_print_the_password():
    from dynashape.fleet.redis_store import parse_url
    u = parse_url("redis://:s3cret@example.internal:6380/3")
    assert (u.host, u.port, u.db, u.password) == ("example.internal", 6380, 3, "s3cret")
    assert "s3cret" not in str(u)
    with pytest.raises(ValueError, match="redis://host:port/db"):
        parse_url("http://example.internal")


def test_the_seed_s_example_profile_renders_as_in_the_docs():
    script_src = textwrap.dedent("""
    def func(m, x, y, z):
        return x * m + y + z
    """)
    ns = {}
    exec(compile(script_src, "r2.py", "exec"), ns)
    with ds.config.patch(job_id="seed-example"):
        cf = ds.compile(ns["func"])
        for n in (3, 4):
            cf(n, torch.randn(n), torch.randn(n), torch.randn(n))
        state = ds.pgo.render()
    assert state.splitlines()[:5] == [
        "r2.py:2:func:",
        "  L['m']: fully dynamic scalar or tensor",
        "  L['x']: tensor size=[?] stride=[1]",
        "  L['y']: tensor size=[?] stride=[1]",
        "  L['z']: tensor size=[?] stride=[1]",
    ]


# ---------------------------------------------------------------------------- a misbehaving remote store
class _FakeRedis:
    """A Redis that answers every command after `delay` seconds ("slow"), or announces a huge GET
    reply and trickles bytes ("trickle"); stopped by `close()`."""

    def __init__(self, mode: str, delay: float = 1.0):
        self.mode, self.delay, self.stopped = mode, delay, threading.Event()
        self.srv = socket.socket()
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(16)
        self.srv.settimeout(0.1)
        self.url = f"redis://127.0.0.1:{self.srv.getsockname()[1]}/0"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stopped.is_set():
            try:
                c, _ = self.srv.accept()
            except OSError:
                continue
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        f = c.makefile("rb")
        with contextlib.suppress(OSError, ValueError):
            while not self.stopped.is_set():
                line = f.readline()
                if not line:
                    return
                args = []
                for _ in range(int(line[1:-2])):
                    n = int(f.readline()[1:-2])
                    args.append(f.read(n + 2)[:-2])
                if self.mode == "trickle":
                    c.sendall(b"$4000000000\r\n" if args[0].upper() == b"GET" else b"$10\r\n")
                    while not self.stopped.wait(0.05):
                        c.sendall(b"x")
                    return
                if self.stopped.wait(self.delay):
                    return
                c.sendall(b"$-1\r\n" if args[0].upper() == b"GET" else b"+OK\r\n")

    def close(self):
        self.stopped.set()
        self.srv.close()


@pytest.fixture
def fresh_breaker(monkeypatch):
    monkeypatch.setattr(pgo_store, "_REMOTE_DOWN", set())
    monkeypatch.setattr(pgo_store, "_FAILURES", {})


@pytest.mark.parametrize("mode", ["slow", "trickle"])
def test_a_slow_or_trickling_redis_costs_a_compile_at_most_the_timeout(mode, fresh_breaker):
    server = _FakeRedis(mode)
    try:
        with ds.config.patch(job_id=f"slow-redis-{mode}", pgo_remote=server.url, pgo_remote_timeout=0.2), \
                warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            cf = ds.compile(times_two)
            cf(torch.randn(2, 3))  # warm-up: one-time costs of a first compile
            for n in (3, 4, 5, 6):
                t = time.monotonic()
                cf(torch.randn(n, 3))
                assert time.monotonic() - t < 0.2 + 0.5, n  # the read waits the timeout, the writes not at all
            ds.pgo.flush()
        found = pgo_warnings(record)
        assert len(found) == 1 and "unavailable" in str(found[0].message), [str(w.message) for w in found]
        stored = Profile.from_json(open(pgo_store.local_path(ds.config.pgo_dir, f"slow-redis-{mode}"), "rb").read())
        assert stored.sources("times_two")["L['x']"]["size"] == ["?", 3]  # the local store kept working
    finally:
        server.close()


def test_the_redis_client_budget_covers_the_whole_operation_not_each_read():
    server = _FakeRedis("trickle")
    try:
        t = time.monotonic()
        with pytest.raises(RedisError, match="4000000000 bytes"):  # refused before it is buffered
            Redis(server.url, timeout=0.3).get("k")
        with pytest.raises(RedisError, match="time budget"):  # a small reply that never completes
            Redis(server.url, timeout=0.3).set("k", b"v")
        assert time.monotonic() - t < 1.5
    finally:
        server.close()


def test_the_breaker_opens_after_repeated_failures_only(fresh_breaker):
    url = f"redis://127.0.0.1:{_free_port()}/0"
    assert pgo_store.read_remote(url, "k") is None and url not in pgo_store._REMOTE_DOWN  # one failure: retried
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert pgo_store.read_remote(url, "k") is None
    assert url in pgo_store._REMOTE_DOWN and len(pgo_warnings(record)) == 1


def test_the_remote_timeout_is_a_float_knob():
    with ds.config.patch(pgo_remote_timeout=1):
        assert ds.config.pgo_remote_timeout == 1.0
    with pytest.raises(TypeError, match="pgo_remote_timeout"):
        ds.config.pgo_remote_timeout = "fast"


def test_a_process_exits_promptly_and_keeps_its_profile_with_a_stuck_redis(tmp_path):
    server = _FakeRedis("slow", delay=30.0)
    try:
        script = tmp_path / "train.py"
        script.write_text(SCRIPT)
        t = time.monotonic()
        first, err = _run_script(script, DYNASHAPE_CACHE_DIR=str(tmp_path / "cache"), DYNASHAPE_PGO_REMOTE=server.url,
                                 DYNASHAPE_PGO_REMOTE_TIMEOUT="0.3")
        assert time.monotonic() - t < 20 and first["compiles"] == 2, err
        assert "unavailable" in err  # one warning
    finally:
        server.close()
    second, _ = _run_script(script, DYNASHAPE_CACHE_DIR=str(tmp_path / "cache"))  # the exit wrote the profile
    assert second["compiles"] == 1
