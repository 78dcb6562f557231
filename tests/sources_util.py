"""Source texts for the grep-buffers tests: the files grep-buffers reads, straight from a real
SGLang wheel (test_sources_buffers, test_bisect_static), and grep-buffers' report on the
testbed's own source (test_sanitize_cell, test_latent)."""
from __future__ import annotations

import fnmatch
import zipfile
from pathlib import Path

from conftest import _wheel

from ddprobe.sources import SizingParams, analyse_buffers
from ddprobe.sources.buffers import wanted_files

TESTBED = Path(__file__).resolve().parents[1] / "ddtestbed"
_cache: dict[tuple[str, str], dict[str, str]] = {}


def wheel_texts(version: str, backend: str = "all") -> dict[str, str]:
    """The files grep-buffers reads, straight from the real wheel (plus the one helper module
    the host helper would follow in 0.5.2x)."""
    key = (version, backend)
    if key not in _cache:
        pats = [*wanted_files(backend), "srt/layers/attention/verify_mask.py",
                "srt/model_executor/runner_utils/buffers.py"]
        out: dict[str, str] = {}
        with zipfile.ZipFile(_wheel(version)) as z:
            for name in z.namelist():
                if not name.startswith("sglang/"):
                    continue
                rel = name[len("sglang/"):]
                if any(fnmatch.fnmatch(rel, p) for p in pats):
                    out[rel] = z.read(name).decode("utf-8")
        _cache[key] = out
    return _cache[key]


def tb_buffer_report(budget: int = 16, **extra: int) -> tuple[object, SizingParams]:
    """grep-buffers' report on the testbed's triton backend and graph runner (max bs 64,
    context 32768, one budget), with the params it used."""
    files = ("srt/layers/attention/triton_backend.py", "srt/model_executor/cuda_graph_runner.py")
    texts = {f: (TESTBED / f).read_text() for f in files}
    params = SizingParams(max_bs=64, budgets=(budget,), context_len=32768,
                          extra=tuple(extra.items()))
    return analyse_buffers(texts, package="ddtestbed", backend="triton", params=params), params
