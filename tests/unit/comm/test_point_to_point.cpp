// Point-to-point messages (Communicator::send/recv) on Gloo (real TCP on
// 127.0.0.1) and on the local group, ranks as threads: messages matched by tag
// whatever order they were posted in, sends that do not wait for the receiver,
// a pipeline schedule on 3 ranks, the deadline and a lost peer, refused
// arguments, and the wrappers (flight recorder, borrow) that forward them.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/flight_recorder.h"
#include "core/error.h"
#include "core/strings.h"
#include "core/timer.h"
#include "groups.h"

using namespace dtrain;
using namespace dtrain::comm;
using dtrain::test::Backend;
using dtrain::test::check_all_ok;

namespace {

const Backend kBackends[] = {Backend::kGloo, Backend::kLocal};

// The message a sender puts under `tag`: distinct per tag, per sender and per element.
std::vector<float> message(int sender, uint64_t tag, size_t count) {
  std::vector<float> m(count);
  for (size_t i = 0; i < count; ++i)
    m[i] = static_cast<float>(sender * 100000 + static_cast<int>(tag % 1000) * 100 + static_cast<int>(i % 97));
  return m;
}

// How a recv of 16 floats from rank 1 under `tag` ends: "none" (it returned),
// `expected_name` when it throws Expected, else "other"; the error's message in
// *message and the seconds it took in *elapsed.
template <class Expected>
std::string recv_outcome(Communicator& c, uint64_t tag, const char* expected_name, std::string* message,
                         double* elapsed) {
  std::vector<float> x(16);
  Stopwatch watch;
  std::string kind = "none";
  try {
    c.recv(x.data(), x.size(), 1, tag);
  } catch (const Expected& e) {
    kind = expected_name;
    *message = e.what();
  } catch (const std::exception& e) {
    kind = "other";
    *message = e.what();
  }
  *elapsed = watch.seconds();
  return kind;
}

size_t count_for(uint64_t tag) { return tag % 4 == 3 ? size_t{1} << 18 : 1 + (tag % 5) * 37; }

// Receives `tag` from `peer` and compares it with what that peer sent.
std::string expect(Communicator& c, int peer, uint64_t tag, size_t count) {
  std::vector<float> got(count, -1.0f);
  c.recv(got.data(), count, peer, tag);
  return test::compare_exact(got, message(peer, tag, count), str("rank ", c.rank(), " recv of tag ", tag));
}

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

}  // namespace

TEST_CASE("send/recv between 2 ranks match by tag whatever order they were posted in") {
  for (Backend b : kBackends) {
    DYNAMIC_SECTION(test::backend_name(b)) {
      check_all_ok(test::run_ranks(b, 2, "p2p/order2/", [](Communicator& c) -> std::string {
        const int peer = 1 - c.rank();
        // Both ranks send everything first (sends do not wait for the receiver),
        // then receive in another order than the peer sent.
        const std::vector<uint64_t> sent = c.rank() == 0 ? std::vector<uint64_t>{10, 11, 12, 13, 14, 15}
                                                         : std::vector<uint64_t>{20, 21, 22, 23, 24, 25};
        for (uint64_t tag : sent) c.send(message(c.rank(), tag, count_for(tag)).data(), count_for(tag), peer, tag);
        const std::vector<uint64_t> order = c.rank() == 0 ? std::vector<uint64_t>{25, 20, 23, 21, 24, 22}
                                                          : std::vector<uint64_t>{13, 10, 15, 12, 11, 14};
        for (uint64_t tag : order)
          if (auto p = expect(c, peer, tag, count_for(tag)); !p.empty()) return p;

        // The same tag twice: received in the order sent.
        if (c.rank() == 0) {
          std::vector<float> first{1, 2, 3}, second{4, 5, 6};
          c.send(first.data(), 3, 1, 30);
          c.send(second.data(), 3, 1, 30);
        } else {
          std::vector<float> got(3);
          c.recv(got.data(), 3, 0, 30);
          if (auto p = test::compare_exact(got, {1, 2, 3}, "first of tag 30"); !p.empty()) return p;
          c.recv(got.data(), 3, 0, 30);
          if (auto p = test::compare_exact(got, {4, 5, 6}, "second of tag 30"); !p.empty()) return p;
        }

        // An empty message and the largest tag.
        const uint64_t top = Communicator::kMaxTag;
        if (c.rank() == 0) {
          c.send(nullptr, 0, 1, 31);
          c.send(message(0, top, 5).data(), 5, 1, top);
        } else {
          c.recv(nullptr, 0, 0, 31);
          if (auto p = expect(c, 0, top, 5); !p.empty()) return p;
        }
        c.barrier();
        return "";
      }));
    }
  }
}

TEST_CASE("send/recv between 3 ranks: every pair, received in reverse order") {
  for (Backend b : kBackends) {
    DYNAMIC_SECTION(test::backend_name(b)) {
      check_all_ok(test::run_ranks(b, 3, "p2p/all3/", [](Communicator& c) -> std::string {
        const int r = c.rank();
        for (int round = 0; round < 3; ++round)
          for (int peer = 0; peer < 3; ++peer)
            if (peer != r) {
              const uint64_t tag = static_cast<uint64_t>(1000 * round + 10 * r + peer);
              c.send(message(r, tag, 50 + tag % 7).data(), 50 + tag % 7, peer, tag);
            }
        for (int round = 2; round >= 0; --round)
          for (int peer = 2; peer >= 0; --peer)
            if (peer != r) {
              const uint64_t tag = static_cast<uint64_t>(1000 * round + 10 * peer + r);
              if (auto p = expect(c, peer, tag, 50 + tag % 7); !p.empty()) return p;
            }
        return "";
      }));
    }
  }
}

TEST_CASE("a 3-stage pipeline: all forwards, then the backwards in reverse micro-batch order") {
  // Stage s adds s + 1 to its input going forward and doubles the gradient going
  // back; tag = step * 1024 + micro_batch * 2 + direction.
  constexpr int kSteps = 2, kMicroBatches = 4;
  constexpr size_t kCount = 1000;
  auto tag = [](int step, int mb, int direction) { return static_cast<uint64_t>(step * 1024 + mb * 2 + direction); };
  auto input = [](int step, int mb, size_t i) {
    return static_cast<float>(step * 100 + mb * 10 + static_cast<int>(i % 7));
  };
  for (Backend b : kBackends) {
    DYNAMIC_SECTION(test::backend_name(b)) {
      check_all_ok(test::run_ranks(b, 3, "p2p/pipeline/", [&](Communicator& c) -> std::string {
        const int s = c.rank();
        for (int step = 0; step < kSteps; ++step) {
          for (int mb = 0; mb < kMicroBatches; ++mb) {
            std::vector<float> x(kCount);
            if (s == 0) {
              for (size_t i = 0; i < kCount; ++i) x[i] = input(step, mb, i);
            } else {
              c.recv(x.data(), kCount, s - 1, tag(step, mb, 0));
              // Stages 0..s-1 added 1 + ... + s.
              for (size_t i = 0; i < kCount; ++i)
                if (x[i] != input(step, mb, i) + static_cast<float>(s * (s + 1) / 2))
                  return str("stage ", s, " step ", step, " micro-batch ", mb, ": activation ", i, " is ", x[i]);
            }
            for (float& v : x) v += static_cast<float>(s + 1);
            if (s < 2) c.send(x.data(), kCount, s + 1, tag(step, mb, 0));
          }
          for (int mb = kMicroBatches - 1; mb >= 0; --mb) {
            std::vector<float> g(kCount, static_cast<float>(mb + 1));
            if (s < 2) {
              c.recv(g.data(), kCount, s + 1, tag(step, mb, 1));
              const float expected = static_cast<float>((mb + 1) << (2 - s));  // doubled by each later stage
              for (size_t i = 0; i < kCount; ++i)
                if (g[i] != expected)
                  return str("stage ", s, " step ", step, " micro-batch ", mb, ": gradient ", i, " is ", g[i]);
            }
            for (float& v : g) v *= 2.0f;
            if (s > 0) c.send(g.data(), kCount, s - 1, tag(step, mb, 1));
          }
        }
        return "";
      }));
    }
  }
}

TEST_CASE("sends from a sender thread while the main thread receives and runs collectives") {
  constexpr int kMessages = 40;
  for (Backend b : kBackends) {
    DYNAMIC_SECTION(test::backend_name(b)) {
      check_all_ok(test::run_ranks(b, 2, "p2p/threads/", [](Communicator& c) -> std::string {
        const int peer = 1 - c.rank();
        std::string sender_problem;
        std::thread sender([&] {
          try {
            for (uint64_t tag = 0; tag < kMessages; ++tag)
              c.send(message(c.rank(), tag, 100 + tag).data(), 100 + tag, peer, tag);
          } catch (const std::exception& e) {
            sender_problem = e.what();
          }
        });
        std::string problem;
        for (int tag = kMessages - 1; tag >= 0 && problem.empty(); --tag) {
          problem = expect(c, peer, static_cast<uint64_t>(tag), 100 + static_cast<size_t>(tag));
          if (tag % 10 == 0 && problem.empty()) {
            float one = 1.0f;
            c.all_reduce(&one, 1, ReduceOp::kSum);
            if (one != 2.0f) problem = "all_reduce beside the sender thread";
          }
        }
        sender.join();
        return problem.empty() ? sender_problem : problem;
      }));
    }
  }
}

TEST_CASE("a recv whose peer never sends is a TimeoutError within the deadline, naming the peer and the tag") {
  for (Backend b : kBackends) {
    DYNAMIC_SECTION(test::backend_name(b)) {
      std::atomic<bool> done{false};
      std::string message_text, kind;
      double elapsed = 0;
      bool unusable_after = false;
      check_all_ok(test::run_owning(
          b, 2, "p2p/silent/",
          [&](std::unique_ptr<Communicator>& c) -> std::string {
            if (c->rank() == 1) {  // alive, connected, never sends
              while (!done) sleep_ms(10);
              return "";
            }
            kind = recv_outcome<TimeoutError>(*c, 77, "TimeoutError", &message_text, &elapsed);
            std::vector<float> x(16);
            try {
              c->send(x.data(), x.size(), 1, 78);
            } catch (const TimeoutError&) {
              unusable_after = true;
            }
            done = true;
            return "";
          },
          0.5));
      INFO(message_text);
      CHECK(kind == "TimeoutError");
      CHECK_THAT(message_text, Catch::Contains("from rank 1") && Catch::Contains("tag 77"));
      CHECK(elapsed >= 0.45);
      CHECK(elapsed < 3.0);
      CHECK(unusable_after);
    }
  }
}

TEST_CASE("a recv from a peer that destroyed its communicator is PeerLost, naming the peer and the tag") {
  for (Backend b : kBackends) {
    DYNAMIC_SECTION(test::backend_name(b)) {
      std::atomic<bool> gone{false};
      std::string message_text, kind;
      double elapsed = 0;
      check_all_ok(test::run_owning(
          b, 2, "p2p/gone/",
          [&](std::unique_ptr<Communicator>& c) -> std::string {
            c->barrier();
            if (c->rank() == 1) {
              c.reset();
              gone = true;
              return "";
            }
            while (!gone) sleep_ms(5);
            kind = recv_outcome<PeerLost>(*c, 5, "PeerLost", &message_text, &elapsed);
            return "";
          },
          5.0));
      INFO(message_text);
      CHECK(kind == "PeerLost");
      CHECK_THAT(message_text, Catch::Contains("from rank 1") && Catch::Contains("tag 5"));
      CHECK(elapsed < 4.0);
    }
  }
}

TEST_CASE("a message sent just before the sender's communicator is destroyed is still received") {
  for (Backend b : kBackends) {
    DYNAMIC_SECTION(test::backend_name(b)) {
      check_all_ok(test::run_owning(
          b, 2, "p2p/flush/",
          [&](std::unique_ptr<Communicator>& c) -> std::string {
            if (c->rank() == 1) {
              c->send(message(1, 9, 1000).data(), 1000, 0, 9);
              c.reset();  // Gloo: waits until rank 0 took the message
              return "";
            }
            sleep_ms(300);
            return expect(*c, 1, 9, 1000);
          },
          10.0));
    }
  }
}

TEST_CASE("send/recv refuse themselves, ranks outside the group, tags above kMaxTag and unequal counts") {
  for (Backend b : kBackends) {
    DYNAMIC_SECTION(test::backend_name(b)) {
      check_all_ok(test::run_ranks(
          b, 2, "p2p/refused/",
          [](Communicator& c) -> std::string {
            std::vector<float> x(5, 1.0f);
            const int r = c.rank();
            auto refused = [&](auto call, const char* what) -> std::string {
              try {
                call();
              } catch (const CommError&) {
                return "";
              }
              return str(what, " was not refused");
            };
            if (auto p = refused([&] { c.send(x.data(), 5, r, 1); }, "a send to itself"); !p.empty()) return p;
            if (auto p = refused([&] { c.recv(x.data(), 5, 2, 1); }, "a recv from rank 2 of 2"); !p.empty()) return p;
            if (auto p = refused([&] { c.send(x.data(), 5, -1, 1); }, "a send to rank -1"); !p.empty()) return p;
            if (auto p = refused([&] { c.send(x.data(), 5, 1 - r, Communicator::kMaxTag + 1); }, "tag kMaxTag + 1");
                !p.empty())
              return p;
            // Refused arguments leave the communicator usable.
            c.barrier();
            // Counts that differ: the receiver's CommError names both.
            if (r == 0) {
              c.send(x.data(), 5, 1, 3);
              return "";
            }
            try {
              c.recv(x.data(), 4, 0, 3);
            } catch (const CommError& e) {
              const std::string m = e.what();
              if (m.find("sent 5") == std::string::npos || m.find("expects 4") == std::string::npos ||
                  m.find("tag 3") == std::string::npos)
                return str("unclear message: ", m);
              return "";
            }
            return "a recv of 4 values took a message of 5";
          },
          5.0));
    }
  }
}

TEST_CASE("the flight recorder and borrow() forward and record send, recv and split") {
  auto group = make_local_group(2, 10.0);
  check_all_ok(test::run_on_threads(2, [&](int r) -> std::string {
    auto recorded = make_recorded(borrow(*group[static_cast<size_t>(r)]), "stages");
    std::vector<float> x{1, 2, 3, 4};
    if (r == 0) {
      recorded->send(x.data(), 4, 1, 42);
    } else {
      std::vector<float> got(4);
      recorded->recv(got.data(), 4, 0, 42);
      if (auto p = test::compare_exact(got, x, "recv through the wrappers"); !p.empty()) return p;
    }
    auto sub = recorded->split(0, -r);  // reversed
    if (!sub || sub->rank() != 1 - r || sub->size() != 2) return "split through the wrappers";
    sub->barrier();
    return "";
  }));
  const std::string record = flight_record();
  INFO(record);
  CHECK_THAT(record, Catch::Contains("stages send 16 bytes to rank 1 tag 42: completed"));
  CHECK_THAT(record, Catch::Contains("stages recv 16 bytes from rank 0 tag 42: completed"));
  CHECK_THAT(record, Catch::Contains("stages split 0 bytes: completed"));
  CHECK_THAT(record, Catch::Contains("stages/split0 barrier 0 bytes: completed"));
}

namespace {

// A communicator with only the required calls: send, recv and split are the defaults.
class Minimal final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  void all_reduce(float*, size_t, ReduceOp) override {}
  void broadcast(float*, size_t, int) override {}
  void all_gather(const float*, size_t, float*) override {}
  void reduce_scatter(const float*, size_t, float*, ReduceOp) override {}
  void barrier() override {}
};

}  // namespace

TEST_CASE("a communicator without point-to-point or sub-groups says so with CommError") {
  Minimal c;
  float x = 0;
  CHECK_THROWS_AS(c.send(&x, 1, 1, 0), CommError);
  CHECK_THROWS_WITH(c.recv(&x, 1, 1, 7), Catch::Contains("rank 1") && Catch::Contains("tag 7") &&
                                             Catch::Contains("no point-to-point"));
  CHECK_THROWS_AS(c.split(0, 0), CommError);
}
