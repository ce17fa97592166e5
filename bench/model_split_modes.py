#!/usr/bin/env python3
"""Every way dtrain splits a model, on local tasks (issue 37).

For each model and each task count (2, 4), runs `dtrain launch` in every mode
at the same global batch:
  - multi_worker_mirrored: each task a whole replica, batch / N rows each;
  - ZeRO-1, ZeRO-2, ZeRO-3 (strategy.shard "optimizer_state", "gradients",
    "parameters"), ZeRO-3 without prefetch, and ZeRO-3 with the whole model one
    unit (min_unit_params 10^9: one all-gather and one reduce-scatter a step):
    batch / N rows each;
  - tensor_parallel N: one copy of the model over the N tasks, every task the
    whole batch; at 4 tasks also 2 data x 2 tensor (batch / 2 rows each);
  - pipeline N: strategy.type "pipeline", stages "auto" (one stage per task,
    cut by measured layer time), 4 micro-batches of the whole batch, 1f1b; at
    4 tasks also 2 pipeline x 2 tensor (each stage's layers split over 2 tasks);
and prints, from the run summaries: the median step time over `--repeats` runs
(step_ms: the epochs' time per step), the share of it spent waiting for
communication (comm_wait_share: gradient all-reduces; ZeRO's reduce-scatters,
all-gathers and the waits for them; tensor_parallel's all-reduces inside the
layers; a pipeline's waits for activations and gradients, its bubble included), the memory estimate per task, and the measured training peak per task
(the largest over the tasks of: resident peak during the training loop, less
the process before the model and what loading the data added; it includes
oneDNN's scratch, activations and thread stacks, which the estimate partly
leaves out). Step time is relative to multi_worker_mirrored at the same N in
the same run.

Models: "deep" (12 Dense 1024 relu + Dense 10 on 1024 synthetic features:
12.6 M parameters, Adam; its layers are small units, the case ZeRO-3 is for),
"mlp" (the shipped Fashion-MNIST MLP), "gpt" (configs/gpt_fortunes.json).

For "deep", the same run also times PyTorch FSDP2 (fully_shard per Linear,
gloo, bench/torch_fsdp_reference.py in the venv of scripts/torch-venv.sh) on the
same model, tasks and per-task batch, and reports ZeRO-3's step time against
it; and one ZeRO-3 run with a trace per prefetch setting measures how much of
the chief's all-gather time (on its collectives thread) overlapped its main
thread computing (inside forward and backward, outside its waits for
collectives).

All tasks share this machine's cores (--threads 1 each), so this measures what
each mode costs here, not a speed-up from more hardware.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

DEEP = {
    "model": {"input_shape": [1024],
              "layers": [{"type": "Dense", "units": 1024, "activation": "relu"}] * 12 + [{"type": "Dense", "units": 10}]},
    "loss": {"type": "sparse_categorical_crossentropy", "from_logits": True},
    "optimizer": {"type": "adam", "learning_rate": 0.001},
    "data": {"train": {"format": "synthetic", "shape": [1024], "count": 4096, "classes": 10}},
    "train": {"seed": 1},
}


def run(dtrain, config, tasks, strategy, batch, steps, trace_dir=None):
    with tempfile.TemporaryDirectory() as tmp:
        out = trace_dir or f"{tmp}/out"
        summary = os.path.join(tmp, "launch.json")
        sets = [f"strategy.type={strategy['type']}", f"train.batch_size_per_replica={batch}",
                "train.epochs=1", f"train.steps_per_epoch={steps}", f"output.dir={out}",
                "output.overwrite=true"]  # (a trace directory may hold an earlier run's)
        if trace_dir:
            sets.append("output.trace=true")
        for key, value in strategy.items():
            if key != "type":
                sets.append(f"strategy.{key}={json.dumps(value) if isinstance(value, str) else str(value).lower()}")
        args = [dtrain, "launch", "--workers", str(tasks), "--config", config, "--threads", "1",
                "--summary", summary]
        for s in sets:
            args += ["--set", s]
        done = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1800)
        if done.returncode != 0:
            sys.exit(f"bench-model-split: {' '.join(args)} failed:\n{done.stdout[-3000:]}")
        with open(summary) as f:
            return json.load(f)["tasks"]


def modes(tasks):
    mwm = "multi_worker_mirrored"
    out = [("multi_worker_mirrored", {"type": mwm}, True),
           ("ZeRO-1", {"type": mwm, "shard": "optimizer_state"}, True),
           ("ZeRO-2", {"type": mwm, "shard": "gradients"}, True),
           ("ZeRO-3", {"type": mwm, "shard": "parameters"}, True),
           ("ZeRO-3, no prefetch", {"type": mwm, "shard": "parameters", "prefetch": False}, True),
           ("ZeRO-3 one unit", {"type": mwm, "shard": "parameters", "min_unit_params": 10**9}, True),
           (f"tensor_parallel {tasks}", {"type": mwm, "tensor_parallel": tasks}, False)]
    if tasks == 4:
        out.append(("2 data x 2 tensor", {"type": mwm, "tensor_parallel": 2}, None))
    pipeline = {"type": "pipeline", "stages": "auto", "schedule": "1f1b"}
    out.append((f"pipeline {tasks}", pipeline, False))
    if tasks == 4:
        out.append(("2 pipeline x 2 tensor", {**pipeline, "tensor_parallel": 2}, False))
    return out


def merged(intervals):
    out = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return out


def subtract(intervals, holes):
    """The parts of merged `intervals` outside merged `holes`."""
    out = []
    for start, end in intervals:
        for h0, h1 in holes:
            if h1 <= start or h0 >= end:
                continue
            if h0 > start:
                out.append([start, h0])
            start = max(start, h1)
            if start >= end:
                break
        if start < end:
            out.append([start, end])
    return out


def covered(intervals, by):
    """Microseconds of merged `intervals` inside merged `by`."""
    total = 0
    for start, end in intervals:
        for b0, b1 in by:
            total += max(0, min(end, b1) - max(start, b0))
    return total


def prefetch_overlap(trace_file):
    """The chief's all-gather seconds, and how many of them its main thread spent computing.

    Computing: inside its forward and backward spans, outside its waits for
    collectives ("wait for all-gather", "wait for reduce-scatter")."""
    with open(trace_file) as f:
        events = json.load(f)["traceEvents"]
    chief = min(e["pid"] for e in events if e.get("ph") == "X")
    spans = [e for e in events if e.get("ph") == "X" and e["pid"] == chief]
    main = next(e["tid"] for e in spans if e["name"] == "forward")
    span = lambda e: [e["ts"], e["ts"] + e["dur"]]
    gathers = merged([span(e) for e in spans if e["name"] == "all-gather"])
    compute = subtract(merged([span(e) for e in spans if e["tid"] == main and e["name"] in ("forward", "backward")]),
                       merged([span(e) for e in spans if e["tid"] == main and e["name"].startswith("wait for")]))
    return sum(b - a for a, b in gathers) / 1e6, covered(gathers, compute) / 1e6


def fsdp_step_ms(tasks, batch, steps):
    here = os.path.dirname(os.path.abspath(__file__))
    venv = subprocess.run(["bash", os.path.join(here, "..", "scripts", "torch-venv.sh")], stdout=subprocess.PIPE,
                          text=True, check=True).stdout.strip()
    done = subprocess.run([venv, os.path.join(here, "torch_fsdp_reference.py"), "--workers", str(tasks), "--batch",
                           str(batch), "--threads", "1", "--steps", str(steps)], stdout=subprocess.PIPE, text=True,
                          check=True, timeout=1800)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtrain", default="build/dtrain")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--models", default="deep,mlp,gpt")
    p.add_argument("--tasks", default="2,4")
    p.add_argument("--json", default="")
    p.add_argument("--modes", default="", help="only these modes (labels separated by ';'; multi_worker_mirrored, "
                   "the base, always runs), and no FSDP2 or trace runs")
    a = p.parse_args()
    work = tempfile.mkdtemp()
    deep_config = os.path.join(work, "deep.json")
    with open(deep_config, "w") as f:
        json.dump(DEEP, f)
    models = {
        # (config, global batch, steps)
        "deep": (deep_config, 32, 20),
        "mlp": ("configs/fashion_mnist_mlp.json", 128, 200),
        "gpt": ("configs/gpt_fortunes.json", 32, 20),
    }
    rows = []
    print(f"# {a.repeats} run(s) each, medians; every task --threads 1 on this machine's cores")
    print(f"{'model':>5} {'tasks':>5}  {'mode':<22} {'step ms':>9} {'vs mwm':>7} {'comm':>6} "
          f"{'estimate/task':>14} {'measured/task':>14}")
    for name in a.models.split(","):
        config, batch, steps = models[name]
        for tasks in (int(t) for t in a.tasks.split(",")):
            base = None
            only = [m for m in a.modes.split(";") if m]
            for label, strategy, data_parallel in modes(tasks):
                if only and label not in only and label != "multi_worker_mirrored":
                    continue
                per_task = batch // tasks if data_parallel else batch if data_parallel is False else batch // 2
                results = [run(a.dtrain, config, tasks, strategy, per_task, steps) for _ in range(a.repeats)]
                chiefs = [r["worker:0"] for r in results]
                step = statistics.median(c["step_ms"] for c in chiefs)
                comm = statistics.median(c["comm_wait_share"] for c in chiefs)
                measured = statistics.median(max(t["memory"]["measured"]["training"] for t in r.values())
                                             for r in results)
                base = base or step
                row = {"model": name, "tasks": tasks, "mode": label, "step_ms": step, "relative": step / base,
                       "comm_share": comm, "memory_estimate_bytes": chiefs[0]["memory"]["total"],
                       "measured_training_bytes": measured}
                rows.append(row)
                print(f"{name:>5} {tasks:>5}  {label:<22} {step:>9.2f} {step / base:>6.2f}x {comm:>6.2f} "
                      f"{row['memory_estimate_bytes'] / 2**20:>10.1f} MiB {measured / 2**20:>10.1f} MiB", flush=True)
            if name == "deep" and not only:
                zero3 = next(r for r in rows if r["model"] == name and r["tasks"] == tasks and r["mode"] == "ZeRO-3")
                ref = fsdp_step_ms(tasks, batch // tasks, steps)
                rows.append({"model": name, "tasks": tasks, "mode": "pytorch FSDP2", **ref})
                print(f"{name:>5} {tasks:>5}  {'PyTorch FSDP2 (gloo)':<22} {ref['step_ms']:>9.2f}   "
                      f"dtrain ZeRO-3 / FSDP2: {zero3['step_ms'] / ref['step_ms']:.2f}x step time "
                      f"(FSDP2 peak RSS {ref['peak_rss_bytes'] / 2**20:.0f} MiB a process)", flush=True)
                for prefetch in (True, False):
                    trace_out = os.path.join(work, f"trace-{tasks}-{prefetch}")
                    run(a.dtrain, config, tasks, {"type": "multi_worker_mirrored", "shard": "parameters",
                                                  "prefetch": prefetch}, batch // tasks, steps, trace_out)
                    gathered, overlapped = prefetch_overlap(os.path.join(trace_out, "trace.json"))
                    hidden = overlapped / gathered if gathered > 0 else 0.0
                    rows.append({"model": name, "tasks": tasks, "mode": f"trace, prefetch {prefetch}",
                                 "all_gather_s": gathered, "overlapped_s": overlapped, "hidden": hidden})
                    print(f"{name:>5} {tasks:>5}  trace, prefetch {str(prefetch).lower():<6} the chief's all-gathers "
                          f"{gathered:.3f} s, {overlapped:.3f} s of it while its main thread computed: "
                          f"{100 * hidden:.0f}% hidden", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
