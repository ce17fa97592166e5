// Implementation of cluster_spec.h, plus the plain helpers of cluster_reader.h.
//
// The ClusterSpec queries (count, address, ranks, the chief) follow TF's rules: the
// chief is chief:0, or worker:0 when the cluster has no chief; the training world is
// the chief plus the workers, ranked chief first. Addresses are host:port with the
// host a name or IPv4 address, or an IPv6 address in brackets ("[::1]:2222"). A
// mistyped task type gets a suggestion, including the names people bring from
// elsewhere: TF1's worker_hosts/ps_hosts flags, "master" (TF1's chief), "workers".
#include <algorithm>
#include <cctype>
#include <utility>

#include "config/cluster_reader.h"
#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"

namespace dtrain::config {
namespace {

// Names people use for a task type -> the type they mean.
const std::vector<std::pair<std::string, std::string>> kTypeAliases = {
    {"master", "chief"},
    {"boss", "chief"},
    {"leader", "chief"},
    {"head", "chief"},
    {"coordinator", "chief"},
    {"chief_hosts", "chief"},
    {"workers", "worker"},
    {"worker_hosts", "worker"},
    {"ps_hosts", "ps"},
    {"parameter_server", "ps"},
    {"parameter_servers", "ps"},
    {"eval", "evaluator"},
    {"evaluator_hosts", "evaluator"}};

bool host_name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-' || c == '.' || c == '_';
}

bool ipv6_char(char c) {
  return std::isxdigit(static_cast<unsigned char>(c)) != 0 || c == ':' || c == '.';
}

}  // namespace

bool is_task_type(const std::string& type) {
  return std::find(kTaskTypes.begin(), kTaskTypes.end(), type) != kTaskTypes.end();
}

std::string unknown_task_type_message(const std::string& type) {
  std::string guess;
  for (const auto& [alias, meant] : kTypeAliases)
    if (alias == lower(type)) guess = meant;
  if (guess.empty()) guess = closest_match(lower(type), kTaskTypes);
  std::string note;
  const std::string hosts = "_hosts";
  if (type.size() > hosts.size() &&
      type.compare(type.size() - hosts.size(), hosts.size(), hosts) == 0)
    note = str(" (TF1's --", printable(type),
               " flag; TF_CONFIG uses lists under \"cluster\" instead, e.g. "
               "\"cluster\": {\"worker\": [\"host1:2222\", \"host2:2222\"], \"ps\": "
               "[\"host3:2222\"]})");
  return str("unknown task type '", printable(type), "'",
             guess.empty() ? std::string() : str("; did you mean '", guess, "'?"), note,
             " (valid: ", join(kTaskTypes, ", "), ")");
}

std::string host_port_problem(const std::string& address, HostPort* out) {
  const std::string bad = str("'", printable(address), "' is not host:port: ");
  if (address.empty()) return bad + "the address is empty (e.g. \"localhost:2222\")";
  std::string host;
  std::string port;
  if (address[0] == '[') {  // [IPv6]:port
    const size_t close = address.find(']');
    if (close == std::string::npos)
      return bad + "the IPv6 address has no closing ']' (e.g. \"[::1]:2222\")";
    host = address.substr(1, close - 1);
    if (host.empty()) return bad + "the host between '[' and ']' is empty";
    if (host.find(':') == std::string::npos || !std::all_of(host.begin(), host.end(), ipv6_char))
      return bad + str("'", printable(host),
                       "' in brackets is not an IPv6 address (e.g. \"[::1]:2222\"; "
                       "a host name or IPv4 address goes without brackets)");
    if (close + 1 == address.size())
      return bad + str("the port is missing (e.g. \"", printable(address), ":2222\")");
    if (address[close + 1] != ':')
      return bad + "expected ':' and a port after ']' (e.g. \"[::1]:2222\")";
    port = address.substr(close + 2);
  } else {
    const size_t colon = address.rfind(':');
    if (colon == std::string::npos)
      return bad + str("the port is missing (e.g. \"", printable(address), ":2222\")");
    host = address.substr(0, colon);
    port = address.substr(colon + 1);
    if (host.find(':') != std::string::npos)
      return bad + str("an IPv6 address needs brackets: \"[", printable(host), "]:", printable(port), "\"");
    if (host.empty()) return bad + str("the host is empty (e.g. \"localhost", printable(address), "\")");
    for (char c : host)
      if (!host_name_char(c))
        return bad + str("the host '", printable(host), "' contains '", printable(std::string(1, c)),
                         "', which is not allowed in a host name or IPv4 address");
  }
  if (port.empty()) return bad + "the port after ':' is missing (e.g. \"localhost:2222\")";
  if (!all_digits(port)) return bad + str("the port '", printable(port), "' is not a number");
  const size_t first = port.find_first_not_of('0');
  const std::string digits = first == std::string::npos ? "0" : port.substr(first);
  const int value = digits.size() > 5 ? 0 : std::stoi(digits);
  if (value < 1 || value > 65535) return bad + str("port ", printable(port), " is outside 1..65535");
  out->host = host;
  out->port = value;
  return "";
}

std::string normalized_address(const HostPort& address) {
  const std::string host = lower(address.host);
  return host.find(':') != std::string::npos ? str("[", host, "]:", address.port)
                                             : str(host, ":", address.port);
}

std::string task_problem(const ClusterSpec& spec, const TaskId& task,
                         const std::function<std::string(const std::string&)>& list_name) {
  const int n = spec.count(task.type);
  if (n == 0) {
    std::vector<std::string> present;
    for (const auto& type : kTaskTypes)
      if (spec.count(type) > 0) present.push_back(type);
    return str("the cluster has no ", task.type, " tasks (it has ", join(present, ", "),
               "); pick one of its tasks, or add the address to ", list_name(task.type));
  }
  if (task.index < 0 || task.index >= n)
    return str(task.str(), " is not in the cluster: ", list_name(task.type), " has ", n,
               n == 1 ? " address" : " addresses", " (", task.type, ":0 to ", task.type, ":", n - 1,
               "); use an index from 0 to ", n - 1, " or add the address to the list");
  return "";
}

std::string format_cluster(const ClusterSpec& spec) {
  std::vector<std::string> lists;
  for (const auto& type : kTaskTypes) {
    const auto it = spec.tasks.find(type);
    if (it == spec.tasks.end()) continue;
    std::vector<std::string> quoted;
    for (const auto& address : it->second) quoted.push_back(str("\"", address, "\""));
    lists.push_back(str("\"", type, "\": [", join(quoted, ", "), "]"));
  }
  return str("{", join(lists, ", "), "}");
}

const char* task_type_name(TaskType type) {
  switch (type) {
    case TaskType::kChief: return "chief";
    case TaskType::kWorker: return "worker";
    case TaskType::kPs: return "ps";
    case TaskType::kEvaluator: return "evaluator";
  }
  return "?";
}

TaskType task_type_of(const std::string& name) {
  for (const TaskType t : {TaskType::kChief, TaskType::kWorker, TaskType::kPs, TaskType::kEvaluator})
    if (name == task_type_name(t)) return t;
  DT_CHECK(false, "a task type that no reader accepted: '", printable(name), "'");
  return TaskType::kWorker;
}

int ClusterSpec::count(const std::string& type) const {
  const auto it = tasks.find(type);
  return it == tasks.end() ? 0 : static_cast<int>(it->second.size());
}

bool ClusterSpec::contains(const TaskId& task) const {
  return task.index >= 0 && task.index < count(task.type);
}

const std::string& ClusterSpec::address(const TaskId& task) const {
  DT_CHECK(contains(task), "task ", task.str(), " is not in the cluster ", format_cluster(*this));
  return tasks.at(task.type)[static_cast<size_t>(task.index)];
}

std::vector<TaskId> ClusterSpec::all_tasks() const {
  std::vector<TaskId> out;
  for (const auto& type : kTaskTypes)
    for (int i = 0; i < count(type); ++i) out.push_back({type, i});
  return out;
}

TaskId ClusterSpec::chief() const {
  if (count("chief") > 0) return {"chief", 0};
  if (count("worker") > 0) return {"worker", 0};
  throw ConfigError(
      str("a cluster needs a chief or at least one worker, got ", format_cluster(*this)));
}

int ClusterSpec::world_size() const { return count("chief") + count("worker"); }

int ClusterSpec::rank(const TaskId& task) const {
  DT_CHECK(contains(task), "task ", task.str(), " is not in the cluster ", format_cluster(*this));
  if (task.type == "chief") return task.index;
  if (task.type == "worker") return count("chief") + task.index;
  return -1;  // ps and evaluator tasks are outside the training world
}

HostPort parse_host_port(const std::string& address, const std::string& where) {
  HostPort out;
  const std::string problem = host_port_problem(address, &out);
  if (!problem.empty()) throw ConfigError(str(where, ": ", problem));
  return out;
}

TaskId parse_task_flag(const std::string& text) {
  const std::string where = str("--task ", printable(text), ": ");
  const std::string usage =
      str("expected TYPE:INDEX, e.g. --task worker:1 (types: ", join(kTaskTypes, ", "), ")");
  const size_t colon = text.find(':');
  if (colon == std::string::npos) throw ConfigError(where + str("the index is missing; ", usage));
  TaskId task;
  task.type = text.substr(0, colon);
  const std::string index = text.substr(colon + 1);
  if (task.type.empty()) throw ConfigError(where + str("the task type is missing; ", usage));
  if (!is_task_type(task.type)) throw ConfigError(where + unknown_task_type_message(task.type));
  if (!all_digits(index))
    throw ConfigError(where + str("the index '", printable(index), "' is not an integer >= 0; ", usage));
  if (index.size() > 9) throw ConfigError(where + str("the index ", printable(index), " is too large"));
  task.index = std::stoi(index);
  return task;
}

}  // namespace dtrain::config
