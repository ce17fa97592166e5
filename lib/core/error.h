// Error types thrown by lib/ and the exit codes main() maps them to.
//
// Library code never calls exit(): it throws one of these, and apps/dtrain/main.cpp
// catches it, prints "dtrain: error: <message>" and exits with error.exit_code().
// The exit codes are documented in the README; keep the two in sync.
#pragma once

#include <stdexcept>
#include <string>

namespace dtrain {

// Documented process exit codes.
enum class ExitCode : int {
  kOk = 0,
  kRuntime = 1,      // a failure during training or an internal check that failed
  kConfig = 2,       // bad command line, bad job config, shapes that do not fit
  kData = 3,         // a data or file problem: missing, unreadable, truncated, corrupt
  kPeerLost = 4,     // another task of the job died or became unreachable
  kTimeout = 5,      // a deadline passed: rendezvous, a barrier, a store request
  kPreempted = 6,    // stopped by SIGTERM after finishing the step and saving a checkpoint
  kInterrupted = 130 // stopped by SIGINT
};

// Base of every dtrain error. what() is the whole user-facing message.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
  virtual ExitCode exit_code() const { return ExitCode::kRuntime; }
};

// The job config or the command line is wrong. Messages name the JSON path.
class ConfigError : public Error {
 public:
  explicit ConfigError(const std::string& message) : Error(message) {}
  ExitCode exit_code() const override { return ExitCode::kConfig; }
};

// A file is missing, unreadable, truncated or has inconsistent contents.
class IoError : public Error {
 public:
  explicit IoError(const std::string& message) : Error(message) {}
  ExitCode exit_code() const override { return ExitCode::kData; }
};

// Another task of the job was lost (crashed, killed, unreachable). Names the task,
// its address and the last step it reached.
class PeerLost : public Error {
 public:
  explicit PeerLost(const std::string& message) : Error(message) {}
  ExitCode exit_code() const override { return ExitCode::kPeerLost; }
};

// An elastic job's training tasks changed (one came back) at a step's end: the
// runtime connects the members again (runtime/elastic.h); it reaches main()
// only from a job that is not elastic, which never throws it.
class MembershipChanged : public PeerLost {
 public:
  explicit MembershipChanged(const std::string& message) : PeerLost(message) {}
};

// A blocking operation reached its deadline (joining, a barrier, a store request).
class TimeoutError : public Error {
 public:
  explicit TimeoutError(const std::string& message) : Error(message) {}
  ExitCode exit_code() const override { return ExitCode::kTimeout; }
};

// The job was asked to stop (SIGTERM, preemption; or Ctrl-C, exit code
// kInterrupted): the current step finished and a checkpoint was saved;
// `--resume` continues from it. (Ctrl-C is said without "error:": it was asked for.)
class Preempted : public Error {
 public:
  explicit Preempted(const std::string& message, ExitCode code = ExitCode::kPreempted)
      : Error(message), code_(code) {}
  ExitCode exit_code() const override { return code_; }

 private:
  ExitCode code_;
};

// How a stop asked by `signal` is said and ends: SIGINT (Ctrl-C) "interrupted
// (Ctrl-C)", exit 130; SIGTERM "stopped by SIGTERM", exit 6; 0 (another task of
// the job was asked, this one not) "stopped with the job", exit 6.
std::string stop_reason(int signal);
ExitCode stop_exit_code(int signal);

// An internal invariant failed (DT_CHECK). Always a dtrain bug or an unexpected state.
class InternalError : public Error {
 public:
  explicit InternalError(const std::string& message) : Error(message) {}
};

// Training could not go on (e.g. the loss became NaN).
class RuntimeError : public Error {
 public:
  explicit RuntimeError(const std::string& message) : Error(message) {}
};

// The host could not allocate a tensor. Exit code 1, as RuntimeError.
class OutOfMemory : public RuntimeError {
 public:
  explicit OutOfMemory(const std::string& message) : RuntimeError(message) {}
};

// A collective failed for a reason other than a lost peer or a deadline (a backend
// refused the call, the ranks disagree on sizes). Exit code 1.
class CommError : public Error {
 public:
  explicit CommError(const std::string& message) : Error(message) {}
};

// A CUDA, cuBLAS or cuDNN call failed on the GPU (out of memory, an illegal address,
// a refused configuration). Names the call, the file:line and the device. Exit code 1.
class CudaError : public Error {
 public:
  explicit CudaError(const std::string& message) : Error(message) {}
};

// The text printed before every error message, and the number for an exit code.
inline constexpr const char* kErrorPrefix = "dtrain: error: ";
inline int to_int(ExitCode code) { return static_cast<int>(code); }

}  // namespace dtrain
