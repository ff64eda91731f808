"""The reference decoder-only transformer that Frenzy's memory predictions describe.

One readable, nanoGPT-style implementation of both catalog families:

* gpt2:  LayerNorm, fused qkv projection with biases, GELU(tanh) 4h MLP, learned positions,
         tied embeddings.
* llama: RMSNorm, separate q/k/v projections (qwen2: biases on q, k, v), RoPE, grouped-query
         attention (num_kv_heads), SwiGLU MLP, optionally tied embeddings, no other biases.

Weights and activations are held in the recipe's precision (bf16/fp16/fp32) directly; there is
no autocast. `model(input_ids, labels)` returns the mean next-token cross-entropy as an fp32
scalar (the logits are cast to fp32 before the loss, as Megatron-LM does).

Every op is chosen so that what autograd saves on CPU equals what the CUDA kernels save, because
the CPU profiler (frenzy_predictor.profiler) measures this exact code. The choices (see
docs/recipe.md, "CPU vs CUDA"):

* Dropout is an explicit autograd Function saving a 1-byte bool mask (CUDA's fused dropout saves
  a bool mask; CPU `F.dropout` would save a 16-bit mask).
* RMSNorm is an explicit autograd Function saving the 16-bit input and the fp32 1/rms per row,
  like the fused CUDA kernels (apex / Transformer Engine / torch's `_fused_rms_norm`); CPU
  `F.rms_norm` is a composite that saves several fp32 copies.
* Flash attention uses `F.scaled_dot_product_attention`; it saves q, k, v, the output and an
  fp32 logsumexp on both CPU and CUDA. GQA uses `enable_gqa=True`, so k and v are never
  expanded. The CPU kernel has no dropout (it would fall back to the fp32 math path), so off-CUDA
  attention-probability dropout is skipped under flash; CUDA flash keeps only a 16-byte RNG state.
* Eager attention materialises the s x s scores and keeps softmax in the activation dtype.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from frenzy.catalog.models import ModelArch
from frenzy.domain import RECOMPUTES, Recipe

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
NORM_EPS = 1e-5
ROPE_THETA = 10_000.0
INIT_STD = 0.02


class _MaskDropout(torch.autograd.Function):
    """Dropout that saves a bool mask for backward (1 byte per element, like CUDA)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, p: float) -> torch.Tensor:
        keep = torch.rand(x.shape, dtype=x.dtype, device=x.device) >= p
        ctx.save_for_backward(keep)
        ctx.scale = 1.0 / (1.0 - p)
        return x * keep * ctx.scale

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (keep,) = ctx.saved_tensors
        return grad * keep * ctx.scale, None


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    if not training or p == 0.0:
        return x
    return _MaskDropout.apply(x, p)


def _acc(x: torch.Tensor) -> torch.dtype:
    """Accumulation dtype: fp32 for 16-bit inputs, else the input's own."""
    return torch.promote_types(x.dtype, torch.float32)


class _RMSNormFn(torch.autograd.Function):
    """y = x / rms(x) * w, saving x (activation dtype) and 1/rms (fp32), like fused kernels."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        x32 = x.to(_acc(x))
        rstd = torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, weight, rstd)
        return (x32 * rstd).to(x.dtype) * weight

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, weight, rstd = ctx.saved_tensors
        acc = _acc(x)
        x_hat = x.to(acc) * rstd
        grad_w = (grad.to(acc) * x_hat).sum(dim=tuple(range(grad.dim() - 1))).to(weight.dtype)
        g = grad.to(acc) * weight.to(acc)
        grad_x = rstd * (g - x_hat * (g * x_hat).mean(-1, keepdim=True))
        return grad_x.to(x.dtype), grad_w, None


class RMSNorm(nn.Module):
    def __init__(self, dim: int, dtype: torch.dtype, device=None):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim, dtype=dtype, device=device))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _RMSNormFn.apply(x, self.weight, NORM_EPS)


def rope_tables(arch: ModelArch, seq_len: int, dtype: torch.dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of shape (seq_len, 1, head_dim / 2), shared by all layers of one forward pass."""
    half = arch.head_dim // 2
    inv_freq = 1.0 / (ROPE_THETA ** (torch.arange(half, device=device, dtype=torch.float32) / half))
    angles = torch.outer(torch.arange(seq_len, device=device, dtype=torch.float32), inv_freq)
    return angles.cos().to(dtype).unsqueeze(1), angles.sin().to(dtype).unsqueeze(1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE on (batch, seq, heads, head_dim); saves only the shared cos/sin."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class Attention(nn.Module):
    def __init__(self, arch: ModelArch, recipe: Recipe, selective: bool, dtype, device=None):
        super().__init__()
        h, kv, bias = arch.hidden_size, arch.kv_dim, arch.family == "gpt2"
        self.arch, self.recipe, self.selective = arch, recipe, selective
        if arch.family == "gpt2":
            self.c_attn = nn.Linear(h, h + 2 * kv, bias=True, dtype=dtype, device=device)
        else:
            self.q_proj = nn.Linear(h, h, bias=arch.qkv_bias, dtype=dtype, device=device)
            self.k_proj = nn.Linear(h, kv, bias=arch.qkv_bias, dtype=dtype, device=device)
            self.v_proj = nn.Linear(h, kv, bias=arch.qkv_bias, dtype=dtype, device=device)
        self.o_proj = nn.Linear(h, h, bias=bias, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
        b, s, _ = x.shape
        a, kv_heads, d = self.arch.num_heads, self.arch.num_kv_heads, self.arch.head_dim
        # Head counts come from the tensors: under tensor parallelism each rank holds a slice.
        if self.arch.family == "gpt2":
            # Megatron's fused layout, per kv group [its q heads..., k, v]: a column-wise split
            # over tensor-parallel ranks hands each rank whole groups.
            qkv = self.c_attn(x).view(b, s, -1, a // kv_heads + 2, d)
            q = qkv[..., :-2, :].flatten(2, 3)  # a view while a == kv_heads (all gpt2 models)
            k, v = qkv[..., -2, :], qkv[..., -1, :]
        else:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
            q, k, v = q.view(b, s, -1, d), k.view(b, s, -1, d), v.view(b, s, -1, d)
        if rope is not None:  # before the transpose, so q keeps the (b, s, heads, d) layout
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        # (b, heads, s, d) views; SDPA's output inherits q's layout, so the transpose back
        # below is free (no copy) for flash attention.
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if self.selective:  # Korthikanti et al. 2022: recompute only the attention core
            y = checkpoint(self._core, q, k, v, use_reentrant=False)
        else:
            y = self._core(q, k, v)
        y = y.transpose(1, 2).reshape(b, s, -1)
        return dropout(self.o_proj(y), self.recipe.dropout, self.training)

    def _core(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        p = self.recipe.dropout if self.training else 0.0
        if self.recipe.attention == "flash":
            if q.device.type != "cuda":
                p = 0.0  # CPU flash kernel has no dropout (see module docstring)
            return F.scaled_dot_product_attention(
                q, k, v, is_causal=True, dropout_p=p, enable_gqa=k.shape[1] != q.shape[1])
        group = q.shape[1] // k.shape[1]
        if group > 1:
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        s = q.shape[2]
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
        causal = torch.ones(s, s, dtype=torch.bool, device=q.device).triu_(1)
        probs = F.softmax(scores.masked_fill(causal, float("-inf")), dim=-1)
        return dropout(probs, p, self.training) @ v


class MLP(nn.Module):
    def __init__(self, arch: ModelArch, recipe: Recipe, dtype, device=None):
        super().__init__()
        h, f = arch.hidden_size, arch.ffn_hidden_size
        self.family, self.p = arch.family, recipe.dropout
        if arch.family == "gpt2":
            self.c_fc = nn.Linear(h, f, dtype=dtype, device=device)
            self.c_proj = nn.Linear(f, h, dtype=dtype, device=device)
        else:
            self.gate_proj = nn.Linear(h, f, bias=False, dtype=dtype, device=device)
            self.up_proj = nn.Linear(h, f, bias=False, dtype=dtype, device=device)
            self.down_proj = nn.Linear(f, h, bias=False, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.family == "gpt2":
            y = self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))
        else:
            y = self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        return dropout(y, self.p, self.training)


class Block(nn.Module):
    def __init__(self, arch: ModelArch, recipe: Recipe, recompute: str, dtype, device=None):
        super().__init__()
        norm = (lambda: nn.LayerNorm(arch.hidden_size, eps=NORM_EPS, dtype=dtype, device=device)) \
            if arch.family == "gpt2" else (lambda: RMSNorm(arch.hidden_size, dtype, device))
        self.norm1, self.norm2 = norm(), norm()
        self.attn = Attention(arch, recipe, recompute == "selective", dtype, device)
        self.mlp = MLP(arch, recipe, dtype, device)

    def forward(self, x: torch.Tensor, rope) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), rope)
        return x + self.mlp(self.norm2(x))


class Transformer(nn.Module):
    """`forward(input_ids, labels) -> fp32 scalar loss`; labels are already shifted by the caller.

    A pipeline stage is the same module with the parts other stages own set to None
    (`frenzy_trainer.parallelize.pipeline_stage`): without `embed` it takes hidden states,
    without `lm_head` it returns them, and with `labels=None` it returns the logits (the
    pipeline schedule computes the loss). `blocks` is keyed by layer index, so every stage
    keeps the full model's parameter names and checkpoints reshard across stage counts.
    """

    def __init__(self, arch: ModelArch, recipe: Recipe, recompute: str = "none", device=None):
        super().__init__()
        arch.validate()
        recipe.validate()
        if recompute not in RECOMPUTES:
            raise ValueError(f"recompute: {recompute!r} is not one of {RECOMPUTES}")
        dtype = DTYPES[recipe.precision]
        self.arch, self.recipe, self.recompute, self.dtype = arch, recipe, recompute, dtype
        # (this rank's index, shard count) of the sequence dimension under sequence parallelism
        self.sequence_shard = (0, 1)
        self.embed = nn.Embedding(arch.vocab_size, arch.hidden_size, dtype=dtype, device=device)
        self.pos_embed = (nn.Embedding(arch.max_position_embeddings, arch.hidden_size, dtype=dtype,
                                       device=device) if arch.family == "gpt2" else None)
        self.blocks = nn.ModuleDict({str(i): Block(arch, recipe, recompute, dtype, device)
                                     for i in range(arch.num_layers)})
        self.norm = (nn.LayerNorm(arch.hidden_size, eps=NORM_EPS, dtype=dtype, device=device)
                     if arch.family == "gpt2" else RMSNorm(arch.hidden_size, dtype, device))
        self.lm_head = nn.Linear(arch.hidden_size, arch.vocab_size, bias=False, dtype=dtype, device=device)
        if arch.tied_embeddings:
            self.lm_head.weight = self.embed.weight
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                module.weight.normal_(0.0, INIT_STD)
                if getattr(module, "bias", None) is not None:
                    module.bias.zero_()
            elif isinstance(module, (nn.LayerNorm, RMSNorm)):  # after a build on "meta"
                module.weight.fill_(1.0)
                if getattr(module, "bias", None) is not None:
                    module.bias.zero_()

    def forward(self, inputs: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        shard, shards = self.sequence_shard
        seq_len = inputs.shape[1] * (shards if self.embed is None else 1)
        if seq_len > self.arch.max_position_embeddings and self.pos_embed is not None:
            raise ValueError(f"seq_len {seq_len} exceeds max_position_embeddings "
                             f"{self.arch.max_position_embeddings}")
        x = inputs
        if self.embed is not None:
            x = self.embed(inputs)
            if self.pos_embed is not None:  # this rank's positions (all of them without SP)
                local = seq_len // shards
                x = x + self.pos_embed(torch.arange(shard * local, (shard + 1) * local,
                                                    device=inputs.device))
            x = dropout(x, self.recipe.dropout, self.training)
        rope = None  # x holds the compute dtype (FSDP2 casts fp32 parameters for compute)
        if self.arch.family != "gpt2":
            rope = rope_tables(self.arch, seq_len, x.dtype, inputs.device)
        for block in self.blocks.values():
            if self.recompute == "full":  # keep only each block's input; recompute the rest
                x = checkpoint(block, x, rope, use_reentrant=False)
            else:
                x = block(x, rope)
        if self.lm_head is None:
            return x
        if labels is None:
            return self.lm_head(self.norm(x))
        return next_token_loss(self.lm_head(self.norm(x)), labels)  # no frame keeps the logits


def next_token_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy in fp32, as Megatron-LM computes it."""
    logits32 = logits.float()
    del logits  # frees the 16-bit logits as soon as the fp32 copy exists
    return F.cross_entropy(logits32.flatten(0, 1), labels.flatten())


def build_model(arch: ModelArch, recipe: Recipe, recompute: str = "none", device=None) -> Transformer:
    """The reference model in the recipe's precision; `device="meta"` builds without memory."""
    return Transformer(arch, recipe, recompute, device=device)
