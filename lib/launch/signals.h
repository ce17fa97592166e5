// SignalPipe: the launcher's signals as bytes on a self-pipe, for its poll() loop.
//
// While a SignalPipe exists, SIGINT, SIGTERM, SIGHUP, SIGCHLD and SIGUSR1 are caught by a
// handler that only write()s the signal number as one byte to a non-blocking pipe
// (async-signal-safe); fd() goes into poll() with the task pipes, and take() reads
// what arrived. SIGPIPE is ignored meanwhile, so a closed stdout shows as EPIPE
// instead of killing the launcher (spawned children reset it). The previous
// dispositions come back on destruction. At most one SignalPipe exists at a time.
#pragma once

#include <vector>

namespace dtrain::launch {

class SignalPipe {
 public:
  SignalPipe();
  ~SignalPipe();
  SignalPipe(const SignalPipe&) = delete;
  SignalPipe& operator=(const SignalPipe&) = delete;

  int fd() const { return read_fd_; }
  // The signals caught since the last call, in order (SIGCHLD included).
  std::vector<int> take();

 private:
  int read_fd_ = -1;
  int write_fd_ = -1;
};

}  // namespace dtrain::launch
