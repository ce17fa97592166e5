#!/usr/bin/env python3
"""Tensor parallelism against data parallelism on local tasks (issue 37).

For each model (the shipped Fashion-MNIST MLP, the shipped GPT of
configs/gpt_fortunes.json) and each task count (2, 4), runs `dtrain launch` in
every mode at the same global batch:
  - multi_worker_mirrored: each task a whole replica, batch / N rows each;
  - tensor_parallel N: one copy of the model over the N tasks, every task the
    whole batch;
  - at 4 tasks, 2 data x 2 tensor: two copies of 2, batch / 2 rows each;
and prints, from the chief's run summary: the median step time over `--repeats`
runs (step_ms: the epochs' time per step, evaluation excluded), the share of it
spent in communication (comm_wait_share: gradient all-reduce waits, and under
tensor_parallel the split layers' all-reduces inside forward and backward),
each task's optimizer-state bytes and its memory estimate. Step time is relative
to multi_worker_mirrored at the same N in the same run. All tasks share this
machine's cores (--threads 1 each), so this measures what each mode costs here,
not a speed-up from more hardware.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def run(dtrain, config, tasks, strategy, batch, steps, overrides):
    with tempfile.TemporaryDirectory() as tmp:
        summary = os.path.join(tmp, "launch.json")
        sets = [f"strategy.type={strategy['type']}", f"train.batch_size_per_replica={batch}",
                "train.epochs=1", f"train.steps_per_epoch={steps}", f"output.dir={tmp}/out"] + overrides
        for key, value in strategy.items():
            if key != "type":
                sets.append(f"strategy.{key}={value}")
        args = [dtrain, "launch", "--workers", str(tasks), "--config", config, "--threads", "1",
                "--summary", summary]
        for s in sets:
            args += ["--set", s]
        done = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1800)
        if done.returncode != 0:
            sys.exit(f"bench-tensor-parallel: {' '.join(args)} failed:\n{done.stdout[-3000:]}")
        with open(summary) as f:
            chief = json.load(f)["tasks"]["worker:0"]
        return chief


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtrain", default="build/dtrain")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--models", default="mlp,gpt")
    p.add_argument("--json", default="")
    a = p.parse_args()
    models = {
        # (config, global batch, steps, overrides)
        "mlp": ("configs/fashion_mnist_mlp.json", 128, 200, []),
        "gpt": ("configs/gpt_fortunes.json", 32, 20, []),
    }
    rows = []
    print(f"# {a.repeats} run(s) each, medians; every task --threads 1 on this machine's cores")
    print(f"{'model':>5} {'tasks':>5}  {'mode':<24} {'step ms':>9} {'vs mwm':>7} {'comm':>6} "
          f"{'opt state/task':>15} {'memory est/task':>16}")
    for name in a.models.split(","):
        config, batch, steps, overrides = models[name]
        for tasks in (2, 4):
            modes = [("multi_worker_mirrored", {"type": "multi_worker_mirrored"}, batch // tasks),
                     (f"tensor_parallel {tasks}", {"type": "multi_worker_mirrored", "tensor_parallel": tasks}, batch)]
            if tasks == 4:
                modes.append(("2 data x 2 tensor", {"type": "multi_worker_mirrored", "tensor_parallel": 2},
                              batch // 2))
            base = None
            for label, strategy, per_task in modes:
                results = [run(a.dtrain, config, tasks, strategy, per_task, steps, overrides)
                           for _ in range(a.repeats)]
                step = statistics.median(r["step_ms"] for r in results)
                comm = statistics.median(r["comm_wait_share"] for r in results)
                base = base or step
                row = {"model": name, "tasks": tasks, "mode": label, "step_ms": step, "relative": step / base,
                       "comm_share": comm, "optimizer_state_bytes": results[0]["optimizer_state_bytes"],
                       "memory_estimate_bytes": results[0]["memory"]["total"]}
                rows.append(row)
                print(f"{name:>5} {tasks:>5}  {label:<24} {step:>9.2f} {step / base:>6.2f}x {comm:>6.2f} "
                      f"{row['optimizer_state_bytes'] / 2**20:>11.2f} MiB {row['memory_estimate_bytes'] / 2**20:>12.2f} MiB",
                      flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
