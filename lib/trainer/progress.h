// Progress output on stdout: a live bar redrawn in place when stdout is a terminal,
// plain lines (one per epoch) otherwise, so logs stay readable. A job whose samples
// have a sequence of labels also shows tokens/s and perplexity.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace dtrain::trainer {

struct EpochReport {
  int64_t epoch = 0, epochs = 0, steps = 0;
  double seconds = 0.0, samples_per_sec = 0.0;
  // Labels per training sample: > 1 (a sequence's next tokens) adds tokens/s and
  // perplexity (exp of the per-token loss) to what is reported.
  int64_t label_width = 1;
  double tokens_per_sec = 0.0;
  double loss = 0.0, accuracy = 0.0;
  double learning_rate = 0.0;    // at the epoch's last step (Keras' epoch_learning_rate)
  double step_ms = 0.0;          // the epoch's time per step
  double comm_wait_share = 0.0;  // share of the steps' time spent waiting for gradients
  bool has_validation = false;
  double val_loss = 0.0, val_accuracy = 0.0;
  std::optional<double> loss_scale;  // train.precision mixed_float16: the scale after the epoch
};

class Progress {
 public:
  explicit Progress(bool live);  // live: redraw a bar (stdout is a terminal)
  // Called after each training step of an epoch (only draws when live, at most ~10 times/s).
  void step(int64_t epoch, int64_t epochs, int64_t step, int64_t steps, double loss,
            double accuracy, double samples_per_sec);
  void epoch_done(const EpochReport& report);

 private:
  bool live_;
  double last_draw_ = -1.0;
};

// True when stdout is a terminal.
bool stdout_is_terminal();

}  // namespace dtrain::trainer
