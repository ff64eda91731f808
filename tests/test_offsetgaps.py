"""A consumer never moves past a record it has not seen: holes in a partition's offsets are
fetched again (frenzy/offsetgaps.py), unit by unit and through the bus on the real broker."""
from __future__ import annotations

import asyncio
import uuid

import pytest

from frenzy import events, topics
from frenzy.bus import Bus
from frenzy.config import BusSettings
from frenzy.offsetgaps import ACCEPT, HANDLE, NEW_HOLE, REFETCH, OffsetGaps
from frenzy.v1 import events_pb2, types_pb2


def test_a_hole_is_fetched_again_until_it_fills_or_is_waited_out():
    gaps = OffsetGaps(wait_s=2.0)
    assert gaps.check("p", 7, now_s=0.0) == HANDLE  # nothing expected yet: a consumer's first record
    gaps.handled("p", 7)
    assert gaps.check("p", 8, now_s=0.1) == HANDLE
    gaps.handled("p", 8)
    assert gaps.check("p", 8, now_s=0.2) == HANDLE  # a redelivery is not a hole
    assert gaps.check("p", 11, now_s=1.0) == NEW_HOLE
    assert gaps.expected["p"] == 9
    assert gaps.check("p", 11, now_s=2.9) == REFETCH
    assert gaps.check("p", 11, now_s=3.0) == ACCEPT
    gaps.handled("p", 9)  # the hole filled
    assert gaps.check("p", 11, now_s=3.1) == NEW_HOLE  # a new hole, timed afresh
    assert gaps.check("q", 11, now_s=3.1) == HANDLE  # partitions are independent
    gaps.forget("p")
    assert gaps.check("p", 50, now_s=3.2) == HANDLE


@pytest.mark.e2e
def test_the_bus_consumer_goes_back_for_records_a_fetch_skipped(kafka_bootstrap):
    """The consumer's position is moved past two records while it runs, as a fetch that returned
    a later batch alone moves it on the embedded broker; it must still handle every record, in
    order. Without the hole check it handles 0, 1, 2, 5, 6, 7."""
    async def go() -> list[int]:
        settings = BusSettings(kafka_bootstrap=kafka_bootstrap, namespace=f"holes{uuid.uuid4().hex[:8]}",
                               offset_hole_wait_s=30.0)
        bus = Bus("holes-test", settings)
        await bus.start()
        seen: list[int] = []
        first_three = asyncio.Event()

        async def on_status(env: events_pb2.Envelope, key: str) -> None:
            seen.append(int(env.job_status_changed.reason))
            if len(seen) == 3:
                first_three.set()

        def status(i: int) -> events_pb2.JobStatusChanged:
            return events_pb2.JobStatusChanged(job_id="j", state=types_pb2.RUNNING, reason=str(i))

        consumer = bus.consumer("holes", topics.JOBS_STATUS)
        ready = asyncio.Event()
        task = asyncio.create_task(bus.run_consumer(consumer, "holes", {"job_status_changed": on_status},
                                                    ready=ready))
        try:
            await asyncio.wait_for(ready.wait(), 60)
            await bus.publish_many([(topics.JOBS_STATUS, "j", status(i)) for i in range(3)])
            await asyncio.wait_for(first_three.wait(), 60)
            tp = [tp for tp in consumer.assignment() if await consumer.position(tp) == 3][0]
            consumer.seek(tp, 5)  # the next fetch starts past offsets 3 and 4
            await bus.publish_many([(topics.JOBS_STATUS, "j", status(i)) for i in range(3, 8)])
            async with asyncio.timeout(60):
                while len(seen) < 8:
                    await asyncio.sleep(0.05)
            return seen
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await bus.stop()

    assert asyncio.run(go()) == list(range(8))



@pytest.mark.e2e
def test_a_plain_reader_goes_back_for_records_a_fetch_skipped(kafka_bootstrap):
    """The same for a reader outside the bus (log streaming, the fuzz harness's dead-letter
    reader): `records_in_order` returns every record in order although the reader was moved past
    two of them; without it the reader returns 0, 1, 2, 5, 6, 7."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from frenzy.bus import partition_for_key, records_in_order

    async def go() -> list[int]:
        settings = BusSettings(kafka_bootstrap=kafka_bootstrap, namespace=f"holes{uuid.uuid4().hex[:8]}")
        bus = Bus("holes-plain-test", settings)
        await bus.start()
        topic = bus.topic_name(topics.JOBS_STATUS)
        consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=None,
                                    enable_auto_commit=False)
        try:
            await bus.publish_many([(topics.JOBS_STATUS, "j", events_pb2.JobStatusChanged(
                job_id="j", reason=str(i))) for i in range(8)])
            partitions = await bus.producer.partitions_for(topic)
            await consumer.start()
            tp = TopicPartition(topic, partition_for_key("j", len(partitions)))
            consumer.assign([tp])
            gaps = OffsetGaps(wait_s=30.0)
            gaps.expected[tp] = 0
            seen: list[int] = []
            consumer.seek(tp, 0)
            first = await consumer.getmany(tp, timeout_ms=5000, max_records=3)
            seen += [int(events.decode(r.value, r.headers).job_status_changed.reason)
                     for r in await records_in_order(consumer, gaps, first, "test")]
            consumer.seek(tp, 5)  # the next fetch starts past offsets 3 and 4
            async with asyncio.timeout(60):
                while len(seen) < 8:
                    batch = await consumer.getmany(tp, timeout_ms=200)
                    seen += [int(events.decode(r.value, r.headers).job_status_changed.reason)
                             for r in await records_in_order(consumer, gaps, batch, "test")]
            return seen
        finally:
            await consumer.stop()
            await bus.stop()

    assert asyncio.run(go()) == list(range(8))
