// The all-reduce benchmark behind `dtrain bench allreduce`: nccl-tests' figures
// (time per all-reduce, algorithm and bus bandwidth) and a data check, for any
// Communicator.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace dtrain::comm {

struct AllReduceResult {
  size_t bytes = 0;         // buffer size per rank (float32)
  int ranks = 0;            // group size
  int iterations = 0;       // timed all-reduces
  double time_us = 0;       // mean time of one all-reduce, averaged over the ranks
  double algbw_gbps = 0;    // bytes / time, in 1e9 bytes/s
  double busbw_gbps = 0;    // algbw * 2(n-1)/n (nccl-tests' bus bandwidth for all-reduce)
  bool correct = false;     // every rank got the exact sum of the ranks' integer data
  size_t wrong = 0;         // elements that differed from it, over all ranks (nccl-tests' #wrong; NCCL bench)
};

// Runs, for each size: one all-reduce (sum) of rank-dependent integer-valued data
// checked exactly on every rank, `warmup` untimed all-reduces, then `iterations`
// timed ones after a barrier. Collective: every rank calls it with the same
// arguments and gets the same results (times and the check are agreed through the
// communicator). Sizes must be positive multiples of 4 bytes.
std::vector<AllReduceResult> bench_all_reduce(Communicator& comm, const std::vector<size_t>& sizes_bytes,
                                              int iterations, int warmup);

// The benchmark's data: rank r's x[i] = (i % 251) + r; after a sum over `ranks`
// ranks every element must be exactly ranks*(i % 251) + ranks(ranks-1)/2.
void fill_rank_data(std::vector<float>& x, int rank);
size_t count_wrong_sums(const std::vector<float>& x, int ranks);

// The same measurement with NCCL on device buffers, one rank per listed GPU of
// this process (one thread each; make_local_nccl_group), float32 sum in place;
// `wrong` counts the elements that differed. A build without NCCL throws
// ConfigError. timeout_seconds bounds joining and every wait.
std::vector<AllReduceResult> bench_nccl_all_reduce(const std::vector<int>& devices,
                                                   const std::vector<size_t>& sizes_bytes, int iterations, int warmup,
                                                   double timeout_seconds);

// Parses a size list: comma-separated items, each a size ("4096", "4K", "64M",
// "1G"; K/M/G are binary and may be followed by "B" or "iB") or a range "lo:hi"
// (lo, 2*lo, 4*lo, ... up to hi). Throws ConfigError naming the bad item; sizes
// must be positive multiples of 4 bytes (float32 elements).
std::vector<size_t> parse_size_list(const std::string& text);

// One result as a JSON object on one line, with the keys
// bytes, ranks, iterations, time_us, algbw_gbps, busbw_gbps, correct
// (the same keys as bench/gloo_allreduce_reference).
std::string to_json(const AllReduceResult& result);

}  // namespace dtrain::comm
