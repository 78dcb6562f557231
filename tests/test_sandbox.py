"""The probe sandbox contains hostile answers: each case runs for real and checks containment."""
from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from ddprobe.probes import sandbox
from ddprobe.probes.sandbox import (
    SandboxLimits,
    run_code,
    run_code_async,
    run_files_async,
    run_tests,
)

ROOT = os.geteuid() == 0
FAST = SandboxLimits(timeout_s=4.0, cpu_s=2, nproc=16)


def _survivors(token: str) -> list[int]:
    """Pids whose command line mentions `token` (our unique program file name)."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes()
        except OSError:
            continue
        if token.encode() in cmd:
            found.append(int(d.name))
    return found


def _no_survivors(token: str, within: float = 3.0) -> bool:
    deadline = time.monotonic() + within
    while _survivors(token):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _run_named(source: str, limits: SandboxLimits) -> tuple[str, object]:
    token = f"prog_{uuid.uuid4().hex}.py"
    res = asyncio.run(run_files_async({token: source}, [token], limits=limits))
    return token, res


def test_clean_run_reports_every_layer() -> None:
    res = run_code("import os\nprint(os.getcwd())\nprint(sorted(os.environ))\n")
    assert res.ok, res
    # every layer is either in place or called out in the notes: nothing silently missing
    text = " ".join(res.isolation + res.notes)
    for layer in ("network", "pid namespace", "read-only", "tmpfs"):
        assert layer in text, (layer, res)
    assert "network namespace (no network)" in res.isolation, res.notes
    workdir = res.stdout.splitlines()[0]
    assert workdir.startswith(tempfile_prefix())
    assert not os.path.exists(workdir)  # the work dir is removed afterwards


def tempfile_prefix() -> str:
    import tempfile
    return os.path.join(tempfile.gettempdir(), "ddprobe-sbx-")


def test_environment_is_scrubbed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DDPROBE_TEST_SECRET", "hunter2")
    monkeypatch.setenv("SSH_AUTH_SOCK", "/tmp/agent.sock")
    res = run_code("import os\nprint(dict(os.environ))\n")
    assert res.ok
    assert "hunter2" not in res.stdout and "SSH_AUTH_SOCK" not in res.stdout
    assert "'PATH'" in res.stdout


def test_infinite_cpu_loop_is_stopped_by_the_cpu_limit() -> None:
    t0 = time.monotonic()
    res = run_code("while True:\n    pass\n", limits=SandboxLimits(timeout_s=10, cpu_s=1))
    took = time.monotonic() - t0
    assert not res.ok
    assert res.signal in (signal.SIGXCPU, signal.SIGKILL), res
    assert "CPU limit" in res.reason or "killed" in res.reason
    # the CPU limit ended it, not the 10 s wall clock (no clock needed for that), and before
    # the wall clock would have (1 s of CPU can take several seconds on a loaded machine)
    assert not res.reason.startswith("timeout after"), res.reason
    assert took < 10, took


def test_sleeping_loop_hits_the_wall_clock_timeout() -> None:
    token, res = _run_named("import time\nwhile True:\n    time.sleep(1)\n",
                            SandboxLimits(timeout_s=1.5))
    assert res.timed_out and not res.ok  # type: ignore[attr-defined]
    assert res.reason.startswith("timeout after")  # type: ignore[attr-defined]
    # it never ends by itself: the limit stopped it (upper bound generous for a loaded machine)
    assert 1.4 < res.duration_s < 10  # type: ignore[attr-defined]
    assert _no_survivors(token)


def test_fork_bomb_is_contained_and_leaves_nothing_behind() -> None:
    bomb = ("import os\n"
            "while True:\n"
            "    try:\n"
            "        os.fork()\n"
            "    except OSError:\n"
            "        pass\n")
    t0 = time.monotonic()
    token, res = _run_named(bomb, SandboxLimits(timeout_s=2.0, cpu_s=2, nproc=16))
    assert not res.ok  # type: ignore[attr-defined]
    # contained by its 2 s limit (generous for a loaded machine: an uncontained bomb never ends)
    assert time.monotonic() - t0 < 30
    assert _no_survivors(token), _survivors(token)


def test_fork_limit_is_enforced() -> None:
    counter = ("import os, sys, time\n"
               "n = 0\n"
               "while True:\n"
               "    try:\n"
               "        pid = os.fork()\n"
               "    except OSError as e:\n"
               "        print('EAGAIN after', n, e.errno, flush=True)\n"
               "        break\n"
               "    if pid == 0:\n"
               "        time.sleep(30)\n"
               "        os._exit(0)\n"
               "    n += 1\n"
               "    if n > 500:\n"
               "        print('UNLIMITED', flush=True)\n"
               "        break\n")
    token, res = _run_named(counter, SandboxLimits(timeout_s=4.0, nproc=12))
    out = res.stdout  # type: ignore[attr-defined]
    assert "UNLIMITED" not in out
    n = int(out.split("EAGAIN after")[1].split()[0])
    assert n < 12, out
    # the sleeping children die with the sandbox even though the parent exited normally
    assert _no_survivors(token), _survivors(token)


def test_setsid_daemon_does_not_outlive_the_sandbox() -> None:
    escape = ("import os, time\n"
              "if os.fork() == 0:\n"
              "    os.setsid()\n"
              "    if os.fork() == 0:\n"
              "        time.sleep(60)\n"
              "    os._exit(0)\n"
              "print('parent done')\n")
    token, res = _run_named(escape, SandboxLimits(timeout_s=5))
    assert res.ok and "parent done" in res.stdout  # type: ignore[attr-defined]
    assert _no_survivors(token), _survivors(token)


@pytest.mark.parametrize("alloc", ["x = bytearray(8 << 30)", "x = [0] * (10 ** 10)",
                                   "x = 'a' * (6 << 30)"])
def test_huge_allocation_fails_inside_the_sandbox(alloc: str) -> None:
    res = run_code(alloc + "\nprint('allocated')\n", limits=SandboxLimits(timeout_s=10))
    assert not res.ok
    assert "allocated" not in res.stdout
    assert "MemoryError" in res.stderr or res.signal is not None, res


def test_moderate_allocation_is_allowed() -> None:
    res = run_code("x = bytearray(100 << 20)\nprint(len(x))\n")
    assert res.ok and res.stdout.strip() == str(100 << 20)


def test_deleting_files_outside_the_work_dir_fails_and_canary_survives(tmp_path: Path) -> None:
    canary = tmp_path / "canary.txt"
    canary.write_text("alive")
    # even a world-writable file in a world-writable directory must survive
    tmp_path.chmod(0o777)
    canary.chmod(0o666)
    code = ("import os, shutil, glob\n"
            f"targets = [{str(canary)!r}, {str(tmp_path)!r}, '/tmp', '/work',\n"
            "           os.path.expanduser('~')]\n"
            "for t in targets:\n"
            "    for op in (os.remove, shutil.rmtree):\n"
            "        try:\n"
            "            op(t)\n"
            "            print('deleted', t)\n"
            "        except OSError as e:\n"
            "            print('refused', t, type(e).__name__)\n"
            "open('mine.txt', 'w').write('work dir is writable')\n"
            "print(open('mine.txt').read())\n")
    res = run_code(code)
    assert canary.read_text() == "alive"
    assert f"deleted {canary}" not in res.stdout
    assert "work dir is writable" in res.stdout, res


def test_cannot_connect_to_a_loopback_server() -> None:
    accepted: list[object] = []
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(0.2)
    port = srv.getsockname()[1]
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, addr = srv.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            accepted.append(addr)
            conn.close()

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    try:
        # prove the server really answers from outside the sandbox
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        deadline = time.monotonic() + 2
        while not accepted and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(accepted) == 1
        code = ("import socket\n"
                "for host in ('127.0.0.1', 'localhost', '::1'):\n"
                "    try:\n"
                f"        socket.create_connection((host, {port}), timeout=2)\n"
                "        print('CONNECTED', host)\n"
                "    except OSError as e:\n"
                "        print('blocked', host, e)\n")
        res = run_code(code)
        assert "CONNECTED" not in res.stdout, res
        assert res.stdout.count("blocked") == 3
        time.sleep(0.3)
        assert len(accepted) == 1  # nothing new reached the server
    finally:
        stop.set()
        srv.close()
        th.join(timeout=2)


def test_cannot_reach_a_unix_socket_under_tmp() -> None:
    d = Path("/tmp") / f"ddprobe-sock-{uuid.uuid4().hex[:8]}"
    d.mkdir(mode=0o777)
    d.chmod(0o777)
    path = d / "s"
    srv = socket.socket(socket.AF_UNIX)
    try:
        srv.bind(str(path))
        path.chmod(0o777)
        srv.listen()
        srv.settimeout(0.5)
        code = ("import socket\ns = socket.socket(socket.AF_UNIX)\n"
                f"try:\n    s.connect({str(path)!r})\n    print('CONNECTED')\n"
                "except OSError as e:\n    print('blocked', type(e).__name__)\n")
        res = run_code(code)
        assert "blocked" in res.stdout and "CONNECTED" not in res.stdout, res
        with pytest.raises(TimeoutError):
            srv.accept()
    finally:
        srv.close()
        shutil.rmtree(d, ignore_errors=True)


def test_output_flood_is_capped_and_timed_out() -> None:
    res = run_code("while True:\n    print('x' * 1000)\n",
                   limits=SandboxLimits(timeout_s=1.5, output_bytes=10_000))
    assert res.timed_out and res.truncated
    assert len(res.stdout) <= 10_000


def test_disk_fill_is_limited() -> None:
    res = run_code("with open('big', 'wb') as f:\n"
                   "    for _ in range(100):\n"
                   "        f.write(b'x' * (4 << 20))\n"
                   "print('wrote 400 MiB')\n")
    assert not res.ok and "wrote 400 MiB" not in res.stdout
    assert "File too large" in res.stderr or "No space left" in res.stderr, res.stderr


def test_run_tests_pass_fail_and_fake_success() -> None:
    ok = run_tests("def inc(x):\n    return x + 1\n", "assert inc(1) == 2\n")
    assert ok.passed and ok.reason == "ok"
    bad = run_tests("def inc(x):\n    return x\n", "assert inc(0) == 0\nassert inc(1) == 2\n")
    assert not bad.passed
    assert bad.reason == "tests: AssertionError:  at tests.py:2: assert inc(1) == 2"
    for fake in ("import sys\nsys.exit(0)\n", "import os\nos._exit(0)\n", "raise SystemExit\n"):
        r = run_tests(fake, "assert inc(1) == 2\n")
        assert not r.passed, fake
    syn = run_tests("def inc(:\n", "assert inc(1) == 2\n")
    assert not syn.passed and "SyntaxError" in syn.reason
    hang = run_tests("def inc(x):\n    while True:\n        pass\n", "assert inc(1) == 2\n",
                     limits=SandboxLimits(timeout_s=5, cpu_s=1))
    assert not hang.passed and ("CPU limit" in hang.reason or "timeout" in hang.reason)


def test_sandboxes_run_concurrently() -> None:
    async def many() -> list[float]:
        t0 = time.monotonic()
        results = await asyncio.gather(*(run_code_async("import time\ntime.sleep(1)\n")
                                         for _ in range(8)))
        assert all(r.ok for r in results)
        return [time.monotonic() - t0]

    (wall,) = asyncio.run(many())
    # 8 x 1 s sequentially would be > 8 s; 7.5 leaves room for sandbox start-up under load
    assert wall < 7.5, wall


@pytest.mark.skipif(not ROOT or not shutil.which("setpriv"),
                    reason="needs root to run the test as an unprivileged user")
def test_unprivileged_user_gets_user_namespace_isolation() -> None:
    """The non-root path: user namespace (like `unshare -rn`), same layers, own files safe."""
    uid = 54321
    home = Path("/home") if Path("/home").is_dir() else Path("/var/tmp")
    d = home / f"ddprobe-canary-{uuid.uuid4().hex[:8]}"
    d.mkdir()
    canary = d / "canary.txt"
    canary.write_text("alive")
    os.chown(d, uid, uid)
    os.chown(canary, uid, uid)
    code = ("import os, socket\n"
            f"try:\n    os.remove({str(canary)!r})\n    print('DELETED')\n"
            "except OSError as e:\n    print('refused', e.errno)\n"
            "try:\n    socket.create_connection(('127.0.0.1', 22), timeout=2)\n"
            "    print('CONNECTED')\nexcept OSError as e:\n    print('blocked')\n")
    # sandbox.py is stdlib-only: load it by path so the system interpreter (no httpx) can run it
    sandbox_py = Path(__file__).resolve().parents[1] / "ddprobe" / "probes" / "sandbox.py"
    prog = ("import sys, json, importlib.util\n"
            f"spec = importlib.util.spec_from_file_location('sbx', {str(sandbox_py)!r})\n"
            "mod = importlib.util.module_from_spec(spec)\n"
            "sys.modules['sbx'] = mod\n"
            "spec.loader.exec_module(mod)\n"
            "run_code = mod.run_code\n"
            f"r = run_code({code!r})\n"
            "print(json.dumps({'out': r.stdout, 'iso': r.isolation, 'notes': r.notes}))\n")
    try:
        py = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin") or sys.executable
        cp = subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                             py, "-c", prog], capture_output=True, text=True, timeout=60,
                            cwd="/", env={"PATH": "/usr/bin:/bin", "HOME": str(d)})
        assert cp.returncode == 0, cp.stderr
        import json
        data = json.loads(cp.stdout.strip().splitlines()[-1])
        text = " ".join(data["iso"] + data["notes"])
        assert canary.read_text() == "alive"
        assert "DELETED" not in data["out"] and "CONNECTED" not in data["out"]
        if "network namespace (no network)" not in data["iso"]:
            assert "network NOT isolated" in text  # said clearly, never silently
        else:
            assert "blocked" in data["out"] and "refused" in data["out"]
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_the_bubblewrap_probe_runs_once_for_many_sandboxes() -> None:
    """Expected: five sandbox runs (each with a fresh random uid when root) probe bubblewrap
    once: the cache is keyed on what the probe's outcome depends on, never the uid drawn."""
    if shutil.which("bwrap", path=sandbox._SYSTEM_PATH) is None:
        pytest.skip("bubblewrap is not installed (apt install bubblewrap)")
    sandbox._BWRAP_OK.clear()
    for _ in range(5):
        assert run_code("print(1)\n").ok
    assert len(sandbox._BWRAP_OK) == 1, sandbox._BWRAP_OK
