"""How each training stack splits a model's layers over pipeline stages: one pure function per stack.

A pipeline rank holds the layers its stack's split gives it, the embedding on the first rank and
the final norm, output layer and loss on the last. When the layer count is not a multiple of pp
(Llama-3.1-405B's 126 layers over pp 8) or the stack is told to lighten the ends, the ranks hold
different numbers of layers, and the memory peak is the largest rank's (memory.estimate_memory
walks every rank whose layers could make it the peak). Each rule is read in the stack's code:

- the reference trainer: frenzy_trainer.parallelize.stage_layers (divmod, earlier stages take
  the rest);
- torchtitan at 9dec370 (the commit its Dec-2024 benchmarks ran):
  torchtitan/parallelisms/pipelining_utils.py `generate_split_points` with pipeline_llama.py
  `stage_ids_this_rank(..., style="loop")`;
- Megatron-LM at d98e8a64dd: megatron/core/transformer/transformer_block.py
  `get_num_layers_to_build` (--decoder-first/last-pipeline-num-layers,
  --account-for-embedding/loss-in-pipeline-split) and the checks of transformer_config.py
  `__post_init__`.
DeepSpeed's PipelineModule (partition_method "parameters") and the HF Trainer are not modelled:
their pipelines must split evenly.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache


@dataclass(frozen=True)
class PipelineSplit:
    """Transformer layers of each model chunk: chunk_layers[rank][chunk], chunk 0 first in
    forward (virtual stage rank + chunk x pp, Megatron's and torchtitan's "loop" order).
    The embedding is on rank 0's chunk 0, the final norm, output layer and loss on the last
    rank's last chunk."""

    chunk_layers: tuple[tuple[int, ...], ...]
    # Derived once (estimate_memory reads them per stage, per plan of a search):
    stage_layers: tuple[int, ...] = field(init=False)  # layers each rank holds, all its chunks
    even: bool = field(init=False)  # every chunk of every rank as many: the per-stage formula

    def __post_init__(self) -> None:
        object.__setattr__(self, "stage_layers",
                           tuple(sum(chunks) for chunks in self.chunk_layers))
        first = self.chunk_layers[0][0]
        object.__setattr__(self, "even", all(n == first for chunks in self.chunk_layers
                                             for n in chunks))

    def even_chunks(self, stage: int) -> bool:
        """Whether every chunk of `stage` holds as many layers (in-flight counts are then whole
        stages, as estimate_memory counted them before uneven splits)."""
        chunks = self.chunk_layers[stage]
        return self.even or all(n == chunks[0] for n in chunks)


@lru_cache(maxsize=256)  # pure; the plan search asks again per plan
def even_split(num_layers: int, pp: int, virtual_stages: int = 1) -> PipelineSplit:
    """Every chunk the same number of layers; ValueError naming plan.pp (or virtual_stages) when
    they do not divide the layers. DeepSpeed's and the HF Trainer's pipelines, as MARP models
    them (not read: their own partitioning is not modelled)."""
    if num_layers % pp:
        raise ValueError(f"plan.pp {pp} must divide model.num_layers {num_layers}")
    if (num_layers // pp) % virtual_stages:
        raise ValueError(f"virtual_stages: {virtual_stages} must divide the "
                         f"{num_layers // pp} layers of a stage")
    chunk = num_layers // pp // virtual_stages
    return PipelineSplit(tuple((chunk,) * virtual_stages for _ in range(pp)))


def _check_stages(num_layers: int, pp: int) -> None:
    if pp > num_layers:
        raise ValueError(f"plan.pp: {pp} stages but model.num_layers is {num_layers}: a stage "
                         f"would hold no layers")


@lru_cache(maxsize=256)  # pure; the plan search asks again per plan
def reference_split(num_layers: int, pp: int, virtual_stages: int = 1) -> PipelineSplit:
    """The reference trainer (frenzy_trainer.parallelize.stage_layers): divmod(num_layers, pp),
    the first num_layers % pp stages take one layer more. No interleaved schedule."""
    if virtual_stages != 1:
        raise ValueError(f"virtual_stages: {virtual_stages}: the reference trainer runs 1F1B "
                         f"with one chunk per rank")
    _check_stages(num_layers, pp)
    base, extra = divmod(num_layers, pp)
    return PipelineSplit(tuple((base + (stage < extra),) for stage in range(pp)))


@lru_cache(maxsize=256)  # pure; the plan search asks again per plan
def torchtitan_split(num_layers: int, pp: int, virtual_stages: int = 1) -> PipelineSplit:
    """torchtitan 9dec370, `generate_split_points` (no pipeline_parallel_split_points given):
    over pp x virtual_stages stages, base = L // stages and extra = L % stages; the first stage
    takes base, each middle stage base + 1 while extras remain, the last stage what is left
    (base, or base + 1 when extra = stages - 1). Stage s runs on rank s % pp
    (`stage_ids_this_rank`, style "loop"). 126 layers over 8: 15, 16 x 6, 15.
    (From f64cf3c18, 2025-04, torchtitan weighs the embedding and the output as a layer each,
    `_generate_llm_fqn_per_model_part`; that rule also splits divisible counts unevenly and is
    not the profile's: the profile follows 9dec370 throughout.)"""
    stages = pp * virtual_stages
    if stages > num_layers:
        raise ValueError(f"plan.pp: {pp} x virtual_stages {virtual_stages} = {stages} stages "
                         f"but model.num_layers is {num_layers} (torchtitan: \"Total stages "
                         f"cannot be greater than the number of layers\")")
    base, extra = divmod(num_layers, stages)
    layers = [base]
    for _ in range(1, stages - 1):
        take = base + (extra > 0)
        extra -= take > base
        layers.append(take)
    if stages > 1:
        layers.append(num_layers - sum(layers))
    return PipelineSplit(tuple(tuple(layers[rank + chunk * pp] for chunk in range(virtual_stages))
                               for rank in range(pp)))


@lru_cache(maxsize=256)  # pure; the plan search asks again per plan
def megatron_split(num_layers: int, pp: int, virtual_stages: int = 1, *,
                   first_stage_layers: int | None = None, last_stage_layers: int | None = None,
                   account_for_embedding: bool = False,
                   account_for_loss: bool = False) -> PipelineSplit:
    """Megatron-LM d98e8a64dd, `get_num_layers_to_build` (transformer_block.py):

    - --decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers
      (`first_stage_layers`, `last_stage_layers`): those ranks hold that many, the other ranks
      split the rest evenly ("the left over layers must be divisible by left over stages");
    - --account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split: the
      embedding (loss) counts as a layer, (L + 1 + 1) % pp must be 0, and the first (last)
      virtual stage builds one layer fewer;
    - neither: L % pp must be 0.
    With --num-virtual-stages-per-pipeline-rank v each rank's layers split evenly over its v
    chunks. The two kinds of option exclude each other (transformer_config.py)."""
    v = virtual_stages
    uneven = first_stage_layers is not None or last_stage_layers is not None
    if uneven and (account_for_embedding or account_for_loss):
        raise ValueError("pipeline split: Megatron refuses --decoder-first/last-pipeline-num-layers "
                         "with --account-for-embedding/loss-in-pipeline-split")
    if uneven and pp < 2:
        raise ValueError("pipeline split: --decoder-first/last-pipeline-num-layers need a "
                         "pipeline (pp > 1)")
    if uneven:
        per_rank = [None] * pp
        rest, left = num_layers, pp
        for stage, given, flag in ((0, first_stage_layers, "first"),
                                   (pp - 1, last_stage_layers, "last")):
            if given is None:
                continue
            if given <= 0 or given % v:
                raise ValueError(f"pipeline split: --decoder-{flag}-pipeline-num-layers {given} "
                                 f"must be positive and a multiple of virtual_stages {v}")
            per_rank[stage] = given
            rest, left = rest - given, left - 1
        if left > 0:
            if rest <= 0 or rest % left:
                raise ValueError(f"pipeline split: the {rest} layers left must divide evenly "
                                 f"over the {left} other stages (Megatron)")
            per_rank = [rest // left if n is None else n for n in per_rank]
        elif rest != 0:
            raise ValueError(f"pipeline split: the first and last stages' layers must add up "
                             f"to model.num_layers {num_layers}")
        chunks = []
        for n in per_rank:
            if n % v:
                raise ValueError(f"virtual_stages: {v} must divide the {n} layers of a stage")
            chunks.append([n // v] * v)
    else:
        counted = num_layers + account_for_embedding + account_for_loss
        if counted % pp:
            raise ValueError(f"plan.pp {pp} must divide model.num_layers {num_layers}"
                             + (f" + the embedding / loss counted as layers = {counted}"
                                if counted != num_layers else ""))
        if (counted // pp) % v:
            raise ValueError(f"virtual_stages: {v} must divide the {counted // pp} layers of "
                             f"a stage")
        chunks = [[counted // pp // v] * v for _ in range(pp)]
        if account_for_embedding:
            chunks[0][0] -= 1
        if account_for_loss:
            chunks[-1][-1] -= 1
        if min(chunks[0][0], chunks[-1][-1]) < 0:
            raise ValueError("pipeline split: not enough layers in the first or last virtual "
                             "stage (Megatron)")
    split = PipelineSplit(tuple(tuple(c) for c in chunks))
    if min(split.stage_layers) <= 0:
        raise ValueError(f"plan.pp: a stage of {split.stage_layers} holds no layers")
    return split
