// make_strategy(): picks the Strategy named by strategy.type.
#include "strategy/strategy.h"

#include "core/error.h"
#include "core/strings.h"
#include "strategy/one_device.h"

namespace dtrain::strategy {

std::unique_ptr<Strategy> make_strategy(const config::JobConfig& job) {
  if (job.strategy.type == "one_device") return std::make_unique<OneDeviceStrategy>(job);
  throw ConfigError(str(job.strategy.path, ".type: '", job.strategy.type,
                        "' is not available in this version of dtrain; available: one_device"));
}

}  // namespace dtrain::strategy
