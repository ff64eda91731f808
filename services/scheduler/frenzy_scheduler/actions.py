"""The actions a policy returns (`Placement`) and their records (`Decision`, `Alternative`).

Their own module so that the compiled build (frenzy_scheduler/native.py) compiles them with
the policies: `has` builds hundreds in one call at 10,000 GPUs x 5,000 queued, and a class
defined in Python costs an interpreted `__init__` for each (about 2,800 instructions a
`Placement`, 1,450 a `Decision`), where a compiled class is built by one native call
(docs/has-performance.md, twenty-seventh round). Compiled, the constructors check the
declared types of their arguments at run time; every policy builds them from its own values
(tests/test_native_build.py runs every policy on the compiled build). `frenzy_scheduler.core`
re-exports all of them: import them from there.
"""
from __future__ import annotations

from typing import Any, NamedTuple

from frenzy.domain import PlanOption

PLACE, RESIZE, MIGRATE, PREEMPT = "place", "resize", "migrate", "preempt"


class Alternative(NamedTuple):
    """One option the policy considered, with its estimate (seconds after the decision).
    Immutable records, hundreds of them for one call at 10,000 GPUs: a named tuple, built in
    C, costs a third of a frozen dataclass (`object.__setattr__` per field)."""

    option: PlanOption
    start_s: float
    completion_s: float
    verdict: str  # "chosen", or why not


class Decision:
    """Why a job got what it got: the DecisionRecord of the contract, without I/O.

    A record may be drafted: its alternatives are then built when first read, from numbers
    the policy captured at decision time (`draft`). `has` places
    up to hundreds of jobs in one call at 10,000 GPUs, and building every row of every
    record there cost a third of the call, for a simulator that never reads them; the live
    scheduler reads each record as it publishes the placement, after the pass. What a
    drafted record reads is the same as if it had been built at once: the draft holds the
    values that the rest of the pass changes (estimated starts), and builds the rest. A
    draft is one tuple, its builder first, called with the whole tuple (one allocation).
    Immutable to its readers, equal and hashed by (policy, reason, alternatives), printed as
    the named tuple it replaces."""

    __slots__ = ("policy", "reason", "_alternatives", "_draft")

    def __init__(self, policy: str, reason: str, alternatives: tuple[Alternative, ...] = (),
                 draft: tuple[Any, ...] | None = None) -> None:
        self.policy = policy
        self.reason = reason
        self._alternatives = alternatives
        self._draft = draft

    @property
    def alternatives(self) -> tuple[Alternative, ...]:
        draft = self._draft
        if draft is not None:  # built once; two threads racing here build the same rows
            self._alternatives = draft[0](draft)
            self._draft = None
        return self._alternatives

    def _key(self) -> tuple[str, str, tuple[Alternative, ...]]:
        return self.policy, self.reason, self.alternatives

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Decision) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (f"Decision(policy={self.policy!r}, reason={self.reason!r}, "
                f"alternatives={self.alternatives!r})")


class Placement:
    """An action: place a queued job (PLACE), or reshape a running one (RESIZE: same type,
    other count; MIGRATE: other GPUs; PREEMPT: back to the queue, no assignments).

    A plain class with slots rather than a frozen dataclass, as `Decision` is: `has` builds
    hundreds in one call at 10,000 GPUs, and a frozen dataclass's `__init__` sets each field
    through `object.__setattr__`, about 8,900 instructions a placement against 2,200-2,800
    as Python here and about 240 compiled (docs/has-performance.md, twenty-sixth and
    twenty-seventh rounds). Immutable to its readers (`replaced` gives a changed copy);
    equal, hashed and printed as the dataclass it replaces."""

    __slots__ = ("job_id", "option", "assignments", "kind", "decision")

    def __init__(self, job_id: str, option: PlanOption,
                 assignments: tuple[tuple[str, tuple[int, ...]], ...],  # (node_id, GPUs) a node
                 kind: str = PLACE, decision: Decision | None = None) -> None:
        self.job_id = job_id
        self.option = option
        self.assignments = assignments
        self.kind = kind
        self.decision = decision

    def replaced(self, option: PlanOption) -> "Placement":
        """The same action with another option (the live scheduler's full-work menu entry)."""
        return Placement(self.job_id, option, self.assignments, self.kind, self.decision)

    def _key(self) -> tuple[Any, ...]:
        return self.job_id, self.option, self.assignments, self.kind, self.decision

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Placement):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (f"Placement(job_id={self.job_id!r}, option={self.option!r}, "
                f"assignments={self.assignments!r}, kind={self.kind!r}, "
                f"decision={self.decision!r})")
