"""The agent's decision core: how a job's processes ended, from facts gathered beforehand.

One pure function serves both paths that read an outcome: the supervisor of a job this agent
launched, and a restarted agent looking at a job that ended while it was down. The executor
gathers the facts (exit codes, status files, log tails, progress); nothing here reads a file.

Exit codes alone carry no meaning (a user program may exit 3 or 4 for its own reasons): OOM,
RENDEZVOUS and PREEMPTED come from the status file a rank writes (frenzy/outcomes.py). The one
heuristic kept is the out-of-memory text in a failed rank's log, which a user program that never
heard of the status file still prints when CUDA runs out of memory.
"""
from __future__ import annotations

from dataclasses import dataclass

from frenzy.outcomes import (EXIT_SIGTERM, LOST_REASON, OOM_REASON, PREEMPTED_REASON,
                             RENDEZVOUS_REASON, RankStatus)

OOM_MARKERS = ("CUDA out of memory", "OutOfMemoryError", "out of memory")
ENDED_WHILE_DOWN = " (ended while the agent was down)"
MAX_REASON_CHARS = 300


@dataclass(frozen=True)
class Outcome:
    state: str  # "succeeded" | "failed" | "stopped" | "lost"
    reason: str
    exit_code: int


@dataclass(frozen=True)
class JobFacts:
    """Everything `classify` needs about one ended job on this node, one entry per local rank."""

    exit_codes: tuple[int | None, ...]  # None: the rank recorded no exit code
    statuses: tuple[RankStatus | None, ...] = ()  # the ranks' status files, if any
    log_tails: tuple[str, ...] = ()
    peak_memory_bytes: int = 0  # the last progress line's measured peak
    predicted_peak_bytes: int = 0
    stop_reason: str | None = None  # set when this agent stopped the job on command
    checkpoint_requested: bool = False  # the stop was checkpoint-now (SIGUSR1 first)
    agent_was_down: bool = False  # the job ended while no agent watched it
    finished: bool = False  # the progress file's last line says training completed


def classify(facts: JobFacts) -> Outcome:
    outcome = _classify(facts)
    if facts.agent_was_down and outcome.state != "stopped":
        # The reason keeps its prefix (OOM, RENDEZVOUS): the orchestrator acts on it.
        return Outcome(outcome.state, outcome.reason + ENDED_WHILE_DOWN, outcome.exit_code)
    return outcome


def _classify(facts: JobFacts) -> Outcome:
    codes = facts.exit_codes
    statuses = list(facts.statuses) + [None] * (len(codes) - len(facts.statuses))
    said = {s.outcome: (s, code) for s, code in zip(statuses, codes) if s is not None}
    if facts.checkpoint_requested:
        # Checkpoint-now (preempt, resize, migrate): the job yields whatever its ranks did; the
        # orchestrator resumes it from its last committed checkpoint, new or not.
        if PREEMPTED_REASON in said:
            return _said(PREEMPTED_REASON, *said[PREEMPTED_REASON])
        if facts.finished and codes and all(code == 0 for code in codes):
            # The job completed as the request arrived: nothing is left to resume.
            return Outcome("succeeded", "all processes exited 0", 0)
        return Outcome("failed", f"{PREEMPTED_REASON}: stopped without a new checkpoint "
                                 f"({facts.stop_reason})"[:MAX_REASON_CHARS], EXIT_SIGTERM)
    if facts.stop_reason is not None:
        return Outcome("stopped", facts.stop_reason, EXIT_SIGTERM)
    if codes and all(code == 0 for code in codes) and PREEMPTED_REASON not in said:
        return Outcome("succeeded", "all processes exited 0", 0)
    if OOM_REASON in said or any(marker in tail for tail in facts.log_tails for marker in OOM_MARKERS):
        status, code = said.get(OOM_REASON, (None, _first_failure(codes)))
        return Outcome("failed", f"{OOM_REASON}: out of memory (peak {facts.peak_memory_bytes} "
                                 f"bytes, predicted {facts.predicted_peak_bytes})", code)
    # A rank's own failure comes before what it caused in its peers: ranks the agent stopped
    # (143), peers that said the group did not form or that they were preempted, processes that
    # recorded nothing.
    own = [code for s, code in zip(statuses, codes)
           if s is None and code not in (0, EXIT_SIGTERM, None)]
    if own:
        return Outcome("failed", f"exit code {own[0]}", own[0])
    for interpreted in (PREEMPTED_REASON, RENDEZVOUS_REASON):
        if interpreted in said:
            return _said(interpreted, *said[interpreted])
    if None in codes or not codes:
        return Outcome("lost", f"{LOST_REASON}: process ended without recording an exit code", -1)
    return Outcome("failed", f"exit code {EXIT_SIGTERM}", EXIT_SIGTERM)  # terminated from outside


_DEFAULT_DETAIL = {RENDEZVOUS_REASON: "the process group did not form",
                   PREEMPTED_REASON: "stopped to yield its GPUs"}


def _said(interpreted: str, status: RankStatus, code: int | None) -> Outcome:
    detail = status.detail or _DEFAULT_DETAIL[interpreted]
    return Outcome("failed", f"{interpreted}: {detail}"[:MAX_REASON_CHARS],
                   code if code is not None else -1)


def _first_failure(codes: tuple[int | None, ...]) -> int:
    return next((code for code in codes if code not in (0, None)), -1)
