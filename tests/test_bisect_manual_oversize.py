"""The manual bisect's oversize step (issue 24.3): every instruction names the factor its cell
asks for, `ddprobe bisect oversize --host H` applies exactly that temporary patch on a real
host (the testbed behind the loopback sshd), `--revert` takes it off, and the verdicts do not
claim ddprobe reverted a patch it never applied itself.

Expected, written before running: at b32 of the seed (garbage, a graph capture bug) the x4
oversize does not cure, so the next cell is the x16 one; its instruction says x16, the patch
applied is `ddprobe-oversize-x16-...` and enlarges cuda_graph_custom_mask on the host."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from bisect_util import Site, write_inventory

from ddprobe.cli import main
from ddprobe.remote import RemoteOptions, connect
from ddprobe.sources.patches import applied_ids, patch_status

pytestmark = pytest.mark.ssh

SUSPECT = "cuda_graph_custom_mask@srt/layers/attention/triton_backend.py:124"


def _next(capsys: pytest.CaptureFixture[str]) -> tuple[dict, str]:
    assert main(["bisect", "next", "--json"]) in (0, 1, 6)
    doc = json.loads(capsys.readouterr().out)
    assert main(["bisect", "next"]) in (0, 1, 6)
    return doc, capsys.readouterr().out


def test_the_oversize_step_names_its_factor_and_ddprobe_applies_it(
        sshd: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DDPROBE_BISECT_SESSION", str(tmp_path / "BISECT_SESSION"))
    site = Site(sshd, tmp_path)
    inv = write_inventory(tmp_path, site)
    cfg = str(sshd.ssh_config)  # type: ignore[attr-defined]
    g = ["-i", str(inv), "--ssh-config", cfg]
    assert main(["bisect", "start", "--budgets", "32", "--max-bs", "64", "--suspect",
                 SUSPECT]) == 0
    capsys.readouterr()
    # a person at b32 of the seed: graphs garbage, eager passes, no oversize cures
    for _ in range(8):
        doc, text = _next(capsys)
        nxt = doc["next"]
        assert nxt is not None, doc
        if nxt["buffers"] and "x16" in nxt["key"]:
            break
        if nxt["buffers"]:  # the x4 step: its instruction says x4
            assert "enlarged x4" in doc["next"]["run"] and "x16" not in doc["next"]["run"]
        verb = ["good"] if not nxt["config"]["graph"] else ["bad", "--mode", "garbage"]
        assert main(["bisect", *verb]) == 0
        capsys.readouterr()
    else:
        raise AssertionError("never reached the x16 oversize step")
    assert "enlarged x16" in nxt["run"] and "x4" not in nxt["run"], nxt["run"]
    assert "ddprobe bisect oversize --host HOST" in text and "--revert" in text

    # the command applies that very patch on the host, from the host's own sources
    assert main([*g, "bisect", "oversize", "--host", "gpu", "--json"]) == 0
    applied = json.loads(capsys.readouterr().out)
    assert applied["factor"] == 16 and applied["buffers"] == ["cuda_graph_custom_mask"]
    assert applied["patch"].startswith("ddprobe-oversize-x16-")
    h = site.host(inv)
    with connect(h, RemoteOptions(ssh_config=cfg)) as r:  # type: ignore[arg-type]
        assert applied_ids(patch_status(r, host=h)) == [applied["patch"]]  # type: ignore[arg-type]
    src = [p.read_text() for p in site.prefix.rglob("triton_backend.py")]
    assert src and any(") * 16" in t for t in src), "not enlarged x16 on the host"
    # twice is a no-op; --revert takes it off
    assert main([*g, "bisect", "oversize", "--host", "gpu", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["already_applied"] is True
    assert main([*g, "bisect", "oversize", "--revert", "--host", "gpu", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["reverted"] == [applied["patch"]]
    with connect(h, RemoteOptions(ssh_config=cfg)) as r:  # type: ignore[arg-type]
        assert applied_ids(patch_status(r, host=h)) == []  # type: ignore[arg-type]

    # finish: the verdict's oversize evidence says who applied the patch, not "reverted"
    for _ in range(8):
        doc, _ = _next(capsys)
        if doc["done"]:
            break
        verb = ["good"] if not doc["next"]["config"]["graph"] else ["bad", "--mode", "garbage"]
        assert main(["bisect", *verb]) == 0
        capsys.readouterr()
    ev = [e["summary"] for v in doc["verdicts"] for e in v["evidence"] if e["kind"] == "oversize"]
    assert ev and all("reverted)" not in e and "ddprobe bisect oversize" in e for e in ev), ev


def test_oversize_when_the_next_cell_needs_no_patch(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DDPROBE_BISECT_SESSION", str(tmp_path / "BISECT_SESSION"))
    assert main(["bisect", "start", "--budgets", "8,16", "--suspect", SUSPECT]) == 0
    capsys.readouterr()
    # the next cell is the frontier's: no patch; refused before any host is contacted
    assert main(["bisect", "oversize", "--host", "testbed"]) == 2
    assert "is not an oversize experiment" in capsys.readouterr().err
