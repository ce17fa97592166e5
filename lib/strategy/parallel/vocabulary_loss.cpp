// Implementation of vocabulary_loss.h.
#include "strategy/parallel/vocabulary_loss.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"

namespace dtrain::strategy {

VocabularyParallelLoss::VocabularyParallelLoss(comm::Communicator& group, int64_t classes)
    : group_(group), classes_(classes) {
  DT_CHECK(classes % group.size() == 0, "a vocabulary of ", classes, " over ", group.size(), " tasks");
}

void VocabularyParallelLoss::compute(const Tensor& logits, const Tensor& labels, Tensor* grad, float grad_scale,
                                     nn::LossRows& rows) {
  DT_CHECK(logits.device().is_cpu(), "the vocabulary-parallel loss runs on the host");
  const int64_t part = logits.dim(logits.rank() - 1), parts = group_.size();
  DT_CHECK_EQ(part * parts, classes_);
  const int64_t n = logits.numel() / part, samples = logits.dim(0);
  const int64_t first = group_.rank() * part;
  DT_CHECK_EQ(labels.numel(), n);
  if (!rows.both.defined() || rows.both.numel() != 2 * n) {
    rows.both = Tensor({2 * n});
    rows.loss = rows.both.flat_slice(0, n);
    rows.hit = rows.both.flat_slice(n, n);
  }
  rows.samples = samples;
  const float* x = logits.data();
  const float* label = labels.data();
  // Each position's maximum over the whole vocabulary, and its first index (the
  // argmax nn::Loss counts a hit by): each slice's, then over the slices.
  maxima_.resize(static_cast<size_t>(2 * n));
  for (int64_t r = 0; r < n; ++r) {
    const float* top = std::max_element(x + r * part, x + (r + 1) * part);
    maxima_[r] = *top;
    maxima_[n + r] = static_cast<float>(first + (top - (x + r * part)));  // (exact below 2^24 classes)
  }
  gathered_.resize(static_cast<size_t>(2 * n * parts));
  group_.all_gather(maxima_.data(), static_cast<size_t>(2 * n), gathered_.data());
  argmax_.resize(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t t = 0; t < parts; ++t) {  // (slices in class order: the first of the equal maxima wins)
      const float m = gathered_[t * 2 * n + r];
      if (t == 0 || m > maxima_[r]) {
        maxima_[r] = m;
        argmax_[r] = gathered_[t * 2 * n + n + r];
      }
    }
  // The sums of exp(logit - max), and the label's logit where this slice holds it.
  sums_.assign(static_cast<size_t>(2 * n), 0.0f);
  for (int64_t r = 0; r < n; ++r) {
    const float* row = x + r * part;
    double sum = 0.0;
    for (int64_t j = 0; j < part; ++j) sum += std::exp(static_cast<double>(row[j] - maxima_[r]));
    sums_[r] = static_cast<float>(sum);
    const int64_t at = static_cast<int64_t>(label[r]) - first;
    if (at >= 0 && at < part) sums_[n + r] = row[at];
  }
  group_.all_reduce(sums_.data(), sums_.size(), comm::ReduceOp::kSum);
  float* loss = rows.loss.data();
  float* hit = rows.hit.data();
  for (int64_t r = 0; r < n; ++r) {
    loss[r] = std::log(sums_[r]) + maxima_[r] - sums_[n + r];
    hit[r] = argmax_[r] == label[r] ? 1.0f : 0.0f;
  }
  if (!grad) return;
  DT_CHECK(grad->shape() == logits.shape(), "loss grad shape");
  // Each position's share of its sample's mean loss.
  const float scale = grad_scale / static_cast<float>(samples > 0 ? n / samples : 1);
  float* g = grad->data();
  for (int64_t r = 0; r < n; ++r) {
    const float* row = x + r * part;
    const int64_t at = static_cast<int64_t>(label[r]) - first;
    for (int64_t j = 0; j < part; ++j) {
      const float p = std::exp(row[j] - maxima_[r]) / sums_[r];
      g[r * part + j] = (p - (j == at ? 1.0f : 0.0f)) * scale;
    }
  }
}

}  // namespace dtrain::strategy
