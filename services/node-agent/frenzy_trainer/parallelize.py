"""Tensor, pipeline and data parallelism on one device mesh, after torchtitan's `parallelize_llama`.

A plan with tp > 1 or pp > 1 runs here; tp = pp = 1 keeps the flat-buffer and FSDP2 trainers of
`frenzy_trainer.recipe`, which MARP's ZeRO-0/1 memory model describes most closely.

The mesh has four named dimensions, (pp, dp_replicate, dp_shard, tp), as torchtitan's:

* tp: `torch.distributed.tensor.parallel`. Column-wise q/k/v (gpt2: the fused qkv, laid out
  per kv group so each rank gets whole heads), gate/up (gpt2: c_fc); row-wise o_proj and
  down_proj (c_proj). The embedding is row-wise (vocabulary-parallel), the output head
  column-wise with replicated logits (no loss parallelism). With `sequence_parallel`
  (MARP plans it whenever tp > 1) the residual stream between blocks holds this rank's
  1/tp of the sequence: row-wise outputs reduce-scatter, block inputs all-gather, and the
  norms run on the local sequence slice, so their weight gradients are summed over tp
  (Megatron's `allreduce_layernorm_grads`).
* pp: `torch.distributed.pipelining`, one stage per pp rank, layers split evenly (embedding on
  the first, norm and head on the last), schedule 1F1B. Tied embeddings are untied into the
  first stage's embedding and the last stage's head; their gradients are summed between the two
  (Megatron's embedding group), so the copies stay equal.
* dp: FSDP2 `fully_shard` over (dp_replicate, dp_shard) with a MixedPrecisionPolicy. ZeRO-0
  replicates (HSDP with shard size 1: DDP semantics, 18 B/param with AdamW); ZeRO-1, 2 and 3
  shard over dp. Named variant: ZeRO-1 runs as ZeRO-2 here (gradients sharded too), which holds
  less memory than MARP's ZeRO-1 prediction, never more; ZeRO-3 also reshards after forward.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from frenzy.catalog.models import ModelArch
from frenzy.domain import ParallelPlan, Recipe

from .model import DTYPES, RMSNorm, Transformer, build_model, next_token_loss
from .recipe import MicroBatch, _forward_backward, _optimizer, dcp_state, load_dcp_state

MESH_DIMS = ("pp", "dp_replicate", "dp_shard", "tp")


def world_mesh(plan: ParallelPlan, device: torch.device):
    """The 4-D device mesh over all ranks, (pp, dp_replicate, dp_shard, tp)."""
    from torch.distributed.device_mesh import init_device_mesh

    dp_shard = plan.dp if plan.zero >= 1 else 1
    return init_device_mesh(device.type, (plan.pp, plan.dp // dp_shard, dp_shard, plan.tp),
                            mesh_dim_names=MESH_DIMS)


def stage_layers(num_layers: int, stage: int, stages: int) -> range:
    """The layer indices of one pipeline stage: an even split, earlier stages take the rest."""
    base, extra = divmod(num_layers, stages)
    start = stage * base + min(stage, extra)
    return range(start, start + base + (stage < extra))


def pipeline_stage(model: Transformer, stage: int, stages: int) -> Transformer:
    """Keep only what `stage` runs (torchtitan's split: delete the other stages' modules)."""
    keep = {str(i) for i in stage_layers(model.arch.num_layers, stage, stages)}
    for name in list(model.blocks):
        if name not in keep:
            del model.blocks[name]
    if stage > 0:
        model.embed, model.pos_embed = None, None
    if stage < stages - 1:
        model.norm, model.lm_head = None, None
    return model


def apply_tp(model: Transformer, tp_mesh, sequence_parallel: bool) -> None:
    """Megatron-style tensor parallelism with DTensor (see module docstring)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                                   RowwiseParallel, parallelize_module)

    seq = Shard(1) if sequence_parallel else Replicate()
    tied = model.embed is not None and model.lm_head is not None \
        and model.lm_head.weight is model.embed.weight
    if model.embed is not None:
        parallelize_module(model.embed, tp_mesh, RowwiseParallel(input_layouts=Replicate(),
                                                                 output_layouts=seq))
    if model.lm_head is not None:
        parallelize_module(model.lm_head, tp_mesh, ColwiseParallel(input_layouts=seq,
                                                                   output_layouts=Replicate()))
    if tied:  # both are sharded over the vocabulary (dim 0): one DTensor serves both
        model.lm_head.weight = model.embed.weight
    gpt2 = model.arch.family == "gpt2"
    for block in model.blocks.values():
        plan = ({"attn.c_attn": ColwiseParallel(), "mlp.c_fc": ColwiseParallel(),
                 "attn.o_proj": RowwiseParallel(output_layouts=seq),
                 "mlp.c_proj": RowwiseParallel(output_layouts=seq)} if gpt2 else
                {"attn.q_proj": ColwiseParallel(), "attn.k_proj": ColwiseParallel(),
                 "attn.v_proj": ColwiseParallel(), "attn.o_proj": RowwiseParallel(output_layouts=seq),
                 "mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel(),
                 "mlp.down_proj": RowwiseParallel(output_layouts=seq)})
        if sequence_parallel:  # block inputs arrive as sequence slices: all-gather first
            plan["attn"] = PrepareModuleInput(input_layouts=(seq, None),
                                              desired_input_layouts=(Replicate(), None),
                                              use_local_output=True)
            plan["mlp"] = PrepareModuleInput(input_layouts=(seq,), desired_input_layouts=(Replicate(),),
                                             use_local_output=True)
        parallelize_module(block, tp_mesh, plan)
    if sequence_parallel:
        model.sequence_shard = (tp_mesh.get_local_rank(), tp_mesh.size())


def sequence_parallel_params(model: Transformer) -> list[nn.Parameter]:
    """Norm weights (and biases): under sequence parallelism each tp rank sees 1/tp of the
    sequence, so their gradients are partial sums over tp."""
    return [p for m in model.modules() if isinstance(m, (nn.LayerNorm, RMSNorm))
            for p in m.parameters(recurse=False)]


def apply_fsdp(model: Transformer, dp_mesh, zero: int, recipe: Recipe) -> None:
    """FSDP2 per block and at the root over (dp_replicate, dp_shard)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    compute = DTYPES[recipe.precision]
    policy = MixedPrecisionPolicy(param_dtype=compute,
                                  reduce_dtype=torch.float32 if recipe.grad_dtype == "fp32" else compute)
    for block in model.blocks.values():
        fully_shard(block, mesh=dp_mesh, reshard_after_forward=zero == 3, mp_policy=policy)
    fully_shard(model, mesh=dp_mesh, reshard_after_forward=zero == 3, mp_policy=policy)


def _tied_embedding_group(mesh):
    """The process group of the first and last pipeline stage at this rank's (dp, tp)
    coordinate; every rank creates every group, as `new_group` requires."""
    ranks = mesh.mesh.tolist()  # (pp, dp_replicate, dp_shard, tp) nested lists of global ranks
    first_stage = [r for rep in ranks[0] for shard in rep for r in shard]
    last_stage = [r for rep in ranks[-1] for shard in rep for r in shard]
    mine = None
    for first, last in zip(first_stage, last_stage):
        group = dist.new_group([first, last])
        if dist.get_rank() in (first, last):
            mine = group
    return mine


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


class ParallelTrainer:
    """TP x PP x DP with FSDP2 (see module docstring); `.train_step(micro_batches)` returns the
    step's mean loss on every rank."""

    def __init__(self, arch: ModelArch, recipe: Recipe, plan: ParallelPlan, lr: float,
                 device: torch.device, seed: int, *, mesh=None, init_device: str | None = "meta"):
        """mesh: the world mesh (default: `world_mesh`, built here). init_device: where the whole
        model is built before the stage split ("meta": nothing allocated, then only the stage is
        made real; None: on `device` directly, as the CPU profiler does, whose fake parameters
        `to_empty` cannot swap)."""
        self.plan, self.recipe, self.device = plan, recipe, device
        self.mesh = world_mesh(plan, device) if mesh is None else mesh
        self.stage = self.mesh["pp"].get_local_rank()
        tied = arch.tied_embeddings and plan.pp > 1
        # fp32 parameters (FSDP2 casts them for compute), built on "meta", split, then made real.
        model = build_model(arch, replace(recipe, precision="fp32"), plan.recompute,
                            device=init_device or device)
        model = pipeline_stage(model, self.stage, plan.pp)
        if tied and model.lm_head is not None and model.embed is None:
            model.lm_head.weight = nn.Parameter(torch.empty_like(model.lm_head.weight))
        if init_device is not None:
            model.to_empty(device=device)
        torch.manual_seed(seed)
        model.reset_parameters()
        self.tie_group = _tied_embedding_group(self.mesh) if tied else None
        self.tied_weight = None
        if self.tie_group is not None:  # the last stage starts from the first stage's embedding
            self.tied_weight = model.embed.weight if model.embed is not None else model.lm_head.weight
            dist.broadcast(self.tied_weight.data, group=self.tie_group, group_src=0)
        if plan.tp > 1:
            apply_tp(model, self.mesh["tp"], plan.sequence_parallel)
        apply_fsdp(model, self.mesh["dp_replicate", "dp_shard"], plan.zero, recipe)
        self.norm_params = sequence_parallel_params(model) if plan.tp > 1 and plan.sequence_parallel else []
        if self.tied_weight is not None:  # the FSDP2 (DTensor) parameter now
            self.tied_weight = model.embed.weight if model.embed is not None else model.lm_head.weight
        self.model = model
        self.optimizer = _optimizer(list(model.parameters()), recipe, lr, 0.0)
        self.schedules: dict[int, Any] = {}  # micro-batch count -> 1F1B schedule
        if plan.pp > 1:
            from torch.distributed.pipelining import PipelineStage, Schedule1F1B

            self.pp_stage = PipelineStage(model, self.stage, plan.pp, device,
                                          group=self.mesh["pp"].get_group())
            self.schedule_cls = Schedule1F1B

    def checkpoint_state(self) -> dict:
        return dcp_state(self.model, self.optimizer)

    def load_checkpoint_state(self, state: dict) -> None:
        load_dcp_state(self.model, self.optimizer, state)

    def train_step(self, micro_batches: Sequence[MicroBatch]) -> torch.Tensor:
        if self.plan.pp > 1:
            loss = self._pipeline_step(micro_batches)
        else:
            loss = _forward_backward(self.model, micro_batches)
        self._sync_grads()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss

    def _pipeline_step(self, micro_batches: Sequence[MicroBatch]) -> torch.Tensor:
        schedule = self.schedules.get(len(micro_batches))
        if schedule is None:
            schedule = self.schedules[len(micro_batches)] = self.schedule_cls(
                self.pp_stage, len(micro_batches), loss_fn=next_token_loss)
        inputs = torch.cat([x for x, _ in micro_batches])
        labels = torch.cat([y for _, y in micro_batches])
        last = self.stage == self.plan.pp - 1
        losses: list[torch.Tensor] = []
        # return_outputs=False: the schedule would otherwise keep every micro-batch's logits
        # until the next step and concatenate them, a (batch, seq, vocab) tensor nobody reads.
        if self.stage == 0:
            schedule.step(inputs, return_outputs=False)
        elif last:
            schedule.step(target=labels, losses=losses, return_outputs=False)
        else:
            schedule.step(return_outputs=False)
        loss = (torch.stack([l.detach().float() for l in losses]).mean() if last
                else torch.zeros((), device=self.device))
        dist.broadcast(loss, group=self.mesh["pp"].get_group(), group_src=self.plan.pp - 1)
        return loss

    def _sync_grads(self) -> None:
        """Sum what one rank computed only in part: sequence-parallel norm grads over tp, the
        tied embedding's grad between the first and last pipeline stage."""
        if self.norm_params:
            tp_group = self.mesh["tp"].get_group()
            for p in self.norm_params:
                if p.grad is not None:
                    dist.all_reduce(_local(p.grad), group=tp_group)
        if self.tie_group is not None and self.tied_weight.grad is not None:
            dist.all_reduce(_local(self.tied_weight.grad), group=self.tie_group)
