// The env:// convention's missing half (runtime.cluster_resolver env): every task
// knows the chief's address (MASTER_ADDR:MASTER_PORT) but not the others', so at
// start the chief (RANK 0) serves the job's store there, each task puts its own
// reachable address in it ("<address toward MASTER_ADDR>:<MASTER_PORT + RANK>",
// of which only the host is used: Gloo binds there), and every task waits, up to
// runtime.rendezvous_timeout, until all WORLD_SIZE have registered. The cluster
// is then complete and the usual session (ClusterSession) runs on the same store.
#pragma once

#include <memory>

#include "config/cluster_spec.h"
#include "config/job_file.h"
#include "rendezvous/auth.h"
#include "rendezvous/store_server.h"

namespace dtrain::runtime {

struct Registration {
  config::ClusterConfig cluster;  // every address filled in
  std::shared_ptr<rendezvous::StoreServer> server;  // the chief's store (chief only), for the session
};

// `partial`: a ClusterConfig with registers_addresses. TimeoutError naming the
// ranks that did not register in time; ConfigError for a wrong secret or job.
Registration register_addresses(const config::ClusterConfig& partial, const rendezvous::Credentials& credentials,
                                const config::RuntimeSpec& runtime);

}  // namespace dtrain::runtime
