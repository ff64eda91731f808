"""The HF Trainer + DeepSpeed ZeRO-3 rows on one GPU, replayed through the caching allocator.

    .venv/bin/python bench/hf_zero3_reserved_trace.py

An experiment behind docs/marp-stacks.md ("The worst rows, and why"), not a MARP term. The
reserved rows of gpjt/fine-tune-2024-04 (bench/data/marp_published.yaml, `hf/...`) sit 3-17 GiB
above their active peak. This replays, for each one-GPU row (Qwen1.5-0.5B), the allocation
order the code states through bench/caching_allocator.py and prints the allocated and reserved
peaks beside the measured ones and MARP's. Rows on more than one GPU (Llama-3-8B over 8) are
listed as not traced: their order also needs ZeRO-3's all-gather stream (one flat buffer per
coalesced fetch, prefetching ahead of the module trace) and frees deferred by record_stream,
whose timing the code does not fix. Writes bench/results/hf_zero3_reserved_trace.json.

The order (DeepSpeed v0.14.2, transformers 4.40.0, torch 2.2.2; the scripts load the model
in fp32 before TrainingArguments, so not under zero.Init):
1. engine.py `_configure_distributed_model`: `module.half()` on the CPU, then
   `module.to(device)`: nn.Module._apply moves each submodule's children first, then its own
   parameters, then its buffers, so each layer's q/k/v/o weights and biases, its rotary
   embedding's `inv_freq`, `cos_cached`, `sin_cached` (models/qwen2/modeling_qwen2.py
   Qwen2RotaryEmbedding, max_position_embeddings x head_dim, 16-bit after half()), then the
   MLP's and the norms' weights.
2. parameter_offload.py `_convert_to_zero_parameters` -> partition_parameters.py
   `Init(module=...)`: per parameter, `_partition_param` allocates its partition
   (`torch.empty(partition_size)`, all of it on one rank), copies, and `free_param` frees it.
3. stage3.py `_create_fp16_partitions_with_defragmentation` -> `defragment`: every partition
   is copied to the CPU and freed, `empty_cache()` returns every wholly free segment, and one
   flat 16-bit buffer is copied back. Segments the rotary caches share stay reserved.
4. `_create_fp32_partitions`: per sub-group `flat.clone().float()` (the 16-bit clone is
   freed); `initialize_optimizer_states`: a zeroed fp32 buffer of the largest sub-group, freed
   on return (the moments are made at the first step); `_setup_for_real_optimizer`: the ipg
   bucket (`reduce_bucket_size` 16-bit elements), then `grad_partitions_flat_buffer`. The
   Trainer's two parameter groups (weight decay or not: biases and norms) are two sub-groups.
5. Each step: the layers' saved activations (one block per layer, MARP's hf_layer_bytes;
   under full recompute the block input, and the recomputed layer's in its backward); the loss
   (modeling_qwen2.py Qwen2ForCausalLM.forward: the 16-bit logits, `.float()`, the shifted
   `.contiguous()` copy, log_softmax; the Trainer drops the outputs before backward); backward
   through the loss, the tied head's gradient (held until the embedding's joins it), each
   parameter's 16-bit gradient (freed once copied into the ipg bucket, stage3.py
   `__add_grad_to_ipg_bucket`), the bucket's `torch.cat` copy on the reduce stream
   (comm/coalesced_collectives.py `reduce_scatter_coalesced`); the step: `has_overflow`'s
   isinf/isnan bool tensors on the reduce stream, `get_grad_norm_direct`'s `.double()` copy
   of each gradient partition, then per sub-group `flatten(...).to(fp32)` and, at the first
   step, FusedAdam's two moments. Two steps are replayed (the second allocates no moments).
Left out: the embedding's and final norm's activations, attention masks, the inputs, the
layers' backward as separate tensors (one transient block of MARP's live - saved), and frees
deferred by record_stream (every free here is immediate).
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
for sub in ("", "services/predictor", "bench"):
    sys.path.insert(0, str(ROOT / sub))

from benchio import save_result  # noqa: E402
from caching_allocator import CachingAllocator  # noqa: E402
from frenzy.catalog.models import ModelArch  # noqa: E402
from frenzy.domain import ParallelPlan, Recipe  # noqa: E402
from frenzy_predictor.stacks import hf_layer_bytes  # noqa: E402
from marp_published import DATA, predict, row_job  # noqa: E402

HALF_BYTES, FP32_BYTES, FP64_BYTES, BOOL_BYTES = 2, 4, 8, 1
MIB = 1 << 20


def layer_tensors(arch: ModelArch, layer: int) -> list[tuple[str, int, bool]]:
    """(name, elements, weight decay) of a llama-family layer's parameters, in module order."""
    h, q, kv, f = arch.hidden_size, arch.q_dim, arch.kv_dim, arch.ffn_hidden_size
    out = []
    for proj, rows in (("q", q), ("k", kv), ("v", kv)):
        out.append((f"{layer}.{proj}_proj", rows * h, True))
        if arch.qkv_bias:
            out.append((f"{layer}.{proj}_proj.bias", rows, False))
    out.append((f"{layer}.o_proj", h * q, True))
    out += [(f"{layer}.{p}_proj", f * h, True) for p in ("gate", "up", "down")]
    out += [(f"{layer}.input_layernorm", h, False), (f"{layer}.post_attention_layernorm", h, False)]
    return out


def parameters(arch: ModelArch) -> list[tuple[str, int, bool]]:
    """Every parameter tensor in module order (a tied head is the embedding)."""
    out = [("embed_tokens", arch.vocab_size * arch.hidden_size, True)]
    for layer in range(arch.num_layers):
        out += layer_tensors(arch, layer)
    out.append(("norm", arch.hidden_size, False))
    if not arch.tied_embeddings:
        out.append(("lm_head", arch.vocab_size * arch.hidden_size, True))
    return out


def load_order(arch: ModelArch) -> list[tuple[str, int]]:
    """(name, bytes) as module.to(device) moves the 16-bit model: per layer the attention's
    projections, then its rotary embedding's buffers, then the MLP, then the norms."""
    head_dim = arch.q_dim // arch.num_heads
    rotary = arch.max_position_embeddings * head_dim * HALF_BYTES
    out = [("embed_tokens", arch.vocab_size * arch.hidden_size * HALF_BYTES)]
    for layer in range(arch.num_layers):
        tensors = layer_tensors(arch, layer)
        attention = [t for t in tensors if "_proj" in t[0] and t[0].split(".")[1][0] in "qkvo"]
        out += [(n, e * HALF_BYTES) for n, e, _ in attention]
        out += [(f"{layer}.inv_freq", head_dim // 2 * HALF_BYTES),
                (f"{layer}.cos_cached", rotary), (f"{layer}.sin_cached", rotary)]
        out += [(n, e * HALF_BYTES) for n, e, _ in tensors if (n, e, _) not in attention]
    out.append(("norm", arch.hidden_size * HALF_BYTES))
    if not arch.tied_embeddings:
        out.append(("lm_head", arch.vocab_size * arch.hidden_size * HALF_BYTES))
    return out


def trace(arch: ModelArch, recipe: Recipe, plan: ParallelPlan, seq_len: int,
          bucket_elements: int, steps: int = 2) -> CachingAllocator:
    """Replay one rank's ZeRO-3 run (dp = 1) through the allocator; see the module docstring."""
    if plan.dp != 1 or plan.tp != 1 or plan.pp != 1:
        raise ValueError("only one-GPU runs are traced")
    a = CachingAllocator()
    params = parameters(arch)
    # 1-3: load, partition, defragment
    loaded = {name: a.malloc(nbytes, what=f"load {name}") for name, nbytes in load_order(arch)}
    partitions = []
    for name, elements, _ in params:
        partitions.append(a.malloc(elements * HALF_BYTES, what="partition"))
        a.free(loaded.pop(name))
    for handle in partitions:
        a.free(handle)
    a.empty_cache()
    total = sum(e for _, e, _ in params)
    sub_groups = [sum(e for _, e, decay in params if decay),
                  sum(e for _, e, decay in params if not decay)]
    a.malloc(total * HALF_BYTES, what="flat 16-bit partitions")
    # 4: fp32 master partitions, the start-up gradient buffer, the ipg bucket, grad partitions
    for n in sub_groups:
        clone = a.malloc(n * HALF_BYTES, what="fp32 partitions: clone")
        a.malloc(n * FP32_BYTES, what="fp32 partitions")
        a.free(clone)
    a.free(a.malloc(max(sub_groups) * FP32_BYTES, what="initialize_optimizer_states buffer"))
    a.malloc(bucket_elements * HALF_BYTES, what="ipg bucket")
    a.malloc(total * HALF_BYTES, what="grad_partitions_flat_buffer")
    tokens = plan.micro_batch * seq_len
    shifted = plan.micro_batch * (seq_len - 1)
    logits = tokens * arch.vocab_size
    saved, live = hf_layer_bytes(arch, recipe, plan, seq_len)
    recomputed, _ = hf_layer_bytes(arch, recipe, dataclasses.replace(plan, recompute="none"),
                                   seq_len) if plan.recompute == "full" else (0, 0)
    for step in range(steps):
        # 5: forward
        layers = [a.malloc(saved, what="layer activations") for _ in range(arch.num_layers)]
        fp16 = a.malloc(logits * HALF_BYTES, what="logits")
        fp32 = a.malloc(logits * FP32_BYTES, what="logits.float()")
        a.free(fp16)
        shift = a.malloc(shifted * arch.vocab_size * FP32_BYTES, what="shift_logits")
        log_softmax = a.malloc(shifted * arch.vocab_size * FP32_BYTES, what="log_softmax")
        a.free(fp32)
        a.free(shift)
        # backward through the loss and the head
        g = a.malloc(shifted * arch.vocab_size * FP32_BYTES, what="nll_loss backward")
        a.free(log_softmax)
        g2 = a.malloc(shifted * arch.vocab_size * FP32_BYTES, what="log_softmax backward")
        a.free(g)
        g3 = a.malloc(logits * FP32_BYTES, what="slice backward")
        a.free(g2)
        g4 = a.malloc(logits * HALF_BYTES, what="float() backward")
        a.free(g3)
        head = a.malloc(arch.vocab_size * arch.hidden_size * HALF_BYTES, what="head grad")
        a.free(g4)
        if not arch.tied_embeddings:
            a.free(head)
        for layer in reversed(range(arch.num_layers)):
            again = a.malloc(recomputed, what="recomputed layer") if recomputed else None
            transient = a.malloc(max(live - (recomputed or saved), 0), what="layer backward")
            for name, elements, _ in reversed(layer_tensors(arch, layer)):
                a.free(a.malloc(elements * HALF_BYTES, what=f"grad {name}"))
            a.free(transient)
            if again is not None:
                a.free(again)
            a.free(layers[layer])
        a.free(a.malloc(arch.vocab_size * arch.hidden_size * HALF_BYTES, what="embedding grad"))
        if arch.tied_embeddings:
            a.free(head)
        a.free(a.malloc(total * HALF_BYTES, stream="reduce", what="bucket copy (torch.cat)"))
        # the step
        for _ in ("isinf", "isnan"):
            a.free(a.malloc(total * BOOL_BYTES, stream="reduce", what="has_overflow"))
        for name, elements, _ in params:
            a.free(a.malloc(elements * FP64_BYTES, what=f"grad norm {name}.double()"))
        for n in sub_groups:
            flat = a.malloc(n * HALF_BYTES, what="step: flatten(grads)")
            grad = a.malloc(n * FP32_BYTES, what="step: fp32 grad")
            a.free(flat)
            if step == 0:
                a.malloc(n * FP32_BYTES, what="exp_avg")
                a.malloc(n * FP32_BYTES, what="exp_avg_sq")
            a.free(grad)
    return a


def run() -> dict:
    rows = [r for r in yaml.safe_load(DATA.read_text()) if r["stack"] == "hf"]
    runs: dict[str, dict] = {}
    for row in rows:
        key = row["id"].removesuffix("/reserved")
        runs.setdefault(key, {"id": key})[row["metric"]] = row
    out, not_traced = [], []
    for key, pair in runs.items():
        arch, recipe, plan, seq_len, _ = row_job(pair["allocated"])
        if plan.dp != 1:
            not_traced.append({"id": key, "reason": f"dp {plan.dp}: the all-gather stream's "
                               "order and the deferred frees are not traced"})
            continue
        a = trace(arch, recipe, plan, seq_len, pair["allocated"]["reduce_bucket_size"])
        entry = {"id": key}
        for metric, traced in (("allocated", a.allocated_peak_bytes),
                               ("reserved", a.reserved_peak_bytes)):
            measured = pair[metric]["measured_bytes"]
            marp = predict(pair[metric])["ours"]
            entry[metric] = {"measured_bytes": measured, "marp_bytes": int(marp),
                             "trace_bytes": traced,
                             "marp_error_pct": round(100 * (marp - measured) / measured, 2),
                             "trace_error_pct": round(100 * (traced - measured) / measured, 2)}
        entry["reserved_peak_at"] = a.reserved_peak_at
        out.append(entry)
    return {"rows": out, "not_traced": not_traced}


def main() -> None:
    result = run()
    print(f"{'run':40s} {'metric':9s} {'MiB':>7s} {'MARP':>8s} {'trace':>8s}  reserved peak at")
    for r in result["rows"]:
        for metric in ("allocated", "reserved"):
            m = r[metric]
            print(f"{r['id'][:40]:40s} {metric:9s} {m['measured_bytes'] / MIB:7.0f} "
                  f"{m['marp_error_pct']:+7.1f}% {m['trace_error_pct']:+7.1f}%  "
                  f"{r['reserved_peak_at'] if metric == 'reserved' else ''}")
    for r in result["not_traced"]:
        print(f"{r['id'][:40]:40s} not traced: {r['reason']}")
    save_result(result, ROOT / "bench" / "results" / "hf_zero3_reserved_trace.json")


if __name__ == "__main__":
    main()
