"""Which plans a job's launcher can run: one check shared by MARP's plan search and the trainer.

A plan MARP offers is launched as it is, and a launcher that refuses it fails the job at launch.
So each launcher's rules are written once, here: MARP searches only the plans they accept
(`frenzy_predictor.plans`), the reference trainer refuses the rest with the same message
(`frenzy_trainer.train.check_plan`, exit 2), and a job whose launcher can run none of the plans
that fit is unschedulable when it is planned, with the reason, not when it is launched.

The rules are the launchers' own, read in their code:

* the reference trainer (`framework: frenzy`; frenzy_trainer.parallelize):
  - tp must divide the kv heads (whole heads per rank, GQA groups whole), the vocabulary (the
    vocabulary-parallel embedding and the column-wise head split it evenly; there is no
    Megatron-style vocabulary padding) and the FFN width;
  - with sequence parallelism tp must divide seq_len (the residual stream is split evenly);
  - at most one pipeline stage per layer;
  - pipelines run torch.distributed.pipelining's 1F1B, whose Schedule1F1B refuses fewer
    micro-batches per step than stages ("Number of microbatches ... must be greater than or
    equal to the number of stages");
  - no context parallelism (FRENZY_PLAN has no cp: the world would not match dp x tp x pp);
* torchtitan pipelines with the same torch.distributed.pipelining schedules: the 1F1B rule.
Other stacks' launchers (Megatron-LM, DeepSpeed, the HF Trainer) run the user's entrypoint;
their rules are not written here yet, beyond the ZeRO stages their recipe profile offers.
"""
from __future__ import annotations

from frenzy.catalog.models import ModelArch
from frenzy.domain import ParallelPlan

# Launchers that pipeline with torch.distributed.pipelining's Schedule1F1B.
TORCH_PIPELINING = ("frenzy", "torchtitan")


def pipeline_micro_batches(plan: ParallelPlan, global_batch: int) -> int:
    """Micro-batches per step on each data-parallel rank: what a pipeline schedule gets."""
    return global_batch // (plan.dp * plan.micro_batch)


def runnable_plan(arch: ModelArch, plan: ParallelPlan, *, seq_len: int, global_batch: int,
                  framework: str = "frenzy") -> str | None:
    """None when the job's launcher can run `plan`; else why not, naming the plan field."""
    if global_batch % (plan.dp * plan.micro_batch):
        return (f"plan.micro_batch: global batch {global_batch} is not a multiple of "
                f"dp x micro_batch = {plan.dp * plan.micro_batch}")
    if framework in TORCH_PIPELINING and plan.pp > 1:
        micro_batches = pipeline_micro_batches(plan, global_batch)
        if micro_batches < plan.pp:
            return (f"plan.micro_batch: 1F1B needs at least pp = {plan.pp} micro-batches per "
                    f"step, global batch {global_batch} / (dp x micro_batch = "
                    f"{plan.dp * plan.micro_batch}) gives {micro_batches}")
    if framework != "frenzy":
        return None
    for what, count in (("num_kv_heads", arch.num_kv_heads), ("vocab_size", arch.vocab_size),
                        ("ffn_hidden_size", arch.ffn_hidden_size)):
        if count % plan.tp:
            return f"plan.tp: {plan.tp} does not divide {arch.name}'s {what} ({count})"
    if plan.sequence_parallel and plan.tp > 1 and seq_len % plan.tp:
        return f"plan.sequence_parallel: seq_len {seq_len} is not a multiple of tp = {plan.tp}"
    if plan.pp > arch.num_layers:
        return f"plan.pp: {plan.pp} stages but {arch.name} has {arch.num_layers} layers"
    if plan.cp > 1:
        return f"plan.cp: {plan.cp}: the reference trainer has no context parallelism"
    return None
