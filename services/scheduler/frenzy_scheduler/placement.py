"""Placement: given a GPU type and a count, pick nodes and GPU indices (separate from policy).

Policies decide *which job, which option*; these functions decide *which GPUs*. Every policy
works on a private `FreeIndex` built from the `ClusterView` snapshot, so the caller's view is
never mutated, and best-fit costs O(GPUs per node) instead of O(nodes).
"""
from __future__ import annotations

from itertools import compress
from operator import attrgetter, is_, ne
from typing import Final, Iterator, Sequence

from frenzy_scheduler.core import ClusterView, NodeState
from frenzy_scheduler.native import is_compiled

Assignments = tuple[tuple[str, tuple[int, ...]], ...]
# A node with no free GPUs left, in every index: one tuple, shared, as every free tuple is
_NO_GPUS: Final[tuple[int, ...]] = ()
_NO_BUCKETS: Final[list[dict[str, None]]] = []  # `take`'s buckets before its first node


def first_fit(cluster: ClusterView, gpu_type: str, count: int, per_node: int = 0,
              granularity: int = 1) -> Assignments | None:
    """Take GPUs from nodes in id order; with per_node > 0, a node gives exactly per_node GPUs.

    A node contributes a multiple of `granularity` (the plan's tp degree) GPUs.
    """
    nodes: Sequence[NodeState] = sorted(
        (n for n in cluster.nodes.values() if n.gpu_type == gpu_type and n.num_free),
        key=lambda n: n.node_id)
    chosen: list[tuple[str, tuple[int, ...]]] = []
    needed = count
    for node in nodes:
        if needed == 0:
            break
        take = min(node.num_free, needed) // granularity * granularity
        if take == 0:
            continue
        if per_node and take < per_node:
            continue
        if per_node:
            take = per_node
        chosen.append((node.node_id, tuple(node.free_gpus[:take])))
        needed -= take
    return tuple(chosen) if needed == 0 else None


class FreeIndex:
    """Free GPUs of a cluster snapshot, bucketed per GPU type by how many a node has free.

    `buckets[type][k]` holds the ids of nodes of that type with exactly k free GPUs (a dict
    used as an insertion-ordered set, so results are deterministic), for k >= 1: a node with
    none free is in no bucket, since no query asks for one (`buckets[type][0]` stays empty).
    On a busy cluster that is most nodes, which every placement that fills a node, every
    copy and every kept index's update would otherwise write, copy and keep in id order.
    Built in one O(nodes) pass per decision; afterwards every query and `take` touches only
    the nodes involved.
    A node's free GPUs are held as a tuple, which an assignment shares when it takes the
    whole node and slices otherwise (one object where a list's copy made two, for each node
    of each placement), and which `take` replaces rather than changes.
    """

    def __init__(self, cluster: ClusterView | None) -> None:
        """The index of `cluster`'s free GPUs; None: an empty one, for `copy` to fill."""
        self.free: dict[str, tuple[int, ...]] = {}
        self.node_type: dict[str, str] = {}
        self.buckets: dict[str, list[dict[str, None]]] = {}
        self.free_by_type: dict[str, int] = {}
        self.node_size: dict[str, int] = {}  # largest node of each type, in GPUs
        self._counts: list[int] = []  # `best_fit`'s scratch (`_scratch`)
        self._fronts: list[Iterator[str] | None] = []
        self.capacity: dict[str, int] = {}  # all GPUs of each type, free or busy
        if cluster is None:
            return
        nodes = cluster.nodes
        free, node_type, buckets = self.free, self.node_type, self.buckets
        free_by_type, node_size, capacity = self.free_by_type, self.node_size, self.capacity
        for node_id in sorted(nodes):
            node = nodes[node_id]
            gpu_type, gpus, total = node.gpu_type, node.free_gpus, node.total_gpus
            k = len(gpus)
            type_buckets = buckets.get(gpu_type)
            if type_buckets is None:
                type_buckets = buckets[gpu_type] = [{}]
                node_size[gpu_type] = capacity[gpu_type] = free_by_type[gpu_type] = 0
            size = total if total > k else k
            if size > node_size[gpu_type]:
                node_size[gpu_type] = size
                type_buckets.extend({} for _ in range(size + 1 - len(type_buckets)))
            capacity[gpu_type] += total
            free_by_type[gpu_type] += k
            free[node_id] = tuple(gpus)
            node_type[node_id] = gpu_type
            if k:
                type_buckets[k][node_id] = None

    def copy(self) -> "FreeIndex":
        """A private copy that `take` and `release` can change without touching this one
        (the per-node tuples are shared: neither replaces one in place)."""
        twin = FreeIndex(None)
        twin.free = dict(self.free)
        twin.node_type = dict(self.node_type)
        twin.buckets = {t: [dict(nodes) for nodes in type_buckets]
                        for t, type_buckets in self.buckets.items()}
        twin.free_by_type = dict(self.free_by_type)
        twin.node_size = dict(self.node_size)
        twin.capacity = dict(self.capacity)
        return twin

    def total_free(self) -> int:
        return sum(self.free_by_type.values())

    def best_fit(self, gpu_type: str, count: int, granularity: int = 1) -> Assignments | None:
        """Frenzy's node rule: a node that exactly fits; else the node with the fewest free GPUs
        that still fits; else fill the node with the most free GPUs and repeat for the rest.

        `granularity` (the plan's tensor-parallel degree) is the unit a node may contribute, so
        a tp group never straddles nodes. Returns None when the type cannot host `count` now.
        """
        if count <= 0 or self.free_by_type.get(gpu_type, 0) < count:
            return None
        buckets = self.buckets[gpu_type]
        step = max(1, granularity)
        if count % step:
            return None
        for k in range(count, len(buckets)):  # fast path: one node fits, take the fullest such
            if buckets[k]:
                node_id = _first(buckets[k])
                gpus = self.free[node_id]
                return ((node_id, gpus if count == len(gpus) else gpus[:count]),)
        if step > 1 and sum(len(nodes) * (k // step * step)
                            for k, nodes in enumerate(buckets)) < count:
            return None  # whole tp groups cannot add up to count (the walk below would fail)
        # Several nodes. Nodes are only ever taken from the front of a bucket, so a count per
        # bucket of the nodes already chosen stands in for a set of used nodes; and the largest
        # bucket with a node left only moves down, so the whole walk is O(nodes chosen + size).
        free = self.free
        # Per bucket: how many of its nodes are chosen, and an iterator at the next one (made
        # at its second node: most buckets give one, `_first`, and an iterator is an object).
        # One pair of lists per index, reset after each walk (`_reset`): allocated per call,
        # they were a sixth of a multi-node placement's instructions (compiled)
        chosen_per_bucket, fronts = self._scratch(len(buckets))
        chosen: list[tuple[str, tuple[int, ...]]] = []
        largest = top = len(buckets) - 1
        remaining = count
        while remaining:
            k = 0
            if remaining <= top:  # the smallest node that still fits the rest ...
                for k in range(remaining, top + 1):
                    if len(buckets[k]) > chosen_per_bucket[k]:
                        break
                else:
                    k = 0
            if k:
                take = remaining
            else:  # ... else the largest usable chunk (whole tp groups only)
                while largest >= step and len(buckets[largest]) <= chosen_per_bucket[largest]:
                    largest -= 1
                if largest < step:
                    self._reset(top)
                    return None
                k, take = largest, largest // step * step
            if chosen_per_bucket[k] == 0:
                node_id = _first(buckets[k])
            else:
                front = fronts[k]
                if front is None:
                    front = fronts[k] = iter(buckets[k])
                    _next(front)  # past the first node, chosen already
                node_id = _next(front)
            chosen_per_bucket[k] += 1
            gpus = free[node_id]
            chosen.append((node_id, gpus if take == len(gpus) else gpus[:take]))
            remaining -= take
        self._reset(top)
        return tuple(chosen)

    def _scratch(self, size: int) -> tuple[list[int], list[Iterator[str] | None]]:
        """`best_fit`'s per-bucket counts and iterators, all 0 and None, at least `size` long."""
        if len(self._counts) < size:
            self._counts = [0] * size
            self._fronts = [None] * size
        return self._counts, self._fronts

    def _reset(self, top: int) -> None:
        counts, fronts = self._counts, self._fronts
        for k in range(top + 1):
            counts[k] = 0
            fronts[k] = None

    def take(self, assignments: Assignments) -> None:
        """Reserve GPUs in this index (the reserve step); ValueError on a double booking.

        A placement's nodes are of one type: its buckets are looked up, and its free count
        changed, once for each run of nodes of one type, not once per node."""
        free_lists, node_types = self.free, self.node_type
        run_type, buckets, taken_of_type = "", _NO_BUCKETS, 0
        try:
            for node_id, gpus in assignments:
                free = free_lists[node_id]
                count = len(gpus)
                # What best_fit hands out: a whole node's own tuple, or a prefix of it, compared
                # in place, not as a tuple of a slice (compiled: a third of a take)
                prefix = count <= len(free)
                if prefix and gpus is not free:
                    for i in range(count):
                        if free[i] != gpus[i]:
                            prefix = False
                            break
                if prefix:  # a whole node, most of a wide placement: no new list
                    rest = free[count:] if count < len(free) else _NO_GPUS
                else:
                    taken = set(gpus)
                    if not taken <= set(free):
                        raise ValueError(
                            f"GPUs {sorted(taken - set(free))} on {node_id} are not free")
                    rest = tuple([g for g in free if g not in taken])
                gpu_type = node_types[node_id]
                if gpu_type != run_type:
                    if taken_of_type:
                        self.free_by_type[run_type] -= taken_of_type
                    run_type, buckets, taken_of_type = gpu_type, self.buckets[gpu_type], 0
                _rebucket(buckets, node_id, len(free), len(rest))
                free_lists[node_id] = rest
                taken_of_type += len(free) - len(rest)
        finally:  # the last run's count; on a double booking, the nodes before it stay taken
            if taken_of_type:
                self.free_by_type[run_type] -= taken_of_type

    def release(self, assignments: Assignments) -> None:
        """Give GPUs back to this index (a reshape in the same decision frees them)."""
        for node_id, gpus in assignments:
            if node_id not in self.free:
                continue  # the node left the cluster
            free = self.free[node_id]
            rest = tuple(sorted(set(free) | set(gpus)))
            gpu_type = self.node_type[node_id]
            buckets = self.buckets[gpu_type]
            _rebucket(buckets, node_id, len(free), len(rest))
            self.free[node_id] = rest
            self.free_by_type[gpu_type] += len(rest) - len(free)


def _rebucket(buckets: list[dict[str, None]], node_id: str, free_before: int,
              free_after: int) -> None:
    """Move a node to the end of the bucket of its new free count; a node with none free is
    in no bucket."""
    if free_before:
        del buckets[free_before][node_id]
    if free_after:
        buckets[free_after][node_id] = None


# `best_fit`'s next node, by a loop, not `next`: compiled, `next` is looked up in the builtins
# module and called through it (about 500 instructions a node placed); and a loop over a dict
# typed as one makes no iterator object (each one a share of a garbage collection)

def _first(nodes: dict[str, None]) -> str:
    """A bucket's first node id (the bucket is not empty)."""
    for node_id in nodes:
        return node_id
    raise ValueError("no node in the bucket")


def _next(nodes: Iterator[str]) -> str:
    """The next node id of an iterator over a bucket (one is left)."""
    for node_id in nodes:
        return node_id
    raise ValueError("no node left in the bucket")


_FREE_GPUS = attrgetter("free_gpus")
_COMPILED = is_compiled(__file__)  # see `KeptFreeIndex._changed`


class KeptFreeIndex:
    """`FreeIndex(cluster)` for a caller that asks again and again about a view that changes
    by a few nodes between asks (a scheduler deciding after each event): the index is kept
    and updated on the nodes whose free GPUs changed, and each ask gets a private copy.

    The copy is the index a fresh `FreeIndex(cluster)` would build, to the order of every
    bucket (node ids ascending: best fit takes a bucket's first node) and of `free_by_type`:
    a changed node leaves its old bucket (deleting keeps the order) and joins its new one
    at its place in id order. The index holds tuples made from the view's free lists, and
    list copies of them that it compares by value with the view's, so a caller may change a
    node's list in place. A node's type and size are taken
    as fixed for its `NodeState` object (the simulator and the live state put a new object
    in the view when a node changes); any change of the node set (a node added, removed,
    replaced by a new object, or reordered), or a node with more free GPUs than its size,
    builds the index afresh."""

    def __init__(self) -> None:
        self._index: FreeIndex | None = None
        self._nodes: list[NodeState] = []  # the view's node objects, in its order
        self._ids: list[str] = []  # ... and their keys
        self._free: list[list[int]] = []  # copies of their free lists as indexed

    def index(self, cluster: ClusterView) -> FreeIndex:
        kept = self._index
        changed = self._changed(cluster.nodes) if kept is not None else None
        if kept is None or changed is None:
            return self._rebuild(cluster)
        if changed:
            node_type = kept.node_type
            resort: set[tuple[str, int]] = set()
            for i in changed:
                free, old = self._nodes[i].free_gpus, self._free[i]
                node = self._nodes[i]
                if len(free) > node.total_gpus or len(old) > node.total_gpus:
                    return self._rebuild(cluster)  # the type's node size may change
                node_id = self._ids[i]
                gpu_type = node_type[node_id]
                buckets = kept.buckets[gpu_type]
                if old:
                    del buckets[len(old)][node_id]
                if free:
                    bucket = buckets[len(free)]
                    if bucket and _next(reversed(bucket)) > node_id:
                        resort.add((gpu_type, len(free)))
                    bucket[node_id] = None
                self._free[i] = list(free)
                kept.free[node_id] = tuple(free)
                kept.free_by_type[gpu_type] += len(free) - len(old)
            for gpu_type, k in resort:
                buckets = kept.buckets[gpu_type]
                buckets[k] = dict.fromkeys(sorted(buckets[k]))
        return kept.copy()

    def _changed(self, nodes: dict[str, NodeState]) -> list[int] | None:
        """The positions of the nodes whose free GPUs differ from what was indexed; None when
        the node set is not the indexed one (a node added, removed, replaced or reordered).
        Compiled, one loop (a few instructions a node); as Python, chains of C builtins."""
        if len(nodes) != len(self._nodes):
            return None
        if _COMPILED:
            changed = []
            kept_nodes, kept_ids, kept_free = self._nodes, self._ids, self._free
            i = 0
            for node_id, node in nodes.items():
                if node is not kept_nodes[i] or node_id != kept_ids[i]:
                    return None
                if node.free_gpus != kept_free[i]:
                    changed.append(i)
                i += 1
            return changed
        if not all(map(is_, nodes.values(), self._nodes)) or list(nodes) != self._ids:
            return None
        return list(compress(range(len(self._nodes)),
                             map(ne, map(_FREE_GPUS, self._nodes), self._free)))

    def _rebuild(self, cluster: ClusterView) -> FreeIndex:
        self._index = FreeIndex(cluster)
        self._nodes = list(cluster.nodes.values())
        self._ids = list(cluster.nodes)
        # Copies of the view's lists, compared with them by `_changed`: a list the caller
        # changes in place would otherwise change along with the view (the index itself
        # holds tuples made from them)
        self._free = [list(free) for free in map(_FREE_GPUS, self._nodes)]
        return self._index.copy()
