// Float32 products of many small matrices at once on cuBLASLt (strided
// batched), for the CUDA backend's own ops: attention's per-head products.
// Internal to lib/kernels/cuda; dense.cpp holds the plans (one per shape, GPU
// and pointer alignment, chosen by cuBLASLt's heuristic and cached).
#pragma once

#include <cstdint>

namespace dtrain::kernels::cuda {

// For each of `batch` matrices, column-major as cuBLAS takes them:
//   C_i (m, n) = alpha * op(A_i) . op(B_i)
// op(X) = X, or X^T where trans_x. A_i, B_i and C_i are stored one after the
// other with no gaps: A as (trans_a ? k x m : m x k), B as (trans_b ? n x k : k x n),
// each with its leading dimension = its stored rows. A row-major (r, c) matrix
// is a column-major (c, r) one. FP32 math, on the compute stream.
void batched_matmul(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int64_t batch, float alpha,
                    const float* a, const float* b, float* c);

}  // namespace dtrain::kernels::cuda
