"""Job logs as chunks on Kafka (pure; no I/O): what agents ship and what readers reassemble.

Why Kafka and not a log server on each agent (docs/user-guide.md, "Job logs"): the agent already
publishes to Kafka, a node needs no inbound port, the API checks access in one place, and logs
survive the node that wrote them (a lost node's last lines are often the ones wanted).
"""
from __future__ import annotations

from dataclasses import dataclass, field

# One chunk at most: far below Kafka's default 1 MiB record limit, big enough that a chatty rank
# ships in a few records per interval.
CHUNK_BYTES = 64 * 1024


def chunk_spans(start: int, end: int, chunk_bytes: int = CHUNK_BYTES) -> list[tuple[int, int]]:
    """(offset, length) pieces covering bytes [start, end) of a log."""
    return [(o, min(chunk_bytes, end - o)) for o in range(start, end, chunk_bytes)]


@dataclass
class LogCursor:
    """The next byte offset per (attempt, rank): a reader's memory of what it has shown.

    A restarted agent ships its logs again from the start, and Kafka may deliver a record twice;
    `fresh` returns only the bytes not seen yet. A gap (records dropped by retention) is accepted:
    the reader shows what exists."""

    next_offset: dict[tuple[int, int], int] = field(default_factory=dict)

    def fresh(self, attempt: int, rank: int, offset: int, data: bytes) -> bytes:
        key = (attempt, rank)
        seen = self.next_offset.get(key, 0)
        end = offset + len(data)
        if end <= seen:
            return b""
        self.next_offset[key] = end
        return data[max(0, seen - offset):]


@dataclass
class LineSplitter:
    """Whole lines per rank from chunks that may end mid-line (for prefixed and tail views)."""

    partial: dict[int, bytes] = field(default_factory=dict)

    def feed(self, rank: int, data: bytes) -> list[str]:
        text = self.partial.pop(rank, b"") + data
        *lines, rest = text.split(b"\n")
        if rest:
            self.partial[rank] = rest
        return [line.decode(errors="replace") for line in lines]

    def flush(self) -> list[tuple[int, str]]:
        """The unterminated last line of each rank, at the end of a stream."""
        left = [(rank, data.decode(errors="replace")) for rank, data in sorted(self.partial.items())]
        self.partial.clear()
        return left
