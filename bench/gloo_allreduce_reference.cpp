// gloo_allreduce_reference: plain Gloo's all-reduce, measured the way
// `dtrain bench allreduce` measures dtrain's Communicator (lib/comm/bench_allreduce.cpp),
// as the reference dtrain must reach (0.95 of its bus bandwidth at >= 16 MiB).
//
// No dtrain code: Gloo's own FileStore in a directory shared by the processes
// (keys under a per-run prefix, since FileStore refuses keys left by an earlier
// run), Gloo's TCP device, gloo::allreduce with gloo::sum<float>.
//
//   gloo_allreduce_reference --size 2                      # forks 2 ranks itself
//   gloo_allreduce_reference --rank R --size N --store-dir DIR [--run-id ID]
//   options: --sizes 4K:64M  --iters 20  --warmup 5  --hostname 127.0.0.1  --timeout 60
//
// Rank 0 prints one JSON line per size: bytes, ranks, iterations, time_us,
// algbw_gbps, busbw_gbps, correct. Exit status 0 if every check passed.
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

struct Args {
  int rank = -1;  // -1: fork `size` ranks
  int size = 2;
  std::string store_dir;
  std::string run_id = "run";
  std::string sizes = "4K:64M";
  int iters = 20;
  int warmup = 5;
  std::string hostname = "127.0.0.1";
  int timeout_s = 60;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "gloo_allreduce_reference: %s\n"
               "usage: gloo_allreduce_reference [--rank R --store-dir DIR [--run-id ID]] --size N\n"
               "         [--sizes 4K:64M] [--iters 20] [--warmup 5] [--hostname 127.0.0.1] [--timeout 60]\n"
               "without --rank, forks N ranks itself with a fresh store directory\n",
               why.c_str());
  std::exit(2);
}

int to_int(const std::string& flag, const std::string& v) {
  try {
    size_t pos = 0;
    const int x = std::stoi(v, &pos);
    if (pos != v.size()) throw std::invalid_argument(v);
    return x;
  } catch (const std::exception&) {
    usage(flag + " wants an integer, got '" + v + "'");
  }
}

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) usage("missing value after " + flag);
    const std::string v = argv[++i];
    if (flag == "--rank") a.rank = to_int(flag, v);
    else if (flag == "--size") a.size = to_int(flag, v);
    else if (flag == "--store-dir") a.store_dir = v;
    else if (flag == "--run-id") a.run_id = v;
    else if (flag == "--sizes") a.sizes = v;
    else if (flag == "--iters") a.iters = to_int(flag, v);
    else if (flag == "--warmup") a.warmup = to_int(flag, v);
    else if (flag == "--hostname") a.hostname = v;
    else if (flag == "--timeout") a.timeout_s = to_int(flag, v);
    else usage("unknown option " + flag);
  }
  if (a.size < 1) usage("--size must be at least 1");
  if (a.rank >= a.size) usage("--rank must be below --size");
  if (a.rank >= 0 && a.store_dir.empty()) usage("--rank needs --store-dir");
  if (a.iters < 1 || a.warmup < 0 || a.timeout_s < 1) usage("bad --iters, --warmup or --timeout");
  return a;
}

// "4096", "4K", "64M", "1G" (binary, optional B/iB); "lo:hi" = lo, 2lo, ... <= hi; comma lists.
size_t parse_size(std::string s) {
  size_t pos = 0;
  while (pos < s.size() && std::isdigit(static_cast<unsigned char>(s[pos]))) ++pos;
  if (pos == 0) usage("bad size '" + s + "'");
  size_t v = std::stoull(s.substr(0, pos));
  std::string unit = s.substr(pos);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit == "K" || unit == "KB" || unit == "KIB") v <<= 10;
  else if (unit == "M" || unit == "MB" || unit == "MIB") v <<= 20;
  else if (unit == "G" || unit == "GB" || unit == "GIB") v <<= 30;
  else if (!unit.empty() && unit != "B") usage("bad size '" + s + "'");
  if (v == 0 || v % 4 != 0) usage("size '" + s + "' is not a positive multiple of 4 bytes");
  return v;
}

std::vector<size_t> parse_sizes(const std::string& text) {
  std::vector<size_t> out;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const size_t colon = item.find(':');
    if (colon == std::string::npos) {
      out.push_back(parse_size(item));
    } else {
      const size_t lo = parse_size(item.substr(0, colon)), hi = parse_size(item.substr(colon + 1));
      if (lo > hi) usage("bad range '" + item + "'");
      for (size_t s = lo; s <= hi; s *= 2) out.push_back(s);
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

void all_reduce_sum(const std::shared_ptr<gloo::Context>& ctx, float* data, size_t count) {
  gloo::AllreduceOptions opts(ctx);
  opts.setOutput(data, count);
  opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
  gloo::allreduce(opts);
}

int run_rank(const Args& a) {
  gloo::rendezvous::FileStore file_store(a.store_dir);
  gloo::rendezvous::PrefixStore store(a.run_id, file_store);
  gloo::transport::tcp::attr attr;
  attr.hostname = a.hostname;
  std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
  auto context = std::make_shared<gloo::rendezvous::Context>(a.rank, a.size);
  context->setTimeout(std::chrono::seconds(a.timeout_s));
  context->connectFullMesh(store, device);
  std::shared_ptr<gloo::Context> ctx = context;

  const size_t n = static_cast<size_t>(a.size);
  bool all_correct = true;
  for (const size_t bytes : parse_sizes(a.sizes)) {
    std::vector<float> x(bytes / sizeof(float));
    // The data check: rank r holds (i % 251) + r; the sum is n*(i % 251) + n(n-1)/2.
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 251 + static_cast<size_t>(a.rank));
    all_reduce_sum(ctx, x.data(), x.size());
    float wrong = 0;
    for (size_t i = 0; i < x.size(); ++i)
      if (x[i] != static_cast<float>(n * (i % 251) + n * (n - 1) / 2)) {
        wrong = 1;
        break;
      }
    all_reduce_sum(ctx, &wrong, 1);

    std::fill(x.begin(), x.end(), 0.0f);
    for (int i = 0; i < a.warmup; ++i) all_reduce_sum(ctx, x.data(), x.size());
    gloo::BarrierOptions barrier(ctx);
    gloo::barrier(barrier);
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < a.iters; ++i) all_reduce_sum(ctx, x.data(), x.size());
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    float time_us = static_cast<float>(seconds * 1e6 / a.iters);
    all_reduce_sum(ctx, &time_us, 1);
    time_us /= static_cast<float>(a.size);

    const double algbw = static_cast<double>(bytes) / (time_us * 1e-6) / 1e9;
    const double busbw = algbw * 2.0 * (a.size - 1) / a.size;
    all_correct = all_correct && wrong == 0;
    if (a.rank == 0) {
      std::printf(
          "{\"bytes\": %zu, \"ranks\": %d, \"iterations\": %d, \"time_us\": %.3f, \"algbw_gbps\": %.4f, "
          "\"busbw_gbps\": %.4f, \"correct\": %s}\n",
          bytes, a.size, a.iters, time_us, algbw, busbw, wrong == 0 ? "true" : "false");
      std::fflush(stdout);
    }
  }
  return all_correct ? 0 : 1;
}

// Without --rank: a fresh store directory, `size` forked ranks, the worst exit status.
int fork_ranks(Args a) {
  char dir_template[] = "/tmp/gloo_reference_XXXXXX";
  const char* dir = ::mkdtemp(dir_template);
  if (!dir) {
    std::perror("mkdtemp");
    return 1;
  }
  a.store_dir = dir;
  a.run_id = "run" + std::to_string(::getpid());
  std::vector<pid_t> children;
  for (int r = 0; r < a.size; ++r) {
    const pid_t pid = ::fork();
    if (pid < 0) {
      std::perror("fork");
      for (pid_t c : children) ::kill(c, SIGKILL);
      return 1;
    }
    if (pid == 0) {
      a.rank = r;
      int status = 1;
      try {
        status = run_rank(a);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "gloo_allreduce_reference: rank %d: %s\n", r, e.what());
      }
      std::fflush(nullptr);
      ::_exit(status);
    }
    children.push_back(pid);
  }
  int worst = 0;
  for (pid_t c : children) {
    int status = 0;
    ::waitpid(c, &status, 0);
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code != 0) {
      worst = std::max(worst, code);
      // One rank failed: the others would only wait for their timeout.
      for (pid_t other : children) ::kill(other, SIGKILL);
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse_args(argc, argv);
  ::signal(SIGPIPE, SIG_IGN);  // a dead peer is an error from writev, not a silent death
  if (a.rank < 0) return fork_ranks(a);
  try {
    return run_rank(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gloo_allreduce_reference: rank %d: %s\n", a.rank, e.what());
    return 1;
  }
}
