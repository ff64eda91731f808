"""Exact per-rank peak tensor memory of the reference training step, measured on CPU for free.

The reference model and trainer (frenzy_trainer.model / .recipe) run for two full iterations
(forward, backward, optimizer step) on *fake* CPU tensors (`FakeTensorMode`): every op computes
shapes and dtypes but allocates nothing, so a 7B model profiles in seconds with little RAM.
A `TorchDispatchMode` sees every op's outputs and tracks each new storage until Python frees it,
rounding every allocation up to 512 B as the CUDA caching allocator does, so the peak of the
second (steady-state) iteration is comparable with `torch.cuda.max_memory_allocated()`.

Data parallelism runs under a fake process group (collectives are no-ops that still allocate
their outputs), so the numbers are one rank's: ZeRO-0/1 use MixedPrecisionTrainer, ZeRO-2/3 use
FSDP2 `fully_shard`. Tensor and pipeline parallelism are not profiled.

Fake tensors are on CPU, not CUDA (fake CUDA tensors crash autograd in the CPU build of torch);
the model is written so CPU kernels save what CUDA kernels save (see docs/recipe.md).
"""
from __future__ import annotations

import time
import weakref
from collections import defaultdict
from dataclasses import dataclass, field
from functools import partial

from frenzy.catalog.models import ModelArch
from frenzy.domain import Recipe

CUDA_ALLOCATION_ROUND_BYTES = 512  # the caching allocator rounds every block up to this

# Allocation categories. Persistent states are re-labelled by role after the first iteration;
# everything else keeps the label of the phase that allocated it.
CATEGORIES = ("parameters", "gradients", "optimizer_states", "activations", "logits_loss",
              "backward_temporaries", "optimizer_temporaries", "inputs_other")


@dataclass
class Profile:
    peak_tensor_bytes: int
    breakdown: dict[str, int]  # live bytes per category at the peak
    peak_phase: str  # which phase the peak happened in
    first_iteration_peak_bytes: int
    wall_s: float
    config: dict = field(default_factory=dict)
    # With peak_tensors=True: every storage live at the peak, largest first, as
    # {"bytes", "category", "op", "dtype", "shape", "phase_allocated"} (for debugging the model).
    peak_tensors: list[dict] = field(default_factory=list)


def _round(nbytes: int) -> int:
    r = CUDA_ALLOCATION_ROUND_BYTES
    return -(-nbytes // r) * r


def _make_tracker():
    """Build the dispatch-mode class lazily so importing this module does not import torch."""
    import torch
    from torch.distributed.tensor import DTensor
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_map_only

    class AllocationTracker(TorchDispatchMode):
        """Live bytes per category; the peak and the per-category split at the peak."""

        def __init__(self, record_peak_tensors: bool = False) -> None:
            super().__init__()
            self.live: dict[int, list] = {}  # storage key -> [bytes, category, weakref, what]
            self.record = record_peak_tensors
            self.op = ""
            self.peak_live: list = []
            self.totals: dict[str, int] = defaultdict(int)
            self.current = 0
            self.phase = "inputs_other"
            self.reset_peak()

        def reset_peak(self) -> None:
            self.peak, self.peak_totals, self.peak_phase = self.current, dict(self.totals), self.phase
            self._snapshot()

        def _snapshot(self) -> None:
            """Copy the live storages (debug only: O(live) at every new peak)."""
            if self.record:
                self.peak_live = [(e[0], e[1], *e[3]) for e in self.live.values()]

        def _bump(self, category: str, delta: int) -> None:
            self.totals[category] += delta
            self.current += delta
            if self.current > self.peak:
                self.peak, self.peak_totals, self.peak_phase = self.current, dict(self.totals), self.phase
                self._snapshot()

        def track(self, t: torch.Tensor) -> None:
            st = t.untyped_storage()
            key = st._cdata
            if key in self.live:
                return
            nbytes = _round(st.nbytes())
            what = (self.op, str(t.dtype).removeprefix("torch."), tuple(t.shape), self.phase) \
                if self.record else ()
            self.live[key] = [nbytes, self.phase, weakref.ref(st, partial(self._freed, key)), what]
            self._bump(self.phase, nbytes)

        def _freed(self, key: int, _ref) -> None:
            entry = self.live.pop(key, None)
            if entry is not None:
                self._bump(entry[1], -entry[0])

        def resized(self, st, new_nbytes: int) -> None:
            """FSDP2 frees and re-allocates unsharded weights with storage.resize_."""
            entry = self.live.get(st._cdata)
            if entry is None:
                return
            delta = _round(new_nbytes) - entry[0]
            entry[0] += delta
            self._bump(entry[1], delta)

        def relabel(self, t: torch.Tensor, category: str) -> None:
            entry = self.live.get(t.untyped_storage()._cdata)
            if entry is not None and entry[1] != category:
                self.totals[entry[1]] -= entry[0]
                self.totals[category] += entry[0]
                entry[1] = category

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if any(t is DTensor for t in types):
                return NotImplemented  # let DTensor desugar to local-shard ops we do see
            out = func(*args, **(kwargs or {}))
            if self.record:
                self.op = str(func)
            tree_map_only(torch.Tensor, self.track, out)
            return out

    return AllocationTracker


def _local(t):
    """The local shard of a DTensor, or the tensor itself."""
    return t.to_local() if hasattr(t, "to_local") else t


def profile_step(arch: ModelArch, recipe: Recipe, *, seq_len: int, micro_batch: int, dp: int = 1,
                 zero: int = 0, recompute: str = "none", grad_accum: int = 1,
                 peak_tensors: bool = False) -> Profile:
    """Peak per-rank tensor bytes of the second of two training iterations (fake tensors).

    peak_tensors: also list the storages live at the peak (slower; to see what a model misses).
    """
    import torch
    import torch.distributed as dist
    from torch._subclasses.fake_tensor import FakeTensorMode

    from frenzy_trainer.recipe import FSDPTrainer, MixedPrecisionTrainer, build_trainer

    arch.validate()
    recipe.validate()
    for name, value in (("seq_len", seq_len), ("micro_batch", micro_batch), ("dp", dp),
                        ("grad_accum", grad_accum)):
        if value <= 0:
            raise ValueError(f"{name} must be positive, got {value}")
    if zero not in (0, 1, 2, 3):
        raise ValueError(f"zero must be 0, 1, 2 or 3, got {zero}")
    if arch.family == "gpt2" and seq_len > arch.max_position_embeddings:
        raise ValueError(f"seq_len {seq_len} exceeds {arch.name}'s learned positions "
                         f"({arch.max_position_embeddings})")
    started = time.perf_counter()
    tracker = _make_tracker()(peak_tensors)
    original_resize = torch.UntypedStorage.resize_

    def tracked_resize(st, size):
        result = original_resize(st, size)
        tracker.resized(st, size)
        return result

    own_group = zero >= 1 or dp > 1
    if own_group:
        if dist.is_initialized():
            raise RuntimeError("profile_step needs its own fake process group; one is already initialised")
        from torch.testing._internal.distributed.fake_pg import FakeStore
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=dp)
    try:
        torch.UntypedStorage.resize_ = tracked_resize
        mesh = None
        if zero >= 2:
            from torch.distributed.device_mesh import init_device_mesh
            mesh = init_device_mesh("cpu", (dp,))
        with FakeTensorMode(), tracker:
            trainer = build_trainer(arch, recipe, zero=zero, recompute=recompute, mesh=mesh,
                                    process_group=None if own_group else False)
            model = trainer.model
            _install_phase_hooks(tracker, model, trainer.optimizer)
            batches = [(torch.randint(0, arch.vocab_size, (micro_batch, seq_len)),
                        torch.randint(0, arch.vocab_size, (micro_batch, seq_len)))
                       for _ in range(grad_accum)]
            tracker.phase = "inputs_other"
            tracker.reset_peak()
            trainer.train_step(batches)
            first_peak = tracker.peak
            _label_persistent_states(tracker, trainer, MixedPrecisionTrainer, FSDPTrainer)
            tracker.phase = "inputs_other"
            tracker.reset_peak()
            trainer.train_step(batches)
            peak, totals, phase = tracker.peak, tracker.peak_totals, tracker.peak_phase
            live = sorted(tracker.peak_live, key=lambda e: -e[0])
            del trainer, model, batches
    finally:
        torch.UntypedStorage.resize_ = original_resize
        if own_group:
            dist.destroy_process_group()
    breakdown = {c: int(totals.get(c, 0)) for c in CATEGORIES}
    config = {"model": arch.name, "seq_len": seq_len, "micro_batch": micro_batch, "dp": dp,
              "zero": zero, "recompute": recompute, "grad_accum": grad_accum,
              "precision": recipe.precision, "grad_dtype": recipe.grad_dtype,
              "optimizer": recipe.optimizer, "attention": recipe.attention, "dropout": recipe.dropout}
    tensors = [{"bytes": n, "category": c, "op": op, "dtype": dt, "shape": list(shape),
                "phase_allocated": ph} for n, c, op, dt, shape, ph in live]
    return Profile(int(peak), breakdown, phase, int(first_peak), time.perf_counter() - started, config,
                   tensors)


def _install_phase_hooks(tracker, model, optimizer) -> None:
    """Label allocations by phase: forward, logits+loss (after the final norm), backward, optimizer."""

    def set_phase(name):
        def hook(*_args, **_kwargs):
            tracker.phase = name
        return hook

    def after_forward(_module, _args, loss):
        loss.register_hook(lambda grad: set_phase("backward_temporaries")())

    model.register_forward_pre_hook(set_phase("activations"))
    model.norm.register_forward_hook(set_phase("logits_loss"))
    model.register_forward_hook(after_forward)
    optimizer.register_step_pre_hook(set_phase("optimizer_temporaries"))
    optimizer.register_step_post_hook(set_phase("inputs_other"))


def _label_persistent_states(tracker, trainer, mixed_cls, fsdp_cls) -> None:
    """After iteration 1 every persistent state exists: label it by role, not by phase."""
    if isinstance(trainer, mixed_cls):
        tracker.relabel(trainer.param_buffer, "parameters")
        tracker.relabel(trainer.grad_buffer, "gradients")
        if trainer.copy_back:  # 16-bit weights: the fp32 masters count as optimizer state
            tracker.relabel(trainer.master, "optimizer_states")
    elif isinstance(trainer, fsdp_cls):
        for p in trainer.model.parameters():
            tracker.relabel(_local(p), "optimizer_states")  # sharded fp32 params are the masters
    for state in trainer.optimizer.state.values():
        for value in state.values():
            if hasattr(value, "untyped_storage") and value.dim() > 0:
                tracker.relabel(_local(value), "optimizer_states")
