"""Writers respect the lock; leftovers are seen (issue 15.5), over a real sshd.

Expected (written first):
- `patch apply` and `patch revert` while another live run holds the host lock: exit 12 and
  nothing changes on the host; `--dry-run` needs no lock.
- a temporary oversize patch left by a killed bisect: `ddprobe run` reverts it first, says
  so, and the cell's `patches` lists what the install really carries (a user patch stays).
- ENOSPC while applying: exit 13 with "No space left on device", each file original, no
  temp file left in the package, and `patch status` clean afterwards.
- a patch from a file whose apply was killed: `patch status`'s advice names that file, and
  following it finishes the apply.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from bisect_util import TASKS, Site, ddprobe, lock_by_another_run, write_inventory

from ddprobe import remote
from ddprobe.exitcodes import ExitCode
from ddprobe.sources.buffers import SizingParams
from ddprobe.sources.fetch import grep_buffers
from ddprobe.sources.oversize import make_oversize_patch
from ddprobe.sources.patches import applied_ids, apply_patch, patch_status

pytestmark = pytest.mark.ssh
TRITON = "srt/layers/attention/triton_backend.py"


def test_patch_apply_and_revert_take_the_host_lock(sshd, tmp_path: Path, capsys) -> None:
    site = Site(sshd, tmp_path)
    inv = write_inventory(tmp_path, site)
    f = site.prefix / "ddtestbed" / TRITON
    before = f.read_bytes()
    lock = lock_by_another_run(site, sshd.pid, token="1" * 32)
    for args in (["patch", "apply", "ddtestbed-custom-mask"],
                 ["patch", "revert", "--all"]):
        code = ddprobe(inv, sshd.ssh_config, *args, "--host", "gpu")
        err = capsys.readouterr().err
        assert code == int(ExitCode.LOCKED), err
        assert "gpu is locked by" in err
    assert f.read_bytes() == before and lock.exists()
    assert ddprobe(inv, sshd.ssh_config, "patch", "apply", "ddtestbed-custom-mask", "--host",
                   "gpu", "--dry-run") == 0
    lock.unlink()
    assert ddprobe(inv, sshd.ssh_config, "patch", "apply", "ddtestbed-custom-mask",
                   "--host", "gpu") == 0
    assert f.read_bytes() != before and not lock.exists()  # taken and released
    assert ddprobe(inv, sshd.ssh_config, "patch", "revert", "--all", "--host", "gpu") == 0
    assert f.read_bytes() == before


def test_run_reverts_a_leftover_temporary_patch_and_records_the_rest(ssh_opts, sshd, tmp_path: Path,
                                                                     capsys) -> None:
    site = Site(sshd, tmp_path)
    inv = write_inventory(tmp_path, site)
    h = site.host(inv)
    with remote.connect(h, ssh_opts) as r:  # type: ignore[arg-type]
        rep = grep_buffers(r, h, params=SizingParams(max_bs=64, budgets=(16,)))  # type: ignore[arg-type]
        # what a killed bisect leaves: its oversize patch (which makes b16 pass)
        apply_patch(r, make_oversize_patch(rep, ["cuda_graph_custom_mask"]), host=h)  # type: ignore[arg-type]
        ids = applied_ids(patch_status(r, host=h))  # type: ignore[arg-type]
        assert any(i.startswith("ddprobe-oversize-") for i in ids)

    def run16() -> tuple[int, dict]:
        capsys.readouterr()
        code = ddprobe(inv, sshd.ssh_config, "run", "--host", "gpu", "--budget", "16",
                       "--tasks", TASKS, "--stop-after", "--json")
        out, err = capsys.readouterr()
        assert out.strip(), err
        return code, json.loads(out)

    code, cell = run16()
    notes = " ".join(cell["extra"]["notes"])
    assert "reverted leftover temporary patch ddprobe-oversize-" in notes, notes
    # measured on the unpatched install: b16 with graphs crashes, and no patch is claimed
    assert cell["outcome"] == "crash" and cell["patches"] == [] and code == 8, code
    # a fix the user applied stays, and the cell says it ran with it
    assert ddprobe(inv, sshd.ssh_config, "patch", "apply", "ddtestbed-custom-mask",
                   "--host", "gpu") == 0
    code, cell = run16()
    assert cell["patches"] == ["ddtestbed-custom-mask"], cell["patches"]
    assert code == 0 and cell["outcome"] == "ok"
    assert ddprobe(inv, sshd.ssh_config, "patch", "revert", "--all", "--host", "gpu") == 0


def test_disk_full_during_apply_is_a_patch_error(sshd, tmp_path: Path, capsys) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a small tmpfs as a full disk")
    site = Site(sshd, tmp_path)
    inv = write_inventory(tmp_path, site)
    small = tmp_path / "small"
    small.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=160m", "tmpfs", str(small)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip()}")
    try:
        shutil.copytree(site.prefix / "ddtestbed", small / "ddtestbed",
                        ignore=shutil.ignore_patterns("__pycache__"))
        pkg_before = {p: p.read_bytes() for p in (small / "ddtestbed").rglob("*.py")}
        text = inv.read_text().replace(str(site.prefix), str(small))
        inv.write_text(text)
        with open(small / "filler", "wb", buffering=0) as fh:  # then free a few KB
            try:
                while True:
                    fh.write(b"\0" * 4096)
                    fh.flush()
            except OSError:
                pass
        os.truncate(small / "filler", os.path.getsize(small / "filler") - 8192)
        code = ddprobe(inv, sshd.ssh_config, "patch", "apply", "ddtestbed-custom-mask",
                       "--host", "gpu")
        err = capsys.readouterr().err
        assert code == int(ExitCode.PATCH), err
        assert "No space left on device" in err and "Traceback" not in err
        left = [p.name for p in small.rglob("*") if ".ddprobe-" in p.name and
                p.name.endswith(".tmp")]
        assert left == [], left
        assert {p: p.read_bytes() for p in (small / "ddtestbed").rglob("*.py")} == pkg_before
        os.unlink(small / "filler")
        code = ddprobe(inv, sshd.ssh_config, "patch", "status", "--host", "gpu")
        assert code == 0, capsys.readouterr()
    finally:
        subprocess.run(["umount", str(small)], check=False)


def test_advice_after_a_killed_apply_works_for_a_patch_file(sshd, tmp_path: Path,
                                                            capsys) -> None:
    site = Site(sshd, tmp_path)
    inv = write_inventory(tmp_path, site)
    # a patch from a file, two files, so the host helper pauses between them (test hook)
    from ddprobe.hostside.patchtext import Patch, format_patch, make_file_patch
    files = []
    for rel in (TRITON, "srt/server_args.py"):
        old = (site.prefix / "ddtestbed" / rel).read_text()
        first = old.splitlines(keepends=True)[0]
        fp = make_file_patch(rel, old, old.replace(first, first + "# my local fix\n", 1))
        assert fp is not None
        files.append(fp)
    pf = tmp_path / "my-local-fix.patch"
    pf.write_text(format_patch(Patch("my-local-fix", tuple(files), "a local fix", "ddtestbed",
                                     ("0.1.0",))))
    # the ledger entry an apply killed before it recorded its end leaves ("applying")
    from ddprobe.sources.patches import PAUSE_ENV
    env = dict(os.environ, **{PAUSE_ENV: "30"})
    import sys

    from bisect_util import REPO
    proc = subprocess.Popen([sys.executable, "-m", "ddprobe", "-i", str(inv), "--ssh-config",
                             str(sshd.ssh_config), "patch", "apply", str(pf), "--host", "gpu"],
                            env=dict(env, PYTHONPATH=str(REPO)), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    ledger = site.prefix / ".ddprobe" / "ledger.json"
    deadline = time.monotonic() + 60
    entry: dict = {}
    while "pid" not in entry:  # the apply is between its two files
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.05)
        try:
            entries = json.loads(ledger.read_text()).get("entries") if ledger.exists() else []
        except ValueError:
            entries = []  # being written
        entry = entries[0] if entries else {}
    os.kill(int(entry["pid"]), 9)  # the host helper dies mid-apply (OOM kill, reboot)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == int(ExitCode.PATCH), err
    assert "ddprobe patch status --host gpu" in err, err
    ddprobe(inv, sshd.ssh_config, "patch", "status", "--host", "gpu")
    text = " ".join(capsys.readouterr().out.split())
    assert str(pf) in text, text
    advice = text.split("`ddprobe patch apply ", 1)[1].split("`", 1)[0].split()
    assert ddprobe(inv, sshd.ssh_config, "patch", "apply", *advice) == 0
    assert ddprobe(inv, sshd.ssh_config, "patch", "status", "--host", "gpu") == 0
