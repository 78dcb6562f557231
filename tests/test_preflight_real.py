"""The preflight against the SOURCE of nine real SGLang releases, installed `--no-deps`.

Without torch (and the rest of SGLang's dependencies) no release's server_args can be
imported, so here we test what can be: the host program's answer for such an install (the
missing module named, never a guess), the entry point and the two post-parse rules located
statically in each release's source, and the preflight's static fallback refusing what those
rules would rewrite or assert. What only a GPU host (torch present) shows: the values each
release's post-init resolves (its cuda_graph_max_bs from GPU memory, backends chosen per
architecture, the model's context length), read by the same program through
`prepare_server_args` / `resolve_once`.

Expected per release (written from reading each release's server_args.py before running):
- entry `prepare_server_args` in srt/server_args.py: every release.
- `ServerArgs.resolve_once` (resolution outside __post_init__): 0.5.23 only.
- topk 1 -> draft tokens = steps + 1, and the steps-unset assertion: 0.4.6.post5 .. 0.5.11 in
  srt/server_args.py, 0.5.23 in srt/arg_groups/speculative_hook.py; 0.4.3.post4 has neither
  (it has no auto-chosen steps).
"""
from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ddprobe import remote
from ddprobe.errors import RefusedError
from ddprobe.inventory import Host, ServerSettings
from ddprobe.results import Config
from ddprobe.server.launch import build_launch
from ddprobe.server.preflight import (
    GPU_ONLY_MODULES,
    apply_result,
    clear_cache,
    preflight_launch,
    run_preflight,
)
from ddprobe.sources.argrules import find_rules

RELEASES = ("0.4.3.post4", "0.4.6.post5", "0.4.10.post2", "0.5.0rc0", "0.5.2", "0.5.5",
            "0.5.10", "0.5.11", "0.5.23")
NO_RULES = {"0.4.3.post4"}
HOOKS = {"0.5.23"}  # rules live in arg_groups/speculative_hook.py, resolution in resolve_once


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    clear_cache()
    yield
    clear_cache()


def _site(py: Path) -> Path:
    out = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()"
                          "['purelib'])"], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip()) / "sglang"


def _texts(pkg: Path) -> dict[str, str]:
    files = [pkg / "srt" / "server_args.py", *sorted((pkg / "srt" / "arg_groups").glob("*.py"))]
    return {str(f.relative_to(pkg)): f.read_text(encoding="utf-8") for f in files
            if f.exists()}


def _host(py: Path, **server: object) -> Host:
    fields: dict[str, object] = {"model_path": "/models/llama", "algorithm": "EAGLE",
                                 "steps": 3, "topk": 1, **server}
    s = ServerSettings(**fields)  # type: ignore[arg-type]
    return Host(name="cpu-box", python=str(py), package="sglang", server=s,
                transport="local", source="test")


@pytest.mark.parametrize("version", RELEASES)
def test_rules_located_in_the_release_source(version: str, sglang_venv) -> None:
    rules = find_rules(_texts(_site(sglang_venv(version))))
    assert rules.entry is not None and rules.entry.file == "srt/server_args.py"
    assert (rules.resolve is not None) == (version in HOOKS)
    if version in NO_RULES:
        assert rules.topk1 is None and rules.steps_assert is None
        return
    assert rules.topk1 is not None and rules.steps_assert is not None
    where = "srt/arg_groups/speculative_hook.py" if version in HOOKS else "srt/server_args.py"
    assert rules.topk1.file == where and rules.steps_assert.file == where
    assert "speculative_eagle_topk == 1" in rules.topk1.text
    assert "speculative_num_draft_tokens is None" in rules.steps_assert.text
    assert {"EAGLE", "EAGLE3", "NEXTN"} <= set(rules.topk1.algorithms)
    assert rules.topk1.algorithms_assumed == (version in HOOKS)


@pytest.mark.parametrize("version", RELEASES)
def test_program_on_an_install_without_its_dependencies(ssh_opts, version: str,
                                                        sglang_venv) -> None:
    """The host program names the module the import stopped at; a missing GPU-only module
    means the preflight did not run (an assumption), any other means the install is broken
    for the server too (refused: config_error), never a guess at the effective config."""
    py = sglang_venv(version)
    host = _host(py)
    ln = build_launch(host, Config(budget=8))
    with remote.connect(host, ssh_opts) as r:
        res = run_preflight(r, host, [ln])[0]
        assert res.effective is None and res.version == version
        assert res.status in ("rejected", "not_run"), res
        if res.status == "rejected":
            assert "cannot be imported" in res.message and "No module named" in res.message
            with pytest.raises(RefusedError, match="cannot be imported"):
                preflight_launch(r, host, ln)
        else:
            assert any(f"needs {m}" in res.message for m in GPU_ONLY_MODULES), res.message
            assert "assumption:" in res.message


@pytest.mark.parametrize("version", [v for v in RELEASES if v not in NO_RULES])
def test_static_fallback_refuses_what_the_release_rewrites(version: str, sglang_venv,
                                                           tmp_path: Path) -> None:
    """Where the preflight could not run (no torch), the release's own rules still decide:
    topk 1 with draft tokens != steps + 1 is a wrong label; steps unset is an assertion."""
    from ddprobe.server.preflight import _not_run
    rules = find_rules(_texts(_site(sglang_venv(version))))
    not_run = _not_run("preflight not run: importing sglang.srt.server_args needs torch")
    py = Path(sys.executable)
    topk1 = _host(py)
    with pytest.raises(RefusedError, match=r"sets draft tokens to steps \+ 1 = 4") as e:
        apply_result(topk1, build_launch(topk1, Config(budget=16)), not_run, rules=rules)
    assert rules.topk1 is not None and rules.topk1.where in str(e.value)
    assert "budget_flag: steps" in str(e.value)
    # steps and topk unset: hosts.example.yaml's default
    unset = Host(name="cpu-box", python=str(py),
                 server=ServerSettings(model_path="/m", algorithm="EAGLE"))
    with pytest.raises(RefusedError, match="would die at start-up"):
        apply_result(unset, build_launch(unset, Config(budget=8)), not_run, rules=rules)
    chain = _host(py, budget_flag="steps")
    ok = apply_result(chain, build_launch(chain, Config(budget=16)), not_run, rules=rules)
    assert ok.effective is None and "predicts no rewrite" in ok.notes[-1]
    trees = _host(py, topk=4, steps=5)
    assert apply_result(trees, build_launch(trees, Config(budget=16)), not_run, rules=rules)
