// Implementation of slurm.h: Slurm's host-list and tasks-per-node syntax, and the
// block layout of a step's tasks that TensorFlow's SlurmClusterResolver assumes.
//
// Unlike TF, the hosts keep Slurm's order (TF sorts them by name, which puts n10
// before n9), the jobs keep the caller's order (TF sorts them by name), and a task
// whose SLURM_LOCALID or SLURMD_NODENAME contradicts the block layout is an error
// (srun --distribution=cyclic), where TF would give it another task's address.
#include "config/slurm.h"

#include <algorithm>
#include <cctype>
#include <numeric>
#include <set>

#include "config/cluster_reader.h"
#include "config/variables.h"
#include "core/error.h"
#include "core/strings.h"

namespace dtrain::config {
namespace {

constexpr size_t kMaxHosts = size_t{1} << 20;  // a guard against "n[0-999999999]"
constexpr int kMaxTasks = 1 << 16;              // tasks in one step (each gets an address here)
const char* const kHostlistExample = "expected hosts like 'node[01-03,07],login1'";
const char* const kCountsExample = "expected counts like '2(x3),1'";
const char* const kNotInStep =
    "run dtrain inside a Slurm step (srun), or choose runtime.cluster_resolver";

bool is_digits(const std::string& s) { return s.size() <= 9 && all_digits(s); }  // fits an int

bool is_host_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-' || c == '.' || c == '_';
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts(1);
  for (char c : text) {
    if (c == sep)
      parts.emplace_back();
    else
      parts.back() += c;
  }
  return parts;
}

[[noreturn]] void bad_hostlist(const std::string& variable, const std::string& text,
                               const std::string& why) {
  throw ConfigError(
      str(variable, "='", printable(text), "': cannot parse the host list: ", why, " (", kHostlistExample, ")"));
}

// Splits a host list at the commas outside brackets, checking that brackets pair up.
std::vector<std::string> split_groups(const std::string& text, const std::string& variable) {
  std::vector<std::string> groups(1);
  bool in_brackets = false;
  for (char c : text) {
    if (c == '[') {
      if (in_brackets) bad_hostlist(variable, text, "'[' inside brackets");
      in_brackets = true;
    } else if (c == ']') {
      if (!in_brackets) bad_hostlist(variable, text, "']' without '['");
      in_brackets = false;
    } else if (c == ',' && !in_brackets) {
      groups.emplace_back();
      continue;
    }
    groups.back() += c;
  }
  if (in_brackets) bad_hostlist(variable, text, "'[' has no closing ']'");
  return groups;
}

// The numbers inside one bracket: "01-03,7" -> 01, 02, 03, 7.
std::vector<std::string> expand_ranges(const std::string& inner, const std::string& variable,
                                       const std::string& text) {
  std::vector<std::string> values;
  for (const std::string& part : split(inner, ',')) {
    if (part.empty()) bad_hostlist(variable, text, str("empty range in '[", printable(inner), "]'"));
    const std::vector<std::string> bounds = split(part, '-');
    if (bounds.size() > 2 || !is_digits(bounds.front()) || !is_digits(bounds.back()))
      bad_hostlist(variable, text,
                   str("'", printable(part), "' in '[", printable(inner), "]' is not a number or a range like 1-3"));
    const int low = std::stoi(bounds.front());
    const int high = std::stoi(bounds.back());
    if (high < low) bad_hostlist(variable, text, str("the range '", printable(part), "' goes down"));
    if (static_cast<size_t>(high - low) >= kMaxHosts)
      bad_hostlist(variable, text, str("the range '", printable(part), "' has more than ", kMaxHosts, " hosts"));
    const size_t width = bounds.front().size();  // "001-010": keep 3 digits
    for (int i = low; i <= high; ++i) {
      std::string number = std::to_string(i);
      if (number.size() < width) number.insert(0, width - number.size(), '0');
      values.push_back(number);
    }
  }
  return values;
}

const std::string& required(const EnvVars& env, const std::string& name) {
  const auto it = env.find(name);
  if (it == env.end()) throw ConfigError(str(name, " is not set: ", kNotInStep));
  return it->second;
}

int whole_number(const std::string& name, const std::string& value) { return variable_number(name, value, kNotInStep); }

std::string format_jobs(const std::vector<std::pair<std::string, int>>& jobs) {
  std::vector<std::string> parts;
  for (const auto& [type, count] : jobs) parts.push_back(str("\"", type, "\": ", count));
  return str("{", join(parts, ", "), "}");
}

// Checks the jobs option: known task types, each once and at least once, at most one
// chief and one evaluator, a chief or a worker, `num_tasks` tasks in all.
void check_jobs(const std::vector<std::pair<std::string, int>>& jobs, int num_tasks) {
  const std::string where = printable(str("runtime.slurm_jobs ", format_jobs(jobs)), 200);
  std::set<std::string> seen;
  int64_t total = 0;
  for (const auto& [type, count] : jobs) {
    if (!is_task_type(type)) throw ConfigError(str(where, ": ", unknown_task_type_message(type)));
    if (!seen.insert(type).second)
      throw ConfigError(str(where, ": '", type, "' appears twice; give each task type once"));
    if (count < 1)
      throw ConfigError(str(where, ": '", type, "' has ", count,
                            " tasks; give each task type at least 1, or leave it out"));
    if ((type == "chief" || type == "evaluator") && count > 1)
      throw ConfigError(str(where, ": a cluster has at most one ", type, ", not ", count));
    total += count;
  }
  if (seen.count("chief") == 0 && seen.count("worker") == 0)
    throw ConfigError(str(where, ": a cluster needs a chief or at least one worker"));
  if (total != num_tasks)
    throw ConfigError(str(where, " asks for ", total, " tasks but the Slurm step has ", num_tasks,
                          " (SLURM_STEP_NUM_TASKS='", num_tasks, "'): make the counts add up to ",
                          num_tasks, ", or run srun with --ntasks=", total));
}

}  // namespace

std::vector<std::string> expand_slurm_hostlist(const std::string& text, const std::string& variable) {
  if (text.empty()) bad_hostlist(variable, text, "the list is empty");
  std::vector<std::string> hosts;
  for (const std::string& group : split_groups(text, variable)) {
    if (group.empty())
      bad_hostlist(variable, text, "an empty host name (a comma at an end, or two in a row)");
    // Every combination of the group's brackets, the leftmost varying slowest.
    std::vector<std::string> names = {""};
    size_t i = 0;
    while (i < group.size()) {
      if (group[i] == '[') {
        const size_t close = group.find(']', i);  // split_groups() checked it is there
        const std::string inner = group.substr(i + 1, close - i - 1);
        if (inner.empty()) bad_hostlist(variable, text, "empty brackets '[]'");
        const std::vector<std::string> values = expand_ranges(inner, variable, text);
        if (names.size() * values.size() + hosts.size() > kMaxHosts)
          bad_hostlist(variable, text, str("it expands to more than ", kMaxHosts, " hosts"));
        std::vector<std::string> combined;
        for (const std::string& name : names)
          for (const std::string& value : values) combined.push_back(name + value);
        names = std::move(combined);
        i = close + 1;
      } else {
        if (!is_host_char(group[i]))
          bad_hostlist(variable, text, str("'", printable(std::string(1, group[i])), "' is not allowed in a host name"));
        for (std::string& name : names) name += group[i];
        ++i;
      }
    }
    hosts.insert(hosts.end(), names.begin(), names.end());
  }
  return hosts;
}

std::vector<int> expand_slurm_tasks_per_node(const std::string& text, const std::string& variable) {
  std::vector<int> counts;
  for (const std::string& part : split(text, ',')) {
    const auto bad = [&](const std::string& why) {
      return ConfigError(str(variable, "='", printable(text), "': cannot parse '", printable(part), "': ", why, " (",
                             kCountsExample, ")"));
    };
    // "COUNT" or "COUNT(xREPEATS)"
    const size_t paren = part.find('(');
    const std::string count = part.substr(0, paren);
    std::string repeats = "1";
    if (paren != std::string::npos) {
      if (part.compare(paren, 2, "(x") != 0 || part.back() != ')' || part.size() < paren + 3)
        throw bad("a repeat is written '(xN)'");
      repeats = part.substr(paren + 2, part.size() - paren - 3);
    }
    if (!is_digits(count) || !is_digits(repeats)) throw bad("expected whole numbers");
    if (std::stoi(count) < 1 || std::stoi(repeats) < 1) throw bad("counts and repeats start at 1");
    if (counts.size() + static_cast<size_t>(std::stoi(repeats)) > kMaxHosts)
      throw bad(str("more than ", kMaxHosts, " nodes"));
    counts.insert(counts.end(), static_cast<size_t>(std::stoi(repeats)), std::stoi(count));
  }
  return counts;
}

ClusterConfig resolve_slurm(const EnvVars& env, const SlurmOptions& options) {
  const int rank = whole_number("SLURM_PROCID", required(env, "SLURM_PROCID"));
  const int num_tasks = whole_number("SLURM_STEP_NUM_TASKS", required(env, "SLURM_STEP_NUM_TASKS"));
  const std::string& nodelist = required(env, "SLURM_STEP_NODELIST");
  const std::string& tasks_per_node = required(env, "SLURM_STEP_TASKS_PER_NODE");
  const std::vector<std::string> hosts = expand_slurm_hostlist(nodelist, "SLURM_STEP_NODELIST");
  const std::vector<int> counts = expand_slurm_tasks_per_node(tasks_per_node, "SLURM_STEP_TASKS_PER_NODE");
  const std::string layout = str("SLURM_STEP_NODELIST='", printable(nodelist), "' and SLURM_STEP_TASKS_PER_NODE='",
                                 printable(tasks_per_node), "'");

  if (hosts.size() != counts.size())
    throw ConfigError(str(layout, " disagree: ", hosts.size(), " hosts but ", counts.size(),
                          " task counts (", kNotInStep, ")"));
  const std::set<std::string> distinct(hosts.begin(), hosts.end());
  if (distinct.size() != hosts.size())
    throw ConfigError(str("SLURM_STEP_NODELIST='", printable(nodelist), "' names a host twice (", kNotInStep, ")"));
  if (num_tasks > kMaxTasks)
    throw ConfigError(str("SLURM_STEP_NUM_TASKS='", num_tasks, "' is more tasks than one dtrain job runs (at most ",
                          kMaxTasks, ")"));
  // Each count is below 10^9 and there are at most 2^20: the sum fits in 64 bits.
  const int64_t sum = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  if (sum != num_tasks)
    throw ConfigError(str("SLURM_STEP_NUM_TASKS='", num_tasks, "' but ", layout, " place ", sum,
                          " tasks (", kNotInStep, ")"));
  if (rank >= num_tasks)
    throw ConfigError(str("SLURM_PROCID='", rank, "' is not below SLURM_STEP_NUM_TASKS='", num_tasks,
                          "' (", kNotInStep, ")"));

  const int max_per_node = *std::max_element(counts.begin(), counts.end());
  if (options.port_base < 1 || options.port_base + max_per_node - 1 > 65535)
    throw ConfigError(str("runtime.port_base: ports ", options.port_base, "..",
                          options.port_base + max_per_node - 1, " (", max_per_node,
                          " tasks on a node) must lie within 1..65535; choose a port like 8888"));

  // The step's tasks in SLURM_PROCID order, node by node (srun's block layout).
  std::vector<std::string> addresses;
  std::vector<size_t> node_of;
  std::vector<int> local_index;
  for (size_t node = 0; node < hosts.size(); ++node) {
    for (int k = 0; k < counts[node]; ++k) {
      addresses.push_back(str(hosts[node], ":", options.port_base + k));
      node_of.push_back(node);
      local_index.push_back(k);
    }
  }

  ClusterConfig config;
  config.source = "slurm";
  std::vector<std::pair<std::string, int>> jobs = options.jobs;
  if (jobs.empty())
    jobs = {{"worker", num_tasks}};
  else
    check_jobs(jobs, num_tasks);
  int first = 0;
  for (const auto& [type, count] : jobs) {
    config.spec.tasks[type].assign(addresses.begin() + first, addresses.begin() + first + count);
    if (rank >= first && rank < first + count) config.task = {type, rank - first};
    first += count;
  }

  // Where Slurm says this task runs must be where the block layout puts it.
  const std::string& host = hosts[node_of[static_cast<size_t>(rank)]];
  const int local = local_index[static_cast<size_t>(rank)];
  const std::string placed = str("the block layout of ", layout, " puts task ", rank,
                                 " (SLURM_PROCID) on ", host, " as its task ", local);
  const std::string fix =
      "run srun with --distribution=block (the default), as dtrain numbers tasks node by node";
  if (const auto it = env.find("SLURM_LOCALID"); it != env.end()) {
    if (whole_number("SLURM_LOCALID", it->second) != local)
      throw ConfigError(str("SLURM_LOCALID='", printable(it->second), "' but ", placed, ": ", fix));
  }
  if (const auto it = env.find("SLURMD_NODENAME"); it != env.end() && it->second != host)
    throw ConfigError(str("SLURMD_NODENAME='", printable(it->second), "' but ", placed, ": ", fix));
  config.local_rank = local;

  if (const auto job = env.find("SLURM_JOB_ID"); job != env.end()) {
    const auto step = env.find("SLURM_STEP_ID");
    config.job_id = step == env.end() ? str("slurm-", job->second)
                                      : str("slurm-", job->second, ".", step->second);
  }
  return config;
}

}  // namespace dtrain::config
