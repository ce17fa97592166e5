#!/usr/bin/env python3
"""PyTorch eager reference for `dtrain bench train` on a GPU.

What it measures
    Samples per second of full training steps on one GPU -- take a batch,
    forward, loss, backward, Adam update -- in PyTorch eager mode with
    model.train(), for the models of dtrain's configs:

      mlp      configs/fashion_mnist_mlp.json: Flatten, Linear 784->256 relu,
               Linear 256->128 relu, Linear 128->10          (Fashion-MNIST)
      cnn      configs/fashion_mnist_cnn.json: Conv2d 1->32 3x3 relu, MaxPool 2,
               Flatten, Linear 5408->64 relu, Dropout 0.25, Linear 64->10
      mlp4096  configs/bench_mlp_4096.json: Linear 4096->4096 relu x3, Linear 4096->10
      resnet32 configs/bench_resnet_32.json: a ResNet-18-style network for
               32x32x3 inputs: Conv 3x3 64 + BatchNorm + ReLU, then six basic
               blocks (64, 64, 128/2, 128, 256/2, 256; each Conv-BN-ReLU-Conv-BN
               plus the input, or a strided 1x1 Conv + BN where the shape
               changes, then ReLU), global average pooling, Linear 256->10

    Loss: CrossEntropyLoss on logits. Optimizer: torch.optim.Adam (its default
    implementation on CUDA, foreach), lr as in the configs.

How it matches dtrain's bench, and where it favours PyTorch
    * Same shapes and batch; float32 parameters and activations.
    * PyTorch's default math: matmuls in full FP32 (allow_tf32 off),
      convolutions with TF32 allowed -- dtrain's defaults are the same.
    * cudnn.benchmark is off by default (PyTorch's default); --cudnn-benchmark
      turns it on (dtrain always measures its convolution algorithms once).
    * The data: random inputs (synthetic, like dtrain's bench configs; the
      Fashion-MNIST models get random 28x28 inputs, which costs the same)
      kept on the GPU, a batch taken by indexing a preloaded tensor. dtrain's
      batches come from its host pipeline and are copied to the GPU each step,
      so this favours PyTorch.
    * The loss is not read back each step (dtrain reads it every step for its
      progress line), which also favours PyTorch.
    * Timing: --warmup untimed steps, then torch.cuda.synchronize(), --steps
      timed steps, synchronize again; samples_per_sec = steps * batch / seconds.

Output: one JSON line with dtrain's keys (config, batch_size, steps, seconds,
samples_per_sec, device) plus "framework": "pytorch" and "torch_version".

Usage: python3 bench/torch_gpu_reference.py --model resnet32 --batch 256 --steps 100
"""
import argparse
import json
import time

import torch
from torch import nn

CONFIGS = {"mlp": "configs/fashion_mnist_mlp.json", "cnn": "configs/fashion_mnist_cnn.json",
           "mlp4096": "configs/bench_mlp_4096.json", "resnet32": "configs/bench_resnet_32.json"}


def conv3x3(cin, cout, stride):
    """Keras' 3x3 "same" conv: on an even input, stride 2 pads 0 before and 1 after."""
    if stride == 1:
        return nn.Conv2d(cin, cout, 3, padding=1, bias=False)
    return nn.Sequential(nn.ZeroPad2d((0, 1, 0, 1)), nn.Conv2d(cin, cout, 3, stride=stride, bias=False))


def batch_norm(c):
    """Keras' BatchNormalization defaults: epsilon 1e-3, momentum 0.99 (PyTorch's 0.01)."""
    return nn.BatchNorm2d(c, eps=1e-3, momentum=0.01)


class BasicBlock(nn.Module):
    """relu(conv-bn-relu-conv-bn(x) + shortcut(x)), as dtrain's Residual layer."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.main = nn.Sequential(conv3x3(cin, cout, stride), batch_norm(cout), nn.ReLU(),
                                  conv3x3(cout, cout, 1), batch_norm(cout))
        self.shortcut = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), batch_norm(cout))

    def forward(self, x):
        return torch.relu(self.main(x) + self.shortcut(x))


def build(model):
    """The model, its input shape (NCHW or flat) and Adam's learning rate."""
    if model == "mlp":
        net = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                            nn.Linear(128, 10))
        return net, (1, 28, 28), 1e-3
    if model == "cnn":
        net = nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(5408, 64),
                            nn.ReLU(), nn.Dropout(0.25), nn.Linear(64, 10))
        return net, (1, 28, 28), 1e-3
    if model == "mlp4096":
        layers = []
        width = 4096
        for _ in range(3):
            layers += [nn.Linear(width, 4096), nn.ReLU()]
        net = nn.Sequential(*layers, nn.Linear(4096, 10))
        return net, (4096,), 1e-4
    if model == "resnet32":
        layers, cin = [conv3x3(3, 64, 1), batch_norm(64), nn.ReLU()], 64
        for cout, stride in [(64, 1), (64, 1), (128, 2), (128, 1), (256, 2), (256, 1)]:
            layers.append(BasicBlock(cin, cout, stride))
            cin = cout
        net = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, 10))
        return net, (3, 32, 32), 1e-3
    raise SystemExit(f"unknown model {model}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, choices=sorted(CONFIGS))
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--samples", type=int, default=8192, help="preloaded random samples")
    ap.add_argument("--cudnn-benchmark", action="store_true")
    args = ap.parse_args()

    if not torch.cuda.is_available():
        raise SystemExit("torch_gpu_reference: no CUDA device visible to PyTorch")
    torch.backends.cudnn.benchmark = args.cudnn_benchmark
    device = torch.device("cuda:0")
    torch.manual_seed(1)
    net, shape, lr = build(args.model)
    net = net.to(device).train()
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    loss_fn = nn.CrossEntropyLoss()
    samples = max(args.samples, args.batch)
    data = torch.rand((samples,) + shape, device=device)
    labels = torch.randint(0, 10, (samples,), device=device)
    batches = samples // args.batch

    def step(i):
        b = i % batches
        x = data[b * args.batch:(b + 1) * args.batch]
        y = labels[b * args.batch:(b + 1) * args.batch]
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()

    for i in range(args.warmup):
        step(i)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for i in range(args.steps):
        step(args.warmup + i)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    print(json.dumps({"framework": "pytorch", "torch_version": torch.__version__, "config": CONFIGS[args.model],
                      "model": args.model, "batch_size": args.batch, "steps": args.steps, "seconds": seconds,
                      "samples_per_sec": args.steps * args.batch / seconds, "device": torch.cuda.get_device_name(0),
                      "cudnn_benchmark": args.cudnn_benchmark}))


if __name__ == "__main__":
    main()
