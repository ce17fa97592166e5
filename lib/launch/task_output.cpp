// Implementation of task_output.h.
#include "launch/task_output.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/log.h"
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

void Console::write_line(int stream, std::string_view line, const void* from) {
  if (!live_.empty()) write_all(out_fd_, "\r\033[K");
  if (stream == 1 && from != nullptr && from == live_owner_) live_.clear();  // its epoch line: the bar is done
  write_all(stream == 2 ? err_fd_ : out_fd_, line);
  if (!live_.empty()) write_all(out_fd_, live_);
}

void Console::live(std::string_view text, const void* from) {
  live_.assign(text);
  live_owner_ = from;
  write_all(out_fd_, str("\r", live_, "\033[K"));
}

void Console::end_live() {
  if (live_.empty()) return;
  live_.clear();
  write_all(out_fd_, "\r\033[K");
}

TaskOutput::TaskOutput(std::string prefix, const std::string& log_path, Console& console, ConsoleLines shown,
                       bool append)
    : prefix_(std::move(prefix)), log_path_(log_path), console_(console), shown_(shown) {
  log_fd_ = ::open(log_path.c_str(),
                   O_WRONLY | O_CREAT | (append ? 0 : O_TRUNC) | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd_ < 0)
    throw IoError(str("cannot write the task log ", log_path, ": ", std::strerror(errno),
                      "; set output.dir to a writable directory"));
}

TaskOutput::~TaskOutput() {
  if (log_fd_ >= 0) ::close(log_fd_);
}

TaskOutput::Named TaskOutput::without_name(std::string_view text) const {
  // A task that names itself already ("[worker:1] dtrain: ..." or "dtrain: error:
  // [worker:1] ...") is not named twice: its name comes out here, and goes back
  // in where a diagnostic's tag ends (`tag`, 0 for other lines).
  if (text.substr(0, prefix_.size()) == prefix_) text.remove_prefix(prefix_.size());
  for (const std::string_view tag : {"dtrain: error: ", "dtrain: warning: ", "dtrain: debug: "}) {
    if (text.substr(0, tag.size()) != tag) continue;
    if (text.substr(tag.size(), prefix_.size()) == prefix_)
      return {str(tag, text.substr(tag.size() + prefix_.size())), tag.size()};
    return {std::string(text), tag.size()};
  }
  return {std::string(text), 0};
}

void TaskOutput::line(int stream, std::string_view text) {
  if (stream == 1 && text.substr(0, kProgressRelayTag.size()) == kProgressRelayTag) {
    if (!console_.plain_stdout()) console_.live(str(prefix_, text.substr(kProgressRelayTag.size())), this);
    return;  // a redraw, not a line of the log
  }
  const std::string_view log_only_tag = log::kLogOnlyTag;
  const bool log_only = stream == 2 && text.substr(0, log_only_tag.size()) == log_only_tag;
  if (log_only) text.remove_prefix(log_only_tag.size());
  const Named named = without_name(text);
  const std::string_view own = named.own;
  const bool error = stream == 2 && !log_only && own.find("error:") != std::string_view::npos;
  if (error) last_error_.assign(own);
  if (stream == 2 && !log_only && own.find_first_not_of(" \t\r") != std::string_view::npos)
    last_stderr_line_.assign(own);
  const bool important = error || (stream == 2 && !log_only && own.find("warning:") != std::string_view::npos);
  if ((shown_ == ConsoleLines::kAll && !log_only) || important) {
    const bool plain = stream == 1 && console_.plain_stdout();
    // A diagnostic says what it is first, then the task: "dtrain: error: [worker:1] ...".
    const std::string shown = plain          ? std::string(own)
                              : named.tag > 0 ? str(own.substr(0, named.tag), prefix_, own.substr(named.tag))
                                             : str(prefix_, own);
    console_.write_line(stream, shown + "\n", this);
  }
  if (!log_failed_ && !write_all(log_fd_, str(own, "\n"))) {
    log_failed_ = true;  // say it once; the job goes on
    write_all(console_.err_fd(), str("dtrain: warning: cannot write ", log_path_, ": ", std::strerror(errno),
                                     "; the task's lines still go to the terminal\n"));
  }
}

}  // namespace dtrain::launch
