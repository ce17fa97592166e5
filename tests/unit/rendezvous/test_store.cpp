// The chief's store over real TCP on 127.0.0.1: requests, deadlines, the
// authenticated handshake, hostile connections, and lost-task detection.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "core/timer.h"
#include "rendezvous/store_client.h"
#include "rendezvous/store_server.h"
#include "rendezvous/wire.h"

using namespace dtrain;
using namespace dtrain::rendezvous;

namespace {

Credentials creds(const std::string& secret = "s3cret", const std::string& job = "job-test") {
  return {job, secret};
}

ServerOptions server_options(double heartbeat_timeout = 10.0, double handshake_timeout = 5.0) {
  ServerOptions o;
  o.credentials = creds();
  o.tasks = {{"chief:0", "127.0.0.1:1"}, {"worker:0", "127.0.0.1:2"}, {"worker:1", "127.0.0.1:3"}};
  o.chief = "chief:0";
  o.heartbeat_timeout = heartbeat_timeout;
  o.handshake_timeout = handshake_timeout;
  return o;
}

ClientOptions client_options(const std::string& task, const std::string& role = "store",
                             Credentials c = creds()) {
  ClientOptions o;
  o.credentials = std::move(c);
  o.task = task;
  o.role = role;
  o.connect_timeout = 5.0;
  o.request_timeout = 5.0;
  return o;
}

// A raw TCP connection for sending bytes no dtrain client would send.
int raw_connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  return fd;
}

// True once the server closed the raw connection (read returns 0 or an error).
bool closed_by_server(int fd, double timeout_seconds) {
  timeval tv{static_cast<long>(timeout_seconds), 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char buf[256];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n == 0) return true;
    if (n < 0) return errno != EAGAIN && errno != EWOULDBLOCK;
  }
}

void wait_for_rejections(const StoreServer& server, int count) {
  for (int i = 0; i < 100 && server.rejected_connections() < count; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

}  // namespace

TEST_CASE("set, get, add and wait work across clients") {
  StoreServer server("127.0.0.1", 0, server_options());
  StoreClient a("127.0.0.1", server.port(), client_options("worker:0"));
  StoreClient b("127.0.0.1", server.port(), client_options("worker:1"));
  a.set("x", "hello");
  CHECK(b.get("x") == std::optional<std::string>("hello"));
  CHECK_FALSE(b.get("missing").has_value());
  CHECK(a.add("n", 2) == 2);
  CHECK(b.add("n", 5) == 7);
  // b waits for a key that a sets from another thread while b is waiting.
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    a.set("late", "1");
  });
  // true: the set woke the wait (a deadline would have returned false).
  CHECK(b.wait({"x", "late"}, 5.0));
  setter.join();
}

TEST_CASE("wait_get returns the keys' values once they exist, nullopt at its deadline") {
  StoreServer server("127.0.0.1", 0, server_options());
  StoreClient a("127.0.0.1", server.port(), client_options("worker:0"));
  StoreClient b("127.0.0.1", server.port(), client_options("worker:1"));
  a.set("x", "one");
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    a.set("late", std::string("two\0bytes", 9));
  });
  const auto values = b.wait_get({"x", "late"}, 5.0);
  setter.join();
  REQUIRE(values.has_value());
  CHECK(*values == std::vector<std::string>{"one", std::string("two\0bytes", 9)});
  CHECK_FALSE(b.wait_get({"never"}, 0.3).has_value());
  // Values too large for one reply frame: wait_get reads them with get_many.
  const std::string big(kMaxFrameBytes / 2, 'v');
  a.set("big1", big);
  a.set("big2", big);
  const auto large = b.wait_get({"big1", "big2"}, 1.0);
  REQUIRE(large.has_value());
  CHECK(*large == std::vector<std::string>{big, big});
}

TEST_CASE("set_then_wait_get sends its proof, the set and the wait in one write, and each reply is checked") {
  StoreServer server("127.0.0.1", 0, server_options());
  ClientOptions options = client_options("worker:0");
  options.prove_with_first_request = true;
  StoreClient joiner("127.0.0.1", server.port(), options);
  StoreClient chief("127.0.0.1", server.port(), client_options("chief:0"));
  std::thread roster([&] {
    CHECK(chief.wait({"join/worker:0"}, 5.0));
    chief.set("roster", "the roster");
  });
  const auto got = joiner.set_then_wait_get("join/worker:0", "me", {"roster"}, 5.0);
  roster.join();
  REQUIRE(got.has_value());
  CHECK(got->front() == "the roster");
  CHECK(chief.get("join/worker:0") == std::optional<std::string>("me"));
  CHECK_FALSE(joiner.set_then_wait_get("k", "v", {"never"}, 0.3).has_value());
  CHECK(joiner.get("k") == std::optional<std::string>("v"));
}

namespace {
// Reads one frame from a raw socket.
Message read_raw_frame(int fd) {
  unsigned char header[4];
  REQUIRE(::recv(fd, header, 4, MSG_WAITALL) == 4);
  std::string body(decode_length(header), '\0');
  REQUIRE(::recv(fd, body.data(), body.size(), MSG_WAITALL) == static_cast<ssize_t>(body.size()));
  Message m;
  REQUIRE(decode_payload(body, m));
  return m;
}
}  // namespace

namespace {
// A server that knows the secret (its challenge proves it), reads the client's
// proof and then, as the store does on a proof it rejects, says so with a
// kError (`say_so`), or hangs up without a word, as a server that is ending.
// The client's first request (the proof goes with it) fails with what it threw.
std::string first_request_after_proof(bool say_so) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(listener, 1) == 0);
  socklen_t length = sizeof addr;
  REQUIRE(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &length) == 0);
  std::thread server([&] {
    const int fd = ::accept(listener, nullptr, nullptr);
    const Message hello = read_raw_frame(fd);
    const std::string challenge =
        encode_frame({Op::kChallenge, 0, {"server-nonce", server_proof(creds(), hello.fields.at(4), "server-nonce")}});
    REQUIRE(::write(fd, challenge.data(), challenge.size()) == static_cast<ssize_t>(challenge.size()));
    CHECK(read_raw_frame(fd).op == Op::kProof);
    if (say_so) {
      const std::string error = encode_frame({Op::kError, 0, {"wrong proof of the job secret"}});
      REQUIRE(::write(fd, error.data(), error.size()) == static_cast<ssize_t>(error.size()));
    }
    ::close(fd);
  });
  ClientOptions options = client_options("worker:0");
  options.prove_with_first_request = true;
  StoreClient client("127.0.0.1", ntohs(addr.sin_port), options);  // the challenge checks out
  std::string thrown = "nothing";
  try {
    client.set("k", "v");
  } catch (const ConfigError& e) {
    thrown = std::string("ConfigError: ") + e.what();
  } catch (const PeerLost& e) {
    thrown = std::string("PeerLost: ") + e.what();
  }
  server.join();
  ::close(listener);
  return thrown;
}
}  // namespace

TEST_CASE("a proof sent with the first request: one the server rejects is a config error, a hang-up a lost peer") {
  CHECK_THAT(first_request_after_proof(true),
             Catch::StartsWith("ConfigError: ") && Catch::Contains("rejected this task's proof"));
  // (a chief that ends its job while a task that was started again connects)
  CHECK_THAT(first_request_after_proof(false), Catch::StartsWith("PeerLost: ") &&
                                                   Catch::Contains("while it checked this task's proof") &&
                                                   Catch::Contains("the job may be over"));
}

TEST_CASE("a control connection's welcome says its incarnation: 1, then 2 after it came up again") {
  StoreServer server("127.0.0.1", 0, server_options());
  StoreClient store("127.0.0.1", server.port(), client_options("worker:0"));
  CHECK(store.incarnation() == 0);
  {
    StoreClient control("127.0.0.1", server.port(), client_options("worker:1", "control"));
    CHECK(control.incarnation() == 1);
    control.done();
  }
  StoreClient again("127.0.0.1", server.port(), client_options("worker:1", "control"));
  CHECK(again.incarnation() == 2);
  CHECK(store.get("incarnation/worker:1") == std::optional<std::string>("2"));
}

TEST_CASE("a task that joined but died before its control connection came up is reported lost") {
  StoreServer server("127.0.0.1", 0, server_options());
  StoreClient waiter("127.0.0.1", server.port(), client_options("chief:0"));
  {
    StoreClient early("127.0.0.1", server.port(), client_options("worker:0"));
    early.set("scratch", "1");
  }  // a store connection that never joined: nothing is lost
  StoreClient("127.0.0.1", server.port(), client_options("worker:1")).set("join/worker:1", "value");
  try {
    waiter.wait({"never"}, 10.0);
    FAIL("wait survived a task lost while joining");
  } catch (const PeerLost& e) {
    CHECK_THAT(e.what(), Catch::Contains("worker:1") && Catch::Contains("while joining") &&
                             !Catch::Contains("worker:0"));
  }
}

TEST_CASE("a wait for a key nobody sets returns false at its deadline") {
  StoreServer server("127.0.0.1", 0, server_options());
  StoreClient a("127.0.0.1", server.port(), client_options("worker:0"));
  Stopwatch t;
  CHECK_FALSE(a.wait({"never"}, 0.5));
  CHECK(t.seconds() >= 0.45);  // not before the deadline (after it, a loaded machine decides how long)
}

TEST_CASE("a client with the wrong secret finds that the server's proof does not match") {
  StoreServer server("127.0.0.1", 0, server_options());
  REQUIRE_THROWS_WITH(StoreClient("127.0.0.1", server.port(), client_options("worker:0", "store", creds("wrong"))),
                      Catch::Contains("secret"));
}

TEST_CASE("a wrong proof of the secret is told so, the connection closed cleanly, and the job goes on") {
  StoreServer server("127.0.0.1", 0, server_options());
  const int fd = raw_connect(server.port());
  const std::string hello = encode_frame({Op::kHello, 0, {kProtocolMagic, "job-test", "worker:0", "store", "nonce"}});
  REQUIRE(::write(fd, hello.data(), hello.size()) == static_cast<ssize_t>(hello.size()));
  unsigned char header[4];
  REQUIRE(::read(fd, header, 4) == 4);  // the challenge
  std::string challenge(decode_length(header), '\0');
  REQUIRE(::read(fd, challenge.data(), challenge.size()) == static_cast<ssize_t>(challenge.size()));
  // The proof with a request after it, as a client that proves with its first request sends them.
  const std::string proof = encode_frame({Op::kProof, 0, {std::string(32, 'x')}}) + encode_frame({Op::kSet, 0, {"k", "v"}});
  REQUIRE(::write(fd, proof.data(), proof.size()) == static_cast<ssize_t>(proof.size()));
  // It is told (a kError), then the server hangs up cleanly: an end of file, not
  // a reset that could have discarded the kError (the unread request is drained).
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  const Message told = read_raw_frame(fd);
  CHECK(told.op == Op::kError);
  CHECK(told.fields == std::vector<std::string>{"wrong proof of the job secret"});
  char byte = 0;
  errno = 0;
  CHECK(::read(fd, &byte, 1) == 0);
  CHECK(errno == 0);
  ::close(fd);
  wait_for_rejections(server, 1);
  CHECK(server.rejected_connections() == 1);
  CHECK(server.failed_proofs({"worker:0", "worker:1"}) == "worker:0 (1 failed proof, from 127.0.0.1)");
  StoreClient good("127.0.0.1", server.port(), client_options("worker:0"));
  good.set("k", "v");
  CHECK(good.get("k") == std::optional<std::string>("v"));
}

namespace {

// A raw connection that says a hello claiming `task` and reads the challenge.
int hello_claiming(int port, const std::string& task, const std::string& role = "store") {
  const int fd = raw_connect(port);
  const std::string hello = encode_frame({Op::kHello, 0, {kProtocolMagic, "job-test", task, role, "nonce"}});
  REQUIRE(::write(fd, hello.data(), hello.size()) == static_cast<ssize_t>(hello.size()));
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  CHECK(read_raw_frame(fd).op == Op::kChallenge);
  return fd;
}

// What this process writes to stderr while `body` runs (the server's log
// lines); stderr is put back even when `body` throws (a failed REQUIRE).
template <class Body>
std::string stderr_of(Body body) {
  std::fflush(stderr);
  char path[] = "/tmp/dtrain-test-stderr-XXXXXX";
  const int file = ::mkstemp(path);
  REQUIRE(file >= 0);
  ::unlink(path);
  struct Restore {
    int saved = ::dup(2);
    ~Restore() {
      std::fflush(stderr);
      ::dup2(saved, 2);
      ::close(saved);
    }
  };
  {
    Restore restore;
    ::dup2(file, 2);
    body();
  }
  std::string text;
  char buffer[4096];
  ssize_t n;
  for (off_t at = 0; (n = ::pread(file, buffer, sizeof buffer, at)) > 0; at += n) text.append(buffer, static_cast<size_t>(n));
  ::close(file);
  return text;
}

size_t count_of(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("connections that claim a task and fail the proof change nothing: the real task joins after them") {
  StoreServer server("127.0.0.1", 0, server_options(10.0, 1.0));
  // Another secret (the client gives up on the server's proof and hangs up), a
  // wrong proof, a hang-up after the challenge, and no proof within the
  // handshake's deadline: all claim worker:1, none is worker:1.
  CHECK_THROWS_WITH(StoreClient("127.0.0.1", server.port(), client_options("worker:1", "control", creds("wrong"))),
                    Catch::Contains("secret"));
  const int wrong = hello_claiming(server.port(), "worker:1", "control");
  const std::string proof = encode_frame({Op::kProof, 0, {std::string(64, '0')}});
  REQUIRE(::write(wrong, proof.data(), proof.size()) == static_cast<ssize_t>(proof.size()));
  CHECK(read_raw_frame(wrong).op == Op::kError);
  ::close(wrong);
  ::close(hello_claiming(server.port(), "worker:1", "control"));
  const int silent = hello_claiming(server.port(), "worker:1", "control");
  CHECK(closed_by_server(silent, 5));  // after the 1 s handshake deadline
  ::close(silent);
  wait_for_rejections(server, 4);
  CHECK(server.rejected_connections() == 4);
  CHECK(server.failed_proofs({"chief:0", "worker:0", "worker:1"}) == "worker:1 (4 failed proofs, from 127.0.0.1)");

  // Nothing counted: the real worker:1 is its first incarnation, the job is healthy.
  StoreClient observer("127.0.0.1", server.port(), client_options("worker:0"));
  CHECK_FALSE(observer.get("incarnation/worker:1").has_value());
  CHECK_FALSE(observer.get("status/worker:1").has_value());
  StoreClient control("127.0.0.1", server.port(), client_options("worker:1", "control"));
  CHECK_FALSE(control.heartbeat(0).failure.has_value());
  CHECK(observer.get("incarnation/worker:1") == std::optional<std::string>("1"));
  CHECK(observer.get("status/worker:1") == std::optional<std::string>("up"));
}

TEST_CASE("before a peer proved the secret a frame may be at most 4 KiB, after it the store's limit") {
  StoreServer server("127.0.0.1", 0, server_options());
  const int big = raw_connect(server.port());
  const unsigned char header[4] = {0, 0, 0x20, 0};  // 8 KiB: under the store's 1 MiB, over a hello's 4 KiB
  REQUIRE(::write(big, header, 4) == 4);
  CHECK(closed_by_server(big, 5));
  ::close(big);
  wait_for_rejections(server, 1);
  CHECK(server.rejected_connections() == 1);
  StoreClient a("127.0.0.1", server.port(), client_options("worker:0"));
  const std::string value(100 * 1024, 'v');
  a.set("big", value);
  CHECK(a.get("big") == std::optional<std::string>(value));
}

TEST_CASE("a flood of failed proofs is logged at most 5 lines per 10 s, the rest summed up, and the store serves on") {
  constexpr int kFlood = 200;
  std::string log;
  double seconds = 0;
  log = stderr_of([&] {
    StoreServer server("127.0.0.1", 0, server_options());
    Stopwatch t;
    const std::string proof = encode_frame({Op::kProof, 0, {std::string(64, '0')}});
    for (int i = 0; i < kFlood; ++i) {
      const int fd = hello_claiming(server.port(), i % 2 ? "chief:0" : "worker:1");
      REQUIRE(::write(fd, proof.data(), proof.size()) == static_cast<ssize_t>(proof.size()));
      CHECK(read_raw_frame(fd).op == Op::kError);
      ::close(fd);
    }
    wait_for_rejections(server, kFlood);
    seconds = t.seconds();
    CHECK(server.rejected_connections() == kFlood);
    StoreClient a("127.0.0.1", server.port(), client_options("worker:0"));
    a.set("k", "v");
    CHECK(a.get("k") == std::optional<std::string>("v"));
  });  // (the server's end logs the last window's sum)
  INFO(log);
  const size_t lines = count_of(log, "failed the proof: another DTRAIN_JOB_SECRET?");
  const size_t windows = static_cast<size_t>(seconds / 10.0) + 1;
  CHECK(lines >= 5);
  CHECK(lines <= 5 * windows);
  // Every failed proof is either a line of its own or counted in a sum.
  size_t summed = 0;
  for (size_t at = log.find("rendezvous: dropped "); at != std::string::npos; at = log.find("rendezvous: dropped ", at + 1))
    summed += std::stoul(log.substr(at + std::strlen("rendezvous: dropped ")));
  CHECK(lines + summed == kFlood);
}

TEST_CASE("a client of another job is told so and refused") {
  StoreServer server("127.0.0.1", 0, server_options());
  try {
    StoreClient other("127.0.0.1", server.port(), client_options("worker:0", "store", creds("s3cret", "job-other")));
    FAIL("connected to another job's server");
  } catch (const ConfigError& e) {
    CHECK_THAT(e.what(), Catch::Contains("job-test") && Catch::Contains("job-other"));
  }
}

// Found by tests/fuzz/fuzz_rendezvous_wire.cpp (the pure parts of the server's
// handling; these run them on the server).
TEST_CASE("an add past 2^63 is refused with a reason, and the store goes on") {
  StoreServer server("127.0.0.1", 0, server_options());
  StoreClient a("127.0.0.1", server.port(), client_options("worker:0"));
  CHECK(a.add("n", INT64_MAX) == INT64_MAX);
  CHECK_THROWS_WITH(a.add("n", 1), Catch::Contains("key 'n' holds '9223372036854775807', not a number that 1 can be "
                                                   "added to"));
  StoreClient b("127.0.0.1", server.port(), client_options("worker:1"));
  CHECK(b.get("n") == std::optional<std::string>("9223372036854775807"));
}

TEST_CASE("a control connection comes up after a task set its incarnation key to text") {
  StoreServer server("127.0.0.1", 0, server_options());
  StoreClient store("127.0.0.1", server.port(), client_options("worker:1"));
  store.set("incarnation/worker:0", "not a number");
  StoreClient control("127.0.0.1", server.port(), client_options("worker:0", "control"));  // std::stoll threw here
  CHECK(store.get("incarnation/worker:0") == std::optional<std::string>("1"));
  CHECK_FALSE(control.heartbeat(1).failure.has_value());
}

TEST_CASE("a task name outside the cluster is refused") {
  StoreServer server("127.0.0.1", 0, server_options());
  CHECK_THROWS(StoreClient("127.0.0.1", server.port(), client_options("worker:7")));
}

TEST_CASE("garbage bytes and oversized frames get the connection dropped, not the server") {
  StoreServer server("127.0.0.1", 0, server_options());
  const int garbage = raw_connect(server.port());
  const char junk[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  REQUIRE(::write(garbage, junk, sizeof junk) > 0);
  CHECK(closed_by_server(garbage, 5));
  ::close(garbage);

  const int oversized = raw_connect(server.port());
  const unsigned char header[4] = {0x7f, 0xff, 0xff, 0xff};  // announces ~2 GiB
  REQUIRE(::write(oversized, header, 4) == 4);
  CHECK(closed_by_server(oversized, 5));
  ::close(oversized);

  wait_for_rejections(server, 2);
  CHECK(server.rejected_connections() == 2);
  StoreClient good("127.0.0.1", server.port(), client_options("worker:0"));
  CHECK(good.add("still-serving", 1) == 1);
}

TEST_CASE("a connection that never authenticates is dropped after the handshake deadline") {
  StoreServer server("127.0.0.1", 0, server_options(10.0, /*handshake_timeout=*/0.5));
  const int silent = raw_connect(server.port());
  CHECK(closed_by_server(silent, 5));  // closed by the 0.5 s handshake deadline, within 5 s
  ::close(silent);
}

TEST_CASE("connecting to an address where nobody listens times out with the address in the message") {
  int port = 0;
  {
    StoreServer probe("127.0.0.1", 0, server_options());
    port = probe.port();
  }  // closed: now nobody listens there
  ClientOptions o = client_options("worker:0");
  o.connect_timeout = 0.5;
  o.server_name = "the chief (chief:0 at 127.0.0.1:" + std::to_string(port) + ")";
  Stopwatch t;
  try {
    StoreClient c("127.0.0.1", port, o);
    FAIL("connected to nothing");
  } catch (const TimeoutError& e) {
    CHECK_THAT(e.what(), Catch::Contains("chief:0 at 127.0.0.1:" + std::to_string(port)));
    // What every attempt got, not the time-out of one the deadline cut short.
    CHECK_THAT(e.what(), Catch::Contains("last error: Connection refused"));
  }
  CHECK(t.seconds() < 5.0);
}

TEST_CASE("a port already in use is a config error naming the address") {
  StoreServer first("127.0.0.1", 0, server_options());
  try {
    StoreServer second("127.0.0.1", first.port(), server_options());
    FAIL("two servers on one port");
  } catch (const ConfigError& e) {
    CHECK_THAT(e.what(), Catch::Contains("127.0.0.1:" + std::to_string(first.port())) &&
                             Catch::Contains("in use"));
  }
}

TEST_CASE("a task whose control connection drops is reported lost, with its last step") {
  StoreServer server("127.0.0.1", 0, server_options());
  StoreClient survivor("127.0.0.1", server.port(), client_options("worker:0", "control"));
  StoreClient waiter("127.0.0.1", server.port(), client_options("chief:0"));
  {
    StoreClient doomed("127.0.0.1", server.port(), client_options("worker:1", "control"));
    CHECK_FALSE(doomed.heartbeat(37).failure.has_value());
  }  // closed without done(): as if the process was killed
  // A pending wait fails with the reason, not at its 10 s deadline (which would
  // return false): the outcome says which, whatever the machine's load.
  try {
    waiter.wait({"never"}, 10.0);
    FAIL("wait survived a lost task");
  } catch (const PeerLost& e) {
    CHECK_THAT(e.what(), Catch::Contains("worker:1") && Catch::Contains("127.0.0.1:3") &&
                             Catch::Contains("after step 37"));
  }
  const HeartbeatReply reply = survivor.heartbeat(5);
  REQUIRE(reply.failure.has_value());
  CHECK_THAT(*reply.failure, Catch::Contains("worker:1"));
}

TEST_CASE("a task that stops sending heartbeats is declared lost after the timeout") {
  StoreServer server("127.0.0.1", 0, server_options(/*heartbeat_timeout=*/0.5));
  StoreClient silent("127.0.0.1", server.port(), client_options("worker:1", "control"));
  StoreClient other("127.0.0.1", server.port(), client_options("worker:0", "control"));
  silent.heartbeat(3);
  for (int i = 0; i < 6; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const HeartbeatReply r = other.heartbeat(i);
    if (r.failure) {
      CHECK_THAT(*r.failure, Catch::Contains("worker:1") && Catch::Contains("no heartbeat"));
      return;
    }
  }
  FAIL("the silent task was never declared lost");
}

TEST_CASE("a task that signs off with done is not reported lost") {
  StoreServer server("127.0.0.1", 0, server_options());
  StoreClient other("127.0.0.1", server.port(), client_options("worker:0", "control"));
  {
    StoreClient leaving("127.0.0.1", server.port(), client_options("worker:1", "control"));
    leaving.done();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK_FALSE(other.heartbeat(1).failure.has_value());
}

TEST_CASE("heartbeat replies carry the chief's step") {
  StoreServer server("127.0.0.1", 0, server_options());
  StoreClient chief("127.0.0.1", server.port(), client_options("chief:0", "control"));
  StoreClient worker("127.0.0.1", server.port(), client_options("worker:0", "control"));
  chief.heartbeat(42);
  CHECK(worker.heartbeat(1).chief_step == 42);
}

TEST_CASE("the server's clock is read through the store: on one machine the offset is about zero") {
  StoreServer server("127.0.0.1", 0, server_options());
  StoreClient a("127.0.0.1", server.port(), client_options("worker:0"));
  // The same clock on both ends: the estimate is off by at most half the fastest
  // round trip (well under 2 ms on loopback), whatever the units would be otherwise.
  const trace::ClockOffset offset = a.clock_offset();
  CHECK(std::llabs(offset.offset_us) < 2000);
  // The uncertainty is half a real round trip: positive, and covers the true offset (0).
  CHECK(offset.uncertainty_us >= 1);
  CHECK(offset.uncertainty_us < 2000);
  CHECK(std::llabs(offset.offset_us) <= offset.uncertainty_us);
}

TEST_CASE("get_many answers thousands of keys in order, absent ones as nullopt, in a few requests") {
  StoreServer server("127.0.0.1", 0, server_options());
  StoreClient a("127.0.0.1", server.port(), client_options("worker:0"));
  std::vector<std::string> keys;
  for (int i = 0; i < 2500; ++i) {
    keys.push_back("k/" + std::to_string(i));
    if (i % 3 != 0) a.set(keys.back(), std::string(static_cast<size_t>(i % 7), 'v') + std::to_string(i));
  }
  const int64_t before = server.requests_served();
  const auto values = a.get_many(keys);
  // 1,024 keys a request: 3 requests, not 2,500.
  CHECK(server.requests_served() - before == 3);
  REQUIRE(values.size() == keys.size());
  for (int i = 0; i < 2500; ++i) {
    INFO("key " << i);
    if (i % 3 == 0)
      CHECK_FALSE(values[static_cast<size_t>(i)].has_value());
    else
      CHECK(values[static_cast<size_t>(i)] == std::string(static_cast<size_t>(i % 7), 'v') + std::to_string(i));
  }
  // An empty value is a value, not an absent key.
  a.set("empty", "");
  CHECK(a.get_many({"empty", "nothing"}) == std::vector<std::optional<std::string>>{std::string(), std::nullopt});
}

TEST_CASE("get_many answers what fits in one frame and the client asks again for the rest") {
  StoreServer server("127.0.0.1", 0, server_options());
  StoreClient a("127.0.0.1", server.port(), client_options("worker:0"));
  // Three values of 400 KiB: two fit in a 1 MiB reply, the third comes in a second one.
  const std::string big(400 * 1024, 'x');
  for (const char* k : {"a", "b", "c"}) a.set(k, big + k);
  const int64_t before = server.requests_served();
  const auto values = a.get_many({"a", "b", "c"});
  CHECK(server.requests_served() - before == 2);
  CHECK(values == std::vector<std::optional<std::string>>{big + "a", big + "b", big + "c"});
}

TEST_CASE("many waits on many keys are each woken by the set of their last missing key") {
  StoreServer server("127.0.0.1", 0, server_options());
  StoreClient setter("127.0.0.1", server.port(), client_options("worker:0"));
  constexpr int kWaiters = 6, kKeys = 200;
  std::vector<std::string> keys;
  for (int i = 0; i < kKeys; ++i) keys.push_back("w/" + std::to_string(i));
  std::vector<int> woke(kWaiters, -1);
  std::vector<int> woke_after_last_key(kWaiters, -1);
  std::atomic<bool> last_key_set{false};
  std::vector<std::thread> waiters;
  for (int w = 0; w < kWaiters; ++w)
    waiters.emplace_back([&, w] {
      StoreClient c("127.0.0.1", server.port(), client_options(w % 2 ? "worker:1" : "chief:0"));
      // Waiter w needs the keys from w*10 on (and one key twice): it is woken by the last set.
      std::vector<std::string> mine(keys.begin() + w * 10, keys.end());
      mine.push_back(mine.front());
      woke[static_cast<size_t>(w)] = c.wait(mine, 20.0) ? 1 : 0;
      woke_after_last_key[static_cast<size_t>(w)] = last_key_set.load() ? 1 : 0;
    });
  // A wait that times out leaves the index; its keys set later wake nobody stale.
  StoreClient early("127.0.0.1", server.port(), client_options("worker:1"));
  CHECK_FALSE(early.wait({"w/0", "never"}, 0.2));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  // Set in reverse order: key w/0 last, which only waiter 0 still needs.
  for (int i = kKeys - 1; i >= 1; --i) setter.set(keys[static_cast<size_t>(i)], "1");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  last_key_set = true;
  setter.set("w/0", "1");
  for (auto& t : waiters) t.join();
  CHECK(woke == std::vector<int>(kWaiters, 1));
  // Only waiter 0 needed w/0; the others were answered as their own last key came.
  CHECK(woke_after_last_key == std::vector<int>{1, 0, 0, 0, 0, 0});
  // Every key exists now: a new wait is answered at once.
  CHECK(early.wait(keys, 1.0));
}
