#!/usr/bin/env python3
"""Writes the whole Fashion-MNIST as TFRecord files made by TensorFlow itself,
the input for dtrain's `tfrecord` data format in benchmarks and demos.

    python bench/fashion_mnist_to_tfrecord.py [OUT_DIR] [--data-dir DIR] [--force]

OUT_DIR (default build/fashion-mnist-tfrecord) receives
    train-00000-of-00004.tfrecord.gz .. train-00003-of-00004.tfrecord.gz
        the 60000 training samples in IDX order, 15000 per file (file K holds
        samples 15000*K .. 15000*K+14999), GZIP-compressed
        (tf.io.TFRecordOptions(compression_type="GZIP"));
    test.tfrecord
        the 10000 test samples in IDX order, uncompressed.
Every record is a tf.train.Example with `image` (bytes_list, one value: the 784
raw uint8 pixels, row-major 28x28) and `label` (int64_list, one value), written
with tf.io.TFRecordWriter; the same layout as tests/fixtures/tfrecord/.

Each file is written under a temporary name and renamed when complete; files
already there are kept unless --force. Runs in the venv scripts/tf-venv.sh
makes (scripts/fashion-mnist-tfrecord.sh calls it); never run by the tests.
"""
import argparse
import gzip
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

TRAIN_SHARDS = 4


def read_idx(path, magic_expected):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic = int.from_bytes(data[0:4], "big")
    if magic != magic_expected:
        sys.exit(f"{path}: IDX magic {magic}, expected {magic_expected}")
    n = int.from_bytes(data[4:8], "big")
    if magic == 2051:
        rows, cols = int.from_bytes(data[8:12], "big"), int.from_bytes(data[12:16], "big")
        if (rows, cols) != (28, 28):
            sys.exit(f"{path}: images {rows}x{cols}, expected 28x28")
        return np.frombuffer(data, dtype=np.uint8, count=n * 784, offset=16).reshape(n, 784)
    return np.frombuffer(data, dtype=np.uint8, count=n, offset=8)


def write_file(path, images, labels, gzip_compressed, force):
    if os.path.exists(path) and not force:
        print(f"fashion-mnist-tfrecord: {path} exists, kept", file=sys.stderr)
        return
    tmp = path + ".tmp"
    options = tf.io.TFRecordOptions(compression_type="GZIP") if gzip_compressed else None
    with tf.io.TFRecordWriter(tmp, options=options) as w:
        for img, label in zip(images, labels):
            ex = tf.train.Example(features=tf.train.Features(feature={
                "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[img.tobytes()])),
                "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)])),
            }))
            w.write(ex.SerializeToString(deterministic=True))
    os.replace(tmp, path)
    print(f"fashion-mnist-tfrecord: wrote {path} ({len(labels)} records, "
          f"{os.path.getsize(path)} bytes)", file=sys.stderr)


def main():
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir", nargs="?", default=os.path.join(repo, "build", "fashion-mnist-tfrecord"))
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--force", action="store_true", help="rewrite files that exist")
    args = ap.parse_args()

    d = args.data_dir
    train_x = read_idx(os.path.join(d, "train-images-idx3-ubyte.gz"), 2051)
    train_y = read_idx(os.path.join(d, "train-labels-idx1-ubyte.gz"), 2049)
    test_x = read_idx(os.path.join(d, "t10k-images-idx3-ubyte.gz"), 2051)
    test_y = read_idx(os.path.join(d, "t10k-labels-idx1-ubyte.gz"), 2049)
    if len(train_x) != len(train_y) or len(test_x) != len(test_y):
        sys.exit("image and label counts differ")
    if len(train_x) % TRAIN_SHARDS:
        sys.exit(f"{len(train_x)} training samples do not split into {TRAIN_SHARDS} files")

    os.makedirs(args.out_dir, exist_ok=True)
    per = len(train_x) // TRAIN_SHARDS
    for k in range(TRAIN_SHARDS):
        name = f"train-{k:05d}-of-{TRAIN_SHARDS:05d}.tfrecord.gz"
        write_file(os.path.join(args.out_dir, name), train_x[k * per:(k + 1) * per],
                   train_y[k * per:(k + 1) * per], True, args.force)
    write_file(os.path.join(args.out_dir, "test.tfrecord"), test_x, test_y, False, args.force)


if __name__ == "__main__":
    main()
