"""Read a compacted state topic back into memory at start-up.

The latest record per key is the state; a record with no value (a tombstone) deletes its key.
We never ask the broker where a partition ends: end offsets are wrong on the embedded broker
after batched produces. Instead the reader writes a marker record of its own to every partition
and reads each partition from the beginning until it meets that marker. Everything written before
the marker was acknowledged, so it has been read by then. This works the same on Apache Kafka.

Anyone with write access can put a record on a state topic. One that is not ours (a key that is
not UTF-8, a value that does not decode) is logged and skipped, so it cannot crash every restart.
"""
from __future__ import annotations

import asyncio
import uuid

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from frenzy import events
from frenzy.logs import get_logger
from frenzy.v1 import events_pb2

MARKER_PREFIX = "marker/"
log = get_logger("statestore")


async def write_markers(producer: AIOKafkaProducer, topic_name: str, partitions: int,
                        marker_id: str) -> None:
    for partition in range(partitions):
        await write_marker(producer, topic_name, partition, marker_id)


async def write_marker(producer: AIOKafkaProducer, topic_name: str, partition: int,
                       marker_id: str) -> None:
    """A record of our own at the partition's end: a reader that meets it has read everything
    acknowledged before it (the module's docstring says why not `end_offsets`)."""
    env = events.envelope(events_pb2.StateMarker(marker_id=marker_id), producer="statestore")
    value, headers = events.encode(env)
    await producer.send_and_wait(topic_name, value, key=f"{MARKER_PREFIX}{partition}".encode(),
                                 partition=partition, headers=headers)


def is_marker(record, marker_id: str) -> bool:
    return bool(record.key) and record.key.startswith(MARKER_PREFIX.encode()) \
        and _marker_id(record) == marker_id


async def read_state(bootstrap_servers: str, producer: AIOKafkaProducer, topic_name: str,
                     partitions: int, timeout_s: float = 60.0,
                     client_options: dict | None = None) -> dict[str, events_pb2.Envelope]:
    """Latest envelope per key (markers and deleted keys left out)."""
    marker_id = uuid.uuid4().hex
    await write_markers(producer, topic_name, partitions, marker_id)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap_servers, group_id=None,
                                enable_auto_commit=False, auto_offset_reset="earliest",
                                fetch_max_wait_ms=50, **(client_options or {}))
    await consumer.start()
    state: dict[str, events_pb2.Envelope | None] = {}
    try:
        assigned = [TopicPartition(topic_name, p) for p in range(partitions)]
        consumer.assign(assigned)
        await consumer.seek_to_beginning(*assigned)
        waiting = set(assigned)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while waiting:
            if loop.time() > deadline:
                raise TimeoutError(f"state topic {topic_name}: marker not seen on "
                                   f"{sorted(tp.partition for tp in waiting)}")
            batch = await consumer.getmany(*waiting, timeout_ms=200, max_records=5000)
            for tp, records in batch.items():
                for record in records:
                    try:
                        key = record.key.decode() if record.key else ""
                    except UnicodeDecodeError:  # a poison record: not one we wrote; skip it
                        log.error("state record with a non-UTF-8 key skipped", key=repr(record.key[:64]),
                                  partition=record.partition, offset=record.offset)
                        continue
                    if key.startswith(MARKER_PREFIX):
                        if _marker_id(record) == marker_id:
                            waiting.discard(tp)
                            consumer.pause(tp)
                            break
                        continue
                    if record.value is None:
                        state[key] = None
                        continue
                    try:
                        state[key] = events.decode(record.value, record.headers)
                    except events.MalformedEvent as err:  # keep the last good record
                        log.error("unreadable state record skipped", key=key, error=str(err),
                                  partition=record.partition, offset=record.offset)
    finally:
        await consumer.stop()
    return {key: env for key, env in state.items() if env is not None}


def _marker_id(record) -> str:
    try:
        return events.decode(record.value, record.headers).state_marker.marker_id
    except events.MalformedEvent:
        return ""
