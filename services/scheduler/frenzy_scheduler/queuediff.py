"""What changed in a sequence since the last call, by object identity (pure, no I/O).

A policy is handed the whole queue on every decision, but between two decisions the queue
changes by a job or two. A Python loop that looks every job up costs a microsecond or more a
job: at 5,000 queued jobs, most of a decision's budget. Here the common prefix of the two
sequences is found in C (`map(is_not, ...)`), and only the rest is compared, as dicts keyed by
`id()`. Queues keep their order between decisions (jobs leave from anywhere, newcomers go at
the end), so the rest is what follows the first job that left.

Identity is safe because the diff holds a reference to every item it tracks (an id is unique
among live objects), and it is what callers mean: the simulator and the live scheduler make
a new `QueuedJob` when a job changes (requeued with less work left, new options) and never
mutate one in place while it is queued.
"""
from __future__ import annotations

from itertools import compress, count
from operator import is_not
from typing import Generic, Sequence, TypeVar

T = TypeVar("T")


class IdentityDiff(Generic[T]):
    """The items of the last sequence seen, and what arrived or left since."""

    def __init__(self) -> None:
        self.items: list[T] = []  # the last sequence (its references keep the ids unique)

    def update(self, items: Sequence[T]) -> tuple[list[T], list[T]] | None:
        """(arrived, departed) since the last call, in no particular order. None when an
        object appears twice past the unchanged prefix; one that appears in the prefix and
        again later shows as arrived, so callers with a unique key check it (has: job ids)
        and take their straightforward path. Either way the diff now tracks `items`."""
        previous, current = self.items, list(items)
        self.items = current
        same = next(compress(count(), map(is_not, previous, current)), None)
        if same is None:
            same = min(len(previous), len(current))
            if same == len(previous) == len(current):
                return [], []
        old, new = previous[same:], current[same:]
        old_ids, new_ids = dict(zip(map(id, old), old)), dict(zip(map(id, new), new))
        if len(new_ids) != len(new):
            return None
        return ([new_ids[i] for i in new_ids.keys() - old_ids.keys()],
                [old_ids[i] for i in old_ids.keys() - new_ids.keys()])

    def reset(self) -> None:
        self.items = []
