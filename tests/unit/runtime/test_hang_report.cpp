// diagnose() over hand-written task reports (the format local_report() writes):
// the task that has not entered the collective the others wait in is named with
// where its threads are; a task that entered it with another size or op is named;
// a task that did not answer is named, and a moving job is said to be moving. And
// local_report() carries this thread's open spans, its native stack and the
// flight recorder's calls.
#include <catch2/catch.hpp>

#include "comm/flight_recorder.h"
#include "comm/local/local_communicator.h"
#include "core/trace.h"
#include "runtime/hang_report.h"

using namespace dtrain;
using Catch::Contains;

namespace {

std::string report(int step, const std::string& thread_where, double thread_ms, int seq, const std::string& op,
                   size_t bytes, const std::string& state, double age_ms) {
  return "step\t" + std::to_string(step) + "\nthread\tmain\t" + std::to_string(static_cast<int>(thread_ms)) + "\t" +
         thread_where + "\ncollective\tworkers\t" + std::to_string(seq - 1) + "\t" + op + "\t" + std::to_string(bytes) +
         "\tcompleted\t" + std::to_string(static_cast<int>(age_ms + 50)) + "\ncollective\tworkers\t" +
         std::to_string(seq) + "\t" + op + "\t" + std::to_string(bytes) + "\t" + state + "\t" +
         std::to_string(static_cast<int>(age_ms)) + "\n";
}

}  // namespace

TEST_CASE("hang report: the task whose reader blocks is named, with where its main thread is") {
  const std::map<std::string, std::string> reports = {
      {"worker:0", report(1041, "step > gradient wait", 31000, 1042, "all_reduce", 1468006, "started", 31000)},
      {"worker:1", report(1041, "step > gradient wait", 30900, 1042, "all_reduce", 1468006, "started", 30900)},
      {"worker:2", report(1041, "step > data", 31200, 1041, "all_reduce", 1468006, "completed", 31500) +
                       "stack\tmain\tpthread_cond_wait\tstd::condition_variable::wait\tdtrain::data::Pipeline::next\n"},
  };
  const std::string d = runtime::diagnose("stall: no task's step has advanced for 30 s", reports);
  INFO(d);
  CHECK_THAT(d, Contains("hang report (stall: no task's step has advanced for 30 s)"));
  CHECK_THAT(d, Contains("worker:2 has not entered all_reduce #1042 of workers (1.4 MiB), which the others entered 31 s ago"));
  CHECK_THAT(d, Contains("its thread main is in step > data (the input pipeline: data::Pipeline::next"));
  CHECK_THAT(d, Contains("(native stack, innermost first: pthread_cond_wait < std::condition_variable::wait < "
                         "dtrain::data::Pipeline::next)"));
  CHECK_THAT(d, !Contains("worker:0 has not entered"));
  CHECK_THAT(d, !Contains("worker:1 has not entered"));
}

TEST_CASE("hang report: a task that entered the collective with another size is named") {
  const std::map<std::string, std::string> reports = {
      {"worker:0", report(7, "step > gradient wait", 9000, 12, "all_reduce", 4000000, "started", 9000)},
      {"worker:1", report(7, "step > gradient wait", 9000, 12, "all_reduce", 1000000, "started", 9000)},
      {"worker:2", report(7, "step > gradient wait", 9000, 12, "all_reduce", 4000000, "started", 9000)},
  };
  const std::string d = runtime::diagnose("asked for with SIGUSR1", reports);
  INFO(d);
  // (the first they disagree on: #11, the one before, had the same sizes)
  CHECK_THAT(d, Contains("worker:1 entered workers #11 as all_reduce of 976.6 KiB where the others have all_reduce of 3.8 MiB"));
  CHECK_THAT(d, !Contains("worker:0 entered"));
}

TEST_CASE("hang report: the first collective the tasks disagree on names the odd task, though another moved on") {
  // worker:1 posts smaller buckets; worker:0's all_reduce #6 completed (its
  // peers sent what it posted) and it moved on to a broadcast #7: the newest
  // collective is the chief's alone, the disagreement is at #6.
  const std::string moved_on = report(7, "step > gradient wait", 3000, 6, "all_reduce", 4000000, "completed", 3100) +
                               "collective\tworkers\t7\tbroadcast\t40\tstarted\t3000\n";
  const std::map<std::string, std::string> reports = {
      {"worker:0", moved_on},
      {"worker:1", report(7, "step > gradient wait", 3000, 6, "all_reduce", 1000000, "started", 3000)},
      {"worker:2", report(7, "step > gradient wait", 3000, 6, "all_reduce", 4000000, "started", 3000)},
  };
  const std::string d = runtime::diagnose("a thread of the collectives' library failed on worker:1", reports);
  INFO(d);
  CHECK_THAT(d, Contains("worker:1 entered workers #5 as all_reduce of 976.6 KiB where the others have all_reduce of 3.8 MiB"));
  CHECK_THAT(d, !Contains("worker:0 entered"));
  CHECK_THAT(d, !Contains("worker:2 entered"));
  CHECK_THAT(d, !Contains("has not entered"));
}

TEST_CASE("hang report: one task against one at the first disagreement, a third not there: each view, no verdict") {
  // worker:0 answered before entering #6; worker:1 and worker:2 entered it with
  // different sizes: which of them is odd cannot be told from these reports.
  const std::string before = report(7, "step > gradient wait", 3000, 5, "all_reduce", 4000000, "completed", 3100);
  const std::map<std::string, std::string> reports = {
      {"worker:0", before},
      {"worker:1", before + "collective\tworkers\t6\tall_reduce\t1000000\tstarted\t3000\n"},
      {"worker:2", before + "collective\tworkers\t6\tall_reduce\t4000000\tstarted\t3000\n"},
  };
  const std::string d = runtime::diagnose("a thread of the collectives' library failed on worker:1", reports);
  INFO(d);
  CHECK_THAT(d, Contains("workers #6: worker:1 entered it as all_reduce of 976.6 KiB, worker:2 entered it as "
                         "all_reduce of 3.8 MiB (worker:0 not yet): the tasks disagree"));
  CHECK_THAT(d, !Contains("where the others have"));
}

TEST_CASE("hang report: a task that did not answer is named, and a moving job is said to be moving") {
  const std::string stuck = runtime::diagnose(
      "stall", {{"chief:0", report(3, "step > gradient wait", 5000, 4, "all_reduce", 64, "started", 5000)},
                {"worker:0", ""}});
  CHECK_THAT(stuck, Contains("worker:0 did not answer"));
  const std::string moving = runtime::diagnose(
      "asked for with SIGUSR1", {{"worker:0", report(900, "step > forward", 1, 1200, "all_reduce", 64, "started", 1)},
                                 {"worker:1", report(903, "step > gradient wait", 1, 1203, "all_reduce", 64, "started", 0)}});
  INFO(moving);
  CHECK_THAT(moving, Contains("nothing is stuck"));
  CHECK_THAT(moving, !Contains("has not entered"));
}

TEST_CASE("hang report: local_report carries this thread's open spans and the recorded collectives") {
  auto members = comm::make_local_group(1);
  auto group = comm::make_recorded(std::move(members.at(0)), "hang-test");
  float x = 1.0f;
  group->all_reduce(&x, 1, comm::ReduceOp::kSum);
  const trace::Span outer("step", "step");
  const trace::Span inner("data", "data");
  const std::string r = runtime::local_report(17);
  INFO(r);
  CHECK_THAT(r, Contains("step\t17\n"));
  CHECK_THAT(r, Contains("\tstep > data\n"));
  // The thread's native stack (the test binary exports its symbols): this very call.
  CHECK_THAT(r, Contains("\nstack\t"));
  CHECK_THAT(r, Contains("\tdtrain::runtime::local_report\t"));
  CHECK_THAT(r, Contains("collective\thang-test\t1\tall_reduce\t4\tcompleted\t"));
}
