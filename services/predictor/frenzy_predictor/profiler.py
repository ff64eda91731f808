"""Exact per-rank peak tensor memory of the reference training step, measured on CPU for free.

The reference model and trainer (frenzy_trainer.model / .recipe) run for two full iterations
(forward, backward, optimizer step) on *fake* CPU tensors (`FakeTensorMode`): every op computes
shapes and dtypes but allocates nothing, so a 7B model profiles in seconds with little RAM.
A `TorchDispatchMode` sees every op's outputs and tracks each new storage until Python frees it,
rounding every allocation up to 512 B as the CUDA caching allocator does, so the peak of the
second (steady-state) iteration is comparable with `torch.cuda.max_memory_allocated()`.

Data parallelism runs under a fake process group (collectives are no-ops that still allocate
their outputs), so the numbers are one rank's: ZeRO-0/1 use MixedPrecisionTrainer, ZeRO-2/3 use
FSDP2 `fully_shard`.

Tensor and pipeline parallel plans (tp > 1 or pp > 1) run the trainer's own
`frenzy_trainer.parallelize.ParallelTrainer` on the same fake process group, one process standing
for one rank of the dp x tp x pp world: DTensor tensor and sequence parallelism, FSDP2 over dp,
and torch.distributed.pipelining's real `Schedule1F1B` and `PipelineStage` (their forward and
backward caches, per-micro-batch receive buffers, FSDP no-sync backward). Profiled: the first
and the last pipeline stage (1F1B keeps pp - i micro-batches in flight on stage i, so stage 0
holds the most activations; the last holds the head and the loss), at data- and tensor-parallel
coordinate 0; the Profile is the larger. What differs from a real run (`_parallel_patches`):
  - the stage's shapes are given (PipelineStage's static metadata) instead of negotiated: the
    warm-up vote and metadata exchange need values (`.item()`), which fake tensors do not have;
  - P2P sends and receives are the fake group's no-ops: a receive leaves its (fake) buffer as
    it is, which changes values, never what is allocated;
  - the model is built on the fake CPU device directly instead of on "meta" then `to_empty`
    (which cannot swap fake parameters), and the device mesh is built outside the fake mode
    (it reads its rank tensor's values): construction only, before the measured iteration.

Fake tensors are on CPU, not CUDA (fake CUDA tensors crash autograd in the CPU build of torch);
the model is written so CPU kernels save what CUDA kernels save (see docs/recipe.md).
"""
from __future__ import annotations

import time
import weakref
from collections import defaultdict
from contextlib import contextmanager
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
    peak_stage: int = 0  # the pipeline stage whose rank holds the peak (pp > 1)


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
                 zero: int = 0, recompute: str = "none", grad_accum: int = 1, tp: int = 1,
                 pp: int = 1, peak_tensors: bool = False) -> Profile:
    """Peak per-rank tensor bytes of the second of two training iterations (fake tensors).

    tp > 1 or pp > 1: the trainer's ParallelTrainer (sequence parallel whenever tp > 1, as MARP
    plans it), the larger of the first and the last pipeline stage's ranks; the plan must be
    one the trainer runs (frenzy.runnable: e.g. grad_accum >= pp).
    peak_tensors: also list the storages live at the peak (slower; to see what a model misses).
    """
    arch.validate()
    recipe.validate()
    for name, value in (("seq_len", seq_len), ("micro_batch", micro_batch), ("dp", dp),
                        ("grad_accum", grad_accum), ("tp", tp), ("pp", pp)):
        if value <= 0:
            raise ValueError(f"{name} must be positive, got {value}")
    if zero not in (0, 1, 2, 3):
        raise ValueError(f"zero must be 0, 1, 2 or 3, got {zero}")
    if arch.family == "gpt2" and seq_len > arch.max_position_embeddings:
        raise ValueError(f"seq_len {seq_len} exceeds {arch.name}'s learned positions "
                         f"({arch.max_position_embeddings})")
    config = {"model": arch.name, "seq_len": seq_len, "micro_batch": micro_batch, "dp": dp,
              "zero": zero, "recompute": recompute, "grad_accum": grad_accum,
              "precision": recipe.precision, "grad_dtype": recipe.grad_dtype,
              "optimizer": recipe.optimizer, "attention": recipe.attention, "dropout": recipe.dropout}
    if tp > 1 or pp > 1:
        return _profile_parallel(arch, recipe, config, seq_len=seq_len, micro_batch=micro_batch,
                                 dp=dp, zero=zero, recompute=recompute, grad_accum=grad_accum,
                                 tp=tp, pp=pp, peak_tensors=peak_tensors)
    import torch.distributed as dist

    from frenzy_trainer.recipe import FSDPTrainer, build_trainer

    started = time.perf_counter()
    tracker = _make_tracker()(peak_tensors)
    own_group = zero >= 1 or dp > 1
    if own_group:
        if dist.is_initialized():
            raise RuntimeError("profile_step needs its own fake process group; one is already initialised")
        from torch.testing._internal.distributed.fake_pg import FakeStore
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=dp)
    try:
        mesh = None
        if zero >= 2:
            from torch.distributed.device_mesh import init_device_mesh
            mesh = init_device_mesh("cpu", (dp,))

        def build():
            return build_trainer(arch, recipe, zero=zero, recompute=recompute, mesh=mesh,
                                 process_group=None if own_group else False)

        measured = _two_iterations(tracker, build, arch, seq_len, micro_batch, grad_accum,
                                   fsdp_classes=(FSDPTrainer,))
    finally:
        if own_group:
            dist.destroy_process_group()
    return _profile(measured, config, time.perf_counter() - started)


def _profile(measured: tuple, config: dict, wall_s: float, stage: int = 0) -> Profile:
    first_peak, peak, totals, phase, live = measured
    breakdown = {c: int(totals.get(c, 0)) for c in CATEGORIES}
    tensors = [{"bytes": n, "category": c, "op": op, "dtype": dt, "shape": list(shape),
                "phase_allocated": ph} for n, c, op, dt, shape, ph in live]
    return Profile(int(peak), breakdown, phase, int(first_peak), wall_s, config, tensors, stage)


@contextmanager
def _tracked_resize(tracker):
    """FSDP2 frees and re-allocates unsharded weights with storage.resize_: tell the tracker."""
    import torch

    original = torch.UntypedStorage.resize_

    def tracked_resize(st, size):
        result = original(st, size)
        tracker.resized(st, size)
        return result

    torch.UntypedStorage.resize_ = tracked_resize
    try:
        yield
    finally:
        torch.UntypedStorage.resize_ = original


def _two_iterations(tracker, build, arch: ModelArch, seq_len: int, micro_batch: int,
                    grad_accum: int, fsdp_classes: tuple) -> tuple:
    """Build the trainer and run two steps under fake tensors; the second step's peak, its
    per-category split and phase, the storages live at it (if recorded), and the first's peak."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from frenzy_trainer.recipe import MixedPrecisionTrainer

    with _tracked_resize(tracker), FakeTensorMode(), tracker:
        trainer = build()
        _install_phase_hooks(tracker, trainer.model, trainer.optimizer)
        batches = [(torch.randint(0, arch.vocab_size, (micro_batch, seq_len)),
                    torch.randint(0, arch.vocab_size, (micro_batch, seq_len)))
                   for _ in range(grad_accum)]
        tracker.phase = "inputs_other"
        tracker.reset_peak()
        trainer.train_step(batches)
        first_peak = tracker.peak
        _label_persistent_states(tracker, trainer, MixedPrecisionTrainer, fsdp_classes)
        tracker.phase = "inputs_other"
        tracker.reset_peak()
        trainer.train_step(batches)
        measured = (first_peak, tracker.peak, tracker.peak_totals, tracker.peak_phase,
                    sorted(tracker.peak_live, key=lambda e: -e[0]))
        del trainer, batches
    return measured


def _profile_parallel(arch: ModelArch, recipe: Recipe, config: dict, *, seq_len: int,
                      micro_batch: int, dp: int, zero: int, recompute: str, grad_accum: int,
                      tp: int, pp: int, peak_tensors: bool) -> Profile:
    """ParallelTrainer on the ranks of the first and the last pipeline stage (see module
    docstring); the Profile of the one with the larger peak."""
    import torch
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from frenzy.runnable import runnable_plan
    from frenzy_predictor.plans import make_plan
    from frenzy_trainer.parallelize import ParallelTrainer, world_mesh

    plan = make_plan(tp, pp, dp, zero, micro_batch, recompute)
    reason = runnable_plan(arch, plan, seq_len=seq_len, global_batch=dp * micro_batch * grad_accum)
    if reason:
        raise ValueError(reason)
    if dist.is_initialized():
        raise RuntimeError("profile_step needs its own fake process group; one is already initialised")
    config = {**config, "tp": tp, "pp": pp, "sequence_parallel": plan.sequence_parallel}
    cpu = torch.device("cpu")
    best: Profile | None = None
    for stage in sorted({0, pp - 1}):
        started = time.perf_counter()
        # ranks are laid out (pp, dp, tp) row-major, as the trainer's mesh: dp = tp = 0 here
        dist.init_process_group("fake", store=FakeStore(), rank=stage * dp * tp,
                                world_size=plan.num_gpus)
        try:
            mesh = world_mesh(plan, cpu)
            with _parallel_patches(arch, recipe, plan, seq_len):
                measured = _two_iterations(
                    _make_tracker()(peak_tensors),
                    lambda: ParallelTrainer(arch, recipe, plan, 3e-4, cpu, 0, mesh=mesh,
                                            init_device=None),
                    arch, seq_len, micro_batch, grad_accum, fsdp_classes=(ParallelTrainer,))
        finally:
            dist.destroy_process_group()
            _forget_meshes()
        profile = _profile(measured, {**config, "stage": stage}, time.perf_counter() - started,
                           stage)
        if best is None or profile.peak_tensor_bytes > best.peak_tensor_bytes:
            best = profile
    return best


def _forget_meshes() -> None:
    """DTensor caches sharding and redistribution plans by device mesh, and a mesh equals any
    mesh of the same shape and ranks: the next profile's mesh would find this one's process
    groups, destroyed with the fake world."""
    import torch
    from torch.distributed.tensor import DTensor, _redistribute
    from torch.distributed.tensor._collective_utils import MeshTopoInfo

    torch._C._clear_DTensor_sharding_propagator_cache()  # the C++ dispatch fast path's
    propagator = DTensor._op_dispatcher.sharding_propagator
    propagator.propagate_op_sharding.cache_clear()
    propagator._propagate_tensor_meta_cached.cache_clear()
    _redistribute._gen_transform_infos.cache_clear()
    MeshTopoInfo.build_from_mesh.cache_clear()


@contextmanager
def _parallel_patches(arch: ModelArch, recipe: Recipe, plan, seq_len: int):
    """What cannot run on fake tensors, replaced by its equivalent (see module docstring):

    - DeviceMesh construction (FSDP2 concatenates the dp and tp meshes inside the fake mode)
      and its rank tensor (the tied embedding's groups read it) run outside it: a mesh reads
      its ranks' values;
    - the pipeline schedule's warm-up (a vote over P2P read with `.item()`, then a metadata
      exchange) is replaced by the static metadata PipelineStage accepts from its caller
      (`input_args` / `output_args`): the stage boundary's shape and dtype, which this model
      fixes: token ids into stage 0, the residual stream (micro_batch, seq_len / tp under
      sequence parallelism, hidden) in the compute dtype between stages, the replicated
      logits out of the last.
    """
    import torch
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.pipelining import schedules
    from torch.distributed.pipelining import stage as pipeline_stage
    from torch.distributed.pipelining._utils import _StageMeta, extract_tensor_metas

    from frenzy_trainer.model import DTYPES

    mesh_init, mesh_ranks = DeviceMesh.__init__, DeviceMesh.mesh
    warmup = schedules._PipelineSchedule._warmup_p2p
    compute = DTYPES[recipe.precision]
    b, local_seq = plan.micro_batch, seq_len // (plan.tp if plan.sequence_parallel else 1)

    def real_mesh_init(self, *args, **kwargs):
        with unset_fake_temporarily():
            mesh_init(self, *args, **kwargs)

    def real_mesh_ranks(self):
        with unset_fake_temporarily():
            return mesh_ranks.fget(self)

    def static_warmup(self, stages, has_backward, p2p_done):
        for st in stages:
            ids = torch.empty(b, seq_len, dtype=torch.long)
            hidden = torch.empty(b, local_seq, arch.hidden_size, dtype=compute, requires_grad=True)
            logits = torch.empty(b, seq_len, arch.vocab_size, dtype=compute, requires_grad=True)
            st._user_meta = _StageMeta(
                inputs=extract_tensor_metas((ids,) if st.is_first else (hidden,)),
                outputs=extract_tensor_metas((logits,) if st.is_last else (hidden,)),
                input_grads=None, output_grads=None)
            st._inference_mode = pipeline_stage.InferenceMode.STATIC

    DeviceMesh.__init__, DeviceMesh.mesh = real_mesh_init, property(real_mesh_ranks)
    schedules._PipelineSchedule._warmup_p2p = static_warmup
    try:
        yield
    finally:
        DeviceMesh.__init__, DeviceMesh.mesh = mesh_init, mesh_ranks
        schedules._PipelineSchedule._warmup_p2p = warmup


def _install_phase_hooks(tracker, model, optimizer) -> None:
    """Label allocations by phase: forward, logits+loss (after the final norm), backward, optimizer."""

    def set_phase(name):
        def hook(*_args, **_kwargs):
            tracker.phase = name
        return hook

    def after_forward(_module, _args, out):  # the loss; a pipeline stage's output
        if getattr(out, "requires_grad", False):
            out.register_hook(lambda grad: set_phase("backward_temporaries")())

    model.register_forward_pre_hook(set_phase("activations"))
    if model.norm is not None:  # not on the pipeline stages before the last
        model.norm.register_forward_hook(set_phase("logits_loss"))
    model.register_forward_hook(after_forward)
    optimizer.register_step_pre_hook(set_phase("optimizer_temporaries"))
    optimizer.register_step_post_hook(set_phase("inputs_other"))


def _label_persistent_states(tracker, trainer, mixed_cls, fsdp_classes: tuple) -> None:
    """After iteration 1 every persistent state exists: label it by role, not by phase."""
    if isinstance(trainer, mixed_cls):
        tracker.relabel(trainer.param_buffer, "parameters")
        tracker.relabel(trainer.grad_buffer, "gradients")
        if trainer.copy_back:  # 16-bit weights: the fp32 masters count as optimizer state
            tracker.relabel(trainer.master, "optimizer_states")
    elif isinstance(trainer, fsdp_classes):
        for p in trainer.model.parameters():
            tracker.relabel(_local(p), "optimizer_states")  # sharded fp32 params are the masters
    for state in trainer.optimizer.state.values():
        for value in state.values():
            if hasattr(value, "untyped_storage") and value.dim() > 0:
                tracker.relabel(_local(value), "optimizer_states")
