// Implementation of progress.h.
#include "trainer/progress.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>

namespace dtrain::trainer {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

bool stdout_is_terminal() { return isatty(STDOUT_FILENO) == 1; }

Progress::Progress(bool live) : live_(live) {}

void Progress::step(int64_t epoch, int64_t epochs, int64_t step, int64_t steps, double loss,
                    double accuracy, double samples_per_sec) {
  if (!live_) return;
  const double now = now_seconds();
  if (step != steps && now - last_draw_ < 0.1) return;
  last_draw_ = now;
  constexpr int kWidth = 30;
  const int filled = steps > 0 ? static_cast<int>(kWidth * step / steps) : kWidth;
  char bar[kWidth + 1];
  for (int i = 0; i < kWidth; ++i) bar[i] = i < filled ? '=' : (i == filled ? '>' : '.');
  bar[kWidth] = '\0';
  std::printf("\rEpoch %lld/%lld [%s] %lld/%lld - loss: %.4f - accuracy: %.4f - %.0f samples/s ",
              static_cast<long long>(epoch), static_cast<long long>(epochs), bar,
              static_cast<long long>(step), static_cast<long long>(steps), loss, accuracy,
              samples_per_sec);
  std::fflush(stdout);
}

void Progress::epoch_done(const EpochReport& r) {
  if (live_) std::printf("\r\033[K");
  if (r.label_width > 1) {
    // Per token: a sequence's loss, its perplexity, and the tokens behind the samples.
    std::printf("Epoch %lld/%lld: %lld steps, %.1fs, %.0f samples/s, %.0f tokens/s - loss: %.4f - perplexity: %.4f - "
                "accuracy: %.4f",
                static_cast<long long>(r.epoch), static_cast<long long>(r.epochs), static_cast<long long>(r.steps),
                r.seconds, r.samples_per_sec, r.tokens_per_sec, r.loss, std::exp(r.loss), r.accuracy);
    if (r.has_validation)
      std::printf(" - val_loss: %.4f - val_perplexity: %.4f - val_accuracy: %.4f", r.val_loss, std::exp(r.val_loss),
                  r.val_accuracy);
    std::printf("\n");
    std::fflush(stdout);
    return;
  }
  std::printf("Epoch %lld/%lld: %lld steps, %.1fs, %.0f samples/s - loss: %.4f - accuracy: %.4f",
              static_cast<long long>(r.epoch), static_cast<long long>(r.epochs),
              static_cast<long long>(r.steps), r.seconds, r.samples_per_sec, r.loss, r.accuracy);
  if (r.has_validation)
    std::printf(" - val_loss: %.4f - val_accuracy: %.4f", r.val_loss, r.val_accuracy);
  std::printf("\n");
  std::fflush(stdout);
}

}  // namespace dtrain::trainer
