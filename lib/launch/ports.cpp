// Implementation of ports.h on plain BSD sockets (the launcher has no use for Asio).
#include "launch/ports.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/strings.h"

namespace dtrain::launch {
namespace {

constexpr int kBacklog = 128;  // the chief's store takes every task's connection here

// A listening socket on `addr`; on failure returns an invalid fd and leaves errno set.
UniqueFd listen_on(const sockaddr* addr, socklen_t len, int family) {
  UniqueFd fd(::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return fd;
  const int one = 1;
  // SO_REUSEADDR: connections of an earlier run in TIME_WAIT must not block the port;
  // a socket that is listening there still does.
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (family == AF_INET6) ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
  if (::bind(fd.get(), addr, len) != 0 || ::listen(fd.get(), kBacklog) != 0) {
    const int error = errno;
    fd.reset();
    errno = error;
  }
  return fd;
}

}  // namespace

bool is_loopback_host(const std::string& host) {
  if (lower(host) == "localhost") return true;
  in_addr v4{};
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (::inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;
}

ReservedPort reserve_free_port() {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ReservedPort out;
  out.socket = listen_on(reinterpret_cast<sockaddr*>(&addr), sizeof addr, AF_INET);
  if (!out.socket.valid())
    throw RuntimeError(str("cannot reserve a free port on 127.0.0.1: ", std::strerror(errno)));
  socklen_t len = sizeof addr;
  if (::getsockname(out.socket.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    throw RuntimeError(str("getsockname on a reserved port: ", std::strerror(errno)));
  out.address = str("127.0.0.1:", ntohs(addr.sin_port));
  return out;
}

ReservedPort reserve_port(const std::string& address, const std::string& host, int port,
                          const std::string& task) {
  const std::string ip = lower(host) == "localhost" ? "127.0.0.1" : host;
  ReservedPort out;
  out.address = address;
  sockaddr_in v4{};
  sockaddr_in6 v6{};
  if (::inet_pton(AF_INET, ip.c_str(), &v4.sin_addr) == 1) {
    v4.sin_family = AF_INET;
    v4.sin_port = htons(static_cast<uint16_t>(port));
    out.socket = listen_on(reinterpret_cast<sockaddr*>(&v4), sizeof v4, AF_INET);
  } else if (::inet_pton(AF_INET6, ip.c_str(), &v6.sin6_addr) == 1) {
    v6.sin6_family = AF_INET6;
    v6.sin6_port = htons(static_cast<uint16_t>(port));
    out.socket = listen_on(reinterpret_cast<sockaddr*>(&v6), sizeof v6, AF_INET6);
  } else {
    throw ConfigError(str(task, "'s address '", address, "' is not a loopback address"));
  }
  if (!out.socket.valid()) {
    const int error = errno;
    if (error == EADDRINUSE)
      throw ConfigError(str("cannot reserve ", task, "'s address ", address,
                            ": the port is in use (another process is listening there, perhaps "
                            "another job); stop it, give ",
                            task,
                            " another port in the cluster, or use `dtrain launch --workers N`, "
                            "which picks free ports"));
    throw ConfigError(
        str("cannot reserve ", task, "'s address ", address, ": ", std::strerror(error)));
  }
  return out;
}

}  // namespace dtrain::launch
