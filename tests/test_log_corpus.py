"""The corpus of real log excerpts (tests/data/logs/, one file per excerpt with its source URL
and expected class) through `ddprobe classify` and through real `run` cells: a stand-in server
process (tests/logreplay.py) prints the excerpt the way the server did and then dies, hangs,
lingers with its HTTP front up, or serves.

Expected answers are in each file's header, written before the run. A crash must be the same
crash whether the process exits at once or lingers with its front up past the probes' timeout.
"""
from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from corpus_replay import CELL_OUTCOME, lingers, run_replay

from ddprobe.cell.logverdict import classify_log
from ddprobe.cli import main
from ddprobe.exitcodes import ExitCode
from ddprobe.results import CellResult
from ddprobe.signatures.corpus import CorpusLog, load_corpus, parse_corpus_file

CORPUS_DIR = Path(__file__).parent / "data" / "logs"
CORPUS = load_corpus(CORPUS_DIR)


def _ids(logs: list[CorpusLog]) -> list[str]:
    return [c.name for c in logs]


def test_the_corpus_is_real_sized_and_well_formed() -> None:
    assert len(CORPUS) >= 40
    for c in CORPUS:
        assert c.url.startswith("https://github.com/"), c.path
        assert 1 <= c.lines <= 60, (c.path, c.lines)
        assert (c.outcome == "ok") == (c.kind == ""), c.path
    kinds = {c.kind for c in CORPUS}
    assert {"cuda_illegal_address", "oom", "nccl", "exception", "refused", "port_in_use",
            "hang", "traceback", "capture", "triton", "cublas", "cuda_error"} <= kinds
    phases = {(c.outcome, c.phase) for c in CORPUS}
    assert {("crash", "startup"), ("crash", "capture"), ("crash", "serving"),
            ("hang", "serving"), ("ok", "serving"), ("refused", "startup"),
            ("error", "startup")} <= phases
    assert sum(c.outcome == "ok" for c in CORPUS) >= 8  # healthy logs of several releases


def test_a_malformed_corpus_header_names_file_and_line(tmp_path: Path) -> None:
    p = tmp_path / "x.log"
    p.write_text("# source: https://example.com/x\n# expect: outcome=crash phase=startup\nboom\n")
    with pytest.raises(ValueError, match=r"x\.log:1: "):
        parse_corpus_file(p)
    p.write_text("# source: https://github.com/a/b/issues/1\n# expect: outcome=fine phase=x\nb\n")
    with pytest.raises(ValueError, match=r"x\.log:2: "):
        parse_corpus_file(p)


@pytest.mark.parametrize("case", CORPUS, ids=_ids(CORPUS))
def test_classify_gives_the_expected_class_and_phase(case: CorpusLog) -> None:
    v = classify_log(case.text)
    assert (v.outcome, v.phase) == (case.outcome, case.phase), v
    assert (v.signature.kind if v.signature else "") == case.kind, v.signature
    if case.outcome != "ok":
        assert v.hint, v  # every failure comes with what to try


def test_classify_cli_json_and_stdin(capsys: pytest.CaptureFixture[str]) -> None:
    case = next(c for c in CORPUS if c.name == "sglang-5491-flashinfer-ima-eagle")
    code = main(["classify", str(case.path), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == ExitCode.CRASH
    assert doc["outcome"] == "crash" and doc["phase"] == "serving"
    assert doc["signature"]["kind"] == "cuda_illegal_address" and doc["hint"]
    healthy = next(c for c in CORPUS if c.name == "sglang-6081-healthy-mtp-dp-accept-len")
    # "-" reads the log from a real pipe: a second process, its stdin the healthy log
    with healthy.path.open("rb") as stdin:
        proc = subprocess.run([sys.executable, "-m", "ddprobe", "classify", "-", "--json"],
                              stdin=stdin, capture_output=True, timeout=120)
    assert proc.returncode == ExitCode.OK, proc.stderr.decode(errors="replace")
    doc = json.loads(proc.stdout)
    assert doc["outcome"] == "ok"
    d = doc["decode"]
    assert d["lines"] == 5 and d["spellings"] == ["Decode batch."] and d["cuda_graph"] == "True"
    assert 2.5 < d["accept_len_mean"] < 3.0 and d["gen_throughput_mean"] > 150


def test_classify_cli_terminal_output_and_a_missing_file(
        capsys: pytest.CaptureFixture[str]) -> None:
    case = next(c for c in CORPUS if c.name == "sglang-4602-decode-out-of-memory-page-size")
    code = main(["classify", str(case.path)])
    out = capsys.readouterr().out
    assert code == ExitCode.CRASH
    assert "outcome: crash" in out and "signature: oom" in out and "lower the batch" in out
    assert main(["classify", str(case.path) + ".missing"]) == ExitCode.USAGE
    assert "no such file" in capsys.readouterr().err


# --- replay through real cells ---------------------------------------------------------------

# both lingers of one log on one pytest-xdist worker: the test compares them (`cells`)
REPLAYED = [pytest.param(c, linger, marks=pytest.mark.xdist_group(f"corpus-{c.name}"),
                         id=f"{c.name}-linger{linger:g}")
            for c in CORPUS for linger in lingers(c)]


@pytest.fixture(scope="module")
def cells() -> Iterator[dict[tuple[str, float], CellResult]]:
    yield {}


@pytest.mark.parametrize("case,linger", REPLAYED)
def test_replayed_through_a_run_cell(case: CorpusLog, linger: float, tmp_path: Path,
                                     cells: dict[tuple[str, float], CellResult]) -> None:
    cell = run_replay(case, tmp_path / "work", linger=linger)
    cells[(case.name, linger)] = cell
    assert cell.outcome is CELL_OUTCOME[case.outcome], (cell.outcome, cell.signature,
                                                        cell.error, cell.notes)
    if case.outcome in ("crash", "hang", "refused"):
        assert cell.signature is not None and cell.signature.kind == case.kind, cell.signature
        assert cell.phase == case.phase, cell.phase
    if case.outcome == "ok":
        assert cell.signature is None and cell.probes is not None and cell.probes.passed == 1
    others = [v for (name, lg), v in cells.items() if name == case.name and lg != linger]
    for other in others:  # the same log gives the same outcome at any linger
        assert (other.outcome, other.signature and other.signature.id) == \
            (cell.outcome, cell.signature and cell.signature.id)


def test_driver_xid_lines_during_a_crashed_cell_are_evidence(ssh_opts, tmp_path: Path) -> None:
    """Expected: a crashed cell reads the host's kernel log once and keeps the Xid line logged
    during the cell (not the one from 2020), as a note; the outcome stays the log's crash. The
    kernel cannot be made to log an Xid here, so `dmesg` is a stand-in on the host's PATH."""
    import os
    from dataclasses import replace

    from corpus_replay import replay_host

    from ddprobe.cell.experiment import ProbeOptions, run_cell
    from ddprobe.remote import connect
    from ddprobe.results import Config, Outcome
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "dmesg").write_text(
        "#!/bin/sh\n"
        "echo '2020-01-01T00:00:00,000000+00:00 NVRM: Xid (PCI:0000:3b:00): 13, pid=1, old'\n"
        "echo \"$(date +%Y-%m-%dT%H:%M:%S,%6N%:z) NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, "
        "GPU has fallen off the bus.\"\n")
    (bindir / "dmesg").chmod(0o755)
    case = next(c for c in CORPUS if c.name == "sglang-5285-capture-oom-deepep")
    host = replay_host(case, tmp_path / "work", linger=0.0)
    host = replace(host, env=(("PATH", f"{bindir}:{os.environ.get('PATH', '')}"),))
    with connect(host, ssh_opts) as r:
        cell = run_cell(r, host, Config(budget=8), probe=ProbeOptions(tasks=("reverse_words",)))
    assert cell.outcome is Outcome.CRASH and cell.signature is not None
    assert cell.signature.kind == "oom"
    assert len(cell.xid) == 1 and "Xid (PCI:0000:3b:00): 79" in cell.xid[0]
    assert any(n.startswith("kernel log (dmesg): 1 NVIDIA Xid") for n in cell.notes)
