"""Tiny random-init Hugging Face models and a fixed batch for each: the outside model
code that tests/test_real_models*.py train against eager and that the bench trains as its
workloads W6 and "hf-<arch>" (`HFWorkload`). Imports only torch and transformers, so a
PyTorch/XLA interpreter can load it by file path (as lazyxla/bench/child.py does).

Tiny configs: every dimension small enough that a step costs milliseconds and the
first compile a few seconds on a shared 2-core machine. Dropout is 0 in every
config: lazyxla's RNG stream is not torch's CPU stream.
"""
from __future__ import annotations

import torch
import transformers

VOCAB = 100
ARCHS = ("gpt2", "llama", "bert", "t5", "resnet", "vit", "gpt2_small")
# attention implementation the bench trains each model with (default "sdpa"): T5 has no
# SDPA path, tiny GPT-2 is timed with its eager attention as docs/models.md reports it
BENCH_ATTN = {"gpt2": "eager", "t5": "eager"}


def gpt2(attn):
    cfg = transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=2, vocab_size=VOCAB, n_positions=32,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, attn_implementation=attn)
    return transformers.GPT2LMHeadModel(cfg)


def gpt2_small(attn):
    """GPT-2 small's real size (124M parameters, 12 layers, d 768), random init."""
    cfg = transformers.GPT2Config(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, attn_implementation=attn)
    return transformers.GPT2LMHeadModel(cfg)


def llama(attn):
    # num_key_value_heads < num_attention_heads: grouped-query attention (repeat_kv)
    cfg = transformers.LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=32,
        attn_implementation=attn)
    return transformers.LlamaForCausalLM(cfg)


def bert(attn):
    cfg = transformers.BertConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        vocab_size=VOCAB, max_position_embeddings=32, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, attn_implementation=attn)
    return transformers.BertForMaskedLM(cfg)


def t5(attn):
    cfg = transformers.T5Config(
        d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2, vocab_size=VOCAB,
        decoder_start_token_id=0, dropout_rate=0.0, attn_implementation=attn)
    return transformers.T5ForConditionalGeneration(cfg)


def resnet(attn):
    cfg = transformers.ResNetConfig(
        num_channels=3, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1],
        layer_type="basic", num_labels=5)
    return transformers.ResNetForImageClassification(cfg)


def vit(attn):
    cfg = transformers.ViTConfig(
        image_size=16, patch_size=4, num_channels=3, hidden_size=32, num_hidden_layers=2,
        num_attention_heads=2, intermediate_size=64, num_labels=5, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, attn_implementation=attn)
    return transformers.ViTForImageClassification(cfg)


def build(arch: str, attn: str = "eager") -> torch.nn.Module:
    """A fresh model of `arch` (one of ARCHS), seeded so every call gives the same weights."""
    if arch not in ARCHS:
        raise ValueError(f"unknown model {arch!r}; choose one of {ARCHS}")
    torch.manual_seed(0)
    return globals()[arch](attn)


def batch(arch, padded=None):
    """A fixed CPU batch (keyword arguments of the model's forward). `padded`: pass a
    2-D attention mask in which the second sequence is padded (the mask changes the
    result); default: BERT yes, the others no."""
    padded = arch == "bert" if padded is None else padded
    g = torch.Generator().manual_seed(1)
    if arch in ("resnet", "vit"):
        return {"pixel_values": torch.randn(4, 3, 16, 16, generator=g),
                "labels": torch.randint(0, 5, (4,), generator=g)}
    if arch == "gpt2_small":   # batch 2 x 128 over the real vocabulary
        ids = torch.randint(0, 50257, (2, 128), generator=g)
        return {"input_ids": ids, "labels": ids}
    ids = torch.randint(0, VOCAB, (2, 8), generator=g)
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, 6:] = 0
    masked = {"attention_mask": mask} if padded else {}
    if arch == "t5":
        return {"input_ids": ids, "labels": torch.randint(0, VOCAB, (2, 5), generator=g), **masked}
    if arch == "bert":
        labels = ids.clone()
        labels[:, ::2] = -100  # masked-LM: only some positions are scored
        return {"input_ids": ids, "token_type_ids": (torch.arange(8) >= 4).long().expand(2, 8).contiguous(),
                "labels": labels, **masked}
    return {"input_ids": ids, "labels": ids, **masked}  # causal LMs shift the labels themselves


class HFWorkload:
    """Model `arch` trained on its fixed batch with AdamW, shaped like lazyxla/workloads.py's
    Workload (model, inputs, targets, loss, optimizer): bench W6 (`gpt2-124m`) and the
    "hf-<arch>" workloads. `inputs` is the batch's input ids (pixels for the vision models),
    `targets` its labels; other inputs of `batch` (BERT's token types) keep their defaults."""

    def __init__(self, name: str, arch: str, attn: str | None = None) -> None:
        self.name = name
        self.model = build(arch, attn or BENCH_ATTN.get(arch, "sdpa"))
        kw = batch(arch, padded=False)
        self.key = "pixel_values" if "pixel_values" in kw else "input_ids"
        self.inputs, self.targets = kw[self.key], kw["labels"]   # causal LMs shift the labels themselves

    def loss(self, model: torch.nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return model(**{self.key: inputs, "labels": targets}).loss

    def optimizer(self, params, foreach: bool | None = None) -> torch.optim.Optimizer:
        return torch.optim.AdamW(params, lr=3e-4, foreach=foreach)
