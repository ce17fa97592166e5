"""Loads dtrain's TensorBoard files with TensorBoard's own reader and checks
them against metrics.jsonl.

Usage: check_tensorboard.py OUTPUT_DIR   (the job's output.dir)

Reads OUTPUT_DIR/tensorboard/train and .../validation with
tensorboard.backend.event_processing.event_accumulator.EventAccumulator (the
reader TensorBoard's server uses), and compares every scalar with the record of
metrics.jsonl it comes from (float32, as stored). Prints one summary line and
exits 0 when everything matches, 1 with the differences otherwise.
Run by tests/integration/test_tensorboard.cpp in the venv of
scripts/tensorboard-venv.sh.
"""
import json
import os
import sys

import numpy as np
from tensorboard.backend.event_processing import event_accumulator
from tensorboard.util import tensor_util


def load(run_dir):
    acc = event_accumulator.EventAccumulator(run_dir, size_guidance={event_accumulator.TENSORS: 0})
    acc.Reload()
    out = {}
    for tag in acc.Tags()["tensors"]:
        out[tag] = {e.step: float(np.asarray(tensor_util.make_ndarray(e.tensor_proto)))
                    for e in acc.Tensors(tag)}
    return out


def main():
    out_dir = sys.argv[1]
    train = load(os.path.join(out_dir, "tensorboard", "train"))
    validation = load(os.path.join(out_dir, "tensorboard", "validation"))
    errors, checked = [], 0

    def expect(run, name, tag, step, value):
        nonlocal checked
        got = run.get(tag, {}).get(step)
        want = float(np.float32(value))
        if got is None or got != want:
            errors.append(f"{name}/{tag} at step {step}: TensorBoard read {got}, metrics.jsonl has {want}")
        checked += 1

    for line in open(os.path.join(out_dir, "metrics.jsonl")):
        r = json.loads(line)
        if r["kind"] == "step":
            expect(train, "train", "batch_loss", r["step"], r["loss"])
            expect(train, "train", "batch_accuracy", r["step"], r["accuracy"])
        elif r["kind"] == "epoch":
            at = r["epoch"] - 1
            for tag, key in [("epoch_loss", "loss"), ("epoch_accuracy", "accuracy"),
                             ("epoch_learning_rate", "learning_rate"), ("epoch_samples_per_sec", "samples_per_sec"),
                             ("epoch_step_ms", "step_ms"), ("epoch_comm_wait_share", "comm_wait_share")]:
                expect(train, "train", tag, at, r[key])
            expect(validation, "validation", "epoch_loss", at, r["val_loss"])
            expect(validation, "validation", "epoch_accuracy", at, r["val_accuracy"])
    if errors or checked == 0:
        print("\n".join(errors) or "no records in metrics.jsonl")
        sys.exit(1)
    print(f"TensorBoard read {checked} scalars, all equal to metrics.jsonl's "
          f"(train tags: {', '.join(sorted(train))}; validation tags: {', '.join(sorted(validation))})")


if __name__ == "__main__":
    main()
