"""bench/caching_allocator.py follows CUDACachingAllocator.cpp's rules, one test per rule, and the
one-GPU ZeRO-3 trace (bench/hf_zero3_reserved_trace.py) replays through it. How close the trace
comes to the measured rows is the bench's to say, not a test's."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from caching_allocator import CachingAllocator, round_size, segment_size  # noqa: E402
from caching_allocator import _segment_blocks  # noqa: E402

MIB = 1 << 20


def test_requests_round_up_to_512_bytes():
    assert round_size(1) == 512
    assert round_size(512) == 512
    assert round_size(513) == 1024


def test_a_new_segment_is_2_mib_small_20_mib_under_10_mib_else_rounded_to_2_mib():
    assert segment_size(MIB) == 2 * MIB
    assert segment_size(MIB + 512) == 20 * MIB
    assert segment_size(10 * MIB - 512) == 20 * MIB
    assert segment_size(10 * MIB) == 10 * MIB
    assert segment_size(11 * MIB) == 12 * MIB


def test_small_and_large_requests_use_separate_pools():
    a = CachingAllocator()
    a.free(a.malloc(2 * MIB))        # a 20 MiB large-pool segment, now free
    a.malloc(1000)                   # a small request cannot use it
    assert a.reserved_bytes == 22 * MIB


def test_best_fit_takes_the_smallest_free_block_that_fits():
    a = CachingAllocator()
    big, small = a.malloc(50 * MIB), a.malloc(30 * MIB)
    a.free(big)
    a.free(small)
    a.malloc(25 * MIB)
    big_block = next(b for b in a.free_blocks if b.size == 50 * MIB)
    assert big_block is not None and a.reserved_bytes == 80 * MIB
    a.malloc(40 * MIB)               # the 50 MiB block: no new segment
    assert a.reserved_bytes == 80 * MIB


def test_the_rest_of_a_large_block_is_split_off_only_when_over_1_mib():
    a = CachingAllocator()
    a.free(a.malloc(40 * MIB))
    a.malloc(39 * MIB)               # 1 MiB left: not split, the request takes 40 MiB
    assert a.allocated_bytes == 40 * MIB
    b = CachingAllocator()
    b.free(b.malloc(40 * MIB))
    b.malloc(38 * MIB)               # 2 MiB left: split off, free for another request
    assert b.allocated_bytes == 38 * MIB
    b.malloc(2 * MIB)
    assert b.reserved_bytes == 40 * MIB


def test_two_segments_never_merge():
    a = CachingAllocator()
    first, second = a.malloc(20 * MIB), a.malloc(20 * MIB)
    a.free(first)
    a.free(second)
    a.malloc(30 * MIB)               # 40 MiB free, but in two segments
    assert a.reserved_bytes == 70 * MIB


def test_free_neighbours_within_a_segment_merge():
    a = CachingAllocator()
    a.free(a.malloc(60 * MIB))
    x, y, z = a.malloc(20 * MIB), a.malloc(20 * MIB), a.malloc(20 * MIB)
    a.free(x)
    a.free(z)
    a.free(y)                        # merges with both neighbours: one 60 MiB block again
    a.malloc(60 * MIB)
    assert a.reserved_bytes == 60 * MIB


def test_a_free_block_serves_only_its_own_stream():
    a = CachingAllocator()
    a.free(a.malloc(100 * MIB, stream="reduce"))
    a.malloc(100 * MIB)
    assert a.reserved_bytes == 200 * MIB


def test_empty_cache_returns_only_wholly_free_segments():
    a = CachingAllocator()
    big = a.malloc(100 * MIB)
    x, y = a.malloc(4 * MIB), a.malloc(4 * MIB)   # both in one 20 MiB segment
    a.free(big)                      # a wholly free segment
    a.free(x)
    a.empty_cache()
    assert a.reserved_bytes == 20 * MIB   # the segment still holding y stays, x's room with it
    a.free(y)
    a.empty_cache()
    assert a.reserved_bytes == 0


def test_an_expandable_segment_grows_by_20_mib_pages_from_its_free_end():
    a = CachingAllocator(expandable_segments=True)
    a.malloc(30 * MIB)               # two pages mapped; the last 10 MiB split off, free
    assert a.reserved_bytes == 40 * MIB and a.allocated_bytes == 30 * MIB
    a.malloc(25 * MIB)               # the free 10 MiB at the end plus one more page
    assert a.reserved_bytes == 60 * MIB and a.allocated_bytes == 55 * MIB


def test_in_an_expandable_segment_neighbours_freed_apart_serve_one_request():
    a = CachingAllocator(expandable_segments=True)
    x, y = a.malloc(40 * MIB), a.malloc(40 * MIB)
    a.free(x)
    a.free(y)
    a.malloc(80 * MIB)               # one block again: no new pages
    assert a.reserved_bytes == 80 * MIB
    b = CachingAllocator()           # two segments of their own never merge
    x, y = b.malloc(40 * MIB), b.malloc(40 * MIB)
    b.free(x)
    b.free(y)
    b.malloc(80 * MIB)
    assert b.reserved_bytes == 160 * MIB


def test_empty_cache_unmaps_the_whole_pages_inside_free_expandable_blocks():
    a = CachingAllocator(expandable_segments=True)
    x, y = a.malloc(50 * MIB), a.malloc(10 * MIB)   # 60 MiB mapped: pages 0-2
    a.free(x)                        # free 0-50 MiB: pages 0 and 1 lie wholly inside
    a.empty_cache()
    assert a.reserved_bytes == 20 * MIB
    a.malloc(45 * MIB)               # the lowest unmapped range: pages 0-1 and 10 MiB free
    assert a.reserved_bytes == 60 * MIB
    a.free(y)
    assert a.allocated_bytes == 45 * MIB


def test_peaks_follow_allocated_and_reserved():
    a = CachingAllocator()
    h = a.malloc(100 * MIB, what="first")
    a.free(h)
    a.malloc(50 * MIB)
    assert a.allocated_peak_bytes == 100 * MIB and a.allocated_bytes == 50 * MIB
    assert a.reserved_peak_bytes == 100 * MIB and a.reserved_peak_at == "first"


def test_the_trace_replays_both_models_and_refuses_what_it_does_not_trace():
    import dataclasses

    import yaml
    from hf_zero3_reserved_trace import trace
    from marp_published import row_job

    rows = yaml.safe_load((ROOT / "bench" / "data" / "marp_published.yaml").read_text())
    for row_id in ("hf/qwen1.5-0.5b/zero3-seq128", "hf/llama3-8b/zero3-ckpt-seq2048-mb1"):
        row = next(r for r in rows if r["id"] == row_id)
        arch, recipe, plan, seq_len, _ = row_job(row)
        a = trace(arch, recipe, plan, seq_len, row["reduce_bucket_size"])
        assert a.reserved_peak_bytes > a.allocated_peak_bytes > 0, row_id
    qwen = next(r for r in rows if r["id"] == "hf/qwen1.5-0.5b/zero3-seq128")
    arch, recipe, plan, seq_len, _ = row_job(qwen)
    with pytest.raises(ValueError, match="coalesced"):  # q/k/v biases: several per module
        trace(arch, recipe, dataclasses.replace(plan, dp=2), seq_len, qwen["reduce_bucket_size"])
    with pytest.raises(ValueError, match="data parallelism"):
        trace(arch, recipe, dataclasses.replace(plan, tp=2), seq_len, qwen["reduce_bucket_size"])


def test_sub_groups_close_once_they_hold_sub_group_size_elements():
    from hf_zero3_reserved_trace import sub_group_sizes

    params = [("a", 60, True), ("b", 60, True), ("c", 30, True), ("n", 5, False)]
    assert sub_group_sizes(params, 1, 100) == [120, 30, 5]
    assert sub_group_sizes(params, 1, 1000) == [150, 5]
    assert sub_group_sizes(params, 2, 50) == [30 + 30, 15, 3]


def test_a_bucket_is_copied_for_the_reduce_scatter_unless_one_gradient_dp_divides():
    from hf_zero3_reserved_trace import Buckets

    a = CachingAllocator()
    buckets = Buckets(a, bucket_elements=100 * MIB, dp=8)
    buckets.add(64 * MIB, a.malloc(128 * MIB))   # fits: copied into the bucket, its block freed
    assert a.allocated_bytes == 0
    buckets.add(200 * MIB, a.malloc(400 * MIB))  # reduces the first bucket alone (8 divides it)
    assert a.reserved_bytes == 128 * MIB + 400 * MIB   # no copy on the reduce stream yet
    assert a.allocated_bytes == 400 * MIB        # too large for the bucket: left in its block
    buckets.add(8 * MIB, a.malloc(16 * MIB))     # reduces the large one alone, uncopied
    assert a.allocated_bytes == 0
    buckets.add(8 * MIB, a.malloc(16 * MIB))
    buckets.reduce()                             # two gradients: one torch.cat copy, 16 Mi elements
    reduce_stream = [b for b in a.free_blocks if b.stream == "reduce"]
    assert [b.size for b in reduce_stream] == [32 * MIB]


OPS = st.lists(st.tuples(st.booleans(), st.integers(1, 64 * MIB), st.sampled_from(["a", "b"]),
                         st.integers(0, 10**6)), max_size=60)


@settings(max_examples=150, deadline=None)
@given(ops=OPS, expandable=st.booleans())
def test_any_order_keeps_the_books_and_gives_everything_back(ops, expandable):
    """Whatever the order: live blocks never overlap, allocated is what they hold, reserved
    covers it, and once all is freed empty_cache returns every byte."""
    a = CachingAllocator(expandable_segments=expandable)
    handles = []
    for is_malloc, nbytes, stream, pick in ops:
        if is_malloc or not handles:
            handles.append(a.malloc(nbytes, stream=stream))
        else:
            a.free(handles.pop(pick % len(handles)))
        assert a.allocated_bytes == sum(b.size for b in a.live.values())
        assert a.reserved_bytes >= a.allocated_bytes
        assert a.reserved_peak_bytes >= a.reserved_bytes
        for block in a.live.values():  # each segment's blocks tile it without gaps
            blocks = list(_segment_blocks(block))
            assert all(x.address + x.size == y.address for x, y in zip(blocks, blocks[1:]))
    for handle in handles:
        a.free(handle)
    a.empty_cache()
    assert a.allocated_bytes == 0 and a.reserved_bytes == 0
