#!/usr/bin/env python3
"""PyTorch DistributedDataParallel reference for dtrain's multi_worker_mirrored.

What it measures
    Samples per second of the whole job (every worker's samples) when N local
    processes train the Fashion-MNIST MLP or CNN (bench/torch_reference.py's
    twins of dtrain's configs) with torch.nn.parallel.DistributedDataParallel
    over the gloo backend, as `dtrain launch --workers N` trains them with
    multi_worker_mirrored: batch B per worker, T intra-op threads per process
    (torch.set_num_threads), Adam lr 1e-3, cross-entropy on logits.

How it runs
    This process starts N worker processes (subprocess, each with RANK,
    WORLD_SIZE, MASTER_ADDR/MASTER_PORT on a free localhost port), each:
    init_process_group("gloo"), DDP(model) (default 25 MiB buckets, as
    dtrain's strategy.bytes_per_pack default), `--warmup` untimed steps, a
    barrier, `--steps` timed steps, a barrier. Each worker draws its own
    shuffled batches of the training set (seed + rank): disjoint enough for a
    throughput figure. Rank 0 prints one JSON line: framework, torch_version,
    workers, batch_per_worker, threads, steps, seconds, samples_per_sec (the
    job's: steps * B * N / seconds). Every child is killed if this process
    ends early.

Usage (in the venv scripts/torch-venv.sh makes from PyPI)
    build/torch-venv/bin/python bench/torch_ddp_reference.py --model mlp \
        --workers 2 --batch 64 --threads 1 --steps 300 --warmup 20
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from local_processes import free_ports, run_children, timed_steps  # noqa: E402 (the bench folder's own module)


def worker(args):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    import torch_reference as ref

    torch.set_num_threads(args.threads)
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(args.seed)
    model = DistributedDataParallel(ref.make_model(args.model))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    x, y = ref.load_train_set(args.data_dir)
    sampler = ref.BatchSampler(x, y, args.batch, torch.Generator().manual_seed(args.seed + rank))
    model.train()

    def step():
        images, labels = sampler.next()
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(images), labels)
        loss.backward()
        optimizer.step()
        # The job's mean loss, as dtrain reports it every step.
        reported = loss.detach().clone()
        dist.all_reduce(reported)

    seconds = timed_steps(dist, step, args.warmup, args.steps)
    if rank == 0:
        print(json.dumps({"framework": "pytorch-ddp-gloo", "torch_version": torch.__version__,
                          "model": args.model, "workers": world, "batch_per_worker": args.batch,
                          "threads": args.threads, "steps": args.steps, "seconds": seconds,
                          "samples_per_sec": args.steps * args.batch * world / seconds}), flush=True)
    # Leave together and without Gloo's teardown: a rank that closes its
    # sockets first can make the other abort in its own teardown.
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--model", choices=["mlp", "cnn"], required=True)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--as-worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.as_worker:
        return worker(args)

    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_ports(1)[0]), WORLD_SIZE=str(args.workers),
               OMP_NUM_THREADS=str(args.threads))
    argv = [sys.executable, os.path.abspath(__file__), "--as-worker"] + sys.argv[1:]
    run_children([(argv, dict(env, RANK=str(r))) for r in range(args.workers)], "DDP worker")

if __name__ == "__main__":
    main()
