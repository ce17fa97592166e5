#!/usr/bin/python3
"""Checks that a dtrain checkpoint reads in Python as what dtrain says it holds.

    check_safetensors.py CKPT_DIR EXPECTED_JSON

CKPT_DIR is one checkpoint (it holds model.safetensors) or a checkpoint directory,
in which case the checkpoint EXPECTED_JSON names ("path") is used. EXPECTED_JSON is
the output of `dtrain ckpt inspect --json`: per tensor its name, shape, count, sum,
min and max.

model.safetensors (and optimizer.safetensors, when EXPECTED_JSON lists it) is read
by a parser written from the public format description (huggingface/safetensors):
8 bytes of little-endian header length N, N bytes of JSON, then the tensors' raw
little-endian bytes at data_offsets relative to the end of the header. When the
`safetensors` package is importable, the file is also loaded with
safetensors.numpy.load_file and both readings must agree. Every tensor must match
the expected dtype (F32), shape, count, sum (1e-4 relative), min and max.

Exit status: 0 when everything matches, 1 on a mismatch (each one printed), 2 on
bad usage or a missing file. Needs NumPy (Debian: python3-numpy).
"""
import json
import math
import os
import struct
import sys

import numpy as np

SUM_RTOL = 1e-4


def parse_safetensors(path):
    """Returns (metadata, {name: ndarray}) for a safetensors file, checking its layout."""
    with open(path, "rb") as f:
        data = f.read()
    problems = []
    if len(data) < 8:
        raise ValueError(f"{path}: {len(data)} bytes, shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise ValueError(f"{path}: header length {n} runs past the end of the file ({len(data)} bytes)")
    header_bytes = data[8 : 8 + n]
    if not header_bytes.startswith(b"{"):
        raise ValueError(f"{path}: the header does not start with '{{'")
    header = json.loads(header_bytes.decode("utf-8"))
    if (8 + n) % 8 != 0:
        problems.append(f"data starts at byte {8 + n}, not 8-byte aligned")
    body = memoryview(data)[8 + n :]
    metadata = header.pop("__metadata__", {})
    tensors = {}
    spans = []
    for name, info in header.items():
        dtype = info.get("dtype")
        if dtype != "F32":
            raise ValueError(f"{path}: tensor {name!r} has dtype {dtype!r}, expected F32")
        shape = info["shape"]
        begin, end = info["data_offsets"]
        count = math.prod(shape)
        if not (0 <= begin <= end <= len(body)):
            raise ValueError(f"{path}: tensor {name!r} data_offsets [{begin}, {end}] outside the data ({len(body)} bytes)")
        if end - begin != 4 * count:
            raise ValueError(f"{path}: tensor {name!r} of shape {shape} holds {end - begin} bytes, not {4 * count}")
        tensors[name] = np.frombuffer(body[begin:end], dtype="<f4").reshape(shape)
        spans.append((begin, end, name))
    spans.sort()
    expect = 0
    for begin, end, name in spans:
        if begin != expect:
            problems.append(f"tensor {name!r} starts at {begin}, expected {expect} (gap or overlap)")
        expect = end
    if expect != len(body):
        problems.append(f"the tensors cover {expect} bytes of {len(body)} bytes of data")
    if problems:
        raise ValueError(f"{path}: " + "; ".join(problems))
    return metadata, tensors


def load_with_package(path):
    """safetensors.numpy.load_file(path), or None when the package is not installed."""
    try:
        from safetensors.numpy import load_file
    except ImportError:
        return None
    return load_file(path)


def close(a, b, rtol, atol=0.0):
    return abs(a - b) <= atol + rtol * abs(b)


def compare(file_label, tensors, expected):
    """Mismatches between the tensors read and the inspect --json entries."""
    errors = []
    expected_names = [e["name"] for e in expected]
    if sorted(expected_names) != sorted(tensors):
        errors.append(f"{file_label}: tensors {sorted(tensors)} but dtrain lists {sorted(expected_names)}")
    for e in expected:
        name = e["name"]
        if name not in tensors:
            continue
        t = tensors[name]
        where = f"{file_label}: {name}"
        if t.dtype != np.float32:
            errors.append(f"{where}: dtype {t.dtype}, expected float32")
        if list(t.shape) != list(e["shape"]):
            errors.append(f"{where}: shape {list(t.shape)}, dtrain says {e['shape']}")
        if t.size != e["count"]:
            errors.append(f"{where}: {t.size} values, dtrain says {e['count']}")
        if t.size == 0:
            continue
        values = t.astype(np.float64).ravel()
        total = float(values.sum())
        abs_total = float(np.abs(values).sum())
        # The relative tolerance is on the sum; the tiny absolute term covers sums that
        # cancel to about zero (summation order alone then moves the relative error).
        if e["sum"] is None or not close(total, e["sum"], SUM_RTOL, 1e-9 * abs_total):
            errors.append(f"{where}: sum {total!r}, dtrain says {e['sum']!r}")
        for key, got in (("min", float(values.min())), ("max", float(values.max()))):
            if e[key] is None or not close(got, e[key], 1e-6, 1e-30):
                errors.append(f"{where}: {key} {got!r}, dtrain says {e[key]!r}")
    return errors


def main(argv):
    if len(argv) != 3:
        print("usage: check_safetensors.py CKPT_DIR EXPECTED_JSON", file=sys.stderr)
        return 2
    ckpt_dir, expected_path = argv[1], argv[2]
    try:
        with open(expected_path) as f:
            expected = json.load(f)
    except (OSError, ValueError) as e:
        print(f"check_safetensors: cannot read {expected_path}: {e}", file=sys.stderr)
        return 2
    if not os.path.exists(os.path.join(ckpt_dir, "model.safetensors")):
        ckpt_dir = expected.get("path", ckpt_dir)
    model_path = os.path.join(ckpt_dir, "model.safetensors")
    if not os.path.exists(model_path):
        print(f"check_safetensors: no model.safetensors in {ckpt_dir}", file=sys.stderr)
        return 2

    errors = []
    checked = []
    have_package = None
    for file_name, key in (("model.safetensors", "model"), ("optimizer.safetensors", "optimizer")):
        if key not in expected or (key == "optimizer" and not expected[key]):
            continue
        path = os.path.join(ckpt_dir, file_name)
        try:
            metadata, tensors = parse_safetensors(path)
        except (OSError, ValueError, KeyError, TypeError) as e:
            errors.append(f"{file_name}: cannot parse: {e}")
            continue
        if metadata.get("format") != "dtrain":
            errors.append(f"{file_name}: __metadata__.format is {metadata.get('format')!r}, expected 'dtrain'")
        if "step" in expected and metadata.get("dtrain_step") != str(expected["step"]):
            errors.append(f"{file_name}: __metadata__.dtrain_step {metadata.get('dtrain_step')!r}, "
                          f"dtrain says step {expected['step']}")
        errors += compare(file_name + " (numpy parser)", tensors, expected[key])
        by_package = load_with_package(path)
        have_package = by_package is not None
        if by_package is not None:
            errors += compare(file_name + " (safetensors package)", by_package, expected[key])
            for name, t in tensors.items():
                if name in by_package and not np.array_equal(by_package[name], t):
                    errors.append(f"{file_name}: {name} differs between the safetensors package and the numpy parser")
        checked.append(f"{file_name} ({len(tensors)} tensors, {sum(t.size for t in tensors.values())} values)")

    for e in errors:
        print(f"check_safetensors: MISMATCH {e}", file=sys.stderr)
    if errors:
        return 1
    loader = "the safetensors package and a numpy parser" if have_package else "a numpy parser (no safetensors package)"
    print(f"check_safetensors: {ckpt_dir}: {', '.join(checked)} match dtrain ckpt inspect, read with {loader}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
