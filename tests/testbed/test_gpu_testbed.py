"""The testbed's CUDA mode, the parts that run without a GPU: device selection (cpu stays the
default without a GPU and never imports torch), the launcher's refusal of `cuda` where it cannot
run, the installed package, and the kernels' reference semantics checked against the CPU
mode's own kernel on the simulated device. The GPU half is tests/test_gpu_cuda.py."""
from __future__ import annotations

import glob
import importlib.util
import os
import random
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from testbed_util import ddtree, install_prefix, running_testbed

from ddtestbed.cuda import reference as ref
from ddtestbed.cuda import resolve_device
from ddtestbed.device import DeviceArena, torch
from ddtestbed.srt.layers.attention.triton_ops.tree_attention import (
    MaskLayout,
    TreeAttentionKernel,
    write_kv_indices,
    write_tree_mask,
)
from ddtestbed.srt.mem_cache.memory_pool import TokenToKVPool
from ddtestbed.srt.speculative.ddtree import DraftTree

REPO = Path(__file__).resolve().parents[2]
HAS_GPU_NODE = bool(glob.glob("/dev/nvidia[0-9]*"))
HAS_TORCH = importlib.util.find_spec("torch") is not None
no_gpu = pytest.mark.skipif(HAS_GPU_NODE, reason="a GPU is present: auto would pick cuda here")


# -- device selection ---------------------------------------------------------------------
def test_explicit_cpu_wins_over_the_environment() -> None:
    assert resolve_device("cpu", "cuda") == "cpu"
    assert resolve_device(None, "cpu") == "cpu"


@no_gpu
def test_auto_is_cpu_without_a_gpu() -> None:
    assert resolve_device(None, None) == "cpu"
    assert resolve_device("auto", None) == "cpu"


def test_unknown_device_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="must be one of auto, cpu, cuda, got 'tpu'"):
        resolve_device("tpu", None)


@pytest.mark.skipif(HAS_TORCH and HAS_GPU_NODE, reason="CUDA may be usable here")
def test_cuda_without_torch_or_gpu_says_why() -> None:
    with pytest.raises(ValueError, match=r"^--testbed-device cuda: (torch|triton|torch sees)"):
        resolve_device("cuda", None)


def test_cpu_mode_never_imports_torch() -> None:
    """Choosing the device (even auto) and importing the CUDA package's entry leave torch out
    when no GPU node exists; the CPU server path imports nothing of torch either."""
    code = ("import sys; from ddtestbed.cuda import resolve_device; "
            "d = resolve_device(None, None); "
            "import ddtestbed.srt.entrypoints.engine, ddtestbed.launch_server; "
            "print(d, 'torch' in sys.modules, 'triton' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         timeout=60, check=True).stdout.split()
    if not HAS_GPU_NODE:
        assert out == ["cpu", "False", "False"]
    else:
        assert out[0] in ("cpu", "cuda")


@pytest.fixture(scope="module")
def prefix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_prefix(tmp_path_factory.mktemp("gpu-tb") / "site")


def test_installed_testbed_ships_the_cuda_mode(prefix: Path) -> None:
    for name in ("__init__", "device", "kernels", "forward", "backend", "graph_runner",
                 "model_runner", "reference"):
        assert (prefix / "ddtestbed" / "cuda" / f"{name}.py").is_file(), name


@pytest.mark.skipif(HAS_TORCH and HAS_GPU_NODE, reason="CUDA may be usable here")
def test_launcher_refuses_cuda_where_it_cannot_run(prefix: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DDTESTBED_")}
    env["PYTHONPATH"] = str(prefix)
    res = subprocess.run([sys.executable, "-m", "ddtestbed.launch_server", "--model-path", "m",
                          "--testbed-device", "cuda"], cwd=prefix, env=env, capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 2
    assert "usage: python -m ddtestbed.launch_server" in res.stderr
    assert "error: --testbed-device cuda:" in res.stderr
    res = subprocess.run([sys.executable, "-m", "ddtestbed.launch_server", "--model-path", "m",
                          "--testbed-device", "gpu"], cwd=prefix, env=env, capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 2 and "invalid choice: 'gpu'" in res.stderr


@no_gpu
def test_a_default_server_runs_on_the_simulated_device(prefix: Path) -> None:
    with running_testbed(prefix, *ddtree(8)) as server:
        info = httpx.get(server.url + "/server_info", timeout=10).json()
        log = server.log()
    assert info["testbed_device"] == "cpu"
    assert "device cpu" in log and "CUDA mode on" not in log


# -- the kernels' semantics, against the CPU mode's kernel ---------------------------------
def _tree(rng: random.Random, ndt: int) -> DraftTree:
    parents = [-1] + [rng.randrange(0, i) for i in range(1, ndt)]
    depths = [0] * ndt
    for i in range(1, ndt):
        depths[i] = depths[parents[i]] + 1
    return DraftTree([rng.randrange(10, 900) for _ in range(ndt)], parents, depths)


def _case(rng: random.Random, static: bool, tile: int | None) -> None:
    dev = DeviceArena(1 << 30)
    bs, ndt, ctx, max_bs = rng.randint(1, 4), rng.choice([3, 9, 17]), 64, 4
    seq_lens = [rng.randint(1, 40) for _ in range(bs)]
    trees = [_tree(rng, ndt) for _ in range(bs)]
    pool = TokenToKVPool(4096, dev, 1)
    kv_locs = [pool.alloc(s) or [] for s in seq_lens]
    for locs in kv_locs:
        pool.write(locs, [rng.randrange(1, 5000) for _ in locs])
    kernel = TreeAttentionKernel(dev, pool, arch="sm_90", faulty_arch="sm_90" if tile else None,
                                 tile_rows=tile)
    width = kernel.row_width(ndt)
    kv_indptr = [sum(seq_lens[:i]) for i in range(bs)]
    if static:
        layout = MaskLayout(static=True, max_bs=max_bs, max_context_len=ctx)
        size = ndt * max_bs * (ctx + ndt)
        wbase, wstride = ref.static_rows(max_bs, ctx, ndt, bs)
        rbase, rstride = ref.static_rows(max_bs, ctx, width, bs)
    else:
        wbase, wstride = ref.ragged_rows(seq_lens, ndt, ndt)
        rbase, rstride = ref.ragged_rows(seq_lens, ndt, width)
        layout = MaskLayout(static=False, indptr=tuple(wbase))
        size = ref.ragged_mask_bytes(seq_lens, ndt)
    # the mask the CPU mode writes on its device == the one the CUDA writer's semantics give
    mask_t = torch.zeros((size + 4096,), dtype=torch.uint8, device=dev)
    write_tree_mask(dev, mask_t, layout, seq_lens, trees, ndt)
    mine = bytearray(size + 4096)
    ref.write_tree_mask(mine, ref.ancestor_rows([t.parents for t in trees], ndt), seq_lens,
                        wbase, wstride, ndt)
    assert bytes(mine) == dev.read(mask_t.data_ptr(), size + 4096)
    kv_t = torch.zeros((max(1, sum(seq_lens)),), dtype=torch.int64, device=dev)
    write_kv_indices(dev, kv_t, kv_indptr, kv_locs)
    ids = [tok for t in trees for tok in t.tokens]
    ids_t = torch.zeros((len(ids),), dtype=torch.int64, device=dev)
    ids_t.copy_(ids)
    want = kernel.run(seq_lens=seq_lens, ndt=ndt, kv_indptr=kv_indptr, kv_indices=kv_t,
                      mask=mask_t, layout=layout, input_ids=ids_t)
    flat_locs = [loc for locs in kv_locs for loc in locs]
    nvis, psum, tree, gathered = ref.verify(bytes(mine), rbase, rstride, seq_lens, ndt,
                                            kv_indptr, flat_locs, pool.tokens, ids)
    prefixes = [tuple(pool.gather(locs)) for locs in kv_locs]
    fetched: list[int] = []

    def gathered_row(row: int, n: int) -> list[int]:
        fetched.append(row)
        return gathered[row][:n]

    got = ref.decode_rows(nvis, psum, tree, seq_lens, ndt, prefixes, gathered_row)
    assert got == want
    if tile is None or ndt <= tile:  # a correct mask: every node sees its whole prefix
        want_vis = [s for s in seq_lens for _ in range(ndt)]
        assert fetched == [] and all(n == s for n, s in zip(nvis, want_vis, strict=False))


@pytest.mark.parametrize("static", [True, False])
@pytest.mark.parametrize("tile", [None, 2])
def test_reference_semantics_match_the_cpu_kernel(static: bool, tile: int | None) -> None:
    rng = random.Random(f"{static}-{tile}")
    for _ in range(25):
        _case(rng, static, tile)


def test_an_undersized_mask_is_overrun_by_the_writer() -> None:
    """The writer is bounded by rows, not by the buffer: sized for 9 draft tokens, 17 written."""
    max_bs, ctx = 2, 32
    mask = bytearray(9 * max_bs * (ctx + 9))
    base, stride = ref.static_rows(max_bs, ctx, 17, 1)
    parents = [[-1] + [0] * 16]
    with pytest.raises(IndexError, match="mask write up to byte"):
        ref.write_tree_mask(mask, ref.ancestor_rows(parents, 17), [5], base, stride, 17)


def test_decode_uses_what_the_kernel_gathered_when_the_prefix_does_not_check_out() -> None:
    prefixes = [(5, 6, 7)]
    good = ref.prefix_checksum(prefixes[0])
    assert good == 5 * 1 + 6 * 2 + 7 * 3
    # node 0: whole prefix, checks out; node 1: nothing visible; node 2: all visible but a
    # corrupted KV index gathered 99 instead of 6; node 3: partly visible
    nvis, psum = [3, 0, 3, 2], [good, 0, good + 93 * 2, 5 + 7 * 3]
    tree = [11, -1, -1, -1, 11, 12, -1, -1, 11, -1, 13, -1, -1, -1, -1, -1]
    gathered = {2: [5, 99, 7], 3: [5, -1, 7]}
    fetched: list[int] = []

    def row(r: int, n: int) -> list[int]:
        fetched.append(r)
        return gathered[r][:n]

    rows = ref.decode_rows(nvis, psum, tree, [3], 4, prefixes, row)
    assert rows == [[((5, 6, 7), (11,)), ((), (11, 12)), ((5, 99, 7), (11, 13)), ((5, 7), ())]]
    assert fetched == [2, 3]  # the usual rows cost no copy of what was gathered
