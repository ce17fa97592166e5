#!/usr/bin/python3
"""PyTorch reference for `dtrain bench train`: CPU training throughput on Fashion-MNIST.

What it measures
    Samples per second of full training steps -- fetch a mini-batch, forward,
    loss, backward, optimizer update -- for the two models dtrain ships configs
    for, in eager mode with model.train():

      mlp  (configs/fashion_mnist_mlp.json): Flatten, Linear 784->256 relu,
           Linear 256->128 relu, Linear 128->10
      cnn  (configs/fashion_mnist_cnn.json): Conv2d 1->32 3x3 valid relu,
           MaxPool2d 2, Flatten, Linear 5408->64 relu, Dropout 0.25,
           Linear 64->10

    Both use CrossEntropyLoss on logits (dtrain: sparse categorical
    cross-entropy from logits) and Adam with lr 1e-3.

How it matches dtrain's bench
    * Same data: the real Fashion-MNIST training set, read from the IDX .gz
      files, scaled to float32 in [0, 1]. Images are NCHW (N, 1, 28, 28),
      PyTorch's natural layout; dtrain uses NHWC, its natural layout.
    * Same kind of data path, kept cheap: the whole set is pre-loaded as one
      float tensor and every step gathers a batch through a shuffled
      permutation (reshuffled each epoch, incomplete last batch dropped, as
      dtrain's bench does with drop_remainder). The gather is inside the timed
      region, as dtrain's pipeline is.
    * Same timing: `--warmup` untimed steps, then `--steps` timed steps;
      seconds is wall time of the timed steps, samples_per_sec is
      steps * batch / seconds.
    * Same thread count: torch.set_num_threads(T) (intra-op threads).
    * Initialisation differs (PyTorch defaults); it does not affect speed.
    * `--autocast bfloat16` runs forward and loss under
      torch.autocast("cpu", dtype=torch.bfloat16), PyTorch's mixed precision
      (dtrain: train.precision mixed_bfloat16); parameters and Adam stay float32.

Output: one JSON line with dtrain's keys (config, batch_size, threads, steps,
seconds, samples_per_sec) plus "framework": "pytorch", "torch_version" and
"blas" (the BLAS library PyTorch's Linear layers ran on; see loaded_blas()).

Usage
    /usr/bin/python3 bench/torch_reference.py --model mlp --batch 128 \
        --threads 1 --steps 300 --warmup 10
"""
import argparse
import gzip
import json
import os
import re
import struct
import sys
import time

import numpy as np
import torch
from torch import nn

DEFAULT_DATA_DIR = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    """Reads one (optionally gzipped) IDX file into a numpy array of its shape."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    # Header: two zero bytes, a type code (0x08 = unsigned byte), the number of
    # dimensions, then one big-endian uint32 per dimension.
    zero, dtype_code, ndim = struct.unpack(">HBB", raw[:4])
    if zero != 0 or dtype_code != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    return data.reshape(dims)


def load_train_set(data_dir):
    """Returns (images float32 (N, 1, 28, 28) in [0, 1], labels int64 (N,))."""
    images = read_idx(os.path.join(data_dir, "train-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(data_dir, "train-labels-idx1-ubyte.gz"))
    if images.shape[0] != labels.shape[0]:
        raise ValueError("image and label counts differ")
    x = torch.from_numpy(images.astype(np.float32) / 255.0).unsqueeze(1).contiguous()
    y = torch.from_numpy(labels.astype(np.int64))
    return x, y


def loaded_blas():
    """Path of the BLAS library this process loaded (PyTorch's Linear layers run on it).

    Debian's PyTorch has no MKL: Linear goes to whatever libblas.so.3 resolves
    to, which is the slow netlib reference BLAS unless an optimised one
    (OpenBLAS, BLIS) is installed or put first on LD_LIBRARY_PATH. Reported so
    that a comparison says which one it measured.
    """
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "/" in line}
    except OSError:
        return "unknown"
    for path in sorted(paths):
        name = os.path.basename(path)
        if re.match(r"lib(open)?blas|libblis|libmkl_rt", name):
            return os.path.realpath(path)
    return "none"


def make_model(name):
    """The PyTorch twin of dtrain's config for `name`."""
    if name == "mlp":
        return nn.Sequential(
            nn.Flatten(),
            nn.Linear(28 * 28, 256), nn.ReLU(),
            nn.Linear(256, 128), nn.ReLU(),
            nn.Linear(128, 10),
        )
    if name == "cnn":
        return nn.Sequential(
            nn.Conv2d(1, 32, kernel_size=3), nn.ReLU(),   # valid padding: 26x26
            nn.MaxPool2d(2),                              # 13x13
            nn.Flatten(),
            nn.Linear(32 * 13 * 13, 64), nn.ReLU(),
            nn.Dropout(0.25),
            nn.Linear(64, 10),
        )
    raise ValueError(f"unknown model {name!r}")


class BatchSampler:
    """Endless shuffled mini-batches from pre-loaded tensors, dropping the remainder."""

    def __init__(self, x, y, batch, generator):
        if batch > x.shape[0]:
            raise ValueError("batch larger than the data set")
        self.x, self.y, self.batch, self.gen = x, y, batch, generator
        self.per_epoch = x.shape[0] // batch
        self._new_epoch()

    def _new_epoch(self):
        self.perm = torch.randperm(self.x.shape[0], generator=self.gen)
        self.pos = 0

    def next(self):
        if self.pos == self.per_epoch:
            self._new_epoch()
        idx = self.perm[self.pos * self.batch:(self.pos + 1) * self.batch]
        self.pos += 1
        return self.x.index_select(0, idx), self.y.index_select(0, idx)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--model", choices=["mlp", "cnn"], required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data-dir", default=DEFAULT_DATA_DIR)
    ap.add_argument("--autocast", choices=["off", "bfloat16"], default="off",
                    help="run forward and loss under torch.autocast('cpu', dtype=torch.bfloat16)")
    args = ap.parse_args(argv)
    for name in ("batch", "threads", "steps"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be positive")
    if args.warmup < 0:
        ap.error("--warmup must be non-negative")

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    x, y = load_train_set(args.data_dir)
    sampler = BatchSampler(x, y, args.batch, torch.Generator().manual_seed(args.seed))
    model = make_model(args.model)
    model.train()
    loss_fn = nn.CrossEntropyLoss()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    autocast = args.autocast == "bfloat16"

    def step():
        xb, yb = sampler.next()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()
        return loss

    for _ in range(args.warmup):
        step()
    start = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    seconds = time.perf_counter() - start
    if not torch.isfinite(loss):  # a cheap sanity check that training is real
        print(f"torch_reference: loss is {loss.item()}", file=sys.stderr)
        return 1

    print(json.dumps({
        "config": args.model,
        "batch_size": args.batch,
        "threads": args.threads,
        "steps": args.steps,
        "seconds": seconds,
        "samples_per_sec": args.steps * args.batch / max(seconds, 1e-9),
        "framework": "pytorch",
        "autocast": args.autocast,
        "torch_version": torch.__version__,
        "blas": loaded_blas(),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
