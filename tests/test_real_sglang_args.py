"""The REAL SGLang 0.5.11 argument handling (parser + ServerArgs.__post_init__) on a CPU.

The venv's python is the host interpreter (tests/realsglang.py); this process never imports
sglang. One host program runs every case in one process (importing sglang costs ~40 s on two
cores) and prints JSON. `--device cuda` is passed because post-init's get_device() refuses a
machine without an accelerator; with no GPU, get_device_memory_capacity() answers None, so the
captured bs list is the one the release picks when it does not know the GPU's memory (named in
each assertion that depends on it). Expected answers, written before the run, from reading
0.5.11's server_args.py (_handle_speculative_decoding, lines 3440-3560):
  * EAGLE, topk 1, steps 3, draft 16 -> draft rewritten to steps + 1 = 4, with a warning;
  * EAGLE with steps unset but topk/draft set -> a bare AssertionError (no message);
  * --speculative-algorithm DDTREE -> argparse "invalid choice" (exit 2): 0.5.11 has no DDTREE;
  * --cuda-graph-max-bs 64 -> cuda_graph_bs is the release's list cut at 64, and max_running
    requests is reset to 48 for speculative decoding;
  * ddprobe's static flag reader finds exactly the option strings the real parser defines;
  * --enable-deterministic-inference (_handle_deterministic_inference, lines 3966-4060): with
    --attention-backend torch_native a ValueError naming ['flashinfer', 'fa3', 'triton'];
    with triton accepted as given; with no backend and no GPU (not Blackwell) fa3, with a
    warning. Found on the first run: triton, no warning: 0.5.11 picks its default backend
    (_handle_attention_backend_compatibility, line 849) before the deterministic check (line
    900), so that fallback never fires and the default must be on the list. The testbed
    answers the same three (ddtestbed/srt/server_args.py), and ddprobe's static reader reads
    the same list from this install's source.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from realsglang import sglang_runtime_python

HOST_PROGRAM = r'''
import argparse, contextlib, io, json, logging, sys, tempfile, os
model = tempfile.mkdtemp()
json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
           "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2,
           "num_hidden_layers": 2, "vocab_size": 1024, "max_position_embeddings": 4096,
           "torch_dtype": "bfloat16"}, open(os.path.join(model, "config.json"), "w"))
import sglang.srt.server_args as sa
out = {"file": sa.__file__}
p = argparse.ArgumentParser(); sa.ServerArgs.add_cli_args(p)
out["options"] = sorted(s for a in p._actions for s in a.option_strings)
out["algorithms"] = next(list(a.choices) for a in p._actions
                         if "--speculative-algorithm" in a.option_strings)
base = ["--model-path", model, "--device", "cuda"]
for name, argv in json.loads(sys.argv[1]).items():
    logs = io.StringIO(); h = logging.StreamHandler(logs); lg = logging.getLogger(sa.__name__)
    lg.addHandler(h)
    err = io.StringIO(); r = {}
    try:
        with contextlib.redirect_stderr(err):
            a = sa.prepare_server_args(base + [model if w == "{model}" else w for w in argv])
        r = {k: getattr(a, k) for k in ("speculative_algorithm", "speculative_num_steps",
             "speculative_eagle_topk", "speculative_num_draft_tokens", "cuda_graph_bs",
             "cuda_graph_max_bs", "max_running_requests", "disable_cuda_graph", "load_format",
             "speculative_draft_load_format", "skip_server_warmup", "attention_backend",
             "enable_deterministic_inference")}
    except SystemExit as e:
        r = {"exit": e.code}
    except Exception as e:
        r = {"raised": type(e).__name__, "message": str(e)}
    lg.removeHandler(h)
    r["log"] = logs.getvalue(); r["stderr"] = err.getvalue()[-400:]
    out[name] = r
print("JSON" + json.dumps(out))
'''

EAGLE = ["--speculative-algorithm", "EAGLE", "--speculative-draft-model-path"]
CASES = {
    "topk1": ["--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
              "--speculative-num-draft-tokens", "16"],
    "steps_unset": ["--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "16"],
    "ddtree": ["--speculative-algorithm", "DDTREE", "--speculative-num-draft-tokens", "16"],
    "maxbs64": ["--speculative-num-steps", "3", "--speculative-eagle-topk", "4",
                "--speculative-num-draft-tokens", "16", "--cuda-graph-max-bs", "64"],
}
DET = ["--speculative-num-steps", "3", "--speculative-eagle-topk", "4",
       "--speculative-num-draft-tokens", "16", "--enable-deterministic-inference"]
CASES.update({"det-torch_native": [*DET, "--attention-backend", "torch_native"],
              "det-triton": [*DET, "--attention-backend", "triton"], "det-none": DET})
# a cheap cell's launch (ddprobe/bisect/cheap.py), with each speculative algorithm 0.5.11 has
CHEAP = ["--load-format", "dummy", "--speculative-draft-load-format", "dummy",
         "--cuda-graph-bs", "1", "2", "4", "8", "64", "--skip-server-warmup"]
ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH")
for _alg in ALGORITHMS:
    CASES[f"cheap-{_alg}"] = ["--speculative-algorithm", _alg, "--speculative-num-steps", "3",
                              "--speculative-eagle-topk", "4",
                              "--speculative-num-draft-tokens", "16", *CHEAP] + (
        [] if _alg == "NGRAM" else ["--speculative-draft-model-path", "{model}"])


@pytest.fixture(scope="module")
def real() -> dict:
    py = sglang_runtime_python()
    cases = {k: (v if k == "ddtree" or k.startswith("cheap-") else EAGLE + ["{model}"] + v)
             for k, v in CASES.items()}
    p = subprocess.run([str(py), "-c", HOST_PROGRAM, json.dumps(cases)], capture_output=True,
                       text=True,
                       timeout=600)
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("JSON")), None)
    assert line, f"host program failed (rc {p.returncode}): {p.stderr[-2000:]}"
    return json.loads(line[4:])


def test_eagle_topk1_rewrites_draft_tokens_to_steps_plus_one(real: dict) -> None:
    r = real["topk1"]
    assert (r["speculative_eagle_topk"], r["speculative_num_steps"]) == (1, 3)
    assert r["speculative_num_draft_tokens"] == 4  # asked for 16
    assert "adjusted to speculative_num_steps + 1" in r["log"]


def test_steps_unset_with_topk_set_is_a_bare_assertion(real: dict) -> None:
    assert real["steps_unset"]["raised"] == "AssertionError"
    assert real["steps_unset"]["message"] == ""


def test_ddtree_is_refused_by_the_parser(real: dict) -> None:
    assert "DDTREE" not in real["algorithms"] and "NGRAM" in real["algorithms"]
    assert real["ddtree"]["exit"] == 2
    assert "invalid choice: 'DDTREE'" in real["ddtree"]["stderr"]


def test_captured_bs_list_stops_at_max_bs(real: dict) -> None:
    r = real["maxbs64"]  # gpu memory unknown here (no GPU): the release's list without a size
    assert r["cuda_graph_max_bs"] == 64 and max(r["cuda_graph_bs"]) == 64
    assert r["cuda_graph_bs"][:8] == [1, 2, 3, 4, 5, 6, 7, 8]
    assert r["cuda_graph_bs"] == sorted(set(r["cuda_graph_bs"]))
    assert r["max_running_requests"] == 48  # reset for speculative decoding
    assert (r["speculative_eagle_topk"], r["speculative_num_draft_tokens"]) == (4, 16)


@pytest.mark.parametrize("alg", ALGORITHMS)
def test_a_cheap_launch_is_accepted_with_each_algorithm(real: dict, alg: str) -> None:
    """Expected (from 0.5.11's server_args.py, read before running): --load-format dummy and
    --speculative-draft-load-format dummy are kept as given; a --cuda-graph-bs list is kept and
    sets the max bs to its largest entry (line 1388: `cuda_graph_max_bs = max(cuda_graph_bs)`),
    so a cheap cell's buffers are sized by the same max bs as its real cell's."""
    r = real[f"cheap-{alg}"]
    assert "raised" not in r and "exit" not in r, r
    assert (r["load_format"], r["speculative_draft_load_format"]) == ("dummy", "dummy")
    assert r["cuda_graph_bs"] == [1, 2, 4, 8, 64] and r["cuda_graph_max_bs"] == 64
    assert r["skip_server_warmup"] is True


def test_static_flag_reader_matches_the_real_parser(real: dict) -> None:
    from ddprobe.sources.flagsrc import parse_flags
    root = Path(real["file"]).parent.parent  # .../site-packages/sglang
    texts = {str(p.relative_to(root)): p.read_text() for p in (root / "srt").glob("*.py")}
    flags = parse_flags(texts, package="sglang", version="0.5.11")
    static = {n for f in flags.flags for n in f.names}
    real_opts = set(real["options"]) - {"-h", "--help"}
    assert sorted(real_opts - static) == []
    assert sorted(static - real_opts) == []
    algo = flags.get("--speculative-algorithm")
    assert algo is not None and set(algo.choices or ()) == set(real["algorithms"])


def _testbed(argv: list[str]) -> dict:
    """The testbed's answer to the same launch (its own ServerArgs, an sm_90 scenario)."""
    from ddtestbed.srt.server_args import prepare_server_args
    try:
        a = prepare_server_args(["--model-path", "m", "--testbed-scenario", "h200",
                                 "--speculative-algorithm", "EAGLE",
                                 "--speculative-draft-model-path", "d", *argv])
    except ValueError as e:
        return {"raised": "ValueError", "message": str(e)}
    return {"attention_backend": a.attention_backend,
            "enable_deterministic_inference": a.enable_deterministic_inference}


def test_deterministic_inference_is_handled_like_the_real_release(real: dict) -> None:
    r = real["det-torch_native"]
    assert r["raised"] == "ValueError"
    assert r["message"] == ("Currently only ['flashinfer', 'fa3', 'triton'] attention backends "
                            "are supported for deterministic inference, but you explicitly "
                            "specified 'torch_native'.")
    ok = real["det-triton"]
    assert "raised" not in ok and ok["attention_backend"] == "triton"
    assert ok["enable_deterministic_inference"] is True
    picked = real["det-none"]  # the default (triton without a GPU), checked against the list
    assert picked["attention_backend"] == "triton" and "Falling back" not in picked["log"]
    # the testbed, where ddprobe looks, the same way
    assert _testbed(CASES["det-torch_native"]) == {"raised": "ValueError",
                                                   "message": r["message"]}
    assert _testbed(CASES["det-triton"])["attention_backend"] == "triton"
    assert _testbed(CASES["det-none"])["attention_backend"] == "triton"
    # and ddprobe's static reader reads the release's list from its source
    from ddprobe.sources.flagsrc import parse_flags
    root = Path(real["file"]).parent.parent
    texts = {str(p.relative_to(root)): p.read_text() for p in (root / "srt").glob("*.py")}
    det = parse_flags(texts, package="sglang", version="0.5.11").deterministic
    assert det.backends == ("flashinfer", "fa3", "triton") and det.flag


# ---- ddprobe's own preflight (ddprobe/server/preflight.py) against the real ServerArgs ----
# Expected (written before running): without --device the release's get_device() refuses a
# machine with no accelerator, so the preflight says not_run and names the assumption (never
# rejected); with --device cuda in server.args it runs the real post-init: budget 16 under
# topk 1 is refused (the server would run draft 4), steps unset is rejected at the assertion,
# DDTREE is rejected by the parser, topk 4 runs as labelled with the captured bs list cut at
# the max bs.

def _pf_host(py: Path, model: Path, args: tuple[str, ...] = (), **server: object):
    from ddprobe.inventory import Host, ServerSettings
    fields: dict[str, object] = {"model_path": str(model), "algorithm": "EAGLE",
                                 "draft_model_path": str(model), "steps": 3, "topk": 1,
                                 "args": args, **server}
    return Host(name="cpu-box", python=str(py), package="sglang",
                server=ServerSettings(**fields),  # type: ignore[arg-type]
                transport="local", source="test")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("tiny-llama")
    (d / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
        "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2,
        "num_hidden_layers": 2, "vocab_size": 1024, "max_position_embeddings": 4096}))
    return d


def test_ddprobe_preflight_against_the_real_server_args(ssh_opts, model_dir: Path) -> None:
    from ddprobe import remote
    from ddprobe.errors import RefusedError
    from ddprobe.results import Config
    from ddprobe.server.launch import build_launch
    from ddprobe.server.preflight import clear_cache, preflight_launch, run_preflight
    py = sglang_runtime_python()
    clear_cache()
    bare = _pf_host(py, model_dir)
    cuda = ("--device", "cuda")
    topk1 = _pf_host(py, model_dir, cuda)
    unset = _pf_host(py, model_dir, cuda, steps=None, topk=4)
    trees = _pf_host(py, model_dir, cuda, topk=4)
    ddtree = _pf_host(py, model_dir, cuda, algorithm="DDTREE", draft_model_path="",
                      steps=None, topk=None)
    with remote.connect(bare, ssh_opts) as r:
        # one round trip asks for all five launches (one import of sglang, as a bisect asks
        # for its plan's cells); the checks below read each answer through the API
        hosts = ((bare, 8, None), (topk1, 16, None), (unset, 15, None), (ddtree, 15, None),
                 (trees, 15, 64))
        every = [build_launch(h, Config(budget=b, max_bs=m)) for h, b, m in hosts]
        assert len(run_preflight(r, bare, every)) == 5
        res = run_preflight(r, bare, [build_launch(bare, Config(budget=8))])[0]
        assert res.status == "not_run", res
        assert res.version == "0.5.11" and "assumption" in res.message
        with pytest.raises(RefusedError, match="4"):
            preflight_launch(r, topk1, build_launch(topk1, Config(budget=16)))
        got = run_preflight(r, unset, [build_launch(unset, Config(budget=15))])[0]
        assert got.status == "rejected" and "server_args.py" in got.where, got
        got = run_preflight(r, ddtree, [build_launch(ddtree, Config(budget=15))])[0]
        assert got.status == "rejected" and "DDTREE" in got.message, got
        ok = preflight_launch(r, trees, build_launch(trees, Config(budget=15, max_bs=64)))
        eff = ok.effective
        assert eff is not None and eff.draft_tokens == 16 and eff.topk == 4
        # the runner captures no bs above the request pool (--max-running-requests, which
        # post-init may reset for speculative decoding): ddprobe.effective.capped_by_request_pool
        pool = eff.max_running_requests
        assert eff.cuda_graph_bs and max(eff.cuda_graph_bs) == (min(64, pool) if pool else 64)
    clear_cache()


def test_cheap_support_is_checked_by_the_real_argument_handling(ssh_opts,
                                                                 model_dir: Path) -> None:
    """Expected (before running): the install defines --load-format (with dummy),
    --speculative-draft-load-format, --cuda-graph-bs and --skip-server-warmup, and its own
    ServerArgs accepts the cheap launch of an EAGLE tree at max bs 64: cheap cells available,
    with the draft flag, the short capture list and no warm-up. Without --device the
    preflight cannot run the post-init here (no accelerator): then the flags alone decide."""
    from ddprobe import remote
    from ddprobe.bisect.cheap import host_support
    from ddprobe.results import Config
    from ddprobe.server.caches import RunCaches
    from ddprobe.server.preflight import clear_cache
    py = sglang_runtime_python()
    clear_cache()
    trees = _pf_host(py, model_dir, ("--device", "cuda"), topk=4)
    with remote.connect(trees, ssh_opts) as r:
        sup = host_support(r, trees, Config(budget=15, max_bs=64), max_bs=64, concurrency=8,
                           enabled=True, caches=RunCaches())
        assert sup.available, sup.note
        assert (sup.draft_flag, sup.bs_flag, sup.warmup_flag) == (True, True, True)
        assert sup.what(Config(budget=15, max_bs=64)) == (
            "--load-format dummy --speculative-draft-load-format dummy "
            "--cuda-graph-bs 1 2 4 8 64 --skip-server-warmup")
        off = host_support(r, trees, Config(budget=15), max_bs=64, concurrency=8,
                           enabled=False, caches=RunCaches())
        assert not off.available and "--no-cheap-cells" in off.note
    clear_cache()


# ---- 0.5.21-0.5.23: the release's own parser against the static reader, both ways ----------
# Expected (written before the run): 0.5.2x builds most of its parser from dataclass fields
# with `Arg(...)` metadata (srt/arg_groups/fields/*.py, add_cli_args_from_dataclass), fields
# declared with Arg(action=argparse.BooleanOptionalAction) add --no-NAME (12 in 0.5.23, e.g.
# --no-enable-tf32-matmul), plus the add_argument calls in server_args.py: the static reader
# finds exactly the option strings the real parser defines, none missing, none extra.
# The real parsers (tests/realsglang.py, real_parsers): the three releases in one process,
# kept in the test cache keyed by each wheel's hash.
RELEASES_2X = ("0.5.21", "0.5.22", "0.5.23")


@pytest.fixture(scope="module")
def parsers_2x() -> dict[str, dict]:
    from realsglang import real_parsers
    return real_parsers(RELEASES_2X)


@pytest.mark.xdist_group("real-sglang-0.5.2x")  # the fixture's one process, not the module's
@pytest.mark.parametrize("version", RELEASES_2X)
def test_static_flags_match_the_real_parser_of_0_5_2x(parsers_2x: dict[str, dict],
                                                      version: str) -> None:
    from ddprobe.sources.flagsrc import parse_flags
    doc = parsers_2x[version]
    root = Path(doc["file"]).parent.parent
    assert f"sglang-{version}-args" in str(root)  # this venv's sglang, not the runtime's 0.5.11
    texts = {str(f.relative_to(root)): f.read_text() for f in [
        root / "srt" / "server_args.py", *(root / "srt" / "arg_groups").rglob("*.py")]}
    flags = parse_flags(texts, package="sglang", version=version)
    static = {n for f in flags.flags for n in f.names}
    real = set(doc["options"]) - {"-h", "--help"}
    assert sorted(real - static) == []  # missing from the static reader
    assert sorted(static - real) == []  # the static reader's extras
    if version == "0.5.23":
        assert "--no-enable-tf32-matmul" in real
        flags.check(["--no-enable-tf32-matmul", "--enable-tf32-matmul"])
