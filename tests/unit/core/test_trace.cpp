// The trace recorder: spans written in the Chrome trace format, on the reference
// clock when an offset to it was set; native stacks of other threads.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/native_stack.h"
#include "core/strings.h"
#include "core/trace.h"
#include "support/temp_dir.h"

using namespace dtrain;

TEST_CASE("written spans are shifted onto the reference clock by the offset") {
  trace::enable();
  trace::complete("probe span", "test", 1'000'000, 250);
  trace::set_clock_offset({-400, 35});
  test::TempDir dir;
  const std::string path = dir.file("trace.json");
  trace::write(path, "worker:1", 2);
  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in);
  bool found_span = false, found_offset = false;
  for (const auto& e : j["traceEvents"]) {
    if (e["name"] == "probe span") {
      found_span = true;
      CHECK(e["ph"] == "X");
      CHECK(e["ts"] == 999'600);
      CHECK(e["dur"] == 250);
      CHECK(e["pid"] == 2);
    }
    if (e["name"] == "clock_offset_us") {
      found_offset = true;
      CHECK(e["args"]["offset_us"] == -400);
      CHECK(e["args"]["uncertainty_us"] == 35);
    }
  }
  CHECK(found_span);
  CHECK(found_offset);
  trace::set_clock_offset({});
}

// A function with a name of its own in the dynamic symbol table (the test binary
// exports its symbols) that parks its thread until told to go.
extern "C" __attribute__((noinline)) void dtrain_test_parked_here(std::atomic<bool>* go) {
  while (!go->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

TEST_CASE("native_stack names the frames of another thread, innermost first") {
  std::atomic<bool> go{false};
  std::atomic<int> tid{0};
  std::thread parked([&] {
    tid = dtrain::os_thread_id();
    dtrain_test_parked_here(&go);
  });
  while (tid == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const std::vector<std::string> frames = dtrain::native_stack(tid);
  go = true;
  parked.join();
  INFO(dtrain::join(frames, " < "));
  const auto at = std::find(frames.begin(), frames.end(), "dtrain_test_parked_here");
  REQUIRE(at != frames.end());
  // Above it: the sleep it is in (libc's nanosleep, through std::this_thread::sleep_for).
  CHECK(at != frames.begin());
  CHECK(std::any_of(frames.begin(), at, [](const std::string& f) { return f.find("sleep") != std::string::npos; }));
  // A thread that is gone gives no stack, at once.
  CHECK(dtrain::native_stack(tid).empty());
}

TEST_CASE("short_function_name drops the parameters and the return type") {
  using dtrain::short_function_name;
  CHECK(short_function_name("dtrain::data::Pipeline::next(dtrain::Batch&)") == "dtrain::data::Pipeline::next");
  CHECK(short_function_name("void std::vector<int, std::allocator<int> >::push_back(int const&)") ==
        "std::vector<int, std::allocator<int> >::push_back");
  CHECK(short_function_name("dtrain::(anonymous namespace)::on_signal(int)") ==
        "dtrain::(anonymous namespace)::on_signal");
  CHECK(short_function_name("pthread_cond_wait") == "pthread_cond_wait");
  CHECK(short_function_name("dtrain::runtime::local_report[abi:cxx11](long)") == "dtrain::runtime::local_report");
  CHECK(short_function_name("dtrain::Tensor::operator()(long) const") == "dtrain::Tensor::operator()");
}
