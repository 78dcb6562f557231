"""The planner tests' seed matrix (shared by test_planner, test_bisect_counter, test_bisect_log
and test_report_glitches): the seed's suspects and signatures, a spec and a simulated cell."""
from __future__ import annotations

from dataclasses import replace

from ddprobe.bisect.agreement import AgreementOptions
from ddprobe.bisect.cells import PlannedCell
from ddprobe.bisect.planner import BisectSpec, PlanOptions
from ddprobe.bisect.static import Suspect
from ddprobe.results import CellResult, Config, Outcome, Signature

BUDGETS = (8, 16, 32, 64)
MASK = Suspect("cuda_graph_custom_mask", "srt/layers/attention/triton_backend.py", 118,
               "(num_tokens_per_bs * max_bs * (self.max_context_len + num_tokens_per_bs),)",
               "TritonAttnBackend.init_cuda_graph_state", ("fixed-size-growing-use",), 1)
ILLEGAL = Signature("cuda_illegal_address", "CUDA error: an illegal memory access was encountered")
CUBLAS = Signature("cublas", "[capture] CUBLAS_STATUS_EXECUTION_FAILED when calling cublasGemmEx")
GARBAGE = Signature("garbage", "accept_length=1.01 coding 0/5")


def spec(*, suspects: tuple[Suspect, ...] = (MASK,), compare: bool = False,
         **opts: object) -> BisectSpec:
    """The seed's spec. The graph-vs-eager comparison of passing budgets is off unless asked
    (`compare=True`): these matrices give no answers to compare, and the restart counts they
    check are the frontier's and the ladders' (tests/test_agreement.py counts the
    comparison's)."""
    opts.setdefault("agreement", AgreementOptions(enabled=compare))
    return BisectSpec(BUDGETS, Config(8, max_bs=64), small_max_bs=16, suspects=suspects,
                      options=PlanOptions(**opts))  # type: ignore[arg-type]


def res(c: PlannedCell, out: str, sig: Signature | None = None) -> CellResult:
    return CellResult("h", c.config, Outcome(out), signature=sig, timings={"restart": 1.0})


def seed(c: PlannedCell) -> CellResult:
    """The seed matrix: 16 crash (mask), 32 garbage (capture), 64 cuBLAS (workspace)."""
    b, g = c.config.budget, c.config.graph
    if b == 8 or not g:
        return res(c, "ok")
    if b == 16:
        return res(c, "ok") if "cuda_graph_custom_mask" in c.buffers else res(c, "crash", ILLEGAL)
    if b == 32:
        return res(c, "garbage", GARBAGE)
    # b64: the workspace; with a smaller max bs the capture defect of b32 shows instead
    if c.config.max_bs == 16:
        return res(c, "garbage", GARBAGE)
    return res(c, "crash", CUBLAS)


def cheap_seed(c: PlannedCell) -> CellResult:
    """The seed with dummy weights: the same crashes; anything that does not crash is garbage
    (random weights), with acceptance near 1."""
    r = seed(replace(c, cheap=False))
    if c.cheap and r.outcome.value != "crash":
        r = res(c, "garbage", GARBAGE)
    return replace(r, cheap=c.cheap or None)
