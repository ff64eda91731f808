"""Collect Megatron-LM's functional-test memory golden values into bench/data/marp_published.yaml.

    .venv/bin/python bench/marp_published_collect.py /path/to/Megatron-LM.git

How the Megatron rows of the published table were made, first hand, so anyone can redo it. Each
test case holds a model_config.yaml (the exact command line) and golden_values_*.json with
`mem-max-allocated-bytes`: torch.cuda.max_memory_allocated() as Megatron's training_log writes it
to TensorBoard, which only the last rank (last pipeline stage, last tp rank) has
(megatron/training/global_vars.py, _set_tensorboard_writer). The value is cumulative over the
run; we take the last step's. Kept: dense GPT cases that run one 8-GPU node (recipes
tests/test_utils/recipes/h100/gpt.yaml), bf16, no fp8, no MoE, no MLA, not a resumed run (a
resume's maximum restarts from the checkpoint load) and not an RL/inference case. The torchtitan
rows of the table are written by hand from its benchmarks/*.md (see the file).
"""
from __future__ import annotations

import argparse
import json
import subprocess

import yaml

TESTS = "tests/functional_tests/test_cases/gpt"
GPUS_PER_NODE = 8  # tests/test_utils/recipes/{h100,a100}/gpt.yaml: nodes 1, gpus 8
PLATFORMS = ("dev_dgx_h100", "dev_dgx_a100", "lts_dgx_a100")
SKIP = ("resume", "fp8", "experts", "mla", "grpo", "inference", "release", "reruns", "distill",
        "modelopt", "weekly", "muon", "cudagraph", "offload", "frozen")


# Flags that change memory in ways the profiles do not model: a row with one is "approximate".
UNMODELLED = ("--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
              "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split",
              "--num-distributed-optimizer-instances")


def _git(repo: str, *args: str) -> str:
    return subprocess.run(["git", f"--git-dir={repo}", *args], capture_output=True, text=True,
                          check=True).stdout


def _padded_vocab(vocab: int, tp: int, divisible_by: int = 128) -> int:
    """megatron/training/tokenizer/tokenizer.py, _vocab_size_with_padding: a multiple of 128·tp."""
    multiple = divisible_by * tp
    return -(-vocab // multiple) * multiple


def rows(repo: str) -> list[dict]:
    commit = _git(repo, "rev-parse", "HEAD").strip()
    files = _git(repo, "ls-tree", "-r", "--name-only", "HEAD", TESTS).split()
    out = []
    for path in files:
        case_dir, name = path.rsplit("/", 1)
        case = case_dir.rsplit("/", 1)[1]
        platform = name.removeprefix("golden_values_").removesuffix(".json")
        if not name.startswith("golden_values_") or platform not in PLATFORMS:
            continue
        if any(word in case for word in SKIP):
            continue
        golden = json.loads(_git(repo, "show", f"HEAD:{path}"))
        metric = golden.get("mem-max-allocated-bytes")
        if not isinstance(metric, dict):
            continue
        config = yaml.safe_load(_git(repo, "show", f"HEAD:{case_dir}/model_config.yaml"))
        a = config.get("MODEL_ARGS", {})
        if a.get("--fp8-format") or a.get("--num-experts") or not a.get("--bf16"):
            continue
        steps = sorted((int(k), v) for k, v in metric["values"].items() if v != "nan")
        tp = int(a.get("--tensor-model-parallel-size", 1))
        pp = int(a.get("--pipeline-model-parallel-size", 1))
        cp = int(a.get("--context-parallel-size", 1))
        dp = GPUS_PER_NODE // (tp * pp * cp)
        h = int(a["--hidden-size"])
        heads = int(a["--num-attention-heads"])
        swiglu = bool(a.get("--swiglu"))
        vocab = int(a.get("--vocab-size", 50257))  # GPT-2 BPE vocab.json when not given
        rope = a.get("--position-embedding-type") == "rope"
        arch = {"family": "llama" if swiglu and rope else "gpt2", "hidden_size": h,
                "num_layers": int(a["--num-layers"]), "num_heads": heads,
                "num_kv_heads": int(a.get("--num-query-groups", heads)),
                "ffn_hidden_size": int(a.get("--ffn-hidden-size", 4 * h)),
                "vocab_size": _padded_vocab(vocab, tp),
                "max_position_embeddings": int(a.get("--max-position-embeddings",
                                                     a["--seq-length"])),
                "tied_embeddings": not a.get("--untie-embeddings-and-output-weights", False)}
        exact = arch["family"] == "gpt2" and not swiglu and not rope
        vp = a.get("--num-layers-per-virtual-pipeline-stage")
        notes = []
        if swiglu and not rope:
            notes.append("swiglu with learned positions: mapped as gpt2 family (GELU MLP)")
        if vp:
            notes.append(f"interleaved 1F1B, {vp} layer(s) per virtual stage")
        unmodelled = [flag for flag in UNMODELLED if a.get(flag)]
        notes += [f"{flag} (not modelled)" for flag in unmodelled]
        if a.get("--cross-entropy-loss-fusion"):  # modelled from PyTorch's compiler, not Megatron
            unmodelled.append("--cross-entropy-loss-fusion")
            notes.append("--cross-entropy-loss-fusion (torch.compile: one more fp32 logit buffer, "
                         "from Inductor's lowering of in-place updates)")
        if a.get("--defer-embedding-wgrad-compute"):
            notes.append("--defer-embedding-wgrad-compute")
        local = a.get("--transformer-impl") == "local"
        if local:  # the megatron profile assumes the default, Transformer Engine
            notes.append("local (non-TE) layers (the megatron profile counts Transformer "
                         "Engine's 32 MiB cuBLAS workspace, which they do not allocate)")
        if a.get("--attention-backend"):
            notes.append(f"--attention-backend {a['--attention-backend']}")
        out.append({
            "id": f"megatron/{case}/{platform}", "stack": "megatron",
            "source": f"https://github.com/NVIDIA/Megatron-LM/blob/{commit}/{case_dir}/{name}",
            "version": f"Megatron-LM {commit[:10]}", "gpu": platform.rsplit("_", 1)[1].upper(),
            "arch": arch, "seq_len": int(a["--seq-length"]),
            "micro_batch": int(a["--micro-batch-size"]),
            "global_batch": int(a["--global-batch-size"]),
            "dp": dp, "tp": tp, "pp": pp, "cp": cp, "ep": 1,
            "virtual_stages": (int(a["--num-layers"]) // pp // int(vp)) if vp else 1,
            **({"microbatch_group_size": int(group)} if (group := a.get(
                "--microbatch-group-size-per-virtual-pipeline-stage")) else {}),
            "distributed_optimizer": bool(a.get("--use-distributed-optimizer")),
            "sequence_parallel": bool(a.get("--sequence-parallel")),
            "recompute": a.get("--recompute-granularity", "none"),
            "dropout": 0.0 if a.get("--hidden-dropout") == 0.0 else 0.1,  # Megatron's default
            # --attention-backend unfused (TE's UnfusedDotProductAttention) and the local spec's
            # core attention keep the s x s softmax; auto/flash/fused keep no s x s tensor
            "attention": "eager" if a.get("--attention-backend") in ("unfused", "local")
            or a.get("--transformer-impl") == "local" else "flash",
            "cross_entropy_fusion": bool(a.get("--cross-entropy-loss-fusion")),
            "defer_embedding_wgrad": bool(a.get("--defer-embedding-wgrad-compute")),
            "metric": "allocated", "rank": "last",
            "measured_bytes": int(steps[-1][1]),
            "mapping": "clean" if exact and not vp and not unmodelled and not local
            else "approximate",
            "note": "; ".join(notes)})
    return out


def one_per_case(found: list[dict]) -> list[dict]:
    """One row per test case (the same run on other platforms is not a new data point): the
    first platform of PLATFORMS that has it."""
    best: dict[str, dict] = {}
    for r in found:
        case, platform = r["id"].rsplit("/", 1)
        if case not in best or PLATFORMS.index(platform) < \
                PLATFORMS.index(best[case]["id"].rsplit("/", 1)[1]):
            best[case] = r
    return sorted(best.values(), key=lambda r: r["id"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("repo", help="a Megatron-LM git directory (a clone or `fetch`'s mirror)")
    for r in one_per_case(rows(parser.parse_args().repo)):
        print(yaml.safe_dump([r], sort_keys=False, width=200), end="")


if __name__ == "__main__":
    main()
