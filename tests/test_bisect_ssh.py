"""`ddprobe bisect` end to end: the testbed behind a real loopback sshd, several scenarios.

Each test writes its own inventory (its own port, workdir and testbed install), runs
`ddprobe bisect ... --json` in-process and checks the verdicts, the run directory, the host
afterwards (no temporary patch left, no server left running) and the restart counts.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from bisect_util import (
    REPO,
    TASKS,
    Site,
    assert_clean,
    bisect_json,
    ddprobe,
    verdicts,
    write_inventory,
)
from testbed_util import free_port

from ddprobe.exitcodes import ExitCode
from ddprobe.remote import connect
from ddprobe.sources.patches import applied_ids, patch_status, revert_patch

pytestmark = pytest.mark.ssh
def test_seed_verdicts_over_ssh(sshd: object, tmp_path: Path, runs: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    site = Site(sshd, tmp_path)
    inv = write_inventory(tmp_path, site)
    cfg = sshd.ssh_config  # type: ignore[attr-defined]
    code, doc = bisect_json(capsys, inv, cfg, "--host", "gpu", "--budgets", "8,16,32,64")
    assert code == int(ExitCode.FAILED)
    v = verdicts(doc)
    assert v[(8,)]["kind"] == "ok"
    assert v[(16,)]["kind"] == "buffer_sizing"
    assert v[(16,)]["buffer"]["attr"] == "cuda_graph_custom_mask"
    assert v[(16,)]["buffer"]["where"].startswith("srt/layers/attention/triton_backend.py:")
    assert v[(32,)]["kind"] == "graph_capture"
    # b64 carries two defects (the scenario's (c) and (b)): the workspace, cured by a smaller
    # max bs, and once cured, b32's capture bug (the cured cell with the real weights fails
    # like b32)
    b64 = [(x["kind"], x["decided_by"]) for x in doc["verdicts"] if x["budgets"] == [64]]
    assert b64 == [("buffer_sizing", "max-bs experiment"), ("graph_capture", "cured cell")]
    # cheap cells (dummy weights, 5 captured sizes, no warm-up) first where the question is
    # only "does it crash": the frontier, b16's oversize and b64's max-bs experiments; real
    # weights for b8 and b32 (no crash proves nothing), b32's eager control and its oversize
    # (straight at x16: failing, x4 could not change the verdict), b8's eager comparison (a pass
    # needs graph output equal to eager), and what each cure leaves: b16's oversize again
    # with the real weights and compared with eager, b64's max bs 16 with the real weights.
    # 14 restarts, 8 of them real
    (g,) = doc["groups"]
    keys = [c["key"] for c in g["cells"]]
    assert sorted(k for k in keys if not k.endswith("+cheap")) == sorted([
        "b8-graph", "b8-eager", "b32-graph", "b32-eager",
        "b32-graph+oversize[cuda_graph_custom_mask]x16",
        "b16-graph+oversize[cuda_graph_custom_mask]", "b16-eager", "b64-graph-bs16"])
    assert len(keys) == doc["restarts_used"] == 14 and doc["restarts_full_sweep"] == 8
    assert v[(16,)]["cheap_cells"] == ["b16-graph"]
    assert "cheap_cells" not in v[(32,)]
    run_dir = Path(doc["run_dir"])
    # each verdict was journaled the moment it was final, in the order of the cells that
    # decided them (the first before the run's end: b8's ok once b32's oversize x16 failed,
    # as x16 curing would have run x4, whose failure could bound the fixed mask)
    finals = [json.loads(x) for x in (run_dir / "journal.jsonl").read_text().splitlines()
              if '"verdict_final"' in x]
    assert len(finals) == 5
    assert [f["final"]["after_cells"] for f in finals] == sorted(
        f["final"]["after_cells"] for f in finals)
    first = finals[0]["final"]["after_cells"]
    assert first < len(keys) - 2
    assert keys[first - 1] == "b32-graph+oversize[cuda_graph_custom_mask]x16"
    assert (run_dir / "journal.jsonl").is_file() and list((run_dir / "logs").glob("*.log"))
    assert_clean(inv, site)
    # the session log of the run, git bisect style, and its replay agree with the run
    assert ddprobe(inv, cfg, "bisect", "log", doc["run_id"]) == 0
    log = capsys.readouterr().out
    assert "ddprobe bisect good b8-graph-bs64" not in log  # the production max bs is not forced
    assert "ddprobe bisect good b8-graph" in log.splitlines()
    assert "# verdict [gpu]: b32 graph_capture" in log


def test_healthy_is_two_restarts_and_exit_0(ssh_opts, sshd: object, tmp_path: Path, runs: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    site = Site(sshd, tmp_path, scenario="healthy")
    inv = write_inventory(tmp_path, site)
    # an interrupted run left its temporary oversize patch applied: the next run reverts it
    from ddprobe.sources.buffers import SizingParams
    from ddprobe.sources.fetch import grep_buffers
    from ddprobe.sources.oversize import make_oversize_patch
    from ddprobe.sources.patches import apply_patch
    h = site.host(inv)
    with connect(h, ssh_opts) as r:  # type: ignore[arg-type]
        rep = grep_buffers(r, h, params=SizingParams(max_bs=64, budgets=(8,)))  # type: ignore[arg-type]
        apply_patch(r, make_oversize_patch(rep, ["cuda_graph_custom_mask"]), host=h)  # type: ignore[arg-type]
        assert applied_ids(patch_status(r, host=h))  # type: ignore[arg-type]
    code, doc = bisect_json(capsys, inv, sshd.ssh_config, "--host", "gpu",  # type: ignore[attr-defined]
                            "--budgets", "8,16,32,64", "--exit-protocol", "bisect")
    assert code == 0
    # b64 restarted and passing (medium: no memcheck on this host); the budgets below it
    # assumed ok (not tested), low confidence; b64 ran cheap first (no crash), then real,
    # then without CUDA graphs: its output equal to eager's
    assert [(v["kind"], v["budgets"], v["confidence"], v["tested"]) for v in doc["verdicts"]] \
        == [("ok", [64], "medium", True), ("ok", [8, 16, 32], "low", False)]
    assert [c["key"] for c in doc["groups"][0]["cells"]] == ["b64-graph+cheap", "b64-graph",
                                                             "b64-eager"]
    assert doc["restarts_used"] == 3 and doc["status"] == "good"
    assert any("greedy answers identical" in e["summary"] for e in doc["verdicts"][0]["evidence"])
    assert any("reverted leftover temporary patch ddprobe-oversize-" in n for n in doc["notes"])
    assert_clean(inv, site)


def test_kernel_scenario_is_a_kernel_verdict(sshd: object, tmp_path: Path, runs: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    site = Site(sshd, tmp_path, scenario="kernel")
    inv = write_inventory(tmp_path, site)
    # today's plan (every cell with the real weights): a garbage failure gains nothing cheap
    code, doc = bisect_json(capsys, inv, sshd.ssh_config, "--host", "gpu",  # type: ignore[attr-defined]
                            "--budgets", "8,16,32,64", "--exit-protocol", "bisect",
                            "--no-cheap-cells")
    assert code == 1
    bad = [v for v in doc["verdicts"] if v["kind"] != "ok"]
    # b64 has its own eager control; b32, between two failures of one mode, is assumed
    assert [(v["kind"], v["budgets"], v["decided_by"]) for v in bad] == [
        ("kernel", [16, 64], "eager control"), ("kernel", [32], "assumed (not tested)")]
    assert doc["restarts_used"] == 6  # with b8's eager comparison


def test_late_threshold_names_the_buffer_and_a_confirmed_patch_is_kept(
        ssh_opts, sshd: object, tmp_path: Path, runs: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    site = Site(sshd, tmp_path, scenario="late")
    inv = write_inventory(tmp_path, site)
    code, doc = bisect_json(capsys, inv, sshd.ssh_config, "--host", "gpu",  # type: ignore[attr-defined]
                            "--budgets", "8,16,32,64", "--confirm-patch", "ddtestbed-custom-mask",
                            "--no-cheap-cells")
    bad = [v for v in doc["verdicts"] if v["kind"] != "ok"]
    assert [(v["kind"], v["budgets"]) for v in bad] == [("buffer_sizing", [64])]
    assert bad[0]["buffer"]["attr"] == "cuda_graph_custom_mask"
    # the only failure mode, fixed by the patch: its own exit code and next step
    assert bad[0]["patch_confirmed"] is True and code == int(ExitCode.FIXED) == 14
    assert "ddtestbed-custom-mask fixes it" in bad[0]["next_step"]
    assert "verify a fix" not in bad[0]["next_step"] and "--confirm-patch" not in \
        bad[0]["next_command"]
    (g,) = doc["groups"]
    diagnosis = [c for c in g["cells"] if c["purpose"] != "confirm"]
    # the search first (no divergence seen yet), so only b32, the kept budget once the search
    # is settled, is compared with eager (b16's comparison could no longer change a verdict);
    # and the cured b64 (the oversize cell passes) compared with eager too: what the cure
    # leaves
    assert sorted(c["key"] for c in diagnosis) == sorted([
        "b64-graph", "b16-graph", "b32-graph", "b32-eager",
        "b64-graph+oversize[cuda_graph_custom_mask]", "b64-eager"])
    assert len(g["cells"]) == len(diagnosis) + 1
    assert g["patch_kept"] is True
    h = site.host(inv)
    with connect(h, ssh_opts) as r:  # type: ignore[arg-type]
        assert applied_ids(patch_status(r, host=h)) == ["ddtestbed-custom-mask"]  # type: ignore[arg-type]
        revert_patch(r, "ddtestbed-custom-mask", host=h)  # type: ignore[arg-type]
    assert_clean(inv, site)


def test_unreachable_host_is_a_skip_for_git_bisect(sshd: object, tmp_path: Path, runs: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    site = Site(sshd, tmp_path)
    inv = tmp_path / "hosts.yaml"
    inv.write_text("hosts:\n  gone:\n    host: 127.0.0.1\n    port: "
                   f"{free_port()}\n    python: {sys.executable}\n")
    code = ddprobe(inv, sshd.ssh_config, "bisect", "--host", "gone",  # type: ignore[attr-defined]
                   "--budgets", "8,16", "--exit-protocol", "bisect")
    assert code == int(ExitCode.BISECT_SKIP)
    assert "error" in capsys.readouterr().err
    _ = site


def _journal_cells(run_dir: Path) -> int:
    j = run_dir / "journal.jsonl"
    if not j.exists():
        return 0
    return sum(1 for ln in j.read_text().splitlines() if '"type": "cell"' in ln)


def test_resume_after_sigkill_repeats_nothing(sshd: object, tmp_path: Path, runs: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    site = Site(sshd, tmp_path, scenario="late")
    inv = write_inventory(tmp_path, site)
    cfg = sshd.ssh_config  # type: ignore[attr-defined]
    env = dict(os.environ, DDPROBE_RUNS=str(runs), PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-m", "ddprobe", "-i", str(inv), "--ssh-config",
                             str(cfg), "bisect", "--host", "gpu", "--budgets", "8,16,32,64",
                             "--tasks", TASKS, "--no-cheap-cells"], env=env,
                            stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        run_dir = None
        while time.monotonic() < deadline:
            dirs = list(runs.glob("*-bisect-*")) if runs.is_dir() else []
            if dirs and _journal_cells(dirs[0]) >= 2:
                run_dir = dirs[0]
                break
            assert proc.poll() is None, "bisect ended before it could be killed"
            time.sleep(0.05)
        assert run_dir is not None, "no progress before the deadline"
    finally:
        proc.send_signal(signal.SIGKILL)  # only ddprobe itself: the server it started survives
        proc.wait()
    done_before = _journal_cells(run_dir)
    assert done_before >= 2
    code, doc = bisect_json(capsys, inv, cfg, "--resume", run_dir.name)
    bad = [v for v in doc["verdicts"] if v["kind"] != "ok"]
    assert [(v["kind"], v["budgets"]) for v in bad] == [("buffer_sizing", [64])]
    assert bad[0]["buffer"]["attr"] == "cuda_graph_custom_mask"
    # fewer restarts than starting over: the journaled cells were not run again
    assert doc["restarts_used"] == doc["restarts_this_invocation"] + done_before
    # the 6 of a run that was never killed (the late test above): the frontier, b32's eager
    # comparison (the kept budget), b64's oversize and the cured b64 compared with eager
    assert doc["restarts_this_invocation"] < doc["restarts_used"] == 6
    assert doc["run_id"] == run_dir.name and code == 1
    assert_clean(inv, site)
    # a finished run cannot be resumed again (its verdicts are in the journal)
    assert ddprobe(inv, cfg, "bisect", "--resume", run_dir.name) == int(ExitCode.USAGE)


def test_identical_hosts_share_rounds(sshd: object, sshd2: object, tmp_path: Path, runs: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    a = Site(sshd, tmp_path, name="gpu-a", scenario="late")
    b = Site(sshd2, tmp_path, name="gpu-b", scenario="late")
    inv = write_inventory(tmp_path, a, b)
    merged = tmp_path / "ssh_config"
    merged.write_text(sshd.ssh_config.read_text().split("Host *")[0]  # type: ignore[attr-defined]
                      + sshd2.ssh_config.read_text())  # type: ignore[attr-defined]
    code, doc = bisect_json(capsys, inv, merged, "--host", "gpu-a,gpu-b",
                            "--budgets", "8,16,32,64")
    (g,) = doc["groups"]
    assert g["hosts"] == ["gpu-a", "gpu-b"]
    assert g["rounds"] < g["restarts"]  # two cells per round
    assert {c["host"] for c in g["cells"]} == {"gpu-a", "gpu-b"}
    bad = [v for v in doc["verdicts"] if v["kind"] != "ok"]
    assert [(v["kind"], v["budgets"]) for v in bad] == [("buffer_sizing", [64])]
    assert code == 1
    assert_clean(inv, a)
    assert_clean(inv, b)


def test_differing_hosts_run_side_by_side_and_disagree(
        sshd: object, sshd2: object, tmp_path: Path, runs: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    a = Site(sshd, tmp_path, name="b300", scenario="late", labels="gpu: B300, arch: sm_103")
    b = Site(sshd2, tmp_path, name="rtx", scenario="healthy", labels="gpu: RTX, arch: sm_120")
    inv = write_inventory(tmp_path, a, b)
    merged = tmp_path / "ssh_config"
    merged.write_text(sshd.ssh_config.read_text().split("Host *")[0]  # type: ignore[attr-defined]
                      + sshd2.ssh_config.read_text())  # type: ignore[attr-defined]
    code, doc = bisect_json(capsys, inv, merged, "--host", "b300,rtx", "--budgets", "8,16,32,64")
    assert sorted(g["name"] for g in doc["groups"]) == ["b300", "rtx"]
    (d,) = doc["disagreements"]
    assert d["budget"] == 64 and d["per_group"] == {"b300": "buffer_sizing", "rtx": "ok"}
    assert "architecture-specific" in d["text"]
    assert code == 1


def test_host_pair_with_different_gpus_never_shares_rounds(
        sshd: object, sshd2: object, tmp_path: Path, runs: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Ground truth (the scenario headers, written first): `pair-b300-kernel` b8 ok, b16/b32/b64
    kernel; `h200` all ok. No labels: only the facts (the testbed's nvidia-smi stand-in names
    each scenario's GPU) keep the two apart, so each gets verdicts measured on itself."""
    a = Site(sshd, tmp_path, name="b300", scenario="pair-b300-kernel")
    b = Site(sshd2, tmp_path, name="h200", scenario="h200")
    inv = write_inventory(tmp_path, a, b)
    merged = tmp_path / "ssh_config"
    merged.write_text(sshd.ssh_config.read_text().split("Host *")[0]  # type: ignore[attr-defined]
                      + sshd2.ssh_config.read_text())  # type: ignore[attr-defined]
    code, doc = bisect_json(capsys, inv, merged, "--host", "b300,h200", "--budgets",
                            "8,16,32,64", "--thorough")
    groups = {g["name"]: g for g in doc["groups"]}
    assert set(groups) == {"b300", "h200"}
    assert groups["b300"]["identity"]["gpu"] == "NVIDIA B300 SXM6 (10.3)"
    assert groups["h200"]["identity"]["gpu"] == "NVIDIA H200 (9.0)"
    assert {c["host"] for c in groups["b300"]["cells"]} == {"b300"}
    assert {c["host"] for c in groups["h200"]["cells"]} == {"h200"}
    per: dict[str, dict[int, str]] = {}
    for v in doc["verdicts"]:
        for x in v["budgets"]:
            per.setdefault(v["host"], {})[x] = v["kind"]
    assert per["b300"] == {8: "ok", 16: "kernel", 32: "kernel", 64: "kernel"}
    assert per["h200"] == {8: "ok", 16: "ok", 32: "ok", 64: "ok"}
    assert [d["budget"] for d in doc["disagreements"]] == [16, 32, 64]
    assert all("architecture-specific" in d["text"] for d in doc["disagreements"])
    assert any("do not share rounds: gpu differs" in n for n in doc["notes"])
    assert code == 1
    assert_clean(inv, a)
    assert_clean(inv, b)
