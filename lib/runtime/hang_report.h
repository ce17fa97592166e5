// Hang reports: what each task is doing, and one diagnosis from all of them.
//
// When the chief's store sees a stall (no task's step advanced for
// runtime.stall_timeout while heartbeats still come), or a task or the launcher
// gets SIGUSR1, every task publishes local_report() through the store
// (rendezvous/cluster_session.h) and the chief prints diagnose() of all of
// them: which task has not entered the collective the others wait in (with
// where its threads are), which entered it with another size or op, which did
// not answer. The job goes on; the existing deadlines still end a real hang.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace dtrain::runtime {

// This process's report, as text lines of tab-separated fields:
//   step <last step reported>
//   thread <name> <ms in the innermost span> <span > span > ...>   (threads inside spans)
//   stack <name> <frame> <frame> ...   (that thread's native stack, innermost first)
//   collective <group> <group seq> <op> <bytes> <state> <ms since it started>   (the flight recorder)
std::string local_report(int64_t step);

// One diagnosis of every task's report (task -> report, "" when none came):
// "stall: worker:1 has not entered all_reduce #12 of workers (1.4 MB) that the
// others entered 31.0 s ago; its thread main is in step > data (31.2 s)", then
// one line per task. `reason` says why the report was asked for.
std::string diagnose(const std::string& reason, const std::map<std::string, std::string>& reports);

}  // namespace dtrain::runtime
