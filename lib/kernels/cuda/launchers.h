// Host-callable launchers of the own kernels in bodies.h (defined in
// kernels.cu): each runs its body over [0, n) on the compute stream and checks
// the launch. Shapes as in bodies.h. No CUDA header needed to call them.
#pragma once

#include <cstdint>

#include "kernels/cuda/bodies.h"
#include "kernels/cuda/attention_bodies.h"
#include "kernels/cuda/sequence_bodies.h"

namespace dtrain::kernels::cuda {

void launch(const FillBody& body, int64_t n);
void launch(const BiasActivationBody<float>& body, int64_t n);
void launch(const BiasActivationBody<bf16_bits>& body, int64_t n);
void launch(const BiasActivationBody<f16_bits>& body, int64_t n);
void launch(const ActivationForwardBody<float>& body, int64_t n);
void launch(const ActivationForwardBody<bf16_bits>& body, int64_t n);
void launch(const ActivationForwardBody<f16_bits>& body, int64_t n);
void launch(const ActivationBackwardBody<float>& body, int64_t n);
void launch(const ActivationBackwardBody<bf16_bits>& body, int64_t n);
void launch(const ActivationBackwardBody<f16_bits>& body, int64_t n);
void launch(const SoftmaxRowsBody& body, int64_t rows);
void launch(const SoftmaxBackwardRowsBody& body, int64_t rows);
void launch(const DropoutBody<float>& body, int64_t n);
void launch(const DropoutBody<bf16_bits>& body, int64_t n);
void launch(const DropoutBody<f16_bits>& body, int64_t n);
void launch(const MultiplyBody<float>& body, int64_t n);
void launch(const MultiplyBody<bf16_bits>& body, int64_t n);
void launch(const MultiplyBody<f16_bits>& body, int64_t n);
void launch(const AxpyBody& body, int64_t n);
void launch(const CastToBf16Body& body, int64_t n);
void launch(const CastFromBf16Body& body, int64_t n);
void launch(const CastToF16Body& body, int64_t n);
void launch(const CastFromF16Body& body, int64_t n);
void launch(const NonFiniteFlagBody& body, int64_t n);
void launch(const DivideBody& body, int64_t n);
void launch(const MovingAverageBody& body, int64_t n);
void launch(const ClassLossBody& body, int64_t rows);
void launch(const SgdBody& body, int64_t n);
void launch(const AdamBody& body, int64_t n);
void launch(const RmspropBody& body, int64_t n);
void launch(const AdagradBody& body, int64_t n);
void launch(const SumBody& body, int64_t n);
void launch(const ClipByNormBody& body, int64_t n);
void launch(const ClipByValueBody& body, int64_t n);
void launch(const BatchNormApplyBody& body, int64_t n);
void launch(const BatchNormBackwardBody& body, int64_t n);
void launch(const BatchNormGammaGradBody& body, int64_t cols);
void launch(const PadBody<float>& body, int64_t n);
void launch(const PadBody<bf16_bits>& body, int64_t n);
void launch(const PadBody<f16_bits>& body, int64_t n);
void launch(const CropBody<float>& body, int64_t n);
void launch(const CropBody<bf16_bits>& body, int64_t n);
void launch(const CropBody<f16_bits>& body, int64_t n);
void launch(const HwioToOhwiBody<float>& body, int64_t n);
void launch(const HwioToOhwiBody<bf16_bits>& body, int64_t n);
void launch(const HwioToOhwiBody<f16_bits>& body, int64_t n);
void launch(const OhwiToHwioBody<float>& body, int64_t n);
void launch(const OhwiToHwioBody<bf16_bits>& body, int64_t n);
void launch(const OhwiToHwioBody<f16_bits>& body, int64_t n);
void launch(const PoolForwardBody<float>& body, int64_t n);
void launch(const PoolForwardBody<bf16_bits>& body, int64_t n);
void launch(const PoolForwardBody<f16_bits>& body, int64_t n);
void launch(const PoolBackwardBody<float>& body, int64_t n);
void launch(const PoolBackwardBody<bf16_bits>& body, int64_t n);
void launch(const PoolBackwardBody<f16_bits>& body, int64_t n);
void launch(const ActivationGradFromInputBody& body, int64_t n);
void launch(const LayerNormRowsBody& body, int64_t rows);
void launch(const LayerNormBackwardRowsBody& body, int64_t rows);
void launch(const EmbeddingGatherBody& body, int64_t n);
void launch(const EmbeddingScatterBody& body, int64_t n);
void launch(const AttentionForwardRowsBody& body, int64_t rows);
void launch(const AttentionDeltaBody& body, int64_t rows);
void launch(const AttentionQueryGradBody& body, int64_t rows);
void launch(const AttentionKeyValueGradBody& body, int64_t rows);
void launch(const HeadsTransposeBody& body, int64_t n);
void launch(const AttentionSoftmaxRowsBody& body, int64_t rows);
void launch(const AttentionProbabilitiesBody& body, int64_t n);
void launch(const AttentionScoreGradBody& body, int64_t n);

// out[c] = scale * sum over rows of value(r, c), for c in [0, cols): two passes
// through a partial-sum scratch buffer.
void column_sums(const ElementValue<float>& value, int64_t rows, int64_t cols, float scale, float* out);
void column_sums(const ElementValue<bf16_bits>& value, int64_t rows, int64_t cols, float scale, float* out);
void column_sums(const ElementValue<f16_bits>& value, int64_t rows, int64_t cols, float scale, float* out);
void column_sums(const CenteredSquareValue& value, int64_t rows, int64_t cols, float scale, float* out);
void column_sums(const CenteredProductValue& value, int64_t rows, int64_t cols, float scale, float* out);
void column_sums(const LayerNormGammaValue& value, int64_t rows, int64_t cols, float scale, float* out);

// out[0] = sum of x[i]^2 for i in [0, n): two passes (SquareSumPartBody, SumBody)
// through a partial-sum scratch buffer; out is device memory.
void square_sum(const float* x, int64_t n, float* out);

}  // namespace dtrain::kernels::cuda
