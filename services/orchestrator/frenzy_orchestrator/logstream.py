"""JobService.StreamLogs: a job's rank logs read back from frenzy.jobs.logs (frenzy/joblogs.py).

Each call reads the one partition the job id hashes to, starting at the job's submit time
(Kafka's time index skips older jobs' records), with its own group-less consumer: nothing is
committed, and many readers never rebalance each other. Without follow it ends at the partition's
end as of the call; with follow it ends once the job has ended and the partition has been read to
its end after that, which holds the job's last lines because agents ship them before reporting the
final state. "The end" is a marker record the call writes to the partition (frenzy/statestore.py):
the embedded broker's end offsets are wrong after a batched produce (8 records, end offset 1), and
a stream that trusted them ended after its first fetch.
"""
from __future__ import annotations

import uuid
from typing import AsyncIterator, Callable

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from frenzy import events
from frenzy.bus import partition_for_key, records_in_order
from frenzy.joblogs import LogCursor
from frenzy.offsetgaps import OffsetGaps
from frenzy.statestore import is_marker, write_marker
from frenzy.v1 import types_pb2

POLL_MS = 200
# Records carry the agent's clock and submitted_at the orchestrator's: start this much earlier.
CLOCK_SKEW_MS = 60_000


async def stream_logs(bootstrap: str, producer: AIOKafkaProducer, topic: str, num_partitions: int,
                      job_id: str, since_ms: int,
                      job_ended: Callable[[], bool], *, follow: bool, hole_wait_s: float,
                      rank: int | None = None, attempt: int = 0) -> AsyncIterator[types_pb2.LogChunk]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                fetch_max_wait_ms=POLL_MS, client_id="frenzy-logs")
    await consumer.start()
    try:
        tp = TopicPartition(topic, partition_for_key(job_id, num_partitions))
        consumer.assign([tp])
        found = (await consumer.offsets_for_times({tp: max(0, since_ms - CLOCK_SKEW_MS)})).get(tp)
        if found is None:
            await consumer.seek_to_end(tp)
        else:
            consumer.seek(tp, found.offset)
        cursor = LogCursor()
        # Agents ship at once, so the embedded broker can show a later chunk first: read every
        # offset in turn (frenzy/offsetgaps.py), or a skipped chunk's lines would be lost here.
        gaps = OffsetGaps(hole_wait_s)
        gaps.expected[tp] = await consumer.position(tp)
        end_marker = None if follow else await _mark_end(producer, tp)
        while True:
            batch = await consumer.getmany(tp, timeout_ms=POLL_MS)
            for record in await records_in_order(consumer, gaps, batch, "frenzy-logs"):
                if record.key != job_id.encode():
                    if end_marker is not None and is_marker(record, end_marker):
                        return
                    continue
                try:
                    chunk = events.decode(record.value, record.headers).log_chunk
                except events.MalformedEvent:
                    continue
                if (rank is not None and chunk.rank != rank) or (attempt and chunk.attempt != attempt):
                    continue
                data = cursor.fresh(chunk.attempt, chunk.rank, chunk.offset, chunk.data)
                if data:
                    yield types_pb2.LogChunk(job_id=job_id, attempt=chunk.attempt, rank=chunk.rank,
                                             node_id=chunk.node_id,
                                             offset=chunk.offset + len(chunk.data) - len(data), data=data)
            if end_marker is None and job_ended():
                end_marker = await _mark_end(producer, tp)
    finally:
        await consumer.stop()


async def _mark_end(producer: AIOKafkaProducer, tp: TopicPartition) -> str:
    marker_id = uuid.uuid4().hex
    await write_marker(producer, tp.topic, tp.partition, marker_id)
    return marker_id


