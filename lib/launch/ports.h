// Local addresses and port reservations for `dtrain launch`.
//
// Every task of a launched cluster runs on this machine, so every address must be a
// loopback one: 127.0.0.0/8, localhost or ::1. The launcher reserves each task's
// port by holding a listening socket on it for the whole job: either a free port the
// kernel picks (127.0.0.1:0), or the fixed port the cluster names. A listening socket
// keeps every other bind() off the port (SO_REUSEADDR included), so two launches at
// once can never pick the same port, and a port already taken is found before any
// task starts. The chief's socket is then handed to the chief (DTRAIN_LISTEN_FD).
#pragma once

#include <string>

#include "launch/process.h"

namespace dtrain::launch {

// True for 127.0.0.0/8, ::1 (also as ::ffff:127.x.x.x) and "localhost" (any case).
// `host` has no IPv6 brackets.
bool is_loopback_host(const std::string& host);

struct ReservedPort {
  UniqueFd socket;      // bound and listening, close-on-exec
  std::string address;  // "127.0.0.1:40123" (the address the tasks are given)
};

// Binds and listens on 127.0.0.1 with a port the kernel picks.
ReservedPort reserve_free_port();

// Binds and listens on `host`:`port` ("localhost" binds 127.0.0.1). Throws ConfigError
// naming `address` and `task` ("worker:1") when the port is in use or cannot be bound.
ReservedPort reserve_port(const std::string& address, const std::string& host, int port,
                          const std::string& task);

}  // namespace dtrain::launch
