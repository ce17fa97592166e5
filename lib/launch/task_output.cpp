// Implementation of task_output.h.
#include "launch/task_output.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/strings.h"

namespace dtrain::launch {

void LineSplitter::feed(std::string_view bytes,
                        const std::function<void(std::string_view)>& on_line) {
  while (!bytes.empty()) {
    const size_t newline = bytes.find('\n');
    if (newline == std::string_view::npos) {
      partial_.append(bytes);
      if (partial_.size() >= kMaxLine) {  // no newline in sight: pass it on in pieces
        on_line(partial_);
        partial_.clear();
      }
      return;
    }
    if (partial_.empty()) {
      on_line(bytes.substr(0, newline));
    } else {
      partial_.append(bytes.substr(0, newline));
      on_line(partial_);
      partial_.clear();
    }
    bytes.remove_prefix(newline + 1);
  }
}

void LineSplitter::finish(const std::function<void(std::string_view)>& on_line) {
  if (!partial_.empty()) on_line(partial_);
  partial_.clear();
}

bool write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n > 0) {
      bytes.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      // Bounded: a reader that takes nothing for 10 s loses this line, not the job.
      if (::poll(&p, 1, 10000) <= 0) return false;
      continue;
    }
    return false;
  }
  return true;
}

TaskOutput::TaskOutput(std::string prefix, const std::string& log_path, int out_fd, int err_fd,
                       bool append, bool plain_stdout)
    : prefix_(std::move(prefix)), log_path_(log_path), out_fd_(out_fd), err_fd_(err_fd), plain_stdout_(plain_stdout) {
  log_fd_ = ::open(log_path.c_str(),
                   O_WRONLY | O_CREAT | (append ? 0 : O_TRUNC) | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd_ < 0)
    throw IoError(str("cannot write the task log ", log_path, ": ", std::strerror(errno),
                      "; set output.dir to a writable directory"));
}

TaskOutput::~TaskOutput() {
  if (log_fd_ >= 0) ::close(log_fd_);
}

void TaskOutput::line(int stream, std::string_view text) {
  // A task that names itself already ("[worker:1] dtrain: ...") is not named twice.
  const bool named = text.substr(0, prefix_.size()) == prefix_;
  std::string out;
  out.reserve(prefix_.size() + text.size() + 1);
  out.append(named ? "" : prefix_).append(text).push_back('\n');
  const std::string_view unprefixed = std::string_view(out).substr(named ? 0 : prefix_.size());
  if (stream == 2) write_all(err_fd_, out);
  else write_all(out_fd_, plain_stdout_ ? unprefixed : std::string_view(out));
  if (!log_failed_ &&
      !write_all(log_fd_, unprefixed)) {
    log_failed_ = true;  // say it once; the job goes on
    write_all(err_fd_, str("dtrain: warning: cannot write ", log_path_, ": ", std::strerror(errno),
                           "; the task's lines still go to the terminal\n"));
  }
}

}  // namespace dtrain::launch
