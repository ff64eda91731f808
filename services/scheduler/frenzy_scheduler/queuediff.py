"""What changed in a sequence since the last call, by object identity (pure, no I/O).

A policy is handed the whole queue on every decision, but between two decisions the queue
changes by a job or two. A Python loop that looks every job up costs a microsecond or more a
job: at 5,000 queued jobs, most of a decision's budget. Queues keep their order between
decisions (jobs leave from anywhere, newcomers go at the end), so the two sequences are
aligned in C (`map(is_not, ...)`, about 30 ns a job): the first item that differs is taken as
one that left (or, when the next ones align past it, as replaced in place by a new one: a
running job reshaped), and the comparison goes on past it, once per job that left. What
follows the end of the old sequence arrived. Only a sequence reordered past `_REALIGN_LIMIT`
departures leaves a long rest to compare by `id()` (about 200 ns a job, as the whole rest was
compared before).

Identity is safe because the diff holds a reference to every item it tracks (an id is unique
among live objects), and it is what callers mean: the simulator and the live scheduler make
a new `QueuedJob` when a job changes (requeued with less work left, new options) and never
mutate one in place while it is queued.
"""
from __future__ import annotations

from itertools import compress, count, islice
from operator import is_not
from typing import Generic, Sequence, TypeVar

from frenzy_scheduler.native import is_compiled

T = TypeVar("T")

# Items taken as departed, one alignment each, before the rest is compared as sets: a
# reordered sequence would otherwise cost one alignment per item
_REALIGN_LIMIT = 32


# Whether this module runs compiled (frenzy_scheduler.native). Compiled by mypyc, a loop
# compares two list items in a few instructions, where the chain of C builtins below costs
# about 200 (their calls); run as Python, the same loop is about 1.8x slower than the chain.
_COMPILED = is_compiled(__file__)


def _shared_run(a: list[T], i: int, b: list[T], j: int) -> int:
    """How many items `a[i:]` and `b[j:]` have in common position by position from their
    start (the same objects): a loop when compiled, else found in C by builtins."""
    if _COMPILED:
        n = min(len(a) - i, len(b) - j)
        k = 0
        while k < n and a[i + k] is b[j + k]:
            k += 1
        return k
    run = next(compress(count(), map(is_not, islice(a, i, None), islice(b, j, None))), None)
    return run if run is not None else min(len(a) - i, len(b) - j)


class IdentityDiff(Generic[T]):
    """The items of the last sequence seen, and what arrived or left since."""

    def __init__(self) -> None:
        self.items: list[T] = []  # the last sequence (its references keep the ids unique)

    def update(self, items: Sequence[T]) -> tuple[list[T], list[T]] | None:
        """(arrived, departed) since the last call: arrived in their order in `items`,
        departed in no particular order. None when an object appears twice among the
        arrived. One that appears twice otherwise shows as arrived, so callers with a unique
        key check it (has: job ids; the release lists: ids tracked) and take their
        straightforward path. Either way the diff now tracks `items`.

        Why the alignment is exact: every old item is either matched to the same object at
        an aligned position or taken as departed, and every new one is either matched or
        taken as arrived (in the place of a departed one, or past the aligned part). With
        each sequence free of repeats, an object taken as departed that is still there can
        only be among the arrived, and the reverse, so removing the objects in both from
        both leaves what set arithmetic would give."""
        previous, current = self.items, list(items)
        self.items = current
        p = c = _shared_run(previous, 0, current, 0)
        if p == len(previous) == len(current):
            return [], []
        departed: list[T] = []
        replacing: list[T] = []  # new objects in the place of old ones (a running job reshaped)
        while p < len(previous) and c < len(current) and len(departed) < _REALIGN_LIMIT:
            departed.append(previous[p])  # not at its place: taken as a job that left
            p += 1
            if p < len(previous) and c + 1 < len(current) and previous[p] is current[c + 1]:
                replacing.append(current[c])  # ... and one came in its place
                c += 1
            run = _shared_run(previous, p, current, c)
            p, c = p + run, c + run
        departed += previous[p:]
        arrived = replacing + current[c:] if replacing else current[c:]
        arrived_ids = set(map(id, arrived))
        if len(arrived_ids) != len(arrived):
            return None
        if departed and arrived:
            departed_ids = set(map(id, departed))
            both = departed_ids & arrived_ids  # moved, not arrived or departed
            if both:
                arrived = [item for item in arrived if id(item) not in both]
                departed = [item for item in departed if id(item) not in both]
        return arrived, departed

    def reset(self) -> None:
        self.items = []
