#!/usr/bin/env python3
"""PyTorch FSDP2 (fully_shard) reference for dtrain's strategy.shard "parameters".

What it measures
    The median time of a training step when N local processes train the deep
    MLP of bench/sharding_modes.py (12 Linear 1024 -> 1024 with ReLU, then
    Linear 1024 -> 10: 12.6 M parameters, Adam lr 1e-3, cross-entropy on
    logits) with torch.distributed.fsdp.fully_shard over the gloo backend: each
    Linear its own FSDP unit (as dtrain makes each Dense a unit), then the root;
    FSDP2's default reshard_after_forward=True (ZeRO-3) and its implicit
    forward and backward prefetch. Batch B per process, T intra-op threads
    (torch.set_num_threads), random inputs and labels drawn once (the step's
    cost does not depend on the values). Also each process's peak resident
    memory (ru_maxrss) after the steps.

How it runs
    This process starts N worker processes (subprocess, each with RANK,
    WORLD_SIZE, MASTER_ADDR/MASTER_PORT on a free localhost port), each:
    init_process_group("gloo"), the model, fully_shard, `--warmup` untimed steps,
    then `--steps` steps timed together between a barrier before and one after,
    divided by the steps.
    Rank 0 prints one JSON line: framework, torch_version, workers,
    batch_per_worker, threads, steps, step_ms, peak_rss_bytes (the largest of the
    ranks'). Every child is killed if this process ends early.

Usage (in the venv scripts/torch-venv.sh makes from PyPI)
    build/torch-venv/bin/python bench/torch_fsdp_reference.py --workers 4 --batch 8 --threads 1
"""
import argparse
import json
import os
import resource
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from local_processes import free_ports, run_children, timed_steps  # noqa: E402 (the bench folder's own module)


def make_model(torch, layers, width, classes):
    mods = []
    for i in range(layers):
        mods += [torch.nn.Linear(1024 if i == 0 else width, width), torch.nn.ReLU()]
    mods.append(torch.nn.Linear(width, classes))
    return torch.nn.Sequential(*mods)


def worker(args):
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    torch.set_num_threads(args.threads)
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(1)
    model = make_model(torch, args.layers, args.width, 10)
    for module in model:
        if isinstance(module, torch.nn.Linear):
            fully_shard(module)
    fully_shard(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(args.batch, 1024, generator=g)
    y = torch.randint(0, 10, (args.batch,), generator=g)

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()

    seconds = timed_steps(dist, step, args.warmup, args.steps)
    rss = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024], dtype=torch.float64)
    dist.all_reduce(rss, op=dist.ReduceOp.MAX)
    if rank == 0:
        print(json.dumps({"framework": "pytorch-fsdp2", "torch_version": torch.__version__, "workers": world,
                          "batch_per_worker": args.batch, "threads": args.threads, "steps": args.steps,
                          "step_ms": 1000.0 * seconds / args.steps, "peak_rss_bytes": int(rss.item())}))
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args)
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_ports(1)[0]), WORLD_SIZE=str(args.workers))
    argv = [sys.executable, os.path.abspath(__file__), "--worker"] + sys.argv[1:]
    run_children([(argv, dict(env, RANK=str(r))) for r in range(args.workers)], "FSDP2 worker", timeout=1800)


if __name__ == "__main__":
    main()
