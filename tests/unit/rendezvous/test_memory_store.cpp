// The in-memory Store and the prefix view: the same contract as the TCP store
// (set/get/add/wait with a deadline), across threads, without sockets.
#include <catch2/catch.hpp>
#include <thread>

#include "core/error.h"
#include "core/timer.h"
#include "rendezvous/store.h"

using namespace dtrain;
using namespace dtrain::rendezvous;

TEST_CASE("in-memory store: set, get, add and wait") {
  InMemoryStore store;
  CHECK_FALSE(store.get("a").has_value());
  store.set("a", std::string("x\0y", 3));
  CHECK(store.get("a") == std::string("x\0y", 3));
  CHECK(store.add("n", 5) == 5);
  CHECK(store.add("n", -2) == 3);
  CHECK(store.get("n") == "3");
  CHECK_THROWS_AS(store.add("a", 1), RuntimeError);

  Stopwatch watch;
  CHECK_FALSE(store.wait({"a", "missing"}, 0.2));
  CHECK(watch.seconds() >= 0.15);
  CHECK(watch.seconds() < 2.0);

  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    store.set("missing", "now");
  });
  CHECK(store.wait({"a", "missing"}, 10.0));
  late.join();
}

TEST_CASE("prefix store keeps its keys under its prefix") {
  InMemoryStore base;
  PrefixStore a(base, "comm/a/"), b(base, "comm/b/");
  a.set("0", "addr-a");
  b.set("0", "addr-b");
  CHECK(base.get("comm/a/0") == "addr-a");
  CHECK(b.get("0") == "addr-b");
  CHECK(a.add("count", 2) == 2);
  CHECK(base.get("comm/a/count") == "2");
  CHECK(a.wait({"0", "count"}, 1.0));
  CHECK_FALSE(b.wait({"count"}, 0.05));
}
