#!/usr/bin/env python3
"""One worker of the torchrun side of bench/elastic_kill.py (issue 36).

torchrun (torch.distributed.run, its elastic agent) starts it with RANK,
WORLD_SIZE, MASTER_ADDR/PORT and TORCHELASTIC_RESTART_COUNT set. It trains the
Fashion-MNIST CNN (bench/torch_reference.py's twin of dtrain's CNN config) with
DistributedDataParallel over gloo, the global batch split over the workers
(Adam lr 1e-3), and writes one line per step done to its own file in
$ELASTIC_BENCH_OUT (rank<LOCAL_RANK>-<pid>.steps):

    STEP <restart count> <step> <unix time> <world size>

with a START line when the process begins. A worker started before the kill
trains until it is killed or its agent stops it (bench/elastic_kill.py kills
one worker, then creates the file $ELASTIC_BENCH_MARKER); one started after it
(the agent restarted every worker) trains --steps-after-restart steps and
exits 0.
It loads no checkpoint: a real job's restart would also read one, which the
time to train again does not count here.
"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    out = open(os.path.join(os.environ["ELASTIC_BENCH_OUT"], f"rank{os.environ['LOCAL_RANK']}-{os.getpid()}.steps"),
               "w", buffering=1)
    out.write(f"START {int(os.environ.get('TORCHELASTIC_RESTART_COUNT', '0'))} {time.time()}\n")
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--global-batch", type=int, default=384)
    parser.add_argument("--steps-after-restart", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    sys.path.insert(0, HERE)
    import torch_reference as ref

    torch.set_num_threads(args.threads)
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    after_kill = os.path.exists(os.environ["ELASTIC_BENCH_MARKER"])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    # The agent's store under a prefix of this start's own: with the default
    # env:// init, the restarted workers' Gloo connected to the addresses of the
    # previous start ("Connection refused") until the restarts ran out (torch 2.15).
    store = dist.PrefixStore(f"elastic-bench/{restart}/",
                             dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world,
                                           is_master=False))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
    torch.manual_seed(1)
    model = DistributedDataParallel(ref.make_model("cnn"))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    x, y = ref.load_train_set(args.data_dir)
    sampler = ref.BatchSampler(x, y, args.global_batch // world, torch.Generator().manual_seed(1 + rank))
    model.train()
    step = 0
    while not after_kill or step < args.steps_after_restart:
        images, labels = sampler.next()
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(images), labels).backward()
        optimizer.step()
        step += 1
        out.write(f"STEP {restart} {step} {time.time()} {world}\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
