#!/usr/bin/env python3
"""examples/train_char_lm.cpp's model, data and schedule in PyTorch eager, for a wall-time race.

  .venv-torch/bin/python bench/char_lm_torch.py [--epochs 7] [--steps 200] [--batch 32]
      [--lr 2e-3] [--seed 1] [--threads 2] [--seconds S] [--data DIR]

with the current PyTorch from PyPI (scripts/setup-bench.sh's .venv-torch), or with Debian's
python3-torch 1.13 (/usr/bin/python3; the libtorch of the suites' "libtorch" rows).

The same GPT (token and learned positional embeddings, four pre-norm causal encoder layers of
width 128, 4 heads, a GELU feed-forward of 512, a final LayerNorm, a linear head), PyTorch's
initial values where the example takes them (GPT-2's normal(0, 0.02) for the embeddings), AdamW
(weight decay 0.01) with gradient clipping at 1.0 and the example's cosine schedule, batches of
random windows of the training text, validation in bits per character over the first 256
windows of the validation text after each epoch. With --seconds, training stops at that wall
time (counted from the start, as `time` counts the example) and validates once more. Prints one
line per epoch and `val_bpc=<value>` last, as the example does.
"""
import argparse
import inspect
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, CONTEXT, WIDTH, HEADS, FF, LAYERS = 128, 128, 128, 4, 512, 4


def load(path):
    names = sorted(n for n in os.listdir(path)
                   if os.path.isfile(os.path.join(path, n)) and not n.endswith((".dat", ".u8")))
    text = bytearray()
    for n in names:
        with open(os.path.join(path, n), "rb") as f:
            text += f.read()
    data = torch.tensor([c if c < VOCAB else ord("?") for c in text], dtype=torch.long)
    cut = len(data) * 9 // 10
    return data[:cut], data[cut:]


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, WIDTH)
        self.wpe = nn.Parameter(torch.empty(CONTEXT, WIDTH))
        nn.init.normal_(self.wte.weight, 0.0, 0.02)
        nn.init.normal_(self.wpe, 0.0, 0.02)
        layer = nn.TransformerEncoderLayer(WIDTH, HEADS, FF, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.h = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
        self.ln_f = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(CONTEXT))
        # PyTorch 2's hint that the mask is causal; Debian's 1.13 (libtorch eager) has no such argument
        self.causal = {"is_causal": True} if "is_causal" in inspect.signature(self.h.forward).parameters else {}

    def forward(self, x):
        h = self.wte(x) + self.wpe[: x.shape[1]]
        h = self.h(h, mask=self.mask, **self.causal)
        return self.head(self.ln_f(h))


def schedule(lr, warmup, total, step):
    min_lr = lr / 10
    if step <= warmup:
        return lr * step / warmup
    if step >= total:
        return min_lr
    f = (step - warmup) / (total - warmup)
    return min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * f))


@torch.no_grad()
def val_bpc(model, val, batch):
    windows = min(256, (len(val) - 1) // CONTEXT)
    total, count = 0.0, 0
    for w in range(0, windows, batch):
        starts = range(w, min(windows, w + batch))
        x = torch.stack([val[i * CONTEXT:(i + 1) * CONTEXT] for i in starts])
        y = torch.stack([val[i * CONTEXT + 1:(i + 1) * CONTEXT + 1] for i in starts])
        loss = F.cross_entropy(model(x).reshape(-1, VOCAB), y.reshape(-1))
        total += loss.item() * len(starts)
        count += len(starts)
    return total / count / math.log(2)


def main():
    start = time.monotonic()
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=7)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seconds", type=float, default=0)
    p.add_argument("--data", default="/usr/share/games/fortunes")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    train, val = load(a.data)
    model = GPT()
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.01)
    total = a.steps * a.epochs
    warmup = min(100, total // 10)
    print(f"model: GPT, {LAYERS} layers, {HEADS} heads, width {WIDTH}, context {CONTEXT}, "
          f"{sum(t.numel() for t in model.parameters())} parameters; PyTorch {torch.__version__}, "
          f"{torch.get_num_threads()} threads", flush=True)
    step, bpc, out_of_time = 0, float("nan"), False
    for epoch in range(a.epochs):
        t0 = time.monotonic()
        loss_sum, n = 0.0, 0
        for _ in range(a.steps):
            if a.seconds and time.monotonic() - start >= a.seconds:
                out_of_time = True
                break
            starts = torch.randint(0, len(train) - CONTEXT - 1, (a.batch,))
            x = torch.stack([train[s:s + CONTEXT] for s in starts])
            y = torch.stack([train[s + 1:s + CONTEXT + 1] for s in starts])
            step += 1
            for g in opt.param_groups:
                g["lr"] = schedule(a.lr, warmup, total, step)
            loss = F.cross_entropy(model(x).reshape(-1, VOCAB), y.reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            loss_sum += loss.item()
            n += 1
        bpc = val_bpc(model, val, a.batch)
        print(f"epoch {epoch + 1}: {n} steps, train loss {loss_sum / max(n, 1):.3f} nats, validation {bpc:.3f} "
              f"bits/char, {time.monotonic() - t0:.1f} s, {time.monotonic() - start:.1f} s in all", flush=True)
        if out_of_time:
            break
    print(f"steps={step}")
    print(f"val_bpc={bpc:.4f}")


if __name__ == "__main__":
    main()
