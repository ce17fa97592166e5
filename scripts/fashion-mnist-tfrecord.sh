#!/usr/bin/env bash
# Writes the whole Fashion-MNIST as TFRecord files made by TensorFlow itself
# (idempotent: does nothing when all five files exist), for dtrain's `tfrecord`
# data format in benchmarks and demos:
#   DIR/train-0000K-of-00004.tfrecord.gz  K = 0..3, GZIP, 15000 training samples
#                                         each in IDX order (file 0: 0..14999, ...)
#   DIR/test.tfrecord                     the 10000 test samples, uncompressed
# Records are tf.train.Example with `image` (bytes, the 784 raw uint8 pixels,
# row-major 28x28) and `label` (int64), written with tf.io.TFRecordWriter by
# bench/fashion_mnist_to_tfrecord.py in the venv scripts/tf-venv.sh makes (from
# PyPI the first time). Reads /usr/share/datasets/fashion-mnist/*.gz.
# Never run by the tests (tests/fixtures/tfrecord/ holds their small files).
# Usage: scripts/fashion-mnist-tfrecord.sh [DIR (build/fashion-mnist-tfrecord)]
set -euo pipefail
cd "$(dirname "$0")/.."

[ $# -le 1 ] || { echo "usage: $0 [DIR]" >&2; exit 2; }
dir=${1:-build/fashion-mnist-tfrecord}

files=(train-00000-of-00004.tfrecord.gz train-00001-of-00004.tfrecord.gz
       train-00002-of-00004.tfrecord.gz train-00003-of-00004.tfrecord.gz
       test.tfrecord)
missing=0
for f in "${files[@]}"; do
  [ -s "$dir/$f" ] || missing=1
done
if [ "$missing" = 0 ]; then
  echo "fashion-mnist-tfrecord: $dir complete, nothing to do" >&2
  exit 0
fi

py=$(bash scripts/tf-venv.sh)
"$py" bench/fashion_mnist_to_tfrecord.py "$dir"
ls -l "$dir" >&2
