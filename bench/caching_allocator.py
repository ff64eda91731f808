"""A small model of PyTorch's CUDA caching allocator (torch 2.2, default settings), for traces.

MARP sums tensors; the caching allocator reserves segments and reuses a freed block only for a
request on the same stream that fits inside it, and never merges two segments. What it keeps
reserved therefore depends on the order of the requests, which a sum cannot say. This module
replays an ordered list of mallocs and frees and returns the allocated and reserved peaks, so
that a trace of a training stack's allocation order (bench/hf_zero3_reserved_trace.py) can be
checked against a measured `max_memory_reserved`. It is an experiment: MARP does not use it.

Rules followed, c10/cuda/CUDACachingAllocator.cpp (torch v2.2.2; `DeviceCachingAllocator`):
- `round_size`: every request is rounded up to a multiple of kMinBlockSize (512 B);
- two pools per device: small (rounded size <= kSmallSize, 1 MiB) and large;
- `get_free_block`: the pool is a set ordered by (stream, size, address); the block taken is the
  smallest free block of the request's stream and pool at least as large as the request, the
  lowest address among equals (`lower_bound`); a block is never used by another stream;
- `get_allocation_size`: with no block free, a new segment (cudaMalloc) of kSmallBuffer (2 MiB)
  for a small request, kLargeBuffer (20 MiB) for a request under kMinLargeAlloc (10 MiB), else
  the request rounded up to kRoundLarge (2 MiB);
- `should_split`: the rest of the block found becomes a free block of its own when it is at
  least 512 B (small pool) or more than kSmallSize (large pool), else the request takes the
  whole block;
- `free_block` / `try_merge_blocks`: a freed block merges with its free neighbours within its
  segment; two segments never merge;
- `release_cached_blocks` (`torch.cuda.empty_cache`): every free block that is a whole segment
  (no prev, no next) is returned to the driver; a segment holding any live block stays.
Not modelled: max_split_size_mb and the other PYTORCH_CUDA_ALLOC_CONF options (expandable
segments included), the retry that frees cached blocks when cudaMalloc fails (the device's
capacity), and frees deferred by `record_stream` (a block recorded on another stream returns
to its pool only when that stream's work is done; here every free is immediate, the smallest
reserve the order allows).
"""
from __future__ import annotations

from dataclasses import dataclass, field

MIN_BLOCK_BYTES = 512           # kMinBlockSize
SMALL_SIZE_BYTES = 1 << 20      # kSmallSize: the largest request of the small pool
SMALL_BUFFER_BYTES = 2 << 20    # kSmallBuffer: a small pool's segment
MIN_LARGE_ALLOC_BYTES = 10 << 20  # kMinLargeAlloc: requests below it get a kLargeBuffer segment
LARGE_BUFFER_BYTES = 20 << 20   # kLargeBuffer
ROUND_LARGE_BYTES = 2 << 20     # kRoundLarge


def round_size(nbytes: int) -> int:
    """`round_size`: a request's size in its pool (a multiple of 512 B, at least 512 B)."""
    if nbytes < MIN_BLOCK_BYTES:
        return MIN_BLOCK_BYTES
    return MIN_BLOCK_BYTES * -(-nbytes // MIN_BLOCK_BYTES)


def segment_size(size: int) -> int:
    """`get_allocation_size`: the segment cudaMalloc'd for a rounded request no block fits."""
    if size <= SMALL_SIZE_BYTES:
        return SMALL_BUFFER_BYTES
    if size < MIN_LARGE_ALLOC_BYTES:
        return LARGE_BUFFER_BYTES
    return ROUND_LARGE_BYTES * -(-size // ROUND_LARGE_BYTES)


@dataclass(eq=False)
class Block:
    """A range of one segment: live (allocated) or free in its pool."""
    segment: int
    address: int
    size: int
    stream: str
    small: bool
    allocated: bool = False
    prev: Block | None = None
    next: Block | None = None


@dataclass
class CachingAllocator:
    """One device's allocator: `malloc` returns a handle, `free` takes it back."""
    free_blocks: list[Block] = field(default_factory=list)
    live: dict[int, Block] = field(default_factory=dict)
    allocated_bytes: int = 0
    allocated_peak_bytes: int = 0
    reserved_bytes: int = 0
    reserved_peak_bytes: int = 0
    reserved_peak_at: str = ""
    _segments: int = 0
    _next_address: int = 0
    _handles: int = 0

    def malloc(self, nbytes: int, stream: str = "compute", what: str = "") -> int:
        size = round_size(nbytes)
        small = size <= SMALL_SIZE_BYTES
        fits = [b for b in self.free_blocks
                if b.stream == stream and b.small == small and b.size >= size]
        if fits:
            block = min(fits, key=lambda b: (b.size, b.address))
            self.free_blocks.remove(block)
        else:
            block = self._new_segment(segment_size(size), stream, small, what)
        rest = block.size - size
        split = rest >= MIN_BLOCK_BYTES if small else rest > SMALL_SIZE_BYTES  # should_split
        if split:
            tail = Block(block.segment, block.address + size, rest, stream, small,
                         prev=block, next=block.next)
            if block.next is not None:
                block.next.prev = tail
            block.next, block.size = tail, size
            self.free_blocks.append(tail)
        block.allocated = True
        self.allocated_bytes += block.size
        self.allocated_peak_bytes = max(self.allocated_peak_bytes, self.allocated_bytes)
        self._handles += 1
        self.live[self._handles] = block
        return self._handles

    def free(self, handle: int) -> None:
        block = self.live.pop(handle)
        block.allocated = False
        self.allocated_bytes -= block.size
        prev, nxt = block.prev, block.next
        if prev is not None and not prev.allocated:  # merge into the free block before it
            self.free_blocks.remove(prev)
            prev.size += block.size
            prev.next = nxt
            if nxt is not None:
                nxt.prev = prev
            block = prev
        if nxt is not None and not nxt.allocated:  # and absorb the free block after it
            self.free_blocks.remove(nxt)
            block.size += nxt.size
            block.next = nxt.next
            if nxt.next is not None:
                nxt.next.prev = block
        self.free_blocks.append(block)

    def empty_cache(self) -> None:
        """`release_cached_blocks`: return every wholly free segment to the driver."""
        for block in [b for b in self.free_blocks if b.prev is None and b.next is None]:
            self.free_blocks.remove(block)
            self.reserved_bytes -= block.size

    def _new_segment(self, nbytes: int, stream: str, small: bool, what: str) -> Block:
        self._segments += 1
        block = Block(self._segments, self._next_address, nbytes, stream, small)
        self._next_address += nbytes
        self.reserved_bytes += nbytes
        if self.reserved_bytes > self.reserved_peak_bytes:
            self.reserved_peak_bytes, self.reserved_peak_at = self.reserved_bytes, what
        return block
