"""torch.distributed's gloo all-reduce, measured like `dtrain bench allreduce`.

Starts N local processes (torch.multiprocessing), a gloo process group over a
FileStore-free TCP rendezvous on 127.0.0.1, and for each size: one checked
all-reduce of rank-dependent integers, warmup, a barrier, then `iterations` timed
all-reduces (float32 sum). Rank 0 prints one JSON line per size with the keys
bytes, ranks, iterations, time_us, algbw_gbps, busbw_gbps, correct (nccl-tests'
definitions: algbw = bytes / time, busbw = algbw * 2(n-1)/n).

    /usr/bin/python3 bench/torch_allreduce.py --workers 2 --sizes 4K:64M --iterations 20
"""
import argparse
import json
import os
import re
import socket
import time


def parse_sizes(text):
    def one(item):
        m = re.fullmatch(r"(\d+)([KMG]?)", item.strip().upper())
        if not m:
            raise SystemExit(f"bad size {item!r}")
        return int(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2)]
    if ":" in text:
        lo, hi = (one(x) for x in text.split(":"))
        sizes = []
        while lo <= hi:
            sizes.append(lo)
            lo *= 2
        return sizes
    return [one(x) for x in text.split(",")]


def worker(rank, size, port, sizes, iterations, warmup):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=size)
    for nbytes in sizes:
        n = nbytes // 4
        data = torch.full((n,), float(rank + 1))
        dist.all_reduce(data)
        correct = bool((data == float(size * (size + 1) // 2)).all())
        data.zero_()
        for _ in range(warmup):
            dist.all_reduce(data)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iterations):
            dist.all_reduce(data)
        seconds = (time.perf_counter() - start) / iterations
        t = torch.tensor([seconds])
        dist.all_reduce(t)
        seconds = t.item() / size
        if rank == 0:
            algbw = nbytes / seconds / 1e9
            print(json.dumps({"bytes": nbytes, "ranks": size, "iterations": iterations,
                              "time_us": seconds * 1e6, "algbw_gbps": algbw,
                              "busbw_gbps": algbw * 2 * (size - 1) / size, "correct": correct,
                              "framework": "torch.distributed gloo", "torch_version": torch.__version__}),
                  flush=True)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--sizes", default="4K:64M")
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()
    import torch.multiprocessing as mp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(args.workers, port, parse_sizes(args.sizes), args.iterations, args.warmup),
             nprocs=args.workers)


if __name__ == "__main__":
    main()
