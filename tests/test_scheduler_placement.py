"""Best-fit node placement and the cluster-file loaders."""
from __future__ import annotations

from unittest import mock

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from frenzy.clusterfile import groups_from_alibaba_csv, load_cluster_file, parse_cluster, scale_groups
from frenzy_scheduler.clusterfile import build_cluster
from frenzy_scheduler.core import ClusterView, NodeState
from frenzy_scheduler import placement
from frenzy_scheduler.placement import FreeIndex, KeptFreeIndex


def _cluster(*free: tuple[str, str, int, int]) -> ClusterView:
    """(node id, type, total GPUs, free GPUs) -> a view whose first `free` GPUs are free."""
    return ClusterView({n: NodeState(n, t, total, list(range(k))) for n, t, total, k in free})


def test_best_fit_prefers_exact_fit_then_fewest_free() -> None:
    index = FreeIndex(_cluster(("a", "T4", 8, 8), ("b", "T4", 8, 3), ("c", "T4", 8, 5)))
    assert index.best_fit("T4", 3) == (("b", (0, 1, 2)),)  # exact fit
    assert index.best_fit("T4", 4) == (("c", (0, 1, 2, 3)),)  # fewest free that still fits
    assert index.best_fit("T4", 9) == (("a", tuple(range(8))), ("b", (0,)))  # largest, then fit


def test_best_fit_keeps_tensor_parallel_groups_on_one_node() -> None:
    index = FreeIndex(_cluster(("a", "A100-80GB", 8, 3), ("b", "A100-80GB", 8, 3)))
    assert index.best_fit("A100-80GB", 4, granularity=2) == (("a", (0, 1)), ("b", (0, 1)))
    assert index.best_fit("A100-80GB", 6, granularity=2) is None


def test_take_refuses_double_booking_and_leaves_the_view_alone() -> None:
    view = _cluster(("a", "T4", 4, 4))
    index = FreeIndex(view)
    index.take((("a", (0, 1)),))
    with pytest.raises(ValueError):
        index.take((("a", (1,)),))
    assert view.nodes["a"].free_gpus == [0, 1, 2, 3]
    assert index.free_by_type["T4"] == 2


def test_cluster_yaml_schema_and_node_ids(tmp_path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("node_groups:\n  - {gpu_type: A100-40GB, gpus_per_node: 8, nodes: 2}\n"
                    "  - {gpu_type: A100-SXM4-80GB, gpus_per_node: 8, nodes: 1}\n"
                    "  - {gpu_type: T4, gpus_per_node: 2, nodes: 3}\n")
    groups = load_cluster_file(path)
    cluster = build_cluster(groups)
    assert sorted(cluster.nodes)[:4] == ["a100-40gb-0", "a100-40gb-1", "a100-80gb-0", "t4-0"]
    assert cluster.total_by_type() == {"A100-40GB": 16, "A100-80GB": 8, "T4": 6}


def test_unknown_gpu_type_names_the_field() -> None:
    with pytest.raises(ValueError, match=r"node_groups\[1\]\.gpu_type"):
        parse_cluster({"node_groups": [{"gpu_type": "T4", "gpus_per_node": 2, "nodes": 1},
                                       {"gpu_type": "Z9000", "gpus_per_node": 8, "nodes": 1}]})
    with pytest.raises(ValueError, match="gpus_per_node"):
        parse_cluster({"node_groups": [{"gpu_type": "T4", "gpus_per_node": 0, "nodes": 1}]})


def test_alibaba_node_list_maps_aliases_and_drops_undisclosed(tmp_path) -> None:
    path = tmp_path / "nodes.csv"
    path.write_text("gpu_model,gpu_capacity_num,cpu_num,node_name\nGPU-series-1,4,192,0\n"
                    "A10,1,128,2\nA100-SXM4-80GB,8,128,3\nA100-SXM4-80GB,8,128,4\nH800,8,128,5\n")
    groups = groups_from_alibaba_csv(path)
    assert {(g.gpu_type, g.gpus_per_node, g.nodes) for g in groups} == {
        ("A10", 1, 1), ("A100-80GB", 8, 2), ("H800-80GB", 8, 1)}
    assert {g.gpu_type for g in groups_from_alibaba_csv(path, {"GPU-series-1": "L40S"})} >= {"L40S"}
    assert [g.nodes for g in scale_groups(groups, 0.1)] == [1, 1, 1]


def test_shipped_cluster_files_load() -> None:
    frenzy = build_cluster(load_cluster_file("deploy/clusters/frenzy-288.yaml"))
    assert sum(frenzy.total_by_type().values()) == 288
    alibaba = build_cluster(load_cluster_file("deploy/clusters/alibaba-2026-492.yaml"))
    assert len(alibaba.total_by_type()) >= 3


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([1, 2, 4, 8]), st.integers(0, 8)), min_size=1, max_size=20),
       st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64]), st.sampled_from([1, 2, 4]))
def test_best_fit_succeeds_exactly_when_whole_tp_groups_add_up(nodes, count, tp) -> None:
    view = _cluster(*((f"n{i:02d}", "T4", size, min(free, size)) for i, (size, free) in enumerate(nodes)))
    index = FreeIndex(view)
    usable = sum(len(n.free_gpus) // tp * tp for n in view.nodes.values())
    chosen = index.best_fit("T4", count, granularity=tp)
    assert (chosen is not None) == (count % tp == 0 and usable >= count)
    if chosen is not None:
        assert sum(len(g) for _, g in chosen) == count
        assert len({n for n, _ in chosen}) == len(chosen)  # each node once
        assert all(len(g) % tp == 0 and set(g) <= set(view.nodes[n].free_gpus) for n, g in chosen)
        index.take(chosen)
        assert index.free_by_type["T4"] == sum(len(n.free_gpus) for n in view.nodes.values()) - count


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([1, 2, 4, 8]), st.integers(0, 8)), min_size=1, max_size=20),
       st.lists(st.tuples(st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16, 24]), st.sampled_from([1, 2, 4]),
                          st.booleans()), min_size=1, max_size=12))
def test_best_fit_asked_again_and_again_answers_as_a_fresh_copy(nodes, asks) -> None:
    """`best_fit` keeps its per-bucket counts and iterators from call to call (reset after
    each walk): asked again and again on one index, with some answers taken in between and
    some asks failing, it answers each time as a copy of the index that never answered."""
    view = _cluster(*((f"n{i:02d}", "T4", size, min(free, size)) for i, (size, free) in enumerate(nodes)))
    index = FreeIndex(view)
    for count, tp, take in asks:
        fresh = index.copy()  # a copy starts with no scratch
        chosen = index.best_fit("T4", count, granularity=tp)
        assert chosen == fresh.best_fit("T4", count, granularity=tp)
        if chosen is not None and take:
            index.take(chosen)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("AB"), st.sampled_from([2, 4, 8]), st.integers(0, 8)),
                min_size=1, max_size=10),
       st.lists(st.tuples(st.integers(0, 9), st.integers(0, 255)), min_size=1, max_size=10),
       st.one_of(st.none(), st.integers(0, 9)))
def test_take_over_nodes_of_several_types_leaves_the_index_counted(nodes, picks, bad) -> None:
    """`take` counts each run of nodes of one type once: over assignments that mix types,
    take a node's first GPUs or any of them, the index's free lists, buckets and per-type
    counts are those of the GPUs left; a double booking at any node raises and leaves the
    nodes before it taken, the index still consistent."""
    view = _cluster(*((f"n{i}", t, size, min(free, size)) for i, (t, size, free) in enumerate(nodes)))
    index = FreeIndex(view)
    assignments, seen = [], set()
    for which, mask in picks:
        node = view.nodes[f"n{which % len(nodes)}"]
        if node.node_id in seen or not node.free_gpus:
            continue
        seen.add(node.node_id)
        gpus = tuple(g for i, g in enumerate(node.free_gpus) if mask >> i & 1) or \
            tuple(node.free_gpus[:1])
        assignments.append((node.node_id, gpus))
    failing = None
    if bad is not None and assignments:
        failing = bad % len(assignments)
        node_id, _ = assignments[failing]
        assignments[failing] = (node_id, (view.nodes[node_id].total_gpus + 1,))  # never free
    if failing is None:
        index.take(tuple(assignments))
    else:
        with pytest.raises(ValueError, match="not free"):
            index.take(tuple(assignments))
    left = {n: list(node.free_gpus) for n, node in view.nodes.items()}
    for node_id, gpus in assignments[:failing]:
        left[node_id] = [g for g in left[node_id] if g not in gpus]
    assert index.free == {n: tuple(gpus) for n, gpus in left.items()}
    for gpu_type in index.buckets:
        assert index.free_by_type[gpu_type] == sum(len(left[n]) for n in left
                                                   if view.nodes[n].gpu_type == gpu_type)
        assert {(n, k) for k, bucket in enumerate(index.buckets[gpu_type]) for n in bucket} == \
            {(n, len(left[n])) for n in left if view.nodes[n].gpu_type == gpu_type and left[n]}


def _index_state(index: FreeIndex) -> tuple:
    """Everything a FreeIndex answers from, with the orders that decide its answers (a
    bucket's first node is the one best fit takes; free_by_type is iterated)."""
    return ([(t, [list(nodes) for nodes in buckets]) for t, buckets in index.buckets.items()],
            list(index.free_by_type.items()), list(index.free.items()),
            list(index.node_type.items()), index.node_size, index.capacity)


# One step on a view: change a node's free GPUs (a new list, or the list changed in place),
# or add a node, or remove one. Node ids are drawn so that new ones sort anywhere.
_STEPS = st.lists(st.tuples(st.sampled_from(["new list", "in place", "add", "remove"]),
                            st.integers(0, 30), st.integers(0, 8), st.sampled_from("AB")),
                  max_size=40)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.sampled_from("AB"), st.sampled_from([4, 8]),
                          st.integers(0, 8)), min_size=1, max_size=12,
                unique_by=lambda node: node[0]), _STEPS, st.integers(1, 4))
# Found by hypothesis: a list changed in place after a rebuild, then replaced by an equal one
# (the kept index had held the view's own list, so it changed with it unseen).
@example(nodes=[(0, "A", 4, 0), (1, "A", 4, 0)],
         steps=[("new list", 0, 0, "A"), ("remove", 0, 0, "A"), ("in place", 0, 1, "A"),
                ("new list", 0, 0, "A")],
         every=2)
def test_a_kept_index_is_the_index_built_afresh(nodes, steps, every) -> None:
    """KeptFreeIndex, asked after every `every` steps of changes to the view, answers with
    what FreeIndex(view) builds, orders included; and what the caller does to the copy it
    got (take) changes neither the next answer nor the view. Both ways of finding the
    changed nodes: the compiled build's loop and the builtins the source runs."""
    for compiled_loop in (False, True):
        with mock.patch.object(placement, "_COMPILED", compiled_loop):
            _kept_index_against_a_fresh_one(nodes, steps, every)


def _kept_index_against_a_fresh_one(nodes, steps, every) -> None:
    view = ClusterView({f"n{i:02d}": NodeState(f"n{i:02d}", t, size, list(range(min(k, size))))
                        for i, t, size, k in nodes})
    kept = KeptFreeIndex()
    for position, (kind, which, k, gpu_type) in enumerate(steps):
        if position % every == 0:
            index = kept.index(view)
            assert _index_state(index) == _index_state(FreeIndex(view))
            for node_id, free in list(index.free.items())[:2]:  # the caller's own changes
                if free:
                    index.take(((node_id, (free[0],)),))
        ids = sorted(view.nodes)
        node_id = ids[which % len(ids)] if ids else None
        if kind == "add" and f"n{which:02d}" not in view.nodes:
            size = 8 if gpu_type == "A" else 4
            view.nodes[f"n{which:02d}"] = NodeState(f"n{which:02d}", gpu_type, size,
                                                    list(range(min(k, size))))
        elif kind == "remove" and len(view.nodes) > 1:
            del view.nodes[node_id]
        elif kind in ("new list", "in place"):
            node = view.nodes[node_id]
            # the lowest or (odd `which`) the highest GPUs: the same count may be other GPUs
            count = min(k, node.total_gpus)
            free = list(range(node.total_gpus - count, node.total_gpus) if which % 2 else
                        range(count))
            if kind == "new list":
                node.free_gpus = free
            else:
                node.free_gpus[:] = free
    assert _index_state(kept.index(view)) == _index_state(FreeIndex(view))
