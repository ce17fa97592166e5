// This process's resident memory as the system counts it (Linux, /proc/self):
// what a run reports as measured beside its memory estimate. Resident bytes
// include everything the process touched (libraries, the data, oneDNN's
// scratch, thread stacks), not only dtrain's tensors.
#pragma once

#include <cstdint>

namespace dtrain {

// VmRSS: resident now. 0 where /proc/self/status cannot be read.
int64_t resident_bytes();
// VmHWM: the most resident at once since the process started, or since
// reset_peak_resident(). 0 where unknown.
int64_t peak_resident_bytes();
// The peak becomes what is resident now (writes "5" to /proc/self/clear_refs,
// Linux 4.0 and later). False where the system refuses (then the peak counts
// from the process's start).
bool reset_peak_resident();

}  // namespace dtrain
