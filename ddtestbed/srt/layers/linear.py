"""The verify pass's GEMMs and the cuBLAS workspace they run with.

Inside CUDA-graph capture cuBLAS cannot grow its workspace, so it runs with the fixed one set
below. On GPUs whose GEMM heuristics want more workspace per row than that (the scenario's
`defects.cublas_workspace.bytes_per_token`), a large enough GEMM fails during capture. Eager
mode lets cuBLAS allocate what it needs.
"""
from __future__ import annotations

CUBLAS_WORKSPACE_BYTES = 4 * 1024 * 1024

CUBLAS_EXECUTION_FAILED = (
    "CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx( handle, opa, opb, "
    "m, n, k, &falpha, a, CUDA_R_16BF, lda, b, CUDA_R_16BF, ldb, &fbeta, c, CUDA_R_16BF, ldc, "
    "compute_type, CUBLAS_GEMM_DEFAULT_TENSOR_OP)`"
)


def gemm_bf16(m: int, n: int, k: int, *, capturing: bool, workspace_per_row: int) -> None:
    """Check that an (m x k) @ (k x n) bf16 GEMM can run; raise like cuBLAS when it cannot."""
    if capturing and m * workspace_per_row > CUBLAS_WORKSPACE_BYTES:
        raise RuntimeError(CUBLAS_EXECUTION_FAILED)
