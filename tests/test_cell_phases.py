"""Where a cell's time went: the weight load and capture read from the server's own log lines
in each real SGLang release's wording, everything else from ddprobe's clock."""
from __future__ import annotations

import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from ddprobe.cell.phases import PHASES, CellPhases, cell_phases, log_phases

# the lines as each release prints them (the format strings are checked against the wheels
# below); expected values written down first
V0_4 = """\
[2025-08-01 10:00:00 TP0] Load weight begin. avail mem=78.50 GB
[2025-08-01 10:00:00 TP1] Load weight begin. avail mem=78.50 GB
[2025-08-01 10:05:30 TP0] Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, avail mem=10.00 GB, mem usage=68.50 GB.
[2025-08-01 10:05:31 TP1] Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, avail mem=10.00 GB, mem usage=68.50 GB.
[2025-08-01 10:05:32 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=9.00 GB
[2025-08-01 10:05:50 TP0] Capture cuda graph end. Time elapsed: 18.25 s. mem usage=0.50 GB. avail mem=8.50 GB.
[2025-08-01 10:05:50 TP1] Capture cuda graph end. Time elapsed: 19.00 s. mem usage=0.50 GB. avail mem=8.50 GB.
[2025-08-01 10:05:52 TP0] Capture draft cuda graph end. Time elapsed: 2.50 s. mem usage=0.10 GB. avail mem=8.40 GB.
"""
V0_5_11 = """\
[2026-05-01 10:00:00] Load weight begin. avail mem=139.00 GB
[2026-05-01 10:00:07] Load weight end. elapsed=7.25 s, type=Qwen3ForCausalLM, avail mem=120.00 GB, mem usage=19.00 GB.
[2026-05-01 10:00:07] Load weight begin. avail mem=120.00 GB
[2026-05-01 10:00:08] Load weight end. elapsed=0.75 s, type=LlamaForCausalLMEagle3, avail mem=119.00 GB, mem usage=1.00 GB.
[2026-05-01 10:00:09] Capture cuda graph begin. This can take up to several minutes. avail mem=100.00 GB
[2026-05-01 10:00:50] Capture cuda graph end. Time elapsed: 41.20 s. mem usage=2.00 GB. avail mem=98.00 GB.
[2026-05-01 10:00:55] Capture draft extend cuda graph end. Time elapsed: 4.80 s. mem usage=0.50 GB. avail mem=97.50 GB.
"""
V0_5_23 = """\
[2026-11-01 10:00:00 TP0] Load weight begin. avail mem=139.00 GB
[2026-11-01 10:00:03 TP0] Load weight end. elapsed=3.50 s, type=Qwen3ForCausalLM, avail mem=120.00 GB, mem usage=19.00 GB.
[2026-11-01 10:00:04 TP0] Capture target verify CUDA graph begin. backend=full, num_tokens_per_req=9, avail mem=100.00 GB
[2026-11-01 10:00:12 TP0] Capture target verify CUDA graph end. bs=[1, 2, 4, 8], elapsed=8.10 s, mem usage=1.00 GB, avail mem=99.00 GB.
"""


def test_each_release_wording_gives_load_and_capture() -> None:
    lp = log_phases(V0_4)  # no elapsed on the load line: its timestamps; only TP0 counted
    assert (lp.load_s, lp.load_from) == (330.0, "timestamps")
    assert lp.capture_s == pytest.approx(18.25 + 2.5) and lp.capture_from == "elapsed"
    lp = log_phases(V0_5_11)  # target and draft loads add up, target and draft captures too
    assert lp.load_s == pytest.approx(8.0) and lp.load_from == "elapsed"
    assert lp.capture_s == pytest.approx(46.0)
    lp = log_phases(V0_5_23)
    assert (lp.load_s, lp.capture_s) == (3.5, 8.1)


def test_a_log_without_those_lines_states_nothing() -> None:
    lp = log_phases("[2026-01-01 10:00:00] INFO: Uvicorn running\nTraceback ...\n")
    assert (lp.load_s, lp.capture_s, lp.load_from) == (None, None, "")


def test_cell_phases_split_the_health_wait_and_say_what_the_log_stated() -> None:
    t = {"start": 0.5, "stop": 2.0, "health": 400.0, "probe": 12.0, "server_info": 0.25,
         "cleanup": 1.0}
    ph = cell_phases(t, V0_4)
    assert ph.seconds["load"] == 330.0 and ph.seconds["capture"] == pytest.approx(20.75)
    assert ph.seconds["health"] == pytest.approx(400.0 - 330.0 - 20.75)
    assert (ph.seconds["start"], ph.seconds["probes"], ph.seconds["stop"]) == (0.5, 12.25, 3.0)
    assert ph.from_log == ("load", "capture")
    # a log that states more than the health wait took (clock skew): never a negative phase
    ph = cell_phases({"health": 100.0}, V0_4)
    assert ph.seconds["load"] == 100.0 and ph.seconds["capture"] == 0.0
    assert ph.seconds["health"] == 0.0
    ph = cell_phases({"health": 9.0, "start": 1.0}, "")
    assert ph.from_log == () and ph.seconds["health"] == 9.0
    back = CellPhases.from_dict(ph.to_dict())
    assert back is not None and dict(back.seconds) == dict(ph.seconds)
    assert set(back.seconds) == set(PHASES)


@pytest.mark.parametrize("version,load_elapsed", [("0.4.10.post2", False), ("0.5.2", False),
                                                  ("0.5.11", True), ("0.5.23", True)])
def test_the_wordings_are_the_real_wheels(sglang_wheel: Callable[[str], Path], version: str,
                                          load_elapsed: bool) -> None:
    """Each release's own format strings, read from its wheel, hold the words parsed above."""
    with zipfile.ZipFile(sglang_wheel(version)) as z:
        text = "\n".join(z.read(n).decode("utf-8", "replace") for n in z.namelist()
                         if n.startswith("sglang/srt/model_executor/") and n.endswith(".py"))
    assert 'f"Load weight begin. avail mem=' in text
    assert ('f"elapsed=' in text.split('f"Load weight end. "', 1)[1][:200]) == load_elapsed
    if version == "0.5.23":
        assert 'f"Capture {capture_name} {graph_backend[model_runner.device]} end. "' in text
        assert 'f"elapsed={capture_time:.2f} s, "' in text
    else:
        assert "end. Time elapsed: {time.perf_counter() - tic:.2f} s. " in text
