"""`bisect --plan` on the real SGLang 0.5.23 sources, as on a CPU box without torch: the
wheel's .py files under a PYTHONPATH, with `import torch` first in sglang/__init__.py (what a
box with numpy & co. but no torch meets first; the real one fails earlier, at numpy, which
ddprobe rightly calls a broken install). The preflight cannot run, so the plan rests on the
static reading of the install's argument rules.

Expected, written before the run:
- 0.5.23 with topk 1, steps 3 and budget 8: the static reading of its argument rules
  (arg_groups/speculative_hook.py) refuses the cell (draft tokens become steps + 1), and the
  --json preflight names the assumption the refusal rests on (it was ""); the text header has
  no `?` for the entry point it never learned.
- server.backend triton and no --backend: the suspects come from the triton backend's files
  and the runners only (no flashinfer_backend.py / flashattention_backend.py), and a note says
  which backend and why; the verify mask is cleared by a note with both numbers (b8: its
  layout needs 64 x 9 x (4094 + 9) = 2,363,328 at seq_len 4094, 64 x 9 x (4096 + 9) =
  2,364,480 allocated).
"""
from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import _wheel

from ddprobe.cli import main


def _site(tmp: Path, version: str) -> Path:
    site = tmp / "site"
    with zipfile.ZipFile(_wheel(version)) as z:
        for n in z.namelist():
            if n.startswith("sglang/") and n.endswith(".py"):
                z.extract(n, site)
    init = site / "sglang" / "__init__.py"
    init.write_text("import torch  # a CPU box without torch\n" + init.read_text())
    return site


def _inv(tmp: Path, site: Path, server: str) -> Path:
    p = tmp / "hosts.yaml"
    p.write_text(f"hosts:\n  box:\n    transport: local\n    python: {sys.executable}\n"
                 f"    package: sglang\n    env:\n      PYTHONPATH: '{site}'\n"
                 f"    server:\n      model_path: /models/m\n      draft_model_path: /models/d\n"
                 f"      algorithm: EAGLE\n      max_bs: 64\n      workdir: {tmp / 'work'}\n"
                 + server)
    return p


def test_plan_on_real_0523_static_refusal_and_the_configured_backend(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    site = _site(tmp_path, "0.5.23")
    inv = _inv(tmp_path, site, "      steps: 3\n      topk: 1\n      backend: triton\n")
    base = ["-i", str(inv), "bisect", "-H", "box", "--budgets", "8", "--context-len", "4096"]
    assert main([*base, "--plan", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    pv = doc["preview"][0]
    pf = pv["preflight"]
    assert not pf["ran"] and pf["refused"], pf
    assert "static reading of the install's argument rules" in pf["assumption"], pf
    assert "speculative_hook.py" in pf["assumption"]
    assert any("static evidence from the buffers of backend triton (the host's "
               "server.backend: triton" in n for n in pv["notes"]), pv["notes"]
    # 0.5.23's verify mask is no suspect, and the plan says by which comparison
    assert ("cleared by size vs use: _verify_mask.buffer (srt/layers/attention/verify_mask.py:"
            in " ".join(pv["notes"]))
    assert any("needs 2,363,328 elements at seq_len 4094 for b8, 2,364,480 allocated" in n
               for n in pv["notes"]), pv["notes"]
    assert "_verify_mask.buffer" not in {s["attr"] for s in pv["suspects"]}
    files = {s["file"] for s in pv["suspects"]}
    assert files and not files & {"srt/layers/attention/flashinfer_backend.py",
                                  "srt/layers/attention/flashattention_backend.py"}, files
    assert main([*base, "--plan"]) == 0
    text = capsys.readouterr().out
    assert "?" not in [w.strip("(),:") for w in text.split()], text
    assert "REFUSED" in text and "static reading" in text
