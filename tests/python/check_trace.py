"""Checks a dtrain trace (output.trace) and says where the step time goes.

Usage: check_trace.py TRACE_JSON TASKS

Checks that the Chrome-trace file has one process per task (named worker:0,
...), that every step of every task has exactly one all-reduce span per
gradient bucket (bucket 0..B-1, each once), and that every span of a task lies
inside one of its steps (the all-reduces, on their own thread, too), that each
task recorded its clock offset to the chief, and that the clocks agree: the
all-reduce of one bucket in one step overlaps in time on every task (no task can
finish a collective before another has started it), within the uncertainty each
task recorded with its offset (half the round trip it was measured over). Prints the mean duration of
each span kind per task, and exits 0 when all checks pass, 1 with what failed
otherwise. Standard library only.
"""
import collections
import json
import re
import sys


def main():
    path, tasks = sys.argv[1], int(sys.argv[2])
    events = json.load(open(path))["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    errors = []
    if sorted(names.values()) != sorted(f"worker:{i}" for i in range(tasks)):
        errors.append(f"processes {sorted(names.values())}, expected worker:0..worker:{tasks - 1}")
    offset_events = [e for e in events if e["ph"] == "M" and e["name"] == "clock_offset_us"]
    offsets = {e["pid"]: e["args"]["offset_us"] for e in offset_events}
    uncertainty = {e["pid"]: e["args"]["uncertainty_us"] for e in offset_events}
    if sorted(offsets) != sorted(names):
        errors.append(f"clock offsets recorded for processes {sorted(offsets)}, expected {sorted(names)}")
    spans = [e for e in events if e["ph"] == "X"]
    # (step index, bucket) -> [(start, end, pid)] of every task, for the overlap check.
    collectives = collections.defaultdict(list)
    for pid, task in sorted(names.items()):
        mine = [e for e in spans if e["pid"] == pid]
        steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in mine if e["name"] == "step")
        if not steps:
            errors.append(f"{task}: no step spans")
            continue
        buckets_per_step = collections.defaultdict(list)
        outside = 0
        for e in mine:
            if e["name"] == "step":
                continue
            inside = [i for i, (a, b) in enumerate(steps) if a <= e["ts"] and e["ts"] + e["dur"] <= b]
            if not inside:
                outside += 1
                continue
            if e["name"] == "all-reduce":
                bucket = int(re.match(r"bucket (\d+)", e["args"]["detail"]).group(1))
                buckets_per_step[inside[0]].append(bucket)
                collectives[(inside[0], bucket)].append((e["ts"], e["ts"] + e["dur"], pid))
        if outside:
            errors.append(f"{task}: {outside} spans outside every step")
        bucket_count = max((max(b) for b in buckets_per_step.values()), default=-1) + 1
        bad = [i for i in range(len(steps)) if sorted(buckets_per_step.get(i, [])) != list(range(bucket_count))]
        if bucket_count == 0 or bad:
            errors.append(f"{task}: {len(bad)} of {len(steps)} steps do not have one all-reduce per bucket "
                          f"(0..{bucket_count - 1})")
        means = collections.defaultdict(list)
        for e in mine:
            means[e["name"]].append(e["dur"] / 1000.0)
        summary = ", ".join(f"{n} {sum(v) / len(v):.3f}" for n, v in sorted(means.items(), key=lambda kv: -sum(kv[1])))
        print(f"{task}: {len(steps)} steps, {bucket_count} bucket(s) per step, clock offset "
              f"{offsets.get(pid, '?')} us (within {uncertainty.get(pid, '?')} us); mean ms: {summary}")

    def apart_in_time(times):
        # Task i started after task j ended by more than their clocks can be off.
        return any(start > end + uncertainty.get(i, 0) + uncertainty.get(j, 0)
                   for start, _, i in times for _, end, j in times)

    apart = [key for key, times in collectives.items() if len(times) == len(names) and apart_in_time(times)]
    if apart:
        errors.append(f"{len(apart)} of {len(collectives)} all-reduces do not overlap across the tasks "
                      f"(first: step {apart[0][0]}, bucket {apart[0][1]}): their clocks disagree")
    if errors:
        print("\n".join(errors))
        sys.exit(1)
    print(f"trace ok: {len(names)} processes, {len(spans)} spans")


if __name__ == "__main__":
    main()
