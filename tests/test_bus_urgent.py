"""Urgent topics in `Bus.run_consumer`: their records are handled ahead of the others fetched
with them, and ones fetched while a long batch is handled are taken between its records;
`before_commit` runs right after them; each partition keeps its order; offsets are committed
only after the whole batch. The consumer here is a stand-in for aiokafka's (the loop's order is
under test, not the broker); the scheduler's reaction on the real broker is measured by
bench/e2e_latency.py."""
from __future__ import annotations

import asyncio
from collections import namedtuple

import pytest
from hypothesis import given, settings, strategies as st

from frenzy import events, topics
from frenzy.bus import URGENT_CHECK_EVERY, Bus, TopicPartition, split_urgent
from frenzy.config import BusSettings
from frenzy.v1 import events_pb2

Record = namedtuple("Record", "topic partition offset key value headers")
STATUS = TopicPartition(topics.JOBS_STATUS.name, 0)
PLANNED = TopicPartition(topics.JOBS_PLANNED.name, 1)
CLUSTER = TopicPartition(topics.CLUSTER_EVENTS.name, 0)


def record(tp: TopicPartition, offset: int) -> Record:
    if tp.topic == topics.CLUSTER_EVENTS.name:
        payload = events_pb2.GpuAvailabilityChanged(node_id=f"n{offset}")
    else:
        payload = events_pb2.JobStatusChanged(job_id=f"{tp.topic}-{offset}")
    value, headers = events.encode(events.envelope(payload))
    return Record(tp.topic, tp.partition, offset, b"k", value, headers)


class FakeConsumer:
    """Serves scripted batches; `arrivals` are urgent records that reach the background
    buffer once the loop has handled a given number of records."""

    def __init__(self, batches: list[dict], arrivals: dict[int, list[Record]] | None = None) -> None:
        self.batches = batches
        self.arrivals = arrivals or {}
        self.buffered: list[Record] = []
        self.handled = 0
        self.log: list[str] = []

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    def assignment(self) -> set[TopicPartition]:
        return {STATUS, PLANNED, CLUSTER}

    async def getmany(self, *partitions, timeout_ms=0, max_records=None) -> dict:
        for at in [n for n in self.arrivals if n <= self.handled]:
            self.buffered += self.arrivals.pop(at)
        if partitions:
            assert set(partitions) == {CLUSTER}
            out, self.buffered = self.buffered, []
            return {CLUSTER: out} if out else {}
        if not self.batches:
            raise asyncio.CancelledError  # the script is over: end the loop
        return self.batches.pop(0)

    async def commit(self) -> None:
        self.log.append("commit")


def run(consumer: FakeConsumer, urgent=(topics.CLUSTER_EVENTS,)) -> list[str]:
    bus = Bus("urgent-test", BusSettings(kafka_bootstrap="127.0.0.1:1"))

    async def on_status(env, key) -> None:
        consumer.handled += 1
        consumer.log.append(env.job_status_changed.job_id)

    async def on_availability(env, key) -> None:
        consumer.handled += 1
        consumer.log.append(env.gpu_availability_changed.node_id)

    async def before_commit() -> None:
        consumer.log.append("policy")

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(bus.run_consumer(consumer, "g", {"job_status_changed": on_status,
                                                     "gpu_availability_changed": on_availability},
                                     started=True, before_commit=before_commit, urgent=urgent))
    return consumer.log


def test_availability_fetched_with_status_events_goes_first_and_the_policy_runs_on_it():
    statuses = [record(STATUS, i) for i in range(5)]
    log = run(FakeConsumer([{STATUS: statuses, CLUSTER: [record(CLUSTER, 0), record(CLUSTER, 1)]}]))
    assert log == ["n0", "n1", "policy", *(f"{STATUS.topic}-{i}" for i in range(5)), "policy", "commit"]


def test_availability_that_arrives_during_a_long_batch_is_taken_within_a_few_records():
    statuses = [record(STATUS, i) for i in range(10 * URGENT_CHECK_EVERY)]
    arrived_after = 3 * URGENT_CHECK_EVERY + 1
    log = run(FakeConsumer([{STATUS: statuses}], {arrived_after: [record(CLUSTER, 7)]}))
    at = log.index("n7")
    assert log[at + 1] == "policy"
    assert at - arrived_after <= URGENT_CHECK_EVERY  # status records handled after it arrived
    assert log[-2:] == ["policy", "commit"] and log.count("commit") == 1


def test_without_urgent_topics_the_batch_keeps_its_order():
    batch = {STATUS: [record(STATUS, i) for i in range(3)], CLUSTER: [record(CLUSTER, 0)]}
    log = run(FakeConsumer([batch], {1: [record(CLUSTER, 9)]}), urgent=())
    assert log == [f"{STATUS.topic}-{i}" for i in range(3)] + ["n0", "policy", "commit"]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.sampled_from([STATUS, PLANNED, CLUSTER]), max_size=40))
def test_split_urgent_keeps_every_record_once_and_each_partition_in_order(order):
    batch: dict[TopicPartition, list[Record]] = {}
    for offset, tp in enumerate(order):
        batch.setdefault(tp, []).append(record(tp, offset))
    first, rest = split_urgent(batch, {CLUSTER.topic})
    assert all(r.topic == CLUSTER.topic for r in first)
    assert all(r.topic != CLUSTER.topic for r in rest)
    assert sorted(r.offset for r in first + rest) == list(range(len(order)))
    for tp in batch:
        mine = [r.offset for r in first + rest if (r.topic, r.partition) == tp]
        assert mine == sorted(mine)
