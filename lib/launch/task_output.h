// The output of the launched tasks: pipe bytes -> whole lines -> the launcher's
// stdout/stderr with a "[worker:1] " prefix, and the task's log file.
//
// LineSplitter turns the chunks read from a pipe into lines, keeping a partial line
// until its newline arrives (or it grows past kMaxLine, or the pipe ends). TaskOutput
// writes each line with one write() (a loop only if the kernel takes part of it), so
// lines of different tasks never interleave, and appends it, without the prefix, to
// <output.dir>/logs/<type>-<index>.log, which holds both streams in arrival order.
// A line that starts with the prefix already (a task's own log prefix) keeps just
// the one, on the terminal and in the log.
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

class TaskOutput {
 public:
  // `prefix` e.g. "[worker:1] "; `log_path` is created, and truncated unless `append`
  // (a restarted job keeps the earlier starts' logs). Lines of the task's stdout go to
  // `out_fd`, of its stderr to `err_fd`. Throws IoError naming the file when it cannot
  // be opened. `plain_stdout`: stdout lines go to `out_fd` without the prefix
  // (machine-readable output); the log file has them as always.
  TaskOutput(std::string prefix, const std::string& log_path, int out_fd = 1, int err_fd = 2,
             bool append = false, bool plain_stdout = false);
  ~TaskOutput();
  TaskOutput(const TaskOutput&) = delete;
  TaskOutput& operator=(const TaskOutput&) = delete;

  // One line from the task's stdout (stream 1) or stderr (stream 2).
  void line(int stream, std::string_view text);
  const std::string& log_path() const { return log_path_; }

 private:
  std::string prefix_;
  std::string log_path_;
  int out_fd_;
  int err_fd_;
  bool plain_stdout_ = false;
  int log_fd_ = -1;
  bool log_failed_ = false;
};

}  // namespace dtrain::launch
