"""Hand-edited and hostile host state (issue 14 item 3): the patch ledger, symlinks in the
install, through a real sshd on a copy of the real sglang 0.5.10 wheel.

Expected answers, written before the runs:
* a ledger path `../../x` (or a backup path outside .ddprobe/backups): revert is refused with
  a message naming the ledger, nothing is written outside the install, the backups stay, and
  ddprobe never says "restored"; `patch status` shows the error and the backups, and
  `patch recover --apply` restores the original bytes from them and starts a new ledger;
* a ledger that is not JSON: the same way out;
* a directory of the install that is a symlink to outside: apply refused, outside untouched;
* a file that is a symlink to another file inside the install: apply writes through it, the
  link stays a link, and revert restores the content with the link still in place.
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from patch_util import SHIPPED, TRITON, copy_install, sha, tree_hash

from ddprobe.cli import main
from ddprobe.exitcodes import ExitCode

pytestmark = pytest.mark.ssh


@pytest.fixture
def env(tmp_path: Path, sglang_venv, sshd):
    site = copy_install(sglang_venv("0.5.10"), tmp_path)
    inv = tmp_path / "hosts.yaml"
    inv.write_text(f"hosts:\n  gpu-a:\n    host: {sshd.alias}\n    python: {sys.executable}\n"
                   f"    env:\n      PYTHONPATH: {site}\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "canary.py").write_text("canary\n")

    def dd(*args: str) -> int:
        return main(["-i", str(inv), "--ssh-config", str(sshd.ssh_config), *args])
    return site, outside, dd


def _ledger(site: Path) -> Path:
    return site / ".ddprobe" / "ledger.json"


def test_ledger_path_escaping_the_install_is_refused_and_recoverable(env, capsys):
    site, outside, dd = env
    target = site / "sglang" / TRITON
    original = sha(target)
    assert dd("patch", "apply", SHIPPED, "-H", "gpu-a") == 0
    patched = sha(target)
    assert patched != original
    led = json.loads(_ledger(site).read_text())
    led["entries"][0]["files"][0]["path"] = "../../outside/canary.py"
    _ledger(site).write_text(json.dumps(led))
    backups = sorted((site / ".ddprobe" / "backups").rglob("*"))
    before = tree_hash(outside)
    capsys.readouterr()
    code = dd("patch", "revert", "--all", "--force", "-H", "gpu-a")
    out, err = capsys.readouterr()
    assert code != 0 and "restored" not in out + err
    assert "outside" in err and "ledger" in err
    assert tree_hash(outside) == before and sha(target) == patched
    assert sorted((site / ".ddprobe" / "backups").rglob("*")) == backups  # backups kept
    # the way out: status shows the error and what the backups allow; recover restores
    assert dd("patch", "status", "-H", "gpu-a", "--json") == ExitCode.PATCH
    doc = json.loads(capsys.readouterr().out)
    assert doc["ledger_error"] and any(b["path"] == TRITON and b["state"] == "differs"
                                       for b in doc["backups"])
    assert dd("patch", "recover", "-H", "gpu-a") == 0  # dry run
    assert sha(target) == patched
    assert dd("patch", "recover", "-H", "gpu-a", "--apply") == 0
    assert sha(target) == original and tree_hash(outside) == before
    assert dd("patch", "status", "-H", "gpu-a") == 0
    assert list(_ledger(site).parent.glob("ledger.json.damaged-*"))


def test_backup_path_outside_is_refused(env, capsys):
    site, outside, dd = env
    assert dd("patch", "apply", SHIPPED, "-H", "gpu-a") == 0
    led = json.loads(_ledger(site).read_text())
    led["entries"][0]["files"][0]["backup"] = str(outside / "canary.py")
    _ledger(site).write_text(json.dumps(led))
    capsys.readouterr()
    assert dd("patch", "revert", "--all", "--force", "-H", "gpu-a") != 0
    assert (outside / "canary.py").read_text() == "canary\n"
    assert "outside" in capsys.readouterr().err


def test_unreadable_ledger_has_a_way_out(env, capsys):
    site, outside, dd = env
    target = site / "sglang" / TRITON
    original = sha(target)
    assert dd("patch", "apply", SHIPPED, "-H", "gpu-a") == 0
    _ledger(site).write_text('{"entries": [ {"id": "torn"')
    capsys.readouterr()
    assert dd("patch", "status", "-H", "gpu-a") == ExitCode.PATCH
    out = capsys.readouterr().out
    assert "ledger" in out and "patch recover" in out and "triton_backend" in out
    assert dd("patch", "recover", "-H", "gpu-a", "--apply") == 0
    assert sha(target) == original


def test_symlinked_directory_leaving_the_install_is_refused(env, capsys):
    site, outside, dd = env
    attn = site / "sglang" / "srt" / "layers" / "attention"
    moved = outside / "attention"
    shutil.move(str(attn), str(moved))
    attn.symlink_to(moved)
    before = tree_hash(outside)
    capsys.readouterr()
    code = dd("patch", "apply", SHIPPED, "-H", "gpu-a")
    err = capsys.readouterr().err
    assert code != 0 and "outside" in err, err
    assert tree_hash(outside) == before


def test_symlinked_file_inside_the_install_is_kept(env, capsys):
    site, outside, dd = env
    target = site / "sglang" / TRITON
    real = target.with_name("triton_backend_real.py")
    target.rename(real)
    target.symlink_to(real.name)
    original = sha(real)
    assert dd("patch", "apply", SHIPPED, "-H", "gpu-a") == 0
    assert target.is_symlink() and sha(real) != original
    assert dd("patch", "revert", SHIPPED, "-H", "gpu-a") == 0
    assert target.is_symlink() and sha(real) == original
