"""The testbed's parts on their own: device memory, tokenizer, model, draft trees, scenarios,
server flags, buffer expressions and the installer. No server processes here."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
import traceback
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from testbed_util import chat_text, write_fixture_suite

from ddtestbed.device import AcceleratorError, DeviceArena, torch
from ddtestbed.install import default_prefix, sync_testbed
from ddtestbed.knowledge import load_tasks
from ddtestbed.model import DraftModel, TargetModel
from ddtestbed.scenario import ScenarioError, bundled_scenarios, load_scenario
from ddtestbed.srt.layers.linear import CUBLAS_WORKSPACE_BYTES, gemm_bf16
from ddtestbed.srt.server_args import prepare_server_args
from ddtestbed.srt.speculative.ddtree import accept, build_tree
from ddtestbed.tokenizer import IM_END_ID, Tokenizer

TESTBED = Path(__file__).resolve().parents[2] / "ddtestbed"
MIB = 1 << 20


# -- device memory ------------------------------------------------------------------------
def test_overrun_inside_segment_silently_corrupts_the_neighbour() -> None:
    dev = DeviceArena(1 << 30)
    a = torch.zeros((1000,), dtype=torch.uint8, device=dev)
    b = torch.zeros((1000,), dtype=torch.uint8, device=dev)
    assert a.seg is b.seg  # small allocations share a 2 MiB segment
    dev.write(a.data_ptr() + 1000, b"\x07" * 600)  # a kernel writing past `a`
    assert b.tolist()[:88] == [7] * 88  # a's block is rounded to 1024 bytes; b starts there


def test_write_past_segment_end_is_an_illegal_memory_access() -> None:
    dev = DeviceArena(1 << 30)
    big = torch.zeros((12 * MIB,), dtype=torch.uint8, device=dev)
    assert big.seg.size == 12 * MIB and big.seg.pool == "huge"  # own segment, 2 MiB rounding
    dev.write(big.data_ptr() + 12 * MIB - 4, b"\x01" * 4)  # last bytes: fine
    with pytest.raises(AcceleratorError) as info:
        dev.write(big.data_ptr() + 12 * MIB - 4, b"\x01" * 8)
    text = "".join(traceback.format_exception(info.value))
    assert "torch.AcceleratorError: CUDA error: an illegal memory access was encountered" in text


def test_host_side_indexing_is_bounds_checked_and_freed_memory_is_reused_stale() -> None:
    dev = DeviceArena(1 << 30)
    t = torch.full((4,), 5, dtype=torch.int32, device=dev)
    with pytest.raises(IndexError):
        t.copy_([1, 2, 3], start=2)
    addr = t.data_ptr()
    t.free()
    stale = torch.empty((4,), dtype=torch.int32, device=dev)
    assert stale.data_ptr() == addr and stale.tolist() == [5, 5, 5, 5]
    assert torch.zeros((4,), dtype=torch.int32, device=dev).tolist() == [0, 0, 0, 0]


def test_out_of_memory_is_torch_like() -> None:
    dev = DeviceArena(64 * MIB)
    with pytest.raises(torch.OutOfMemoryError, match="CUDA out of memory"):
        torch.zeros((100 * MIB,), dtype=torch.uint8, device=dev)


# -- tokenizer and model ------------------------------------------------------------------
@given(st.text(max_size=200))
@settings(max_examples=150, deadline=None)
def test_tokenizer_round_trips_any_text(text: str) -> None:
    tok = Tokenizer(1000)
    assert tok.decode(tok.encode(text)) == text


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> TargetModel:
    suite = write_fixture_suite(tmp_path_factory.mktemp("suite") / "coding.json")
    return TargetModel(Tokenizer(163840), load_tasks(suite))


def greedy(model: TargetModel, prompt: str, n: int) -> list[int]:
    seq = model.tok.encode(prompt)
    out: list[int] = []
    for _ in range(n):
        out.append(model.next_token(model.context(tuple(seq + out)), ()))
        if out[-1] == IM_END_ID:
            break
    return out


def test_target_answers_known_tasks_and_generic_text_otherwise(model: TargetModel) -> None:
    prompt = "Write a Python function `add(a, b)` that returns the sum of a and b."
    out = greedy(model, chat_text("Please solve this.\n" + prompt), 100)
    assert model.tok.decode(out[:-1]) == "```python\ndef add(a, b):\n    return a + b\n```"
    assert out[-1] == IM_END_ID
    other = model.tok.decode(greedy(model, chat_text("What is the weather like?"), 200))
    assert "```" not in other and len(other.split()) > 20  # fluent, generic, and it ends
    raw = model.tok.decode(greedy(model, "Once upon a time", 30))
    assert len(raw.split()) >= 10 and raw == model.tok.decode(greedy(model, "Once upon a time", 30))


@given(budget=st.integers(1, 40), topk=st.integers(1, 5), depth=st.integers(1, 12),
       task=st.integers(0, 2))
@settings(max_examples=40, deadline=None)
def test_tree_verification_is_lossless(model: TargetModel, budget: int, topk: int, depth: int,
                                       task: int) -> None:
    prompts = ["Write a Python function `add(a, b)` that returns the sum of a and b.",
               "Write a Python function `is_palindrome(s)` that returns True if the string s "
               "reads the same forwards and backwards, ignoring case and non-alphanumeric "
               "characters.", "Tell me about tok/s."]
    prompt = model.tok.encode(chat_text(prompts[task]))
    want = greedy(model, model.tok.decode(prompt), 80)
    draft = DraftModel(model, accuracy=0.8, decay=0.97)
    out = [want[0]]
    while len(out) < len(want):
        committed = prompt + out
        ctx = model.context(tuple(committed[:-1]))
        tree = build_tree(draft, ctx, committed[-1], budget, topk, depth)
        assert tree.size == budget + 1
        preds = [model.next_token(ctx, tree.paths[i]) for i in range(tree.size)]
        nodes, bonus = accept(tree, preds)
        out += [tree.tokens[n] for n in nodes] + [bonus]
    assert out[:len(want)] == want


def test_ancestor_rows_mark_exactly_the_path(model: TargetModel) -> None:
    draft = DraftModel(model, accuracy=0.5, decay=0.9)
    ctx = model.context(tuple(model.tok.encode("Hello there")))
    tree = build_tree(draft, ctx, 5, budget=16, topk=3, max_depth=6)
    for i in range(tree.size):
        row = tree.ancestor_row(i, tree.size)
        ancestors, j = set(), i
        while j >= 0:
            ancestors.add(j)
            j = tree.parents[j]
        assert {k for k in range(tree.size) if row[k]} == ancestors


# -- scenarios ------------------------------------------------------------------------------
def test_bundled_scenarios_load_and_seed_is_the_b300() -> None:
    assert {"seed", "healthy", "kernel", "late", "hang"} <= set(bundled_scenarios())
    for name in bundled_scenarios():
        load_scenario(name)
    seed = load_scenario("seed")
    assert (seed.gpu.name, seed.gpu.arch) == ("NVIDIA B300 SXM6", "sm_103")
    assert seed.defects.buffer_sizing.default_num_draft_tokens == 9
    assert load_scenario("healthy").defects.buffer_sizing.default_num_draft_tokens is None


@pytest.mark.parametrize("text, line, key", [
    ("name: x\ngpu:\n  name: G\n  arhc: sm_90\n", 4, "gpu.arhc"),
    ("defects:\n  kernel:\n    tile_rows: many\n", 3, "defects.kernel.tile_rows"),
    ("timing:\n  load_s: [1, 2]\n", 2, "timing.load_s"),
])
def test_bad_scenario_names_file_line_and_key(tmp_path: Path, text: str, line: int,
                                              key: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ScenarioError) as info:
        load_scenario(str(path))
    assert (info.value.line, info.value.key) == (line, key)
    assert str(info.value).startswith(f"{path}:{line}: ")


def test_unknown_scenario_name_lists_the_bundled_ones() -> None:
    with pytest.raises(ScenarioError, match="bundled: .*seed"):
        load_scenario("no-such-scenario")


# -- flags and source layout ----------------------------------------------------------------
def test_unknown_or_inconsistent_flags_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        prepare_server_args(["--model-path", "m", "--speculative-ddtree-budgett", "8"])
    assert info.value.code == 2
    assert "unrecognized arguments: --speculative-ddtree-budgett" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        prepare_server_args(["--model-path", "m", "--speculative-algorithm", "DDTREE",
                             "--speculative-ddtree-budget", "16",
                             "--speculative-num-draft-tokens", "9"])
    assert info.value.code == 2
    args = prepare_server_args(["--model", "m", "--cuda-graph-bs", "1", "2", "4",
                                "--disable-cuda-graph", "--tp-size", "2"])
    assert (args.cuda_graph_bs, args.disable_cuda_graph, args.tp_size) == ([1, 2, 4], True, 2)


def _add_argument_calls(tree: ast.AST) -> dict[str, ast.Call]:
    calls = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
            calls[node.args[0].value] = node  # type: ignore[attr-defined]
    return calls


def test_server_args_file_defines_flags_the_way_sglang_does() -> None:
    calls = _add_argument_calls(ast.parse((TESTBED / "srt" / "server_args.py").read_text()))
    required = {"--model-path", "--host", "--port", "--speculative-algorithm",
                "--speculative-num-draft-tokens", "--speculative-ddtree-budget",
                "--speculative-num-steps", "--speculative-eagle-topk",
                "--speculative-draft-model-path", "--disable-cuda-graph", "--cuda-graph-max-bs",
                "--cuda-graph-bs", "--attention-backend", "--max-running-requests",
                "--mem-fraction-static", "--tensor-parallel-size", "--log-level",
                "--enable-metrics", "--testbed-scenario", "--testbed-device"}
    assert required <= set(calls)
    kw = {k.arg: k.value for k in calls["--speculative-num-draft-tokens"].keywords}
    assert ast.unparse(kw["type"]) == "int"
    assert ast.unparse(kw["default"]) == "ServerArgs.speculative_num_draft_tokens"
    kw = {k.arg: k.value for k in calls["--disable-cuda-graph"].keywords}
    assert ast.literal_eval(kw["action"]) == "store_true"
    kw = {k.arg: k.value for k in calls["--cuda-graph-bs"].keywords}
    assert ast.literal_eval(kw["nargs"]) == "+"
    kw = {k.arg: k.value for k in calls["--speculative-algorithm"].keywords}
    assert "DDTREE" in ast.literal_eval(kw["choices"])


def _graph_buffers() -> dict[str, str]:
    """attribute -> shape expression of every torch.zeros/full in init_cuda_graph_state."""
    tree = ast.parse((TESTBED / "srt/layers/attention/triton_backend.py").read_text())
    fn = next(n for n in ast.walk(tree)
              if isinstance(n, ast.FunctionDef) and n.name == "init_cuda_graph_state")
    out = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) \
                and getattr(node.value.func, "attr", "") in ("zeros", "full"):
            shape = node.value.args[0]
            assert isinstance(shape, ast.Tuple)
            out[node.targets[0].attr] = ast.unparse(shape)  # type: ignore[attr-defined]
    return out


def test_graph_buffer_shapes_are_evaluable_expressions_over_sglang_names() -> None:
    shapes = _graph_buffers()
    assert {"cuda_graph_custom_mask", "cuda_graph_kv_indices",
            "cuda_graph_num_kv_splits"} <= set(shapes)

    class Self:
        max_context_len, num_head, max_kv_splits, v_head_dim = 32768, 64, 8, 128

    env = {"self": Self(), "max_bs": 64, "num_tokens_per_bs": 9, "max_num_tokens": 64 * 17}
    mask = eval(shapes["cuda_graph_custom_mask"], {}, env)
    assert mask == (9 * 64 * (32768 + 9),)
    assert eval(shapes["cuda_graph_kv_indices"], {}, env) == (64 * 17 * 32768,)


def test_cublas_workspace_only_limits_gemms_inside_capture() -> None:
    rows = CUBLAS_WORKSPACE_BYTES // 1024
    gemm_bf16(rows, 8, 8, capturing=True, workspace_per_row=1024)
    with pytest.raises(RuntimeError,
                       match="CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx"):
        gemm_bf16(rows + 1, 8, 8, capturing=True, workspace_per_row=1024)
    gemm_bf16(rows * 100, 8, 8, capturing=False, workspace_per_row=1024)


# -- installer --------------------------------------------------------------------------------
def test_install_is_idempotent_and_importable(tmp_path: Path) -> None:
    suite = write_fixture_suite(tmp_path / "coding.json")
    first = sync_testbed(tmp_path / "p", suite=suite)
    pkg = tmp_path / "p" / "ddtestbed"
    assert first.changed and first.package_dir == pkg
    assert (pkg / "srt/layers/attention/triton_backend.py").is_file()
    assert (pkg / "scenarios/seed.yaml").is_file()
    assert (pkg / "data/coding.json").read_bytes() == suite.read_bytes()
    assert not (pkg / "install.py").exists()
    again = sync_testbed(tmp_path / "p", suite=suite)
    assert not again.changed and again.written == ()
    res = subprocess.run([sys.executable, "-c", "import importlib.metadata as m, ddtestbed; "
                          "print(m.version('ddtestbed'), ddtestbed.__file__)"],
                         cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(tmp_path / "p")},
                         capture_output=True, text=True, check=True)
    version, where = res.stdout.split()
    assert version == "0.1.0" and Path(where).parent == pkg


def test_reinstall_keeps_patched_files_unless_forced(tmp_path: Path) -> None:
    suite = write_fixture_suite(tmp_path / "coding.json")
    sync_testbed(tmp_path, suite=suite)
    target = tmp_path / "ddtestbed/srt/layers/attention/triton_backend.py"
    original = target.read_text()
    target.write_text(original.replace("(num_tokens_per_bs * max_bs",
                                       "4 * (num_tokens_per_bs * max_bs"))
    (tmp_path / "ddtestbed/model.py").unlink()  # a deleted file is simply restored
    res = sync_testbed(tmp_path, suite=suite)
    assert res.kept_modified == ("ddtestbed/srt/layers/attention/triton_backend.py",)
    assert res.written == ("ddtestbed/model.py",)
    assert "4 * (num_tokens_per_bs" in target.read_text()
    assert not sync_testbed(tmp_path, suite=suite).changed  # still idempotent while patched
    forced = sync_testbed(tmp_path, suite=suite, force=True)
    assert forced.written == ("ddtestbed/srt/layers/attention/triton_backend.py",)
    assert target.read_text() == original


def test_default_prefix_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert default_prefix() == tmp_path / "ddprobe" / "testbed"


def test_fix_patch_applies_to_the_current_source(tmp_path: Path) -> None:
    patch = TESTBED.parent / "playbooks" / "patches" / "ddtestbed-custom-mask.patch"
    target = tmp_path / "srt/layers/attention/triton_backend.py"
    target.parent.mkdir(parents=True)
    target.write_bytes((TESTBED / "srt/layers/attention/triton_backend.py").read_bytes())
    subprocess.run(["patch", "-p1", "--forward", "-i", str(patch)], cwd=tmp_path, check=True,
                   capture_output=True)
    assert "num_tokens_per_bs = self.num_draft_tokens" in target.read_text()
    assert "self.default_num_draft_tokens\n" not in \
        target.read_text().split("def init_cuda_graph_state")[1]


def test_a_checkout_testbed_reads_the_in_tree_coding_suite(monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    """`python -m ddtestbed` from a checkout (the built-in host) knows the suite's tasks: the
    in-tree fallback is ddprobe/probes/suites/coding.json beside the ddtestbed package."""
    from ddtestbed import knowledge
    monkeypatch.delenv(knowledge.SUITE_ENV, raising=False)
    path = knowledge.suite_path()
    repo = Path(__file__).resolve().parents[2]
    assert path in (knowledge._PKG / "data" / "coding.json",
                    repo / "ddprobe" / "probes" / "suites" / "coding.json")
    assert any(t.id == "fizzbuzz" for t in load_tasks(path))
