// Implementation of progress.h.
#include "trainer/reporting/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "core/strings.h"

namespace dtrain::trainer {
namespace {

std::atomic<int> g_relay_columns{0};

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// "5s", "2m05s", "1h02m"
std::string duration_text(double seconds) {
  const auto s = static_cast<long long>(std::max(0.0, std::round(seconds)));
  if (s < 60) return str(s, "s");
  if (s < 3600) return str(s / 60, "m", s % 60 < 10 ? "0" : "", s % 60, "s");
  return str(s / 3600, "h", s % 3600 / 60 < 10 ? "0" : "", s % 3600 / 60, "m");
}

std::string bar_text(int width, int64_t step, int64_t steps) {
  const int filled = steps > 0 ? static_cast<int>(width * step / steps) : width;
  std::string bar(static_cast<size_t>(width), '.');
  for (int i = 0; i < width; ++i) bar[static_cast<size_t>(i)] = i < filled ? '=' : (i == filled ? '>' : '.');
  return "[" + bar + "]";
}

}  // namespace

std::string progress_line(const StepProgress& p, int width) {
  const int limit = std::max(1, width - 1);  // (the last column would wrap on some terminals)
  const double ms_per_step = p.step > 0 ? 1000.0 * p.seconds / static_cast<double>(p.step) : 0.0;
  const std::string counter = str(p.step, "/", p.steps, " ");
  const std::string eta =
      p.step < p.steps ? " ETA " + duration_text(ms_per_step * static_cast<double>(p.steps - p.step) / 1000.0)
                       : " " + duration_text(p.seconds);
  const std::string ms = " " + format_fixed(ms_per_step, 1) + "ms/step";
  const std::string loss = " - loss: " + format_fixed(p.loss, 4), acc = " - accuracy: " + format_fixed(p.accuracy, 4);
  const std::string rate = " - " + format_fixed(p.samples_per_sec, 0) + " samples/s";
  // What a narrower line leaves out, level by level: the samples/s, the accuracy,
  // the time per step, the word "Epoch", the ETA, the loss; the bar takes the room
  // left (10 to 30 columns), and what still does not fit is cut.
  constexpr int kLevels = 7, kFullBar = 30, kSmallestBar = 10;
  std::string head, tail;
  int bar = kSmallestBar;
  for (int level = 0; level < kLevels; ++level) {
    head = (level >= 4 ? str(p.epoch, "/", p.epochs, " ") : str("Epoch ", p.epoch, "/", p.epochs, " ")) + counter;
    tail = (level < 5 ? eta : "") + (level < 3 ? ms : "") + (level < 6 ? loss : "") + (level < 2 ? acc : "") +
           (level < 1 ? rate : "");
    bar = limit - static_cast<int>(head.size() + tail.size()) - 2;  // 2: the brackets
    if (bar >= kSmallestBar) break;
  }
  const std::string line = head + bar_text(std::clamp(bar, kSmallestBar, kFullBar), p.step, p.steps) + tail;
  return line.substr(0, static_cast<size_t>(limit));
}

void relay_progress(int columns) { g_relay_columns = std::max(0, columns); }

Progress::Progress() : terminal_(isatty(STDOUT_FILENO) == 1), relay_columns_(g_relay_columns.load()) {}

int Progress::live_columns() const {
  if (relay_columns_ > 0) return relay_columns_;
  if (!terminal_) return 0;
  winsize size{};
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) != 0 || size.ws_col == 0) return 80;
  return size.ws_col;
}

void Progress::step(const StepProgress& p) {
  if (relay_columns_ == 0 && !terminal_) return;
  const double now = now_seconds();
  if (p.step != p.steps && now - last_draw_ < 0.1) return;
  last_draw_ = now;
  const std::string line = progress_line(p, live_columns());
  if (relay_columns_ > 0)
    std::printf("dtrain-progress: %s\n", line.c_str());  // launch/task_output.h's kProgressRelayTag
  else
    std::printf("\r%s\033[K", line.c_str());
  std::fflush(stdout);
}

std::string epoch_line(const EpochReport& r) {
  char buffer[512];
  const double ms_per_step = r.steps > 0 ? 1000.0 * r.seconds / static_cast<double>(r.steps) : 0.0;
  std::string line;
  if (r.label_width > 1) {
    // Per token: a sequence's loss, its perplexity, and the tokens behind the samples.
    const std::string mfu = r.mfu > 0 ? str(", MFU ", std::llround(1000.0 * r.mfu) / 10.0, "%") : std::string();
    std::snprintf(buffer, sizeof buffer,
                  "Epoch %lld/%lld: %lld steps, %.1fs, %.1fms/step, %.0f samples/s, %.0f tokens/s%s - loss: %.4f - "
                  "perplexity: %.4f - accuracy: %.4f",
                  static_cast<long long>(r.epoch), static_cast<long long>(r.epochs), static_cast<long long>(r.steps),
                  r.seconds, ms_per_step, r.samples_per_sec, r.tokens_per_sec, mfu.c_str(), r.loss, std::exp(r.loss),
                  r.accuracy);
    line = buffer;
    if (r.has_validation) {
      std::snprintf(buffer, sizeof buffer, " - val_loss: %.4f - val_perplexity: %.4f - val_accuracy: %.4f", r.val_loss,
                    std::exp(r.val_loss), r.val_accuracy);
      line += buffer;
    }
    return line;
  }
  std::snprintf(buffer, sizeof buffer, "Epoch %lld/%lld: %lld steps, %.1fs, %.1fms/step, %.0f samples/s - loss: %.4f - accuracy: %.4f",
                static_cast<long long>(r.epoch), static_cast<long long>(r.epochs), static_cast<long long>(r.steps),
                r.seconds, ms_per_step, r.samples_per_sec, r.loss, r.accuracy);
  line = buffer;
  if (r.has_validation) {
    std::snprintf(buffer, sizeof buffer, " - val_loss: %.4f - val_accuracy: %.4f", r.val_loss, r.val_accuracy);
    line += buffer;
  }
  return line;
}

void Progress::epoch_done(const EpochReport& r) {
  if (terminal_ && relay_columns_ == 0) std::printf("\r\033[K");
  std::printf("%s\n", epoch_line(r).c_str());
  std::fflush(stdout);
}

}  // namespace dtrain::trainer
