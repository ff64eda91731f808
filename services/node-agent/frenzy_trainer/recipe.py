"""The training step Frenzy's memory predictions describe (docs/recipe.md).

Two trainers, one per data-parallel style:

* `MixedPrecisionTrainer`: Megatron-LM style, for ZeRO 0 and 1.
  - model weights live in one flat 16-bit buffer (`param_buffer`), 2 B/param;
  - gradients accumulate, across micro-batches, into one persistent flat fp32 buffer
    (`grad_buffer`, 4 B/param; 2 B/param with recipe.grad_dtype == "16bit") through
    post-accumulate-grad hooks, so each 16-bit `.grad` lives only for a moment;
  - fp32 master weights (4 B/param) and fused AdamW with two fp32 moments (8 B/param),
    or SGD with fp32 momentum (4 B/param): 18 B/param in all with AdamW and fp32 grads;
  - ZeRO-1 (`zero=1`) shards master weights and optimizer states over the data-parallel group:
    grads are all-reduced, each rank updates its 1/dp slice, then the 16-bit weights are
    all-gathered in place (Megatron's distributed optimizer; grads stay full size).
  precision "fp32" is plain fp32 training: the fp32 weights are the master weights.

  Data parallelism: pass `process_group` (or have torch.distributed initialised); `step()`
  averages the flat grad buffers with one all-reduce before the optimizer step. To do your own
  communication instead, pass `process_group=False` and a `before_optimizer` callback, which
  receives `grad_buffers()` (the flat grad tensors) after the last micro-batch's backward.

* `FSDPTrainer`: ZeRO 2 and 3 with PyTorch FSDP2 (`fully_shard` per block and at the root).
  Sharded fp32 parameters are the master weights; `MixedPrecisionPolicy` all-gathers them as
  16-bit for compute and reduce-scatters fp32 gradients into sharded fp32 `.grad`s every
  micro-batch. ZeRO-3 reshards after forward; ZeRO-2 keeps the gathered 16-bit weights from
  forward until backward is done (reshard_after_forward=False). Fused AdamW on the shards.

Both expose `.step(micro_batches: list[(input_ids, labels)]) -> float` (the mean loss; `.train_step`
returns it as a tensor without a host sync):
forward+backward per micro-batch (gradient accumulation), then one optimizer step.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import torch
import torch.distributed as dist
from torch import nn

from frenzy.catalog.models import ModelArch
from frenzy.domain import Recipe

from .model import DTYPES, build_model

ADAM_BETAS = (0.9, 0.95)
SGD_MOMENTUM = 0.9
MicroBatch = tuple[torch.Tensor, torch.Tensor]


def _optimizer(params: list[torch.Tensor], recipe: Recipe, lr: float, weight_decay: float):
    if recipe.optimizer == "adamw":
        # fused: one kernel, no temporaries (foreach would allocate a full-size sqrt buffer).
        return torch.optim.AdamW(params, lr=lr, betas=ADAM_BETAS, weight_decay=weight_decay, fused=True)
    return torch.optim.SGD(params, lr=lr, momentum=SGD_MOMENTUM, weight_decay=weight_decay)


def _default_group(process_group):
    if process_group is False:
        return None
    if process_group is None and dist.is_available() and dist.is_initialized():
        return dist.group.WORLD
    return process_group


def _forward_backward(model: nn.Module, micro_batches: Sequence[MicroBatch]) -> torch.Tensor:
    """Gradient accumulation: backward per micro-batch, each loss scaled by 1/count."""
    if not micro_batches:
        raise ValueError("micro_batches: need at least one (input_ids, labels) pair")
    total = None
    for input_ids, labels in micro_batches:
        loss = model(input_ids, labels) / len(micro_batches)
        loss.backward()
        total = loss.detach() if total is None else total + loss.detach()
    return total


class MixedPrecisionTrainer:
    """ZeRO-0/1 mixed-precision trainer over flat buffers (see module docstring)."""

    def __init__(self, model: nn.Module, recipe: Recipe, lr: float = 3e-4, weight_decay: float = 0.0,
                 zero: int = 0, process_group=None,
                 before_optimizer: Callable[[list[torch.Tensor]], None] | None = None):
        if zero not in (0, 1):
            raise ValueError(f"zero: MixedPrecisionTrainer handles ZeRO 0 and 1, got {zero}")
        self.model, self.recipe = model, recipe
        self.group = _default_group(process_group)
        self.world = dist.get_world_size(self.group) if self.group is not None else 1
        self.rank = dist.get_rank(self.group) if self.group is not None else 0
        self.before_optimizer = before_optimizer
        params = [p for p in model.parameters() if p.requires_grad]  # tied weights appear once
        numel = sum(p.numel() for p in params)
        shards = self.world if zero == 1 else 1
        padded = -(-numel // shards) * shards
        device, dtype = params[0].device, params[0].dtype

        # Weights: move every parameter into one flat buffer (views), so ZeRO-1 can all-gather it.
        self.param_buffer = torch.empty(padded, dtype=dtype, device=device)
        self.grad_buffer = torch.zeros(
            padded, dtype=torch.float32 if recipe.grad_dtype == "fp32" or dtype == torch.float32 else dtype,
            device=device)
        offset = 0
        self.slices: dict[int, tuple[int, int, torch.Size]] = {}  # id(param) -> (offset, numel, shape)
        for p in params:
            n = p.numel()
            self.slices[id(p)] = (offset, n, p.shape)
            self.param_buffer[offset:offset + n].copy_(p.data.view(-1))
            p.data = self.param_buffer[offset:offset + n].view_as(p)
            p.main_grad = self.grad_buffer[offset:offset + n].view_as(p)
            p.register_post_accumulate_grad_hook(self._accumulate)
            offset += n

        # Master weights and optimizer: this rank's slice of the flat buffer (all of it for ZeRO-0).
        self.shard_size = padded // shards
        self.shard = slice(self.rank * self.shard_size, (self.rank + 1) * self.shard_size) if shards > 1 \
            else slice(0, padded)
        weights = self.param_buffer[self.shard]
        self.copy_back = dtype != torch.float32  # fp32 training: the weights are the masters
        self.master = nn.Parameter(weights.float() if self.copy_back else weights)
        self.optimizer = _optimizer([self.master], recipe, lr, weight_decay)

    # -- checkpoints (frenzy_trainer.checkpoint): per-name fp32 tensors, the layout every plan shares

    def _full(self, shard: torch.Tensor) -> torch.Tensor:
        """The whole flat buffer from this rank's slice (ZeRO-1 all-gathers it, then moves it
        to host memory, so a save holds at most one extra full fp32 buffer on the GPU at once)."""
        if shard.numel() == self.param_buffer.numel():
            return shard
        full = torch.empty(self.param_buffer.numel(), dtype=shard.dtype, device=shard.device)
        dist.all_gather_into_tensor(full, shard.contiguous(), group=self.group)
        return full.cpu()

    def _by_name(self, flat: torch.Tensor, all_names: bool) -> dict[str, torch.Tensor]:
        named = self.model.named_parameters(remove_duplicate=not all_names)
        return {name: flat[o:o + n].view(shape) for name, p in named if id(p) in self.slices
                for o, n, shape in [self.slices[id(p)]]}

    def _moment_keys(self) -> tuple[str, ...]:
        return ("exp_avg", "exp_avg_sq") if self.recipe.optimizer == "adamw" else ("momentum_buffer",)

    def checkpoint_state(self) -> dict:
        state = self.optimizer.state.get(self.master, {})
        optim: dict[str, torch.Tensor] = {}
        step = state.get("step", torch.zeros((), dtype=torch.float32))
        for key in self._moment_keys():
            moment = state.get(key, torch.zeros_like(self.master, dtype=torch.float32))
            for name, view in self._by_name(self._full(moment.detach()), all_names=False).items():
                optim[f"state.{name}.{key}"] = view
        if self.recipe.optimizer == "adamw":
            optim.update({f"state.{name}.step": step.detach().clone()
                          for name, _ in self.model.named_parameters()})
        master = self._full(self.master.detach().float())
        return {"model": self._by_name(master, all_names=True), "optim": optim}

    def load_checkpoint_state(self, state: dict) -> None:
        def flat(named: dict[str, torch.Tensor], key: str) -> torch.Tensor:
            out = torch.zeros(self.param_buffer.numel(), dtype=torch.float32, device=self.master.device)
            for name, p in self.model.named_parameters():
                o, n, _ = self.slices[id(p)]
                out[o:o + n].copy_(named[key.format(name=name)].reshape(-1))
            return out

        master = flat(state["model"], "{name}")
        with torch.no_grad():
            self.param_buffer.copy_(master.to(self.param_buffer.dtype))
            self.master.copy_(master[self.shard])
        loaded = {key: flat(state["optim"], f"state.{{name}}.{key}")[self.shard].clone()
                  for key in self._moment_keys()}
        if self.recipe.optimizer == "adamw":
            first = next(name for name, _ in self.model.named_parameters())
            loaded["step"] = state["optim"][f"state.{first}.step"].detach().clone().float()
        self.optimizer.state[self.master] = loaded

    @staticmethod
    def _accumulate(p: torch.Tensor) -> None:
        """Add the fresh 16-bit .grad into the persistent buffer and drop it at once."""
        p.main_grad.add_(p.grad)
        p.grad = None

    def grad_buffers(self) -> list[torch.Tensor]:
        """The flat gradient buffers (summed over this rank's micro-batches), for all-reduce."""
        return [self.grad_buffer]

    def step(self, micro_batches: Sequence[MicroBatch]) -> float:
        """One optimizer step over the micro-batches; returns the mean loss."""
        return float(self.train_step(micro_batches))

    def train_step(self, micro_batches: Sequence[MicroBatch]) -> torch.Tensor:
        """As `step`, but returns the loss as a detached tensor (no host sync)."""
        total = _forward_backward(self.model, micro_batches)
        if self.before_optimizer is not None:
            self.before_optimizer(self.grad_buffers())
        if self.group is not None and self.world > 1:
            self.grad_buffer.div_(self.world)
            dist.all_reduce(self.grad_buffer, group=self.group)
        grad = self.grad_buffer[self.shard]
        # 16-bit grads: a transient fp32 copy of this rank's slice (as Megatron does).
        self.master.grad = grad if grad.dtype == torch.float32 else grad.float()
        self.optimizer.step()
        self.master.grad = None
        if self.copy_back:  # 16-bit weights: copy the updated masters into them
            self.param_buffer[self.shard].copy_(self.master.detach())
        if self.shard.stop - self.shard.start != self.param_buffer.numel():  # ZeRO-1
            # in place: this rank's slice is already where the gathered output puts it
            dist.all_gather_into_tensor(self.param_buffer, self.param_buffer[self.shard], group=self.group)
        self.grad_buffer.zero_()
        return total


class FSDPTrainer:
    """ZeRO-2/3 with FSDP2 (see module docstring). `model` must hold fp32 parameters."""

    def __init__(self, model: nn.Module, recipe: Recipe, zero: int, mesh=None, lr: float = 3e-4,
                 weight_decay: float = 0.0):
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        if zero not in (2, 3):
            raise ValueError(f"zero: FSDPTrainer handles ZeRO 2 and 3, got {zero}")
        compute = DTYPES[recipe.precision]
        reduce = torch.float32 if recipe.grad_dtype == "fp32" else compute
        policy = MixedPrecisionPolicy(param_dtype=compute, reduce_dtype=reduce)
        for block in model.blocks.values():
            fully_shard(block, mesh=mesh, reshard_after_forward=zero == 3, mp_policy=policy)
        fully_shard(model, mesh=mesh, reshard_after_forward=zero == 3, mp_policy=policy)
        self.model, self.recipe = model, recipe
        self.optimizer = _optimizer(list(model.parameters()), recipe, lr, weight_decay)

    def checkpoint_state(self) -> dict:
        return dcp_state(self.model, self.optimizer)

    def load_checkpoint_state(self, state: dict) -> None:
        load_dcp_state(self.model, self.optimizer, state)

    def step(self, micro_batches: Sequence[MicroBatch]) -> float:
        """One optimizer step over the micro-batches; returns the mean loss."""
        return float(self.train_step(micro_batches))

    def train_step(self, micro_batches: Sequence[MicroBatch]) -> torch.Tensor:
        """As `step`, but returns the loss as a detached tensor (no host sync)."""
        total = _forward_backward(self.model, micro_batches)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return total


def dcp_state(model: nn.Module, optimizer) -> dict:
    """Sharded (DTensor) fp32 weights and optimizer states by parameter name, for DCP."""
    from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                         get_optimizer_state_dict)

    options = StateDictOptions(flatten_optimizer_state_dict=True)
    return {"model": get_model_state_dict(model),
            "optim": get_optimizer_state_dict(model, optimizer, options=options)}


def load_dcp_state(model: nn.Module, optimizer, state: dict) -> None:
    from torch.distributed.checkpoint.state_dict import (StateDictOptions, set_model_state_dict,
                                                         set_optimizer_state_dict)

    set_model_state_dict(model, state["model"])
    set_optimizer_state_dict(model, optimizer, state["optim"],
                             options=StateDictOptions(flatten_optimizer_state_dict=True))


def build_trainer(arch: ModelArch, recipe: Recipe, zero: int = 0, recompute: str = "none",
                  lr: float = 3e-4, device=None, mesh=None, process_group=None):
    """Model plus the trainer the recipe and ZeRO stage call for (as the profiler measures it)."""
    if zero in (0, 1):
        model = build_model(arch, recipe, recompute, device=device)
        return MixedPrecisionTrainer(model, recipe, lr=lr, zero=zero, process_group=process_group)
    if zero in (2, 3):
        model = build_model(arch, replace(recipe, precision="fp32"), recompute, device=device)
        return FSDPTrainer(model, recipe, zero, mesh=mesh, lr=lr)
    raise ValueError(f"zero: must be 0, 1, 2 or 3, got {zero}")
