"""Which tests share a pytest-xdist worker under `python -m pytest -n 4 --dist loadgroup`.

Expected behaviour (tests/test_xdist_groups.py checks it):

* A test that uses a module-, class- or package-scoped fixture (a seed bisect, a started
  server, answers cached across the module's tests) runs on the one worker that runs the other
  such tests of its module, as in a serial run: the fixture is built once, and what its tests
  compare among themselves is in one process. Its group is the module's path.
* A test that names its own group (`@pytest.mark.xdist_group("name")`, or in a parametrize
  id's marks) keeps that group; every other test is a unit of its own, sent to whichever
  worker is free.
* xdist 3.8 hands the group to its scheduler by appending `@group` to the node id, which pytest
  9.2's structured node ids ignore (pytest-xdist issue 1386): `--dist loadgroup` then silently
  groups nothing. So the workers also write the groups to a file named by the controller
  (GROUPS_VAR, set before the workers start) and the controller's scheduler reads it once all
  workers have collected. A node id carrying `@group` (older pytest) is grouped as xdist does.
* Order: on a worker the tests marked `slow`, then those of the files in LONG_FIRST (the
  longest in CI's `--durations`), then the rest, each in collection order; xdist hands out
  the groups largest first, then the single tests in that order. The long tests start first
  and the short ones fill the gaps at the end. A serial run keeps pytest's order.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

GROUPS_VAR = "DDPROBE_XDIST_GROUPS"  # the file the workers write {nodeid: group} to
# files with the longest tests (CI's --durations, Dec 2026): an order only, never a grouping
LONG_FIRST = ("tests/test_real_sglang_args.py", "tests/test_faults_wheel.py",
              "tests/test_scenarios.py", "tests/test_bisect_ssh.py",
              "tests/test_faults_interrupt.py", "tests/test_faults_drop.py",
              "tests/test_latent.py", "tests/test_sources_buffers.py", "tests/test_sources_cli.py",
              "tests/test_bisect_manual.py", "tests/test_experiment_seed.py", "tests/test_smoke.py")


def _wider_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs if info is not None else {}
    return any(fd[-1].scope in ("module", "class", "package") for fd in defs.values() if fd)


def group_of(item: pytest.Item) -> str | None:
    """The item's group (see the module text), or None for a unit of its own."""
    mark = item.get_closest_marker("xdist_group")
    if mark is not None:
        return str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
    if _wider_fixture(item):
        return item.nodeid.split("::", 1)[0]
    return None


def mark_groups(items: list[pytest.Item]) -> dict[str, str]:
    """Give each grouped item its xdist_group mark; {nodeid: group} of the grouped ones."""
    groups = {}
    for item in items:
        g = group_of(item)
        if g is None:
            continue
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(g))
        groups[item.nodeid] = g
    return groups


def is_controller(config: pytest.Config) -> bool:
    return (not hasattr(config, "workerinput") and config.pluginmanager.hasplugin("xdist")
            and config.getoption("dist", "no") == "loadgroup"
            and bool(config.getoption("numprocesses", None)))


def configure(config: pytest.Config) -> None:
    """Controller: name the groups file before the workers start (they inherit it)."""
    if is_controller(config):
        fd, path = tempfile.mkstemp(prefix="ddprobe-xdist-groups-", suffix=".json")
        os.close(fd)
        os.environ[GROUPS_VAR] = path


def unconfigure(config: pytest.Config) -> None:
    if is_controller(config) and os.environ.get(GROUPS_VAR):
        Path(os.environ.pop(GROUPS_VAR)).unlink(missing_ok=True)


def _rank(item: pytest.Item) -> int:
    if item.get_closest_marker("slow") is not None:
        return 0
    return 1 if item.nodeid.split("::", 1)[0] in LONG_FIRST else 2


def collected(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Worker (or a serial run): mark the groups; a worker orders the tests (see the module
    text) and writes the groups for the controller."""
    groups = mark_groups(items)
    path = os.environ.get(GROUPS_VAR)
    if path and hasattr(config, "workerinput"):
        items.sort(key=_rank)  # stable: collection order within a rank
        tmp = f"{path}.{os.getpid()}"
        Path(tmp).write_text(json.dumps(groups))
        os.replace(tmp, path)  # every worker collects the same tests: the same content


def make_scheduler(config: pytest.Config, log: object) -> object | None:
    if config.getoption("dist", "no") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class GroupScheduling(LoadGroupScheduling):
        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:
                path = os.environ.get(GROUPS_VAR, "")
                text = Path(path).read_text() if path and Path(path).is_file() else ""
                self.groups = json.loads(text) if text else {}
            g = self.groups.get(nodeid)
            return f"group:{g}" if g is not None else super()._split_scope(nodeid)

    return GroupScheduling(config, log)  # type: ignore[arg-type]
