"""Silent corruption only in the graphs of large batches (scenario stale-large-batch): a
comparison with eager replays only the graphs of the batches the probe makes, so an ok says
which batch sizes it compared, and the comparison that covers the rest finds the defect."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from testbed_util import install_prefix, scenario_host

from ddprobe.bisect.advice import render
from ddprobe.bisect.run import run_bisect
from ddprobe.cli.bisect import request_of
from ddprobe.effective import EffectiveConfig
from ddprobe.probes.differential import batch_coverage
from ddprobe.remote import RemoteOptions
from ddprobe.results import CellResult, Config, Outcome, ProbeSummary

pytestmark = pytest.mark.slow


def test_an_ok_from_small_batches_says_which_graphs_it_compared(tmp_path: Path) -> None:
    # expected before running: 2 tasks are 4 requests in flight, batches of at most 4 replay
    # the clean graphs (the stale ones are those of bs 24 and up): b64 passes, its comparison
    # is identical, and the ok is not high: it names the graphs not compared and the command
    host = scenario_host("stale-large-batch", install_prefix(tmp_path / "site"), tmp_path)
    req = replace(request_of(["--budgets", "8,16,32,64", "--tasks", "2"]))
    rep = run_bisect([host], req, root=tmp_path / "runs", opts=RemoteOptions())
    ok = [v for v in rep.verdicts if v.kind == "ok" and v.tested]
    assert [v.budgets for v in ok] == [[64]] and ok[0].confidence == "medium"
    diff = [e for e in ok[0].evidence if e.kind == "differential"]
    assert diff and diff[0].details.get("batch_coverage") == {"peak_requests": 4,
                                                              "max_captured_bs": 64}
    assert "at most 4 requests in flight: the graphs captured for batches of more than 4 " \
        "(up to 64) were not replayed" in diff[0].summary
    assert "`--tasks all --concurrency 31`" in diff[0].summary
    assert ok[0].advice is not None
    said = render(ok[0].advice)
    assert "at batches of up to 4 requests (the graphs captured for larger ones, up to 64, " \
        "were not compared with eager)" in said


def _cell(peak: int | None, top: int | None) -> CellResult:
    eff = EffectiveConfig(cuda_graph=True, cuda_graph_max_bs=top) if top else None
    return CellResult(host="h", config=Config(8), outcome=Outcome.OK,
                      probes=ProbeSummary(passed=1, total=1, peak_requests=peak),
                      effective=eff)


def test_batch_coverage_is_silent_only_when_every_captured_size_was_reached() -> None:
    assert batch_coverage(_cell(64, 64)) is None and batch_coverage(_cell(70, 64)) is None
    assert batch_coverage(_cell(None, 64)) is None  # an older journal: not known, not claimed
    assert batch_coverage(_cell(16, None)) is None  # no captured size known
    text, det = batch_coverage(_cell(16, 64)) or ("", {})
    assert det == {"peak_requests": 16, "max_captured_bs": 64} and "more than 16" in text
    assert batch_coverage(None) is None
