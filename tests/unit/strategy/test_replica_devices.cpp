// Where the local replicas of a data-parallel job compute (strategy/planning/replica_devices.h):
// on the CPU all share it; on GPUs mirrored puts one replica on each GPU, from
// strategy.devices or counting up from the job's GPU, and every way to ask for a
// GPU that is not there, or for several GPUs under a strategy that keeps one, is
// a ConfigError saying what to change. Pure logic over a GPU count: no GPU needed.
#include <catch2/catch.hpp>

#include "core/error.h"
#include "job/job_config.h"
#include "strategy/planning/replica_devices.h"
#include "support/tiny_dense_job.h"

using namespace dtrain;
using Catch::Matchers::Contains;

namespace {

strategy::StrategySpec spec_of(const std::string& type, const std::string& extra) {
  return test::tiny_dense_job(type, extra).strategy;
}

std::vector<std::string> names(const std::vector<Device>& devices) {
  std::vector<std::string> out;
  for (const Device& d : devices) out.push_back(d.str());
  return out;
}

}  // namespace

TEST_CASE("replica devices: on the CPU every replica shares it") {
  const auto spec = spec_of("mirrored", R"(, "replicas": 3)");
  CHECK(names(strategy::replica_devices(spec, Device::cpu(), 3, 0)) ==
        std::vector<std::string>{"cpu:0", "cpu:0", "cpu:0"});
  const auto named = spec_of("mirrored", R"(, "devices": ["cpu:0", "cpu:1"])");
  CHECK_FALSE(strategy::devices_name_gpus(named));
  CHECK(names(strategy::replica_devices(named, Device::cpu(), 2, 4)) == std::vector<std::string>{"cpu:0", "cpu:0"});
}

TEST_CASE("replica devices: mirrored on GPUs takes one GPU per replica") {
  const auto counted = spec_of("mirrored", R"(, "replicas": 2)");
  CHECK(names(strategy::replica_devices(counted, Device::cuda(0), 2, 2)) ==
        std::vector<std::string>{"cuda:0", "cuda:1"});
  // From the job's GPU on (dtrain launch's LOCAL_RANK may have picked cuda:1).
  CHECK(names(strategy::replica_devices(counted, Device::cuda(1), 2, 4)) ==
        std::vector<std::string>{"cuda:1", "cuda:2"});
  const auto named = spec_of("mirrored", R"(, "devices": ["gpu:3", "cuda:1"])");
  CHECK(strategy::devices_name_gpus(named));
  CHECK(names(strategy::replica_devices(named, Device::cuda(0), 2, 4)) == std::vector<std::string>{"cuda:3", "cuda:1"});
  // One named GPU is that GPU.
  CHECK(names(strategy::replica_devices(spec_of("mirrored", R"(, "devices": ["gpu:1"])"), Device::cuda(0), 1, 2)) ==
        std::vector<std::string>{"cuda:1"});
  // One replica stays on the job's device whatever the strategy.
  CHECK(names(strategy::replica_devices(spec_of("one_device", ""), Device::cuda(2), 1, 4)) ==
        std::vector<std::string>{"cuda:2"});
}

TEST_CASE("replica devices: GPUs that are not there, or not for this strategy, are ConfigErrors") {
  const auto counted = spec_of("mirrored", R"(, "replicas": 2)");
  CHECK_THROWS_WITH(strategy::replica_devices(counted, Device::cuda(0), 2, 1),
                    Contains("needs cuda:1, but this machine has 1 usable GPU"));
  CHECK_THROWS_WITH(strategy::replica_devices(counted, Device::cuda(1), 2, 2), Contains("needs cuda:2"));
  const auto twice = spec_of("mirrored", R"(, "devices": ["gpu:0", "gpu:0"])");
  CHECK_THROWS_WITH(strategy::replica_devices(twice, Device::cuda(0), 2, 2), Contains("names cuda:0 twice"));
  const auto mixed = spec_of("mirrored", R"(, "devices": ["cpu:0", "gpu:0"])");
  CHECK_THROWS_WITH(strategy::devices_name_gpus(mixed), Contains("mixes CPU and GPU names"));
  const auto gpus = spec_of("mirrored", R"(, "devices": ["gpu:0", "gpu:1"])");
  CHECK_THROWS_WITH(strategy::replica_devices(gpus, Device::cpu(), 2, 0), Contains("names GPUs, but the job trains on cpu:0"));
  const auto cpus = spec_of("mirrored", R"(, "devices": ["cpu:0", "cpu:1"])");
  CHECK_THROWS_WITH(strategy::replica_devices(cpus, Device::cuda(0), 2, 2), Contains("names CPU devices"));
  for (const char* type : {"central_storage", "multi_worker_mirrored"})
    CHECK_THROWS_WITH(strategy::replica_devices(spec_of(type, R"(, "replicas": 2)"), Device::cuda(0), 2, 2),
                      Contains(std::string(type) + " with 2 replicas on GPUs is not built"));
}
