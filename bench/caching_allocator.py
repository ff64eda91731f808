"""A small model of PyTorch's CUDA caching allocator (torch 2.2), for allocation-order replays.

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
With expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, `CachingAllocator(
expandable_segments=True)`): one segment per stream and pool, grown by mapping pages (the
class docstring). Not modelled: max_split_size_mb and the other PYTORCH_CUDA_ALLOC_CONF
options, the retry that frees cached blocks when cudaMalloc fails (the device's
capacity), and frees deferred by `record_stream` (a block recorded on another stream returns
to its pool only when that stream's work is done; here every free is immediate).
"""
from __future__ import annotations

from dataclasses import dataclass, field

MIN_BLOCK_BYTES = 512           # kMinBlockSize
SMALL_SIZE_BYTES = 1 << 20      # kSmallSize: the largest request of the small pool
SMALL_BUFFER_BYTES = 2 << 20    # kSmallBuffer: a small pool's segment
MIN_LARGE_ALLOC_BYTES = 10 << 20  # kMinLargeAlloc: requests below it get a kLargeBuffer segment
LARGE_BUFFER_BYTES = 20 << 20   # kLargeBuffer
ROUND_LARGE_BYTES = 2 << 20     # kRoundLarge
EXPANDABLE_ADDRESS_BYTES = 1 << 40  # an expandable segment's address space (the device's memory)


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
    """A range of one segment: live (allocated), free in its pool, or (in an expandable
    segment) address space with no memory mapped behind it."""
    segment: int
    address: int
    size: int
    stream: str
    small: bool
    allocated: bool = False
    mapped: bool = True
    expandable: bool = False
    prev: Block | None = None
    next: Block | None = None


def _splice_after(block: Block, new: Block) -> None:
    """Put `new` right after `block` in its segment's list."""
    new.prev, new.next = block, block.next
    if block.next is not None:
        block.next.prev = new
    block.next = new


@dataclass
class CachingAllocator:
    """One device's allocator: `malloc` returns a handle, `free` takes it back.

    expandable_segments=True follows PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (Note
    [Expandable Segments]): with no cached block free, `try_allocate_expandable_block` takes
    the lowest-address unmapped range of the stream's segment (with the free block just
    before it, `find_expandable_block`) or a new segment, and `map_block` maps pages of
    kLargeBuffer (20 MiB; kSmallBuffer, 2 MiB, in the small pool) over it; a mapped range
    merges with free neighbours (`try_merge_blocks`: mapped with mapped only). `empty_cache`
    unmaps the whole pages inside every free block (`unmap_block`)."""
    expandable_segments: bool = False
    free_blocks: list[Block] = field(default_factory=list)
    unmapped: list[Block] = field(default_factory=list)
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
        elif self.expandable_segments:
            block = self._expand(size, stream, small, what)
        else:
            block = self._new_segment(segment_size(size), stream, small, what)
        rest = block.size - size
        split = rest >= MIN_BLOCK_BYTES if small else rest > SMALL_SIZE_BYTES  # should_split
        if split:
            tail = Block(block.segment, block.address + size, rest, stream, small,
                         expandable=block.expandable)
            _splice_after(block, tail)
            block.size = size
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
        self.free_blocks.append(self._merge_free_neighbours(block))

    def empty_cache(self) -> None:
        """`release_cached_blocks`: return every wholly free segment to the driver, and unmap
        the whole pages inside every free block of an expandable segment."""
        for block in list(self.free_blocks):
            if block.expandable:
                self._unmap(block)
            elif block.prev is None and block.next is None:
                self.free_blocks.remove(block)
                self.reserved_bytes -= block.size

    def _merge_free_neighbours(self, block: Block) -> Block:
        """`try_merge_blocks` with the block before and after: free, and mapped alike."""
        for other in (block.prev, block.next):
            if other is None or other.allocated or other.mapped != block.mapped:
                continue
            (self.free_blocks if other.mapped else self.unmapped).remove(other)
            first, second = (other, block) if other is block.prev else (block, other)
            first.size += second.size
            first.next = second.next
            if second.next is not None:
                second.next.prev = first
            block = first
        return block

    def _new_segment(self, nbytes: int, stream: str, small: bool, what: str) -> Block:
        self._segments += 1
        block = Block(self._segments, self._next_address, nbytes, stream, small)
        self._next_address += nbytes
        self._reserve(nbytes, what)
        return block

    def _reserve(self, nbytes: int, what: str) -> None:
        self.reserved_bytes += nbytes
        if self.reserved_bytes > self.reserved_peak_bytes:
            self.reserved_peak_bytes, self.reserved_peak_at = self.reserved_bytes, what

    def _expand(self, size: int, stream: str, small: bool, what: str) -> Block:
        """`try_allocate_expandable_block`: a free block of at least `size`, mapped for it."""
        candidate = None
        for block in sorted((b for b in self.unmapped if b.stream == stream and b.small == small),
                            key=lambda b: b.address):  # find_expandable_block
            start = block.prev if block.prev is not None and not block.prev.allocated else block
            room, cursor = 0, start
            while cursor is not None and not cursor.allocated and room < size:
                room, cursor = room + cursor.size, cursor.next
            if room >= size:
                candidate = start
                break
        if candidate is None:  # a new segment: address space for the whole device
            self._segments += 1
            candidate = Block(self._segments, self._next_address, EXPANDABLE_ADDRESS_BYTES,
                              stream, small, mapped=False, expandable=True)
            self._next_address += EXPANDABLE_ADDRESS_BYTES
            self.unmapped.append(candidate)
        if not candidate.mapped:
            candidate = self._map(candidate, min(candidate.size, size), what)
        else:
            self.free_blocks.remove(candidate)
        while candidate.size < size:
            self.free_blocks.append(candidate)
            candidate = self._map(candidate.next, min(size - candidate.size, candidate.next.size),
                                  what)  # merged with the free candidate before it
        return candidate

    def _map(self, block: Block, nbytes: int, what: str) -> Block:
        """`map_block`: map whole pages from the start of an unmapped block; the mapped part
        merges with free neighbours and is returned out of the free list."""
        page = SMALL_BUFFER_BYTES if block.small else LARGE_BUFFER_BYTES
        mapped = min(block.size, page * -(-nbytes // page))
        self.unmapped.remove(block)
        block.mapped = True
        if mapped < block.size:
            rest = Block(block.segment, block.address + mapped, block.size - mapped, block.stream,
                         block.small, mapped=False, expandable=True)
            _splice_after(block, rest)
            block.size = mapped
            self.unmapped.append(rest)
        self._reserve(mapped, what)
        return self._merge_free_neighbours(block)

    def _unmap(self, block: Block) -> None:
        """`unmap_block`: the whole pages inside a free block go back to the driver."""
        page = SMALL_BUFFER_BYTES if block.small else LARGE_BUFFER_BYTES
        seg_start = next(b for b in _segment_blocks(block)).address
        begin = seg_start + page * -(-(block.address - seg_start) // page)
        end = seg_start + page * ((block.address + block.size - seg_start) // page)
        if begin >= end:
            return
        self.free_blocks.remove(block)
        if end < block.address + block.size:
            after = Block(block.segment, end, block.address + block.size - end, block.stream,
                          block.small, expandable=True)
            _splice_after(block, after)
            self.free_blocks.append(after)
        if begin > block.address:
            before = Block(block.segment, block.address, begin - block.address, block.stream,
                           block.small, expandable=True)
            if block.prev is not None:
                _splice_after(block.prev, before)
            else:
                before.next, block.prev = block, before
            self.free_blocks.append(before)
        block.address, block.size, block.mapped = begin, end - begin, False
        self.reserved_bytes -= block.size
        self.unmapped.append(self._merge_free_neighbours(block))


def _segment_blocks(block: Block):
    """The blocks of `block`'s segment, from its start."""
    while block.prev is not None:
        block = block.prev
    while block is not None:
        yield block
        block = block.next
