#!/usr/bin/env python3
"""TensorFlow reference for dtrain's parameter-server strategy: Fashion-MNIST
MLP trained with tf.distribute.ParameterServerStrategy and tf-keras Model.fit.

What it does
    Starts a local cluster of real processes on free localhost ports -- M ps
    tasks and N worker tasks, each `tf.distribute.Server(...).join()` in its
    own process with its own TF_CONFIG -- and runs the chief (the coordinator,
    which calls model.fit) in this process. Every child is killed on exit
    (try/finally, plus PR_SET_PDEATHSIG, plus a wall-clock watchdog).

Model and training (dtrain's configs/fashion_mnist_mlp.json)
    Flatten(28,28,1) -> Dense 256 relu -> Dense 128 relu -> Dense 10 (logits);
    SparseCategoricalCrossentropy(from_logits=True); Adam, constant lr 1e-3
    (the config's cosine decay is not reproduced); metric accuracy. Data: the
    IDX .gz files read with gzip + numpy, pixels / 255.

How TF's PS training maps onto dtrain's options
    * Under ParameterServerStrategy the coordinator schedules each training
      step (a tf.function closure of `steps_per_execution` steps) on whichever
      worker is free; workers run asynchronously and read/update variables on
      the ps tasks. The chief only coordinates, it computes no gradients.
    * Every worker builds its own copy of the dataset from the dataset
      function; the InputContext it gets says num_input_pipelines=1,
      input_pipeline_id=0, num_replicas_in_sync=1 (CPU workers), so
      sharding by it is a no-op and get_per_replica_batch_size(b) == b. Each
      worker reads the full training set, shuffled independently (no seed).
    * One step therefore consumes ONE batch on ONE worker. To match dtrain's
      "batch per worker B" the dataset batch is B (not B*N: that would make
      every step process B*N samples on a single worker). An epoch is
      60000 // B steps, i.e. one pass worth of samples across all workers
      together (each worker does about 60000 / (B*N) steps of it).
    * Threads: --threads T sets intra- and inter-op threads in every process,
      except that workers get max(T, 2) inter-op threads: with 1 a worker
      deadlocks on the first step (TF 2.21), see server_inter_op_threads().
    * Model.fit needs steps_per_epoch with PSS (the dataset repeats forever).
      At the end of every epoch Keras joins the coordinator, so per-epoch wall
      times cover all scheduled steps.

Timing
    samples_per_sec = samples of epochs 2..E / their wall seconds (epoch 1
    includes tracing and dataset creation on the workers and is reported
    separately as samples_per_sec_first_epoch); with --epochs 1 it is the
    first epoch's rate. Process startup and connection are not timed.
    Test accuracy: the trained weights are copied into a plain local model
    (no strategy) on the chief and evaluated on the 10k test set.

Usage
    bash scripts/tf-venv.sh     # creates build/tf-venv
    build/tf-venv/bin/python bench/tf_ps_reference.py --workers 2 --ps 1 \\
        --epochs 2 --batch 64 --threads 1 --json
"""
import argparse
import gzip
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

os.environ["TF_USE_LEGACY_KERAS"] = "1"  # tf.keras is tf-keras (Keras 2)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

DATA_DIR = "/usr/share/datasets/fashion-mnist"
TRAIN_SAMPLES = 60000


def read_idx(path):
    """Reads a gzip'ed IDX file (ubyte data) into a numpy uint8 array."""
    import numpy as np

    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    arr = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    return arr.reshape(dims)


def load_split(split):
    prefix = "train" if split == "train" else "t10k"
    images = read_idx(os.path.join(DATA_DIR, f"{prefix}-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(DATA_DIR, f"{prefix}-labels-idx1-ubyte.gz"))
    return images.reshape(-1, 28, 28, 1), labels.astype("int32")


def free_ports(n):
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def die_with_parent():
    """preexec_fn: the child gets SIGKILL when this process dies."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def server_inter_op_threads(task_type, threads):
    """A worker whose inter-op pool has one thread deadlocks under PSS (the
    first scheduled train_function never finishes; measured with TF 2.21), so
    workers get at least 2 inter-op threads. ps tasks run with `threads`."""
    return max(threads, 2) if task_type == "worker" else threads


def run_server(threads):
    """Body of a worker / ps process: serve until killed."""
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    config = tf.compat.v1.ConfigProto(
        intra_op_parallelism_threads=threads,
        inter_op_parallelism_threads=server_inter_op_threads(resolver.task_type, threads),
    )
    server = tf.distribute.Server(
        resolver.cluster_spec(),
        job_name=resolver.task_type,
        task_index=resolver.task_id,
        protocol="grpc",
        config=config,
        start=True,
    )
    server.join()


def build_model(tf):
    return tf.keras.Sequential([
        tf.keras.layers.Flatten(input_shape=(28, 28, 1)),
        tf.keras.layers.Dense(256, activation="relu"),
        tf.keras.layers.Dense(128, activation="relu"),
        tf.keras.layers.Dense(10),
    ])


def compile_model(tf, model, steps_per_execution=1):
    model.compile(
        optimizer=tf.keras.optimizers.Adam(learning_rate=0.001),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        steps_per_execution=steps_per_execution,
    )


def wait_for_ports(procs, deadline):
    for name, proc, addr in procs:
        host, port = addr.rsplit(":", 1)
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited early with status {proc.returncode}")
            try:
                with socket.create_connection((host, int(port)), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{name} did not listen on {addr}")
                time.sleep(0.2)


def run_chief(args):
    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)

    x_train, y_train = load_split("train")
    x_test, y_test = load_split("test")
    x_test = (x_test.astype(np.float32) / 255.0)

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    partitioner = None
    if args.partition and args.ps > 1:
        partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
            min_shard_bytes=256 << 10, max_shards=args.ps)
    strategy = tf.distribute.ParameterServerStrategy(
        resolver, variable_partitioner=partitioner)

    batch = args.batch
    seen_context = {}

    def dataset_fn(input_context):
        # Runs (is traced) once per worker; see the module docstring.
        seen_context.update(
            num_input_pipelines=input_context.num_input_pipelines,
            input_pipeline_id=input_context.input_pipeline_id,
            num_replicas_in_sync=input_context.num_replicas_in_sync)
        per_replica = input_context.get_per_replica_batch_size(batch)
        ds = tf.data.Dataset.from_tensor_slices((x_train, y_train))
        ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        ds = ds.shuffle(TRAIN_SAMPLES, reshuffle_each_iteration=True).repeat()
        ds = ds.batch(per_replica, drop_remainder=True)
        ds = ds.map(lambda x, y: (tf.cast(x, tf.float32) / 255.0, y))
        return ds.prefetch(2)

    steps_per_epoch = TRAIN_SAMPLES // batch
    if args.steps_per_epoch:
        steps_per_epoch = min(steps_per_epoch, args.steps_per_epoch)

    with strategy.scope():
        model = build_model(tf)
        compile_model(tf, model, args.steps_per_execution)

    class EpochTimer(tf.keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.times = []
            self.logs = []

        def on_epoch_begin(self, epoch, logs=None):
            self._t0 = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            self.times.append(time.perf_counter() - self._t0)
            self.logs.append(dict(logs or {}))

    timer = EpochTimer()
    model.fit(
        tf.keras.utils.experimental.DatasetCreator(dataset_fn),
        epochs=args.epochs,
        steps_per_epoch=steps_per_epoch,
        callbacks=[timer],
        verbose=0,
    )

    samples_per_epoch = steps_per_epoch * batch
    first = samples_per_epoch / timer.times[0]
    if len(timer.times) > 1:
        rest = sum(timer.times[1:])
        sps = samples_per_epoch * (len(timer.times) - 1) / rest
    else:
        sps = first

    local = build_model(tf)
    local.set_weights(model.get_weights())
    compile_model(tf, local)
    _, test_acc = local.evaluate(x_test, y_test, batch_size=1000, verbose=0)

    return {
        "framework": "tensorflow",
        "strategy": "parameter_server",
        "workers": args.workers,
        "ps": args.ps,
        "batch_per_worker": batch,
        "threads": args.threads,
        "epochs": args.epochs,
        "samples_per_sec": round(sps, 1),
        "test_accuracy": round(float(test_acc), 4),
        "tf_version": tf.__version__,
        "samples_per_sec_first_epoch": round(first, 1),
        "epoch_seconds": [round(t, 3) for t in timer.times],
        "steps_per_epoch": steps_per_epoch,
        "steps_per_execution": args.steps_per_execution,
        "train_accuracy": round(float(timer.logs[-1].get("accuracy", float("nan"))), 4),
        "input_context": seen_context,
        "partitioned": partitioner is not None,
        "worker_inter_op_threads": server_inter_op_threads("worker", args.threads),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--ps", type=int, default=1)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=64, help="batch per step (= per worker)")
    p.add_argument("--threads", type=int, default=1, help="intra/inter-op threads per process")
    p.add_argument("--steps-per-epoch", type=int, default=None, help="cap on steps per epoch")
    p.add_argument("--steps-per-execution", type=int, default=1,
                   help="steps per scheduled closure (Keras compile option)")
    p.add_argument("--partition", action="store_true",
                   help="shard variables over the ps tasks (MinSizePartitioner)")
    p.add_argument("--timeout", type=float, default=900, help="wall-clock guard, seconds")
    p.add_argument("--json", action="store_true")
    p.add_argument("--_server", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()

    if args._server:
        run_server(args.threads)
        return 0

    if args.workers < 1 or args.ps < 1:
        p.error("--workers and --ps must be >= 1")

    ports = free_ports(1 + args.workers + args.ps)
    addr = [f"localhost:{port}" for port in ports]
    cluster = {
        "chief": addr[:1],
        "worker": addr[1:1 + args.workers],
        "ps": addr[1 + args.workers:],
    }
    log_dir = tempfile.mkdtemp(prefix="tf_ps_reference.")
    procs = []  # (name, Popen, address)
    logs = []

    def kill_children():
        for _, proc, _ in procs:
            if proc.poll() is None:
                proc.kill()
        for _, proc, _ in procs:
            try:
                proc.wait(timeout=10)
            except Exception:
                pass
        for f in logs:
            f.close()

    def watchdog():
        sys.stderr.write(f"tf_ps_reference: wall-clock guard ({args.timeout:.0f} s) hit, "
                         f"killing the cluster; logs in {log_dir}\n")
        sys.stderr.flush()
        kill_children()
        os._exit(124)

    guard = threading.Timer(args.timeout, watchdog)
    guard.daemon = True
    guard.start()
    t_start = time.monotonic()
    status = 1
    try:
        for job in ("ps", "worker"):
            for i in range(len(cluster[job])):
                env = dict(os.environ)
                env["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {"type": job, "index": i}})
                log = open(os.path.join(log_dir, f"{job}{i}.log"), "w")
                logs.append(log)
                proc = subprocess.Popen(
                    [sys.executable, os.path.abspath(__file__), "--_server",
                     "--threads", str(args.threads)],
                    env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    preexec_fn=die_with_parent)
                procs.append((f"{job}{i}", proc, cluster[job][i]))
        os.environ["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {"type": "chief", "index": 0}})
        wait_for_ports(procs, time.monotonic() + 120)

        result = run_chief(args)
        result["wall_seconds"] = round(time.monotonic() - t_start, 1)
        print(f"tensorflow PSS: {args.workers} workers, {args.ps} ps, batch {args.batch}/step, "
              f"{args.threads} thread(s), {args.epochs} epoch(s): "
              f"{result['samples_per_sec']:.0f} samples/s "
              f"(first epoch {result['samples_per_sec_first_epoch']:.0f}), "
              f"test accuracy {result['test_accuracy']:.4f}, TF {result['tf_version']}, "
              f"wall {result['wall_seconds']} s", flush=True)
        if args.json:
            print(json.dumps(result), flush=True)
        status = 0
    except BaseException:
        import traceback

        traceback.print_exc()
        sys.stderr.write(f"tf_ps_reference: failed; child logs in {log_dir}\n")
    finally:
        guard.cancel()
        kill_children()
        if status == 0:
            shutil.rmtree(log_dir, ignore_errors=True)  # kept on failure
    sys.stdout.flush()
    sys.stderr.flush()
    # The coordinator keeps non-daemon threads alive; leave without joining them.
    os._exit(status)


if __name__ == "__main__":
    sys.exit(main())
