// The cluster runtime with real processes: several `dtrain run` tasks of one job on
// free 127.0.0.1 ports, each given its TF_CONFIG and DTRAIN_JOB_SECRET the way a user
// or a cluster manager would (no `dtrain launch` in between). Covers the rendezvous
// (late chief, a chief + worker + ps cluster), the agreement check, the job secret
// (wrong, missing, from a file), a task that never comes, kill -9 of a worker and of
// the chief (the survivor exits 4 within the bound, naming the lost task), a hung task
// (SIGSTOP: found by the heartbeat timeout), a parameter_server worker started
// again by hand rejoining the running job, an elastic job's worker killed and
// started again (another config refused, naming the key; the job's own config
// rejoins at a step's end), an elastic job that starts with 2 of its 4 workers
// after its settle time (a third joins later, the fourth never comes), the
// TF_CONFIG checks of `dtrain
// validate`, junk sent to the chief's port, PyTorch's env:// convention
// (ranks register their addresses; a rank that never comes), and impostors:
// tasks with another secret and strangers who claim a task (the chief, a
// worker, a ps task, an elastic job's absent worker) and fail the proof,
// during the rendezvous and training, and a flood of them: the job ends as
// an unattacked run does. Every child runs under a deadline
// (start_dtrain.h) and is killed when its test ends.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "integration/job_files.h"
#include "integration/start_dtrain.h"
#include "rendezvous/wire.h"

namespace dtrain::integration {
namespace {

using Catch::Matchers::Contains;
using namespace std::chrono_literals;

constexpr const char* kSecret = "cluster-runtime-test-secret";
constexpr const char* kJoinedLine = "tasks joined and agree";
constexpr double kDeadline = 30.0;  // for any child that should end by itself soon

// An owned socket descriptor.
class Socket {
 public:
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

sockaddr_in loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

// A TCP socket bound to 127.0.0.1:`port` (0: any free port).
std::unique_ptr<Socket> bound_socket(int port = 0) {
  auto s = std::make_unique<Socket>(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(s->fd() >= 0);
  const sockaddr_in a = loopback(port);
  if (::bind(s->fd(), reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0)
    FAIL("bind 127.0.0.1:" << port << ": " << std::strerror(errno));
  return s;
}

int port_of(const Socket& s) {
  sockaddr_in a{};
  socklen_t size = sizeof a;
  REQUIRE(::getsockname(s.fd(), reinterpret_cast<sockaddr*>(&a), &size) == 0);
  return ntohs(a.sin_port);
}

// `n` different free ports: all bound at once (so they differ), then released. A
// port could be taken by someone else before dtrain binds it; fine for tests.
std::vector<int> free_ports(int n) {
  std::vector<std::unique_ptr<Socket>> held;
  std::vector<int> ports;
  for (int i = 0; i < n; ++i) {
    held.push_back(bound_socket());
    ports.push_back(port_of(*held.back()));
  }
  return ports;
}

// A client connection to 127.0.0.1:`port`, or nullptr when nothing accepts there.
std::unique_ptr<Socket> try_connect(int port) {
  auto s = std::make_unique<Socket>(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(s->fd() >= 0);
  const sockaddr_in a = loopback(port);
  if (::connect(s->fd(), reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) return nullptr;
  return s;
}

// Whether the peer closes `s` within `seconds` (reads and discards what it sends).
bool peer_closes(const Socket& s, double seconds) {
  const auto deadline = Child::Clock::now() + std::chrono::milliseconds(static_cast<int>(seconds * 1000));
  while (Child::Clock::now() < deadline) {
    pollfd p{s.fd(), POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    char buffer[4096];
    const ssize_t n = ::recv(s.fd(), buffer, sizeof buffer, 0);
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) return true;
  }
  return false;
}

void send_all(const Socket& s, const std::string& bytes) {
  REQUIRE(::send(s.fd(), bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size()));
}

// A cluster of tasks on free localhost ports, e.g. {{"worker", 2}} or
// {{"chief", 1}, {"worker", 1}, {"ps", 1}}.
class LocalCluster {
 public:
  explicit LocalCluster(const std::map<std::string, int>& counts) {
    int total = 0;
    for (const auto& [type, n] : counts) total += n;
    const std::vector<int> ports = free_ports(total);
    size_t next = 0;
    spec_ = nlohmann::json::object();
    for (const auto& [type, n] : counts)
      for (int i = 0; i < n; ++i) spec_[type].push_back("127.0.0.1:" + std::to_string(ports[next++]));
  }

  std::string address(const std::string& type, int index) const { return spec_.at(type).at(index); }
  int port(const std::string& type, int index) const {
    const std::string a = address(type, index);
    return std::stoi(a.substr(a.rfind(':') + 1));
  }
  // TF_CONFIG for one task; `index` is any JSON (a string index is a test case).
  std::string tf_config(const std::string& type, const nlohmann::json& index) const {
    return nlohmann::json{{"cluster", spec_}, {"task", {{"type", type}, {"index", index}}}}.dump();
  }

 private:
  nlohmann::json spec_;
};

// `dtrain run` (or another command) on the tiny synthetic job with short deadlines,
// multi_worker_mirrored unless `sets` say otherwise.
std::vector<std::string> job_args(const std::string& command, const std::vector<std::string>& sets) {
  std::vector<std::string> args = {command, "--config", shipped_config_path("tiny_synthetic.json"),
                                   "--set", "runtime.rendezvous_timeout=5",
                                   "--set", "strategy.type=multi_worker_mirrored"};
  for (const std::string& s : sets) {
    args.push_back("--set");
    args.push_back(s);
  }
  return args;
}

// The environment of a task: its TF_CONFIG and the job secret, none of the variables
// `dtrain launch` sets (in case the tests themselves run under one), then `extra`.
StartSpec task_env(const std::string& tf_config, const std::vector<std::string>& extra = {}) {
  StartSpec spec;
  spec.env = {"TF_CONFIG=" + tf_config, std::string("DTRAIN_JOB_SECRET=") + kSecret,
              "DTRAIN_JOB_ID", "DTRAIN_LAUNCHED", "DTRAIN_INJECT", "DTRAIN_LISTEN_FD"};
  spec.env.insert(spec.env.end(), extra.begin(), extra.end());
  return spec;
}

// Starts `dtrain run` as task type:index of `cluster`.
std::unique_ptr<Child> start_task(const LocalCluster& cluster, const std::string& type, int index,
                                  const std::vector<std::string>& sets = {},
                                  const std::vector<std::string>& extra_env = {}) {
  return start_dtrain(job_args("run", sets), task_env(cluster.tf_config(type, index), extra_env));
}

// Once the chief is training (its 100th epoch line), kills `victim` (SIGKILL)
// and waits until the chief's stderr holds `seen` (the loss noticed).
void kill_once_training(Child& chief, Child& victim, const std::string& seen) {
  if (!chief.wait_for_out("Epoch 100/", 90.0)) FAIL("the job did not start training\n" << chief.err());
  victim.send(SIGKILL);
  victim.finish(5.0, SIGKILL);
  if (!chief.wait_for_err(seen, 45.0)) FAIL("the chief did not see the task go (" << seen << ")\n" << chief.err());
}

// Checks a task's failure: its exit code, an error line (in a cluster it has the
// task's prefix after the tag, "dtrain: error: [worker:1] ...") and the words it must hold.
void check_failed(const RunOutput& r, int exit_code, const std::vector<std::string>& needles) {
  INFO(describe(r));
  CHECK(r.exit_code == exit_code);
  CHECK_THAT(r.err, Contains("dtrain: error: "));
  for (const std::string& needle : needles) CHECK_THAT(r.err, Contains(needle));
}

void check_succeeded(const RunOutput& r, int tasks) {
  INFO(describe(r));
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.err, Contains("rendezvous: all " + std::to_string(tasks) + " " + kJoinedLine));
}

// The params_sha256 of a "Done: ..." line, or "" when there is none.
std::string params_sha256(const std::string& out) {
  const std::string key = "params_sha256 ";
  const size_t at = out.find(key);
  return at == std::string::npos ? "" : out.substr(at + key.size(), 64);
}

double seconds_between(Child::Clock::time_point a, Child::Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Waits until each child has printed the joined line; FAILs (with its output) if one
// has not within `seconds`.
void wait_until_joined(const std::vector<Child*>& children, double seconds) {
  for (Child* c : children)
    if (!c->wait_for_err(kJoinedLine, seconds))
      FAIL("no '" << kJoinedLine << "' from " << c->command() << "\n--- stderr ---\n" << c->err());
}

// Waits until each child has joined and trained a few epochs (so its heartbeats have
// carried a step); FAILs if one has not within `seconds`.
void wait_until_training(const std::vector<Child*>& children, double seconds) {
  wait_until_joined(children, seconds);
  for (Child* c : children)
    if (!c->wait_for_out("Epoch 3/", seconds))
      FAIL("no 'Epoch 3/' from " << c->command() << "\n--- stdout ---\n" << c->out() << "\n--- stderr ---\n" << c->err());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
}

}  // namespace

TEST_CASE("cluster: two workers join although the chief starts last, train the same model and share the cores",
          "[cluster]") {
  const LocalCluster cluster({{"worker", 2}});
  const std::vector<std::string> sets = {"runtime.threads=0"};  // no thread count given: the tasks choose
  auto worker1 = start_task(cluster, "worker", 1, sets);
  std::this_thread::sleep_for(1500ms);  // worker:1 keeps retrying the chief's port meanwhile
  auto chief = start_task(cluster, "worker", 0, sets);
  const RunOutput r0 = chief->finish(kDeadline);
  const RunOutput r1 = worker1->finish(kDeadline);
  check_succeeded(r0, 2);
  check_succeeded(r1, 2);
  INFO(describe(r0) << "\n" << describe(r1));
  REQUIRE(params_sha256(r0.out).size() == 64);
  CHECK(params_sha256(r0.out) == params_sha256(r1.out));
  // Started by hand with no thread setting, the two tasks split this machine's cores between them.
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  REQUIRE(sched_getaffinity(0, sizeof cpus, &cpus) == 0);
  const int cores = CPU_COUNT(&cpus);
  const std::string share = "threads: " + std::to_string(std::max(1, cores / 2)) + " per task (" +
                            std::to_string(cores) + " cores shared by the 2 tasks of this job on this host";
  CHECK_THAT(r0.err, Contains(share));
  CHECK_THAT(r1.err, Contains(share));
}

TEST_CASE("cluster: ps tasks under a synchronous strategy are a config error, not idle tasks", "[cluster]") {
  const LocalCluster cluster({{"chief", 1}, {"worker", 1}, {"ps", 1}});
  auto ps = start_task(cluster, "ps", 0);
  const RunOutput rp = ps->finish(kDeadline);
  check_failed(rp, 2, {"ps task(s), but this strategy keeps no variables on ps tasks", "parameter_server"});
}

TEST_CASE("cluster: tasks whose job configs differ both stop with exit code 2", "[cluster]") {
  const LocalCluster cluster({{"worker", 2}});
  auto chief = start_task(cluster, "worker", 0);
  auto worker1 = start_task(cluster, "worker", 1, {"train.epochs=2"});
  const RunOutput r0 = chief->finish(10.0);
  const RunOutput r1 = worker1->finish(10.0);
  // Each names the key that differs, with both values, not only the hashes.
  check_failed(r0, 2, {"the tasks of this job disagree", "config_sha256", "worker:1",
                       "the keys that differ: train.epochs is 2 on worker:1 and "});
  check_failed(r1, 2, {"the tasks of this job disagree", "config_sha256", "worker:0",
                       " on worker:0 and 2 on worker:1"});
}

TEST_CASE("cluster: a task with another secret is refused at once, the chief warns, waits for the real one, and the "
          "job ends as an unattacked one",
          "[cluster][security]") {
  // The impostor claims worker:1 before the real worker:1 starts: the chief
  // learns nothing from it that it could trust, so it keeps waiting.
  const LocalCluster cluster({{"worker", 2}});
  const std::vector<std::string> sets = {"runtime.rendezvous_timeout=120"};
  auto chief = start_task(cluster, "worker", 0, sets);
  auto other = start_task(cluster, "worker", 1, sets, {"DTRAIN_JOB_SECRET=not-the-job-secret"});
  check_failed(other->finish(15.0), 2, {"secret"});  // the user who mistyped it learns it at once
  const std::string warning = "a task claiming worker:1 from 127.0.0.1 failed the proof: another DTRAIN_JOB_SECRET?";
  if (!chief->wait_for_err(warning, 15.0)) FAIL("no warning from the chief\n" << chief->err());
  std::this_thread::sleep_for(500ms);
  CHECK_FALSE(chief->ended());
  auto real = start_task(cluster, "worker", 1, sets);
  const RunOutput r0 = chief->finish(kDeadline);
  const RunOutput r1 = real->finish(kDeadline);
  check_succeeded(r0, 2);
  check_succeeded(r1, 2);

  const LocalCluster quiet({{"worker", 2}});
  auto q0 = start_task(quiet, "worker", 0, sets);
  auto q1 = start_task(quiet, "worker", 1, sets);
  const RunOutput u0 = q0->finish(kDeadline);
  check_succeeded(u0, 2);
  check_succeeded(q1->finish(kDeadline), 2);
  WARN("attacked: " << params_sha256(r0.out) << "; unattacked: " << params_sha256(u0.out));
  REQUIRE(params_sha256(r0.out).size() == 64);
  CHECK(params_sha256(r0.out) == params_sha256(u0.out));
  CHECK(params_sha256(r1.out) == params_sha256(u0.out));
}

TEST_CASE("cluster: at its rendezvous deadline the chief names the tasks that never joined and the failed proofs "
          "claiming them",
          "[cluster][security]") {
  const LocalCluster cluster({{"worker", 2}});
  auto chief = start_task(cluster, "worker", 0, {"runtime.rendezvous_timeout=4"});
  auto other = start_task(cluster, "worker", 1, {}, {"DTRAIN_JOB_SECRET=not-the-job-secret"});
  check_failed(other->finish(15.0), 2, {"secret"});
  const RunOutput r0 = chief->finish(20.0);
  check_failed(r0, 5, {"these tasks have not joined: worker:1",
                       "failed proofs of the job secret from connections claiming them: worker:1 (",
                       "from 127.0.0.1) (another DTRAIN_JOB_SECRET?)"});
}

TEST_CASE("cluster: without a job secret a task stops at once and says how to set one", "[cluster]") {
  const LocalCluster cluster({{"worker", 2}});
  auto task = start_task(cluster, "worker", 0, {}, {"DTRAIN_JOB_SECRET"});
  const RunOutput r = task->finish(10.0);
  check_failed(r, 2, {"DTRAIN_JOB_SECRET", "runtime.secret_file"});
  // At once: before any rendezvous (no wall-time bound: start-up on a loaded
  // machine varies; the finish deadline above catches a task that waits for peers).
  CHECK_THAT(r.err, !Contains("rendezvous"));
}

TEST_CASE("cluster: runtime.secret_file gives the tasks their secret", "[cluster]") {
  const TempDir tmp;
  const std::string secret_file = tmp.write("job.secret", "secret-from-a-file\n");
  const std::string empty_file = tmp.write("empty.secret", "");
  const LocalCluster cluster({{"worker", 2}});
  const std::vector<std::string> sets = {"runtime.secret_file=" + secret_file};
  auto chief = start_task(cluster, "worker", 0, sets, {"DTRAIN_JOB_SECRET"});
  auto worker1 = start_task(cluster, "worker", 1, sets, {"DTRAIN_JOB_SECRET"});
  check_succeeded(chief->finish(kDeadline), 2);
  check_succeeded(worker1->finish(kDeadline), 2);

  auto empty = start_task(cluster, "worker", 0, {"runtime.secret_file=" + empty_file}, {"DTRAIN_JOB_SECRET"});
  check_failed(empty->finish(10.0), 2, {"runtime.secret_file", "empty"});
}

TEST_CASE("cluster: a task that never starts makes the chief time out with exit code 5", "[cluster]") {
  const LocalCluster cluster({{"worker", 2}});
  auto chief = start_task(cluster, "worker", 0, {"runtime.rendezvous_timeout=3"});
  const RunOutput r = chief->finish(15.0);
  check_failed(r, 5, {"worker:1 at " + cluster.address("worker", 1), "runtime.rendezvous_timeout"});
  WARN("the chief gave up on the missing worker:1 after " << r.seconds << " s (rendezvous_timeout 3 s)");
  CHECK(r.seconds >= 3.0);
  // The timeout ends the wait, not the 5 s report that would come after it (it
  // says "rendezvous: waiting for"): asserted on what was printed, not on wall time.
  CHECK_THAT(r.err, !Contains("rendezvous: waiting for"));
}

TEST_CASE("cluster: kill -9 of a worker makes the chief exit 4 in time, naming it", "[cluster][kill]") {
  const LocalCluster cluster({{"worker", 2}});
  const std::vector<std::string> sets = {"train.epochs=100000"};
  auto chief = start_task(cluster, "worker", 0, sets);
  auto worker1 = start_task(cluster, "worker", 1, sets);
  wait_until_training({chief.get(), worker1.get()}, 15.0);
  const auto killed_at = Child::Clock::now();
  worker1->send(SIGKILL);
  worker1->finish(5.0, SIGKILL);
  const RunOutput r0 = chief->finish(20.0);
  const double detection = seconds_between(killed_at, chief->end_time());
  WARN("worker:1 killed; the chief exited " << detection << " s later with code " << r0.exit_code);
  check_failed(r0, 4, {"worker:1", cluster.address("worker", 1), "was lost after step"});
  CHECK(detection < 15.0);
}

TEST_CASE("cluster: kill -9 of the chief makes the worker exit 4 in time, naming it", "[cluster][kill]") {
  const LocalCluster cluster({{"worker", 2}});
  const std::vector<std::string> sets = {"train.epochs=100000"};
  auto chief = start_task(cluster, "worker", 0, sets);
  auto worker1 = start_task(cluster, "worker", 1, sets);
  wait_until_training({chief.get(), worker1.get()}, 15.0);
  const auto killed_at = Child::Clock::now();
  chief->send(SIGKILL);
  chief->finish(5.0, SIGKILL);
  const RunOutput r1 = worker1->finish(20.0);
  const double detection = seconds_between(killed_at, worker1->end_time());
  WARN("the chief killed; worker:1 exited " << detection << " s later with code " << r1.exit_code);
  check_failed(r1, 4, {"the chief worker:0 at " + cluster.address("worker", 0), "was lost", "step"});
  CHECK(detection < 15.0);
}

TEST_CASE("cluster: when the all-reduce sees a peer die first, every survivor still names the lost task",
          "[cluster][kill]") {
  // multi_worker_mirrored with 3 workers: a survivor's Gloo all-reduce fails at once
  // ("connection closed by peer") when a task dies; its message must still say
  // which task was lost, where, and after which step, as the heartbeat knows it.
  for (const int victim : {1, 0}) {  // a worker, then the chief (worker:0)
    DYNAMIC_SECTION("worker:" << victim << " killed") {
      const LocalCluster cluster({{"worker", 3}});
      const std::vector<std::string> sets = {"train.epochs=100000", "strategy.type=multi_worker_mirrored"};
      std::vector<std::unique_ptr<Child>> tasks;
      for (int i = 0; i < 3; ++i) tasks.push_back(start_task(cluster, "worker", i, sets));
      wait_until_training({tasks[0].get(), tasks[1].get(), tasks[2].get()}, 20.0);
      tasks[static_cast<size_t>(victim)]->send(SIGKILL);
      tasks[static_cast<size_t>(victim)]->finish(5.0, SIGKILL);
      const std::string lost = "worker:" + std::to_string(victim);
      for (int i = 0; i < 3; ++i) {
        if (i == victim) continue;
        const RunOutput r = tasks[static_cast<size_t>(i)]->finish(20.0);
        INFO("survivor worker:" << i);
        check_failed(r, 4, {lost, cluster.address("worker", victim), "was lost", "step"});
      }
    }
  }
}

TEST_CASE("cluster: a parameter_server worker killed and started again by hand rejoins the running job",
          "[cluster][kill]") {
  const LocalCluster cluster({{"chief", 1}, {"worker", 2}, {"ps", 1}});
  // About 5 s of work units (one epoch of 16 steps each) for two workers.
  const std::vector<std::string> sets = {"strategy.type=parameter_server", "train.epochs=3000"};
  auto ps = start_task(cluster, "ps", 0, sets);
  auto chief = start_task(cluster, "chief", 0, sets);
  auto worker0 = start_task(cluster, "worker", 0, sets);
  auto worker1 = start_task(cluster, "worker", 1, sets);
  kill_once_training(*chief, *worker1, "worker:1");
  auto again = start_task(cluster, "worker", 1, sets);  // the same task, as a user or a cluster manager would
  const RunOutput rc = chief->finish(60.0);
  const RunOutput r1 = again->finish(30.0);
  const RunOutput r0 = worker0->finish(30.0);
  const RunOutput rp = ps->finish(30.0);
  INFO(describe(rc) << "\n" << describe(r1));
  CHECK(rc.exit_code == 0);
  CHECK(r0.exit_code == 0);
  CHECK(rp.exit_code == 0);
  CHECK(r1.exit_code == 0);
  CHECK_THAT(rc.err, Contains("the job goes on"));
  CHECK_THAT(rc.out, Contains("3000 of 3000 work units completed") && Contains("1 worker(s) lost"));
  // The second worker:1 trained work units of the running job.
  const size_t at = r1.out.find("this worker trained ");
  REQUIRE(at != std::string::npos);
  CHECK(std::stoll(r1.out.substr(at + 20)) > 0);
}

TEST_CASE("cluster: an elastic job's worker killed and started again rejoins, and with another config is refused",
          "[cluster][kill][elastic]") {
  const LocalCluster cluster({{"worker", 3}});
  // 2 steps an epoch (3 tasks x 32 x 2 accumulation steps of 512 samples): a few seconds of them.
  const std::vector<std::string> sets = {"strategy.elastic.min_workers=2", "train.gradient_accumulation_steps=2",
                                         "train.epochs=3000"};
  auto chief = start_task(cluster, "worker", 0, sets);
  auto worker1 = start_task(cluster, "worker", 1, sets);
  auto worker2 = start_task(cluster, "worker", 2, sets);
  kill_once_training(*chief, *worker2, "worker:2 left the job");

  // Another config: refused when it meets the others, naming the key; the job goes on.
  std::vector<std::string> other_sets = sets;
  other_sets.push_back("optimizer.learning_rate=0.5");
  const RunOutput other = start_task(cluster, "worker", 2, other_sets)->finish(kDeadline);
  check_failed(other, 2, {"the tasks of this job disagree", "optimizer.learning_rate is 0.1 on worker:0 and 0.5 on worker:2"});
  CHECK(other.seconds < 4.0);  // at once: it does not wait for the others to compare
  CHECK_FALSE(chief->ended());

  // The job's own config: it joins at the next step's end and trains to the end with the others.
  auto again = start_task(cluster, "worker", 2, sets);
  if (!chief->wait_for_err("worker:2 joined the job", 60.0))
    FAIL("worker:2 did not rejoin\n" << chief->err() << "\n--- worker:2 ---\n" << again->err());
  const RunOutput r0 = chief->finish(60.0);
  const RunOutput r1 = worker1->finish(kDeadline);
  const RunOutput r2 = again->finish(kDeadline);
  INFO(describe(r0) << "\n" << describe(r2));
  CHECK(r0.exit_code == 0);
  CHECK(r1.exit_code == 0);
  CHECK(r2.exit_code == 0);
  CHECK_THAT(r2.err, Contains("joins the running job"));
  CHECK_THAT(r0.out, Contains("Done: 6000 steps"));
  REQUIRE(params_sha256(r0.out).size() == 64);
  CHECK(params_sha256(r2.out) == params_sha256(r0.out));
  CHECK(params_sha256(r1.out) == params_sha256(r0.out));
}

TEST_CASE("cluster: an elastic job starts without the workers that have not come after its settle time, and they "
          "join when they come",
          "[cluster][elastic]") {
  const LocalCluster cluster({{"worker", 4}});
  // 1 step an epoch (4 tasks x 32 x 3 accumulation steps of 512 samples; 6 at 2 tasks, 4 at 3).
  const std::vector<std::string> sets = {"strategy.elastic.min_workers=2", "strategy.elastic.settle_seconds=1",
                                         "train.gradient_accumulation_steps=3", "train.epochs=1500"};
  auto chief = start_task(cluster, "worker", 0, sets);
  auto worker1 = start_task(cluster, "worker", 1, sets);
  // worker:2 comes later, worker:3 never.
  if (!chief->wait_for_out("Epoch 100/", 90.0)) FAIL("the job did not start with 2 of 4 tasks\n" << chief->err());
  CHECK_THAT(chief->err(), Contains("2 of 4 tasks joined and agree") && Contains("the job starts without worker:2") &&
                               Contains("worker:3"));
  auto worker2 = start_task(cluster, "worker", 2, sets);
  if (!chief->wait_for_err("worker:2 joined the job", 60.0))
    FAIL("worker:2 did not join\n" << chief->err() << "\n--- worker:2 ---\n" << worker2->err());
  const RunOutput r0 = chief->finish(60.0);
  const RunOutput r1 = worker1->finish(kDeadline);
  const RunOutput r2 = worker2->finish(kDeadline);
  INFO(describe(r0) << "\n" << describe(r2));
  CHECK(r0.exit_code == 0);  // the final barrier does not wait for worker:3
  CHECK(r1.exit_code == 0);
  CHECK(r2.exit_code == 0);
  CHECK_THAT(r2.err, Contains("joins the running job"));
  CHECK_THAT(r0.err, Contains("3 training task(s) go on"));
  CHECK_THAT(r0.out, Contains("Done: 1500 steps"));
  REQUIRE(params_sha256(r0.out).size() == 64);
  CHECK(params_sha256(r1.out) == params_sha256(r0.out));
  CHECK(params_sha256(r2.out) == params_sha256(r0.out));
}

TEST_CASE("cluster: a hung worker (SIGSTOP) is declared lost after runtime.heartbeat_timeout", "[cluster][kill]") {
  const LocalCluster cluster({{"worker", 2}});
  const std::vector<std::string> sets = {"train.epochs=100000", "runtime.heartbeat_timeout=2"};
  auto chief = start_task(cluster, "worker", 0, sets);
  auto worker1 = start_task(cluster, "worker", 1, sets);
  wait_until_training({chief.get(), worker1.get()}, 15.0);
  const auto stopped_at = Child::Clock::now();
  worker1->send(SIGSTOP);  // its connections stay open: only the missing heartbeats tell
  const RunOutput r0 = chief->finish(20.0);
  const double detection = seconds_between(stopped_at, chief->end_time());
  WARN("worker:1 stopped; the chief exited " << detection << " s later with code " << r0.exit_code);
  check_failed(r0, 4, {"worker:1", cluster.address("worker", 1), "no heartbeat for 2 s"});
  CHECK(detection >= 1.5);  // not before the heartbeat timeout (give or take one sweep)
  CHECK(detection < 6.0);
  worker1->send(SIGKILL);
  worker1->finish(5.0, SIGKILL);
}

TEST_CASE("cluster: a worker hung inside a Gloo all-reduce is still reported within the bound", "[cluster][kill]") {
  // multi_worker_mirrored: the survivor's main thread is blocked in an all-reduce
  // (whose own deadline is 30 s), so only the heartbeat watchdog can end it in time.
  const LocalCluster cluster({{"worker", 2}});
  const std::vector<std::string> sets = {"train.epochs=100000", "strategy.type=multi_worker_mirrored",
                                         "runtime.heartbeat_timeout=2"};
  auto chief = start_task(cluster, "worker", 0, sets);
  auto worker1 = start_task(cluster, "worker", 1, sets);
  wait_until_training({chief.get(), worker1.get()}, 15.0);
  const auto stopped_at = Child::Clock::now();
  worker1->send(SIGSTOP);
  const RunOutput r0 = chief->finish(25.0);
  const double detection = seconds_between(stopped_at, chief->end_time());
  WARN("worker:1 stopped inside training; the chief exited " << detection << " s later with code " << r0.exit_code);
  check_failed(r0, 4, {"worker:1", cluster.address("worker", 1), "no heartbeat for 2 s"});
  CHECK(detection < 8.0);  // heartbeat timeout + watchdog grace, far below Gloo's 30 s
  worker1->send(SIGKILL);
  worker1->finish(5.0, SIGKILL);
}

TEST_CASE("cluster: dtrain validate checks TF_CONFIG and this task's port", "[cluster][validate]") {
  const LocalCluster cluster({{"worker", 2}});
  const std::string a0 = cluster.address("worker", 0), a1 = cluster.address("worker", 1);
  auto validate = [](const std::string& tf_config, const std::vector<std::string>& extra_args = {}) {
    std::vector<std::string> args = job_args("validate", {});
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    return start_dtrain(args, task_env(tf_config))->finish(kDeadline);
  };
  auto tf_config = [](const nlohmann::json& cluster_json, const nlohmann::json& task) {
    return nlohmann::json{{"cluster", cluster_json}, {"task", task}}.dump();
  };

  SECTION("a good TF_CONFIG") {
    const RunOutput r = validate(cluster.tf_config("worker", 1));
    INFO(describe(r));
    CHECK(r.exit_code == 0);
    CHECK_THAT(r.out, Contains("worker:1 at " + a1 + ", listening there works"));
  }
  SECTION("a string index") {
    check_failed(validate(cluster.tf_config("worker", "1")), 2, {"TF_CONFIG.task.index", "without quotes"});
  }
  SECTION("TF1's worker_hosts") {
    const auto text = tf_config({{"worker_hosts", {a0, a1}}}, {{"type", "worker"}, {"index", 0}});
    check_failed(validate(text), 2, {"TF_CONFIG.cluster.worker_hosts", "did you mean 'worker'"});
  }
  SECTION("one address for two tasks") {
    const auto text = tf_config({{"worker", {a0, a0}}}, {{"type", "worker"}, {"index", 0}});
    check_failed(validate(text), 2, {"TF_CONFIG.cluster.worker[1]", a0});
  }
  SECTION("an index outside the list") {
    check_failed(validate(cluster.tf_config("worker", 2)), 2, {"TF_CONFIG.task.index", "worker:2"});
  }
  SECTION("--task outside the list") {
    check_failed(validate(cluster.tf_config("worker", 0), {"--task", "worker:7"}), 2, {"--task", "worker:7"});
  }
  SECTION("this task's port is in use") {
    const auto listener = bound_socket();
    REQUIRE(::listen(listener->fd(), 4) == 0);
    const std::string taken = "127.0.0.1:" + std::to_string(port_of(*listener));
    const auto text = tf_config({{"worker", {taken, a1}}}, {{"type", "worker"}, {"index", 0}});
    check_failed(validate(text), 2, {taken, "already in use"});
  }
}

TEST_CASE("cluster: junk sent to the chief's port is dropped and the job goes on", "[cluster]") {
  const LocalCluster cluster({{"worker", 2}});
  const int chief_port = cluster.port("worker", 0);
  const std::vector<std::string> sets = {"train.epochs=300"};  // trains about a second
  auto chief = start_task(cluster, "worker", 0, sets);

  std::unique_ptr<Socket> junk;
  const auto give_up = Child::Clock::now() + 10s;
  while (!(junk = try_connect(chief_port)) && Child::Clock::now() < give_up && !chief->ended())
    std::this_thread::sleep_for(50ms);
  REQUIRE(junk);
  // While the job is joining: a small frame whose payload is not a message.
  send_all(*junk, std::string("\0\0\0\x08", 4) + "garbage!");
  CHECK(peer_closes(*junk, 5.0));

  auto worker1 = start_task(cluster, "worker", 1, sets);
  wait_until_joined({chief.get(), worker1.get()}, 15.0);
  // While it trains: a length prefix far over the frame limit.
  const auto oversized = try_connect(chief_port);
  REQUIRE(oversized);
  send_all(*oversized, "\x7f\xff\xff\xff");
  CHECK(peer_closes(*oversized, 5.0));

  const RunOutput r0 = chief->finish(kDeadline);
  const RunOutput r1 = worker1->finish(kDeadline);
  check_succeeded(r0, 2);
  check_succeeded(r1, 2);
  INFO(describe(r0));
  CHECK_THAT(r0.err, Contains("dropped the connection"));
  CHECK_THAT(r0.err, Contains("malformed frame"));
  CHECK_THAT(r0.err, Contains("sent a frame of 2147483647 bytes"));
}

}  // namespace dtrain::integration

namespace dtrain::integration {
namespace {

// The environment of rank `rank` of WORLD_SIZE `world` under PyTorch's env:// convention.
StartSpec env_rank(int port, int world, int rank) {
  StartSpec spec = task_env("");
  spec.env[0] = "TF_CONFIG";  // unset: the env:// variables alone describe the cluster
  for (const std::string& v : std::vector<std::string>{"MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + std::to_string(port),
                               "WORLD_SIZE=" + std::to_string(world), "RANK=" + std::to_string(rank)})
    spec.env.push_back(v);
  return spec;
}

}  // namespace

TEST_CASE("cluster: env:// ranks register their addresses with the chief and train as TF_CONFIG tasks do",
          "[cluster][env]") {
  const int port = free_ports(1)[0];
  std::vector<std::unique_ptr<Child>> ranks;
  for (int rank = 2; rank >= 0; --rank)  // the chief last: the others retry its port meanwhile
    ranks.push_back(start_dtrain(job_args("run", {}), env_rank(port, 3, rank)));
  std::vector<RunOutput> results;
  for (auto& child : ranks) results.push_back(child->finish(kDeadline));
  for (const RunOutput& r : results) {
    check_succeeded(r, 3);
    CHECK_THAT(r.err, Contains("env://: 3 tasks registered"));
  }
  // The same job given as a TF_CONFIG cluster ends with the same parameters.
  const LocalCluster cluster({{"worker", 3}});
  std::vector<std::unique_ptr<Child>> tasks;
  for (int i = 0; i < 3; ++i) tasks.push_back(start_task(cluster, "worker", i));
  const RunOutput tf0 = tasks[0]->finish(kDeadline);
  for (int i = 1; i < 3; ++i) tasks[static_cast<size_t>(i)]->finish(kDeadline);
  REQUIRE(params_sha256(tf0.out).size() == 64);
  for (const RunOutput& r : results) CHECK(params_sha256(r.out) == params_sha256(tf0.out));
}

TEST_CASE("cluster: an env:// rank that never starts makes the others time out naming it", "[cluster][env]") {
  const int port = free_ports(1)[0];
  auto chief = start_dtrain(job_args("run", {"runtime.rendezvous_timeout=2"}), env_rank(port, 3, 0));
  auto rank1 = start_dtrain(job_args("run", {"runtime.rendezvous_timeout=2"}), env_rank(port, 3, 1));
  check_failed(chief->finish(15.0), 5, {"RANK 2 of WORLD_SIZE 3 had not registered", "MASTER_ADDR"});
  const RunOutput r1 = rank1->finish(15.0);
  CHECK(r1.exit_code != 0);
  // A RANK outside WORLD_SIZE is a config error naming both.
  check_failed(start_dtrain(job_args("run", {}), env_rank(port, 3, 3))->finish(15.0), 2,
               {"RANK='3' is not below WORLD_SIZE='3'"});
}

}  // namespace dtrain::integration

// Strangers on the network: they know a job's id (it is no secret: derived
// from the addresses, or set) and the ports, but not the secret. Whatever they
// claim, the job must end as it would have without them.
namespace dtrain::integration {
namespace {

constexpr const char* kJobId = "impostor-test-job";
constexpr const char* kStoreMagic = "dtrain-rendezvous-1";  // rendezvous/auth.h
constexpr const char* kPsMagic = "dtrain-ps-1";             // ps/ps_wire.h

enum class Move { kWrongProof, kHangUp };

// One frame from `s` within 5 s, or nullopt (closed, timed out, malformed).
std::optional<rendezvous::Message> read_frame(const Socket& s) {
  std::string bytes;
  const auto deadline = Child::Clock::now() + 5s;
  while (Child::Clock::now() < deadline) {
    if (bytes.size() >= 4) {
      const uint32_t length = rendezvous::decode_length(reinterpret_cast<const unsigned char*>(bytes.data()));
      if (bytes.size() >= 4 + length) {
        rendezvous::Message m;
        if (!rendezvous::decode_payload(bytes.substr(4, length), m)) return std::nullopt;
        return m;
      }
    }
    pollfd p{s.fd(), POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    char buffer[4096];
    const ssize_t n = ::recv(s.fd(), buffer, sizeof buffer, 0);
    if (n <= 0) return std::nullopt;
    bytes.append(buffer, static_cast<size_t>(n));
  }
  return std::nullopt;
}

// What the server did with an impostor: nothing listened (or it refused the
// hello), it sent a challenge (and the impostor hung up), or it told a wrong
// proof so (a kError). A server that is ending with its job may close the
// connection in between: then neither of the last two.
enum class Answer { kNone, kChallenged, kToldWrongProof };

// Says a hello of `magic` claiming `task` to the server at 127.0.0.1:`port`,
// then answers its challenge with a wrong proof, or hangs up.
Answer impostor(int port, const std::string& magic, const std::string& task, Move move) {
  const auto s = try_connect(port);
  if (!s) return Answer::kNone;
  const std::string role = magic == kPsMagic ? "ps" : "store";
  // (MSG_NOSIGNAL: a server that closes as its job ends must not end the test)
  const std::string hello =
      rendezvous::encode_frame({rendezvous::Op::kHello, 0, {magic, kJobId, task, role, "0123456789abcdef"}});
  if (::send(s->fd(), hello.data(), hello.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(hello.size()))
    return Answer::kNone;
  const auto challenge = read_frame(*s);
  if (!challenge || challenge->op != rendezvous::Op::kChallenge) return Answer::kNone;
  if (move == Move::kHangUp) return Answer::kChallenged;
  const std::string proof = rendezvous::encode_frame({rendezvous::Op::kProof, 0, {std::string(64, 'a')}});
  if (::send(s->fd(), proof.data(), proof.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(proof.size()))
    return Answer::kChallenged;
  const auto told = read_frame(*s);
  return told && told->op == rendezvous::Op::kError ? Answer::kToldWrongProof : Answer::kChallenged;
}

struct Target {
  int port;
  std::string magic, task;
};

// Until `stop`: each target in turn, moves alternating, every 20 ms; counts
// the challenges answered into `attempts`, the wrong proofs told so into `told`.
std::thread attack(const std::vector<Target>& targets, const std::atomic<bool>& stop, std::atomic<int>& attempts,
                   std::atomic<int>& told) {
  return std::thread([targets, &stop, &attempts, &told] {
    for (int round = 0; !stop; ++round) {
      for (const Target& t : targets) {
        const Answer a = impostor(t.port, t.magic, t.task, round % 2 ? Move::kHangUp : Move::kWrongProof);
        if (a != Answer::kNone) ++attempts;
        if (a == Answer::kToldWrongProof) ++told;
      }
      std::this_thread::sleep_for(20ms);
    }
  });
}

size_t count_of(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// The chief's rejection lines stay within the rate limit (5 per 10 s window).
void check_rate_limited(const RunOutput& r) {
  const size_t lines = count_of(r.err, "failed the proof: another DTRAIN_JOB_SECRET?");
  INFO(describe(r));
  CHECK(lines >= 1);
  CHECK(lines <= 5 * (static_cast<size_t>(r.seconds / 10.0) + 2));
}

}  // namespace

TEST_CASE("cluster: impostors claiming the chief, a worker and a ps task, and a flood of failed handshakes, change "
          "nothing in a parameter_server job",
          "[cluster][security]") {
  // One worker: its pushes reach the ps in one order, so the parameters are
  // those of any other run of the job.
  const std::vector<std::string> sets = {"strategy.type=parameter_server", "train.epochs=1500"};
  const std::vector<std::string> env = {std::string("DTRAIN_JOB_ID=") + kJobId};
  const auto run_job = [&](const LocalCluster& cluster, bool attacked) {
    auto ps = start_task(cluster, "ps", 0, sets, env);
    auto chief = start_task(cluster, "chief", 0, sets, env);
    auto worker = start_task(cluster, "worker", 0, sets, env);
    std::atomic<bool> stop{false};
    std::atomic<int> attempts{0}, told{0}, flood_told{0};
    std::thread attacker;
    if (attacked) {
      const int chief_port = cluster.port("chief", 0), ps_port = cluster.port("ps", 0);
      attacker = attack({{chief_port, kStoreMagic, "chief:0"}, {chief_port, kStoreMagic, "worker:0"},
                         {chief_port, kStoreMagic, "ps:0"}, {ps_port, kPsMagic, "worker:0"},
                         {ps_port, kPsMagic, "chief:0"}},
                        stop, attempts, told);
      // Once it trains, a flood: 300 wrong proofs at the chief as fast as they go.
      if (chief->wait_for_err(kJoinedLine, 30.0))
        for (int i = 0; i < 300; ++i)
          if (impostor(chief_port, kStoreMagic, "worker:0", Move::kWrongProof) == Answer::kToldWrongProof)
            ++flood_told;
    }
    const RunOutput rc = chief->finish(60.0);
    stop = true;
    if (attacker.joinable()) attacker.join();
    const RunOutput rw = worker->finish(kDeadline);
    const RunOutput rp = ps->finish(kDeadline);
    INFO(describe(rc) << "\n" << describe(rw) << "\n" << describe(rp));
    CHECK(rc.exit_code == 0);
    CHECK(rw.exit_code == 0);
    CHECK(rp.exit_code == 0);
    if (attacked) {
      WARN(attempts.load() << " impostor handshakes besides the flood of 300 (" << told.load() << " and "
                           << flood_told.load() << " wrong proofs told so)");
      CHECK(attempts > 10);
      CHECK(told > 0);  // (a wrong proof is said, unless the server closed with its job meanwhile)
      CHECK(flood_told > 0);
      CHECK_THAT(rc.err, Contains("rendezvous: a task claiming chief:0 from 127.0.0.1 failed the proof"));
      CHECK_THAT(rc.err, Contains("more connection(s) in 10 s without a line each"));
      CHECK_THAT(rp.err, Contains("ps:0: a task claiming "));
      check_rate_limited(rc);
    }
    return params_sha256(rc.out);
  };
  const std::string attacked = run_job(LocalCluster({{"chief", 1}, {"worker", 1}, {"ps", 1}}), true);
  const std::string quiet = run_job(LocalCluster({{"chief", 1}, {"worker", 1}, {"ps", 1}}), false);
  WARN("attacked: " << attacked << "; unattacked: " << quiet);
  REQUIRE(quiet.size() == 64);
  CHECK(attacked == quiet);
}

TEST_CASE("cluster: impostors claiming an elastic job's absent workers never start a new membership",
          "[cluster][security][elastic]") {
  // 4 workers, 2 of them started: worker:2 and worker:3 are absent, and a
  // proven joiner would re-form the job. Unproven ones must not.
  const std::vector<std::string> sets = {"strategy.elastic.min_workers=2", "strategy.elastic.settle_seconds=1",
                                         "train.gradient_accumulation_steps=3", "train.epochs=1500"};
  const std::vector<std::string> env = {std::string("DTRAIN_JOB_ID=") + kJobId};
  const auto run_job = [&](const LocalCluster& cluster, bool attacked) {
    auto chief = start_task(cluster, "worker", 0, sets, env);
    auto worker1 = start_task(cluster, "worker", 1, sets, env);
    if (!chief->wait_for_out("Epoch 100/", 90.0)) FAIL("the job did not start with 2 of 4 tasks\n" << chief->err());
    std::atomic<bool> stop{false};
    std::atomic<int> attempts{0}, told{0};
    std::thread attacker;
    if (attacked) {
      const int port = cluster.port("worker", 0);
      attacker = attack({{port, kStoreMagic, "worker:2"}, {port, kStoreMagic, "worker:3"},
                         {port, kStoreMagic, "worker:1"}},
                        stop, attempts, told);
    }
    const RunOutput r0 = chief->finish(60.0);
    stop = true;
    if (attacker.joinable()) attacker.join();
    const RunOutput r1 = worker1->finish(kDeadline);
    INFO(describe(r0) << "\n" << describe(r1));
    CHECK(r0.exit_code == 0);
    CHECK(r1.exit_code == 0);
    CHECK_THAT(r0.out, Contains("Done: 1500 steps"));
    CHECK_THAT(r0.err, !Contains("joined the job") && !Contains("training task(s) go on"));
    if (attacked) {
      CHECK(attempts > 5);
      CHECK(told > 0);
      CHECK_THAT(r0.err, Contains("a task claiming worker:2 from 127.0.0.1 failed the proof"));
      check_rate_limited(r0);
    }
    return params_sha256(r0.out);
  };
  const std::string attacked = run_job(LocalCluster({{"worker", 4}}), true);
  const std::string quiet = run_job(LocalCluster({{"worker", 4}}), false);
  WARN("attacked: " << attacked << "; unattacked: " << quiet);
  REQUIRE(quiet.size() == 64);
  CHECK(attacked == quiet);
}

}  // namespace dtrain::integration
