#!/usr/bin/env python3
"""A worker killed mid-epoch: dtrain's elastic job against torchrun's elastic agent (issue 36).

What it measures, in one run, on this machine
    dtrain: `dtrain launch --workers 2:4 --max-restarts 1` of the Fashion-MNIST
    CNN (configs/fashion_mnist_cnn_multiworker.json: 32 per replica, 3
    accumulation steps, a global batch of 384, 3 epochs), with the sample audit
    (DTRAIN_SAMPLE_LOG). Once the chief has logged step --kill-step, this script
    SIGKILLs worker:2 (found by its TF_CONFIG) and notes the time. From the
    chief's metrics.jsonl: when the survivors had done their first step at 3
    tasks, and when the launcher's replacement had joined and the first step at
    4 was done (resumed_unix_time of each membership record); the step time at
    each size (the step records' windows, one every 5 steps, a window with a
    change left out). Then each epoch's samples (all tasks' audit files: count,
    distinct, against the uninterrupted run's), and the test accuracy against an
    uninterrupted run of the same job.

    torchrun: its elastic agent (`python -m torch.distributed.run --nnodes=1
    --nproc-per-node=4 --max-restarts=3 --rdzv-backend=c10d`, its defaults
    otherwise) running 4 workers of bench/torch_elastic_worker.py: DDP over
    gloo, the same CNN and global batch, Adam. Once a worker printed step
    --kill-step, the worker of LOCAL_RANK 2 is SIGKILLed: the agent stops the
    others and starts all 4 again (any membership change restarts every
    worker). The time to train again is the first step done after the kill (no
    checkpoint is read: a real job would also load one). (Four agents of one
    worker each, --nnodes=2:4, did not come back here: every restarted round
    failed to connect Gloo's full mesh, "Connection refused", until the
    restarts ran out.)

Prints a table and one JSON object (--json FILE writes it too).

Usage (in the venv scripts/torch-venv.sh makes from PyPI; bash scripts/bench-elastic.sh runs it)
    build/torch-venv/bin/python bench/elastic_kill.py --dtrain build/dtrain
"""
import argparse
import collections
import glob
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from local_processes import free_ports  # noqa: E402


def processes():
    """(pid, ppid, argv) of every process."""
    out = []
    for d in glob.glob("/proc/[0-9]*"):
        try:
            with open(d + "/cmdline", "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
            with open(d + "/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            out.append((int(d[6:]), ppid, argv))
        except (OSError, ValueError, IndexError):
            pass
    return out


def dtrain_task_pid(index):
    for pid, _, argv in processes():
        if len(argv) < 2 or not argv[0].endswith("dtrain") or argv[1] != "run":
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(e.split(b"=", 1) for e in f.read().split(b"\0") if b"=" in e)
            task = json.loads(env[b"TF_CONFIG"])["task"]
        except (OSError, KeyError, ValueError):
            continue
        if task["type"] == "worker" and int(task["index"]) == index:
            return pid
    return None


def json_lines(path):
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError):
        return []


def audit(samples_dir):
    """Per epoch: (samples trained on, distinct samples, the set); and the chief's
    (step, unix time) of each step done."""
    seen = collections.defaultdict(collections.Counter)
    chief_steps = []
    for path in glob.glob(samples_dir + "/*.samples"):
        with open(path) as f:
            for line in f:
                words = line.split()
                seen[int(words[0])].update(int(w) for w in words[3:])
                if path.endswith("worker-0.samples"):
                    chief_steps.append((int(words[1]), int(words[2]) / 1e6))
    return {e: (sum(c.values()), len(c), set(c)) for e, c in seen.items()}, sorted(chief_steps)


def run_dtrain(args, out, kill, restart=False):
    os.makedirs(out + "/samples")
    cmd = [args.dtrain, "launch", "--config", os.path.join(ROOT, "configs/fashion_mnist_cnn_multiworker.json"),
           "--workers", "2:4", "--threads", "1", "--set", f"train.epochs={args.epochs}",
           "--set", "train.gradient_accumulation_steps=3", "--set", "train.log_every_steps=5",
           "--set", f"output.dir={out}", "--summary", out + "/launch.json"]
    if restart:
        cmd += ["--max-restarts", "1"]
    env = dict(os.environ, DTRAIN_SAMPLE_LOG=out + "/samples")
    with open(out + "/launch.log", "w") as log:
        launch = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        killed_at = None
        try:
            while kill and killed_at is None and launch.poll() is None:
                steps = [r["step"] for r in json_lines(out + "/metrics.jsonl") if r.get("kind") == "step"]
                if steps and max(steps) >= args.kill_step:
                    pid = dtrain_task_pid(2)
                    if pid:
                        os.kill(pid, signal.SIGKILL)
                        killed_at = time.time()
                time.sleep(0.002)
            code = launch.wait(timeout=600)
        finally:
            if launch.poll() is None:
                launch.kill()
    if code != 0:
        sys.exit(f"elastic_kill: dtrain launch ended with {code}; see {out}/launch.log")
    records = json_lines(out + "/metrics.jsonl")
    summary = json.load(open(out + "/launch.json"))
    epochs, chief_steps = audit(out + "/samples")
    return killed_at, records, summary, epochs, chief_steps


def step_ms_by_phase(chief_steps, changes):
    """Median time between two consecutive steps of the chief (ms) before the
    first change, between changes and after the last, with the tasks of each
    phase; the step right after a change (the re-formation) left out."""
    bounds = [0] + [c["step"] for c in changes] + [10 ** 9]
    tasks = [4] + [c["training_tasks"] for c in changes]
    phases = []
    for i in range(len(bounds) - 1):
        times = [t for s, t in chief_steps if bounds[i] < s <= bounds[i + 1]]
        gaps = [b - a for a, b in zip(times[1:], times[2:])]  # (the first step of a phase waited for the others)
        if gaps:
            phases.append({"tasks": tasks[i], "steps": len(times), "step_ms": 1000.0 * statistics.median(gaps)})
    return phases


def local_rank_pid(agent, local_rank):
    """The worker process of `agent` (a torchrun) with LOCAL_RANK `local_rank`."""
    for pid, ppid, argv in processes():
        if ppid != agent or not any("torch_elastic_worker.py" in a for a in argv):
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(e.split(b"=", 1) for e in f.read().split(b"\0") if b"=" in e)
        except OSError:
            continue
        if env.get(b"LOCAL_RANK") == str(local_rank).encode():
            return pid
    return None


def run_torchrun(args, out):
    port = free_ports(1)[0]
    marker = out + "/killed"
    env = dict(os.environ, OMP_NUM_THREADS="1", ELASTIC_BENCH_MARKER=marker, ELASTIC_BENCH_OUT=out)
    agents, logs = [], []
    for i in range(1):
        logs.append(open(f"{out}/agent{i}.log", "w"))
        agents.append(subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=4", "--max-restarts=3",
             "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", f"--rdzv-id=elastic-{os.getpid()}",
             os.path.join(HERE, "torch_elastic_worker.py"), "--global-batch", "384"],
            stdout=logs[-1], stderr=subprocess.STDOUT, env=env, start_new_session=True))

    def steps(_):  # (process start time, step, unix time, world size) of every worker's STEP lines
        out_lines = []
        for path in glob.glob(out + "/*.steps"):
            with open(path) as f:
                started = 0.0
                for line in f:
                    w = line.split()
                    if len(w) == 3 and w[0] == "START":
                        started = float(w[2])
                    if len(w) == 5 and w[0] == "STEP" and line.endswith("\n"):
                        out_lines.append((started, int(w[2]), float(w[3]), int(w[4])))
        return out_lines

    try:
        deadline = time.time() + 600
        killed_at = None
        while killed_at is None:
            if time.time() > deadline or any(a.poll() is not None for a in agents):
                sys.exit(f"elastic_kill: torchrun did not reach step {args.kill_step}; see {out}/agent*.log")
            if any(s >= args.kill_step for _, s, _, _ in steps(0)):
                pid = local_rank_pid(agents[0].pid, 2)
                if pid:
                    open(marker, "w").close()
                    os.kill(pid, signal.SIGKILL)
                    killed_at = time.time()
            time.sleep(0.002)
        for a in agents:
            a.wait(timeout=600)
    finally:
        for a in agents:
            if a.poll() is None:
                os.killpg(a.pid, signal.SIGKILL)
        # Workers its agent left behind (an agent that gave up does not stop them).
        for pid, _, argv in processes():
            if any("torch_elastic_worker.py" in a for a in argv):
                try:
                    with open(f"/proc/{pid}/environ", "rb") as f:
                        if b"ELASTIC_BENCH_OUT=" + out.encode() + b"\0" in f.read() + b"\0":
                            os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        for f in logs:
            f.close()
    all_steps = steps(0)
    again = sorted((t, world) for started, _, t, world in all_steps if started > killed_at)
    if not again:
        sys.exit(f"elastic_kill: torchrun's workers did not train again after the kill; see {out}/agent*.log")
    return killed_at, again[0][0], again[0][1]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtrain", default=os.path.join(ROOT, "build/dtrain"))
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--kill-step", type=int, default=60)
    parser.add_argument("--skip-torch", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="elastic-kill-")
    try:
        result = {"kill_step": args.kill_step, "epochs": args.epochs}
        os.makedirs(work + "/straight")
        _, _, straight_summary, straight_audit, _ = run_dtrain(args, work + "/straight/out", kill=False)
        # The kill alone: the survivors go on at 3 tasks to the end.
        os.makedirs(work + "/killed")
        killed_at, records, summary, killed_audit, chief_steps = run_dtrain(args, work + "/killed/out", kill=True)
        changes = [r for r in records if r.get("kind") == "membership"]
        chief = summary["tasks"]["worker:0"]
        # The kill with the launcher's replacement (--max-restarts 1), which joins.
        os.makedirs(work + "/replaced")
        replaced_at, replaced_records, _, replaced_audit, replaced_steps = run_dtrain(
            args, work + "/replaced/out", kill=True, restart=True)
        replaced_changes = [r for r in replaced_records if r.get("kind") == "membership"]
        result["dtrain"] = {
            "killed_unix_time": killed_at,
            "changes": changes,
            "seconds_to_training_at_3": next((c["resumed_unix_time"] - killed_at for c in changes
                                              if c["training_tasks"] == 3), None),
            "phases": step_ms_by_phase(chief_steps, changes),
            "replaced": {
                "changes": replaced_changes,
                "seconds_to_training_at_4_again": next((c["resumed_unix_time"] - replaced_at
                                                        for c in replaced_changes if c["training_tasks"] == 4), None),
                "phases": step_ms_by_phase(replaced_steps, replaced_changes),
                "epochs_exact": all(n == d and s == straight_audit[e][2]
                                    for e, (n, d, s) in replaced_audit.items()),
            },
            "steps": chief["steps"],
            "chief_step_ms": chief["step_ms"],
            "uninterrupted_chief_step_ms": straight_summary["tasks"]["worker:0"]["step_ms"],
            "test_accuracy": chief["test_accuracy"],
            "uninterrupted_test_accuracy": straight_summary["tasks"]["worker:0"]["test_accuracy"],
            "epochs": {e: {"samples": n, "distinct": d, "same_as_uninterrupted": s == straight_audit[e][2]}
                       for e, (n, d, s) in sorted(killed_audit.items())},
        }
        if not args.skip_torch:
            os.makedirs(work + "/torch")
            t_kill, t_back, world = run_torchrun(args, work + "/torch")
            result["torchrun"] = {"seconds_to_training_again": t_back - t_kill, "world_size_again": world,
                                  "torch_version": __import__("torch").__version__}
        print_table(result)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(result, f, indent=1)
        print(json.dumps(result))
    finally:
        if os.environ.get("ELASTIC_KILL_KEEP"):
            print(f"kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


def print_table(r):
    d = r["dtrain"]
    print(f"worker:2 SIGKILLed after step {r['kill_step']} of {r['epochs']} epochs (the CNN, global batch 384)")

    def changes(cs):
        for c in cs:
            print(f"  membership {c['generation']}: left {c['left'] or '-'}, joined {c['joined'] or '-'}, from step "
                  f"{c['step']}, {c['training_tasks']} tasks x {c['accumulation_steps']} accumulation steps, " +
                  (f"re-formed in {c['reform_seconds']:.3f} s after the change was seen" if c["reform_seconds"] >= 0
                   else "no step at this size (the next change came first)"))

    def phases(ps):
        return ", then ".join(f"{p['tasks']} tasks {p['step_ms']:.1f} ms ({p['steps']} steps)" for p in ps)

    print("dtrain, the kill alone:")
    changes(d["changes"])
    at3 = d["seconds_to_training_at_3"]
    print(f"dtrain: kill -> first step at 3 tasks: {at3:.3f} s")
    print("dtrain: step time (median) by phase: " + phases(d["phases"]))
    p = d["replaced"]
    print("dtrain, the kill and the launcher's replacement (--max-restarts 1):")
    changes(p["changes"])
    at4 = p["seconds_to_training_at_4_again"]
    if at4 is not None:
        print(f"dtrain: kill -> first step at 4 tasks again (the replacement joined): {at4:.3f} s")
    print("dtrain: step time (median) by phase: " + phases(p["phases"]))
    print(f"dtrain: its epochs' samples each once, the uninterrupted run's: {p['epochs_exact']}")
    for e, a in d["epochs"].items():
        print(f"dtrain: epoch {e + 1}: {a['samples']} samples trained on, {a['distinct']} distinct, "
              f"{'the same set as' if a['same_as_uninterrupted'] else 'NOT the same set as'} the uninterrupted run")
    print(f"dtrain: test accuracy {d['test_accuracy']:.4f} (uninterrupted: {d['uninterrupted_test_accuracy']:.4f}), "
          f"{d['steps']} steps; the chief's mean step {d['chief_step_ms']:.1f} ms (uninterrupted: "
          f"{d['uninterrupted_chief_step_ms']:.1f} ms)")
    if "torchrun" in r:
        t = r["torchrun"]
        print(f"torchrun (torch {t['torch_version']}): kill -> first step after its agents restarted every worker: "
              f"{t['seconds_to_training_again']:.3f} s (at {t['world_size_again']} workers)")
        best = at3 if at3 is not None else at4
        if best:
            print(f"ratio: torchrun / dtrain = {t['seconds_to_training_again'] / best:.1f}x")


if __name__ == "__main__":
    main()
