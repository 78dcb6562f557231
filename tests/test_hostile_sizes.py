"""Size caps on everything a server sends (issue 14 item 2), against a hostile HTTP server of
our own running as a separate process.

Expected answers, written before the runs: a 1 GiB answer (with or without Content-Length)
is garbage ("runaway answer"), never a crash, and `ddprobe probe` stays under 300 MB of peak
RSS while it happens; 5,000,000 nested brackets are "not usable JSON", no RecursionError and
no traceback; a gzip bomb sent although identity was asked for is refused under the same cap;
four such answers in flight together still stay under the same memory bound.
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import hostile_server

RSS_LIMIT_MB = 300


def _probe(url: str, *extra: str) -> tuple[int, dict | None, str, float]:
    """`ddprobe probe --url` as its own process: exit code, JSON, stderr, peak RSS (MB)."""
    code = ("import resource, sys\nfrom ddprobe.cli import main\nrc = main(sys.argv[1:])\n"
            # VmHWM: this process's own peak (ru_maxrss keeps a forking parent's across exec)
            "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0]\n"
            "sys.stderr.write('\\nPEAK_RSS_KB %d\\n' % int(hwm.split()[1]))\nsys.exit(rc)\n")
    p = subprocess.run([sys.executable, "-c", code, "probe", "--url", url, "--json",
                        "--accept-tokens", "0", *extra],
                       capture_output=True, text=True, timeout=300,
                       env={**os.environ, "NO_COLOR": "1"})
    peak = 0.0
    for line in p.stderr.splitlines():
        if line.startswith("PEAK_RSS_KB "):
            peak = int(line.split()[1]) / 1024
    try:
        doc = json.loads(p.stdout)
    except json.JSONDecodeError:
        doc = None
    return p.returncode, doc, p.stderr, peak


@pytest.fixture
def server(request):
    procs = []

    def make(mode: str, **kw):
        proc, url = hostile_server.start(mode, **kw)
        procs.append(proc)
        return url
    yield make
    for p in procs:
        hostile_server.stop(p)


@pytest.mark.parametrize("mode", ["huge", "chunked"])
def test_a_1gib_answer_is_garbage_and_memory_stays_bounded(server, mode):
    url = server(mode, size=1 << 30)
    rc, doc, err, peak = _probe(url, "--tasks", "fizzbuzz")
    assert "Traceback" not in err, err
    assert doc is not None, err
    r = doc["results"][0]
    assert not r["passed"] and any("runaway" in g for g in r["garbage"]), r
    assert any(f.startswith("runaway") for f in doc["summary"]["garbage_flags"])
    assert rc == 1
    assert 0 < peak < RSS_LIMIT_MB, f"peak RSS {peak:.0f} MB"


def test_concurrent_runaway_answers_share_one_bound(server):
    url = server("chunked", size=1 << 30)
    rc, doc, err, peak = _probe(url, "--tasks", "fizzbuzz,fibonacci,flatten,is_palindrome",
                                "--concurrency", "4")
    assert doc is not None and "Traceback" not in err, err
    assert all(not r["passed"] for r in doc["results"])
    assert 0 < peak < RSS_LIMIT_MB, f"peak RSS {peak:.0f} MB"


def test_deeply_nested_json_is_an_answer_error_not_a_crash(server):
    url = server("deep", size=1_000_000)  # 2 MB: under the size cap, far over the depth cap
    rc, doc, err, peak = _probe(url, "--tasks", "fizzbuzz")
    assert "Traceback" not in err and "RecursionError" not in err, err
    # /generate and chat both get junk: no answer to any probe -> the server error exit
    assert rc != 0 and "not usable JSON" in err + json.dumps(doc or {}), err


def test_gzip_bomb_is_refused_under_the_cap(server):
    url = server("gzip", size=1 << 30)
    rc, doc, err, peak = _probe(url, "--tasks", "fizzbuzz")
    assert "Traceback" not in err, err
    assert doc is not None and any("runaway" in g for g in doc["results"][0]["garbage"]), err
    assert 0 < peak < RSS_LIMIT_MB


def test_log_excerpts_and_tails_are_bounded(tmp_path):
    from ddprobe.untrusted import excerpt
    big = "x" * (50 << 20)
    assert len(excerpt(big, max_chars=4000)) < 4200
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss > 0
