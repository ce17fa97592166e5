// The own CUDA kernels: one grid-stride kernel template runs a body of bodies.h
// over [0, n) on the compute stream; the launchers of launchers.h instantiate it.
#include <algorithm>

#include "kernels/cuda/launchers.h"
#include "kernels/cuda/runtime.h"

namespace dtrain::kernels::cuda {
namespace {

constexpr int kThreads = 256;

template <class Body>
__global__ void for_each_index(Body body, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) body(i);
}

template <class Body>
void run(const Body& body, int64_t n, const char* name) {
  if (n <= 0) return;
  // Enough blocks to fill the GPU several times over; the grid-stride loop covers the rest.
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 65535);
  // An error an unchecked call left behind (cudaFree or cudaSetDevice in a
  // destructor) is not this launch's: taken off first, so the check below names
  // this launch's own failure. (A sticky error, a fault on the device, comes back
  // at the check and at every call after it, whoever caused it.)
  (void)cudaGetLastError();
  for_each_index<<<static_cast<unsigned>(blocks), kThreads, 0, context().compute>>>(body, n);
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) throw_cuda_error(name, status, __FILE__, __LINE__);
}

template <class Value>
void column_sums_impl(const Value& value, int64_t rows, int64_t cols, float scale, float* out) {
  if (cols <= 0) return;
  const int64_t chunk_rows = column_chunk_rows(rows, cols);
  const int64_t chunks = std::max<int64_t>(1, (rows + chunk_rows - 1) / chunk_rows);
  Scratch partial(static_cast<size_t>(chunks * cols) * sizeof(float));
  run(ColumnChunkSumBody<Value>{value, rows, cols, chunk_rows, partial.floats()}, chunks * cols,
      "column_sums (pass 1)");
  run(ColumnFinishBody{partial.floats(), chunks, cols, scale, out}, cols, "column_sums (pass 2)");
}

}  // namespace

#define DT_DEFINE_LAUNCH(Body) \
  void launch(const Body& body, int64_t n) { run(body, n, #Body); }

DT_DEFINE_LAUNCH(FillBody)
DT_DEFINE_LAUNCH(BiasActivationBody<float>)
DT_DEFINE_LAUNCH(BiasActivationBody<bf16_bits>)
DT_DEFINE_LAUNCH(BiasActivationBody<f16_bits>)
DT_DEFINE_LAUNCH(ActivationForwardBody<float>)
DT_DEFINE_LAUNCH(ActivationForwardBody<bf16_bits>)
DT_DEFINE_LAUNCH(ActivationForwardBody<f16_bits>)
DT_DEFINE_LAUNCH(ActivationBackwardBody<float>)
DT_DEFINE_LAUNCH(ActivationBackwardBody<bf16_bits>)
DT_DEFINE_LAUNCH(ActivationBackwardBody<f16_bits>)
DT_DEFINE_LAUNCH(SoftmaxRowsBody)
DT_DEFINE_LAUNCH(SoftmaxBackwardRowsBody)
DT_DEFINE_LAUNCH(DropoutBody<float>)
DT_DEFINE_LAUNCH(DropoutBody<bf16_bits>)
DT_DEFINE_LAUNCH(DropoutBody<f16_bits>)
DT_DEFINE_LAUNCH(MultiplyBody<float>)
DT_DEFINE_LAUNCH(MultiplyBody<bf16_bits>)
DT_DEFINE_LAUNCH(MultiplyBody<f16_bits>)
DT_DEFINE_LAUNCH(AxpyBody)
DT_DEFINE_LAUNCH(CastToBf16Body)
DT_DEFINE_LAUNCH(CastFromBf16Body)
DT_DEFINE_LAUNCH(CastToF16Body)
DT_DEFINE_LAUNCH(CastFromF16Body)
DT_DEFINE_LAUNCH(NonFiniteFlagBody)
DT_DEFINE_LAUNCH(DivideBody)
DT_DEFINE_LAUNCH(MovingAverageBody)
DT_DEFINE_LAUNCH(ClassLossBody)
DT_DEFINE_LAUNCH(SgdBody)
DT_DEFINE_LAUNCH(AdamBody)
DT_DEFINE_LAUNCH(RmspropBody)
DT_DEFINE_LAUNCH(AdagradBody)
DT_DEFINE_LAUNCH(SumBody)
DT_DEFINE_LAUNCH(ClipByNormBody)
DT_DEFINE_LAUNCH(ClipByValueBody)
DT_DEFINE_LAUNCH(BatchNormApplyBody)
DT_DEFINE_LAUNCH(BatchNormBackwardBody)
DT_DEFINE_LAUNCH(BatchNormGammaGradBody)
DT_DEFINE_LAUNCH(PadBody<float>)
DT_DEFINE_LAUNCH(PadBody<bf16_bits>)
DT_DEFINE_LAUNCH(PadBody<f16_bits>)
DT_DEFINE_LAUNCH(CropBody<float>)
DT_DEFINE_LAUNCH(CropBody<bf16_bits>)
DT_DEFINE_LAUNCH(CropBody<f16_bits>)
DT_DEFINE_LAUNCH(HwioToOhwiBody<float>)
DT_DEFINE_LAUNCH(HwioToOhwiBody<bf16_bits>)
DT_DEFINE_LAUNCH(HwioToOhwiBody<f16_bits>)
DT_DEFINE_LAUNCH(OhwiToHwioBody<float>)
DT_DEFINE_LAUNCH(OhwiToHwioBody<bf16_bits>)
DT_DEFINE_LAUNCH(OhwiToHwioBody<f16_bits>)
DT_DEFINE_LAUNCH(PoolForwardBody<float>)
DT_DEFINE_LAUNCH(PoolForwardBody<bf16_bits>)
DT_DEFINE_LAUNCH(PoolForwardBody<f16_bits>)
DT_DEFINE_LAUNCH(PoolBackwardBody<float>)
DT_DEFINE_LAUNCH(PoolBackwardBody<bf16_bits>)
DT_DEFINE_LAUNCH(PoolBackwardBody<f16_bits>)
DT_DEFINE_LAUNCH(ActivationGradFromInputBody)
DT_DEFINE_LAUNCH(LayerNormRowsBody)
DT_DEFINE_LAUNCH(LayerNormBackwardRowsBody)
DT_DEFINE_LAUNCH(EmbeddingGatherBody)
DT_DEFINE_LAUNCH(EmbeddingScatterBody)
DT_DEFINE_LAUNCH(AttentionForwardRowsBody)
DT_DEFINE_LAUNCH(AttentionDeltaBody)
DT_DEFINE_LAUNCH(AttentionQueryGradBody)
DT_DEFINE_LAUNCH(AttentionKeyValueGradBody)
DT_DEFINE_LAUNCH(HeadsTransposeBody)
DT_DEFINE_LAUNCH(AttentionSoftmaxRowsBody)
DT_DEFINE_LAUNCH(AttentionProbabilitiesBody)
DT_DEFINE_LAUNCH(AttentionScoreGradBody)

#undef DT_DEFINE_LAUNCH

void column_sums(const ElementValue<float>& v, int64_t rows, int64_t cols, float scale, float* out) {
  column_sums_impl(v, rows, cols, scale, out);
}
void column_sums(const ElementValue<bf16_bits>& v, int64_t rows, int64_t cols, float scale, float* out) {
  column_sums_impl(v, rows, cols, scale, out);
}
void column_sums(const ElementValue<f16_bits>& v, int64_t rows, int64_t cols, float scale, float* out) {
  column_sums_impl(v, rows, cols, scale, out);
}
void column_sums(const CenteredSquareValue& v, int64_t rows, int64_t cols, float scale, float* out) {
  column_sums_impl(v, rows, cols, scale, out);
}
void column_sums(const CenteredProductValue& v, int64_t rows, int64_t cols, float scale, float* out) {
  column_sums_impl(v, rows, cols, scale, out);
}
void column_sums(const LayerNormGammaValue& v, int64_t rows, int64_t cols, float scale, float* out) {
  column_sums_impl(v, rows, cols, scale, out);
}

void square_sum(const float* x, int64_t n, float* out) {
  const int64_t parts = square_sum_parts(n);
  Scratch partial(static_cast<size_t>(parts) * sizeof(float));
  run(SquareSumPartBody{x, n, parts, partial.floats()}, parts, "square_sum (pass 1)");
  run(SumBody{partial.floats(), parts, out}, 1, "square_sum (pass 2)");
}

}  // namespace dtrain::kernels::cuda
