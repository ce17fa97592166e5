// Several "machines" on this one for multi-host tests: N network namespaces (the
// hosts), each with an interface eth0 plugged into a bridge that lives in one more
// namespace (the switch), so nothing touches this machine's own network. Host i has
// the address 10.213.X.(i+1)/24 (X from the test process's pid, so two test processes
// print different addresses; the namespaces keep them apart anyway), lo up, and,
// through a UTS namespace per command, its own hostname (dtrain-host-a, -b, ...), so
// a rendezvous sees N machines.
//
// The names carry the pid ("dtrain-nsh-<pid>-h0", "dtrain-nsh-<pid>-sw"), so they
// never collide with another test process, and the constructor removes the ones a
// crashed earlier run left behind (same prefix, a pid that no longer runs). The
// destructor deletes every namespace (the veth pairs go with them), also when the
// test failed (a REQUIRE/FAIL unwinds the stack). Processes still inside a host keep
// its namespace alive without a name; tests end their children first (declare the
// NetnsHosts before the children, so that it goes after them).
//
// ok() is false, with reason() saying why, when the hosts cannot be made: not root,
// no `ip` (iproute2) or `unshare`, or a command that failed (with its output). The
// test then prints "DTRAIN-SKIPPED: <reason>", which ctest reports as a skip.
//
// What a test does with the hosts: command() is the argv that runs a program inside
// host i (for start_program), run() a shell command there (blocking), cut()/restore()
// take its link down and up (`ip -n NS link set eth0 down`: the process keeps
// running, its packets go nowhere, nothing tells its peers), reachable() tries a TCP
// connection from inside host i (refused counts: a host answered), add_netem() puts
// `tc qdisc ... root netem <params>` on its link (delay, loss; "" or the reason it
// cannot, e.g. a kernel without sch_netem), link_bytes() counts what its link carried.
//
// Header-only, like the rest of tests/support; needs root and iproute2 at run time.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "support/shell_quote.h"

namespace dtrain::test {

struct NetnsOptions {
  bool hostnames = true;  // each command() runs in its own UTS namespace with the host's name
};

class NetnsHosts {
 public:
  static constexpr const char* kPrefix = "dtrain-nsh-";

  explicit NetnsHosts(int hosts, NetnsOptions options = {}) : options_(options) {
    const std::string tag = kPrefix + std::to_string(::getpid()) + "-";
    switch_ = tag + "sw";
    for (int i = 0; i < hosts; ++i) hosts_.push_back(tag + "h" + std::to_string(i));
    subnet_ = "10.213." + std::to_string(::getpid() % 256) + ".";
    if (::geteuid() != 0) {
      reason_ = "not root (network namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN)";
      return;
    }
    ip_ = find_program({"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"});
    if (ip_.empty()) {
      reason_ = "no `ip` command (install iproute2)";
      return;
    }
    tc_ = find_program({"/usr/sbin/tc", "/sbin/tc", "/usr/bin/tc", "/bin/tc"});
    if (options_.hostnames) {
      unshare_ = find_program({"/usr/bin/unshare", "/bin/unshare", "/usr/sbin/unshare"});
      if (unshare_.empty()) {
        reason_ = "no `unshare` command (util-linux) for the hosts' own hostnames";
        return;
      }
    }
    remove_stale();
    created_ = true;
    if (!step(ip_ + " netns add " + switch_) || !step(ip_ + " -n " + switch_ + " link add br0 type bridge") ||
        !step(ip_ + " -n " + switch_ + " link set br0 up"))
      return;
    for (int i = 0; i < hosts; ++i) {
      const std::string& ns = hosts_[static_cast<size_t>(i)];
      const std::string port = "v" + std::to_string(i);
      if (!step(ip_ + " netns add " + ns) ||
          !step(ip_ + " -n " + switch_ + " link add " + port + " type veth peer name eth0 netns " + ns) ||
          !step(ip_ + " -n " + switch_ + " link set " + port + " master br0") ||
          !step(ip_ + " -n " + switch_ + " link set " + port + " up") ||
          !step(ip_ + " -n " + ns + " addr add " + ip(i) + "/24 dev eth0") ||
          !step(ip_ + " -n " + ns + " link set eth0 up") || !step(ip_ + " -n " + ns + " link set lo up"))
        return;
    }
    ok_ = true;
  }

  ~NetnsHosts() {
    if (!created_) return;
    for (const std::string& ns : hosts_) shell(ip_ + " netns del " + ns);
    shell(ip_ + " netns del " + switch_);
  }

  NetnsHosts(const NetnsHosts&) = delete;
  NetnsHosts& operator=(const NetnsHosts&) = delete;

  bool ok() const { return ok_; }
  // Why the hosts could not be made ("" when ok()).
  const std::string& reason() const { return reason_; }

  int size() const { return static_cast<int>(hosts_.size()); }
  // The namespace of host i (for `ip -n`, `ip netns exec`).
  const std::string& ns(int host) const { return hosts_.at(static_cast<size_t>(host)); }
  // Host i's address, e.g. "10.213.57.3" for host 2.
  std::string ip(int host) const { return subnet_ + std::to_string(host + 1); }
  // "ip:port" on host i.
  std::string address(int host, int port) const { return ip(host) + ":" + std::to_string(port); }
  // Host i's hostname under NetnsOptions::hostnames: dtrain-host-a, dtrain-host-b, ...
  std::string hostname(int host) const {
    return host < 26 ? std::string("dtrain-host-") + static_cast<char>('a' + host)
                     : "dtrain-host-" + std::to_string(host);
  }

  // The argv (program first) that runs `argv` inside host i: `ip netns exec NS` and,
  // with NetnsOptions::hostnames, `unshare --uts sh -c 'hostname NAME && exec "$@"'`.
  // Each step execs the next, so the process started is, in the end, argv[0] itself
  // (its pid, its signals, its exit status).
  std::vector<std::string> command(int host, const std::vector<std::string>& argv) const {
    std::vector<std::string> full = {ip_, "netns", "exec", ns(host)};
    if (options_.hostnames) {
      full.insert(full.end(),
                  {unshare_, "--uts", "sh", "-c", "hostname " + hostname(host) + " && exec \"$@\"", "sh"});
    }
    full.insert(full.end(), argv.begin(), argv.end());
    return full;
  }

  // Runs a shell command inside host i and waits for it; returns its exit status
  // (-1 when it did not exit normally). Its stdout and stderr go to *output when given.
  int run(int host, const std::string& shell_command, std::string* output = nullptr) const {
    return shell(ip_ + " netns exec " + ns(host) + " sh -c " + shell_quote(shell_command), output);
  }

  // Takes host i's link down: its packets go nowhere, its processes keep running.
  // False (with the reason in *error) when `ip` failed.
  bool cut(int host, std::string* error = nullptr) const {
    return shell(ip_ + " -n " + ns(host) + " link set eth0 down", error) == 0;
  }
  // Brings host i's link up again.
  bool restore(int host, std::string* error = nullptr) const {
    return shell(ip_ + " -n " + ns(host) + " link set eth0 up", error) == 0;
  }

  // Adds `tc qdisc add dev eth0 root netem <params>` (e.g. "delay 20ms loss 1%") to
  // host i's link (its outgoing packets). "" when done, else the reason (no `tc`, or
  // tc's words, e.g. a kernel without sch_netem).
  std::string add_netem(int host, const std::string& params) const {
    if (tc_.empty()) return "no `tc` command (install iproute2)";
    std::string output;
    if (shell(tc_ + " -n " + ns(host) + " qdisc add dev eth0 root netem " + params, &output) == 0) return "";
    return netem_failure("tc qdisc add dev eth0 root netem " + params, output);
  }
  // Removes host i's netem (back to the default qdisc); "" or the reason.
  std::string clear_netem(int host) const {
    if (tc_.empty()) return "no `tc` command (install iproute2)";
    std::string output;
    if (shell(tc_ + " -n " + ns(host) + " qdisc del dev eth0 root", &output) == 0) return "";
    return "tc qdisc del dev eth0 root in " + ns(host) + ": " + trim(output);
  }
  // Whether netem can be used here, tried on host 0's lo: "" or the reason.
  std::string netem_available() const {
    if (!ok_) return reason_;
    if (tc_.empty()) return "no `tc` command (install iproute2)";
    std::string output;
    if (shell(tc_ + " -n " + ns(0) + " qdisc add dev lo root netem delay 1ms", &output) != 0)
      return netem_failure("tc qdisc add dev lo root netem delay 1ms", output);
    shell(tc_ + " -n " + ns(0) + " qdisc del dev lo root");
    return "";
  }

  // Whether a TCP connection from inside host `from` reaches `ip`:`port` within
  // `seconds`: true when it connects or is refused (a host answered), false when the
  // network is unreachable or nothing answers (a cut link). A forked child enters
  // the host's namespace (setns) and tries once.
  bool reachable(int from, const std::string& ip, int port, double seconds = 2.0) const {
    const std::string path = "/run/netns/" + ns(from);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(port));
    if (::inet_pton(AF_INET, ip.c_str(), &to.sin_addr) != 1) return false;
    const pid_t child = ::fork();
    if (child < 0) return false;
    if (child == 0) {
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0 || ::setns(fd, CLONE_NEWNET) != 0) ::_exit(3);
      const int s = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (s < 0) ::_exit(3);
      if (::connect(s, reinterpret_cast<const sockaddr*>(&to), sizeof to) == 0) ::_exit(0);
      if (errno == ECONNREFUSED) ::_exit(0);
      if (errno != EINPROGRESS) ::_exit(1);
      pollfd p{s, POLLOUT, 0};
      if (::poll(&p, 1, static_cast<int>(seconds * 1000)) != 1) ::_exit(1);
      int error = 0;
      socklen_t size = sizeof error;
      ::getsockopt(s, SOL_SOCKET, SO_ERROR, &error, &size);
      ::_exit(error == 0 || error == ECONNREFUSED ? 0 : 1);
    }
    int status = 0;
    while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }

  // Bytes host i's link has sent and received so far; -1 when they cannot be read.
  int64_t link_bytes(int host) const {
    int64_t total = 0;
    for (const char* counter : {"tx_bytes", "rx_bytes"}) {
      std::string text;
      if (run(host, std::string("cat /sys/class/net/eth0/statistics/") + counter, &text) != 0) return -1;
      try {
        total += std::stoll(text);
      } catch (...) {
        return -1;
      }
    }
    return total;
  }

 private:
  static std::string find_program(const std::vector<std::string>& candidates) {
    for (const std::string& path : candidates)
      if (::access(path.c_str(), X_OK) == 0) return path;
    return "";
  }

  static std::string trim(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
  }

  static std::string netem_failure(const std::string& what, const std::string& output) {
    std::string reason = what + " failed: " + trim(output);
    if (output.find("unknown") != std::string::npos)
      reason += " (the kernel has no sch_netem; `modprobe sch_netem` where the module exists)";
    return reason;
  }

  // Runs `command` through sh with stderr joined to stdout; its exit status, or -1.
  static int shell(const std::string& command, std::string* output = nullptr) {
    FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
    if (pipe == nullptr) {
      if (output) *output = "popen failed";
      return -1;
    }
    std::string text;
    char buffer[4096];
    size_t n;
    while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) text.append(buffer, n);
    const int status = ::pclose(pipe);
    if (output) *output = text;
    return status >= 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  // One setup command; on failure, reason_ says which and what it printed.
  bool step(const std::string& command) {
    std::string output;
    if (shell(command, &output) == 0) return true;
    reason_ = "`" + command + "` failed: " + trim(output);
    return false;
  }

  // Whether `pid` is a running process (not gone, not a zombie waiting to be reaped).
  static bool process_runs(pid_t pid) {
    if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const size_t paren = text.rfind(')');  // "pid (comm) S ..."
    return paren == std::string::npos || paren + 2 >= text.size() || text[paren + 2] != 'Z';
  }

  // Deletes the namespaces of earlier test processes that died without cleaning up:
  // our prefix, and a pid that no longer runs.
  void remove_stale() const {
    std::string list;
    if (shell(ip_ + " netns list", &list) != 0) return;
    std::istringstream lines(list);
    std::string line;
    while (std::getline(lines, line)) {
      const std::string name = line.substr(0, line.find(' '));  // "NAME (id: 3)"
      if (name.rfind(kPrefix, 0) != 0) continue;
      const std::string rest = name.substr(std::string(kPrefix).size());
      long pid = 0;
      try {
        pid = std::stol(rest.substr(0, rest.find('-')));
      } catch (...) {
        continue;
      }
      if (pid <= 0 || pid == ::getpid()) continue;
      if (!process_runs(static_cast<pid_t>(pid))) shell(ip_ + " netns del " + name);
    }
  }

  NetnsOptions options_;
  std::vector<std::string> hosts_;
  std::string switch_, subnet_;
  std::string ip_, tc_, unshare_;
  std::string reason_;
  bool ok_ = false;
  bool created_ = false;  // whether the destructor has namespaces to delete
};

}  // namespace dtrain::test
