"""The probe sandbox sees nothing of the user (issue 14 item 1): every hostile payload of
tests/hostile_payloads.py, with real canaries, under both backends, as root and as an
unprivileged user.

Expected answer, written before the runs: 0 leaks for every payload and backend; bubblewrap
is the backend used where it works; the backend is named in the probe output.
"""
from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import hostile_payloads

ROOT = os.geteuid() == 0
BACKENDS = ["bubblewrap", "namespaces"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_payload_leaks_anything(backend, tmp_path, monkeypatch):
    if backend == "bubblewrap" and not shutil.which("bwrap"):
        pytest.skip("bubblewrap is not installed (apt install bubblewrap)")
    monkeypatch.setenv("DDPROBE_SANDBOX", "auto" if backend == "bubblewrap" else "namespaces")
    home = Path("/home") / f"ddprobe-canary-{uuid.uuid4().hex[:8]}" if ROOT else tmp_path / "h"
    c = hostile_payloads.Canaries(home)
    try:
        c.plant()
        outcomes = hostile_payloads.run_all(c)
    finally:
        c.close()
        shutil.rmtree(home, ignore_errors=True)
    assert len(outcomes) >= 10
    assert {o.backend for o in outcomes} == {backend if backend == "bubblewrap"
                                             else "namespaces (own launcher)"}
    leaks = {o.payload: o.leaked for o in outcomes if o.leaked}
    assert leaks == {}


def _sandbox_user() -> tuple[int, Path]:
    name = "ddprobe-sbxtest"
    for attempt in range(50):
        try:
            pw = pwd.getpwnam(name)
            break
        except KeyError:
            pass
        # a session beside this one (an xdist worker) may be adding the same user: useradd
        # then fails (exists, or /etc/passwd locked) and the next look finds it
        res = subprocess.run(["useradd", "--system", "--no-create-home", "--shell",
                              "/usr/sbin/nologin", name], capture_output=True, text=True)
        if res.returncode not in (0, 9, 10) or attempt == 49:
            raise AssertionError(f"useradd {name} failed ({res.returncode}): {res.stderr}")
        if res.returncode != 0:
            time.sleep(0.1)
    home = Path("/home") / f"{name}-{uuid.uuid4().hex[:6]}"
    home.mkdir(parents=True)
    os.chown(home, pw.pw_uid, pw.pw_gid)
    home.chmod(0o700)
    return pw.pw_uid, home


@pytest.mark.skipif(not ROOT, reason="creating an unprivileged test user needs root "
                    "(useradd); run the suite as root, or this test is skipped")
@pytest.mark.skipif(not shutil.which("setpriv"), reason="needs setpriv (util-linux)")
@pytest.mark.parametrize("backend", BACKENDS)
def test_no_payload_leaks_as_an_unprivileged_user(backend):
    if backend == "bubblewrap" and not shutil.which("bwrap"):
        pytest.skip("bubblewrap is not installed (apt install bubblewrap)")
    uid, home = _sandbox_user()
    py = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")
    if py is None:
        pytest.skip("no system python3 the test user can run")
    payloads = Path(hostile_payloads.__file__).resolve()
    # the repo may sit under /root (0700): give the user a copy of the stdlib files (sandbox.py
    # and the programs it reads as text)
    work = home / "code"
    (work / "tests").mkdir(parents=True)
    (work / "ddprobe" / "probes").mkdir(parents=True)
    shutil.copy(payloads, work / "tests" / "hostile_payloads.py")
    src = payloads.parents[1] / "ddprobe" / "probes"
    for f in ("sandbox.py", "_launcher.py", "_harness.py", "_testrunner.py"):
        shutil.copy(src / f, work / "ddprobe" / "probes" / f)
    for p in [work, *work.rglob("*")]:
        os.chown(p, uid, uid)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home),
           "DDPROBE_SANDBOX": "auto" if backend == "bubblewrap" else "namespaces"}
    try:
        cp = subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                             py, str(work / "tests" / "hostile_payloads.py"), "--home",
                             str(home)], capture_output=True, text=True, timeout=240,
                            cwd="/", env=env)
        assert cp.returncode == 0, cp.stderr
        rows = [json.loads(ln) for ln in cp.stdout.splitlines() if ln.startswith("{")]
    finally:
        shutil.rmtree(home, ignore_errors=True)
    assert len(rows) >= 10
    want = "bubblewrap" if backend == "bubblewrap" else "namespaces (own launcher)"
    assert {r["backend"] for r in rows} == {want}, rows
    assert {r["payload"]: r["leaked"] for r in rows if r["leaked"]} == {}


def test_probe_output_names_the_sandbox(tmp_path):
    sys.path.insert(0, str(Path(__file__).parent))
    import hostile_server

    from ddprobe.probes.runner import run_probes
    proc, url = hostile_server.start("answer", answer="```python\ndef fizzbuzz(n):\n"
                                     "    return str(n)\n```\n")
    try:
        rep = run_probes(url, tasks=["fizzbuzz"], accept_tokens=0)
    finally:
        hostile_server.stop(proc)
    assert rep.sandbox in ("bubblewrap", "namespaces")
    assert rep.to_dict()["sandbox"] == rep.sandbox
