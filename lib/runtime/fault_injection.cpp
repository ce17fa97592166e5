// Implementation of fault_injection.h.
#include "runtime/fault_injection.h"

#include <chrono>
#include <thread>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <utility>

#include "checkpoint/durable_file.h"
#include "core/error.h"
#include "core/strings.h"
#include "strategy/sync/gradient_reducer.h"

namespace dtrain::runtime {

InjectedFault parse_injected_fault(const std::string& text) {
  InjectedFault fault;
  if (text.empty()) return fault;
  for (auto [prefix, target] : {std::pair{"kill@step=", &fault.kill_step},
                                std::pair{"kill@ckpt_byte=", &fault.kill_ckpt_byte},
                                std::pair{"kill@seconds=", &fault.kill_seconds},
                                std::pair{"stall_reader@step=", &fault.stall_reader_step},
                                std::pair{"skip_allreduce@step=", &fault.skip_allreduce_step},
                                std::pair{"bytes_per_pack=", &fault.bytes_per_pack}}) {
    const std::string p = prefix;
    if (text.rfind(p, 0) != 0) continue;
    const std::string digits = text.substr(p.size());
    char* end = nullptr;
    errno = 0;
    const long long n = std::strtoll(digits.c_str(), &end, 10);
    if (!digits.empty() && digits.find_first_not_of("0123456789") == std::string::npos && errno == 0 &&
        *end == '\0' && n > 0) {
      *target = n;
      return fault;
    }
  }
  throw ConfigError(str("DTRAIN_INJECT='", text, "': expected kill@step=N, kill@ckpt_byte=N, kill@seconds=N, stall_reader@step=N, skip_allreduce@step=N or bytes_per_pack=N with N > 0"));
}

void before_batch_if_injected(const InjectedFault& fault, int64_t step) {
  if (step == fault.skip_allreduce_step) strategy::inject_skip_next_allreduce();
  if (step != fault.stall_reader_step) return;
  // The reader never returns; the job's deadlines end this process (the watchdog
  // once the job failed), as they would a real reader stuck on a dead file system.
  while (true) std::this_thread::sleep_for(std::chrono::seconds(3600));
}

int64_t arm_injected_fault(const InjectedFault& fault) {
  if (fault.kill_ckpt_byte > 0)
    checkpoint::set_write_hook(static_cast<uint64_t>(fault.kill_ckpt_byte),
                               [](uint64_t) { std::raise(SIGKILL); });  // mid-save, for tests and demos
  if (fault.kill_seconds > 0)
    std::thread([s = fault.kill_seconds] {
      std::this_thread::sleep_for(std::chrono::seconds(s));
      std::raise(SIGKILL);
    }).detach();
  return fault.kill_step;
}

}  // namespace dtrain::runtime
