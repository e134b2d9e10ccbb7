"""The reference workloads (issues #2 and #4): model builders and fixed batches.

Used by the main job (`python -m lazyxla`), the end-to-end tests and the
benchmarks, so that all three train exactly the same thing.

* W1 mlp: Linear(784,2048)-ReLU-Linear(2048,2048)-ReLU-Linear(2048,10), batch
  128, cross-entropy over 10 classes, SGD lr 0.01 momentum 0.9.
* W2 gpt: token embedding (vocab 4096, d 256) + learned positions (128), 4
  pre-LayerNorm blocks (4 heads, causal attention written with matmuls,
  masked_fill and softmax; MLP with GELU), final LayerNorm, head without
  bias; batch 8 x 128 tokens; cross-entropy; AdamW lr 3e-4.
* convnet: two conv-BatchNorm-ReLU-maxpool stages and a linear head, SGD.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.utils.checkpoint
from torch import nn
from torch.nn import functional as F


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(784, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(),
                         nn.Linear(2048, 10))


@dataclass(frozen=True)
class GPTConfig:
    vocab: int = 4096
    d: int = 256
    heads: int = 4
    layers: int = 4
    seq: int = 128
    scan: bool = False   # run the blocks with lx.experimental.scan_layers (one loop)
    stacked: bool = False   # keep the blocks as lx.experimental.ScannedLayers (stacked parameters, one loop)
    checkpoint: bool = False   # torch.utils.checkpoint around each block (non-reentrant)


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.heads = cfg.heads
        self.ln1 = nn.LayerNorm(cfg.d)
        self.qkv = nn.Linear(cfg.d, 3 * cfg.d)
        self.proj = nn.Linear(cfg.d, cfg.d)
        self.ln2 = nn.LayerNorm(cfg.d)
        self.fc = nn.Linear(cfg.d, 4 * cfg.d)
        self.out = nn.Linear(4 * cfg.d, cfg.d)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        b, t, d = x.shape
        if mask is None:   # under scan_layers the carry is x alone: the mask is built inside
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q = q.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // self.heads))
        att = att.masked_fill(mask[:t, :t], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig = GPTConfig()) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab, cfg.d)
        self.pos = nn.Embedding(cfg.seq, cfg.d)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        if cfg.stacked:
            from .experimental import ScannedLayers   # lazy: bench children of other systems never import lazyxla
            self.blocks = ScannedLayers(self.blocks, is_layer_pure=True)   # Block.forward depends on shapes only
        self.ln = nn.LayerNorm(cfg.d)
        self.head = nn.Linear(cfg.d, cfg.vocab, bias=False)
        # causal mask: True above the diagonal (positions a token must not see)
        self.register_buffer("mask", torch.triu(torch.ones(cfg.seq, cfg.seq, dtype=torch.bool), 1),
                             persistent=False)
        self.register_buffer("positions", torch.arange(cfg.seq), persistent=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(self.positions[:t])
        if self.cfg.stacked:
            x = self.blocks(x)
        elif self.cfg.scan:
            from .experimental import scan_layers   # lazy: bench children of other systems never import lazyxla
            x = scan_layers(self.blocks, x, is_layer_pure=True)   # Block.forward depends on shapes only
        else:
            for block in self.blocks:
                if self.cfg.checkpoint:
                    x = torch.utils.checkpoint.checkpoint(block, x, self.mask, use_reentrant=False)
                else:
                    x = block(x, self.mask)
        return self.head(self.ln(x))


def gpt(cfg: GPTConfig = GPTConfig()) -> GPT:
    return GPT(cfg)


def gpt_training(cfg: GPTConfig, batch: int, device) -> tuple:
    """W2's training set-up on `device` (the step scripts' common start): the GPT (seed 0),
    one batch of tokens (seed 1) as inputs and shifted targets, AdamW (foreach), and the
    loss function `loss_of(inputs, targets)`."""
    torch.manual_seed(0)
    model = gpt(cfg).to(device)
    tokens = torch.randint(0, cfg.vocab, (batch, cfg.seq + 1), generator=torch.Generator().manual_seed(1))
    x, y = tokens[:, :-1].contiguous().to(device), tokens[:, 1:].contiguous().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=True)

    def loss_of(inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = model(inputs)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    return model, x, y, opt, loss_of


def convnet() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 8 * 8, 10))


@dataclass
class Workload:
    """A model, its optimizer factory, one fixed batch and the loss."""
    name: str
    model: nn.Module
    inputs: torch.Tensor
    targets: torch.Tensor

    def loss(self, model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = model(inputs)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    def optimizer(self, params, foreach: bool | None = None) -> torch.optim.Optimizer:
        if self.name == "gpt":
            return torch.optim.AdamW(params, lr=3e-4, foreach=foreach)
        return torch.optim.SGD(params, lr=0.01, momentum=0.9, foreach=foreach)


def make(name: str, seed: int = 0, batch: int | None = None) -> Workload:
    """Build workload `name` ("mlp", "gpt", "convnet") on the CPU with fixed seeds."""
    gen = torch.Generator().manual_seed(seed + 1)
    torch.manual_seed(seed)
    if name == "mlp":
        b = batch or 128
        return Workload(name, mlp(), torch.randn(b, 784, generator=gen), torch.randint(0, 10, (b,), generator=gen))
    if name == "gpt":
        b = batch or 8
        cfg = GPTConfig()
        tokens = torch.randint(0, cfg.vocab, (b, cfg.seq + 1), generator=gen)
        return Workload(name, gpt(cfg), tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous())
    if name == "convnet":
        b = batch or 16
        return Workload(name, convnet(), torch.randn(b, 3, 32, 32, generator=gen),
                        torch.randint(0, 10, (b,), generator=gen))
    raise ValueError(f"unknown workload {name!r}; choose mlp, gpt or convnet")
