"""Playbooks run for real: on the built-in testbed host (local transport) and on a testbed
install reached through the real loopback sshd; a failing step reverts the patch it applied.
"""
from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

import pytest
from report_util import write_seed_run

from ddprobe import remote
from ddprobe.cli import main
from ddprobe.inventory import Host, builtin_testbed
from ddprobe.inventory import testbed_prefix as _testbed_prefix
from ddprobe.playbook import (
    ActionResult,
    ActionSpec,
    StepEvent,
    builtin_registry,
    load_playbook,
    run_playbook,
)
from ddprobe.playbook.builtin import campaign_action
from ddprobe.runmodel import build_model
from ddprobe.sources.patches import patch_status, revert_patch
from ddprobe.store import RunRecord, load_run
from ddtestbed.install import sync_testbed

TRITON = "srt/layers/attention/triton_backend.py"
PATCH = "ddtestbed-custom-mask"


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.fixture
def local_testbed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The built-in `testbed` host, installed under a private XDG_DATA_HOME."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("DDPROBE_RUNS", str(tmp_path / "runs"))
    return sync_testbed(_testbed_prefix() / "site").package_dir


def _pb(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "pb.yaml"
    p.write_text(text)
    return p


SMALL = """\
name: small
vars:
  budgets: "8,16,32"
steps:
  - action: facts
    register: facts
  - action: grep-buffers
    with: {backend: triton, budgets: "${budgets}", max_bs: 64}
    register: buffers
    assert: result.suspects.any(it == 'cuda_graph_custom_mask')
  - action: report
"""


def test_small_playbook_on_the_builtin_testbed(local_testbed: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["playbook", "run", str(_pb(tmp_path, SMALL)), "--host", "testbed", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0, doc
    assert doc["status"] == "ok" and [s["status"] for s in doc["steps"]] == ["ok"] * 3
    assert "ddtestbed 0.1.0" in doc["steps"][0]["summary"]
    assert "cuda_graph_custom_mask (srt/layers/attention/triton_backend.py:" in (
        doc["steps"][1]["summary"])
    run_dir = Path(doc["run_dir"])
    assert {p.name for p in run_dir.iterdir()} >= {"journal.jsonl", "report.md", "report.html",
                                                   "report.json", "cells.csv"}
    rec = load_run(run_dir)
    assert rec.finished and rec.meta["command"] == "playbook" and rec.end["exit_code"] == 0
    md = (run_dir / "report.md").read_text()
    assert "grep-buffers (grep-buffers): ok" in md and "No cells were run." in md
    assert "unfinished" not in md  # rendered again after the end was journaled


def _ssh_testbed(make_host, tmp_path: Path) -> tuple[Host, Path]:
    site = tmp_path / "site"
    pkg = sync_testbed(site).package_dir
    return make_host(python=sys.executable, package="ddtestbed",
                     env={"PYTHONPATH": str(site)}), pkg


FAILING = """\
name: failing
vars:
  patch: ddtestbed-custom-mask
steps:
  - action: facts
  - action: grep-buffers
    with: {backend: triton, budgets: "8,16", max_bs: 64}
    register: buffers
  - name: apply the fix
    action: patch-apply
    when: buffers.suspects.any(it == 'cuda_graph_custom_mask')
    with: {patch: "${patch}"}
    register: fix
  - name: this one may fail
    action: grep
    with: {pattern: "(", path: no/such/dir}
    ignore_errors: true
  - name: a check that does not hold
    action: patch-status
    assert: result.applied.count() == 0
  - action: report
"""


@pytest.mark.ssh
def test_failing_step_reverts_the_applied_patch_over_ssh(ssh_opts, make_host,
                                                         tmp_path: Path) -> None:
    host, pkg = _ssh_testbed(make_host, tmp_path)
    before = _sha(pkg / TRITON)
    events: list[StepEvent] = []
    pb = load_playbook(_pb(tmp_path, FAILING), host)
    res = run_playbook(pb, host, on_event=events.append, runs_dir=tmp_path / "runs",
                       opts=ssh_opts)
    assert res.status == "failed" and res.failed_step == 5 and res.exit_code == 1
    assert "assert failed: result.applied.count() == 0" in (res.error or "")
    assert [s.status for s in res.steps] == ["ok", "ok", "ok", "ignored", "failed", "not-run"]
    assert res.reverted == (PATCH,) and res.kept == ()
    assert _sha(pkg / TRITON) == before  # byte for byte
    with remote.connect(host, ssh_opts) as r:
        assert patch_status(r, host=host).entries == ()
    assert [e.kind for e in events if e.kind in ("revert", "fail")] == ["fail", "revert"]
    notes = load_run(res.run_dir).notes
    assert f"reverted patch {PATCH} (a step failed)" in notes


@pytest.mark.ssh
def test_keep_patches_leaves_the_patch_applied(ssh_opts, make_host, sshd, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    host, pkg = _ssh_testbed(make_host, tmp_path)
    before = _sha(pkg / TRITON)
    inv = tmp_path / "hosts.yaml"
    inv.write_text(f"hosts:\n  gpu-a:\n    host: {sshd.alias}\n    python: {sys.executable}\n"
                   f"    package: ddtestbed\n    env:\n      PYTHONPATH: {tmp_path / 'site'}\n")
    code = main(["--inventory", str(inv), "--ssh-config", str(sshd.ssh_config), "playbook",
                 "run", str(_pb(tmp_path, FAILING)), "--host", "gpu-a", "--keep-patches",
                 "--runs", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert code == 1
    assert "FAILED step 5 a check that does not hold" in err
    assert f"patches left applied: {PATCH}" in err
    assert _sha(pkg / TRITON) != before
    with remote.connect(host, ssh_opts) as r:
        assert [e.id for e in patch_status(r, host=host).entries] == [PATCH]
        revert_patch(r, PATCH, host=host)
    assert _sha(pkg / TRITON) == before


def test_interrupt_reverts_then_goes_on_up(local_testbed: Path, tmp_path: Path) -> None:
    before = _sha(local_testbed / TRITON)
    reg = builtin_registry()

    def interrupted(ctx: object, a: dict) -> ActionResult:
        raise KeyboardInterrupt  # what SIGINT raises in the main thread

    reg.register(ActionSpec("wait", "stand-in for a long step hit by Ctrl-C", (), interrupted))
    pb = load_playbook(_pb(tmp_path, f"steps:\n  - action: patch-apply\n    with: {{patch: "
                                     f"{PATCH}}}\n  - action: wait\n"), builtin_testbed(),
                       registry=reg)
    with pytest.raises(KeyboardInterrupt):
        run_playbook(pb, builtin_testbed(), runs_dir=tmp_path / "runs",
                     opts=remote.RemoteOptions())
    assert _sha(local_testbed / TRITON) == before
    (run_dir,) = (tmp_path / "runs").iterdir()
    rec = load_run(run_dir)
    assert rec.end["exit_code"] == 130 and rec.end["reverted"] == [PATCH]
    assert "step 2 wait (wait): failed: interrupted" in rec.notes


def fixture_bisect(hosts: list[Host], budgets: list[int], root: Path) -> RunRecord:
    """A finished bisect run on disk (the seed's cells and verdicts), as `ddprobe.bisect`'s
    runner leaves one; bound by name, exactly like the real one."""
    assert budgets == [8, 16, 32, 64] and hosts[0].name == "testbed"
    return load_run(write_seed_run(root, run_id="20261129-090000-bisect-seed"))


SEED = """\
name: seed
vars:
  budgets: "8,16,32,64"
  fix_budget: 16
steps:
  - action: bisect
    with: {budgets: "${budgets}"}
    register: bisect
  - action: patch-apply
    when: bisect.verdicts.any(kind == 'buffer_sizing' and fix_budget in budgets)
    with: {patch: ddtestbed-custom-mask}
    register: fix
  - action: patch-revert
    when: fix == null
    with: {all: true}
  - action: report
    with: {run: "${bisect.run_id}", formats: [md]}
    register: bisect_report
  - action: report
"""


def test_bisect_results_drive_conditions_and_join_the_report(local_testbed: Path,
                                                             tmp_path: Path) -> None:
    reg = builtin_registry()
    target = f"{__name__}:fixture_bisect"
    base = reg.get("bisect")
    assert base is not None
    reg.register(ActionSpec("bisect", base.help, (target,), campaign_action(target, "bisect"),
                            base.args, mutates=True))
    before = _sha(local_testbed / TRITON)
    pb = load_playbook(_pb(tmp_path, SEED), builtin_testbed(), registry=reg)
    res = run_playbook(pb, builtin_testbed(), runs_dir=tmp_path / "runs",
                       opts=remote.RemoteOptions())
    assert res.ok, res.error
    assert [s.status for s in res.steps] == ["ok", "ok", "skipped", "ok", "ok"]
    assert res.kept == (PATCH,) and _sha(local_testbed / TRITON) != before  # success: kept
    assert res.results["bisect_report"]["files"] == {
        "md": str(tmp_path / "runs" / "20261129-090000-bisect-seed" / "report.md")}
    m = build_model(load_run(res.run_dir))  # the playbook's own run holds the bisect's cells
    assert [(e.budget, e.mode, e.outcome) for e in m.matrices[0].entries] == [
        (8, "graph", "ok"), (16, "graph", "crash"), (16, "eager", "ok"),
        (32, "graph", "garbage"), (64, "graph", "crash")]
    assert [v.kind for v in m.verdicts] == ["buffer_sizing", "graph_capture", "buffer_sizing"]
    html = (res.run_dir / "report.html").read_text()
    assert 'data-budget="16" data-graph="on" data-outcome="crash"' in html


CELLS = """\
name: cells
vars:
  tasks: [fizzbuzz, is_palindrome]
steps:
  - name: production budget, graphs on
    action: run
    with: {budget: 8, graph: true, tasks: "${tasks}"}
    register: b8
    assert: [result.outcome == 'ok', result.probes.passed == 2]
  - name: probe the server the cell left running
    action: probe
    with: {tasks: "${tasks}", concurrency: 2}
    register: probe
    assert: result.summary.passed == result.summary.total
  - name: the seed's first crash
    action: run
    with: {budget: 16, graph: true, tasks: "${tasks}"}
    register: b16
    assert: result.outcome == 'crash' and result.signature.kind == 'cuda_illegal_address'
  - action: report
"""


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_run_and_probe_steps_drive_real_cells(ssh_opts, local_testbed: Path, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    monkeypatch.setenv("DDTESTBED_TIME_SCALE", "0.002")  # a six-minute restart in ~1 s
    base = builtin_testbed()
    host = replace(base, server=replace(base.server, port=_free_port(), health_timeout=60.0))
    pb = load_playbook(_pb(tmp_path, CELLS), host)
    try:
        res = run_playbook(pb, host, runs_dir=tmp_path / "runs",
                       opts=remote.RemoteOptions())
    finally:
        from ddprobe.server.registry import get_manager
        with remote.connect(host, ssh_opts) as r:
            get_manager(r, host).stop()
    assert res.ok, (res.error, [s.summary for s in res.steps])
    assert res.results["b8"]["key"] == "b8-graph" and res.results["probe"]["ok"] is True
    m = build_model(load_run(res.run_dir))
    assert [(e.budget, e.mode, e.outcome) for e in m.matrices[0].entries] == [
        (8, "graph", "ok"), (16, "graph", "crash")]
    assert "b16-graph: crash" in (res.run_dir / "report.md").read_text()


ONE_CELL = """\
name: one cell
steps:
  - action: sweep
    with: {budgets: "8", graph: "on"}
"""


def test_playbook_cell_lines_have_outcomes_and_the_summary_is_on_stdout(
        local_testbed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # issue 24.17: the lines the standalone sweep prints, and a result on stdout
    code = main(["playbook", "run", str(_pb(tmp_path, ONE_CELL)), "--host", "testbed"])
    cap = capsys.readouterr()
    assert code == 0, cap.err[-3000:]
    assert re.search(r"testbed: b8-graph: ok accept [\d.]+ coding \d+/\d+", cap.err), cap.err
    assert "step 1 sweep [sweep]" in cap.out
    assert "playbook one cell on testbed: ok (1 steps)" in cap.out
