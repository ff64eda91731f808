"""The HF Trainer + DeepSpeed ZeRO-3 rows replayed through a model of the caching allocator.

    .venv/bin/python bench/hf_zero3_reserved_trace.py

An experiment behind docs/marp-stacks.md ("The worst rows, and why"), not a MARP term. The
reserved rows of gpjt/fine-tune-2024-04 (bench/data/marp_published.yaml, `hf/...`) sit 1-16 GiB
above their active peak. For each run this replays the allocation order the code states
through bench/caching_allocator.py, with the allocator setting the row's note names (default
caching, or expandable segments; "not stated" is replayed as default), and prints the
allocated and reserved peaks beside the measured ones and MARP's.
Writes bench/results/hf_zero3_reserved_trace.json.

The order (DeepSpeed v0.14.2, transformers 4.40.0, torch 2.2.2; the scripts load the model
in fp32 before TrainingArguments, so not under zero.Init):
1. engine.py `_configure_distributed_model`: `module.half()` on the CPU, then
   `module.to(device)`: nn.Module._apply moves each submodule's children first, then its own
   parameters, then its buffers: each layer's q/k/v/o projections, its rotary embedding's
   `inv_freq` and cos/sin caches (max_position_embeddings x head_dim, 16-bit after half():
   Qwen2RotaryEmbedding `cos_cached`, LlamaRotaryEmbedding `_cos_cached`), the MLP, the norms.
2. parameter_offload.py `_convert_to_zero_parameters` -> partition_parameters.py
   `Init(module=...)`: per parameter, `_partition_param` allocates its partition
   (`torch.empty(partition_size)`), copies, and `free_param` frees the whole parameter.
3. stage3.py `_create_fp16_partitions_with_defragmentation` -> `defragment`: every partition
   is copied to the CPU and freed, `empty_cache()` returns every wholly free segment, and one
   flat 16-bit buffer is copied back. Only segments a live buffer shares (the rotary caches)
   stay reserved: the whole 16-bit model placed on each GPU in 1 is not kept.
4. `_create_fp32_partitions`: per sub-group `flat.clone().float()` (the clone is freed);
   `initialize_optimizer_states`: a zeroed fp32 buffer of the largest sub-group, freed on
   return (the moments come at the first step); `_setup_for_real_optimizer`: the ipg bucket
   (`reduce_bucket_size` 16-bit elements), then `grad_partitions_flat_buffer`. The Trainer's
   two parameter groups (weight decay or not) are split into sub-groups by `sub_group_size`.
5. Each step, as the coordinator runs the first one (no complete module trace: every
   module's parameters are released after its forward and after its backward; no prefetch):
   each linear's weight gathered whole into a buffer of its own on the all-gather stream
   (`all_gather_coalesced` with one parameter; none on one rank), kept after the forward by
   the weight view torch's linear saves (`saved_weight_views`, the model is not built under
   zero.Init); the layers' saved activations (one block per layer, MARP's hf_layer_bytes),
   or under reentrant full recompute the layer inputs, a no-grad forward's transient
   (3 x tokens x ffn 16-bit values) and in backward the recomputed layer; the loss
   (ForCausalLM.forward: the 16-bit logits, `.float()`, the shifted `.contiguous()` copy,
   log_softmax; the Trainer drops the outputs before backward) and its backward; each
   parameter's 16-bit gradient and the ipg bucket's rules (`Buckets`); the step:
   `has_overflow`'s isinf (`abs()`'s 16-bit copy and a bool tensor, ATen's `abs() == inf`) and
   isnan (a bool tensor) on the reduce stream, `get_grad_norm_direct`'s
   `.double()` copy of each gradient partition, then per sub-group `flatten(...).to(fp32)`
   and, at the first step, FusedAdam's two moments. Two steps are replayed.
Left out: the embedding's and final norm's activations, attention masks, the inputs, a
layer's backward as separate tensors (one transient block of MARP's live - saved), the
prefetching and reuse-distance rules of later steps, and frees deferred by record_stream
(every free here is immediate).
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
from frenzy_predictor.stacks import DEEPSPEED_SUB_GROUP_ELEMENTS, hf_layer_bytes  # noqa: E402
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


class Buckets:
    """stage3.py's ipg bucket: `reduce_independent_p_g_buckets_and_remove_grads` reduces the
    bucket before a gradient that would overflow it; `__add_grad_to_ipg_bucket` copies a
    gradient that fits into the bucket buffer (its own block is freed) and leaves one that does
    not in its block until its bucket is reduced; `reduce_scatter_coalesced` copies a bucket of
    more than one gradient (or one dp does not divide) into a padded buffer on the reduce
    stream (`torch.cat`)."""

    def __init__(self, a: CachingAllocator, bucket_elements: int, dp: int):
        self.a, self.size, self.dp = a, bucket_elements, dp
        self.grads: list[tuple[int, int | None]] = []  # (elements, an uncopied gradient's block)

    def add(self, elements: int, grad: int) -> None:
        held = sum(e for e, _ in self.grads)
        if held + elements > self.size and held > 0:
            self.reduce()
            held = 0
        if held + elements <= self.size:
            self.a.free(grad)
            grad = None
        self.grads.append((elements, grad))

    def reduce(self) -> None:
        if not self.grads:
            return
        padded = sum(-(-e // self.dp) * self.dp for e, _ in self.grads)
        if len(self.grads) > 1 or self.grads[0][0] % self.dp:
            self.a.free(self.a.malloc(padded * HALF_BYTES, stream="reduce",
                                      what="bucket copy (torch.cat)"))
        for _, grad in self.grads:
            if grad is not None:
                self.a.free(grad)
        self.grads = []


def sub_group_sizes(params: list[tuple[str, int, bool]], dp: int, sub_group_elements: int,
                    ) -> list[int]:
    """stage3.py `_create_fp16_sub_groups` over the Trainer's two parameter groups (weight
    decay or not): a sub-group closes once it holds sub_group_size partition elements."""
    out = []
    for decay in (True, False):
        parts = [-(-e // dp) for _, e, d in params if d == decay]
        if sum(parts) <= sub_group_elements:
            out.append(sum(parts))
            continue
        held = 0
        for i, n in enumerate(parts):
            held += n
            if held >= sub_group_elements or i == len(parts) - 1:
                out.append(held)
                held = 0
    return [n for n in out if n]


def trace(arch: ModelArch, recipe: Recipe, plan: ParallelPlan, seq_len: int,
          bucket_elements: int, sub_group_elements: int = DEEPSPEED_SUB_GROUP_ELEMENTS,
          saved_weight_views: bool = True, expandable_segments: bool = False,
          steps: int = 2) -> CachingAllocator:
    """Replay one rank's ZeRO-3 run through the allocator; see the module docstring."""
    if plan.tp != 1 or plan.pp != 1:
        raise ValueError("only data parallelism is traced")
    if plan.dp > 1 and arch.qkv_bias:
        raise ValueError("coalesced all-gathers (a module of several parameters) are not traced")
    dp = plan.dp
    a = CachingAllocator(expandable_segments=expandable_segments)
    params = parameters(arch)
    # 1-3: load, partition, defragment
    loaded = {name: a.malloc(nbytes, what=f"load {name}") for name, nbytes in load_order(arch)}
    partitions = []
    for name, elements, _ in params:
        partitions.append(a.malloc(-(-elements // dp) * HALF_BYTES, what="partition"))
        a.free(loaded.pop(name))
    for handle in partitions:
        a.free(handle)
    a.empty_cache()
    shard = sum(-(-e // dp) for _, e, _ in params)
    sub_groups = sub_group_sizes(params, dp, sub_group_elements)
    a.malloc(shard * HALF_BYTES, what="flat 16-bit partitions")
    # 4: fp32 master partitions, the start-up gradient buffer, the ipg bucket, grad partitions
    for n in sub_groups:
        clone = a.malloc(n * HALF_BYTES, what="fp32 partitions: clone")
        a.malloc(n * FP32_BYTES, what="fp32 partitions")
        a.free(clone)
    a.free(a.malloc(max(sub_groups) * FP32_BYTES, what="initialize_optimizer_states buffer"))
    a.malloc(bucket_elements * HALF_BYTES, what="ipg bucket")
    a.malloc(shard * HALF_BYTES, what="grad_partitions_flat_buffer")

    def gather(elements: int, what: str) -> int | None:
        """One parameter's all-gather buffer, on the all-gather stream (none on one rank)."""
        if dp == 1:
            return None
        return a.malloc(-(-elements // dp) * dp * HALF_BYTES, stream="allgather", what=what)

    def release(handle: int | None) -> None:
        if handle is not None:
            a.free(handle)

    tokens = plan.micro_batch * seq_len
    shifted = plan.micro_batch * (seq_len - 1)
    logits = tokens * arch.vocab_size
    hidden = tokens * arch.hidden_size * HALF_BYTES
    full = plan.recompute == "full"
    saved, live = hf_layer_bytes(arch, recipe, plan, seq_len)
    recomputed = hf_layer_bytes(arch, recipe, dataclasses.replace(plan, recompute="none"),
                                seq_len)[0] if full else 0
    no_grad_peak = 3 * tokens * arch.ffn_hidden_size * HALF_BYTES  # gate, up and act(gate)*up
    weights = [(n, e) for n, e, _ in params if "_proj" in n]
    embed = arch.vocab_size * arch.hidden_size
    for step in range(steps):
        buckets = Buckets(a, bucket_elements, dp)
        # 5: forward. Step 1's coordinator (no complete trace yet) releases every module's
        # parameters after its forward; a saved weight view keeps the buffer alive.
        w = gather(embed, "gather embed_tokens")
        layer_inputs = [a.malloc(hidden, what="embedding output")]
        release(w)
        views: list[list[int]] = []
        for layer in range(arch.num_layers):
            kept = []
            if full:  # reentrant checkpoint: the layer runs under no_grad, its input is kept
                transient = a.malloc(no_grad_peak, what="no-grad layer forward")
            for name, elements in weights:
                if name.startswith(f"{layer}."):
                    w = gather(elements, f"gather {name}")
                    if full or not saved_weight_views:
                        release(w)
                    elif w is not None:
                        kept.append(w)
            views.append(kept)
            if full:
                a.free(transient)
                layer_inputs.append(a.malloc(hidden, what="layer output"))
            else:
                layer_inputs.append(a.malloc(saved, what="layer activations"))
        head_w = gather(embed, "gather lm_head") if not arch.tied_embeddings else None
        head_view = head_w if saved_weight_views else None
        if not saved_weight_views:
            release(head_w)
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
        w = gather(embed, "gather lm_head for backward") if not arch.tied_embeddings else None
        head = a.malloc(embed * HALF_BYTES, what="head grad")
        a.free(g4)
        release(w)
        release(head_view)
        if not arch.tied_embeddings:
            buckets.add(embed, head)
        for layer in reversed(range(arch.num_layers)):
            names = [(n, e) for n, e, _ in layer_tensors(arch, layer)]
            again, kept = None, views[layer]
            if full:  # the recompute runs under grad: its linears save their weights' views
                again = a.malloc(recomputed, what="recomputed layer")
                for name, elements in names:
                    if "_proj" in name:
                        w = gather(elements, f"recompute gather {name}")
                        if saved_weight_views and w is not None:
                            kept.append(w)
                        else:
                            release(w)
            transient = a.malloc(max(live - (recomputed or saved), 0), what="layer backward")
            for name, elements in reversed(names):
                w = gather(elements, f"backward gather {name}") if "_proj" in name else None
                buckets.add(elements, a.malloc(elements * HALF_BYTES, what=f"grad {name}"))
                release(w)
            a.free(transient)
            for w in kept:
                a.free(w)
            if again is not None:
                a.free(again)
            a.free(layer_inputs.pop())
        w = gather(embed, "gather embed_tokens for backward")
        grad = a.malloc(embed * HALF_BYTES, what="embedding grad")
        release(w)
        if arch.tied_embeddings:  # the head's gradient and the embedding's are summed
            a.free(head)
        buckets.add(embed, grad)
        a.free(layer_inputs.pop())
        buckets.reduce()
        # the step
        # isinf is `abs() == inf` (ATen TensorCompare.cpp): a 16-bit copy beside its bool
        absolute = a.malloc(shard * HALF_BYTES, stream="reduce", what="has_overflow isinf abs()")
        inf = a.malloc(shard * BOOL_BYTES, stream="reduce", what="has_overflow isinf")
        a.free(absolute)
        a.free(inf)
        a.free(a.malloc(shard * BOOL_BYTES, stream="reduce", what="has_overflow isnan"))
        for name, elements, _ in params:
            a.free(a.malloc(-(-elements // dp) * FP64_BYTES, what=f"grad norm {name}.double()"))
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
    out = []
    for key, pair in runs.items():
        arch, recipe, plan, seq_len, _ = row_job(pair["allocated"])
        expandable = "expandable segments" in pair["reserved"]["note"]  # the note's allocator
        a = trace(arch, recipe, plan, seq_len, pair["allocated"]["reduce_bucket_size"],
                  pair["allocated"].get("sub_group_size") or DEEPSPEED_SUB_GROUP_ELEMENTS,
                  saved_weight_views=pair["allocated"].get("zero_init") is False,
                  expandable_segments=expandable)
        entry = {"id": key, "allocator": "expandable segments" if expandable else "default"}
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
    return {"rows": out}


def main() -> None:
    result = run()
    print(f"{'run':40s} {'allocator':10s} {'metric':9s} {'MiB':>7s} {'MARP':>8s} {'trace':>8s}  "
          "reserved peak at")
    for r in result["rows"]:
        for metric in ("allocated", "reserved"):
            m = r[metric]
            print(f"{r['id'][:40]:40s} {r['allocator'][:10]:10s} {metric:9s} "
                  f"{m['measured_bytes'] / MIB:7.0f} {m['marp_error_pct']:+7.1f}% "
                  f"{m['trace_error_pct']:+7.1f}%  "
                  f"{r['reserved_peak_at'] if metric == 'reserved' else ''}")
    save_result(result, ROOT / "bench" / "results" / "hf_zero3_reserved_trace.json")


if __name__ == "__main__":
    main()
