// Implementation of remote_task.h.
#include "launch/remote_task.h"

#include <unistd.h>

#include <cstdlib>
#include <sstream>

#include "core/error.h"
#include "core/strings.h"

namespace dtrain::launch {

std::string shell_quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string remote_script(const RemoteShell& shell, const std::vector<std::string>& assignments,
                          const std::vector<std::string>& args) {
  std::ostringstream s;
  s << "IFS= read -r DTRAIN_JOB_SECRET || { echo 'dtrain launch: no job secret on standard input' >&2; exit 111; }\n"
    << "export DTRAIN_JOB_SECRET\n";
  if (!shell.cwd.empty())
    s << "cd " << shell_quote(shell.cwd) << " || { echo 'dtrain launch: no directory '" << shell_quote(shell.cwd)
      << "' on this host' >&2; exit 112; }\n";
  s << "exec 3<&0\n" << "env";
  for (const std::string& a : assignments) {
    const size_t eq = a.find('=');
    s << " " << a.substr(0, eq + 1) << shell_quote(a.substr(eq + 1));
  }
  s << " " << shell_quote(shell.dtrain);
  for (const std::string& a : args) s << " " << shell_quote(a);
  s << " </dev/null 3<&- &\n"
    << "task=$!\n"
    // The watchdog: standard input ends when the launcher lets go of this task.
    << "( while IFS= read -r _; do :; done <&3; kill -TERM $task 2>/dev/null; sleep " << shell.grace
    << "; kill -KILL $task 2>/dev/null ) &\n"
    << "watch=$!\n"
    << "exec 3<&-\n"
    << "wait $task\n"
    << "status=$?\n"
    << "kill $watch 2>/dev/null\n"
    << "exit $status\n";
  return s.str();
}

std::vector<std::string> remote_argv(const RemoteShell& shell, const std::string& target, const std::string& script) {
  // The user's options first: ssh takes the first value it is given for each.
  std::vector<std::string> argv = {"ssh"};
  argv.insert(argv.end(), shell.options.begin(), shell.options.end());
  // No questions (a password prompt would hang the launch), an unreachable host
  // given up after 30 s, and a dead one noticed: ssh gives up on a silent
  // connection after about 30 s.
  for (const char* o : {"BatchMode=yes", "ConnectTimeout=30", "ServerAliveInterval=10", "ServerAliveCountMax=3"}) {
    argv.push_back("-o");
    argv.push_back(o);
  }
  argv.push_back(target);
  // ssh joins its arguments into one command line for the remote shell: one quoted word.
  argv.push_back("sh -c " + shell_quote(script));
  return argv;
}

std::string find_program(const std::string& program, const std::string& what) {
  if (program.find('/') != std::string::npos) {
    if (::access(program.c_str(), X_OK) == 0) return program;
    throw ConfigError(str(what, ": '", program, "' is not an executable file"));
  }
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  throw ConfigError(str(what, ": '", program, "' is not on PATH; install it (Debian: openssh-client) or give its path"));
}

}  // namespace dtrain::launch
