"""Distributed checkpoints with torch.distributed.checkpoint (DCP): save, commit, prune, resume.

Layout of a job's checkpoint directory (FRENZY_CHECKPOINT_URI, one per job):

    step-000000040/          DCP files of step 40 (.metadata + one file per rank)
    step-000000040/COMMITTED the commit marker: rank 0 writes it after DCP's save returned,
                             which is after the coordinator wrote .metadata, which it does
                             only once every rank's write succeeded

Only committed checkpoints are loaded or reported, so a save cut short by a kill (no marker,
perhaps no .metadata, perhaps half a file) is never read; it is deleted at the next commit.

Saves are asynchronous where torch has `dcp.async_save` (the default; `checkpoint_async` off
forces synchronous saves): the loop stands still only while the state is copied to host memory
(DCP's staging), then a background thread writes it while training goes on. As in torchtitan's
`CheckpointManager` (torchtitan/components/checkpoint.py), the write thread talks over its own
gloo group, so its collectives never interleave with the training loop's on the default group,
and at most one save is in flight: the next save, the end of the job and a preemption first wait
for it. Rank 0 commits an asynchronous save at the first step boundary after its write finished;
DCP's write ends with a gather of every rank's result to the coordinator, which writes .metadata,
then a broadcast, so rank 0's write finishing means every rank's did.

What a checkpoint holds: the trainer's state in one layout every plan shares (fp32 master
weights by parameter name, optimizer states under `state.<name>.<key>` as torch's
`get_optimizer_state_dict(flatten_optimizer_state_dict=True)` names them), the step and the
CPU RNG state. DCP stores each tensor with its global shape, so a different dp/tp/pp or ZeRO
stage loads it resharded. The data position is the step: the data is a function of
(seed, step) (frenzy_trainer.data).
"""
from __future__ import annotations

import json
import shutil
import time
import warnings
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.distributed as dist

from frenzy.checkpointdir import COMMIT_MARKER, step_dir, step_of

DEFAULT_KEEP = 2
# One rank without a process group saves and loads with no_dist on purpose. A filter for the
# process (not a catch_warnings block): DCP warns from its asynchronous write thread too.
warnings.filterwarnings("ignore", message="torch.distributed is disabled")


class Checkpointable(Protocol):
    def checkpoint_state(self) -> dict[str, Any]:
        """Tensors to save, or to load into in place (same structure)."""

    def load_checkpoint_state(self, state: dict[str, Any]) -> None:
        """Apply a state that DCP has loaded into `checkpoint_state()`'s tensors."""


@dataclass(frozen=True)
class CheckpointPolicy:
    uri: str                # the job's checkpoint directory; "" disables checkpoints
    every_steps: int = 0    # 0: not by step count
    every_s: float = 0.0    # 0: not by time
    keep: int = DEFAULT_KEEP
    keep_at_end: bool = False
    asynchronous: bool = True  # dcp.async_save where torch has it; False forces dcp.save


@dataclass(frozen=True)
class Commit:
    """A checkpoint that now counts: what the progress line reports."""

    step: int
    save_s: float   # how long the training loop stood still for it
    write_s: float  # from the start of the save to the commit


def committed_steps(uri: str | Path) -> list[int]:
    """Steps with a commit marker, oldest first."""
    root = Path(uri)
    if not root.is_dir():
        return []
    steps = [step_of(p) for p in root.iterdir() if (p / COMMIT_MARKER).is_file()]
    return sorted(s for s in steps if s is not None)


def latest_committed(uri: str | Path) -> int:
    """The newest committed step, 0 if none."""
    steps = committed_steps(uri)
    return steps[-1] if steps else 0


def prune(uri: str | Path, keep: int) -> None:
    """Keep the newest `keep` committed checkpoints; drop older ones and any uncommitted
    directory older than the newest commit (a save that was cut short)."""
    steps = committed_steps(uri)
    if not steps:
        return
    kept = set(steps[-max(1, keep):])
    for path in Path(uri).iterdir():
        step = step_of(path)
        if step is not None and step not in kept and step < steps[-1]:
            shutil.rmtree(path, ignore_errors=True)


def _state(trainer: Checkpointable, step: int) -> dict[str, Any]:
    return {"trainer": trainer.checkpoint_state(), "step": torch.tensor(step),
            "rng": torch.get_rng_state()}


def save(trainer: Checkpointable, uri: str, step: int) -> None:
    """Save on every rank (collective), then rank 0 commits."""
    import torch.distributed.checkpoint as dcp

    path = step_dir(uri, step)
    dcp.save(_state(trainer, step), checkpoint_id=str(path), no_dist=not dist.is_initialized())
    if _is_rank0():
        commit(uri, step)


def start_async_save(trainer: Checkpointable, uri: str, step: int,
                     group: dist.ProcessGroup | None) -> Future:
    """Stage the state to host memory now (a copy, so the next steps may change the weights)
    and write it in a background thread; the future resolves once every rank's write is done.
    Not committed: the caller commits once the future resolved."""
    import torch.distributed.checkpoint as dcp

    return dcp.async_save(_state(trainer, step), checkpoint_id=str(step_dir(uri, step)),
                          process_group=group, no_dist=not dist.is_initialized())


def commit(uri: str | Path, step: int) -> None:
    """Write the commit marker (rank 0, after every rank's write succeeded)."""
    path = step_dir(uri, step)
    tmp = path / (COMMIT_MARKER + ".tmp")
    tmp.write_text(json.dumps({"step": step, "time": time.time()}))
    tmp.rename(path / COMMIT_MARKER)  # atomic: a marker is whole or absent


def async_supported() -> bool:
    import torch.distributed.checkpoint as dcp

    return hasattr(dcp, "async_save")


def _is_rank0() -> bool:
    return not dist.is_initialized() or dist.get_rank() == 0


def load(trainer: Checkpointable, uri: str, step: int) -> None:
    """Load committed `step` into the trainer, resharding to its plan. Optimizer states the
    checkpoint lacks (a tied embedding's second copy under pipeline parallelism) keep their
    fresh values; every model weight must be there."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import DefaultLoadPlanner, FileSystemReader

    path = step_dir(uri, step)
    if not (path / COMMIT_MARKER).is_file():
        raise FileNotFoundError(f"checkpoint {path} is not committed")
    state = {"trainer": trainer.checkpoint_state(), "step": torch.tensor(0),
             "rng": torch.get_rng_state()}
    saved = FileSystemReader(str(path)).read_metadata().state_dict_metadata
    missing = [f"trainer.model.{k}" for k in state["trainer"]["model"]
               if f"trainer.model.{k}" not in saved]
    if missing:
        raise ValueError(f"checkpoint {path} lacks model weights {missing[:3]}")
    dcp.load(state, checkpoint_id=str(path), planner=DefaultLoadPlanner(allow_partial_load=True),
             no_dist=not dist.is_initialized())
    if int(state["step"]) != step:
        raise ValueError(f"checkpoint {path} holds step {int(state['step'])}")
    trainer.load_checkpoint_state(state["trainer"])
    torch.set_rng_state(state["rng"])


@dataclass
class _InFlight:
    step: int
    future: Future
    started_s: float
    stall_s: float


class Checkpointer:
    """When to save: every N steps, every T seconds, or now (a checkpoint-now request such as
    preemption). Ranks must agree, so with a time interval or a request pending the decision
    is one tiny all-reduce per step whenever there is more than one rank (a signal reaches the
    ranks at different moments). Every rank must construct it (the async write group is made
    collectively)."""

    def __init__(self, policy: CheckpointPolicy, device: torch.device):
        self.policy, self.device = policy, device
        self.last_save_s = time.monotonic()
        self.asynchronous = bool(policy.uri) and policy.asynchronous and async_supported()
        self._group: dist.ProcessGroup | None = None
        if self.asynchronous and dist.is_initialized():
            self._group = dist.new_group(backend="gloo")
        self._in_flight: _InFlight | None = None

    def poll(self, step: int, requested: bool) -> tuple[bool, bool]:
        """(save now, stop now) after `step`, the same on every rank."""
        by_time = bool(self.policy.every_s) and time.monotonic() - self.last_save_s >= self.policy.every_s
        flags = [by_time, requested]
        if dist.is_initialized() and dist.get_world_size() > 1:
            agreed = torch.tensor([float(f) for f in flags], device=self.device)
            dist.all_reduce(agreed, op=dist.ReduceOp.MAX)
            flags = [bool(f) for f in agreed.tolist()]
        by_time, stop = flags
        by_steps = bool(self.policy.every_steps) and step % self.policy.every_steps == 0
        return bool(self.policy.uri) and (by_steps or by_time or stop), stop

    def save(self, trainer: Checkpointable, step: int) -> list[Commit]:
        """Save `step`: synchronously (committed when this returns) or asynchronously (committed
        by a later `collect`). Returns the commits this call made: a synchronous save's, and the
        previous asynchronous save's, which this waits for first."""
        commits = self.collect(wait=True)  # at most one save in flight
        started = time.monotonic()
        if self.asynchronous:
            future = start_async_save(trainer, self.policy.uri, step, self._group)
            self.last_save_s = time.monotonic()
            self._in_flight = _InFlight(step, future, started, self.last_save_s - started)
            return commits
        save(trainer, self.policy.uri, step)
        self._after_commit(step)
        self.last_save_s = time.monotonic()
        stall_s = self.last_save_s - started
        return [*commits, Commit(step, stall_s, stall_s)]

    def collect(self, wait: bool = False) -> list[Commit]:
        """Commit the asynchronous save in flight if its write finished (or, with `wait`, once
        it has): call at step boundaries, and with `wait` before the process exits. A failed
        write raises here, as a synchronous save would. Time spent waiting counts as that
        save's stall."""
        pending = self._in_flight
        if pending is None or not (wait or pending.future.done()):
            return []
        waited = time.monotonic()
        pending.future.result()
        self._in_flight = None
        self._after_commit(pending.step)
        stall_s = pending.stall_s + (time.monotonic() - waited if wait else 0.0)
        return [Commit(pending.step, stall_s, time.monotonic() - pending.started_s)]

    def _after_commit(self, step: int) -> None:
        if _is_rank0():
            if self.asynchronous:
                commit(self.policy.uri, step)
            prune(self.policy.uri, self.policy.keep)

    def finish(self) -> None:
        """The job is done: its checkpoints go unless the spec keeps them (rank 0)."""
        if not self.policy.uri or self.policy.keep_at_end or not _is_rank0():
            return
        shutil.rmtree(self.policy.uri, ignore_errors=True)
