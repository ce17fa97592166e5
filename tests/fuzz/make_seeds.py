#!/usr/bin/env python3
"""Writes the seed corpus of one fuzz target (tests/fuzz/fuzz_<target>.cpp) into a folder.

    python3 tests/fuzz/make_seeds.py TARGET OUT_DIR

Seeds are the shipped fixtures where the project has them (configs/*.json,
tests/fixtures/keras/*.json, the first records of tests/fixtures/tfrecord/*) and
small valid samples made here for the rest (IDX, CIFAR-10, text, safetensors, manifests,
TFRecord files of 2x2x1 images, rendezvous and ps messages), each in the input
layout its target's top comment describes. Standard library only.
"""
import gzip
import json
import os
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def read(path):
    with open(os.path.join(ROOT, path), "rb") as f:
        return f.read()


def listed(folder, suffix=""):
    return sorted(os.path.join(folder, n) for n in os.listdir(os.path.join(ROOT, folder)) if n.endswith(suffix))


# --- TFRecord framing and tf.train.Example, by hand -------------------------------

def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


CRC_TABLE = _crc32c_table()


def masked_crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = CRC_TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    c ^= 0xFFFFFFFF
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame(record):
    header = struct.pack("<Q", len(record))
    return header + struct.pack("<I", masked_crc32c(header)) + record + struct.pack("<I", masked_crc32c(record))


def varint(n):
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field(number, payload):  # a length-delimited field
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def example(features):
    """features: name -> ("bytes", [b"..."]) | ("floats", [1.0]) | ("ints", [3])."""
    entries = b""
    for name, (kind, values) in features.items():
        if kind == "bytes":
            feature = field(1, b"".join(field(1, v) for v in values))
        elif kind == "floats":
            feature = field(2, field(1, struct.pack("<%df" % len(values), *values)))
        else:
            feature = field(3, field(1, b"".join(varint(v & 0xFFFFFFFFFFFFFFFF) for v in values)))
        entries += field(1, field(1, name.encode()) + field(2, feature))
    return field(1, entries)


def small_examples():
    return [
        example({"image": ("bytes", [bytes([0, 64, 128, 255])]), "label": ("ints", [3])}),
        example({"image": ("bytes", [bytes([1, 2, 3, 4])]), "label": ("ints", [0])}),
        example({"image": ("floats", [0.0, 0.5, 1.0, -1.0]), "label": ("ints", [9])}),
        example({"pixels": ("bytes", [b"abcd"]), "class": ("ints", [1, 2])}),
    ]


def first_records(data, n):
    out, at = b"", 0
    for _ in range(n):
        if at + 12 > len(data):
            break
        (length,) = struct.unpack_from("<Q", data, at)
        out += data[at : at + 16 + length]
        at += 16 + length
    return out


# --- the other formats --------------------------------------------------------------

def idx_pair(count=3, h=2, w=2):
    images = struct.pack(">IIII", 0x803, count, h, w) + bytes(range(count * h * w))
    labels = struct.pack(">II", 0x801, count) + bytes(i % 10 for i in range(count))
    return images, labels


def safetensors(tensors, metadata=None):
    header, offset, data = {}, 0, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, shape, values in tensors:
        blob = struct.pack("<%df" % len(values), *values)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        data += blob
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def manifest(sharded=False):
    m = {
        "format": "dtrain-checkpoint", "format_version": 1, "step": 120, "epoch": 2, "samples_seen": 3840,
        "world_size": 2, "config_sha256": "ab" * 32, "dtrain_version": "0.1.0",
        "rng": {"seed": 1, "epoch_order": [3, 1]},
        "files": {"model.safetensors": {"bytes": 1024, "sha256": "cd" * 32},
                  "optimizer.safetensors": {"bytes": 2048, "sha256": "ef" * 32}},
    }
    if sharded:
        m["files"] = {"ps-0-of-2.safetensors": {"bytes": 64, "sha256": "01" * 32}}
        m["sharded"] = {
            "model": [{"name": "dense/kernel", "shape": [4, 2],
                       "parts": [{"file": "ps-0-of-2.safetensors", "tensor": "dense/kernel:0", "offset": 0},
                                 {"file": "ps-1-of-2.safetensors", "tensor": "dense/kernel:1", "offset": 4}]}],
            "optimizer": [],
        }
    return json.dumps(m, indent=2, sort_keys=True).encode()


def wire_frame(op, number=0, fields=()):
    payload = struct.pack(">BqI", op, number, len(fields))
    for f in fields:
        payload += struct.pack(">I", len(f)) + f
    return struct.pack(">I", len(payload)) + payload


def ps_header(op, a=0, b=0, payload=b""):
    return struct.pack("<IIqqQ", op, 0, a, b, len(payload)) + payload


def seeds(target):
    """name -> bytes for `target`."""
    out = {}
    if target == "job_config":
        for path in listed("configs", ".json"):
            text = read(path)
            out[os.path.basename(path)] = text
            out["set-" + os.path.basename(path)] = text + b"\0train.epochs=2\0runtime.threads=1\0model.layers[0].units=7"
        full = json.loads(read("configs/tiny_synthetic.json"))
        full.update({
            "device": "cpu",
            "runtime": {"threads": 2, "rendezvous_timeout": 30, "heartbeat_interval": 0.5, "heartbeat_timeout": 5,
                        "job_id": "job-1", "cluster_resolver": "slurm", "port_base": 9000,
                        "slurm_jobs": {"ps": 1, "worker": 2}, "memory_limit": "2GiB"},
            "output": {"dir": "runs/x", "tensorboard": False, "trace": True},
            "checkpoint": {"every_epochs": 1, "keep": 2, "resume": "auto", "save_best_only": True, "monitor": "loss"},
            "cluster": {"chief": ["h0:2222"], "worker": ["h1:2222"], "ps": ["[::1]:2223"]},
            "task": {"type": "worker", "index": 0},
        })
        out["full.json"] = json.dumps(full).encode()
    elif target == "tf_config":
        cluster = {"chief": ["h0:2222"], "worker": ["h1:2222", "10.0.0.2:2222"], "ps": ["[::1]:2223"],
                   "evaluator": ["h9:2222"]}
        tf = {"cluster": cluster, "task": {"type": "worker", "index": 1, "trial": "1"}, "rpc_layer": "grpc",
              "environment": "cloud"}
        out["tf_config"] = json.dumps(tf).encode()
        out["flag"] = json.dumps(tf).encode() + b"\0ps:0"
        out["both"] = json.dumps(tf).encode() + b"\0\0" + json.dumps({"cluster": cluster, "task": tf["task"]}).encode()
        out["file_only"] = b"\0chief:0\0" + json.dumps({"cluster": {"worker": ["localhost:1", "LOCALHOST:02"]}}).encode()
    elif target == "slurm":
        out["block"] = b"n[1-2]\0" b"2(x2)\0" b"3\0" b"4\0" b"1\0" b"n2\0" b"ps,worker,worker,worker"
        out["plain"] = b"node[01-03,07],login1\0" b"1(x4),2\0" b"0\0" b"6"
        out["nested"] = b"r[1-2]-n[01-02]\0" b"1(x4)\0" b"2\0" b"4\0" b"0\0" b"r2-n01\0" b"chief,worker,worker,evaluator"
    elif target == "keras_model":
        for path in listed("tests/fixtures/keras", ".json"):
            out[os.path.basename(path)] = read(path)
        # Small models too: mutations of short files reach the type checks sooner.
        dense = {"class_name": "Dense", "config": {"name": "d", "units": 2, "activation": "relu",
                                                  "kernel_initializer": {"class_name": "GlorotUniform"},
                                                  "dtype": {"class_name": "DTypePolicy", "config": {"name": "float32"}}}}
        out["tiny_sequential.json"] = json.dumps({"class_name": "Sequential", "config": {"layers": [
            {"class_name": "InputLayer", "config": {"batch_shape": [None, 4], "dtype": "float32"}}, dense,
            {"class_name": "BatchNormalization", "config": {"axis": -1, "momentum": 0.9}}]}}).encode()
        out["tiny_functional.json"] = json.dumps({"class_name": "Functional", "config": {
            "layers": [{"class_name": "InputLayer", "name": "in", "config": {"batch_input_shape": [None, 4]},
                        "inbound_nodes": []},
                       {"class_name": "Dense", "name": "d", "config": {"units": 2}, "inbound_nodes": [[["in", 0, 0, {}]]]},
                       {"class_name": "Dropout", "name": "o", "config": {"rate": 0.5},
                        "inbound_nodes": [{"args": [{"config": {"keras_history": ["d", 0, 0]}}]}]}],
            "output_layers": [["o", 0, 0]]}}).encode()
    elif target in ("tfrecord", "tf_example"):
        records = small_examples()
        if target == "tfrecord":
            out["small.tfrecord"] = b"".join(frame(r) for r in records[:2])
            out["floats.tfrecord"] = frame(records[2])
            out["small.tfrecord.gz"] = gzip.compress(out["small.tfrecord"], mtime=0)
            for path in listed("tests/fixtures/tfrecord", ".tfrecord"):
                out[os.path.basename(path)] = first_records(read(path), 2)
        else:
            for i, r in enumerate(records):
                out["record-%d" % i] = r
            out["two"] = records[0] + b"\xff\xfeREC" + records[1]
            out["mixed"] = records[0] + b"\xff\xfeREC" + records[2]
    elif target == "idx":
        images, labels = idx_pair()
        out["plain"] = struct.pack("<H", len(images)) + images + labels
        gz_images, gz_labels = gzip.compress(images, mtime=0), gzip.compress(labels, mtime=0)
        out["gzip"] = struct.pack("<H", len(gz_images)) + gz_images + gz_labels
        out["swapped"] = struct.pack("<H", len(labels)) + labels + images
    elif target == "cifar10":
        records = bytes([3]) + bytes(i % 256 for i in range(3072)) + bytes([9]) + bytes(3072)
        out["two_records.bin"] = records
        out["two_records.bin.gz"] = gzip.compress(records, mtime=0)
    elif target == "text":
        text = "Fortune cookies: \u00e9t\u00e9, \u20ac, \U0001f600.\nA second line.\n".encode("utf-8")
        out["plain"] = bytes([8, 3, 0]) + text
        out["split"] = bytes([4, 0, 0x83]) + text
        out["gzip"] = bytes([2, 1, 1]) + gzip.compress(text, mtime=0)
    elif target == "safetensors":
        out["model.safetensors"] = safetensors([("dense/kernel", [2, 2], [1.0, 2.0, 3.0, 4.0]),
                                                ("dense/bias", [2], [0.5, -0.5])], {"step": "12"})
        out["empty.safetensors"] = safetensors([("scalar", [], [7.0]), ("none", [0, 3], [])])
    elif target == "manifest":
        out["manifest.json"] = manifest()
        out["sharded.json"] = manifest(sharded=True)
    elif target == "rendezvous_wire":
        hello = wire_frame(1, 0, [b"dtrain-rendezvous-1", b"job-fuzz", b"worker:0", b"control", b"00ff" * 8])
        proof = wire_frame(3, 0, [b"ab" * 32])
        requests = (wire_frame(10, 0, [b"join/worker:0", b"h1:2222"]) + wire_frame(11, 0, [b"join/worker:0"]) +
                    wire_frame(12, 5, [b"counter"]) + wire_frame(12, -7, [b"counter"]) +
                    wire_frame(13, 30000, [b"join/worker:0", b"join/chief:0"]) + wire_frame(14, 12) +
                    wire_frame(15) + wire_frame(17) + wire_frame(16, 0, [b"worker:0 failed: loss is NaN"]))
        replies = (wire_frame(2, 0, [b"00" * 16, b"cd" * 32]) + wire_frame(4) + wire_frame(31, 3, [b"v"]) +
                   wire_frame(34, 0, [b"12"]) + wire_frame(35, 0, [b"this address serves job 'a', not 'b'"]))
        out["session"] = hello + proof + requests
        out["replies"] = replies
    elif target == "ps_wire":
        hello = wire_frame(1, 0, [b"dtrain-ps-1", b"job-fuzz", b"worker:0", b"ps", b"00ff" * 8])
        floats = struct.pack("<3f", 1.0, 2.0, 3.0)
        out["session"] = (hello + ps_header(1) + ps_header(2, 4, 0, floats) + ps_header(3) +
                          ps_header(4, 9, 0, bytes(32)) + ps_header(5) + ps_header(7, 120, 0, b".tmp-ckpt-120") +
                          ps_header(6))
        out["replies"] = (hello + ps_header(20, 3, 0, floats) + ps_header(23, 0, 0, b"could not write its shards") +
                          ps_header(24, 3, 64, b"ab" * 32))
    else:
        raise SystemExit("make_seeds.py: unknown target '%s'" % target)
    return out


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    target, folder = sys.argv[1], sys.argv[2]
    os.makedirs(folder, exist_ok=True)
    for name, data in seeds(target).items():
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
