// Implementation of cli_help.h.
#include "cli_help.h"

#include "config/section.h"
#include "core/strings.h"

#include <climits>
#include <cstring>
#include <limits>
#include <sstream>

namespace dtrain::app {
namespace {

// The integer `text` holds, whole; false when it holds anything else.
bool parse_whole(const std::string& text, long long* out) {
  size_t used = 0;
  try {
    *out = std::stoll(text, &used);
  } catch (const std::exception&) {
    return false;
  }
  return used == text.size();
}

std::string format_number(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

}  // namespace

namespace {

// A whole number in [min, max]; `open_ended`: the help and the message say
// ">= min", and a number past max (what an int holds) is said to be too large.
CLI::Validator whole_in(long long min, long long max, bool open_ended) {
  const std::string range = open_ended ? ">= " + std::to_string(min)
                                       : "from " + std::to_string(min) + " to " + std::to_string(max);
  return CLI::Validator(
      [min, max, range, open_ended](std::string& text) -> std::string {
        long long v = 0;
        const bool whole = parse_whole(text, &v);
        if (whole && open_ended && v > max)
          return "expected a whole number " + range + ", got '" + text + "', more than it takes (" +
                 std::to_string(max) + ")";
        if (!whole || v < min || v > max) return "expected a whole number " + range + ", got '" + text + "'";
        return "";
      },
      !open_ended ? std::to_string(min) + ".." + std::to_string(max)
      : min == 1  ? std::string("POSITIVE")
      : min == 0  ? std::string("NONNEGATIVE")
                  : ">=" + std::to_string(min));
}

}  // namespace

CLI::Validator whole_between(long long min, long long max) { return whole_in(min, max, false); }

// (capped at what an int holds: most options it checks are ints, and no count
// of the others is larger)
CLI::Validator whole_at_least(long long min) { return whole_in(min, INT_MAX, true); }

namespace {

// A number in [min, max]; `expected` says so in the message ("a number >= 0").
CLI::Validator number_between(double min, double max, const std::string& expected, const std::string& name) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        size_t used = 0;
        double v = 0;
        try {
          v = std::stod(text, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != text.size() || !(v >= min && v <= max))
          return "expected " + expected + ", got '" + text + "'";
        return "";
      },
      name);
}

}  // namespace

CLI::Validator number_at_least(double min) {
  return number_between(min, std::numeric_limits<double>::max(), "a number >= " + format_number(min),
                        min == 0 ? std::string("NONNEGATIVE") : ">=" + format_number(min));
}

CLI::Validator seconds_at_least(double min) {
  return number_between(min, config::kMaxSeconds, "a number of seconds >= " + format_number(min) + " and at most 1e7",
                        "SECONDS");
}

std::string check_set_arguments(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--set") != 0) continue;
    const std::string value = argv[i + 1];
    if (value.find('=') != std::string::npos) continue;
    const std::string next = i + 2 < argc ? argv[i + 2] : "";
    if (!next.empty() && next.rfind("-", 0) != 0)
      return "--set '" + value + "' has no '=' (then '" + next + "'): write --set " + value + "=" + next;
    return "--set '" + value + "' has no '=': write --set " + value + "=VALUE";
  }
  return "";
}

namespace {

// The deepest command the line named ("dtrain bench train": bench's train).
const CLI::App& named_command(const CLI::App& app) {
  const CLI::App* at = &app;
  while (!at->get_subcommands().empty()) at = at->get_subcommands().front();
  return *at;
}

std::string command_path(const CLI::App& app) {
  std::string path = app.get_name();
  for (const CLI::App* at = &app; !at->get_subcommands().empty();) {
    at = at->get_subcommands().front();
    path += " " + at->get_name();
  }
  return path;
}

// Flags people bring from other tools that are a job's keys here.
struct FamiliarFlag {
  const char* flags;  // space-separated
  const char* key;
  const char* value;
};
constexpr FamiliarFlag kFamiliarFlags[] = {
    {"--epochs --num-epochs --num_epochs", "train.epochs", "N"},
    {"--batch-size --batch_size --bs", "train.batch_size_per_replica", "N"},
    {"--lr --learning-rate --learning_rate", "optimizer.learning_rate", "X"},
    {"--steps-per-epoch --steps_per_epoch", "train.steps_per_epoch", "N"},
    {"--precision --mixed-precision", "train.precision", "mixed_bfloat16"},
    {"--strategy", "strategy.type", "multi_worker_mirrored"},
    {"--seed", "train.seed", "N"},
    {"--output --output-dir --output_dir --logdir", "output.dir", "DIR"},
    {"--device", "device", "gpu"},
};

std::string familiar_key(const std::string& flag) {
  const std::string name = flag.substr(0, flag.find('='));
  for (const FamiliarFlag& f : kFamiliarFlags) {
    std::istringstream words(f.flags);
    for (std::string w; words >> w;)
      if (w == name) return str("--set ", f.key, "=", f.value);
  }
  return "";
}

std::string one_unexpected(const CLI::App& command, const std::string& where, const std::string& word) {
  if (word.rfind("-", 0) == 0) {
    if (const std::string key = familiar_key(word); !key.empty())
      return str("'", word, "' is no option of '", where, "': it is a key of the job file here: ", key);
    std::vector<std::string> names;
    for (const CLI::Option* o : command.get_options()) {
      std::istringstream longs(o->get_name(false, true));
      for (std::string n; std::getline(longs, n, ',');)
        if (n.rfind("--", 0) == 0) names.push_back(n);
    }
    const std::string guess = closest_match(word.substr(0, word.find('=')), names);
    return str("unknown option '", printable(word), "' for '", where, "'",
               guess.empty() ? std::string() : str(" (did you mean '", guess, "'?)"),
               "; a job's keys are set with --set KEY=VALUE");
  }
  std::vector<std::string> names;
  for (const CLI::App* sub : command.get_subcommands({})) names.push_back(sub->get_name());
  if (names.empty()) return str("'", printable(word), "' is no argument of '", where, "'");
  std::string guess = closest_match(word, names);
  if (guess.empty() && (word == "train" || word == "fit")) guess = "run";  // Keras' word for it
  return str("unknown command '", printable(word), "' for '", where, "'",
             guess.empty() ? std::string() : str(" (did you mean '", guess, "'?)"));
}

}  // namespace

std::string unexpected_arguments_text(const CLI::App& app) {
  const CLI::App& command = named_command(app);
  std::vector<std::string> extras = command.remaining();
  if (extras.empty()) extras = app.remaining();
  std::vector<std::string> said;
  for (size_t i = 0; i < extras.size() && said.size() < 3; ++i) {
    said.push_back(one_unexpected(command, command_path(app), extras[i]));
    // (after an unknown command, the rest of the line is that command's)
    if (extras[i].rfind("-", 0) != 0 && !command.get_subcommands({}).empty()) break;
    // (a familiar flag's value, as in --epochs 1, is not a second mistake)
    if (extras[i].rfind("-", 0) == 0 && i + 1 < extras.size() && extras[i + 1].rfind("-", 0) != 0) ++i;
  }
  return join(said, "; ");
}

std::string help_command(const CLI::App& app) {
  std::string command = app.get_name();
  // get_subcommands(): the subcommands the command line named (one per level here)
  for (const CLI::App* at = &app; !at->get_subcommands().empty();) {
    at = at->get_subcommands().front();
    command += " " + at->get_name();
  }
  return command + " --help";
}

std::string run_help_footer() {
  return R"(
Examples:
  dtrain run --config configs/fashion_mnist_cnn.json
  dtrain run --config job.json --set train.epochs=1 --threads 2 --summary out.json
  dtrain run --config job.json --resume                  # from the newest good checkpoint
  # one task of a cluster, started by hand on each machine (same job file, same secret):
  export DTRAIN_JOB_SECRET=$(openssl rand -hex 32)       # once; the same value in every task
  TF_CONFIG='{"cluster": {"worker": ["host1:2222", "host2:2222"]}, "task": {"type": "worker", "index": 0}}' \
    dtrain run --config configs/fashion_mnist_cnn_multiworker.json

Environment:
  TF_CONFIG          the cluster and this task, as TensorFlow reads it (or the job's cluster/task keys)
  DTRAIN_JOB_SECRET  the job's shared secret: every task of a multi-task job needs the same value
                     (`dtrain launch` makes one; else runtime.secret_file)
  DTRAIN_JOB_ID      the job's name (default: runtime.job_id, else derived from the cluster)
  OMP_NUM_THREADS    compute threads when --threads and runtime.threads are not given
  LOCAL_RANK         which local GPU a task takes (cuda:(LOCAL_RANK % GPUs)), as torchrun sets it
  DTRAIN_ALLOW_TF32  0 turns TF32 convolutions off on GPUs
  OMP_WAIT_POLICY, GOMP_SPINCOUNT  how OpenMP's idle threads wait (unset: dtrain sets GOMP_SPINCOUNT=30000)
  SLURM_*, KUBERNETES_*, MASTER_ADDR...  read by runtime.cluster_resolver (docs/cluster.md)
Exit codes: 0 done, 1 a failure while running, 2 config or usage, 3 data or file, 4 a task lost,
  5 a deadline passed, 6 stopped by SIGTERM with a checkpoint, 130 interrupted (Ctrl-C: at a step's
  end, with the checkpoint the job saves; a second Ctrl-C at once), 143 SIGTERM before the first step
  (README, "Errors and exit codes")
)";
}

std::string launch_help_footer() {
  return R"(
Examples:
  dtrain launch --workers 2 --config configs/fashion_mnist_cnn.json     # 2 local workers, multi_worker_mirrored
  dtrain launch --workers 2 --ps 1 --config configs/fashion_mnist_mlp.json --set strategy.type=parameter_server
  dtrain launch --workers 4 --max-restarts 2 --config job.json          # restart from the checkpoint on failure
  dtrain launch --hostfile hosts.txt --config job.json                  # 'node1 slots=2' lines, over ssh

Every task's full output is in <output.dir>/logs/<task>.log. The launcher makes the
job's DTRAIN_JOB_SECRET (or hands on the one in its environment) and sets TF_CONFIG
for each task. Exit code: the first failing task's (see README, Exit codes).
)";
}

std::string main_help_footer() {
  return R"(
Start with:
  dtrain run --config configs/fashion_mnist_cnn.json            # train on this machine
  dtrain launch --workers 2 --config configs/fashion_mnist_cnn.json  # two local workers
  dtrain validate --config job.json                              # check a job without training
Each command's options: dtrain COMMAND --help
)";
}

}  // namespace dtrain::app
