// Feeds: TF_CONFIG's value, then (after a NUL byte) a --task flag, then (after
// another) a job file's JSON whose cluster, task and rpc_layer keys are the file's
// cluster: "{\"cluster\": ...}\0worker:1\0{\"cluster\": ...}".
// Asserts: resolve_cluster() (TF_CONFIG parsing, the cluster and task checks, the
// comparison of the file's cluster with TF_CONFIG's, parse_task_flag) returns or
// throws a dtrain error with a printable message; a resolved cluster answers
// address(), rank() and chief() for its task without an internal error.
// Mutated as JSON too (json_mutator.h): values of another type where one belongs.
#include "config/job_file.h"
#include "fuzz_support.h"
#include "json_mutator.h"

using namespace dtrain;

DTRAIN_FUZZ_JSON_MUTATOR()

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<std::string> parts = fuzz::split_input(data, size);
  const std::string& tf_config = parts[0];
  const std::string task_flag = parts.size() > 1 ? parts[1] : "";
  config::FileCluster file{"job.json", {}, std::nullopt};
  if (parts.size() > 2) {
    const bool read = fuzz::expect_clean([&] {
      config::JobDocument doc(parts[2], "job.json", {});
      config::read_cluster_keys(doc.root(), &file.cluster, &file.task);
    });
    if (!read) return 0;
  }
  fuzz::expect_clean([&] {
    const config::ClusterConfig c = config::resolve_cluster(file, tf_config.c_str(), task_flag);
    if (c.single_process()) return;
    config::parse_host_port(c.spec.address(c.task), "the task's address");
    c.spec.rank(c.task);
    c.spec.chief();
    c.spec.all_tasks();
  });
  return 0;
}
