"""Holes in a partition's offsets: wait for the record that should fill them.

On Apache Kafka a consumer of a topic that is neither compacted nor transactional sees every
offset in turn; a hole there means a record was skipped. The embedded broker (Tansu) can make one:
its produce raises the partition's high watermark first and stores the batch after
(`DynoStore::produce` in tansu-storage/src/dynostore.rs, tansu-io/tansu at e2a6eab), so while a
large batch is still being stored, a smaller one produced just after it by another client can be
stored first, and a fetch in that window returns the later batch alone. The consumer then moves
past the earlier one and never reads it. Seen in CI: an agent's log shows a 513 KiB record
dead-lettered (its produce acknowledged), while the fuzz test's reader of the dead-letter topic,
to which several services were writing at that moment, read the records around it and never it.

So the bus remembers, per partition, the next offset it expects. A record past it is a hole: the
consumer seeks back to the hole and fetches again until the record comes, for at most `wait_s`;
after that the hole is taken as real and logged (a record deleted by retention, a transaction's
control batch). The records after the hole come again after the seek and are handled then, in
order; handlers already tolerate redelivery (at-least-once).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Hashable

HANDLE = "handle"  # no hole: handle the record
NEW_HOLE = "new hole"  # a hole just found: fetch again from `expected` (unless it was filled elsewhere)
REFETCH = "refetch"  # still waiting for the hole to fill: fetch again from `expected`
ACCEPT = "accept"  # waited `wait_s`: take the hole as real and handle the record


@dataclass
class OffsetGaps:
    wait_s: float
    expected: dict[Hashable, int] = field(default_factory=dict)  # partition -> next offset
    since_s: dict[Hashable, float] = field(default_factory=dict)  # partition -> when its hole was found

    def check(self, partition: Hashable, offset: int, now_s: float) -> str:
        expected = self.expected.get(partition)
        if expected is None or offset <= expected:
            return HANDLE
        if partition not in self.since_s:
            self.since_s[partition] = now_s
            return NEW_HOLE
        return REFETCH if now_s - self.since_s[partition] < self.wait_s else ACCEPT

    def handled(self, partition: Hashable, offset: int) -> None:
        self.expected[partition] = offset + 1
        self.since_s.pop(partition, None)

    def forget(self, partition: Hashable) -> None:
        """Another consumer of the group moved the partition on (a rebalance): expect nothing."""
        self.expected.pop(partition, None)
        self.since_s.pop(partition, None)
