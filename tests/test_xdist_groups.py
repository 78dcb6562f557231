"""tests/xdist_groups.py: under `-n N --dist loadgroup`, the tests of
a module-scoped fixture share one worker, a named group shares one worker, and the rest are
spread over the workers.

Expected (written before running): an inner session of three workers over one file with six
tests on a module-scoped fixture, six in a named group and twelve free ones, each test sleeping
0.3 s so that every worker is given work: the module's six report one worker, the group's six
one worker, the module fixture was built once, and the free twelve ran on at least two workers.
"""
from __future__ import annotations

import collections
import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

INNER = '''
import os, time
import pytest

def _note(kind, i):
    with open(os.environ["XDIST_NOTES"], "a") as fh:
        fh.write("%s %s %s\\n" % (kind, i, os.environ["PYTEST_XDIST_WORKER"]))

@pytest.fixture(scope="module")
def shared():
    _note("fixture", 0)
    return os.environ["PYTEST_XDIST_WORKER"]

@pytest.mark.parametrize("i", range(6))
def test_module_fixture(shared, i):
    time.sleep(0.3)
    _note("module", i)
    assert shared == os.environ["PYTEST_XDIST_WORKER"]

@pytest.mark.xdist_group("named")
@pytest.mark.parametrize("i", range(6))
def test_named_group(i):
    time.sleep(0.3)
    _note("named", i)

@pytest.mark.parametrize("i", range(12))
def test_free(i):
    time.sleep(0.3)
    _note("free", i)
'''


def test_groups_share_a_worker_and_the_rest_spread(tmp_path: Path) -> None:
    pytest.importorskip("xdist")  # the `test` extra installs it
    test_file = tmp_path / "inner" / "test_inner.py"
    test_file.parent.mkdir()
    test_file.write_text(INNER)
    notes = tmp_path / "notes"
    env = dict(os.environ, XDIST_NOTES=str(notes),
               PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    res = subprocess.run([sys.executable, "-m", "pytest", "-p", "conftest", "-p",
                          "no:cacheprovider", "-q", "-n", "3", "--dist", "loadgroup",
                          "--basetemp", str(tmp_path / "base"), str(test_file)],
                         cwd=test_file.parent, env=env, capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    assert "24 passed" in res.stdout
    workers: dict[str, list[str]] = collections.defaultdict(list)
    for line in notes.read_text().splitlines():
        kind, _, worker = line.split()
        workers[kind].append(worker)
    assert len(workers["module"]) == 6 and len(set(workers["module"])) == 1, workers
    assert workers["fixture"] == workers["module"][:1]  # built once, where its tests ran
    assert len(workers["named"]) == 6 and len(set(workers["named"])) == 1, workers
    assert len(workers["free"]) == 12 and len(set(workers["free"])) >= 2, workers
