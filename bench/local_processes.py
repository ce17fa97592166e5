"""Helpers the reference benchmarks share to run a local cluster of worker
processes: free localhost ports, and running children to the end (each killed
if this process stops waiting early)."""
import socket
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
