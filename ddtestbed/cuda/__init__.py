"""The testbed's CUDA mode: the verify pass on a real GPU, with real CUDA graphs.

`--testbed-device cuda` keeps everything the CPU mode has (scenarios, flags, HTTP API, log lines,
the same `init_cuda_graph_state` allocation lines that grep-buffers reads and oversize patches
edit) but the buffers are real device tensors and the verify pass runs Triton kernels:

* the tree mask is written into the graph's static `cuda_graph_custom_mask` by a kernel with no
  bounds check against the buffer (defect (a) overruns real device memory);
* the verify kernel reads each draft node's mask row, gathers its ancestors' tokens and the
  visible prefix through the KV indices, and its output decides which draft tokens are accepted;
* graph mode captures the verify step per batch size with `torch.cuda.CUDAGraph`; a buffer
  re-allocated after capture (defect (b)) leaves a real stale pointer in the graph.

torch and triton are optional (`pip install ddprobe[gpu]`): nothing here imports them until the
CUDA mode is chosen, and `auto` only imports torch where a GPU device node exists.
"""
from __future__ import annotations

import glob
import importlib.util
from typing import Optional

DEVICES = ("auto", "cpu", "cuda")


def _gpu_node_present() -> bool:
    # Cheap check first: importing torch takes seconds, and CPU hosts must never pay for it.
    return bool(glob.glob("/dev/nvidia[0-9]*"))


def cuda_unavailable_reason() -> Optional[str]:
    """None when torch, triton and a CUDA GPU are usable; else why not, in one line."""
    missing = [m for m in ("torch", "triton") if importlib.util.find_spec(m) is None]
    if missing:
        return (f"{' and '.join(missing)} not installed (pip install 'ddprobe[gpu]', or torch "
                f"and triton into the server's interpreter)")
    try:
        import torch
    except Exception as e:  # a broken torch install: say so instead of a traceback
        return f"torch does not import: {type(e).__name__}: {e}"
    if not torch.cuda.is_available():
        return "torch sees no CUDA GPU"
    return None


def resolve_device(flag: Optional[str], env_value: Optional[str]) -> str:
    """'cpu' or 'cuda' from --testbed-device, else $DDTESTBED_DEVICE, else auto.

    auto picks cuda only where a GPU device node exists and torch sees a GPU; an explicit
    `cuda` that cannot run raises ValueError (the launcher prints it as a usage error).
    """
    choice = (flag or env_value or "auto").strip().lower()
    if choice not in DEVICES:
        raise ValueError(f"--testbed-device must be one of {', '.join(DEVICES)}, got {choice!r}")
    if choice == "cpu":
        return "cpu"
    if choice == "auto":
        if not _gpu_node_present():
            return "cpu"
        return "cuda" if cuda_unavailable_reason() is None else "cpu"
    why = cuda_unavailable_reason()
    if why is not None:
        raise ValueError(f"--testbed-device cuda: {why}")
    return "cuda"
