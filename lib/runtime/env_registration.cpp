// Implementation of env_registration.h.
#include "runtime/env_registration.h"

#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "core/strings.h"
#include "rendezvous/store_client.h"

namespace dtrain::runtime {
namespace {

std::string address_key(const config::TaskId& task) { return "env/address/" + task.str(); }

}  // namespace

Registration register_addresses(const config::ClusterConfig& partial, const rendezvous::Credentials& credentials,
                                const config::RuntimeSpec& runtime) {
  Registration out;
  out.cluster = partial;
  const config::TaskId chief = partial.spec.chief();
  const bool is_chief = partial.task == chief;
  const config::HostPort master = config::parse_host_port(partial.spec.address(chief), "MASTER_ADDR:MASTER_PORT");
  const std::vector<config::TaskId> tasks = partial.spec.all_tasks();
  if (is_chief) {
    rendezvous::ServerOptions so;
    so.credentials = credentials;
    so.chief = chief.str();
    so.heartbeat_timeout = runtime.heartbeat_timeout;
    for (const config::TaskId& t : tasks)
      so.tasks.push_back({t.str(), t == chief ? partial.spec.address(chief) : std::string("(not registered yet)")});
    out.server = std::make_shared<rendezvous::StoreServer>("0.0.0.0", master.port, so);
  }
  // Mine: the chief's own address, or this machine's address toward the chief.
  const std::string mine =
      is_chief ? partial.spec.address(chief)
               : str(rendezvous::local_address_toward(master.host, master.port, "MASTER_ADDR"), ":",
                     master.port + partial.task.index);
  rendezvous::ClientOptions co;
  co.credentials = credentials;
  co.task = partial.task.str();
  co.server_name = str("the chief (", chief.str(), " at ", partial.spec.address(chief), ", MASTER_ADDR:MASTER_PORT)");
  co.connect_timeout = runtime.rendezvous_timeout;
  co.on_waiting = [](const std::string& message) { log::info("rendezvous: ", message); };
  rendezvous::StoreClient store(is_chief ? "127.0.0.1" : master.host, master.port, co);
  store.set(address_key(partial.task), mine);
  std::vector<std::string> keys;
  for (const config::TaskId& t : tasks) keys.push_back(address_key(t));
  if (!store.wait(keys, runtime.rendezvous_timeout)) {
    std::vector<std::string> missing, missing_tasks;
    for (const config::TaskId& t : tasks)
      if (!store.get(address_key(t))) {
        missing.push_back(std::to_string(t.index));
        missing_tasks.push_back(t.str());
      }
    const std::string failed = out.server ? out.server->failed_proofs(missing_tasks) : "";
    throw TimeoutError(str("env://: after runtime.rendezvous_timeout (", runtime.rendezvous_timeout, " s) RANK ",
                           join(missing, ", "), " of WORLD_SIZE ", tasks.size(),
                           " had not registered with the chief at ", partial.spec.address(chief),
                           failed.empty() ? "" : str("; failed proofs of the job secret from connections claiming "
                                                     "them: ", failed, " (another DTRAIN_JOB_SECRET?)"),
                           "; start every rank with the same MASTER_ADDR, MASTER_PORT, WORLD_SIZE and secret"));
  }
  for (const config::TaskId& t : tasks) {
    const std::optional<std::string> address = store.get(address_key(t));
    out.cluster.spec.tasks[t.type][static_cast<size_t>(t.index)] = *address;
  }
  out.cluster.registers_addresses = false;
  log::info("env://: ", tasks.size(), " tasks registered; this task ", partial.task.str(), " at ", mine);
  return out;
}

}  // namespace dtrain::runtime
