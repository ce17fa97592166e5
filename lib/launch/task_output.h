// The output of the launched tasks: pipe bytes -> whole lines -> the launcher's
// stdout/stderr with a "[worker:1] " prefix (the lead task's lines, the others'
// warnings and errors, or everything), and every line to the task's log file.
//
// LineSplitter turns the chunks read from a pipe into lines, keeping a partial line
// until its newline arrives (or it grows past kMaxLine, or the pipe ends). TaskOutput
// writes each line with one write() (a loop only if the kernel takes part of it), so
// lines of different tasks never interleave, and appends it, without the prefix, to
// <output.dir>/logs/<type>-<index>.log, which holds both streams in arrival order.
// A line that starts with the prefix already (a task's own log prefix) keeps just
// the one on the terminal, and none in the log (whose lines have no prefix).
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace dtrain::launch {

class LineSplitter {
 public:
  static constexpr size_t kMaxLine = 64 * 1024;  // longer "lines" are cut here

  // Calls `on_line` (without the '\n') for every line completed by `bytes`.
  void feed(std::string_view bytes, const std::function<void(std::string_view)>& on_line);
  // The last, unterminated line (if any), at end of file.
  void finish(const std::function<void(std::string_view)>& on_line);

 private:
  std::string partial_;
};

// Writes all of `bytes` to `fd`, retrying after EINTR, short writes and EAGAIN (a
// non-blocking descriptor waits in poll()). Returns false when the descriptor fails
// (e.g. EPIPE: nobody reads the launcher's output any more); the caller goes on.
bool write_all(int fd, std::string_view bytes);

// The launcher's terminal (or pipe): every task's lines that are shown, and one
// live line at the bottom (the lead task's progress bar, `dtrain run`'s
// kProgressRelayTag lines) that other lines scroll above: it is cleared before a
// line is written and drawn again after it; a stdout line of the task that owns
// it (its epoch line) ends it. Shared by the tasks' TaskOutputs.
class Console {
 public:
  // plain_stdout: stdout lines go out without the task's prefix (machine-readable
  // output); no live line then.
  Console(int out_fd, int err_fd, bool plain_stdout) : out_fd_(out_fd), err_fd_(err_fd), plain_stdout_(plain_stdout) {}
  // A whole line (with its '\n') to stdout (stream 1) or stderr (stream 2), from `from`.
  void write_line(int stream, std::string_view line, const void* from = nullptr);
  // Replaces the live line with `text` (no newline), owned by `from`.
  void live(std::string_view text, const void* from);
  // Removes the live line (at the end of the job).
  void end_live();
  bool plain_stdout() const { return plain_stdout_; }
  int err_fd() const { return err_fd_; }

 private:
  int out_fd_, err_fd_;
  bool plain_stdout_;
  std::string live_;  // shown at the bottom of out_fd ("" = none)
  const void* live_owner_ = nullptr;
};

// `dtrain run` under `dtrain launch` (DTRAIN_PROGRESS_COLUMNS set) prints its
// progress bar as stdout lines that start with this; the launcher shows the text
// as the Console's live line and keeps it out of the log.
inline constexpr std::string_view kProgressRelayTag = "dtrain-progress: ";

// Which lines of a task reach the console (the log file has every line; stderr
// lines tagged core/log.h's kLogOnlyTag go to the log file alone).
enum class ConsoleLines {
  kAll,        // every line
  kImportant,  // stderr lines that are warnings or errors ("warning:", "error:")
};

class TaskOutput {
 public:
  // `prefix` e.g. "[worker:1] "; `log_path` is created, and truncated unless `append`
  // (a restarted job keeps the earlier starts' logs). The task's lines go to
  // `console` (stdout's to its stdout, stderr's to its stderr) as `shown` says,
  // and every one, without the prefix, to the log. Throws IoError naming the file
  // when it cannot be opened.
  TaskOutput(std::string prefix, const std::string& log_path, Console& console, ConsoleLines shown,
             bool append = false);
  ~TaskOutput();
  TaskOutput(const TaskOutput&) = delete;
  TaskOutput& operator=(const TaskOutput&) = delete;

  // One line from the task's stdout (stream 1) or stderr (stream 2).
  void line(int stream, std::string_view text);
  const std::string& log_path() const { return log_path_; }
  // The task's last stderr line with "error:" in it ("" when none), without its prefix.
  const std::string& last_error() const { return last_error_; }
  // Its last non-empty line on stderr (ssh's own complaint has no "error:").
  const std::string& last_stderr_line() const { return last_stderr_line_; }

 private:
  struct Named {
    std::string own;  // the line without the task's name
    size_t tag = 0;   // the length of its "dtrain: error: " / "dtrain: warning: " (0: not a diagnostic)
  };
  Named without_name(std::string_view text) const;

  std::string prefix_;
  std::string log_path_;
  Console& console_;
  ConsoleLines shown_;
  int log_fd_ = -1;
  std::string last_error_;
  std::string last_stderr_line_;
  bool log_failed_ = false;
};

}  // namespace dtrain::launch
