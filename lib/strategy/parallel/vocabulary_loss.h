// Cross-entropy on logits split by vocabulary over a tensor-parallel group
// (Megatron-LM's vocab-parallel cross-entropy): each task holds the logits of
// its slice of the classes, (N, ..., V / T), from the output Dense split by
// columns, and the full (N, ..., V) logits are never gathered. Per label
// position, over the group:
//   - the row's maximum and its first index: each task's, all-gathered (2T
//     floats a position);
//   - the sum of exp(logit - max) and the label's logit (from the task whose
//     slice holds it, zero elsewhere): one all-reduce of two floats a position;
//   - loss = log(sum) + max - the label's logit; a hit when the row's first
//     maximum is the label's (argmax == label, as nn::Loss counts it);
//   - the gradient of this task's slice: (softmax - one-hot) x the scale, each
//     position's share of its sample's mean (as nn::Loss::compute).
// The same figures as nn::Loss with sparse or categorical cross-entropy from
// logits, within float rounding (the sums are taken in another order). Host
// memory (tensor parallelism runs on the CPU).
#pragma once

#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "nn/losses.h"
#include "tensor/tensor.h"

namespace dtrain::strategy {

class VocabularyParallelLoss {
 public:
  // `group`: the tensor-parallel group (this task's slice: its rank); `classes`:
  // the whole vocabulary V (a multiple of the group's size).
  VocabularyParallelLoss(comm::Communicator& group, int64_t classes);

  // As nn::Loss::compute, with `logits` this task's slice. Collective over the group.
  void compute(const Tensor& logits, const Tensor& labels, Tensor* grad, float grad_scale, nn::LossRows& rows);

 private:
  comm::Communicator& group_;
  int64_t classes_;
  std::vector<float> maxima_, gathered_, sums_, argmax_;
};

}  // namespace dtrain::strategy
