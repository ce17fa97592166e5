#!/usr/bin/env python3
"""PyTorch's TCPStore (its default server) under N clients doing a rendezvous.

The reference for `dtrain bench rendezvous` (scripts/bench-rendezvous.sh): one
TCPStore server in this process and N clients, one thread each, in worker
processes of up to 1,000 (as dtrain's benchmark), all released at once when
every process is ready. Each client does what a dtrain task does up to its
barrier, in TCPStore's calls: set its join key (a description of the job's size),
then rank 0 waits for every join key, reads them all (multi_get) and sets the
roster, and every other rank waits for the roster and reads it. The time is
from the release to the last client past the barrier (CLOCK_MONOTONIC, the same
clock in every process). TCPStore has no authentication and no heartbeats; its
clients hold one connection each (dtrain's: two, each authenticated).

Prints one JSON line per N: {"tasks", "barrier_seconds", "last_connected_seconds" (when
the last client's connection was up), "requests", "requests_per_second"}. Each new
connection makes the client look up the name of its own address (a reverse DNS
query for ::ffff:127.0.0.1, which /etc/hosts does not answer): where the DNS
server is slow to answer many at once, connections wait for the resolver's
timeout, and last_connected_seconds shows it.
Usage: torch_tcpstore_reference.py --tasks 8,64,512,4096
"""
import argparse
import json
import os
import subprocess
import sys
import threading
import time
from datetime import timedelta

PER_PROCESS = 1000
DESCRIPTION = "x" * 900  # about a dtrain task's join value (machine, hashes, the job document)


def client_rendezvous(port, rank, tasks, timeout):
    import torch.distributed as dist
    store = dist.TCPStore("127.0.0.1", port, is_master=False, wait_for_workers=False,
                          timeout=timedelta(seconds=timeout))
    connected = time.monotonic_ns()
    store.set(f"join/{rank}", DESCRIPTION)
    if rank == 0:
        keys = [f"join/{i}" for i in range(tasks)]
        store.wait(keys)
        values = store.multi_get(keys)
        store.set("roster", "%d machines" % len({bytes(v[:8]) for v in values}))
        requests = 4
    else:
        store.wait(["roster"])
        store.get("roster")
        requests = 3
    return store, requests, connected


def run_slice(port, tasks, first, count, timeout):
    """A worker process: `count` clients from rank `first`, started when stdin closes."""
    import torch.distributed  # noqa: F401  (imported before "ready": not timed)
    go = threading.Event()
    joined = [0] * count
    connected = [0] * count
    errors = []
    stores = []

    def body(i):
        go.wait()
        try:
            store, _, connected[i] = client_rendezvous(port, first + i, tasks, timeout)
            stores.append(store)
            joined[i] = time.monotonic_ns()
        except Exception as e:  # reported to the parent
            errors.append(f"rank {first + i}: {e}")

    threads = [threading.Thread(target=body, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    print("ready", flush=True)
    sys.stdin.read()
    go.set()
    for t in threads:
        t.join()
    if errors:
        print("error " + errors[0].replace("\n", " "), flush=True)
        return 1
    print(f"joined {max(joined)} {max(connected)}", flush=True)
    return 0


def run_one(tasks, timeout):
    import torch.distributed as dist
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                           timeout=timedelta(seconds=timeout))
    port = server.port
    children = []
    for first in range(1, tasks, PER_PROCESS):
        count = min(PER_PROCESS, tasks - first)
        children.append(subprocess.Popen(
            [sys.executable, __file__, "--slice", f"{first}:{count}", "--port", str(port),
             "--tasks-in-job", str(tasks), "--timeout", str(timeout)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
    for c in children:
        line = c.stdout.readline().strip()
        if line != "ready":
            raise RuntimeError(f"a client process said {line!r} instead of 'ready'")
    started = time.monotonic_ns()
    for c in children:
        c.stdin.close()
    store, requests, last_connected = client_rendezvous(port, 0, tasks, timeout)
    last = time.monotonic_ns()
    for c in children:
        line = c.stdout.readline().strip()
        if not line.startswith("joined "):
            raise RuntimeError(f"a client process said {line!r}")
        last = max(last, int(line.split()[1]))
        last_connected = max(last_connected, int(line.split()[2]))
        c.wait(timeout=60)
    seconds = (last - started) / 1e9
    requests += 3 * (tasks - 1)
    del store, server
    return {"tasks": tasks, "barrier_seconds": seconds,
            "last_connected_seconds": (last_connected - started) / 1e9, "requests": requests,
            "requests_per_second": requests / seconds}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", default="8,64,512,4096")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--slice", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--tasks-in-job", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.slice:
        first, count = (int(x) for x in args.slice.split(":"))
        return run_slice(args.port, args.tasks_in_job, first, count, args.timeout)
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    for n in (int(x) for x in args.tasks.split(",")):
        print(json.dumps(run_one(n, args.timeout)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
