"""Helpers the reference benchmarks share to run a local cluster of worker
processes: free localhost ports, running children to the end (each killed
if this process stops waiting early), and timing a worker's steps."""
import socket
import time
import subprocess
import sys


def free_ports(n):
    """n different free ports of 127.0.0.1 (all bound at once, then released)."""
    held = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        held.append(s)
    ports = [s.getsockname()[1] for s in held]
    for s in held:
        s.close()
    return ports


def run_children(commands, what, timeout=900):
    """Runs (argv, env) pairs at once and waits for all; exits naming `what` if one fails."""
    children = [subprocess.Popen(argv, env=env) for argv, env in commands]
    try:
        codes = [c.wait(timeout=timeout) for c in children]
    finally:
        for c in children:
            if c.poll() is None:
                c.kill()
    if any(codes):
        sys.exit(f"a {what} failed: exit codes {codes}")


def timed_steps(dist, step, warmup, steps):
    """Seconds `steps` calls of step() take on every worker together: `warmup`
    untimed calls, then the timed ones between two barriers."""
    for _ in range(warmup):
        step()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    dist.barrier()
    return time.perf_counter() - start
