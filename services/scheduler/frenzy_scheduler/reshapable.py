"""Which running jobs the live scheduler may resize, migrate or preempt (pure; docs/has.md, "Live").

A reshape must never cost a job its progress, so only a job that can resume is a candidate:

* its program checkpoints: it has an entrypoint (the reference trainer, or a user program) and
  its spec sets a checkpoint interval (`training.checkpoint_every_steps` or `_s`), which is how a
  program declares that it writes checkpoints where the agent says (the synthetic workload,
  no entrypoint, never does);
* it has a committed checkpoint, or it started less than `young_s` ago (a move then loses at
  most that much work);
* it is RUNNING (the orchestrator reshapes only a running attempt), has no deadline, and its
  spec does not pin it (`constraints.pinned`);
* no reshape of it is in flight (the orchestrator's `Job.reshaping`, or one this scheduler
  published for the attempt and has not seen carried out), and its latest reshape
  (`Job.reshaped_at`) is at least `min_interval_s` old. Both come from the orchestrator's job
  record, so they hold across a scheduler restart.

The policy's own thresholds (has: minimum gain, hysteresis; sia: restart damping) come on top.
"""
from __future__ import annotations

from dataclasses import dataclass

from frenzy.v1 import types_pb2


@dataclass(frozen=True)
class ReshapeRules:
    min_interval_s: float  # FRENZY_RESHAPE_MIN_INTERVAL_S
    young_s: float  # FRENZY_RESHAPE_YOUNG_S


@dataclass(frozen=True)
class ReshapeFacts:
    """What the rules read from a job's record, gathered once per status update."""

    running: bool
    pinned: bool
    deadline: bool
    checkpoints: bool  # its program declares checkpoints (entrypoint + checkpoint interval)
    committed: bool  # a committed checkpoint exists (any attempt's)
    start_s: float  # this attempt's start (RUNNING, else placed)
    reshaping: bool  # the orchestrator is carrying out a reshape
    reshaped_at_s: float  # the orchestrator took its latest reshape; 0: never


def reshape_facts(record: types_pb2.Job, start_s: float) -> ReshapeFacts:
    spec = record.spec
    training = spec.training
    return ReshapeFacts(
        running=record.state == types_pb2.RUNNING,
        pinned=spec.constraints.pinned,
        deadline=spec.constraints.HasField("deadline"),
        checkpoints=bool(spec.entrypoint) and (training.checkpoint_every_steps > 0
                                               or training.checkpoint_every_s > 0),
        committed=record.HasField("checkpoint_step"),
        start_s=start_s,
        reshaping=record.reshaping,
        reshaped_at_s=record.reshaped_at.ToNanoseconds() / 1e9)


def reshape_veto(facts: ReshapeFacts, now_s: float, rules: ReshapeRules) -> str | None:
    """Why the job may not be reshaped now, or None when it may."""
    if facts.pinned:
        return "pinned by its spec"
    if facts.deadline:
        return "a deadline job"
    if not facts.checkpoints:
        return "its program does not declare checkpoints"
    if not facts.running:
        return "not running yet"
    if facts.reshaping:
        return "a reshape is in flight"
    if facts.reshaped_at_s and now_s - facts.reshaped_at_s < rules.min_interval_s:
        return f"reshaped {now_s - facts.reshaped_at_s:.0f} s ago (minimum {rules.min_interval_s:.0f} s)"
    if not facts.committed and now_s - facts.start_s >= rules.young_s:
        return f"no committed checkpoint after {now_s - facts.start_s:.0f} s"
    return None
