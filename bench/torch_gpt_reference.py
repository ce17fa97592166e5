#!/usr/bin/python3
"""PyTorch reference for dtrain's GPT (configs/gpt_fortunes.json) on the CPU or a GPU.

What it measures
    train: tokens per second of full training steps (gather a batch of
        windows, forward, cross-entropy over every position, backward, AdamW
        update) for the same model dtrain ships, in eager mode (or under
        torch.compile with --compile), then the validation loss (nats per
        byte) after those steps. The model: token and position embeddings of
        width 128, 4 pre-norm blocks (LayerNorm eps 1e-5, causal self-attention
        of 4 heads through F.scaled_dot_product_attention, exact GELU MLP of
        width 512, residual adds), a final LayerNorm and a Linear to 256 bytes.
        AdamW(lr 1e-3, weight_decay 0.01) over every parameter, as
        torch.optim.AdamW(model.parameters()) does.
    ddp: the same training under DistributedDataParallel, --ddp processes on
        gloo over loopback, --threads each, the global batch split; tokens/s.
        Other shapes (configs/gpt2_small.json's): --vocab (the embedding's and
        the head's size; the data stays bytes), --width, --heads, --blocks,
        --hidden, --gelu tanh (gelu_approximate), --sdpa flash (pin the
        attention backend), --autocast (bfloat16), --compile. It prints
        model_flops_per_token (6N + 12LdT, dtrain's formula), achieved
        TFLOP/s and the peak memory (torch.cuda.max_memory_allocated over the
        timed steps; the CPU's peak resident set).
    gemm: the peak-GEMM probe, the best of --steps square torch.mm of
        --gemm-size in --dtype (float32, tf32 or bfloat16): TFLOP/s.
    attention: one scaled_dot_product_attention(is_causal=True) forward and
        backward on (batch, heads, seq, head_dim) float32 tensors: the mean
        time and the peak memory it adds (ru_maxrss after it, less before it,
        in a fresh process per sequence length; on a GPU the peak of
        torch.cuda.max_memory_allocated over what the inputs hold).
    --device cuda runs train and attention on the GPU (float32, TF32 off for
        matmuls as PyTorch's default; the gather, the step and the loss's
        .item() each step as on the CPU).

How it matches dtrain
    * Same data: the fortunes corpus (Debian's fortunes, fortunes-min) read as
      bytes, files in sorted order, names matching --exclude skipped, the last
      10% of the bytes held out (int(0.1 * total), as dtrain's text reader).
      Training windows of seq + 1 bytes start every --stride bytes of the
      first part; validation windows every seq bytes of the last part.
    * Each epoch a fresh permutation of the windows, batches of --batch, the
      last incomplete batch dropped; the gather is inside the timed region.
    * --warmup untimed steps, then --steps timed ones; tokens_per_sec is
      steps * batch * seq / seconds. torch.set_num_threads(--threads).
    * Initialisation: PyTorch's defaults (nn.Embedding N(0, 1), nn.Linear
      Kaiming-uniform), or with --init keras the distributions dtrain draws
      from, Keras' and keras_hub's: embeddings U(-0.05, 0.05), Glorot-uniform
      kernels (the query, key and value kernels each on its own, as Keras'
      MultiHeadAttention has three), zero biases. It does not change the
      speed; it changes the loss after 1,500 steps, which is compared.

Output: one JSON line.
Usage:
    python bench/torch_gpt_reference.py train --threads 2 --steps 100 --warmup 5 [--compile] [--eval]
    python bench/torch_gpt_reference.py attention --seq 512 --threads 2
    python bench/torch_gpt_reference.py ddp --ddp 2 --threads 1 --steps 30
    python bench/torch_gpt_reference.py train --device cuda --vocab 50304 --seq 1024 --stride 1024 --width 768 \
        --heads 12 --blocks 12 --gelu tanh --batch 8 --autocast --sdpa flash [--compile]
    python bench/torch_gpt_reference.py gemm --device cuda --dtype bfloat16 --gemm-size 8192
"""
import argparse
import contextlib
import fnmatch
import glob
import json
import math
import os
import resource
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from local_processes import timed_steps  # noqa: E402 (the bench folder's own module)


def read_corpus(pattern, exclude):
    data = bytearray()
    for path in sorted(glob.glob(pattern)):
        name = os.path.basename(path)
        if any(fnmatch.fnmatch(name, e) for e in exclude) or not os.path.isfile(path):
            continue
        with open(path, "rb") as f:
            data += f.read()
    return bytes(data)


def windows(tokens, seq, stride):
    starts = torch.arange(0, len(tokens) - seq, stride)
    return starts


class Block(nn.Module):
    def __init__(self, width, heads, hidden, gelu="exact"):
        super().__init__()
        self.heads = heads
        self.gelu = "tanh" if gelu == "tanh" else "none"
        self.ln1 = nn.LayerNorm(width, eps=1e-5)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width, eps=1e-5)
        self.fc = nn.Linear(width, hidden)
        self.out = nn.Linear(hidden, width)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        shape = (b, t, self.heads, d // self.heads)
        q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate=self.gelu))


class Gpt(nn.Module):
    def __init__(self, vocab, seq, width, heads, hidden, blocks, gelu="exact"):
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Embedding(seq, width)
        self.blocks = nn.ModuleList(Block(width, heads, hidden, gelu) for _ in range(blocks))
        self.ln = nn.LayerNorm(width, eps=1e-5)
        self.head = nn.Linear(width, vocab)

    def forward(self, ids):
        x = self.tokens(ids) + self.positions(torch.arange(ids.shape[1], device=ids.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def keras_init(model):
    """The initial distributions dtrain (Keras, keras_hub) draws from."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.Embedding):
                nn.init.uniform_(module.weight, -0.05, 0.05)
            elif isinstance(module, nn.Linear):
                nn.init.zeros_(module.bias)
                out = module.weight.shape[0]
                parts = 3 if module.weight.shape[0] == 3 * module.weight.shape[1] else 1  # qkv: three kernels
                for part in module.weight.split(out // parts, dim=0):
                    nn.init.xavier_uniform_(part)


def train(args):
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    corpus = read_corpus(args.corpus, args.exclude)
    if not corpus:
        sys.exit(f"torch_gpt_reference.py: no corpus files match {args.corpus}")
    cut = len(corpus) - int(0.1 * len(corpus))
    tokens = torch.frombuffer(bytearray(corpus), dtype=torch.uint8).long().to(device)
    train_tokens, val_tokens = tokens[:cut], tokens[cut:]
    starts = windows(train_tokens, args.seq, args.stride).to(device)
    offsets = torch.arange(args.seq + 1, device=device)
    model = Gpt(args.vocab, args.seq, args.width, args.heads, args.hidden or 4 * args.width, args.blocks, args.gelu)
    if args.init == "keras":
        keras_init(model)
    model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    step_fn = model
    if args.compile:
        step_fn = torch.compile(model)
    model.train()
    order, position = torch.randperm(len(starts), device=device), 0

    def step():
        nonlocal order, position
        if position + args.batch > len(order):
            order, position = torch.randperm(len(starts), device=device), 0
        idx = starts[order[position:position + args.batch]]
        position += args.batch
        chunk = train_tokens[idx[:, None] + offsets]
        x, y = chunk[:, :-1], chunk[:, 1:]
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.autocast), sdpa_backend(args.sdpa):
            loss = F.cross_entropy(step_fn(x).reshape(-1, args.vocab), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(args.warmup):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    begin = time.perf_counter()
    last = 0.0
    for _ in range(args.steps):
        last = step()  # (.item(): each step ends on the host, as dtrain's)
    seconds = time.perf_counter() - begin
    params = sum(p.numel() for p in model.parameters())
    flops = 6 * params + 12 * args.blocks * args.width * args.seq  # PaLM's 6N + 12LdT, as dtrain's utilization.h
    tokens_per_sec = args.steps * args.batch * args.seq / seconds
    result = {"framework": "pytorch", "torch_version": torch.__version__, "mode": "compile" if args.compile else "eager",
              "autocast": "bfloat16" if args.autocast else "none", "sdpa": args.sdpa,
              "device": device_name(device), "threads": args.threads, "batch": args.batch, "seq": args.seq, "steps": args.steps,
              "vocab": args.vocab, "width": args.width, "blocks": args.blocks, "heads": args.heads, "gelu": args.gelu,
              "warmup": args.warmup, "init": args.init, "seconds": seconds,
              "tokens_per_sec": tokens_per_sec, "params": params, "model_flops_per_token": flops,
              "achieved_tflops": tokens_per_sec * flops / 1e12, "peak_memory_bytes": peak_memory_bytes(device),
              "last_loss": last}
    if args.eval:
        model.eval()
        vstarts = windows(val_tokens, args.seq, args.seq).to(device)
        total, count = 0.0, 0
        with torch.no_grad():
            for i in range(0, len(vstarts), 64):
                chunk = val_tokens[vstarts[i:i + 64, None] + offsets]
                logits = model(chunk[:, :-1])
                total += F.cross_entropy(logits.reshape(-1, args.vocab), chunk[:, 1:].reshape(-1), reduction="sum").item()
                count += chunk[:, 1:].numel()
        result["val_loss"] = total / count
        result["val_bits_per_byte"] = total / count / math.log(2)
    print(json.dumps(result))


def ddp_rank(rank, args, port, queue):
    import torch.distributed as dist
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=args.ddp)
    torch.manual_seed(args.seed)
    corpus = read_corpus(args.corpus, args.exclude)
    tokens = torch.frombuffer(bytearray(corpus), dtype=torch.uint8).long()[:len(corpus) - int(0.1 * len(corpus))]
    starts = windows(tokens, args.seq, args.stride)
    offsets = torch.arange(args.seq + 1)
    model = torch.nn.parallel.DistributedDataParallel(
        Gpt(args.vocab, args.seq, args.width, args.heads, args.hidden or 4 * args.width, args.blocks, args.gelu))
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    local = args.batch // args.ddp
    gen = torch.Generator().manual_seed(args.seed)

    def step():
        idx = starts[torch.randint(len(starts), (args.batch,), generator=gen)][rank * local:(rank + 1) * local]
        chunk = tokens[idx[:, None] + offsets]
        loss = F.cross_entropy(model(chunk[:, :-1]).reshape(-1, args.vocab), chunk[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    seconds = timed_steps(dist, step, args.warmup, args.steps)
    if rank == 0:
        queue.put({"framework": "pytorch", "torch_version": torch.__version__, "mode": "ddp", "workers": args.ddp,
                   "threads_per_worker": args.threads, "global_batch": args.batch, "seq": args.seq,
                   "steps": args.steps, "seconds": seconds,
                   "tokens_per_sec": args.steps * args.batch * args.seq / seconds})
    dist.destroy_process_group()


def ddp(args):
    import socket
    import torch.multiprocessing as mp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    mp.spawn(ddp_rank, args=(args, port, queue), nprocs=args.ddp, join=True)
    print(json.dumps(queue.get()))


def device_name(device):
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def peak_memory_bytes(device):
    """The most bytes the run's tensors held on a GPU; the process's peak resident set on the CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def sdpa_backend(name):
    """A context that pins scaled_dot_product_attention to one backend ("auto": PyTorch picks)."""
    if name == "auto":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel({"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
                        "math": SDPBackend.MATH, "cudnn": SDPBackend.CUDNN_ATTENTION}[name])


def gemm(args):
    """The peak-GEMM probe: the best of --steps square products of --gemm-size in --dtype."""
    device = torch.device(args.device)
    dtype = {"float32": torch.float32, "tf32": torch.float32, "bfloat16": torch.bfloat16}[args.dtype]
    torch.backends.cuda.matmul.allow_tf32 = args.dtype == "tf32"
    n = args.gemm_size
    a, b = (torch.randn(n, n, device=device).to(dtype) for _ in range(2))
    best = float("inf")
    for i in range(args.warmup + args.steps):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        begin = time.perf_counter()
        torch.mm(a, b)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if i >= args.warmup:
            best = min(best, time.perf_counter() - begin)
    print(json.dumps({"framework": "pytorch", "torch_version": torch.__version__, "op": "mm", "dtype": args.dtype,
                      "size": n, "device": device_name(device), "threads": args.threads,
                      "tflops": 2 * n ** 3 / best / 1e12}))


def attention(args):
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    shape = (args.batch, args.heads, args.seq, args.head_dim)
    q, k, v = (torch.randn(shape, device=device, requires_grad=True) for _ in range(3))
    grad = torch.randn(shape, device=device)

    def once():
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.backward(grad)
        q.grad = k.grad = v.grad = None

    def sync():
        if cuda:
            torch.cuda.synchronize(device)

    if cuda:
        sync()
        torch.cuda.reset_peak_memory_stats(device)
        before_mib = torch.cuda.memory_allocated(device) / 1048576.0
    else:
        before_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    once()
    sync()
    if cuda:
        peak_mib = torch.cuda.max_memory_allocated(device) / 1048576.0
    else:
        peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    for _ in range(args.warmup):
        once()
    sync()
    begin = time.perf_counter()
    for _ in range(args.steps):
        once()
    sync()
    seconds = (time.perf_counter() - begin) / args.steps
    print(json.dumps({"framework": "pytorch", "torch_version": torch.__version__, "op": "sdpa causal fwd+bwd",
                      "device": device_name(device), "batch": args.batch, "heads": args.heads, "seq": args.seq, "head_dim": args.head_dim,
                      "threads": args.threads, "ms": seconds * 1e3, "peak_extra_mib": peak_mib - before_mib}))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["train", "ddp", "attention", "gemm"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--stride", type=int, default=64)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--head-dim", type=int, default=32)
    p.add_argument("--blocks", type=int, default=4)
    p.add_argument("--vocab", type=int, default=256, help="the embedding's and the head's size (the data is bytes)")
    p.add_argument("--hidden", type=int, default=0, help="the MLP's width (0: 4 x --width)")
    p.add_argument("--gelu", choices=["exact", "tanh"], default="exact",
                   help="GELU's form: exact (dtrain's gelu) or tanh (gelu_approximate, GPT-2's)")
    p.add_argument("--sdpa", choices=["auto", "flash", "efficient", "math", "cudnn"], default="auto",
                   help="scaled_dot_product_attention's backend")
    p.add_argument("--gemm-size", type=int, default=8192, help="gemm: the square product's size")
    p.add_argument("--dtype", choices=["float32", "tf32", "bfloat16"], default="bfloat16", help="gemm: its dtype")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--compile", action="store_true")
    p.add_argument("--autocast", action="store_true",
                   help="train under torch.autocast(dtype=bfloat16): bfloat16 matmuls, as dtrain's mixed_bfloat16")
    p.add_argument("--ddp", type=int, default=2, help="ddp: worker processes (gloo, localhost)")
    p.add_argument("--eval", action="store_true")
    p.add_argument("--init", choices=["torch", "keras"], default="torch",
                   help="initial values: PyTorch's defaults or Keras' distributions (dtrain's)")
    p.add_argument("--device", default="cpu", help="cpu, or cuda (train and attention)")
    p.add_argument("--corpus", default="/usr/share/games/fortunes/*")
    p.add_argument("--exclude", nargs="*", default=["*.dat", "*.u8"])
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    if args.what == "train":
        train(args)
    elif args.what == "ddp":
        ddp(args)
    elif args.what == "gemm":
        gemm(args)
    else:
        attention(args)


if __name__ == "__main__":
    sys.exit(main())
