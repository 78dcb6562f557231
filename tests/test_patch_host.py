"""Patches on a real install (a copy of the sglang 0.5.10 wheel) through a real sshd.

Every refusal is checked by hashing the whole install tree before and after.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from patch_util import RUNNER, SHIPPED, TRITON, copy_install, sha, tree_hash

from ddprobe import remote
from ddprobe.cli import main
from ddprobe.errors import PatchError
from ddprobe.hostside.patchtext import Patch, format_patch, make_file_patch
from ddprobe.sources.buffers import SizingParams
from ddprobe.sources.fetch import grep_buffers
from ddprobe.sources.oversize import make_oversize_patch
from ddprobe.sources.patches import (
    PAUSE_ENV,
    apply_patch,
    load_patch,
    patch_diff,
    patch_status,
    revert_patch,
)

pytestmark = pytest.mark.ssh
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def install(tmp_path: Path, sglang_venv) -> Path:
    return copy_install(sglang_venv("0.5.10"), tmp_path)


@pytest.fixture
def host(make_host, install: Path):
    return make_host(python=sys.executable, env={"PYTHONPATH": str(install)})


def _inventory(tmp_path: Path, install: Path, name: str = "gpu-a") -> Path:
    inv = tmp_path / "hosts.yaml"
    inv.write_text(f"hosts:\n  {name}:\n    host: gpu-a\n    python: {sys.executable}\n"
                   f"    env:\n      PYTHONPATH: {install}\n")
    return inv


def _two_file_patch(site: Path, tmp_path: Path) -> Path:
    files = []
    for rel, line in ((TRITON, "        # Parse args\n"), (RUNNER, "        # Batch sizes to "
                                                                 "capture\n")):
        old = (site / "sglang" / rel).read_text()
        assert line in old
        new = old.replace(line, line + "        # ddprobe test edit\n", 1)
        fp = make_file_patch(rel, old, new)
        assert fp is not None
        files.append(fp)
    p = tmp_path / "two-files.patch"
    p.write_text(format_patch(Patch("test-two-files", tuple(files), "two files",
                                    "sglang", ("0.5.10",))))
    return p


def test_apply_idempotent_status_diff_revert_byte_for_byte(ssh_opts, host, install: Path) -> None:
    f = install / "sglang" / TRITON
    before = f.read_bytes()
    mode = f.stat().st_mode
    pyc = f.parent / "__pycache__" / "triton_backend.cpython-311.pyc"
    pyc.parent.mkdir(exist_ok=True)
    pyc.write_bytes(b"stale")
    patch = load_patch(SHIPPED)
    with remote.connect(host, ssh_opts) as r:
        res = apply_patch(r, patch, host=host)
        assert res.status == "applied" and res.changed == (TRITON,)
        assert res.install and res.install.version == "0.5.10"
        after = f.read_bytes()
        assert after != before and b"mask_numel = max_num_tokens * self.max_context_len" in after
        assert f.stat().st_mode == mode and not pyc.exists()
        ledger = install / ".ddprobe" / "ledger.json"
        entry = json.loads(ledger.read_text())["entries"][0]
        assert entry["id"] == SHIPPED and entry["state"] == "applied"
        assert entry["files"][0]["sha_before"] == hashlib.sha256(before).hexdigest()
        assert entry["files"][0]["sha_after"] == hashlib.sha256(after).hexdigest()
        assert Path(entry["files"][0]["backup"]).read_bytes() == before
        assert "@" in entry["who"] and entry["applied_at"].endswith("Z")
        again = apply_patch(r, patch, host=host)
        assert again.status == "noop" and again.changed == () and f.read_bytes() == after
        st = patch_status(r, host=host)
        assert [(e.id, e.verdict) for e in st.entries] == [(SHIPPED, "applied")]
        assert st.entries[0].files[0].state == "patched" and st.entries[0].files[0].backup_ok
        [(pid, diff)] = patch_diff(r, host=host)
        assert pid == SHIPPED and "+            mask_numel = max_num_tokens" in diff
        # the analysis now sees the fixed size
        rep = grep_buffers(r, host, backend="triton",
                           params=SizingParams(max_bs=64, budgets=(16,), context_len=4096))
        row = rep.find("cuda_graph_custom_mask")[0]
        assert row.shape == "(mask_numel,)" and row.sizes[0].short_by is None
        rv = revert_patch(r, SHIPPED, host=host)
        assert rv.status == "reverted" and rv.reverted == ((SHIPPED, (TRITON,)),)
    assert f.read_bytes() == before and f.stat().st_mode == mode
    data = json.loads((install / ".ddprobe" / "ledger.json").read_text())
    assert data["entries"] == [] and data["history"][0]["state"] == "reverted"
    assert not (install / ".ddprobe" / "backups" / SHIPPED).exists()


def _main(sshd, inv: Path, *args: str) -> int:
    return main(["-i", str(inv), "--ssh-config", str(sshd.ssh_config), *args])


def test_dry_run_changes_nothing(sshd, install: Path, capsys) -> None:
    h0 = tree_hash(install)
    inv = _inventory(install.parent, install)
    rc = _main(sshd, inv, "patch", "apply", SHIPPED, "--host", "gpu-a", "--dry-run")
    out = capsys.readouterr()
    assert rc == 0 and "+            mask_numel" in out.out and "dry run" in out.err
    assert tree_hash(install) == h0


@pytest.mark.parametrize("case", ["malformed", "missing-file", "mismatch", "edited", "version"])
def test_bad_input_is_refused_and_nothing_changes(ssh_opts, case: str, host, install: Path,
                                                  tmp_path: Path) -> None:
    shipped = (REPO / "playbooks" / "patches" / f"{SHIPPED}.patch").read_text()
    f = install / "sglang" / TRITON
    text = shipped
    want = ""
    if case == "malformed":
        text = shipped.replace("@@ -476,8 +476,22 @@", "@@ -476,8 +476,23 @@")
        want = r"hunk 1 \(@@ -476,8 \+476,23 @@\) has 8 old / 22 new lines"
    elif case == "missing-file":
        text = shipped.replace("a/" + TRITON, "a/srt/layers/attention/nope.py").replace(
            "b/" + TRITON, "b/srt/layers/attention/nope.py")
        want = "srt/layers/attention/nope.py: file not found in this version"
    elif case == "mismatch":
        old = "(max_num_tokens * self.max_context_len),\n                dtype=torch.uint8"
        f.write_text(f.read_text().replace(old, old.replace("len)", "len * 2)")))
        want = r"hunk 1 \(@@ -476,8 \+476,22 @@\) does not apply: context mismatch; line 480"
    elif case == "edited":
        f.write_text(f.read_text() + "# a local edit elsewhere\n")
        want = "someone edited it; use --force"
    elif case == "version":
        text = shipped.replace("# versions: 0.5.10", "# versions: 0.5.2")
        want = r"is for versions 0.5.2; sglang is 0.5.10"
    p = tmp_path / "case.patch"
    p.write_text(text)
    h0 = tree_hash(install)
    with remote.connect(host, ssh_opts) as r, pytest.raises(PatchError, match=want) as ei:
        apply_patch(r, load_patch(str(p)), host=host)
    assert ei.value.exit_code == 13
    assert tree_hash(install) == h0
    assert not (install / ".ddprobe").exists()
    if case == "edited":  # --force applies over a foreign edit elsewhere in the file
        with remote.connect(host, ssh_opts) as r:
            assert apply_patch(r, load_patch(str(p)), host=host, force=True).status == "applied"
        assert "# a local edit elsewhere" in f.read_text() and "mask_numel" in f.read_text()


def test_drift_after_apply_is_reported_and_revert_needs_force(ssh_opts, host, sshd, install: Path,
                                                              capsys) -> None:
    f = install / "sglang" / TRITON
    before = f.read_bytes()
    with remote.connect(host, ssh_opts) as r:
        apply_patch(r, load_patch(SHIPPED), host=host)
    f.write_text(f.read_text() + "# hand edit after the patch\n")
    inv = _inventory(install.parent, install)
    rc = _main(sshd, inv, "patch", "status", "--host", "gpu-a", "--json")
    doc = json.loads(capsys.readouterr().out)
    assert rc == 13 and doc["patches"][0]["verdict"] == "drifted"
    assert "revert" in doc["patches"][0]["advice"]
    with remote.connect(host, ssh_opts) as r:
        with pytest.raises(PatchError, match="changed since patch .* was applied"):
            revert_patch(r, SHIPPED, host=host)
        with pytest.raises(PatchError, match="revert .* --force"):
            apply_patch(r, load_patch(SHIPPED), host=host)
        revert_patch(r, SHIPPED, host=host, force=True)
    assert f.read_bytes() == before
    kept = list((install / ".ddprobe" / "backups" / SHIPPED).rglob("*.drift-*"))
    assert len(kept) == 1 and b"# hand edit after the patch" in kept[0].read_bytes()


def test_revert_all_and_hand_applied_patch(ssh_opts, host, install: Path, tmp_path: Path) -> None:
    two = _two_file_patch(install, tmp_path)
    originals = {rel: sha(install / "sglang" / rel) for rel in (TRITON, RUNNER)}
    with remote.connect(host, ssh_opts) as r:
        apply_patch(r, load_patch(SHIPPED), host=host)
        apply_patch(r, load_patch(str(two)), host=host)
        assert [e.id for e in patch_status(r, host=host).entries] == [SHIPPED, "test-two-files"]
        rv = revert_patch(r, host=host, all_patches=True)
        assert [pid for pid, _ in rv.reverted] == ["test-two-files", SHIPPED]  # newest first
        assert {rel: sha(install / "sglang" / rel) for rel in originals} == originals
        # applied by hand (no ledger entry): recorded on apply, reversed on revert
        p = load_patch(SHIPPED)
        f = install / "sglang" / TRITON
        from ddprobe.hostside.patchtext import apply_patch as apply_text
        f.write_text(apply_text(p, {TRITON: f.read_text()})[TRITON])
        assert apply_patch(r, p, host=host).status == "recorded"
        revert_patch(r, SHIPPED, host=host)
        assert sha(f) == originals[TRITON]


def test_oversize_patch_on_the_real_install(ssh_opts, host, install: Path) -> None:
    f = install / "sglang" / TRITON
    before = sha(f)
    with remote.connect(host, ssh_opts) as r:
        rep = grep_buffers(r, host, backend="triton",
                           params=SizingParams(max_bs=64, budgets=(16,), context_len=4096))
        p = make_oversize_patch(rep, ["cuda_graph_custom_mask"], factor=4)
        assert apply_patch(r, p, host=host).status == "applied"
        rep2 = grep_buffers(r, host, backend="triton",
                            params=SizingParams(max_bs=64, budgets=(16,), context_len=4096))
        assert rep2.find("cuda_graph_custom_mask")[0].sizes[0].elements == \
            4 * rep.find("cuda_graph_custom_mask")[0].sizes[0].elements
        revert_patch(r, p.id, host=host)
    assert sha(f) == before


def _ddprobe(inv: Path, sshd, *args: str, env: dict[str, str] | None = None
             ) -> subprocess.Popen[str]:
    e = dict(os.environ, **(env or {}))
    e["PYTHONPATH"] = str(REPO) + os.pathsep + e.get("PYTHONPATH", "")
    return subprocess.Popen([sys.executable, "-m", "ddprobe", "-i", str(inv), "--ssh-config",
                             str(sshd.ssh_config), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=e, start_new_session=True)


def _start_apply_and_wait_between_files(sshd, install: Path, tmp_path: Path
                                        ) -> tuple[subprocess.Popen[str], int, Path, dict]:
    two = _two_file_patch(install, tmp_path)
    inv = _inventory(tmp_path, install)
    files = {rel: install / "sglang" / rel for rel in (TRITON, RUNNER)}
    orig = {rel: p.read_bytes() for rel, p in files.items()}
    proc = _ddprobe(inv, sshd, "patch", "apply", str(two), "--host", "gpu-a",
                    env={PAUSE_ENV: "1.5"})
    ledger = install / ".ddprobe" / "ledger.json"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if ledger.exists():
            entries = json.loads(ledger.read_text())["entries"]
            changed = [rel for rel, p in files.items() if p.read_bytes() != orig[rel]]
            if entries and len(changed) == 1:
                return proc, int(entries[0]["pid"]), two, orig
        time.sleep(0.05)
    proc.kill()
    pytest.fail("the apply never reached the pause between files")


def _wait_gone(pid: int, timeout: float = 20) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    pytest.fail(f"process {pid} still running")


def _states(install: Path, orig: dict) -> list[str]:
    return ["patched" if (install / "sglang" / rel).read_bytes() != data else "original"
            for rel, data in orig.items()]


def test_killing_ddprobe_mid_apply_still_completes_on_the_host(sshd, install: Path,
                                                               tmp_path: Path) -> None:
    proc, helper, _two, orig = _start_apply_and_wait_between_files(sshd, install, tmp_path)
    os.killpg(proc.pid, signal.SIGKILL)  # the caller dies between files...
    proc.wait()
    _wait_gone(helper)  # ...the host side finishes: all or nothing, here all
    assert _states(install, orig) == ["patched", "patched"]
    entry = json.loads((install / ".ddprobe" / "ledger.json").read_text())["entries"][0]
    assert entry["state"] == "applied" and "pid" not in entry


@pytest.mark.parametrize("then", ["finish", "roll-back"])
def test_kill_between_files_leaves_each_file_whole(then: str, sshd, install: Path,
                                                   tmp_path: Path, capsys) -> None:
    proc, helper, two, orig = _start_apply_and_wait_between_files(sshd, install, tmp_path)
    # the host-side process dies between files (OOM kill, reboot...), and ddprobe with it
    os.kill(helper, signal.SIGKILL)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    _wait_gone(helper)
    assert sorted(_states(install, orig)) == ["original", "patched"]
    inv = tmp_path / "hosts.yaml"
    capsys.readouterr()
    rc = _main(sshd, inv, "patch", "status", "--host", "gpu-a")
    out = " ".join(capsys.readouterr().out.split())
    assert rc == 13
    assert "test-two-files: incomplete" in out
    assert "1 of 2 files patched" in out and "to finish" in out
    assert "ddprobe patch revert test-two-files" in out and "to roll back" in out
    ledger = install / ".ddprobe" / "ledger.json"
    if then == "finish":
        assert _main(sshd, inv, "patch", "apply", str(two), "--host", "gpu-a") == 0
        assert "finished an interrupted apply" in capsys.readouterr().err
        assert _states(install, orig) == ["patched", "patched"]
        assert json.loads(ledger.read_text())["entries"][0]["state"] == "applied"
    else:
        assert _main(sshd, inv, "patch", "revert", "test-two-files", "--host", "gpu-a") == 0
        assert "reverted test-two-files" in capsys.readouterr().err
        assert _states(install, orig) == ["original", "original"]
        assert json.loads(ledger.read_text())["entries"] == []


def test_testbed_install_is_analysed_and_patched_like_sglang(ssh_opts, make_host,
                                                             tmp_path: Path) -> None:
    # the testbed's package as it is installed on a host (`ddtestbed` on PYTHONPATH); the
    # host entry's `package` is all that differs
    site = tmp_path / "site"
    shutil.copytree(REPO / "ddtestbed", site / "ddtestbed",
                    ignore=shutil.ignore_patterns("__pycache__"))
    h = make_host(python=sys.executable, package="ddtestbed", env={"PYTHONPATH": str(site)})
    f = site / "ddtestbed" / TRITON
    before = sha(f)
    with remote.connect(h, ssh_opts) as r:
        rep = grep_buffers(r, h, backend="triton",
                           params=SizingParams(max_bs=64, budgets=(16,), context_len=4096))
        assert rep.package == "ddtestbed" and rep.find("cuda_graph_custom_mask")
        p = make_oversize_patch(rep, ["cuda_graph_custom_mask"], factor=4)
        assert p.package == "ddtestbed"
        assert apply_patch(r, p, host=h).status == "applied"
        assert "* 4" in f.read_text() and (site / ".ddprobe" / "ledger.json").exists()
        assert [e.verdict for e in patch_status(r, host=h).entries] == ["applied"]
        revert_patch(r, p.id, host=h)
    assert sha(f) == before
