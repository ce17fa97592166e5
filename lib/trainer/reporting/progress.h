// Progress output on stdout: a live bar redrawn in place when stdout is a terminal
// (fitted to its width, with the ETA and the time per step, as Keras shows them),
// plain lines (one per epoch) otherwise, so logs stay readable; under `dtrain
// launch` on a terminal (relay_progress) the bar goes out as "dtrain-progress: "
// lines that the launcher draws as its live line. A job whose samples have a
// sequence of labels also shows tokens/s and perplexity.
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
  double mfu = 0.0;  // a language model on a GPU: model FLOPs utilisation (utilization.h), else 0
  double loss = 0.0, accuracy = 0.0;
  double learning_rate = 0.0;    // at the epoch's last step (Keras' epoch_learning_rate)
  double step_ms = 0.0;          // the epoch's time per step
  double comm_wait_share = 0.0;  // share of the steps' time spent waiting for gradients
  bool has_validation = false;
  double val_loss = 0.0, val_accuracy = 0.0;
  std::optional<double> loss_scale;  // train.precision mixed_float16: the scale after the epoch
};

// Where an epoch is while it runs.
struct StepProgress {
  int64_t epoch = 0, epochs = 0, step = 0, steps = 0;
  double loss = 0.0, accuracy = 0.0, samples_per_sec = 0.0;
  double seconds = 0.0;  // since the epoch began
};

// The bar's text in at most `width` - 1 columns: "Epoch 2/3 120/469 [=====>....]
// ETA 5s 6.2ms/step - loss: 0.5577 - accuracy: 0.8068 - 7603 samples/s"; on a
// narrower terminal the bar shrinks (30 to 10 columns) and the samples/s, the
// accuracy, the time per step, the word "Epoch", the ETA and the loss go, in
// that order; what still does not fit is cut.
std::string progress_line(const StepProgress& p, int width);

// An epoch's line, Keras' end-of-epoch line with time, rates and metrics:
// "Epoch 2/5: 750 steps, 73.2s, 97.6ms/step, 328 samples/s - loss: ...";
// a sequence's adds tokens/s (and MFU where known) and perplexities.
std::string epoch_line(const EpochReport& r);

class Progress {
 public:
  // Draws live when stdout is a terminal, or as the launcher's relay lines
  // (relay_progress); else only the epoch lines.
  Progress();
  // Called after each training step of an epoch (draws at most ~10 times/s).
  void step(const StepProgress& p);
  void epoch_done(const EpochReport& report);

 private:
  int live_columns() const;  // the width to draw in; 0: not live

  bool terminal_;
  int relay_columns_;
  double last_draw_ = -1.0;
};

// `dtrain launch` shows this process's progress in `columns` (DTRAIN_PROGRESS_COLUMNS):
// Progress draws as "dtrain-progress: " lines (launch/task_output.h) from now on.
void relay_progress(int columns);

}  // namespace dtrain::trainer
