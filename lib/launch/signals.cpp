// Implementation of signals.h: sigaction handlers that write one byte each to a
// self-pipe. The handler keeps errno intact; a full pipe drops the byte, which is
// harmless because the reader only needs to learn that some signal came (SIGCHLD is
// followed by a scan of every child anyway).
#include "launch/signals.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"

namespace dtrain::launch {
namespace {

constexpr int kCaught[] = {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGUSR1};

std::atomic<int> g_write_fd{-1};
struct sigaction g_previous[std::size(kCaught)];
struct sigaction g_previous_pipe;

extern "C" void on_signal(int signal) {
  const int saved = errno;
  const unsigned char byte = static_cast<unsigned char>(signal);
  const int fd = g_write_fd.load();
  if (fd >= 0 && ::write(fd, &byte, 1) < 0) {
  }  // a full pipe already says "something happened"
  errno = saved;
}

}  // namespace

SignalPipe::SignalPipe() {
  DT_CHECK(g_write_fd.load() < 0, "only one SignalPipe may exist at a time");
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0)
    throw RuntimeError(str("cannot create the signal pipe: ", std::strerror(errno)));
  read_fd_ = fds[0];
  write_fd_ = fds[1];
  g_write_fd.store(write_fd_);
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (size_t i = 0; i < std::size(kCaught); ++i) {
    action.sa_flags = SA_RESTART | (kCaught[i] == SIGCHLD ? SA_NOCLDSTOP : 0);
    ::sigaction(kCaught[i], &action, &g_previous[i]);
  }
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ::sigaction(SIGPIPE, &ignore, &g_previous_pipe);
  // The handlers must see the signals even if the caller had blocked them.
  sigset_t set;
  sigemptyset(&set);
  for (int s : kCaught) sigaddset(&set, s);
  ::sigprocmask(SIG_UNBLOCK, &set, nullptr);
}

SignalPipe::~SignalPipe() {
  for (size_t i = 0; i < std::size(kCaught); ++i) ::sigaction(kCaught[i], &g_previous[i], nullptr);
  ::sigaction(SIGPIPE, &g_previous_pipe, nullptr);
  g_write_fd.store(-1);
  ::close(read_fd_);
  ::close(write_fd_);
}

std::vector<int> SignalPipe::take() {
  std::vector<int> out;
  unsigned char buffer[64];
  for (;;) {
    const ssize_t n = ::read(read_fd_, buffer, sizeof buffer);
    if (n > 0) {
      out.insert(out.end(), buffer, buffer + n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return out;  // EAGAIN: nothing more for now
  }
}

}  // namespace dtrain::launch
