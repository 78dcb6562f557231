"""Launch flags from a config, checked against the flags real SGLang wheels define (read from
their server_args.py, never imported), and the launch template."""
from __future__ import annotations

import zipfile
from dataclasses import replace
from functools import cache

import pytest
from conftest import _wheel

from ddprobe.errors import ConfigError, RefusedError
from ddprobe.inventory import Host, ServerSettings
from ddprobe.results import Config
from ddprobe.server.launch import build_launch, check_launch, expand_template, server_args
from ddprobe.sources import FlagSet, parse_flags


@cache
def wheel_flags(version: str) -> FlagSet:
    # the harness's cached wheel (downloaded on first use), not whatever an earlier test left
    # in ~/.cache: run alone, or with DDPROBE_TEST_CACHE elsewhere, this failed
    whl = _wheel(version)
    with zipfile.ZipFile(whl) as z:
        texts = {n[len("sglang/"):]: z.read(n).decode() for n in z.namelist()
                 if n.endswith(".py") and (n == "sglang/srt/server_args.py"
                                           or n.startswith("sglang/srt/arg_groups/"))}
    return parse_flags(texts, package="sglang", version=version)


def eagle_host(**kw: object) -> Host:
    s = ServerSettings(model_path="/models/Kimi-K2.6", draft_model_path="/models/eagle3",
                       algorithm="EAGLE3", steps=5, topk=4, port=30000, bind="0.0.0.0")
    return Host(name="b300", python="/opt/venv/bin/python", server=replace(s, **kw))


def test_eagle_budget_maps_to_draft_tokens_plus_one() -> None:
    args = server_args(eagle_host(), Config(budget=16, max_bs=32, backend="fa3",
                                            extra_args=("--mem-fraction-static", "0.8")))
    assert args == ["--model-path", "/models/Kimi-K2.6", "--host", "0.0.0.0", "--port", "30000",
                    "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path",
                    "/models/eagle3", "--speculative-num-steps", "5", "--speculative-eagle-topk",
                    "4", "--speculative-num-draft-tokens", "17", "--cuda-graph-max-bs", "32",
                    "--attention-backend", "fa3", "--mem-fraction-static", "0.8"]


def test_a_cell_without_max_bs_or_backend_gets_the_hosts_production_ones() -> None:
    # a bisect/sweep cell leaves max bs and backend unset unless --max-bs/--backend are given;
    # on the H200 (docs/gpu-results.md, 2026-12-02) its launch line then had no
    # --cuda-graph-max-bs, and real SGLang 0.5.11 planned graphs up to bs 256, not the host's 8
    h = eagle_host(algorithm="NGRAM", draft_model_path=None, steps=None, topk=None, max_bs=8,
                   backend="triton")
    args = server_args(h, Config(budget=15))
    assert args[args.index("--cuda-graph-max-bs") + 1] == "8"
    assert args[args.index("--attention-backend") + 1] == "triton"
    # the cell's own values still win (the max-bs experiment, --backend)
    args = server_args(h, Config(budget=15, max_bs=2, backend="fa3"))
    assert args[args.index("--cuda-graph-max-bs") + 1] == "2"
    assert args[args.index("--attention-backend") + 1] == "fa3"
    assert args.count("--cuda-graph-max-bs") == 1 and args.count("--attention-backend") == 1
    # a host without production values: no flag, the release's defaults
    bare = server_args(eagle_host(max_bs=None, backend=None), Config(budget=15))
    assert "--cuda-graph-max-bs" not in bare and "--attention-backend" not in bare


def test_ddtree_budget_and_graph_off() -> None:
    h = eagle_host(algorithm="DDTREE", budget_flag="ddtree", steps=None, topk=None,
                   args=("--tp", "8"))
    args = server_args(h, Config(budget=32, graph=False))
    assert "--speculative-ddtree-budget" in args and args[args.index(
        "--speculative-ddtree-budget") + 1] == "32"
    assert "--speculative-num-draft-tokens" not in args
    assert args[-3:] == ["--disable-cuda-graph", "--tp", "8"]


@pytest.mark.parametrize("version,flag", [("0.4.10.post2", "--cuda-graph-max-bs"),
                                          ("0.5.10", "--cuda-graph-max-bs"),
                                          ("0.5.23", "--cuda-graph-max-bs-decode")])
def test_max_bs_spelling_follows_the_installed_version(version: str, flag: str) -> None:
    fs = wheel_flags(version)
    launch = build_launch(eagle_host(algorithm="EAGLE"), Config(budget=8, max_bs=16), fs)
    assert launch.server_args[launch.server_args.index(flag) + 1] == "16"
    assert check_launch(launch, fs).checked  # and that version accepts the whole command


def test_installed_flags_refuse_before_any_restart() -> None:
    old = wheel_flags("0.5.10")
    new_spelling = build_launch(eagle_host(algorithm="EAGLE"), Config(8, max_bs=16), None)
    bad = replace(new_spelling, server_args=tuple(
        "--cuda-graph-max-bs-decode" if a == "--cuda-graph-max-bs" else a
        for a in new_spelling.server_args))
    with pytest.raises(RefusedError, match="--cuda-graph-max-bs-decode is not a flag of sglang "
                                           "0.5.10.*nearest: --cuda-graph-max-bs"):
        check_launch(bad, old)
    ddtree = build_launch(eagle_host(algorithm="DDTREE", budget_flag="ddtree"), Config(16),
                          wheel_flags("0.4.10.post2"))
    with pytest.raises(RefusedError, match="'DDTREE' is not one of its choices"):
        check_launch(ddtree, wheel_flags("0.4.10.post2"))
    typo = build_launch(eagle_host(algorithm="EAGLE"), Config(8, extra_args=("--speculative-bogus",
                                                                            "1")), old)
    with pytest.raises(RefusedError, match="--speculative-bogus is not a flag"):
        check_launch(typo, old)


def test_default_template_and_a_custom_one() -> None:
    h = eagle_host()
    launch = build_launch(h, Config(8))
    assert launch.argv[:3] == ("/opt/venv/bin/python", "-m", "sglang.launch_server")
    assert launch.argv[3:] == launch.server_args
    custom = replace(h, server=replace(h.server, launch=(
        "numactl", "--interleave=all", "{python}", "-m", "{package}.launch_server", "{args}",
        "--log-file=/logs/{port}.log"), env=(("SGLANG_ENABLE_SPEC_V2", "1"),)))
    la = build_launch(custom, Config(8, env=(("CUDA_LAUNCH_BLOCKING", "1"),)))
    assert la.argv[:5] == ("numactl", "--interleave=all", "/opt/venv/bin/python", "-m",
                           "sglang.launch_server")
    assert la.argv[-1] == "--log-file=/logs/30000.log"
    assert la.env_dict == {"SGLANG_ENABLE_SPEC_V2": "1", "CUDA_LAUNCH_BLOCKING": "1"}


def test_template_without_args_appends_them_and_keeps_json_braces() -> None:
    out = expand_template(["run.sh", '{"decode":{"max_bs":8}}'], {"python": "p"}, ["--x", "1"])
    assert out == ["run.sh", '{"decode":{"max_bs":8}}', "--x", "1"]


def test_bad_host_entries_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="server.model_path"):
        server_args(eagle_host(model_path=""), Config(8))
    h = replace(eagle_host(launch=("{pyhton}", "-m", "x")), source="/etc/hosts.yaml:12")
    with pytest.raises(ConfigError) as ei:
        build_launch(h, Config(8))
    assert ei.value.key == "server.launch" and ei.value.line == 12
    assert "unknown placeholder {pyhton}" in str(ei.value) and "{python}" in str(ei.value)
