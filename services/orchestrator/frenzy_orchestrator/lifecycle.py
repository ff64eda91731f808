"""The job lifecycle state machine: which transitions are legal, and nothing else.

SUBMITTED -> PLANNED -> QUEUED -> PLACED -> LAUNCHING -> RUNNING -> SUCCEEDED | FAILED | CANCELLED

Besides the forward path:
- QUEUED again from PLACED/LAUNCHING/RUNNING: a rejected placement, or a lost node (retry).
- SUBMITTED again from LAUNCHING/RUNNING: re-plan after an out-of-memory failure.
- FAILED or CANCELLED from any live state. SUCCEEDED, FAILED and CANCELLED are terminal.
"""
from __future__ import annotations

from frenzy.jobstates import TERMINAL
from frenzy.v1.types_pb2 import (CANCELLED, FAILED, LAUNCHING, PLACED, PLANNED, QUEUED, RUNNING,
                                 SUBMITTED, SUCCEEDED, JobState)


_FORWARD: dict[int, frozenset[int]] = {
    SUBMITTED: frozenset({PLANNED}),
    PLANNED: frozenset({QUEUED}),
    QUEUED: frozenset({PLACED, QUEUED}),  # QUEUED again: a placement was rejected
    PLACED: frozenset({LAUNCHING, QUEUED}),
    LAUNCHING: frozenset({RUNNING, SUCCEEDED, QUEUED, SUBMITTED}),
    RUNNING: frozenset({SUCCEEDED, QUEUED, SUBMITTED}),
}

LEGAL: dict[int, frozenset[int]] = {
    state: targets | {FAILED, CANCELLED} for state, targets in _FORWARD.items()
} | {state: frozenset() for state in TERMINAL}


class IllegalTransition(ValueError):
    pass


def name(state: int) -> str:
    return JobState.Name(state)


def is_legal(current: int, target: int) -> bool:
    return target in LEGAL.get(current, frozenset())


def check(current: int, target: int) -> None:
    if not is_legal(current, target):
        raise IllegalTransition(f"{name(current)} -> {name(target)} is not a legal transition")
