// `dtrain launch --hostfile` over real ssh: three "machines" made of network
// namespaces (tests/support/netns_hosts.h), two of them running Debian's sshd with
// a host key and a user key made by the test; the launcher runs on the third.
//  - A 2-host x 2-slot job trains to the same params_sha256 as `dtrain launch
//    --workers 4` on one machine; the job secret never appears on any process's
//    command line (it travels on ssh's standard input).
//  - SIGUSR1 to the launcher gets a hang report from the chief on another host
//    (through the job's store: the chief's process here is ssh) and the job goes on.
//  - Killing the launcher (SIGKILL, no chance to clean up) or stopping it with
//    SIGINT (Ctrl-C) leaves no task process behind on any host.
// Needs root, iproute2 and openssh-server (scripts/install-deps.sh); without them
// it prints DTRAIN-SKIPPED with the reason.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <thread>

#include "integration/job_files.h"
#include "integration/run_dtrain.h"
#include "integration/start_dtrain.h"
#include "support/netns_hosts.h"

namespace dtrain::integration {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

constexpr const char* kSecret = "hostfile-test-secret-3f9a";
constexpr const char* kSshd = "/usr/sbin/sshd";

// Runs a command; true when it exits 0.
bool sh(const std::string& command) { return std::system((command + " >/dev/null 2>&1").c_str()) == 0; }

// Two sshd hosts (1 and 2) and a launch host (0), with keys in `dir`.
class SshHosts {
 public:
  explicit SshHosts(const TempDir& dir) : dir_(dir), hosts_(3) {
    if (!hosts_.ok()) {
      reason_ = hosts_.reason();
      return;
    }
    if (::access(kSshd, X_OK) != 0) {
      reason_ = "no sshd (install openssh-server: scripts/install-deps.sh)";
      return;
    }
    fs::create_directories("/run/sshd");  // sshd's privilege separation directory
    if (!sh("ssh-keygen -q -t ed25519 -N '' -f " + dir.file("host_key")) ||
        !sh("ssh-keygen -q -t ed25519 -N '' -f " + dir.file("user_key")) ||
        !sh("cp " + dir.file("user_key.pub") + " " + dir.file("authorized_keys"))) {
      reason_ = "ssh-keygen failed";
      return;
    }
    for (int h = 1; h <= 2; ++h) {
      const std::string config = dir.file("sshd_config_" + std::to_string(h));
      std::ofstream(config) << "ListenAddress " << hosts_.ip(h) << "\nPort 22\nHostKey " << dir.file("host_key")
                            << "\nAuthorizedKeysFile " << dir.file("authorized_keys")
                            << "\nPermitRootLogin prohibit-password\nPasswordAuthentication no\n"
                               "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nPidFile none\n";
      const std::vector<std::string> argv = hosts_.command(h, {kSshd, "-D", "-e", "-f", config});
      sshd_.push_back(start_program(argv[0], tail(argv)));
    }
    // sshd is up once a login works.
    for (int h = 1; h <= 2; ++h) {
      bool up = false;
      for (int i = 0; i < 50 && !up; ++i) {
        up = hosts_.run(0, ssh_command(h) + " true") == 0;
        if (!up) std::this_thread::sleep_for(100ms);
      }
      if (!up) {
        reason_ = "sshd on host " + std::to_string(h) + " did not accept the test's key: " + sshd_[h - 1]->err();
        return;
      }
    }
    std::ofstream(dir.file("hostfile")) << "# two hosts, two slots each\n"
                                        << hosts_.ip(1) << " slots=2\n"
                                        << hosts_.ip(2) << " slots=2\n";
  }

  const std::string& reason() const { return reason_; }
  test::NetnsHosts& hosts() { return hosts_; }

  // `dtrain launch --hostfile` on the launch host, as argv.
  std::vector<std::string> launch(const std::string& job, const std::string& summary) const {
    return hosts_.command(0, {dtrain_binary(), "launch", "--hostfile", dir_.file("hostfile"), "--ssh-identity",
                              dir_.file("user_key"), "--ssh-option", "StrictHostKeyChecking=no", "--ssh-option",
                              "UserKnownHostsFile=/dev/null", "--ssh-option", "LogLevel=ERROR", "--config", job,
                              "--threads", "1", "--summary", summary, "--grace-period", "2"});
  }

 private:
  static std::vector<std::string> tail(const std::vector<std::string>& argv) {
    return std::vector<std::string>(argv.begin() + 1, argv.end());
  }
  std::string ssh_command(int host) const {
    return "ssh -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -i " +
           dir_.file("user_key") + " " + hosts_.ip(host);
  }

  const TempDir& dir_;
  test::NetnsHosts hosts_;
  std::vector<std::unique_ptr<Child>> sshd_;
  std::string reason_;
};

StartSpec launcher_env() {
  return {{std::string("DTRAIN_JOB_SECRET=") + kSecret, "TF_CONFIG", "DTRAIN_JOB_ID", "DTRAIN_LAUNCHED",
           "DTRAIN_INJECT", "DTRAIN_LISTEN_FD"},
          ""};
}

// The pids of processes whose command line holds `marker`, and whether any
// process's command line holds `secret`.
std::vector<int> processes_with(const std::string& marker, const std::string& secret, bool* secret_seen) {
  std::vector<int> pids;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    // A process that exits while it is read makes the read fail (ESRCH), which
    // libstdc++'s filebuf throws as std::ios_base::failure: it is gone, skip it.
    std::string cmdline;
    try {
      std::ifstream in(entry.path() / "cmdline", std::ios::binary);
      cmdline.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    } catch (const std::ios_base::failure&) {
      continue;
    }
    if (secret_seen && cmdline.find(secret) != std::string::npos) *secret_seen = true;
    // Task processes: `dtrain run --config <marker>` (not the launcher, not ssh).
    if (cmdline.find(marker) != std::string::npos && cmdline.find(std::string("run") + '\0' + "--config") != std::string::npos &&
        cmdline.find("sh -c") == std::string::npos && std::stoi(name) != ::getpid())
      pids.push_back(std::stoi(name));
  }
  return pids;
}

json small_job(int64_t epochs) {
  json job = small_mlp_job(2000, 200);
  // Gloo's ring on both sides: `auto` picks the hierarchical all-reduce for 2 machines
  // and shared memory for 1, whose sums round differently.
  job["strategy"] = {{"type", "multi_worker_mirrored"}, {"communication", "ring"}};
  job["train"]["batch_size_per_replica"] = 16;
  job["train"]["epochs"] = epochs;
  return job;
}

}  // namespace

TEST_CASE("launch --hostfile runs 2 hosts x 2 slots over ssh, to launch --workers 4's parameters", "[netns][ssh]") {
  TempDir dir;
  SshHosts ssh(dir);
  if (!ssh.reason().empty()) {
    std::cout << "DTRAIN-SKIPPED: " << ssh.reason() << std::endl;
    return;
  }
  const std::string job = write_job(dir, small_job(1));
  const std::vector<std::string> argv = ssh.launch(job, dir.file("remote.json"));
  auto run = start_program(argv[0], std::vector<std::string>(argv.begin() + 1, argv.end()), launcher_env());
  // While it runs: the secret is on no command line (the ssh processes', the tasks'),
  // and the tasks run in the two sshd hosts' network namespaces.
  bool secret_seen = false;
  std::set<std::string> task_namespaces;
  for (int i = 0; i < 30 && !run->ended(); ++i) {
    for (int pid : processes_with(job, kSecret, &secret_seen)) {
      std::error_code ec;
      const fs::path ns = fs::read_symlink("/proc/" + std::to_string(pid) + "/ns/net", ec);
      if (!ec) task_namespaces.insert(ns.string());
    }
    std::this_thread::sleep_for(100ms);
  }
  const RunOutput r = run->finish(120.0);
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  CHECK_FALSE(secret_seen);
  const json remote = read_json_file(dir.file("remote.json"));
  REQUIRE(remote["tasks"].size() == 4);
  const RunOutput local =
      run_dtrain({"launch", "--workers", "4", "--threads", "1", "--config", job, "--summary", dir.file("local.json")},
                 {120.0, ""});
  REQUIRE(local.exit_code == 0);
  const json reference = read_json_file(dir.file("local.json"));
  const std::string hash = reference["tasks"]["worker:0"]["params_sha256"];
  for (const auto& [task, summary] : remote["tasks"].items()) {
    INFO(task);
    CHECK(summary["world_size"] == 4);
    CHECK(summary["params_sha256"] == hash);
  }
  CHECK(task_namespaces.size() == 2);
}

TEST_CASE("a killed or interrupted hostfile launcher leaves no task behind on any host", "[netns][ssh]") {
  TempDir dir;
  SshHosts ssh(dir);
  if (!ssh.reason().empty()) {
    std::cout << "DTRAIN-SKIPPED: " << ssh.reason() << std::endl;
    return;
  }
  const std::string job = write_job(dir, small_job(1000));  // far longer than the test
  for (const int signal : {SIGKILL, SIGINT}) {
    INFO("the launcher gets signal " << signal);
    const std::vector<std::string> argv = ssh.launch(job, dir.file("s.json"));
    auto run = start_program(argv[0], std::vector<std::string>(argv.begin() + 1, argv.end()), launcher_env());
    REQUIRE(run->wait_for_err("tasks joined and agree", 60.0));
    REQUIRE(processes_with(job, kSecret, nullptr).size() == 4);
    if (signal == SIGKILL) {
      // First SIGUSR1: the chief is on another host (its process here is ssh),
      // so the launcher asks through the job's store; the report comes and the job goes on.
      run->send(SIGUSR1);
      CHECK(run->wait_for_err("hang report (asked for with SIGUSR1 (to dtrain launch))", 30.0));
      CHECK(processes_with(job, kSecret, nullptr).size() == 4);
      CHECK_FALSE(run->ended());
    }
    const auto sent = std::chrono::steady_clock::now();
    run->send(signal);
    run->finish(30.0, signal == SIGKILL ? SIGKILL : 0);
    // The remote watchdogs stop their tasks: SIGTERM at once, SIGKILL after --grace-period (2 s).
    std::vector<int> left = processes_with(job, kSecret, nullptr);
    while (!left.empty() && std::chrono::steady_clock::now() - sent < 15s) {
      std::this_thread::sleep_for(200ms);
      left = processes_with(job, kSecret, nullptr);
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count();
    WARN("after signal " << signal << " to the launcher, every task was gone in " << seconds << " s");
    CHECK(left.empty());
  }
}

}  // namespace dtrain::integration
