// Implementation of cluster_reader.h and of resolve_cluster() (cluster_spec.h).
//
// read_cluster_keys() reads the cluster, task and rpc_layer keys that a job file and
// TF_CONFIG share; resolve_cluster() reads TF_CONFIG with it (a Context marked as a
// variable, so paths read "TF_CONFIG.cluster.worker[2]"), then applies TF's
// precedence: the cluster from the file, else from TF_CONFIG (both given must agree
// after normalising the addresses); the task from --task, else TF_CONFIG's, else
// the file's. TF_CONFIG keys that TensorFlow and Cloud ML Engine put there but that
// dtrain does not use (environment, session_master, model_dir, job, task.trial, ...)
// are accepted and ignored, so an existing TF_CONFIG works unchanged. The runtime
// section (threads, and the rendezvous and heartbeat settings) is read here too.
#include "config/cluster_reader.h"

#include "config/cluster_resolver.h"

#include <cctype>
#include <climits>
#include <map>
#include <utility>

#include "core/error.h"
#include "core/strings.h"

namespace dtrain::config {
namespace {

const char* const kClusterExample = "{\"worker\": [\"host1:2222\", \"host2:2222\"]}";

// TF_CONFIG keys that TensorFlow or Cloud ML Engine define and dtrain ignores.
const std::vector<std::string> kIgnoredTfKeys = {"environment", "session_master",
                                                 "eval_session_master", "model_dir", "job"};
const std::vector<std::string> kIgnoredTfTaskKeys = {"trial", "cloud"};

ClusterSpec read_cluster(const Context& ctx, const Json& value, const std::string& path) {
  if (!value.is_object())
    ctx.fail(path, str("expected an object mapping task types to lists of \"host:port\" "
                       "addresses, such as ",
                       kClusterExample, ", got ", describe(value)));
  for (const auto& item : value.items())  // unknown types first, as expect_keys does
    if (!is_task_type(item.key()))
      ctx.fail(child_path(path, item.key()), unknown_task_type_message(item.key()));
  ClusterSpec spec;
  std::map<std::string, std::pair<TaskId, std::string>> seen;  // normalised address -> task, path
  for (const auto& type : kTaskTypes) {
    const auto it = value.find(type);
    if (it == value.end()) continue;
    const std::string list_path = child_path(path, type);
    if (!it->is_array())
      ctx.fail(list_path, str("expected an array of \"host:port\" strings, such as "
                              "[\"host1:2222\", \"host2:2222\"], got ",
                              describe(*it)));
    if ((type == "chief" || type == "evaluator") && it->size() > 1)
      ctx.fail(list_path,
               str("a cluster has at most one ", type, ", got ", it->size(), " addresses ",
                   show(*it), "; ",
                   type == "chief" ? "list the others under \"worker\" (the chief is worker "
                                     "number 0 of the training world)"
                                   : "keep one (an evaluator is a side task; run others as "
                                     "separate jobs)"));
    std::vector<std::string> addresses;
    for (size_t i = 0; i < it->size(); ++i) {
      const std::string item_path = index_path(list_path, i);
      const Json& item = (*it)[i];
      if (!item.is_string())
        ctx.fail(item_path, str("expected a \"host:port\" string such as \"host1:2222\", got ",
                                describe(item)));
      const std::string address = item.get<std::string>();
      HostPort parsed;
      const std::string problem = host_port_problem(address, &parsed);
      if (!problem.empty()) ctx.fail(item_path, problem);
      const TaskId task{type, static_cast<int>(i)};
      const auto [pos, added] =
          seen.emplace(normalized_address(parsed), std::pair{task, item_path});
      if (!added)
        ctx.fail(item_path, str("'", address, "' is the address of both ", pos->second.first.str(),
                                " (", pos->second.second, ") and ", task.str(),
                                "; every task needs its own host:port"));
      addresses.push_back(address);
    }
    if (!addresses.empty()) spec.tasks[type] = std::move(addresses);  // empty = no such task
  }
  if (!spec.empty() && spec.world_size() == 0)
    ctx.fail(path, str("a cluster needs a chief or at least one worker, got ", format_cluster(spec),
                       "; add \"worker\": [\"host:port\", ...] (worker:0 acts as chief when "
                       "there is no chief)"));
  return spec;
}

TaskId read_task(const Context& ctx, const Json& value, const std::string& path,
                 const std::vector<std::string>& ignored) {
  if (!value.is_object())
    ctx.fail(path, str("expected an object such as {\"type\": \"worker\", \"index\": 0}, got ",
                       describe(value)));
  ObjectReader r(ctx, value, path, "the task");
  std::vector<std::string> keys = {"type", "index"};
  keys.insert(keys.end(), ignored.begin(), ignored.end());
  r.expect_keys(keys);
  for (const auto& key : ignored) r.find(key);
  TaskId task;
  const Json& type = r.require("type", str(" (one of ", join(kTaskTypes, ", "), ")"));
  if (!type.is_string())
    ctx.fail(r.path_of("type"), str("expected a task type (one of ", join(kTaskTypes, ", "),
                                    "), got ", describe(type)));
  task.type = type.get<std::string>();
  if (!is_task_type(task.type)) ctx.fail(r.path_of("type"), unknown_task_type_message(task.type));
  if (const Json* index = r.find("index")) {  // TF: a missing index is 0
    const std::string index_path = r.path_of("index");
    if (index->is_string()) {
      const std::string text = index->get<std::string>();
      const bool digits =
          !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
      ctx.fail(index_path,
               str("expected an integer, got ", describe(*index),
                   digits ? str("; write it without quotes: \"index\": ", text) : std::string()));
    }
    const int64_t v = read_int(ctx, *index, index_path, 0);
    if (v > INT_MAX) ctx.fail(index_path, str("the index ", v, " is too large"));
    task.index = static_cast<int>(v);
  }
  r.finish();
  return task;
}

// How a cluster list is named mid-sentence: "TF_CONFIG.cluster.worker" or
// "cluster.worker in job.json".
std::function<std::string(const std::string&)> list_namer(const Context& ctx) {
  return [&ctx](const std::string& type) {
    const std::string path = child_path("cluster", type);
    return ctx.variable ? child_path(ctx.source, path) : str(path, " in ", ctx.source);
  };
}

// The first difference between two clusters, or "" when they are the same after
// normalising the addresses.
std::string cluster_difference(const ClusterSpec& a, const std::string& a_name,
                               const ClusterSpec& b, const std::string& b_name) {
  for (const auto& type : kTaskTypes) {
    const int n = a.count(type);
    if (n != b.count(type))
      return str(a_name, " has ", n, " ", type, " addresses and ", b_name, " has ", b.count(type));
    for (int i = 0; i < n; ++i) {
      const TaskId task{type, i};
      HostPort x, y;
      host_port_problem(a.address(task), &x);
      host_port_problem(b.address(task), &y);
      if (normalized_address(x) != normalized_address(y))
        return str(task.str(), " is '", a.address(task), "' in ", a_name, " and '", b.address(task),
                   "' in ", b_name);
    }
  }
  return "";
}

// TF_CONFIG's cluster and task.
struct TfConfig {
  ClusterSpec cluster;
  std::optional<TaskId> task;
};

TfConfig read_tf_config(const Context& ctx, const char* text) {
  TfConfig out;
  const std::string value = text ? text : "";
  if (value.find_first_not_of(" \t\r\n") == std::string::npos) return out;  // unset or empty
  const Json root = parse_json(value, ctx);
  if (!root.is_object())
    ctx.fail("", str("expected a JSON object such as {\"cluster\": ", kClusterExample,
                     ", \"task\": {\"type\": \"worker\", \"index\": 0}}, got ", describe(root)));
  ObjectReader r(ctx, root, "", "TF_CONFIG");
  std::vector<std::string> keys = {"cluster", "task", "rpc_layer"};
  keys.insert(keys.end(), kIgnoredTfKeys.begin(), kIgnoredTfKeys.end());
  r.expect_keys(keys);
  for (const auto& key : kIgnoredTfKeys) r.find(key);
  read_cluster_keys(r, &out.cluster, &out.task, kIgnoredTfTaskKeys);
  r.finish();
  return out;
}

}  // namespace

void read_cluster_keys(ObjectReader& r, ClusterSpec* cluster, std::optional<TaskId>* task,
                       const std::vector<std::string>& ignored_task_keys) {
  const Context& ctx = r.context();
  if (const Json* v = r.find("cluster"); v && !v->is_null())
    *cluster = read_cluster(ctx, *v, r.path_of("cluster"));
  if (const Json* v = r.find("rpc_layer"); v && !v->is_null())
    cluster->rpc_layer = read_string(ctx, *v, r.path_of("rpc_layer"), true);
  if (const Json* v = r.find("task"); v && !v->is_null()) {
    *task = read_task(ctx, *v, r.path_of("task"), ignored_task_keys);
    if (!cluster->empty()) {
      const std::string problem = task_problem(*cluster, **task, list_namer(ctx));
      if (!problem.empty())
        ctx.fail(r.path_of(cluster->count((*task)->type) ? "task.index" : "task.type"), problem);
    }
  }
}

RuntimeSpec read_runtime(const Context& ctx, const Json& value) {
  RuntimeSpec runtime;
  ObjectReader r(ctx, value, runtime.path, "the runtime section");
  r.expect_keys({"threads", "rendezvous_timeout", "heartbeat_interval", "heartbeat_timeout", "stall_timeout",
                 "secret_file", "job_id", "cluster_resolver", "port_base", "slurm_jobs", "kubernetes", "memory_limit"});
  if (const Json* v = r.find("cluster_resolver"))
    runtime.cluster_resolver = read_choice(ctx, *v, r.path_of("cluster_resolver"), kClusterResolvers, "cluster resolver");
  // Numbers that become ints (ports, counts): at most `max`, so that none wraps around.
  auto at_most = [&ctx](int64_t v, int64_t max, const std::string& path, const char* what) {
    if (v > max) ctx.fail(path, str("must be at most ", max, " (", what, "), got ", v));
    return static_cast<int>(v);
  };
  runtime.port_base = at_most(r.get_int("port_base", runtime.port_base, 1), 65535, r.path_of("port_base"), "a port");
  if (const Json* v = r.find("slurm_jobs"); v && !v->is_null()) {
    if (!v->is_object()) ctx.fail(r.path_of("slurm_jobs"), "must be an object of task type -> count, e.g. {\"ps\": 1, \"worker\": 3}");
    for (const auto& [type, count] : v->items()) {
      const std::string path = child_path(r.path_of("slurm_jobs"), type);
      runtime.slurm_jobs.emplace_back(type, at_most(read_int(ctx, count, path, 1), 1 << 16, path, "tasks of one type"));
    }
  }
  if (const Json* v = r.find("kubernetes"); v && !v->is_null()) {
    ObjectReader k(ctx, *v, r.path_of("kubernetes"), "runtime.kubernetes");
    k.expect_keys({"job", "service", "replicas", "port"});
    if (const Json* s = k.find("job")) runtime.kubernetes.job = read_string(ctx, *s, k.path_of("job"), false);
    if (const Json* s = k.find("service")) runtime.kubernetes.service = read_string(ctx, *s, k.path_of("service"), false);
    runtime.kubernetes.replicas = at_most(k.get_int("replicas", 0, 1), 1 << 20, k.path_of("replicas"), "pods");
    runtime.kubernetes.port = at_most(k.get_int("port", 0, 1), 65535, k.path_of("port"), "a port");
    k.finish();
  }
  runtime.threads = r.get_int("threads", runtime.threads, 0);
  if (const Json* v = r.find("memory_limit"); v && !v->is_null()) {
    std::optional<int64_t> bytes;
    if (v->is_number_integer()) {
      if (v->get<int64_t>() >= 0) bytes = v->get<int64_t>();
    } else if (v->is_string()) {
      bytes = parse_byte_size(v->get<std::string>());
    }
    if (!bytes)
      ctx.fail(r.path_of("memory_limit"), str("expected ", kByteSizeForms, "; 0 = no limit; got ", describe(*v)));
    runtime.memory_limit = *bytes;
  }
  runtime.rendezvous_timeout =
      r.get_double("rendezvous_timeout", runtime.rendezvous_timeout, kSeconds);
  runtime.heartbeat_interval =
      r.get_double("heartbeat_interval", runtime.heartbeat_interval, kSeconds);
  runtime.heartbeat_timeout =
      r.get_double("heartbeat_timeout", runtime.heartbeat_timeout, kSeconds);
  runtime.stall_timeout = r.get_double("stall_timeout", runtime.stall_timeout, kSecondsOrZero);
  if (runtime.heartbeat_timeout <= runtime.heartbeat_interval)
    ctx.fail(
        r.path_of("heartbeat_timeout"),
        str("must be greater than runtime.heartbeat_interval (", runtime.heartbeat_interval,
            "), got ", r.has("heartbeat_timeout") ? "" : "the default ", runtime.heartbeat_timeout,
            "; a task is declared lost after this many seconds without a heartbeat, so "
            "allow several intervals (e.g. ",
            10 * runtime.heartbeat_interval, ")"));
  if (const Json* v = r.find("secret_file"))
    runtime.secret_file = read_string(ctx, *v, r.path_of("secret_file"), true);
  if (const Json* v = r.find("job_id")) {
    runtime.job_id = read_string(ctx, *v, r.path_of("job_id"), true);
    for (char c : runtime.job_id)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.')
        ctx.fail(r.path_of("job_id"),
                 str("'", printable(runtime.job_id), "' contains '", printable(std::string(1, c)),
                     "'; a job id names store keys and files, so use letters, digits, '-', "
                     "'_' and '.' only"));
    if (runtime.job_id.size() > 128)
      ctx.fail(r.path_of("job_id"),
               str("is ", runtime.job_id.size(), " characters long; keep it to 128 at most"));
  }
  r.finish();
  return runtime;
}

ClusterConfig resolve_cluster(const FileCluster& job, const char* tf_config, const std::string& task_flag) {
  Context file;
  file.source = job.source;
  Context env;
  env.source = "TF_CONFIG";
  env.variable = true;
  const TfConfig tf = read_tf_config(env, tf_config);

  ClusterConfig out;
  if (!job.cluster.empty()) {
    if (!tf.cluster.empty()) {
      const std::string difference =
          cluster_difference(job.cluster, job.source, tf.cluster, "TF_CONFIG");
      if (!difference.empty())
        file.fail("cluster", str(job.source, " and TF_CONFIG give different clusters (", difference,
                                 "): ", job.source, " has ", format_cluster(job.cluster),
                                 ", TF_CONFIG has ", format_cluster(tf.cluster),
                                 "; give the cluster in one place (remove \"cluster\" from ",
                                 job.source, " or unset TF_CONFIG) or make them equal"));
    }
    out.spec = job.cluster;
    out.source = job.source;
  } else if (!tf.cluster.empty()) {
    out.spec = tf.cluster;
    out.source = "TF_CONFIG";
  }
  // rpc_layer (unused, kept for TF compatibility): the file's, else TF_CONFIG's.
  out.spec.rpc_layer = job.cluster.rpc_layer.empty() ? tf.cluster.rpc_layer : job.cluster.rpc_layer;

  // The task and where it came from: where(key) places a message at the task's key
  // ("" = the task itself).
  auto task_path = [](const std::string& key) {
    return key.empty() ? std::string("task") : child_path("task", key);
  };
  std::optional<TaskId> task;
  std::function<std::string(const std::string&)> where;
  if (!task_flag.empty()) {
    task = parse_task_flag(task_flag);
    where = [&task_flag](const std::string&) { return str("--task ", task_flag); };
  } else if (tf.task) {
    task = tf.task;
    where = [&env, task_path](const std::string& key) { return env.where(task_path(key)); };
  } else if (job.task) {
    task = job.task;
    where = [&file, task_path](const std::string& key) { return file.where(task_path(key)); };
  }

  if (out.spec.empty()) {
    if (task)
      throw ConfigError(str(where(""), ": the task ", task->str(),
                            " is given but there is no cluster; add \"cluster\" (task type -> "
                            "list of \"host:port\", e.g. ",
                            kClusterExample, ") to TF_CONFIG or to ",
                            job.source.empty() ? std::string("a job file (--config FILE)") : job.source,
                            ", or give no task to run as a single process"));
    return out;  // a single process
  }
  if (!task)
    throw ConfigError(
        str("the cluster (from ", out.source, ", ", out.spec.all_tasks().size(),
            " tasks) does not say which task this process is; give it with --task TYPE:INDEX",
            " (e.g. --task ", out.spec.chief().str(), "), with TF_CONFIG's \"task\": {\"type\": \"",
            out.spec.chief().type, "\", \"index\": 0}, or with \"task\" in ", job.source));
  const Context& cluster_ctx = out.source == "TF_CONFIG" ? env : file;
  const std::string problem = task_problem(out.spec, *task, list_namer(cluster_ctx));
  if (!problem.empty())
    throw ConfigError(str(where(out.spec.count(task->type) ? "index" : "type"), ": ", problem));
  out.task = *task;
  return out;
}

}  // namespace dtrain::config
