#!/usr/bin/env python3
"""TensorFlow MultiWorkerMirroredStrategy reference for dtrain's multi_worker_mirrored.

What it measures
    Samples per second of the whole job when N local worker processes train the
    Fashion-MNIST MLP (configs/fashion_mnist_mlp.json: Flatten, Dense 256 relu,
    Dense 128 relu, Dense 10 logits) or CNN (configs/fashion_mnist_cnn.json:
    Conv2D 32 3x3 valid relu, MaxPool 2, Flatten, Dense 64 relu, Dropout 0.25,
    Dense 10) with tf.distribute.MultiWorkerMirroredStrategy and tf-keras
    Model.fit, as TF's multi-worker tutorial runs it: every worker is its own
    process with its own TF_CONFIG ({"worker": [N localhost ports]}), worker 0
    is the chief. Batch B per worker (the dataset is batched by the global
    batch B*N; Keras splits it over the workers), T intra- and inter-op threads
    per process, Adam lr 1e-3, sparse categorical cross-entropy on logits.

Timing
    A Keras callback on the chief times batches `--warmup`..`--warmup + --steps`
    (the first batches trace the function and set up the collectives);
    samples_per_sec = steps * B * N / those seconds. Worker processes are
    started by this script and killed when it ends.

Usage (in the venv scripts/tf-venv.sh makes from PyPI)
    build/tf-venv/bin/python bench/tf_mwms_reference.py --model mlp --workers 2 \
        --batch 64 --threads 1 --steps 200 --warmup 20
Prints one JSON line (from the chief).
"""
import argparse
import gzip
import json
import os
import sys
import time

os.environ["TF_USE_LEGACY_KERAS"] = "1"  # tf.keras is tf-keras (Keras 2)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

DATA_DIR = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    import numpy as np

    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def build_model(tf, name):
    layers = tf.keras.layers
    if name == "mlp":
        body = [layers.Flatten(), layers.Dense(256, activation="relu"), layers.Dense(128, activation="relu"),
                layers.Dense(10)]
    else:
        body = [layers.Conv2D(32, 3, activation="relu"), layers.MaxPooling2D(2), layers.Flatten(),
                layers.Dense(64, activation="relu"), layers.Dropout(0.25), layers.Dense(10)]
    model = tf.keras.Sequential([tf.keras.Input((28, 28, 1))] + body)
    model.compile(optimizer=tf.keras.optimizers.Adam(1e-3),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    return model


def worker(args, index):
    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(max(args.threads, 2))
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    x = (read_idx(os.path.join(DATA_DIR, "train-images-idx3-ubyte.gz")).astype(np.float32) / 255.0)[..., None]
    y = read_idx(os.path.join(DATA_DIR, "train-labels-idx1-ubyte.gz")).astype(np.int64)
    global_batch = args.batch * args.workers
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    data = (tf.data.Dataset.from_tensor_slices((x, y)).shuffle(60000, seed=args.seed).repeat()
            .batch(global_batch, drop_remainder=True).with_options(options).prefetch(2))
    with strategy.scope():
        model = build_model(tf, args.model)

    marks = {}

    class Timer(tf.keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if batch == args.warmup:
                marks["start"] = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            if batch == args.warmup + args.steps - 1:
                marks["end"] = time.perf_counter()

    model.fit(data, epochs=1, steps_per_epoch=args.warmup + args.steps, callbacks=[Timer()], verbose=0)
    if index == 0:
        seconds = marks["end"] - marks["start"]
        print(json.dumps({"framework": "tensorflow-mwms", "tensorflow_version": tf.__version__, "model": args.model,
                          "workers": args.workers, "batch_per_worker": args.batch, "threads": args.threads,
                          "steps": args.steps, "seconds": seconds,
                          "samples_per_sec": args.steps * global_batch / seconds}), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--model", choices=["mlp", "cnn"], required=True)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64, help="batch per worker")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--as-worker", type=int, default=-1, help=argparse.SUPPRESS)
    ap.add_argument("--cluster", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.as_worker >= 0:
        os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": args.cluster.split(",")},
                                             "task": {"type": "worker", "index": args.as_worker}})
        return worker(args, args.as_worker)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from local_processes import free_ports, run_children

    cluster = ",".join(f"localhost:{p}" for p in free_ports(args.workers))
    argv = [sys.executable, os.path.abspath(__file__)] + sys.argv[1:] + ["--cluster", cluster]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    run_children([(argv + ["--as-worker", str(i)], env) for i in range(args.workers)], "TensorFlow worker")

if __name__ == "__main__":
    main()
