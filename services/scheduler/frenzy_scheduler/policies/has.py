"""HAS: heterogeneity-aware scheduling by estimated completion time (see docs/has.md).

One pass over the queue per decision, in the Kubernetes framework's steps:

1. sort: shortest predicted duration first, with aging (`key = best_duration - aging_rate *
   waited`) so every job's key eventually beats any newcomer's; jobs near a deadline go first;
2. filter: options whose GPU type exists and whose GPU count the type's capacity can hold; a
   job none of whose options has enough free GPUs of its type is skipped without scoring;
3. score: estimated completion time = expected start + MARP duration. The expected start of
   an option that cannot start now comes from the running jobs' expected ends, minus what
   higher-priority jobs in this pass already wait for. A job holds (stays queued) when waiting
   for faster GPUs finishes earlier than starting now on slower ones. On the type of its
   fastest option, a job starts, holds for or is admitted to no option wider than its fair
   share of that type (`fair_shares`);
4. reserve / bind: best-fit nodes (`FreeIndex.best_fit`), which keeps whole nodes free for big
   jobs; a job blocked for `reserve_after_s` gets an EASY-style reservation on its type, and
   later jobs may use that type only if they end before it or fit in the spare GPUs (backfill).

Cost: everything a job's options imply (ranking, per-type minimum GPU count, sort key, scores)
is derived once and cached across decisions; per decision the pass compares the view's nodes
with the kept index of free GPUs (O(nodes), in C; `KeptFreeIndex`), does O(queue) cheap work
(a cache check, and a re-sort of the last order that costs about one comparison per job), then
walks the queue until no GPU is free or no later job can start now (`_Pass.idle_from`: the
rest would only hold): one memoised filter lookup per job, and scoring only for jobs that pass
the filter. No solver.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from operator import attrgetter, itemgetter
from typing import Any, Callable, Final, Sequence

from mypy_extensions import mypyc_attr

from frenzy.domain import RESHAPE_MIN_INTERVAL_S, PlanOption
from frenzy_scheduler.core import (MIGRATE, PLACE, Alternative, ClusterView, Decision,
                                  Placement, QueuedJob, RunningJob)
from frenzy_scheduler.placement import Assignments, FreeIndex, KeptFreeIndex
from frenzy_scheduler.progress import remaining_fraction
from frenzy_scheduler.policies.elastic import (Candidates, KeptCandidates, KeptRestarts, Menus,
                                               Shrinkable, ShrinkPlan, Victims, apply_shrinks,
                                               fill_floor, floor_items, full_duration_s,
                                               gain_floor_s, grow, least_restart_s, most_freed,
                                               movable, move_restart_s, reclaim, shrink_plan,
                                               shrinkable, spare_gpus, undo_shrinks,
                                               rounding_margin_s, victim_candidates,
                                               when_left_s, with_work_left)
from frenzy_scheduler.policies.releases import ReleaseTimes, per_gpu_ends, release_lists
from frenzy_scheduler.queuediff import IdentityDiff

INF: Final = math.inf  # Final: compiled, read as a C static rather than looked up
# Jobs walked between two looks for the walk's early stop (`_Pass.idle_from`): each look that
# finds a free type unclaimed costs O(types)
_IDLE_CHECK = 64
# A running job's place in line (`HasPolicy._in_line`) is derived again once it has done this
# share of the work it had left then: its remaining durations are then within 5 %
_IN_LINE_REFRESH = 0.95
# Builds a named tuple from a tuple in C: `Alternative(...)` runs its class's Python `__new__`
_new_tuple: Callable[..., Any] = tuple.__new__
_KEY = attrgetter("key")
_FIRST = itemgetter(0)
_DURATION = attrgetter("duration_s")
_COST = attrgetter("cost")
_PROBE_GPUS = itemgetter(2)  # a `_Place.probe` entry's GPUs
_NO_LIMIT: Final = 1 << 62  # more GPUs than any option has: the fair-share limit when there is none
_RECORD_ROWS = 6  # rows of a job's scoring a decision record shows besides the chosen option
# Sort keys below and above every job's (urgent deadline jobs are 0, the others 1)
_FIRST_KEY: tuple[int, float, float, str] = (-1, 0.0, 0.0, "")
_LAST_KEY: tuple[int, float, float, str] = (3, 0.0, 0.0, "")

# One scored option: (its index in the job's options, GPU type, GPU count, duration s,
# GPU-seconds, tp degree). The index, not the option: a tuple of numbers and strings is
# untracked by the cyclic GC, and a long queue keeps twenty-odd of these a job (the `_Row`
# docstring says why the GC's count matters).
_Entry = tuple[int, str, int, float, float, int]


@dataclass(frozen=True)
class HasConfig:
    aging_rate: float = 0.2  # priority seconds a job gains per second waited (no starvation)
    reserve_after_s: float = 6 * 3600.0  # a job blocked this long reserves GPUs (EASY backfill)
    deadline_urgency: float = 1.0  # urgent when slack < this x the job's best duration
    gpu_cost_weight: float = 1.0  # under queue pressure, weight of extra GPU-seconds an option burns
    # ... and without pressure: GPUs taken now are GPUs the next arrivals cannot have
    min_cost_exponent: float = 0.0
    # Elastic moves (policies/elastic.py). Off for a live scheduler with FRENZY_RESHAPE_JOBS off.
    elastic: bool = True
    min_gain_fraction: float = 0.3  # a move saves >= this share of the predicted time left ...
    min_gain_s: float = 600.0  # ... and at least this, after its restart cost
    restart_floor_s: float = 120.0  # what a move's checkpoint restore is expected to cost
    # Hysteresis: at most one move per job per interval; the orchestrator's own guard, not a
    # longer one (1800 s kept jobs narrow beside idle GPUs; docs/has-experiments.md, jct8)
    reshape_interval_s: float = RESHAPE_MIN_INTERVAL_S
    grow_per_gpu: bool = True  # idle GPUs go where they save most per GPU (else: most work left)
    grow_cost_limit: float = 2.0  # grow only to options at least 50 % as GPU-efficient as its cheapest
    # ... on the option's own type (False: on any type, the rule until s40; elastic.grow)
    grow_cost_per_type: bool = True
    shrink_after_s: float = 0.0  # a blocked job may be admitted by shrinking after this wait
    # ... or by displacing a running job whole to GPUs of another type that are free now
    # (elastic.shrink_plan): slow types idle while the fast ones queue is what this uses
    displace: bool = True
    max_moves: int = 4  # elastic moves per decision (keeps a decision sub-millisecond)
    # A job that holds for a faster type reserves it at once (EASY backfill: later jobs may use
    # it only if they end before the job's expected start), so the wait it counted on holds.
    binding_holds: bool = True
    # Elastic: a job that can start now does, on the best option free now, instead of holding
    # for faster GPUs (growth migrates it there later, for one restart instead of the wait);
    # only while the queue fits in the free GPUs, and at even odds (`_worth_starting_now`).
    start_now: bool = True
    # What HAS expects a start to cost: launch_overhead_s x (1 + log2(nodes)). A property of
    # the cluster (measured live); the simulator charges every policy the same default.
    launch_overhead_s: float = 60.0
    # A start takes at most the job's fair share of the type it wants (`fair_shares`), as Sia's
    # round narrows a burst so that every job runs; growth widens jobs later on idle GPUs.
    fair_share: bool = True
    # Elastic: a job running on a slower type than its fastest option's keeps a place in line
    # for the faster types: it takes part in the walk, by the work it has left, and migrates
    # when its turn finds their GPUs free (`HasPolicy._in_line`). So a start on slower GPUs
    # is a stopgap whose move comes, and `start_now` asks only that the work done while
    # waiting saves more than the move costs (`_stopgap_pays`), not even odds.
    keep_place: bool = True
    # Elastic: the head jobs that admission by shrinking left waiting are also tried as a
    # group (`HasPolicy._admit_together`): GPUs freed once serve them all, where one short
    # job's saving never pays a victim's two restarts.
    admit_together: bool = True
    # Elastic, with `keep_place`: a running job that admission displaces to another type is
    # charged its slowdown over the newcomer's run, as a shrunk job is, not to its own end:
    # it keeps a place in line for its faster types and moves back at its turn
    # (`elastic.shrink_plan`'s `return_counted`; docs/has-experiments.md, s32).
    displaced_return: bool = True
    # Elastic: admission keeps the order, by EASY backfill's rule for the head. A job left
    # waiting for a type counts on its next releases; a job behind it, and no shorter (by its
    # fastest option), is admitted there by shrinking or displacing only when it would end
    # before that wait does. Otherwise the job ahead waits longer than it was told while
    # jobs behind it start; a shorter job may still pass a longer one that aged to the head,
    # as the order itself lets it (`_bar_s`; docs/has-experiments.md, s33).
    admit_in_order: bool = True

    def launch_s(self, nodes: int) -> float:
        return self.launch_overhead_s * (1.0 + math.log2(max(1, nodes)))

    @property
    def displaced_return_counted(self) -> bool:
        """`displaced_return` in effect: only a place in line (`keep_place`) gives the
        return it counts on (`elastic.shrink_plan`'s `return_counted`)."""
        return self.displaced_return and self.keep_place


@mypyc_attr(acyclic=True)
class _Row:
    """One option as `HasPolicy._score` reads it (`_JobFacts.rows`). A class, not a tuple:
    compiled, the scan reads its fields directly, where each item of a tuple cost a type
    check and, for a number, an unboxing (most of the scan's own instructions per option).
    Not a dataclass: compiled, a dataclass is built by its generated `__init__`, run as
    Python (about 3,000 instructions a row, where the whole trace builds hundreds of
    thousands of rows).

    Acyclic (`mypyc_attr`): a row refers to nothing that refers back to it, so compiled it is
    not tracked by the cyclic GC, nor is the tuple that holds a job's rows. A long queue keeps
    twenty-odd rows a job, and a full collection, which the interpreter runs by itself
    whenever the objects that survived grow by a quarter, walks every tracked object: in the
    live scheduler that walk is a pause between or inside decisions
    (docs/has-performance.md, thirty-fourth round)."""

    def __init__(self, cost: float, rank: int, option: PlanOption, gpu_type: str, type_id: int,
                 gpus: int, duration_s: float, tp: int, dominated: bool) -> None:
        # The fields a scoring sets (`_JobFacts.scored` rewrites them in place when the
        # exponent changes: a job keeps one row per option for its whole time in the queue)
        self.cost = cost  # duration x GPU-seconds penalty at the exponent of the scoring
        self.previous_cost = 0.0  # ... at the scoring before (`_JobFacts.previous`)
        # Its GPU-seconds over the job's least, what a scoring raises to the exponent (set
        # with the job's first scoring, `_JobFacts.scored`)
        self.gpu_seconds_ratio = 1.0
        self.rank = rank  # its entry's index: fastest first
        self.option = option
        self.gpu_type = gpu_type
        self.type_id = type_id  # its type's place in `_Pass.views` (`_type_ids`)
        self.gpus = gpus
        self.duration_s = duration_s  # time to completion, launch included (the entry's)
        self.tp = tp
        self.dominated = dominated  # an entry of its type with no more GPUs comes before it


@mypyc_attr(acyclic=True)  # (nothing it holds refers back to it: `_Row`'s docstring)
@dataclass(slots=True)
class _JobFacts:
    """What a job's options imply, derived once per (job, cluster shape) and kept across
    decisions: in a queue that changes by a few jobs per event, this is most of the work."""

    options: Sequence[PlanOption]  # identity: the cache is stale when the job's options change
    submit_s: float
    entries: tuple[_Entry, ...]  # options the cluster can ever host, fastest first (= rank)
    need: tuple[tuple[str, int], ...]  # (type, fewest GPUs of any option on it): the filter
    need_id: int  # small int naming `need`, so the filter memo is one dict lookup
    # Indices of the entries that no faster entry of the same type matches with as few GPUs:
    # a wait-based completion (`wait(type, GPUs) + duration`, the wait non-decreasing in GPUs)
    # is never strictly earlier on the others, so a search for the earliest can skip them
    frontier: tuple[int, ...]
    # type -> its `frontier` entries' (GPUs, time to completion), fastest first, so GPUs fall:
    # the last is its narrowest option, the first with no more GPUs than are free the fastest
    # that fits them (`_fits_now`); in `need` order
    ladders: dict[str, tuple[tuple[int, float], ...]]
    # type -> its `frontier` entries' indices, fastest first: where the most saved per GPU
    # over any time is (`_saving_per_gpu`: an entry off the frontier has one before it, as
    # fast or faster on no more GPUs, so it never saves more per GPU, and a tie goes to the
    # first)
    frontier_by_type: dict[str, tuple[int, ...]]
    # The type of its fastest option, the only one the fair share caps (`_share_limit`), and
    # its narrowest option there ("" and 0 without entries): read for every job scored
    wanted: str
    wanted_fewest: int
    best_s: float
    min_gpu_seconds: float
    min_gpus: int
    sjf_key: tuple[int, float, float, str]  # the non-urgent sort key minus aging x now
    type_ids: dict[str, int]  # `_type_ids` of the cluster it was derived for (its rows')
    # The job as queued now: set again by each decision's sort (a requeued job is a new object)
    job: QueuedJob
    exponent: float = -1.0  # the GPU-cost exponent the rows were scored with
    # What `HasPolicy._score` reads of each entry, cheapest first, ties by rank; one `_Row`
    # per entry for the job's whole life (`by_rank`), its cost and `dominated` mark set by
    # each scoring. A dominated row has a row of its type with no more GPUs before it
    # (cheaper, or as cheap and faster), so as an option to hold for it never wins
    # (`HasPolicy._score`)
    rows: tuple[_Row, ...] = ()
    open_rows: tuple[_Row, ...] = ()  # the rows not dominated
    dominated_min_gpus: float = INF  # the fewest GPUs of a dominated row (inf: none)
    by_rank: tuple[_Row, ...] = ()  # the same rows by entry index
    # The scoring before the current one, (exponent, rows, open_rows, dominated_min_gpus),
    # its costs in the rows (`_Row.previous_cost`): a pressure that steps back and forth
    # between two values (a half-empty cluster, events that free and take GPUs) swaps
    # instead of rescoring every job the walk reaches, swapping each row's two costs
    previous: tuple[float, tuple[_Row, ...], tuple[_Row, ...], float] | None = None
    fewest: list[int] = field(default_factory=list)  # `_mark`'s, per type: kept, not made
    # Set by each decision's sort: its sort key, the decision number.
    key: tuple[int, float, float, str] = (2, 0.0, 0.0, "")
    decision: int = -1
    # A running job in line for faster types (`HasPolicy._in_line`): (the job, the share of
    # its work left that its entries' times are for); None for a queued job
    running: tuple[RunningJob, float] | None = None

    def scored(self, exponent: float) -> None:
        """Per-option cost (duration x GPU-seconds penalty) and the cost order, set again only
        when the queue pressure changes the exponent (saturated queues keep it at the
        weight). A step to an exponent not seen before re-scores every job the walk reaches,
        which is most of that decision (10,000 GPUs x 500 queued: about 500 jobs), so a
        re-scoring allocates nothing per option: it rewrites the rows' costs in place, keeps
        the order and marks when the new costs leave the order as it was (the marks depend
        on the order alone), and else sorts from the order before, which a step of 1/16
        leaves nearly sorted."""
        if exponent == self.exponent:
            return
        by_rank = self.by_rank
        previous = self.previous
        current = (self.exponent, self.rows, self.open_rows, self.dominated_min_gpus)
        if previous is not None and previous[0] == exponent:
            self.previous = current
            self.exponent, self.rows, self.open_rows, self.dominated_min_gpus = previous
            for row in by_rank:
                row.cost, row.previous_cost = row.previous_cost, row.cost
                row.dominated = True
            for row in self.open_rows:
                row.dominated = False
            return
        self.previous = current if self.exponent >= 0 else None
        self.exponent = exponent
        if by_rank:
            for row in by_rank:
                row.previous_cost = row.cost
                row.cost = _cost(row.duration_s, row.gpu_seconds_ratio, exponent)
            if not _in_cost_order_already(self.rows):
                self._mark(tuple(_in_cost_order(list(self.rows))))
            return
        # The first scoring: the rows made, sorted from rank order
        base = self.min_gpu_seconds
        type_ids = self.type_ids
        options = self.options
        by_rank = self.by_rank = tuple([
            _Row(0.0, rank, options[i], gpu_type, type_ids[gpu_type], gpus, duration_s, tp, False)
            for rank, (i, gpu_type, gpus, duration_s, _, tp) in enumerate(self.entries)])
        for row, entry in zip(by_rank, self.entries):
            gpu_seconds: float = entry[4]
            row.gpu_seconds_ratio = gpu_seconds / base
            row.cost = _cost(row.duration_s, row.gpu_seconds_ratio, exponent)
        self._mark(tuple(sorted(by_rank, key=_COST)))  # stable: ties in rank order

    def _mark(self, rows: tuple[_Row, ...]) -> None:
        """Take `rows` (cost order) as the scoring's, marking the dominated ones."""
        fewest = self.fewest  # per type, the fewest GPUs of the rows so far (-1: none yet)
        if fewest:
            for type_id in range(len(fewest)):
                fewest[type_id] = -1
        else:
            fewest = self.fewest = [-1] * len(self.type_ids)
        open_rows = []
        dominated_min_gpus = INF
        for row in rows:
            gpus, type_id = row.gpus, row.type_id
            is_dominated = 0 <= fewest[type_id] <= gpus
            row.dominated = is_dominated
            if is_dominated:
                if gpus < dominated_min_gpus:
                    dominated_min_gpus = float(gpus)
            else:
                fewest[type_id] = gpus
                open_rows.append(row)
        self.rows, self.open_rows = rows, tuple(open_rows)
        self.dominated_min_gpus = dominated_min_gpus


def _cost(duration_s: float, gpu_seconds_ratio: float, exponent: float) -> float:
    """An option's cost: its time to completion x (its GPU-seconds over the job's least) **
    exponent; its time alone at exponent 0. `math.pow`, not **: compiled, a C call (** on
    floats is a generic one); the same libm pow as float's ** for a positive base."""
    return duration_s * math.pow(gpu_seconds_ratio, exponent) if exponent else duration_s


def _in_cost_order_already(rows: tuple[_Row, ...]) -> bool:
    """Are `rows` in (cost, rank) order, as `_in_cost_order` would leave them?"""
    for k in range(1, len(rows)):
        before, row = rows[k - 1], rows[k]
        if not (before.cost < row.cost or (before.cost == row.cost and before.rank < row.rank)):
            return False
    return True


def _in_cost_order(rows: list[_Row]) -> list[_Row]:
    """`rows` sorted by (cost, rank) in place, as `sorted` by cost would order the entries
    (a stable sort of them in rank order): by insertion, a few steps for rows in the order of
    a neighbouring exponent, where `sorted` with a key pays a call per row."""
    for k in range(1, len(rows)):
        row = rows[k]
        cost, rank = row.cost, row.rank
        at = k
        while at > 0:
            before = rows[at - 1]
            if before.cost < cost or (before.cost == cost and before.rank < rank):
                break
            rows[at] = before
            at -= 1
        rows[at] = row
    return rows


class _Reservation:
    """A type reserved for a blocked job (EASY backfill). Not a dataclass, as `_Row`:
    compiled, a dataclass's generated `__init__` runs as Python (about 1,300 instructions a
    reservation; tens of thousands are made on the whole trace)."""

    def __init__(self, shadow_s: float, spare_gpus: int) -> None:
        self.shadow_s = shadow_s  # when the blocked job is expected to start
        self.spare_gpus = spare_gpus  # GPUs of the type that backfill may still use past then


class _TypeState:
    """One GPU type's part of a pass's state, as `HasPolicy._scan` reads it for each option:
    one lookup instead of one per field. As four dicts (free GPUs, claims, reservations,
    release lists), those lookups had been about half the scan's instructions. Its claims are
    the pass's record of them; the free GPUs and the reservation copy the pass's index and
    `_Pass.reservations`, and `_Pass.changed` copies them again after every change. Not a
    dataclass, as `_Row`: one is built per type per decision."""

    def __init__(self, free: int, reservation: _Reservation | None) -> None:
        self.free = free  # `FreeIndex.free_by_type`
        self.reservation = reservation  # `_Pass.reservations`
        self.claimed = 0  # GPUs that held jobs of this pass wait for
        # `_ReleaseProfile.per_gpu`, on the scan's first need
        self.per_gpu: list[float] | None = None
        self.released = -1  # `_ReleaseProfile.total`, on `_close_if_covered`'s first need


class _ReleaseProfile:
    """When GPUs of each type are expected to free up, from the running jobs' expected ends.

    Built lazily: a decision in which every scored option can start now never needs it.
    One per decision, shared by the admission step and the pass (same running jobs, same
    time). Its answers are read off one list per type with an entry per GPU (`per_gpu`, as
    absolute times: the wait is `end - now`); with `kept`, those lists are kept across
    decisions, by the same deltas as the release lists (`ReleaseTimes.per_gpu`)."""

    def __init__(self, running: Sequence[RunningJob], now_s: float,
                 kept: ReleaseTimes | None = None) -> None:
        self._running = running
        self._now_s = now_s
        self._kept = kept  # the lists kept up to date across decisions; None: from scratch
        self._ends: dict[str, list[float]] | None = None
        self._cumulative: dict[str, list[int]] = {}
        # type -> when its k-th GPU from now is released, at [k - 1] (inf past the end):
        # fixed while the type's list is, so claims and binds never make it stale; the hot
        # loops read it inline (`end_s`)
        self.ends: dict[str, list[float]] = {}

    def _build(self) -> dict[str, list[float]]:
        self._ends, self._cumulative = (self._kept.of(self._running) if self._kept is not None
                                        else release_lists(self._running))
        return self._ends

    def wait_s(self, gpu_type: str, short: int) -> float:
        """Seconds until `short` (>= 1) more GPUs of the type are released (inf if never); an
        overdue job is taken to release its GPUs now. From `end_s`."""
        wait_s = self.end_s(gpu_type, short) - self._now_s
        return wait_s if wait_s > 0.0 else 0.0

    def per_gpu(self, gpu_type: str) -> list[float]:
        """The type's list in `ends`, made on its first ask in this decision."""
        per_gpu = self.ends.get(gpu_type)
        if per_gpu is None:
            ends = self._ends if self._ends is not None else self._build()
            if self._kept is not None:
                per_gpu = self._kept.per_gpu(gpu_type, ends, self._cumulative)
            elif gpu_type in ends:
                per_gpu = per_gpu_ends(ends[gpu_type], self._cumulative[gpu_type])
            else:
                per_gpu = []
            self.ends[gpu_type] = per_gpu
        return per_gpu

    def end_s(self, gpu_type: str, short: int) -> float:
        """When `short` (>= 1) more GPUs of the type will have been released (inf if never)."""
        per_gpu = self.per_gpu(gpu_type)
        return per_gpu[short - 1] if short <= len(per_gpu) else INF

    def total(self, gpu_type: str) -> int:
        """All GPUs of the type that running jobs will ever release."""
        if self._ends is None:
            self._build()
        cum = self._cumulative.get(gpu_type)
        return cum[-1] if cum else 0

    def jobs_by_type(self) -> dict[str, int]:
        """How many running jobs hold GPUs of each type (one expected end each)."""
        ends = self._ends if self._ends is not None else self._build()
        return {gpu_type: len(type_ends) for gpu_type, type_ends in ends.items()}

    def released_by(self, gpu_type: str, time_s: float) -> int:
        """GPUs of the type released at or before `time_s` (>= now)."""
        ends = self._ends if self._ends is not None else self._build()
        i = bisect.bisect_right(ends.get(gpu_type, []), time_s)
        return self._cumulative[gpu_type][i - 1] if i else 0


@dataclass
class _Pass:
    """The state of one decision's pass over the queue (never outlives `schedule`)."""

    index: FreeIndex  # free GPUs, updated as this pass reserves them
    releases: _ReleaseProfile
    now_s: float
    exponent: float  # GPU-cost exponent from the queue pressure
    # Start now on what is free rather than hold for faster GPUs: an elastic HAS moves the
    # job there when they free up, for a restart instead of the whole wait.
    start_now: bool = False
    move_s: float = 0.0  # ... unless the wait is shorter than such a move's restart
    reservations: dict[str, _Reservation] = field(default_factory=dict)
    fits: dict[int, bool] = field(default_factory=dict)  # filter memo by need_id; reset on bind
    # Per type: its claims (GPUs held jobs already wait for), and what the scan reads of it;
    # the same objects in `views`, by `_type_ids` (the scan's rows name them by that number)
    types: dict[str, _TypeState] = field(init=False)
    views: list[_TypeState] = field(init=False)
    # Types on which no job of this pass can start later than now any more: reserved, and
    # claimed past every GPU the running jobs will release (`changed` keeps it up to date)
    closed: set[str] = field(default_factory=set)
    reason: str | None = None  # the placements' decision reason, formatted once
    prune_holds: bool = True  # `_score` skips the holds of dominated options (the fast path)
    # The most GPUs any type has free at the pass's start (free GPUs only shrink in a pass)
    most_free: int = field(init=False)
    share: dict[str, int] | None = None  # per type, the widest start allowed (`fair_shares`)
    keep_place: bool = False  # running jobs keep a place in line (`HasConfig.keep_place`)
    # Once every type is closed: what `may_start_now` reads (`open_types`), taken again after
    # each change (None until asked)
    open_now: tuple[list[tuple[str, int, int, float]], int, float] | None = None

    def __post_init__(self) -> None:
        free = self.index.free_by_type
        self.most_free = max(free.values(), default=0)
        self.types = {gpu_type: _TypeState(have, self.reservations.get(gpu_type))
                      for gpu_type, have in free.items()}
        self.views = [self.types[gpu_type] for gpu_type in _type_names(self.index)]

    def expected_wait_s(self, gpu_type: str, gpus: int) -> float:
        """Seconds until `gpus` GPUs of the type could be ours; asked only for an option that
        cannot start now, so at least one more release is needed (the free GPUs may be
        fragmented or reserved)."""
        return self.wait_on(self.types[gpu_type], gpu_type, gpus)

    def wait_on(self, view: _TypeState, gpu_type: str, gpus: int) -> float:
        """`expected_wait_s` for the type whose state is `view`, read off it as `_scan`
        reads it (the free GPUs and the reservation are the pass's, copied)."""
        short = gpus + view.claimed - view.free
        if short < 1:
            short = 1
        per_gpu = view.per_gpu
        if per_gpu is None:
            per_gpu = view.per_gpu = self.releases.per_gpu(gpu_type)
        wait_s = (per_gpu[short - 1] if short <= len(per_gpu) else INF) - self.now_s
        if not wait_s > 0.0:
            wait_s = 0.0
        reservation = view.reservation
        if reservation is not None and reservation.shadow_s - self.now_s > wait_s:
            wait_s = reservation.shadow_s - self.now_s
        return wait_s

    def changed(self, gpu_type: str) -> None:
        """The type's free GPUs or reservation changed: its `_TypeState` copies them again,
        and is it closed now?"""
        view = self.types[gpu_type]
        view.free = self.index.free_by_type[gpu_type]
        view.reservation = self.reservations.get(gpu_type)
        self.open_now = None
        self._close_if_covered(gpu_type, view)

    def claim(self, gpu_type: str, gpus: int) -> None:
        """A held job waits for `gpus` of the type: later jobs of the pass see them claimed."""
        view = self.types[gpu_type]
        view.claimed += gpus
        self._close_if_covered(gpu_type, view)

    def claimed_types(self) -> set[str]:
        """The types some held job of this pass waits for."""
        return {gpu_type for gpu_type, view in self.types.items() if view.claimed}

    def _close_if_covered(self, gpu_type: str, view: _TypeState) -> None:
        """Close the type if it is reserved and its claims cover every GPU the running jobs
        will release. Claims only grow and free GPUs only shrink during a pass, so a closed
        type stays closed."""
        if view.reservation is not None and gpu_type not in self.closed:
            total = view.released
            if total < 0:  # asked once a type per pass: a claim asks it, and most claims
                total = view.released = self.releases.total(gpu_type)  # are on reserved types
            if total == 0 or view.claimed - view.free >= total:  # nothing to wait for, ever
                self.closed.add(gpu_type)

    def backfill_allowed(self, gpu_type: str, gpus: int, duration_s: float) -> bool:
        reservation = self.reservations.get(gpu_type)
        return (reservation is None or self.now_s + duration_s <= reservation.shadow_s
                or gpus <= reservation.spare_gpus)

    def blocked_on_closed(self, facts: "_JobFacts") -> bool:
        """True when every type of the job is closed and none of its options can start now
        (`_fits_now`). Scoring would then hold it for its fastest option, on a closed type,
        where one more claim changes no later job's answer (a wait that is infinite stays
        infinite, the reservation exists), so the pass can skip it."""
        closed = self.closed
        free = self.index.free_by_type
        reservations = self.reservations
        for gpu_type, ladder in facts.ladders.items():
            if gpu_type not in closed:
                return False
            have = free.get(gpu_type, 0)
            if have >= ladder[-1][0]:
                reservation = reservations[gpu_type]
                if _fits_now(ladder, have, reservation.spare_gpus, reservation.shadow_s,
                             self.now_s):
                    return False
        return True

    def all_closed(self) -> bool:
        return len(self.closed) == len(self.types)

    def may_start_now(self, facts: "_JobFacts") -> bool:
        """Asked once every type is closed (`all_closed`), before anything else about a job:
        has it, on a type with free GPUs, an option that fits them and passes the type's
        reservation (`_could_start`: `_score`'s test)? If not, `_score` would hold it, for a
        wait that is infinite on every type, and its claim on a closed type changes no later
        answer (`blocked_on_closed`'s argument, which then holds for every job). So the walk
        skips it, for about a tenth of what `blocked_on_closed` costs: the tail of a long
        queue once the cluster's free GPUs are spoken for (10,000 GPUs x 5,000 queued, batch:
        3,110 of the 5,000 jobs).

        The open types are taken again after each change (`changed`). A bind also shrinks a
        reservation's spare GPUs after that; a list taken before it only says yes to more
        jobs (free and spare GPUs only shrink during a pass), and a yes only costs time."""
        open_now = self.open_now
        if open_now is None:
            open_now = self.open_now = self.open_types()
        return _may_start(facts, open_now, self.now_s)

    def next_may_start(self, ordered: list["_JobFacts"], position: int, stop: int,
                       line_key: tuple[int, float, float, str] | None) -> int:
        """Once every type is closed: the first job from `position` on (before `stop`) that
        `may_start_now` does not rule out, or before which a running job in line has its turn
        (its key `line_key` is below the job's: the turn may free GPUs); `stop` when none.
        Every job passed would be skipped by the walk one at a time (`may_start_now`, whose
        argument holds for each: nothing binds in between, so the open types stay as asked).
        One loop with the two-number test inline, where the walk's own step per job cost
        about 340 instructions (10,000 GPUs x 5,000 queued, batch: 3,110 jobs of the tail;
        docs/has-performance.md, thirty-first round)."""
        open_now = self.open_now
        if open_now is None:
            open_now = self.open_now = self.open_types()
        open_types, spare_max, shadow_max = open_now
        now_s = self.now_s
        end = min(stop, len(ordered))
        if line_key is not None:  # the first job whose key is above it (`ordered` is by key)
            end = bisect.bisect_right(ordered, line_key, position, end, key=_KEY)
        while position < end:
            facts = ordered[position]
            # `_may_start`, inlined
            if (facts.min_gpus <= spare_max or now_s + facts.best_s <= shadow_max) and \
                    _could_start(facts, open_types, now_s):
                return position
            position += 1
        return end

    def open_types(self) -> tuple[list[tuple[str, int, int, float]], int, float]:
        """(type, free GPUs, spare GPUs past the shadow, shadow time) for each type with free
        GPUs (unreserved: all its free GPUs are spare, the shadow is inf), with the most spare
        GPUs and the latest shadow over them (-1 and -inf when no type has free GPUs)."""
        open_types = []
        spare_max, shadow_max = -1, -INF
        for gpu_type, view in self.types.items():
            have = view.free
            if have > 0:
                reservation = view.reservation
                spare, shadow_s = (have, INF) if reservation is None else \
                    (reservation.spare_gpus, reservation.shadow_s)
                open_types.append((gpu_type, have, spare, shadow_s))
                spare_max, shadow_max = max(spare_max, spare), max(shadow_max, shadow_s)
        return open_types, spare_max, shadow_max

    def waits_forever(self, facts: "_JobFacts") -> bool:
        """True when none of the job's options can start now (`_fits_now`) and every one
        would wait forever. `_score`'s scan would then visit every option (no cost exceeds an
        infinite value) to hold for the fastest within the job's share; it asks this when its
        first hold waits forever, and names that option at once when it does. Under sustained
        load this is most scored jobs: on the whole Philly trace's first 12,000 jobs, 83 % of
        scans ended so, after 17 options each. Asked of every job, it cost 7 % more
        instructions a decision at 10,000 GPUs x 5,000 queued, where it is never true.

        A type's options all wait forever when its reservation does, or when even the
        narrowest, with the type's claims, exceeds every GPU the running jobs will release
        (`_ReleaseProfile.end_s` is inf, and more GPUs need more releases)."""
        types = self.types
        releases = self.releases
        for gpu_type, ladder in facts.ladders.items():
            gpus = ladder[-1][0]
            view = types[gpu_type]
            have = view.free
            reservation = view.reservation
            if have >= gpus and (reservation is None or _fits_now(
                    ladder, have, reservation.spare_gpus, reservation.shadow_s, self.now_s)):
                return False  # some option may start now
            if reservation is not None and reservation.shadow_s == INF:
                continue
            if gpus + view.claimed - have <= releases.total(gpu_type):
                return False  # a finite wait (short < 1 is a wait for one GPU, also finite)
        return True

    def idle_from(self, ordered: Sequence["_JobFacts"], position: int,
                  line: "_Line | None" = None
                  ) -> tuple[int, tuple[int, float, float, str]] | None:
        """Where the rest of the walk stops mattering: (an index from which on no job of
        `ordered` can start now, the key of the last running job in `line` that could), or
        None while some type with free GPUs is not yet claimed (ask again later). Asked
        before the job at `position` is processed; `_FIRST_KEY` when no job in line could.

        Why stopping there is exact. What the pass hands on is its placements, the free index
        and, for growth, the types held jobs claimed or reserved (`blocked`); a hold's claims
        and reservations matter only to later jobs of the same pass. Suppose that at position
        i (a) every type with free GPUs is claimed and (b) no job from i on has, on a type t
        with free GPUs, an option that fits them and passes t's reservation (`_fits_now`,
        the test `_score` makes). Then job i cannot start now, so it binds nothing: the free
        GPUs stay as they are, claims only grow, a reservation's shadow never moves and its
        spare GPUs only shrink, and a type reserved later only refuses more; so (a) and (b) hold
        at i + 1, and by induction no later job binds either. Nothing is placed after i,
        and at the end every type with free GPUs is claimed, so growth has no GPUs to give
        (`elastic.grow` returns nothing when every free type is blocked): the skipped jobs'
        holds change no answer. The same holds from any later position, and binds between
        `position` and the stop only shrink the free and spare GPUs, so the index found
        here stays valid: it is the last job from the end that fails (b), plus one. The scan
        from the end passes most of a long tail on two numbers per job (its fewest GPUs and
        shortest time on any type, below each type's), O(tail) at about 0.1 us a job."""
        for view in self.types.values():
            if view.free > 0 and not view.claimed:
                return None
        open_types, spare_max, shadow_max = self.open_types()
        now_s = self.now_s
        stop = position
        for end, facts in zip(range(len(ordered), position, -1), reversed(ordered)):
            # `_may_start`, inlined: a call per job of the tail cost 2 % of a decision
            if facts.min_gpus > spare_max and now_s + facts.best_s > shadow_max:
                continue
            if _could_start(facts, open_types, now_s):
                stop = end
                break
        # The running jobs still in line are merged into the walk by key (`_Line`): the last
        # one that could start moves the stop past the queued jobs ahead of it
        through = _FIRST_KEY
        if line is not None:
            through = line.last_that(lambda facts: _could_start(facts, open_types, now_s))
            if through is not _FIRST_KEY:
                stop = max(stop, bisect.bisect_left(ordered, through, key=_KEY))
        return stop, through


def _type_names(index: FreeIndex) -> list[str]:
    """The cluster's GPU types in name order: a type's place here is its number
    (`_type_ids`), so that a job's facts and a pass over the same cluster agree on it."""
    return sorted(index.capacity)


def _type_ids(index: FreeIndex) -> dict[str, int]:
    return {gpu_type: number for number, gpu_type in enumerate(_type_names(index))}


def _could_start(facts: "_JobFacts", open_types: list[tuple[str, int, int, float]],
                 now_s: float) -> bool:
    """`_Pass.idle_from`'s test: has the job, on a type with free GPUs, an option that fits
    them and passes the type's reservation? (type, free GPUs, spare GPUs past the shadow,
    shadow time) per type in `open_types`."""
    ladders = facts.ladders
    for gpu_type, have, spare, shadow_s in open_types:
        ladder = ladders.get(gpu_type)
        if ladder is not None and _fits_now(ladder, have, spare, shadow_s, now_s):
            return True
    return False


def _may_start(facts: "_JobFacts", open_now: tuple[list[tuple[str, int, int, float]], int, float],
               now_s: float) -> bool:
    """`_could_start` on `_Pass.open_types()`, behind a test on two numbers that passes most
    of a long tail at once: no option with as few GPUs as any spare, and none as short as the
    latest shadow (a job's fewest GPUs and shortest time bound every type's; floats add
    monotonically)."""
    open_types, spare_max, shadow_max = open_now
    if facts.min_gpus > spare_max and now_s + facts.best_s > shadow_max:
        return False
    return _could_start(facts, open_types, now_s)


def _fits_now(ladder: tuple[tuple[int, float], ...], have: int, spare_gpus: int,
              shadow_s: float, now_s: float) -> bool:
    """Has the type an option of the job with no more GPUs than the `have` free that passes
    the type's reservation, as `_score` tests it: no more GPUs than the reservation's spare,
    or it ends by the shadow time (no reservation: spare = have, shadow inf)?

    Read off the type's ladder (`_JobFacts.ladders`). Its last step is the narrowest option:
    if that does not fit, none does, and if it is within the spare GPUs, it passes. Else
    only the shadow can let one pass, and the first step that fits is the fastest option
    that does: an option before it has at least the GPUs of an earlier step (else it would
    be a step), which does not fit. So it passes if any does (floats add monotonically)."""
    if ladder[-1][0] > have:
        return False
    if ladder[-1][0] <= spare_gpus:
        return True
    for gpus, total_s in ladder:
        if gpus <= have:
            break  # the last step fits, so the loop always stops here
    return now_s + total_s <= shadow_s


@mypyc_attr(acyclic=True)  # (nothing it holds refers back to it: `_Row`'s docstring)
@dataclass(slots=True)
class _Place:
    """A running job's place in line for faster types (`HasPolicy._in_line`), kept per job
    object (a `RunningJob` is immutable: a start or reshape makes a new one)."""

    run: RunningJob
    # (launch s, full-work duration s) of its options on the other types that exist: its key's
    # best time; () when it can never move up (`HasPolicy._place_of`)
    timings: tuple[tuple[float, float], ...]
    min_gpus: int  # the fewest GPUs of any of them
    # Those the cluster can host, with (GPUs, type): what a move could take; fewest GPUs
    # first, so that a look for those that fit the free GPUs stops at the first too wide
    probe: tuple[tuple[float, float, int, str], ...]
    full_s: float  # its whole work's duration on its current option, and on its fastest
    fastest_s: float
    left: float  # the work it has left, as of the latest refresh (`_IN_LINE_REFRESH`)
    best_s: float  # its best time to completion with that work (the key's)
    # Before this time no refresh is due (a bound: the refresh compares the work left itself)
    refresh_s: float
    facts: "_JobFacts | None" = None  # as a queued job with that work, once asked for

    @staticmethod
    def out_of_line(run: RunningJob) -> "_Place":
        """The place of a job that can never move up."""
        return _Place(run, (), 0, (), 0.0, 0.0, 0.0, 0.0, INF)


class _Line:
    """The running jobs in line for faster types (`HasConfig.keep_place`), merged into the
    walk by key as it goes, not inserted into a copy of the queue's order: a walk that stops
    early (`_Pass.idle_from`) never looks at the ones behind its stop. Whether a job could
    move onto the GPUs free at the pass's start, and its facts for the walk, are asked
    (`facts_of`: None when it could not) only when its turn comes or the early stop needs
    them, and once; one that could not move is not in line (it neither moves nor claims in
    this pass)."""

    def __init__(self, places: list[tuple[tuple[int, float, float, str], _Place]],
                 facts_of: "Callable[[tuple[int, float, float, str], _Place], _JobFacts | None]"
                 ) -> None:
        places.sort(key=_FIRST)
        self.places = places  # (key, place), in key order
        self.next = 0  # the first not taken yet
        self._facts_of = facts_of
        self._answers: list[_JobFacts | None] = [None] * len(places)
        self._asked = [False] * len(places)

    def head_key(self) -> tuple[int, float, float, str]:
        return self.places[self.next][0] if self.next < len(self.places) else _LAST_KEY

    def _facts(self, i: int) -> "_JobFacts | None":
        if not self._asked[i]:
            self._asked[i] = True
            self._answers[i] = self._facts_of(*self.places[i])
        return self._answers[i]

    def take(self, key: tuple[int, float, float, str], through: bool = False
             ) -> list["_JobFacts"]:
        """The jobs in line before `key` (or up to it, `through`), in order: their turns."""
        out = []
        places = self.places
        while self.next < len(places) and (places[self.next][0] < key or
                                           through and places[self.next][0] == key):
            facts = self._facts(self.next)
            if facts is not None:
                out.append(facts)
            self.next += 1
        return out

    def last_that(self, could_start: "Callable[[_JobFacts], bool]"
                  ) -> tuple[int, float, float, str]:
        """The key of the last job still in line that `could_start`, or `_FIRST_KEY`."""
        for i in range(len(self.places) - 1, self.next - 1, -1):
            facts = self._facts(i)
            if facts is not None and could_start(facts):
                return facts.key
        return _FIRST_KEY


def _worth_starting_now(slow_s: float, fast_s: float, wait_s: float, move_s: float) -> bool:
    """Start now on a slower option rather than hold `wait_s` for a faster one, betting on a
    move there when it frees up? Only at even odds: the gain if the move happens (the faster
    GPUs' share of the wait, less the move's restart) must cover the loss if it never does
    (the slow run to the end against holding). A long job on GPUs many times slower fails
    this: the move may never come (the queue takes the fast GPUs first) and its loss is the
    whole slow run; a short wait's start on slightly slower GPUs passes."""
    gain_s = fast_s * min(1.0, wait_s / slow_s) - move_s
    loss_s = slow_s - (wait_s + fast_s)
    return gain_s >= loss_s


def _stopgap_pays(slow_s: float, fast_s: float, wait_s: float, move_s: float) -> bool:
    """With a place kept in line (`HasConfig.keep_place`), start now on a slower option, and
    move to the faster one at its turn, rather than hold `wait_s` for it? When the work done on
    the slow GPUs while waiting (the share `wait_s / slow_s` of it) saves more time on the
    fast ones than the move's restart costs. Unlike `_worth_starting_now`, no even-odds bet on
    the move happening: the job's turn comes as a queued job's would."""
    return fast_s * min(1.0, wait_s / slow_s) >= move_s


def fair_shares(running: dict[str, int], queued: dict[str, int],
                capacity: dict[str, int]) -> dict[str, int]:
    """Per GPU type, the most GPUs a queued job that wants the type may start on there: the
    type's GPUs over the jobs that want it, those running on it and those queued whose fastest
    option is on it (`running`, `queued`: jobs by type). When more jobs want the type than it
    has GPUs, every job cannot have some, and the share is the whole type (no cap: the order
    decides, as without shares).

    Why: each job's fastest option is the best for that job alone. In a burst the first jobs of
    the order would take the fast type at full width, and the jobs after them would wait for it
    or start on slow, wide options that burn many times the GPU-time (docs/has-experiments.md,
    s15). Sia's round re-solves every job at once and gives every job some GPUs first; this is
    the event-driven counterpart: on the type it wants, a job starts (or holds for, or is
    admitted to) at most its share, and growth gives idle GPUs to the jobs that scale once no
    queued job wants them. A job's narrowest option there is always allowed, so the cap never
    leaves a job unable to run; its options on other types, and urgent deadline jobs, are not
    capped (`_over_share`)."""
    shares = {}
    for gpu_type, gpus in capacity.items():
        users = running.get(gpu_type, 0) + queued.get(gpu_type, 0)
        shares[gpu_type] = gpus // users if 0 < users <= gpus else gpus
    return shares


def _share_limit(share: dict[str, int] | None, facts: _JobFacts) -> int:
    """The most GPUs the job may take on the type of its fastest option (`fair_shares`): its
    share there, but never less than its narrowest option there; no limit for an urgent
    deadline job, or without shares."""
    if share is None or facts.key[0] == 0:
        return _NO_LIMIT
    return max(share[facts.wanted], facts.wanted_fewest)


def _over_share(share: dict[str, int] | None, facts: _JobFacts, gpu_type: str, gpus: int) -> bool:
    """Is this option wider than the job may take? Only options on the type of its fastest
    option are limited (`_share_limit`)."""
    return gpu_type == facts.wanted and gpus > _share_limit(share, facts)


def _saving_per_gpu(facts: _JobFacts, baseline_s: float, share: dict[str, int] | None,
                    gpu_type: str) -> tuple[float, _Row] | None:
    """The job's option on `gpu_type` that saves the most over its `baseline_s` per GPU
    (seconds per GPU, the option; the first of equals), within its fair share; None when none
    saves anything: where GPUs freed for a group of waiting jobs do the most
    (`HasPolicy._admit_together`). Asked per type that has GPUs to spare, usually one or two:
    all types at once, in a dict, had cost 17,000 instructions a job. Only the type's
    frontier entries are looked at (`_JobFacts.frontier_by_type`), with the same answer: a
    few of the job's twenty-odd entries, where the scan over all of them was 3 % of the
    first 8,000 trace jobs' simulation, compiled (docs/has-performance.md, thirtieth round).
    The option as its row (`_JobFacts.by_rank`), as admission reads them."""
    best: _Row | None = None
    best_per_gpu_s = 0.0
    limit = _share_limit(share, facts) if gpu_type == facts.wanted else _NO_LIMIT
    by_rank = facts.by_rank
    for rank in facts.frontier_by_type.get(gpu_type, ()):
        row = by_rank[rank]
        gpus = row.gpus
        if gpus > limit:  # `_over_share`
            continue
        per_gpu_s = (baseline_s - row.duration_s) / gpus
        if per_gpu_s > 0.0 and (best is None or per_gpu_s > best_per_gpu_s):
            best, best_per_gpu_s = row, per_gpu_s
    return (best_per_gpu_s, best) if best is not None else None


def _left_waiting(claimed_of: list[int], ahead: dict[str, list[tuple[float, float]]] | None,
                  best_s: float, baseline: _Row, baseline_s: float) -> float:
    """Admission leaves a head job waiting for its baseline (`baseline_s` to completion): later
    jobs see its GPUs claimed (`claimed_of`, by type number) and, with `admit_in_order`, its
    wait (`ahead`). Its wait, s."""
    gpu_type = baseline.gpu_type
    claimed_of[baseline.type_id] += baseline.gpus
    wait_s = baseline_s - baseline.duration_s
    if ahead is not None:
        ahead.setdefault(gpu_type, []).append((best_s, wait_s))
    return wait_s


def _bar_s(waiting: Sequence[tuple[float, float]], best_s: float) -> float:
    """`HasConfig.admit_in_order`: how long a job whose fastest option takes `best_s` may hold
    GPUs of a type that the jobs ahead of it (`waiting`: each one's fastest time and its wait
    for the type) were left waiting for: the shortest wait among those no longer than it
    (inf when none is). A longer job ahead, one that aged to the head, does not bar a shorter
    one: admission may reorder toward shorter jobs, as the order itself does, but not away.
    A loop, not `min` over a list: compiled, `min(..., default=)` is a generic call, and this
    is asked per option of every head job admission looks at (7.6 % of has's instructions on
    the first 3,000 trace jobs; docs/has-performance.md, thirtieth round)."""
    bar_s = INF
    for job_s, wait_s in waiting:
        if job_s <= best_s and wait_s < bar_s:
            bar_s = wait_s
    return bar_s


def _alternatives(draft: tuple[Any, tuple[_Row, ...], PlanOption, float, list[float], str, int,
                               int]) -> tuple[Alternative, ...]:
    """A drafted record's rows (`HasPolicy._record`): the chosen option, then the cheapest
    others (as many as starts were captured for) with their captured starts and why each was
    not chosen."""
    _, rows, chosen, chosen_total_s, starts, fastest_type, limit, share_gpus = draft
    chosen_s = chosen.duration_s
    alternatives = [_new_tuple(Alternative, (chosen, 0.0, chosen_total_s, "chosen"))]
    for row, start_s in zip(rows, starts):
        option, gpu_type, gpus, total_s = row.option, row.gpu_type, row.gpus, row.duration_s
        if option is chosen or (option.duration_s == chosen_s and option == chosen):
            continue
        if gpu_type == fastest_type and gpus > limit:  # `_over_share`
            verdict = f"wider than its fair share of {gpu_type} ({share_gpus} GPUs)"
        elif start_s == 0.0 and total_s < chosen_total_s:
            verdict = "costs more GPU-time"
        else:
            verdict = "later completion"
        alternatives.append(_new_tuple(Alternative, (option, start_s, start_s + total_s,
                                                     verdict)))
    return tuple(alternatives)


class HasPolicy:
    name = "has"
    round_s = 0.0

    def __init__(self, config: HasConfig = HasConfig(), *, shortcuts: bool = True) -> None:
        """`shortcuts=False` scores every job and rebuilds every index from scratch: the
        straightforward path, which tests compare the fast one with (same decisions)."""
        self.config = config
        self.shortcuts = shortcuts
        self.elastic = config.elastic
        self._menus = Menus()  # running jobs' option menus, derived once
        self._release_times = ReleaseTimes()  # the running jobs' ends, kept by deltas
        self._free_index = KeptFreeIndex()  # the view's free GPUs, kept by changed nodes
        self._facts: dict[str, _JobFacts] = {}  # derived data by job id, across decisions
        self._capacity: dict[str, int] = {}  # the cluster shape the cached facts were built for
        self._need_ids: dict[tuple[tuple[str, int], ...], int] = {}
        self._launch_s: dict[int, float] = {}  # config.launch_s by nodes spanned
        self._type_ids: dict[str, int] = {}  # `_type_ids` of the cluster last derived for
        self._places: dict[int, _Place] = {}  # id(run) -> its place in line for faster types
        # The running jobs whose place may ever move up, kept by deltas (`_may_move_up`): the
        # last running jobs seen, their ids (None: not kept), and id(run) -> place of those
        self._running_diff: IdentityDiff[RunningJob] = IdentityDiff()
        self._running_ids: set[int] | None = None
        self._may_move: dict[int, _Place] = {}
        self._saturated_exponent = max(config.min_cost_exponent, config.gpu_cost_weight)
        self._decision = 0  # straightforward sorts so far (marks a job seen in this one)
        # The incremental sort's state: the last queue (by identity), its jobs' facts (None:
        # no usable option), job id -> id(job), the deadline jobs, the order, the demand.
        self._queue_diff: IdentityDiff[QueuedJob] = IdentityDiff()
        self._queued: dict[int, _JobFacts | None] = {}
        self._queued_ids: dict[str, int] = {}
        self._deadlines: dict[int, _JobFacts] = {}
        self._order: list[_JobFacts] = []
        self._demand = 0
        self._wanting: dict[str, int] = {}  # queued jobs by the type of their fastest option
        # Admission's victim candidates, spare and most freed, and the least restart of the
        # running jobs, kept by deltas
        self._kept_candidates = KeptCandidates()
        self._kept_restarts = KeptRestarts()

    def schedule(self, queue: Sequence[QueuedJob], cluster: ClusterView, now_s: float,
                 running: Sequence[RunningJob] = ()) -> list[Placement]:
        index = self._free_index.index(cluster) if self.shortcuts else FreeIndex(cluster)
        self._menus.retain(running)
        elastic = self.config.elastic and bool(running)
        if not queue and not elastic:
            return []
        moves: list[Placement] = []
        admitted: list[Placement] = []
        ordered: list[_JobFacts] = []
        demand = 0
        releases = _ReleaseProfile(running, now_s,
                                   self._release_times if self.shortcuts else None)
        share: dict[str, int] | None = None
        if queue:
            ordered, demand, wanting = self._sort(queue, index, now_s)
            if self.config.fair_share:
                share = fair_shares(releases.jobs_by_type(), wanting, index.capacity)
            if elastic:
                # Displace only while the queue fits in the free GPUs: under pressure the
                # queue's pass takes the idle GPUs a displaced job would run on
                moves, admitted = self._admit(ordered, running, index, releases, now_s,
                                              demand <= index.total_free(), share)
                if admitted:  # the pass skips them
                    taken = {p.job_id for p in admitted}
                    ordered = [f for f in ordered if f.job.job_id not in taken]
        total_free = index.total_free()
        if total_free == 0:
            return moves + admitted
        # In steps of 1/16: every job's scoring depends on the exponent (`_JobFacts.scored`),
        # so a pressure that moved by a hair with each event re-scored the whole walk each time
        # (10,000 GPUs x 500 queued: about 500 jobs a decision, docs/has-performance.md)
        pressure = round(16 * min(1.0, max(0.0, demand / max(1, total_free) - 1.0))) / 16
        # Start now on slower GPUs only while the queue fits in the free GPUs: the move to the
        # faster ones later needs them free after the pass, which under pressure they are not
        # (the queue takes them), so the job would run its whole slow option to the end.
        state = _Pass(index, releases, now_s,
                      max(self.config.min_cost_exponent, pressure * self.config.gpu_cost_weight),
                      elastic and self.config.start_now and pressure == 0.0,
                      self.config.restart_floor_s + self.config.launch_s(1),
                      prune_holds=self.shortcuts, share=share,
                      keep_place=elastic and self.config.keep_place)
        line: _Line | None = None  # running jobs in line for faster types, merged by key
        if state.keep_place:
            line = self._in_line(running, index, now_s,
                                 {p.job_id for p in moves} | {p.job_id for p in admitted})
        line_key = line.head_key() if line is not None else _LAST_KEY
        placements: list[Placement] = []
        reserve_after_s = self.config.reserve_after_s
        binding_holds = self.config.binding_holds
        reservations = state.reservations
        # The walk's early stop (`_Pass.idle_from`), looked for every _IDLE_CHECK jobs until
        # every type with free GPUs is claimed, then fixed: no job from `stop` on can start now,
        # nor any running job in line after `through`
        stop = len(ordered)
        through = _LAST_KEY
        check = _IDLE_CHECK if self.shortcuts else stop
        position = -1
        while position + 1 < len(ordered):  # (a loop on the index: the tail is jumped over)
            position += 1
            facts = ordered[position]
            if 0 <= check <= position:  # (a jump may pass it: asked at the next job then)
                found = state.idle_from(ordered, position, line)
                if found is None:
                    check += _IDLE_CHECK
                else:
                    (stop, through), check = found, -1
            if position >= stop:
                break
            if line is not None and line_key < facts.key:  # running jobs in line ahead of it
                total_free = self._turns(line.take(facts.key), state, placements, total_free)
                if total_free <= 0:
                    break
                line_key = line.head_key()
            # (`len`: compiled, a set's truth is a generic call, its size a field read)
            if len(state.closed) and self.shortcuts and state.all_closed() and \
                    not state.may_start_now(facts):
                # it would hold, on a closed type, where its claim changes nothing; so would
                # the jobs after it up to the next that may start or a running job's turn
                position = state.next_may_start(ordered, position + 1, stop,
                                                line_key if line is not None else None) - 1
                continue
            job = facts.job  # (its submit time is `facts.submit_s`: facts are for this job)
            if not self._filter(facts, state):
                if now_s - facts.submit_s >= reserve_after_s:  # else _maybe_reserve says no
                    self._maybe_reserve(job, facts, state)
                continue
            if len(state.closed) and self.shortcuts and state.blocked_on_closed(facts):
                _, gpu_type, gpus, _, _, _ = facts.entries[0]  # what its hold would claim
                state.claim(gpu_type, gpus)
                continue
            row, assignments = self._score(facts, state)
            if row is None:
                continue
            if assignments is None:  # hold for a faster type: later jobs see the claim
                # _maybe_reserve's and _reserve's first refusals (not blocked long enough,
                # type reserved already), and `changed`'s (nothing to close), asked inline:
                # most of a long queue's holds end there
                gpu_type = row.gpu_type
                if not (now_s - facts.submit_s >= reserve_after_s and
                        self._maybe_reserve(job, facts, state)) and not (
                        binding_holds and gpu_type not in reservations and
                        self._reserve(row.option, state)):
                    state.claim(gpu_type, row.gpus)
                continue
            placements.append(self._bind(job, facts, row, assignments, state))
            total_free -= row.gpus
            if total_free == 0:
                break
        if line is not None and total_free > 0:  # the running jobs in line after the last job
            total_free = self._turns(line.take(through, through=True), state, placements,
                                     total_free)
        blocked = state.claimed_types() | set(state.reservations)
        # growth gives only GPUs of types no queued job claimed (`grow` returns nothing
        # otherwise); asked here first, it spares listing the running jobs for nothing
        if elastic and total_free > 0 and \
                any(n for t, n in index.free_by_type.items() if t not in blocked):
            cfg = self.config
            acted = {m.job_id for m in moves}
            if state.keep_place:
                acted |= {p.job_id for p in placements}  # migrated in the walk
            # (filtered only when some job acted: each `job_id` of a running job is a generic
            # read, about 0.5 M instructions a decision with 2,500 running jobs)
            runs = [r for r in running if r.job_id not in acted] if acted else running
            moves += grow(runs, index, blocked, now_s,
                          cfg.reshape_interval_s, cfg.min_gain_fraction, cfg.min_gain_s,
                          cfg.restart_floor_s, cfg.grow_cost_limit, cfg.max_moves - len(moves),
                          self.name, self._menus, cfg.launch_s, cfg.grow_per_gpu,
                          cfg.grow_cost_per_type)
        return moves + admitted + placements

    def _admit(self, ordered: list[_JobFacts], running: Sequence[RunningJob], index: FreeIndex,
               releases: _ReleaseProfile, now_s: float, displace: bool = True,
               share: dict[str, int] | None = None
               ) -> tuple[list[Placement], list[Placement]]:
        """Before the pass, admission by shrinking: a job at the head of the order whose best
        completion (start now, or wait for GPUs to free) is later than it would be on GPUs that
        running jobs can spare, takes them when its gain beats their loss. The loss is each
        victim's slowdown over the newcomer's run (it grows back when the GPUs free up) plus two
        restarts; the gain must exceed it by `min_gain_fraction` (prediction error). Victims
        step down their own options where the loss per GPU is smallest, so a wide job gives a
        few GPUs rather than falling to one, or move whole to idle GPUs of another type
        (`displace`), charged the same way when they keep a place in line to move back
        (`displaced_return`). On a type that a job ahead of it, and no longer, was left
        waiting for, only when it would end before that job's wait does (`admit_in_order`,
        `ahead`, `_bar_s`). An urgent deadline job may also preempt (`reclaim`). Options
        wider than the job's fair share of their type (`share`) are neither its baseline nor
        admitted. Returns (reshapes, placements of the admitted jobs)."""
        cfg = self.config
        displace = displace and cfg.displace
        returns = cfg.displaced_return_counted
        # Per type, (fastest time, wait s from now) of each head job left waiting for it, with
        # `admit_in_order`: what a job behind it and no shorter may not run past there
        ahead: dict[str, list[tuple[float, float]]] | None = {} if cfg.admit_in_order else None
        free = index.free_by_type
        moves: list[Placement] = []
        placed: list[Placement] = []
        acted: set[str] = set()
        candidates: Shrinkable | None = None
        # A restart, for a victim that has not measured its own (`elastic.touch_cost_s`) ...
        restart_s = cfg.restart_floor_s + cfg.launch_s(1)
        # ... and the least any victim is charged, when first needed (a pass over the running
        # jobs); what every plan's margin must cover at least is two of it, computed as each
        # bound below spells it, so that the floats are the same
        least_s = -1.0
        two_restarts_s = 0.0
        # The free GPUs, the GPUs that head jobs left waiting claim, and the release lists, by
        # type number (a row's `type_id`): read per option of every head job, where a dict
        # keyed by the type's name costs a string hash lookup each (a sixth of admission on the
        # whole trace's first 3,000 jobs). `free_of` is taken again after each admission
        # changes the index.
        type_ids = self._type_ids_of(index)
        names = list(type_ids)  # in number order
        free_of = [free.get(t, 0) for t in names]
        claimed_of = [0] * len(names)
        ends_of: list[list[float] | None] = [None] * len(names)
        victims: Victims | None = None
        candidates_by_type: Candidates = {}
        spare: dict[str, int] = {}
        spare_types: set[str] = set()  # the types of `spare` with GPUs left to give
        displaced_room: dict[str, int] | None = None  # the free GPUs the memo below is for
        displaced: dict = {}  # job id -> its displacement there (elastic.shrink_plan's memo)
        most: dict[str, list[int]] = {}
        # (head job left waiting, its baseline s, the type and wait s of that baseline)
        waiting: list[tuple[_JobFacts, float, str, float]] = []
        for facts in ordered[:16]:  # the head of the priority order
            if len(moves) >= cfg.max_moves:
                break
            job = facts.job
            if not facts.entries or now_s - job.submit_time_s < cfg.shrink_after_s:
                continue
            _, fastest_type, fastest_gpus, _, _, _ = facts.entries[0]
            if free.get(fastest_type, 0) >= fastest_gpus:
                continue  # the pass can start it on its fastest option
            if facts.key[0] == 0:  # urgent deadline job: shrink growth back, or preempt
                if candidates is None:
                    candidates = shrinkable(running, now_s, self._menus)
                targets = [(fastest_type, fastest_gpus)] + list(facts.need)
                # not a job an earlier deadline job of this decision already moved: one answer
                # acting twice on a job is refused by the simulator and the orchestrator
                pool = running if not acted else [r for r in running if r.job_id not in acted]
                for gpu_type, gpus in targets:
                    actions = reclaim(pool, index, gpu_type, gpus - free.get(gpu_type, 0),
                                      now_s, cfg.reshape_interval_s, True, self.name,
                                      f"{job.job_id} waited {now_s - job.submit_time_s:.0f} s",
                                      candidates)
                    if actions:
                        moves += actions
                        acted.update(a.job_id for a in actions)
                        free_of = [free.get(t, 0) for t in names]
                        break
                continue
            if victims is not None and not spare_types and self.shortcuts:
                # No running job can spare a GPU, and only an admission would give some back:
                # no plan from here on, so what a job would claim (`claimed_of`, read only by
                # later jobs' plans) changes nothing
                continue
            # Its best completion without shrinking: start now, or wait for releases after
            # the GPUs that the jobs ahead of it wait for (`claimed_of`).
            limit = _share_limit(share, facts)  # `_over_share` below: one comparison an entry
            # The entries as their rows (`_JobFacts.by_rank`): compiled, a row's fields are
            # read directly, where an entry tuple is unpacked and boxed again when kept
            by_rank = facts.by_rank
            baseline_s, baseline = INF, by_rank[0]
            fastest_id = baseline.type_id
            for i in facts.frontier:  # the entries no faster one of their type dominates
                row = by_rank[i]
                n, total_s = row.gpus, row.duration_s
                if total_s >= baseline_s:
                    break  # fastest first: no later entry can end earlier
                t = row.type_id
                if n > limit and t == fastest_id:  # `_over_share`
                    continue
                short = n + claimed_of[t] - free_of[t]
                if short > 0:  # releases.wait_s, inlined
                    per_gpu = ends_of[t]
                    if per_gpu is None:
                        per_gpu = ends_of[t] = releases.per_gpu(row.gpu_type)
                    wait_s = (per_gpu[short - 1] if short <= len(per_gpu) else INF) - now_s
                    end_s = total_s + (wait_s if wait_s > 0.0 else 0.0)
                else:
                    end_s = total_s
                if end_s < baseline_s:
                    baseline_s, baseline = end_s, row
            best: tuple[float, _Row, ShrinkPlan] | None = None
            best_s = 0.0  # best's net gain (0 while there is none): a plan must beat it
            if victims is not None and self.shortcuts and spare_types.isdisjoint(facts.ladders):
                # No type of the job has GPUs to spare: every entry below would stop at its
                # deficit (none, or more than the spare 0), so no plan; hold for the baseline
                _left_waiting(claimed_of, ahead, facts.best_s, baseline, baseline_s)
                continue
            room: dict[str, int] | None = None  # set when this job's first plan needs it
            room_set = not displace
            floors: dict[str, list[tuple[float, int]]] = {}  # type -> floor_items, this job
            for row in by_rank:  # fastest first
                gpus, total_s = row.gpus, row.duration_s
                if least_s < 0.0:
                    least_s = (self._kept_restarts.least_restart_s(running, restart_s)
                               if self.shortcuts else least_restart_s(running, restart_s))
                    two_restarts_s = (1.0 + cfg.min_gain_fraction) * 2 * least_s
                # Every plan costs at least two restarts: nothing slower can net more.
                if baseline_s - total_s - two_restarts_s <= best_s:
                    break
                if gpus > limit and row.type_id == fastest_id:  # `_over_share`
                    continue
                have = free_of[row.type_id]
                if gpus <= have:  # no deficit: the pass can start it now
                    continue
                gpu_type = row.gpu_type
                deficit = gpus - have
                if victims is None:  # built once, on the first option that needs it
                    candidates_by_type, spare, most = self._candidates(running, now_s, displace)
                    victims = {}  # each type's `Victims` entries, when a plan first needs them
                    spare_types = {t for t, n in spare.items() if n > 0}
                if deficit > spare.get(gpu_type, 0):
                    continue
                if ahead and gpu_type in ahead and \
                        total_s > _bar_s(ahead[gpu_type], facts.best_s):
                    continue  # it would hold GPUs a job ahead waits for (`admit_in_order`)
                # Each job the plan must touch costs two restarts (a displacement too, and
                # `most_freed` counts a displaceable job's whole allocation): when even that
                # many nets no more than the best so far, the plan cannot (margin: rounding)
                touched = bisect.bisect_left(most[gpu_type], deficit) + 1
                if baseline_s - total_s - (1.0 + cfg.min_gain_fraction) * \
                        (2 * least_s * touched * (1.0 - 1e-9)) <= best_s:
                    continue
                if gpu_type not in victims:
                    victims[gpu_type] = with_work_left(candidates_by_type[gpu_type], now_s,
                                                       restart_s)
                # A floor under the plan's loss (`shrink_loss_floor`): most plans cannot pay
                # even at that. First from the per-GPU costs derived for a faster option of
                # this type (a shorter horizon: still a floor), then from this option's own
                if not room_set:  # the GPUs a displaced victim may take
                    room, room_set = self._displace_room(free, claimed_of, type_ids), True
                    if room != displaced_room:  # displacements depend on it alone
                        displaced, displaced_room = {}, room
                items = floors.get(gpu_type)
                if items is not None and baseline_s - total_s - (1.0 + cfg.min_gain_fraction) * \
                        (fill_floor(items, deficit) * (1.0 - 1e-9)) <= best_s:
                    continue
                items = floors[gpu_type] = floor_items(victims, gpu_type, total_s, acted, room,
                                                       displaced, returns)
                if baseline_s - total_s - (1.0 + cfg.min_gain_fraction) * \
                        (fill_floor(items, deficit) * (1.0 - 1e-9)) <= best_s:
                    continue
                plan = shrink_plan(victims, gpu_type, deficit, total_s, acted, room, displaced,
                                   returns)
                if plan is None:
                    continue
                net_s = baseline_s - total_s - (1.0 + cfg.min_gain_fraction) * plan[0]
                if net_s > 0 and (best is None or net_s > best[0]):
                    best, best_s = (net_s, row, plan), net_s
            if best is None:
                wait_s = _left_waiting(claimed_of, ahead, facts.best_s, baseline, baseline_s)
                waiting.append((facts, baseline_s, baseline.gpu_type, wait_s))
                continue
            net_s, chosen_row, (loss_s, chosen) = best
            option, gpu_type, gpus, total_s, tp = (chosen_row.option, chosen_row.gpu_type,
                                                   chosen_row.gpus, chosen_row.duration_s,
                                                   chosen_row.tp)
            reason = (f"{job.job_id}: {baseline_s:.0f} s to completion -> {total_s:.0f} s, "
                      f"at a cost of {loss_s:.0f} s to {len(chosen)} running jobs")
            shrinks = apply_shrinks(chosen, index, self.name, reason, now_s)
            if shrinks is None:
                continue
            assignments = index.best_fit(gpu_type, gpus, tp)
            if assignments is None:
                undo_shrinks(chosen, shrinks, index)
                continue
            index.take(assignments)
            free_of = [free.get(t, 0) for t in names]
            moves += shrinks
            acted.update(a.job_id for a in shrinks)
            for shrunk_run, narrower in chosen:  # what they can still give is less now
                spare[gpu_type] -= shrunk_run.num_gpus - (
                    narrower.num_gpus if narrower.gpu_type == gpu_type else 0)
            spare_types = {t for t, n in spare.items() if n > 0}
            placed.append(Placement(job.job_id, option, assignments, decision=Decision(
                self.name, f"admitted by shrinking running jobs: {reason}",
                (Alternative(option, 0.0, total_s, "chosen"),
                 Alternative(baseline.option, baseline_s - baseline.duration_s, baseline_s,
                             "best without shrinking (start now, or wait for releases)")))))
        if cfg.admit_together and len(waiting) >= 2 and len(moves) < cfg.max_moves:
            if victims is None:
                candidates_by_type, spare, most = self._candidates(running, now_s, displace)
                victims = {}
            room = self._displace_room(free, claimed_of, type_ids) if displace else None
            placed += self._admit_together(waiting, victims, candidates_by_type, spare, index,
                                           now_s, share, acted, room, moves)
        return moves, placed

    def _admit_together(self, waiting: list[tuple[_JobFacts, float, str, float]],
                        victims: Victims, candidates_by_type: Candidates,
                        spare: dict[str, int], index: FreeIndex, now_s: float,
                        share: dict[str, int] | None, acted: set[str],
                        room: dict[str, int] | None, moves: list[Placement]
                        ) -> list[Placement]:
        """Admission by shrinking for several waiting head jobs at once, on one GPU type.

        `_admit` weighs each newcomer alone against its victims' loss, which always includes
        two restarts (the shrink and the growth back): a job whose wait is shorter than that
        is never admitted, however many such jobs wait. In a burst of short jobs on a cluster
        that long jobs fill, that is every job of the burst, so they queue for minutes each,
        while Sia's round narrows the long jobs for all of them at once (the trace's first
        2,000 jobs: docs/has.md, "Where `has` loses"). Here the head jobs `_admit` left
        waiting, in the order's sequence, each on its option of the type that saves the most
        per GPU over its baseline (`_saving_per_gpu`), are added one at a time; each group of
        two or more is a candidate whose gain is the sum of its jobs' savings and whose loss
        is one `shrink_plan` for their combined deficit, under the same margin as a single
        admission (`min_gain_fraction`). The best net gain over types and groups is applied;
        a job of it that does not fit after the shrinks stays queued. A job left out of a
        group while it waits for the type bars the jobs behind it, and no shorter, that would
        run past its wait, as in `_admit` (`admit_in_order`). `victims`, `spare` and
        `acted` are `_admit`'s, after its own admissions. Appends the shrinks to `moves`;
        returns the placements."""
        cfg = self.config
        factor = 1.0 + cfg.min_gain_fraction
        restart_s = cfg.restart_floor_s + cfg.launch_s(1)
        returns = cfg.displaced_return_counted
        in_order = cfg.admit_in_order
        free = index.free_by_type
        displaced: dict = {}  # shrink_plan's memo of displacements, for this `room`
        best: tuple[float, list[tuple[_JobFacts, _Row]], ShrinkPlan] | None = None
        for gpu_type, can_spare in spare.items():
            if can_spare <= 0:
                continue
            have = free.get(gpu_type, 0)
            together: list[tuple[_JobFacts, _Row]] = []
            gpus, gain_s, horizon_s = 0, 0.0, 0.0
            items: list[tuple[float, int]] | None = None
            left_out: list[tuple[float, float]] = []  # `_admit`'s `ahead`, for this group
            for facts, baseline_s, waits_on, wait_s in waiting:
                saving = _saving_per_gpu(facts, baseline_s, share, gpu_type)
                if left_out and saving is not None and \
                        saving[1].duration_s > _bar_s(left_out, facts.best_s):
                    saving = None  # it would run past the wait of a job ahead of it
                if saving is None or gpus + saving[1].gpus - have > can_spare:
                    if in_order and waits_on == gpu_type:
                        left_out.append((facts.best_s, wait_s))
                    continue
                row = saving[1]
                together.append((facts, row))
                gpus += row.gpus
                gain_s += saving[0] * row.gpus
                horizon_s = max(horizon_s, row.duration_s)
                deficit = gpus - have
                if len(together) < 2 or deficit <= 0:
                    continue
                if gpu_type not in victims:
                    victims[gpu_type] = with_work_left(candidates_by_type[gpu_type], now_s,
                                                       restart_s)
                if items is None:  # a floor under every plan's loss (a shorter horizon)
                    items = floor_items(victims, gpu_type, row.duration_s, acted, room,
                                        displaced, returns)
                if gain_s - factor * fill_floor(items, deficit) * (1.0 - 1e-9) <= \
                        (best[0] if best is not None else 0.0):
                    continue
                plan = shrink_plan(victims, gpu_type, deficit, horizon_s, acted, room,
                                   displaced, returns)
                if plan is None:
                    break  # a larger deficit cannot be freed either
                net_s = gain_s - factor * plan[0]
                if net_s > 0 and (best is None or net_s > best[0]):
                    best = (net_s, list(together), plan)
        if best is None:
            return []
        _, together, (loss_s, chosen) = best
        gpu_type = together[0][1].gpu_type
        reason = (f"{len(together)} waiting jobs admitted together on {gpu_type}, at a cost of "
                  f"{loss_s:.0f} s to {len(chosen)} running jobs")
        shrinks = apply_shrinks(chosen, index, self.name, reason, now_s)
        if shrinks is None:
            return []
        placed = []
        for facts, row in together:
            assignments = index.best_fit(gpu_type, row.gpus, row.tp)
            if assignments is None:
                continue
            index.take(assignments)
            placed.append(Placement(facts.job.job_id, row.option, assignments, decision=Decision(
                self.name, f"admitted by shrinking running jobs: {reason}",
                (Alternative(row.option, 0.0, row.duration_s, "chosen"),))))
        if not placed:
            undo_shrinks(chosen, shrinks, index)
            return []
        moves += shrinks
        acted.update(a.job_id for a in shrinks)
        return placed

    def _candidates(self, running: Sequence[RunningJob], now_s: float, displace: bool
                    ) -> tuple[Candidates, dict[str, int], dict[str, list[int]]]:
        """`victim_candidates`, `spare_gpus` (a copy: admission spends it) and `most_freed`,
        kept across decisions by the running jobs that started and ended
        (`elastic.KeptCandidates`); from scratch without shortcuts."""
        # No job moved less than reshape_interval_s ago is a victim: live, the scheduler's veto
        # (reshapable.reshape_veto, the orchestrator's interval) refuses to reshape it
        interval_s = self.config.reshape_interval_s
        if not self.shortcuts:
            candidates = victim_candidates(running, now_s, self._menus, displace, interval_s)
            return candidates, spare_gpus(candidates), most_freed(candidates)
        candidates, spare, most = self._kept_candidates.of(running, now_s, self._menus,
                                                           displace, interval_s)
        return candidates, dict(spare), most

    @staticmethod
    def _displace_room(free: dict[str, int], claimed_of: list[int], type_ids: dict[str, int]
                       ) -> dict[str, int]:
        """GPUs a displaced job may take, per type: free now, less what the jobs ahead in the
        admission order wait for there (`claimed_of`, by type number)."""
        return {t: n - claimed_of[type_ids[t]] for t, n in free.items()
                if n > claimed_of[type_ids[t]]}

    # -- sort ------------------------------------------------------------------------------

    def _derive_facts(self, job: QueuedJob, index: FreeIndex,
                      work_left: float = 1.0) -> _JobFacts | None:
        """Rank the job's options and derive what the pass needs from them (cache miss), for
        the share `work_left` of the work their durations are for (a running job in line)."""
        node_size = index.node_size
        # A start costs its launch (more nodes, longer): time to completion is launch + run,
        # and the GPUs are held for both. This is what keeps a 10-minute job off 64 GPUs.
        # (time to completion, GPUs, type, position in the job's options: a stable sort's
        # tie-break and the entry's name for its option, option)
        keyed = []
        for position, o in enumerate(job.options):
            gpus, gpu_type = o.num_gpus, o.gpu_type
            if gpu_type not in node_size:
                continue
            launch_s = self._launch_for(gpu_type, gpus, node_size)
            keyed.append((launch_s + o.duration_s * work_left, gpus, gpu_type, position, o))
        if not keyed:
            return None
        keyed.sort()
        capacity = index.capacity
        entries = tuple([(position, gpu_type, gpus, total_s, total_s * gpus, o.plan.tp)
                         for total_s, gpus, gpu_type, position, o in keyed
                         if gpus <= capacity.get(gpu_type, 0)])
        frontier: list[int] = []
        by_type: dict[str, list[int]] = {}  # per type, its frontier's entries so far (indices)
        for i, entry in enumerate(entries):  # fastest first
            kept = by_type.get(entry[1])
            if kept is None:
                by_type[entry[1]] = [i]
                frontier.append(i)
            elif entry[2] < entries[kept[-1]][2]:
                kept.append(i)
                frontier.append(i)
        need = tuple(sorted([(gpu_type, entries[kept[-1]][2])
                             for gpu_type, kept in by_type.items()],
                            key=lambda item: (item[1], item[0])))
        best_s = keyed[0][0]
        facts = _JobFacts(
            job.options, job.submit_time_s, entries, need,
            self._need_ids.setdefault(need, len(self._need_ids)), tuple(frontier),
            {gpu_type: tuple([(entries[i][2], entries[i][3]) for i in by_type[gpu_type]])
             for gpu_type, _ in need},
            {gpu_type: tuple(by_type[gpu_type]) for gpu_type, _ in need},
            entries[0][1] if entries else "",
            entries[by_type[entries[0][1]][-1]][2] if entries else 0,
            best_s,
            min([total_s * gpus for total_s, gpus, _, _, _ in keyed]),
            min([gpus for _, gpus, _, _, _ in keyed]),
            (1, best_s + self.config.aging_rate * job.submit_time_s, job.submit_time_s, job.job_id),
            self._type_ids_of(index), job)
        # Scored now at the saturated queue's exponent: a walk reaches a job deep in the queue
        # only when the queue is long, which is when its pressure is saturated. So the first
        # walk that goes that deep does not score hundreds of jobs at once (the decision-time
        # tail); a job near the head, reached at any pressure, is scored again if it differs
        facts.scored(self._saturated_exponent)
        self._facts[job.job_id] = facts
        return facts

    def _type_ids_of(self, index: FreeIndex) -> dict[str, int]:
        """`_type_ids(index)`, kept while the cluster's types are the same (one dict shared
        by the facts derived for them)."""
        if self._type_ids.keys() != index.capacity.keys():
            self._type_ids = _type_ids(index)
        return self._type_ids

    def _launch_for(self, gpu_type: str, gpus: int, node_size: dict[str, int]) -> float:
        """`HasConfig.launch_s` for `gpus` GPUs of a type on its nodes, kept by the nodes
        spanned (asked for every option derived)."""
        nodes = -(-gpus // node_size[gpu_type])
        launch_s = self._launch_s.get(nodes)
        if launch_s is None:
            launch_s = self._launch_s[nodes] = self.config.launch_s(nodes)
        return launch_s

    def _sort(self, queue: Sequence[QueuedJob], index: FreeIndex,
              now_s: float) -> tuple[list[_JobFacts], int, dict[str, int]]:
        """Urgent deadline jobs by slack, then shortest aged duration, then arrival; also the
        queue's GPU demand (sum of each job's fewest GPUs) for the pressure, and its jobs by
        the type of their fastest option, for the fair shares.

        The aged key `best - aging x (now - submit)` orders jobs like `best + aging x submit`,
        which does not depend on now, so it is cached with the job's facts; only deadline
        jobs' keys change with now. So the last decision's order stays sorted, and
        `_sort_incremental` only removes the jobs that left and inserts the ones that came."""
        if index.capacity != self._capacity:  # nodes came or went: re-derive every job's facts
            self._facts.clear()
            self._places.clear()
            self._running_ids = None  # the places are for the old shape: look every job up
            self._capacity = dict(index.capacity)
            self._queue_diff.reset()
        elif len(self._facts) > 4 * len(queue) + 1000:
            self._facts.clear()
            self._queue_diff.reset()
        if self.shortcuts:
            done = self._sort_incremental(queue, index, now_s)
            if done is not None:
                return done
        self._queue_diff.reset()  # the next incremental sort starts from scratch
        self._decision += 1
        decision = self._decision
        order: list[_JobFacts] = []
        demand = 0
        wanting: dict[str, int] = {}
        for job in queue:
            facts = self._cached_facts(job, index)
            if facts is None or facts.decision == decision:  # no usable option, or a duplicate
                continue
            demand += facts.min_gpus
            if facts.entries:
                fastest_type = facts.wanted
                wanting[fastest_type] = wanting.get(fastest_type, 0) + 1
            facts.job, facts.key, facts.decision = job, self._key(facts, job, now_s), decision
            order.append(facts)
        order.sort(key=_KEY)
        return order, demand, wanting

    def _cached_facts(self, job: QueuedJob, index: FreeIndex) -> _JobFacts | None:
        facts = self._facts.get(job.job_id)
        if facts is None or facts.options is not job.options or \
                facts.submit_s != job.submit_time_s:
            facts = self._derive_facts(job, index)
        return facts

    def _key(self, facts: _JobFacts, job: QueuedJob, now_s: float) -> tuple[int, float, float, str]:
        if job.deadline_s > 0:
            slack = job.deadline_s - now_s - facts.best_s
            if slack < self.config.deadline_urgency * facts.best_s:
                return (0, slack, job.submit_time_s, job.job_id)
        return facts.sjf_key

    def _sort_incremental(self, queue: Sequence[QueuedJob], index: FreeIndex,
                          now_s: float) -> tuple[list[_JobFacts], int, dict[str, int]] | None:
        """`_sort`'s answer from the last one and what changed (`IdentityDiff`): O(changes +
        deadline jobs), plus C-speed set operations over the queue. None when the queue holds
        a job twice (the straightforward sort decides which copy counts)."""
        fresh = not self._queue_diff.items  # the first call, or the last sort was not this one
        diff = self._queue_diff.update(queue)
        if diff is None:
            self._queue_diff.reset()
            return None
        arrived, departed = diff
        if fresh:
            self._order, self._queued, self._queued_ids, self._deadlines = [], {}, {}, {}
            self._demand = 0
            self._wanting = {}
        queued, ids, deadlines, wanting = (self._queued, self._queued_ids, self._deadlines,
                                           self._wanting)
        order = self._order
        if departed:
            for job in departed:
                facts = queued.pop(id(job))
                del ids[job.job_id]
                if facts is not None:
                    self._demand -= facts.min_gpus
                    if facts.entries:
                        wanting[facts.wanted] -= 1
                    facts.decision = -1  # marks it for removal below
                    deadlines.pop(id(job), None)
            order = [f for f in order if f.decision != -1]
        new: list[_JobFacts] = []
        for job in arrived:
            if job.job_id in ids:
                self._queue_diff.reset()
                return None
            ids[job.job_id] = id(job)
            facts = queued[id(job)] = self._cached_facts(job, index)
            if facts is None:
                continue
            self._demand += facts.min_gpus
            if facts.entries:
                fastest_type = facts.wanted
                wanting[fastest_type] = wanting.get(fastest_type, 0) + 1
            facts.job, facts.key, facts.decision = job, facts.sjf_key, 0
            if job.deadline_s > 0:
                deadlines[id(job)] = facts
            new.append(facts)
        rekeyed = False
        for facts in deadlines.values():
            key = self._key(facts, facts.job, now_s)
            if key != facts.key:
                facts.key = key
                rekeyed = True
        if rekeyed or len(new) > 8:
            order += new
            order.sort(key=_KEY)
        else:
            for facts in new:
                bisect.insort(order, facts, key=_KEY)
        self._order = order
        return order, self._demand, wanting

    # -- filter ----------------------------------------------------------------------------

    @staticmethod
    def _filter(facts: _JobFacts, state: _Pass) -> bool:
        """Does some option have enough free GPUs of its type (ignoring node shape)?

        Jobs with the same per-type minimum counts get the same answer until the next bind,
        so the answer is memoised by `need_id`: most of a long queue costs one dict lookup."""
        fits = state.fits.get(facts.need_id)
        if fits is None:
            free = state.index.free_by_type
            fits = any(free.get(gpu_type, 0) >= gpus for gpu_type, gpus in facts.need)
            state.fits[facts.need_id] = fits
        return fits

    # -- score -----------------------------------------------------------------------------

    @staticmethod
    def _score(facts: _JobFacts, state: _Pass) -> tuple[_Row | None, Assignments | None]:
        """(option, nodes) to start now, (option, None) to hold for, or (None, None): nothing
        fits. The option as its row (`_JobFacts.rows`): compiled, its callers read the GPU type
        and count from a row directly, where each read of a `PlanOption` field is a generic
        attribute lookup (about 4 % of a batch call at 10,000 GPUs x 5,000 queued); and the
        pair is never None, so compiled it is returned as two values, not a tuple object.

        Options are visited cheapest first (cost = duration x GPU-seconds penalty). The first
        one that can start now wins unless holding for a cheaper one (wait + cost) is
        strictly better; everything after it costs more, so the scan stops there. Holding
        candidates tie-break by rank (fastest first).

        A `dominated` option is only checked for a start now: an option of its type with no
        more GPUs was visited before it (no higher cost, and a lower rank on a tie), and the
        wait is non-decreasing in GPUs within one call, so its (wait + cost, rank) is never
        below that option's, which either ended the scan or is a candidate already; except
        when every candidate so far waits forever: then all values are infinite and the
        lowest rank wins the tie, which a dominated option can have, so it is scored. Most
        options of a long queue's jobs are dominated (wider, less GPU-efficient ones).

        So when no dominated option can start now in this pass (each has more GPUs than any
        type has free at the pass's start: free GPUs only shrink), a dominated option can
        change the answer only while every candidate waits forever, and then only the
        infinite hold's rank: the scan visits the other options alone (`open_rows`). When
        their best hold waits forever, so does every option's (a dominated one has an
        undominated one of its type with no more GPUs, which waits forever, before it), the
        scan over all of them would never stop early (no cost exceeds an infinite value) and
        no option would start, so its hold is the lowest rank of all: the fastest option."""
        if facts.exponent != state.exponent:
            facts.scored(state.exponent)
        if not state.prune_holds:
            row, assignments, _ = HasPolicy._scan(tuple([
                _Row(row.cost, row.rank, row.option, row.gpu_type, row.type_id, row.gpus,
                     row.duration_s, row.tp, False) for row in facts.rows]), facts, state)
            return row, assignments
        if facts.dominated_min_gpus > state.most_free:
            row, assignments, hold_value = HasPolicy._scan(facts.open_rows, facts, state)
            if row is None or hold_value < INF or assignments is not None:
                return row, assignments  # no option, a finite hold, or a start now
            return HasPolicy._fastest_hold(facts, state), None  # every hold waits forever
        row, assignments, _ = HasPolicy._scan(facts.rows, facts, state)
        return row, assignments

    @staticmethod
    def _fastest_hold(facts: _JobFacts, state: _Pass) -> _Row | None:
        """When no option starts now and every hold waits forever, the scan's answer: values
        all tie at inf, so the lowest rank wins, the fastest option within the job's share;
        None when the share leaves none."""
        share = state.share
        for rank, (_, gpu_type, gpus, _, _, _) in enumerate(facts.entries):
            if not _over_share(share, facts, gpu_type, gpus):
                for row in facts.rows:  # its row (rare: a job whose every hold waits forever)
                    if row.rank == rank:
                        return row
        return None

    @staticmethod
    def _scan(rows: tuple[_Row, ...],
              facts: _JobFacts, state: _Pass
              ) -> tuple[_Row | None, Assignments | None, float]:
        """`_score`'s scan over `rows` (cost order): its answer, and the best hold's value (inf
        when it waits forever; not meaningful when an option starts now)."""
        entries = facts.entries
        index = state.index
        views = state.views
        releases = state.releases
        now_s = state.now_s
        hold: _Row | None = None  # the best option to wait for: (hold_value, hold_rank)
        hold_value, hold_rank, hold_wait_s = INF, 0, 0.0
        start_now, move_s, keep_place = state.start_now, state.move_s, state.keep_place
        prune = state.prune_holds
        # Options over the share are skipped (`_over_share`): a narrower option of the type comes
        # before any that one dominates, so the skipped never hide what the pruning relies on
        wanted = facts.wanted  # the type of its fastest option, the only one capped
        limit = _share_limit(state.share, facts)
        # state.expected_wait_s and backfill_allowed, inlined: hot loop
        for row in rows:
            gpus = row.gpus  # (its type's name read only where needed: a reference held)
            if gpus > limit and row.gpu_type == wanted:
                continue  # wider than its fair share (`_over_share`, one comparison a row)
            cost = row.cost
            if cost > hold_value and (not start_now or hold_wait_s <= move_s):
                break  # nothing left can beat holding (elastic: a wait shorter than a move)
            view = views[row.type_id]
            have = view.free
            dominated = row.dominated
            if have < gpus and dominated and hold_value < INF:
                continue  # cannot start now, and its hold never wins
            reservation = view.reservation
            duration_s = row.duration_s
            if have >= gpus and (reservation is None or now_s + duration_s <= reservation.shadow_s
                                 or gpus <= reservation.spare_gpus):
                # A slower start beyond the plain rule is a bet on a later move; not when jobs
                # ahead already wait for the faster type (they get its GPUs first)
                if cost > hold_value and (
                        not _stopgap_pays(duration_s, entries[hold_rank][3], hold_wait_s, move_s)
                        if keep_place else
                        (state.types[entries[hold_rank][1]].claimed or
                         not _worth_starting_now(duration_s, entries[hold_rank][3],
                                                 hold_wait_s, move_s))):
                    break  # slower still from here on: hold
                assignments = index.best_fit(row.gpu_type, gpus, row.tp)
                if assignments is not None:
                    return row, assignments, INF
            if dominated and hold_value < INF:
                continue
            short = gpus + view.claimed - have
            if short < 1:
                short = 1
            per_gpu = view.per_gpu
            if per_gpu is None:
                per_gpu = view.per_gpu = releases.per_gpu(row.gpu_type)
            # `_Pass.wait_on`, inlined: a call per option costs 3 % of a decision
            wait_s = (per_gpu[short - 1] if short <= len(per_gpu) else INF) - now_s
            if not wait_s > 0.0:
                wait_s = 0.0
            if reservation is not None and reservation.shadow_s - now_s > wait_s:
                wait_s = reservation.shadow_s - now_s
            # The first hold waits forever, and so would every other, with none starting
            if hold is None and wait_s == INF and prune and state.waits_forever(facts):
                return HasPolicy._fastest_hold(facts, state), None, INF
            value = wait_s + cost
            rank = row.rank
            if hold is None or value < hold_value or (value == hold_value and rank < hold_rank):
                hold, hold_value, hold_rank, hold_wait_s = row, value, rank, wait_s
        return hold, None, hold_value

    # -- running jobs in line for faster GPUs (`HasConfig.keep_place`) ----------------------

    def _in_line(self, running: Sequence[RunningJob], index: FreeIndex, now_s: float,
                 acted: set[str]) -> _Line | None:
        """The running jobs that keep a place in line for faster types, keyed as a job with
        the work they have left that arrived now, on their options on the other types (the
        work left as of the latest refresh: taken again after 5 % more progress,
        `_IN_LINE_REFRESH`). No aging credit: a running job is not starving, and under
        sustained load the queued jobs that are go first (with its waiting time counted, the
        running jobs took the fast GPUs from the queue: the first 15,000 trace jobs waited
        twice as long, docs/has-experiments.md, s16).

        Per decision a job costs a lookup (`_place_of`, kept per job object; most running jobs
        can never move up) and, if some option of it fits the GPUs free now, its key from its
        timings (a few floats per option). Whether it could move, and its facts for the walk,
        are derived only when the walk reaches it (`_line_facts`)."""
        may_move = self._may_move_up(running, index, now_s)
        free = index.free_by_type
        most_free = max(free.values(), default=0)
        aging_now = self.config.aging_rate * now_s
        interval_s = self.config.reshape_interval_s
        out = []
        for place in may_move:
            run = place.run
            if place.min_gpus <= most_free and now_s >= place.refresh_s:
                left = remaining_fraction(run, now_s)
                if left < _IN_LINE_REFRESH * place.left:
                    self._refresh(place, left)
                    if not place.timings:  # it can no longer gain enough from a move
                        self._may_move.pop(id(run), None)
                        continue
            if place.min_gpus > most_free or run.job_id in acted or \
                    not movable(run, now_s, interval_s):
                continue
            out.append(((1, place.best_s + aging_now, now_s, run.job_id), place))
        if not out:
            return None
        at_start = dict(free)  # the GPUs free at the pass's start
        return _Line(out, lambda key, place: self._line_facts(key, place, at_start, most_free,
                                                              index, now_s))

    def _may_move_up(self, running: Sequence[RunningJob], index: FreeIndex, now_s: float
                     ) -> list[_Place]:
        """The places of the running jobs that may ever move up (`_Place.timings`). A place is
        kept per job object (`_place_of`); with shortcuts, so is the set of those that may
        move, by the running jobs' deltas (`IdentityDiff`): most running jobs never can, and
        looking each one up had cost a dict lookup per running job per decision (about 10 %
        of a decision at 10,000 GPUs x 5,000 queued). The order differs from `running`'s,
        which does not matter: `_Line` sorts them by key, and keys end with the job id,
        unique among running jobs; a job object twice in `running` is looked up every time."""
        cache = self._places
        tracked = self._running_ids
        diff = self._running_diff.update(running) if self.shortcuts else None
        if diff is not None and tracked is not None:
            arrived, departed = diff
            may_move = self._may_move
            for run in departed:
                tracked.discard(id(run))
                may_move.pop(id(run), None)
                cache.pop(id(run), None)
            if not any(id(run) in tracked for run in arrived):
                for run in arrived:
                    tracked.add(id(run))
                    place = self._kept_place(run, index, now_s)
                    if place.timings:
                        may_move[id(run)] = place
                return list(may_move.values())
        # Every running job looked up
        if len(cache) > 4 * len(running) + 1000:
            live = {id(r): r for r in running}
            self._places = {k: e for k, e in cache.items() if live.get(k) is e.run}
        places = [self._kept_place(run, index, now_s) for run in running]
        ids = set(map(id, running))
        self._running_ids = ids if self.shortcuts and len(ids) == len(running) else None
        self._may_move = {id(place.run): place for place in places if place.timings}
        return [place for place in places if place.timings]

    def _kept_place(self, run: RunningJob, index: FreeIndex, now_s: float) -> _Place:
        """The job's place (`_place_of`), kept per job object."""
        place = self._places.get(id(run))
        if place is None or place.run is not run:
            place = self._places[id(run)] = self._place_of(run, index, now_s)
        return place

    def _place_of(self, run: RunningJob, index: FreeIndex, now_s: float) -> _Place:
        """A running job's timings and probe, on its options on the other types; none unless
        it runs on a slower type than its fastest option's (and has no deadline: deadline jobs
        are growth's and `reclaim`'s) and a move could clear the gain thresholds."""
        own_type = run.option.gpu_type
        if run.deadline_s or not run.options or \
                min(run.options, key=_DURATION).gpu_type == own_type:
            return _Place.out_of_line(run)
        node_size, capacity = index.node_size, index.capacity
        timings, probe = [], []
        min_gpus = 0
        for option in run.options:
            gpu_type, gpus = option.gpu_type, option.num_gpus
            if gpu_type == own_type or gpu_type not in node_size:
                continue
            launch_s = self._launch_for(gpu_type, gpus, node_size)
            timings.append((launch_s, option.duration_s))
            min_gpus = gpus if not min_gpus or gpus < min_gpus else min_gpus
            if gpus <= capacity.get(gpu_type, 0):
                probe.append((launch_s, option.duration_s, gpus, gpu_type))
        if not timings:
            return _Place.out_of_line(run)
        probe.sort(key=_PROBE_GPUS)  # stable: ties keep the options' order
        place = _Place(run, tuple(timings), min_gpus, tuple(probe), full_duration_s(run),
                       self._menus.of(run.options).fastest_s, 1.0, 0.0, INF)
        self._refresh(place, remaining_fraction(run, now_s))
        return place

    def _refresh(self, place: _Place, left: float) -> None:
        """Take the work left again; a job that cannot gain enough from a move now never will
        (the gain shrinks faster than its threshold as work is done): out of line."""
        cfg = self.config
        current_s = left * place.full_s
        if current_s - left * place.fastest_s - cfg.restart_floor_s < \
                gain_floor_s(current_s, cfg.min_gain_fraction, cfg.min_gain_s):
            place.timings, place.probe, place.facts = (), (), None
        else:
            place.left, place.facts = left, None
            place.best_s = min([launch_s + duration_s * left
                                for launch_s, duration_s in place.timings])
            refresh_s = when_left_s(place.run, _IN_LINE_REFRESH * left * (1.0 + 1e-9))
            place.refresh_s = refresh_s - rounding_margin_s(refresh_s)

    def _line_facts(self, key: tuple[int, float, float, str], place: _Place,
                    free: dict[str, int], most_free: int, index: FreeIndex, now_s: float
                    ) -> _JobFacts | None:
        """A running job's facts for the walk, keyed `key`, if its fastest option that fits
        the GPUs `free` at the pass's start (at most `most_free` of a type) clears the gain
        thresholds (else None: free GPUs only shrink in a pass, so no option can). Derived as
        a queued job's with the work it has left (`_Place.left`), when first asked for after
        a refresh."""
        run, left = place.run, place.left
        # The fastest by (time to completion, GPUs, type, run time), as a tuple compares
        # them; four values, with a tuple only on a tie of the first (compiled, a tuple per
        # option and their comparison were a sixth of this call on the whole trace's first
        # 6,000 jobs)
        found = False
        best_total_s, best_gpus, best_type, best_run_s = INF, 0, "", 0.0
        for launch_s, duration_s, gpus, gpu_type in place.probe:  # fewest GPUs first
            if gpus > most_free:
                break  # neither this option nor any after it fits
            if free.get(gpu_type, 0) >= gpus:
                run_s = duration_s * left
                total_s = launch_s + run_s
                if not found or total_s < best_total_s or total_s == best_total_s and \
                        (gpus, gpu_type, run_s) < (best_gpus, best_type, best_run_s):
                    found = True
                    best_total_s, best_gpus, best_type, best_run_s = total_s, gpus, gpu_type, run_s
        if not found or \
                self._move_gain_s(run, best_type, best_gpus, best_run_s, index, now_s) is None:
            return None
        facts = place.facts
        if facts is None:
            facts = place.facts = self._in_line_facts_of(run, left, index)
            if facts is None:
                return None
        facts.key = key
        return facts

    def _turns(self, due: list[_JobFacts], state: _Pass, placements: list[Placement],
               total_free: int) -> int:
        """The turns of the running jobs in line in `due` (`_turn`), until no GPU is free;
        returns the GPUs still free."""
        for facts in due:
            assert facts.running is not None
            move = self._turn(facts, facts.running, state)
            if move is not None:
                placements.append(move)
                total_free -= move.option.num_gpus
                if total_free <= 0:
                    break
        return total_free

    def _move_gain_s(self, run: RunningJob, gpu_type: str, gpus: int, duration_s: float,
                     index: FreeIndex, now_s: float) -> tuple[float, float, float] | None:
        """(time left now, time left after the move, its restart) for moving a running job to
        `gpus` GPUs of `gpu_type` where its work left takes `duration_s`, or None when the
        saving is under the gain floor: growth's estimate and thresholds
        (`elastic.move_restart_s`, `elastic.gain_floor_s`)."""
        cfg = self.config
        current_s = remaining_fraction(run, now_s) * full_duration_s(run)
        restart_s = move_restart_s(run, cfg.restart_floor_s,
                                   self._launch_for(gpu_type, gpus, index.node_size), now_s)
        new_s = restart_s + duration_s
        if current_s - new_s < gain_floor_s(current_s, cfg.min_gain_fraction, cfg.min_gain_s):
            return None
        return current_s, new_s, restart_s

    def _in_line_facts_of(self, run: RunningJob, left: float, index: FreeIndex
                          ) -> _JobFacts | None:
        """A running job's facts as if it were queued with the work it has `left`, over its
        options on other types (None: none the cluster can host). The options are its own,
        full-work ones; their times are derived for the work left."""
        own_type = run.option.gpu_type
        job = QueuedJob(run.job_id, run.submit_time_s,
                        tuple([option for option in run.options if option.gpu_type != own_type]))
        facts = self._derive_facts(job, index, left)
        self._facts.pop(run.job_id, None)  # not a queued job's: kept here, by the run
        if facts is not None:
            facts.running = (run, left)
        return facts

    def _turn(self, facts: _JobFacts, running: tuple[RunningJob, float],
              state: _Pass) -> Placement | None:
        """A running job's turn in the walk: scored as a queued job is. It migrates when it
        can start now on another type and the move clears growth's gain thresholds; when it
        holds, its claim keeps the later jobs of the walk off those GPUs, as a queued job's."""
        run, left = running
        if not self._filter(facts, state):
            return None
        row, assignments = self._score(facts, state)
        if row is None:
            return None
        option = row.option
        if assignments is None:
            state.claim(row.gpu_type, row.gpus)
            return None
        gain = self._move_gain_s(run, option.gpu_type, option.num_gpus,
                                 option.duration_s * left, state.index, state.now_s)
        if gain is None:
            return None
        current_s, new_s, restart_s = gain
        state.index.take(assignments)  # its own GPUs free up at the next decision
        state.fits.clear()
        state.changed(option.gpu_type)
        return Placement(run.job_id, option, assignments, MIGRATE, Decision(
            self.name, f"migrate: its turn for faster GPUs, predicted {current_s:.0f} s left -> "
                       f"{new_s:.0f} s with the restart ({restart_s:.0f} s)",
            (Alternative(option, restart_s, new_s, "chosen"),
             Alternative(run.option, 0.0, current_s, "current: slower"))))

    # -- reserve / bind --------------------------------------------------------------------

    def _bind(self, job: QueuedJob, facts: _JobFacts, row: _Row,
              assignments: Assignments, state: _Pass) -> Placement:
        """Take the GPUs in the pass's index; a start that runs past a reservation's shadow
        time uses up that reservation's spare GPUs."""
        decision = self._record(facts, row, state)
        option, gpu_type = row.option, row.gpu_type
        state.index.take(assignments)
        state.fits.clear()
        state.changed(gpu_type)
        reservation = state.reservations.get(gpu_type)
        if reservation is not None and state.now_s + option.duration_s > reservation.shadow_s:
            reservation.spare_gpus -= row.gpus
        return Placement(job.job_id, option, assignments, PLACE, decision)  # positional: faster

    def _record(self, facts: _JobFacts, chosen: _Row, state: _Pass) -> Decision:
        """The record of a placement: the chosen option and the next cheapest (by HAS's score),
        each with its estimated start and completion, launch included, as HAS scores them
        (a row's `duration_s`). Drafted (`Decision`): here only what the rest of the pass
        changes is captured, each row's estimated start; `_alternatives` builds the rows when
        the record is read."""
        if facts.exponent != state.exponent:
            facts.scored(state.exponent)
        views = state.views
        rows = facts.rows  # cheapest first; the record shows the first _RECORD_ROWS
        starts = []
        for i in range(min(_RECORD_ROWS, len(rows))):  # (no slice: one object fewer a record)
            row = rows[i]
            view = views[row.type_id]
            starts.append(0.0 if view.free >= row.gpus else
                          state.wait_on(view, row.gpu_type, row.gpus))
        share = state.share
        fastest_type = facts.wanted
        limit = _share_limit(share, facts)
        share_gpus = share.get(fastest_type, 0) if share is not None else 0
        if state.reason is None:  # the same for every placement of the pass
            state.reason = ("earliest estimated completion" if state.exponent == 0 else
                            f"earliest completion weighted by GPU-time under queue pressure "
                            f"(exponent {state.exponent:.2f})")
        return Decision(self.name, state.reason, (), (
            _alternatives, rows, chosen.option, chosen.duration_s, starts, fastest_type, limit,
            share_gpus))

    def _maybe_reserve(self, job: QueuedJob, facts: _JobFacts, state: _Pass) -> bool:
        """Give a long-blocked job a reservation on the type where it would finish first."""
        if state.now_s - job.submit_time_s < self.config.reserve_after_s:
            return False
        reservations = state.reservations
        if len(reservations) >= len(state.index.capacity):
            return False  # every type is already reserved
        if not facts.entries:
            return False  # no option the cluster can host
        best: tuple[float, float, PlanOption] | None = None
        wanted, limit = facts.wanted, _share_limit(state.share, facts)  # `_over_share`
        for row in facts.by_rank:  # fastest first (its entries as rows: no tuple unpacked)
            option, gpu_type, gpus, duration_s = row.option, row.gpu_type, row.gpus, \
                row.duration_s
            if best is not None and duration_s >= best[0]:
                break  # a wait is never negative: no later entry ends sooner
            if gpu_type in reservations or (gpus > limit and gpu_type == wanted):
                continue
            wait_s = state.expected_wait_s(gpu_type, gpus)
            if best is None or wait_s + duration_s < best[0]:
                best = (wait_s + duration_s, wait_s, option)
        if best is None:
            return False
        return self._reserve(best[2], state, best[1])

    @staticmethod
    def _reserve(option: PlanOption, state: _Pass, wait_s: float | None = None) -> bool:
        """Reserve the option's type for it from its expected start (one reservation a type)."""
        gpu_type = option.gpu_type
        reservations = state.reservations
        if gpu_type in reservations:
            return False
        if wait_s is None:
            wait_s = state.expected_wait_s(gpu_type, option.num_gpus)
        free_at_shadow = state.index.free_by_type.get(gpu_type, 0)
        if 0 < wait_s < INF:
            free_at_shadow += state.releases.released_by(gpu_type, state.now_s + wait_s)
        view = state.types[gpu_type]
        reservations[gpu_type] = _Reservation(
            state.now_s + wait_s if wait_s < INF else INF,
            max(0, free_at_shadow - view.claimed - option.num_gpus))
        view.claimed += option.num_gpus
        state.changed(gpu_type)
        return True
