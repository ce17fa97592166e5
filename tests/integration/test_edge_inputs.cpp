// Inputs found by exploring the command line for what it must refuse or survive,
// through the real binary: each ends with its documented exit code and a message
// naming the fix, and never with a hang, a raw library error or a lost result.
// A batch larger than the data in `bench train` (it read forever), durations
// past what a clock holds (1e10 s wrapped round to "timed out at once"), output
// paths that are directories (found only after the training), a symbolic link as
// an output (it was replaced by a file), a host name that ssh would read as an
// option, and SIGTERM during the rendezvous (ignored until the deadline). A
// data file that is a FIFO (the open blocked forever), more tasks than one
// launcher starts (a hostfile's slots were not counted), numbers past what an
// option holds (CLI11's raw "Could not convert"), a file given as a checkpoint
// directory, --workers M:N blamed on a --set the user never gave, and a remote
// task whose ssh fails (exit 255, "no error on its stderr").
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "integration/job_files.h"
#include "integration/run_dtrain.h"
#include "integration/start_dtrain.h"
#include "support/free_port.h"

namespace dtrain::integration {
namespace {

constexpr int kConfigError = 2;
constexpr int kFileError = 3;

// A small synthetic job (no data files): 64 samples, checkpoints in dir/ckpt.
nlohmann::json synthetic_job(const TempDir& dir) {
  nlohmann::json job = small_mlp_job();
  job["model"]["input_shape"] = {8};
  job["model"]["layers"] = {{{"type", "Dense"}, {"units", 4}}};
  job["data"]["train"] = {{"format", "synthetic"}, {"shape", {8}}, {"classes", 4}, {"count", 64}};
  job["data"].erase("test");
  job["train"]["epochs"] = 1;
  job["train"]["batch_size_per_replica"] = 16;
  job["checkpoint"] = {{"dir", dir.file("ckpt")}, {"every_epochs", 1}};
  return job;
}

}  // namespace

TEST_CASE("bench train with a batch larger than the data is exit 2 at once, not an endless read", "[integration]") {
  TempDir tmp;
  const std::string config = write_job(tmp, synthetic_job(tmp));
  RunSpec quick;
  quick.deadline_seconds = 30;
  const RunOutput r = run_dtrain({"bench", "train", "--config", config, "--steps", "1", "--warmup", "0", "--batch", "65"}, quick);
  check_error(r, kConfigError, {"train.batch_size_per_replica", "65", "64 training samples", "smaller batch"});
  // (64 fits: the same bench runs)
  const RunOutput fits = run_dtrain({"bench", "train", "--config", config, "--steps", "1", "--warmup", "0", "--batch", "64"}, quick);
  CHECK(fits.exit_code == 0);
}

TEST_CASE("durations past 1e7 s are exit 2, in the job file and for --grace-period", "[integration]") {
  TempDir tmp;
  const std::string config = write_job(tmp, synthetic_job(tmp));
  for (const char* key : {"rendezvous_timeout", "heartbeat_timeout", "stall_timeout"}) {
    INFO(key);
    check_error(run_dtrain({"validate", "--config", config, "--set", std::string("runtime.") + key + "=1e10"}),
                kConfigError, {std::string("runtime.") + key, "1e7"});
  }
  check_error(run_dtrain({"validate", "--config", config, "--set", "strategy.elastic.settle_seconds=1e8"}),
              kConfigError, {"settle_seconds"});
  for (const char* grace : {"1e10", "inf", "nan"}) {
    INFO(grace);
    check_error(run_dtrain({"launch", "--workers", "2", "--config", config, "--grace-period", grace}), kConfigError,
                {"--grace-period", grace});
  }
  // The largest one still works where it is checked.
  const RunOutput ok = run_dtrain({"validate", "--config", config, "--set", "runtime.rendezvous_timeout=1e7"});
  CHECK(ok.exit_code == 0);
}

TEST_CASE("a layer too large for the machine is measured, not filled: exit 2 at once, naming it", "[integration]") {
  TempDir tmp;
  const std::string config = write_job(tmp, synthetic_job(tmp));
  RunSpec quick;
  quick.deadline_seconds = 30;
  // 8 x 5e7 floats of kernel (1.6 GB) and as much gradient: over runtime.memory_limit.
  const RunOutput over = run_dtrain({"validate", "--config", config, "--set", "model.layers[0].units=50000000", "--set",
                                     "runtime.memory_limit=\"1GiB\""},
                                    quick);
  check_error(over, kConfigError, {"runtime.memory_limit", "dense"});
  CHECK(over.seconds < 10.0);  // (it used to zero-fill every layer it measured)
  // 8 x 4e11 floats (12.8 TB) cannot even be allocated to be measured.
  const RunOutput huge = run_dtrain({"validate", "--config", config, "--set", "model.layers[0].units=400000000000"}, quick);
  check_error(huge, kConfigError, {"model.layers[0] (dense)", "do not fit in this machine's memory"});
}

TEST_CASE("an output path that is a directory is exit 3 before the job runs", "[integration]") {
  TempDir tmp;
  const std::string config = write_job(tmp, synthetic_job(tmp));
  std::filesystem::create_directories(tmp.file("taken"));
  SECTION("run --summary") {
    const RunOutput r = run_dtrain({"run", "--config", config, "--summary", tmp.file("taken")});
    check_error(r, kFileError, {"--summary", "is a directory"});
    CHECK(r.out.find("Epoch") == std::string::npos);  // refused before training
  }
  SECTION("output.trace's trace.json, and output.tensorboard's directory taken by a file") {
    nlohmann::json job = synthetic_job(tmp);
    job["output"] = {{"dir", tmp.file("out")}, {"trace", true}};
    std::filesystem::create_directories(tmp.file("out/trace.json"));
    const RunOutput r = run_dtrain({"run", "--config", write_job(tmp, job, "trace.json")});
    check_error(r, kFileError, {"output.trace", "is a directory"});
    CHECK(r.out.find("Epoch") == std::string::npos);
    job["output"] = {{"dir", tmp.file("out2")}, {"tensorboard", true}};
    std::filesystem::create_directories(tmp.file("out2"));
    tmp.write("out2/tensorboard", "not a directory");
    const RunOutput t = run_dtrain({"run", "--config", write_job(tmp, job, "tensorboard.json")});
    check_error(t, kFileError, {"tensorboard"});
    CHECK(t.out.find("Epoch") == std::string::npos);
  }
  SECTION("launch --summary") {
    const RunOutput r = run_dtrain({"launch", "--workers", "2", "--config", config, "--summary", tmp.file("taken")});
    check_error(r, kFileError, {"launch --summary", "is a directory"});
    CHECK(r.out.find("Epoch") == std::string::npos);  // no task started
  }
}

TEST_CASE("ckpt export refuses a directory and writes through a symbolic link", "[integration]") {
  TempDir tmp;
  const std::string config = write_job(tmp, synthetic_job(tmp));
  REQUIRE(run_dtrain({"run", "--config", config}).exit_code == 0);
  std::filesystem::create_directories(tmp.file("taken"));
  check_error(run_dtrain({"ckpt", "export", tmp.file("ckpt"), "--to", tmp.file("taken")}), kFileError,
              {"ckpt export --to", "is a directory"});
  CHECK(std::filesystem::is_empty(tmp.file("taken")));

  std::filesystem::create_symlink("weights.safetensors", tmp.file("link.safetensors"));
  const RunOutput r = run_dtrain({"ckpt", "export", tmp.file("ckpt"), "--to", tmp.file("link.safetensors")});
  REQUIRE(r.exit_code == 0);
  CHECK(std::filesystem::is_symlink(tmp.file("link.safetensors")));  // still the link ...
  CHECK(std::filesystem::file_size(tmp.file("weights.safetensors")) > 100);  // ... to the file written
  // No temporary file is left beside it.
  for (const auto& entry : std::filesystem::directory_iterator(tmp.path()))
    CHECK(entry.path().filename().string().find(".tmp-") == std::string::npos);
}

TEST_CASE("a hostfile host that starts with '-' is exit 2, a directory as hostfile exit 3", "[integration]") {
  TempDir tmp;
  const std::string config = write_job(tmp, synthetic_job(tmp));
  const std::string hostfile = tmp.write("hosts", "node1 slots=1\n-oProxyCommand=true slots=1\n");
  check_error(run_dtrain({"launch", "--hostfile", hostfile, "--config", config}), kConfigError,
              {"hosts:2", "-oProxyCommand=true", "starts with '-'"});
  check_error(run_dtrain({"launch", "--hostfile", tmp.path(), "--config", config}), kFileError,
              {"--hostfile", "is a directory"});
}

TEST_CASE("SIGTERM during the rendezvous ends the task at once with exit 143", "[integration]") {
  TempDir tmp;
  const std::string config = write_job(tmp, synthetic_job(tmp));
  // A worker whose chief never comes: it retries the connection until its deadline (60 s).
  const std::string tf_config = "{\"cluster\":{\"chief\":[\"127.0.0.1:" + std::to_string(test::free_port()) +
                                "\"],\"worker\":[\"127.0.0.1:" + std::to_string(test::free_port()) +
                                "\"]},\"task\":{\"type\":\"worker\",\"index\":0}}";
  StartSpec spec;
  spec.env = {"TF_CONFIG=" + tf_config, "DTRAIN_JOB_SECRET=edge-inputs"};
  auto child = start_dtrain({"run", "--config", config, "--set", "runtime.rendezvous_timeout=60", "--set",
                             "strategy.type=\"multi_worker_mirrored\""},
                            spec);
  // It says it waits for the chief after 5 s.
  REQUIRE(child->wait_for_err("rendezvous: waiting for the chief", 20.0));
  child->send(SIGTERM);
  const RunOutput r = child->finish(10.0);
  INFO(describe(r));
  CHECK(r.exit_code == 143);
  CHECK(r.err.find("dtrain: error: [worker:0] stopped by SIGTERM before the first step") != std::string::npos);
  CHECK(std::chrono::duration<double>(child->end_time() - child->start_time()).count() < 30.0);
}

TEST_CASE("a data file that is a named pipe is exit 3 at once, not an open that waits for a writer", "[integration]") {
  TempDir tmp;
  const std::string fifo = tmp.file("images.fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  RunSpec quick;
  quick.deadline_seconds = 30;
  nlohmann::json job = small_mlp_job();
  job["data"]["train"]["images"] = fifo;
  check_error(run_dtrain({"validate", "--config", write_job(tmp, job)}, quick), kFileError,
              {"data.train.images", fifo, "named pipe (FIFO), not a regular file"});
}

TEST_CASE("more tasks than one launcher starts are exit 2: --workers, a hostfile's slots, bench allreduce",
          "[integration]") {
  TempDir tmp;
  const std::string config = write_job(tmp, synthetic_job(tmp));
  check_error(run_dtrain({"launch", "--workers", "300", "--config", config}), kConfigError,
              {"300 tasks", "at most 256", "Slurm"});
  // 200 + 100 slots: each host's count is fine, their sum is not (it started 300 ssh processes).
  const std::string hostfile = tmp.write("hosts", "node1 slots=200\nnode2 slots=100\n");
  check_error(run_dtrain({"launch", "--hostfile", hostfile, "--config", config}), kConfigError,
              {"--hostfile", "300 tasks", "2 hosts", "at most 256"});
  check_error(run_dtrain({"bench", "allreduce", "--workers", "1000"}), kConfigError,
              {"bench allreduce: --workers 1000", "at most 256"});
  check_error(run_dtrain({"bench", "rendezvous", "--tasks", "100000000"}), kConfigError, {"from 2 to 999999"});
}

TEST_CASE("numbers past what an option takes are exit 2 naming the option and its range", "[integration]") {
  TempDir tmp;
  const std::string config = write_job(tmp, synthetic_job(tmp));
  check_error(run_dtrain({"launch", "--workers", "2", "--config", config, "--max-restarts", "99999999999"}),
              kConfigError, {"--max-restarts", "99999999999", "more than it takes (2147483647)"});
  const RunOutput tokens = run_dtrain({"generate", "--config", config, "--max-tokens", "2000000"});
  check_error(tokens, kConfigError, {"--max-tokens", "from 0 to 1000000", "2000000"});
  CHECK_THAT(tokens.err, !Catch::Contains("Could not convert"));
  nlohmann::json job = synthetic_job(tmp);
  job["data"]["train"]["classes"] = 2147483648LL;
  check_error(run_dtrain({"validate", "--config", write_job(tmp, job)}), kConfigError,
              {"job.json: data.train.classes", "from 2 to 2147483647", "2147483648"});
}

TEST_CASE("launch --workers M:N with a job that cannot be elastic names --workers, and a file as checkpoint directory is exit 3",
          "[integration]") {
  TempDir tmp;
  const std::string config = write_job(tmp, synthetic_job(tmp));
  const RunOutput one = run_dtrain({"launch", "--workers", "1:1", "--config", config});
  check_error(one, kConfigError, {"--workers 1:1", "elastic", "start 2 or more"});
  CHECK_THAT(one.err, !Catch::Contains("--set strategy.elastic"));
  check_error(run_dtrain({"launch", "--workers", "2:3", "--ps", "1", "--config", config}), kConfigError,
              {"--workers 2:3", "only multi_worker_mirrored is", "'one_device'"});
  const std::string file = tmp.write("not-a-dir", "x");
  const std::string gpt = write_job(tmp, tiny_gpt_job(tmp), "gpt.json");
  for (const std::vector<std::string>& command :
       {std::vector<std::string>{"ckpt", "inspect", file},
        std::vector<std::string>{"generate", "--config", gpt, "--checkpoint", file}}) {
    INFO(command.front());
    check_error(run_dtrain(command), kFileError, {file, "is a file, not a checkpoint directory"});
  }
  // `dtrain cluster --task` with no cluster anywhere: the advice names a job file, not a placeholder.
  const RunOutput cluster = run_dtrain({"cluster", "--task", "worker:0"});
  check_error(cluster, kConfigError, {"no cluster", "a job file (--config FILE)"});
  CHECK_THAT(cluster.err, !Catch::Contains("<no job file>"));
}

TEST_CASE("a remote task whose ssh fails is reported as ssh's failure (exit 255) with ssh's own words",
          "[integration]") {
  TempDir tmp;
  const std::string config = write_job(tmp, synthetic_job(tmp));
  // Nothing listens on port 1: ssh ends with 255, "connect to host 127.0.0.1 port 1: Connection refused".
  const std::string hostfile = tmp.write("hosts", "127.0.0.1 slots=1\n");
  RunSpec quick;
  quick.deadline_seconds = 60;
  const RunOutput r =
      run_dtrain({"launch", "--hostfile", hostfile, "--ssh-port", "1", "--config", config, "--summary",
                  tmp.file("launch.json")},
                 quick);
  INFO(describe(r));
  CHECK(r.exit_code == 255);
  CHECK_THAT(r.err, Catch::Contains("ssh failed (exit 255: the host could not be reached or logged in to)"));
  CHECK_THAT(r.err, Catch::Contains("its last error: ") && Catch::Contains("Connection refused"));
  CHECK_THAT(r.err, !Catch::Contains("(none on its stderr)"));
}

}  // namespace dtrain::integration
