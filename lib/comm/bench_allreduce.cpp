// bench_all_reduce and its size-list parser (see bench_allreduce.h).
//
// Method, shared with bench/gloo_allreduce_reference.cpp so the two compare:
// rank r fills x[i] = (i % 251) + r, one all-reduce (sum) must give exactly
// n*(i % 251) + n(n-1)/2 everywhere (integers below 2^24 add exactly in float32);
// then the buffer is zeroed (so repeated in-place sums stay finite), `warmup`
// all-reduces run untimed, a barrier lines the ranks up, and `iterations`
// all-reduces are timed together. Each rank's mean time is averaged over ranks.
#include "comm/bench_allreduce.h"

#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <limits>

#include "core/error.h"
#include "core/strings.h"

namespace dtrain::comm {

void fill_rank_data(std::vector<float>& x, int rank) {
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 251 + static_cast<size_t>(rank));
}

size_t count_wrong_sums(const std::vector<float>& x, int ranks) {
  const size_t n = static_cast<size_t>(ranks);
  size_t wrong = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float expected = static_cast<float>(n * (i % 251) + n * (n - 1) / 2);
    if (x[i] != expected) ++wrong;
  }
  return wrong;
}

namespace {

size_t parse_size(const std::string& item, const std::string& whole) {
  auto bad = [&](const std::string& why) {
    return ConfigError(str("bad size '", item, "' in the size list '", whole, "': ", why,
                           " (examples: 4096, 4K, 64M, 1G, 4K:64M)"));
  };
  size_t pos = 0;
  uint64_t value = 0;
  while (pos < item.size() && std::isdigit(static_cast<unsigned char>(item[pos]))) {
    const uint64_t digit = static_cast<uint64_t>(item[pos] - '0');
    if (value > (std::numeric_limits<uint64_t>::max() - digit) / 10) throw bad("too large");
    value = value * 10 + digit;
    ++pos;
  }
  if (pos == 0) throw bad("expected a number");
  std::string suffix = item.substr(pos);
  for (char& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  uint64_t scale = 1;
  if (!suffix.empty() && (suffix[0] == 'K' || suffix[0] == 'M' || suffix[0] == 'G')) {
    scale = suffix[0] == 'K' ? (1ull << 10) : suffix[0] == 'M' ? (1ull << 20) : (1ull << 30);
    suffix.erase(0, 1);
    if (suffix == "IB") suffix = "B";
  }
  if (!suffix.empty() && suffix != "B") throw bad("unknown unit (use K, M or G)");
  if (value == 0) throw bad("a size must be positive");
  if (value > (uint64_t{1} << 40) / scale) throw bad("too large (at most 1 TiB)");
  const uint64_t bytes = value * scale;
  if (bytes % sizeof(float) != 0) throw bad("not a multiple of 4 bytes (float32 elements)");
  return static_cast<size_t>(bytes);
}

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

}  // namespace

std::vector<size_t> parse_size_list(const std::string& text) {
  std::vector<size_t> sizes;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string item = trim(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (item.empty()) throw ConfigError(str("empty item in the size list '", text, "' (example: 4K:64M)"));
    const size_t colon = item.find(':');
    if (colon == std::string::npos) {
      sizes.push_back(parse_size(item, text));
    } else {
      const size_t lo = parse_size(trim(item.substr(0, colon)), text);
      const size_t hi = parse_size(trim(item.substr(colon + 1)), text);
      if (lo > hi)
        throw ConfigError(str("bad range '", item, "' in the size list '", text, "': the start is above the end"));
      for (size_t s = lo; s <= hi; s *= 2) sizes.push_back(s);
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return sizes;
}

std::vector<AllReduceResult> bench_all_reduce(Communicator& comm, const std::vector<size_t>& sizes_bytes,
                                              int iterations, int warmup) {
  if (iterations < 1) throw ConfigError(str("the benchmark needs at least 1 iteration, got ", iterations));
  if (warmup < 0) throw ConfigError(str("the warmup count cannot be negative, got ", warmup));
  const int n = comm.size();
  std::vector<AllReduceResult> results;
  for (const size_t bytes : sizes_bytes) {
    if (bytes == 0 || bytes % sizeof(float) != 0)
      throw ConfigError(str("all-reduce benchmark size ", bytes, " is not a positive multiple of 4 bytes"));
    std::vector<float> x(bytes / sizeof(float));

    fill_rank_data(x, comm.rank());
    comm.all_reduce(x.data(), x.size(), ReduceOp::kSum);
    float wrong = static_cast<float>(count_wrong_sums(x, n) > 0 ? 1 : 0);
    comm.all_reduce(&wrong, 1, ReduceOp::kSum);  // how many ranks saw a wrong sum

    std::fill(x.begin(), x.end(), 0.0f);
    for (int i = 0; i < warmup; ++i) comm.all_reduce(x.data(), x.size(), ReduceOp::kSum);
    comm.barrier();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iterations; ++i) comm.all_reduce(x.data(), x.size(), ReduceOp::kSum);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    float time_us = static_cast<float>(seconds * 1e6 / iterations);
    comm.all_reduce(&time_us, 1, ReduceOp::kMean);

    AllReduceResult r;
    r.bytes = bytes;
    r.ranks = n;
    r.iterations = iterations;
    r.time_us = time_us;
    r.algbw_gbps = time_us > 0 ? static_cast<double>(bytes) / (time_us * 1e-6) / 1e9 : 0.0;
    r.busbw_gbps = r.algbw_gbps * 2.0 * (n - 1) / n;
    r.correct = wrong == 0.0f;
    results.push_back(r);
  }
  return results;
}

std::string to_json(const AllReduceResult& r) {
  // Bandwidths to 6 significant digits: a small size on a loaded machine measures
  // well under 0.0001 GB/s, which a fixed 4 decimals printed as 0.
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "{\"bytes\": %zu, \"ranks\": %d, \"iterations\": %d, \"time_us\": %.3f, "
                "\"algbw_gbps\": %.6g, \"busbw_gbps\": %.6g, \"correct\": %s}",
                r.bytes, r.ranks, r.iterations, r.time_us, r.algbw_gbps, r.busbw_gbps,
                r.correct ? "true" : "false");
  return buf;
}

}  // namespace dtrain::comm
