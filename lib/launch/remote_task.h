// A task started on another host over ssh (`dtrain launch --hostfile`), as
// `horovodrun -H` and `deepspeed --hostfile` do.
//
// The local process is `ssh [options] TARGET sh -c SCRIPT`. The job secret is the
// first line of ssh's standard input (Process's stdin pipe): the script reads it
// into DTRAIN_JOB_SECRET, so it is never on a command line or in `ps`. The script
// then starts `dtrain run ...` in the background (its stdin /dev/null) with the
// task's variables (TF_CONFIG, DTRAIN_JOB_ID, LOCAL_RANK, ...) and watches its own
// standard input: when it ends (the launcher stopped the task by killing ssh, or
// the launcher or the ssh connection died) the task gets SIGTERM, and SIGKILL
// `grace` seconds later, so no task is left behind on any host. The script's exit
// status is the task's, which ssh passes back.
#pragma once

#include <string>
#include <vector>

namespace dtrain::launch {

struct RemoteShell {
  std::string ssh = "ssh";           // the ssh client (found on PATH when not a path)
  std::vector<std::string> options;  // before the target: -p PORT, -i KEY, -o OPTION=VALUE, ...
  std::string dtrain;                // the dtrain binary on the remote hosts
  std::string cwd;                   // the remote working directory (the job file's paths are relative to it)
  double grace = 5.0;                // seconds between SIGTERM and SIGKILL on the remote host
};

// 'it'\''s' for sh.
std::string shell_quote(const std::string& text);

// The remote script for one task: `assignments` are NAME=value variables (quoted
// here), `args` dtrain's arguments after the binary.
std::string remote_script(const RemoteShell& shell, const std::vector<std::string>& assignments,
                          const std::vector<std::string>& args);

// ssh's argv (argv[0] first) to run `script` on `target`.
std::vector<std::string> remote_argv(const RemoteShell& shell, const std::string& target, const std::string& script);

// The path of `program` (searched on PATH unless it holds a '/'). ConfigError naming it otherwise.
std::string find_program(const std::string& program, const std::string& what);

}  // namespace dtrain::launch
