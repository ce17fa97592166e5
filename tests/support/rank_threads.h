// Runs one body per rank on threads of the test process, as the tasks or replicas
// of a job would run. Catch2 is not thread-safe, so a body reports a problem as a
// string ("" = fine) and check_all_ok() checks them on the test's own thread; an
// exception thrown by a body becomes its problem.
#pragma once

#include <catch2/catch.hpp>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace dtrain::test {

// body(rank) for rank 0..n-1, each on its own thread; returns every rank's problem.
inline std::vector<std::string> run_on_threads(int n, const std::function<std::string(int rank)>& body) {
  std::vector<std::string> problems(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        problems[static_cast<size_t>(r)] = body(r);
      } catch (const std::exception& e) {
        problems[static_cast<size_t>(r)] = "rank " + std::to_string(r) + " threw: " + e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return problems;
}

// Every rank's problem must be "".
inline void check_all_ok(const std::vector<std::string>& problems) {
  for (size_t r = 0; r < problems.size(); ++r) {
    INFO("rank " << r);
    CHECK(problems[r] == "");
  }
}

// "" if got == expected exactly, else where they first differ.
inline std::string compare_exact(const std::vector<float>& got, const std::vector<float>& expected,
                                 const std::string& what) {
  if (got.size() != expected.size())
    return what + ": size " + std::to_string(got.size()) + " != " + std::to_string(expected.size());
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != expected[i])
      return what + ": element " + std::to_string(i) + " is " + std::to_string(got[i]) + ", expected " +
             std::to_string(expected[i]);
  return "";
}

}  // namespace dtrain::test
