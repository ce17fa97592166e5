// Implementation of hostfile.h.
#include "launch/hostfile.h"

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/strings.h"

namespace dtrain::launch {

std::vector<HostSlots> read_hostfile(const std::string& path) {
  if (std::filesystem::is_directory(path)) throw IoError(str("--hostfile: '", path, "' is a directory, not a file"));
  std::ifstream in(path);
  if (!in) throw IoError(str("--hostfile: cannot read '", path, "'"));
  std::vector<HostSlots> hosts;
  std::set<std::string> seen;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.erase(hash);
    std::istringstream words(line);
    std::string word;
    if (!(words >> word)) continue;
    const std::string where = str(path, ":", number);
    HostSlots h;
    h.target = word;
    h.host = word.substr(word.find('@') + 1);  // npos + 1 == 0: no user part
    h.line = number;
    if (h.host.empty()) throw ConfigError(str(where, ": '", word, "' names no host"));
    // (ssh would read a leading '-' as one of its options)
    if (word[0] == '-' || h.host[0] == '-')
      throw ConfigError(str(where, ": '", printable(word), "' is not a host name (it starts with '-')"));
    while (words >> word) {
      const std::string value = word.rfind("slots=", 0) == 0 ? word.substr(6) : "";
      char* end = nullptr;
      const long slots = value.empty() ? 0 : std::strtol(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || slots < 1 || slots > 4096)
        throw ConfigError(str(where, ": '", word, "': expected slots=N with N a positive number (the tasks to start "
                                             "on ", h.host, "), as in 'node1 slots=2'"));
      h.slots = static_cast<int>(slots);
    }
    if (!seen.insert(h.host).second)
      throw ConfigError(str(where, ": ", h.host, " is listed twice; give each host once with all its slots"));
    hosts.push_back(h);
  }
  if (hosts.empty()) throw ConfigError(str("--hostfile: '", path, "' lists no hosts; write one 'HOST slots=N' per line"));
  int64_t slots = 0;
  for (const HostSlots& h : hosts) slots += h.slots;
  if (slots > kMaxLaunchTasks)
    throw ConfigError(str("--hostfile: '", path, "' asks for ", slots, " tasks (its slots over ", hosts.size(),
                          " hosts); dtrain launch starts at most ", kMaxLaunchTasks,
                          ": lower the slots, or start the tasks with Slurm or Kubernetes"));
  return hosts;
}

ClusterPlan plan_hostfile_cluster(const std::vector<HostSlots>& hosts, int port_base, const std::string& source) {
  ClusterPlan plan;
  plan.source = source;
  for (const HostSlots& h : hosts) {
    if (port_base + h.slots - 1 > 65535)
      throw ConfigError(str("--port-base ", port_base, ": ", h.host, "'s ", h.slots, " slots would need ports up to ",
                            port_base + h.slots - 1, "; choose a lower port base"));
    for (int k = 0; k < h.slots; ++k) plan.spec.tasks["worker"].push_back(str(h.host, ":", port_base + k));
  }
  for (const config::TaskId& t : plan.spec.all_tasks()) plan.tasks.push_back({t, ReservedPort{}});
  for (PlannedTask& p : plan.tasks) p.port.address = plan.spec.address(p.task);
  return plan;
}

std::vector<RemoteSlot> remote_slots(const std::vector<HostSlots>& hosts) {
  std::vector<RemoteSlot> out;
  for (const HostSlots& h : hosts)
    for (int k = 0; k < h.slots; ++k) out.push_back({&h, k});
  return out;
}

}  // namespace dtrain::launch
