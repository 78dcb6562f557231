"""Benchmark: how faithfully ddprobe reads real SGLang releases (issue 25's per-release table).

    python benchmarks/release_fidelity.py [--versions 0.4.10.post2,...] [--no-parser]

Per release, from the real wheel (pip download --no-deps, cached like the tests'):
  * flags: the option strings of the release's own parser (`ServerArgs.add_cli_args` run in a
    small venv over the cached 0.5.11 runtime venv, tests/realsglang.py) against ddprobe's
    static reader, both ways (missing = the parser has it, ddprobe does not; extra = the
    reverse). --no-parser skips the parser (the column then says so).
  * suspects: `bisect`'s static suspects for the triton backend at max bs 64, budgets 8, 16,
    32, with --context-len 4096 and without a context length (tier 1 = flagged by a size-vs-use
    comparison; tier 2 = fixed-size captured buffers, the fallback), and the seq_len limit the
    demands were evaluated at.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from ddprobe.bisect.static import find_suspects  # noqa: E402
from ddprobe.sources.buffers import SizingParams, analyse_buffers  # noqa: E402
from ddprobe.sources.flags import SERVER_ARGS  # noqa: E402
from ddprobe.sources.flagsrc import parse_flags  # noqa: E402

VERSIONS = ("0.4.10.post2", "0.5.1", "0.5.4", "0.5.6.post2", "0.5.11", "0.5.21", "0.5.22",
            "0.5.23")
PARSER = ("import argparse, json, sglang.srt.server_args as sa\n"
          "p = argparse.ArgumentParser(); sa.ServerArgs.add_cli_args(p)\n"
          "print('JSON' + json.dumps(sorted(s for a in p._actions for s in a.option_strings)))")


def _texts(version: str, want: str) -> dict[str, str]:
    import fnmatch
    import zipfile

    from conftest import _wheel

    from ddprobe.sources.buffers import wanted_files
    pats = [*wanted_files(want), "srt/layers/attention/verify_mask.py",
            "srt/model_executor/runner_utils/buffers.py", SERVER_ARGS, "srt/arg_groups/*.py",
            "srt/arg_groups/*/*.py"]
    out: dict[str, str] = {}
    with zipfile.ZipFile(_wheel(version)) as z:
        for name in z.namelist():
            rel = name[len("sglang/"):]
            if name.startswith("sglang/") and any(fnmatch.fnmatch(rel, p) for p in pats):
                out[rel] = z.read(name).decode("utf-8")
    return out


def flag_row(version: str, texts: dict[str, str], run_parser: bool) -> dict[str, Any]:
    flags = {k: v for k, v in texts.items()
             if k == SERVER_ARGS or k.startswith("srt/arg_groups/")}
    static = {n for f in parse_flags(flags, package="sglang", version=version).flags
              for n in f.names}
    if not run_parser:
        return {"static": len(static), "real": None, "why": "--no-parser"}
    from realsglang import sglang_args_python, sglang_runtime_python
    py = sglang_runtime_python() if version == "0.5.11" else sglang_args_python(version)
    p = subprocess.run([str(py), "-c", PARSER], capture_output=True, text=True, timeout=900)
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("JSON")), None)
    if line is None:
        return {"static": len(static), "real": None,
                "why": f"the release's add_cli_args did not run: {p.stderr.strip()[-200:]}"}
    real = set(json.loads(line[4:])) - {"-h", "--help"}
    return {"static": len(static), "real": len(real), "missing": sorted(real - static),
            "extra": sorted(static - real)}


def suspect_row(version: str, texts: dict[str, str], ctx: int | None) -> dict[str, Any]:
    params = SizingParams(max_bs=64, budgets=(8, 16, 32), context_len=ctx)
    rep = analyse_buffers(texts, package="sglang", version=version, backend="triton",
                          params=params)
    sus = find_suspects(rep)
    tier1 = [s for s in sus if s.tier == 1]
    shorts = {s.attr: [z.get("short_by") for z in s.sizes] for s in tier1}
    cleared = [r.attr for r in rep.rows if r.status == "found" and r.demand and not any(
        z.short_by for z in r.sizes) and all(z.demand_elements is not None for z in r.sizes)]
    return {"tier1": shorts, "tier2": sum(s.tier == 2 for s in sus), "cleared": cleared,
            "limit": rep.seq_limit.label if rep.seq_limit else "?"}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--versions", default=",".join(VERSIONS))
    ap.add_argument("--no-parser", action="store_true",
                    help="do not run the releases' own parsers (no venvs built)")
    args = ap.parse_args(argv)
    print("release       | flags real/static | missing | extra | suspects, context 4096 "
          "(tier 1: short by at b8/b16/b32; tier 2; cleared) | suspects, no context | seq_len")
    for v in args.versions.split(","):
        texts = _texts(v, "triton")
        f = flag_row(v, texts, not args.no_parser)
        with_ctx, without = suspect_row(v, texts, 4096), suspect_row(v, texts, None)
        real = f["real"] if f["real"] is not None else f"not run ({f['why']})"
        miss = ", ".join(f.get("missing") or []) or ("-" if f["real"] is not None else "?")
        extra = ", ".join(f.get("extra") or []) or ("-" if f["real"] is not None else "?")
        t1 = "; ".join(f"{a} {'/'.join(str(x or 0) for x in z)}"
                       for a, z in with_ctx["tier1"].items()) or "no tier 1"
        cl = ", ".join(with_ctx["cleared"]) or "-"
        t1n = "; ".join(without["tier1"]) or "no tier 1"
        print(f"{v:13s} | {real}/{f['static']} | {miss} | {extra} | {t1}; tier 2: "
              f"{with_ctx['tier2']}; cleared: {cl} | {t1n}; tier 2: {without['tier2']} | "
              f"{with_ctx['limit']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
