"""Reading a state topic back to its latest record per key, on the real broker."""
from __future__ import annotations

import asyncio
import uuid

import pytest

from frenzy import topics
from frenzy.bus import Bus
from frenzy.config import BusSettings
from frenzy.statestore import read_state
from frenzy.v1 import events_pb2, types_pb2

pytestmark = pytest.mark.e2e


def job_record(job_id: str, state: int) -> events_pb2.JobRecordState:
    return events_pb2.JobRecordState(job=types_pb2.Job(id=job_id, state=state))


def test_latest_record_per_key_wins_and_tombstones_delete(kafka_bootstrap):
    async def go() -> tuple[dict, dict]:
        bus = Bus("statestore-test", BusSettings(kafka_bootstrap=kafka_bootstrap,
                                                 namespace=f"state{uuid.uuid4().hex[:8]}"))
        await bus.start()
        try:
            name = bus.topic_name(topics.ORCHESTRATOR_STATE)
            parts = topics.ORCHESTRATOR_STATE.partitions
            # Many keys, so every partition holds some; batched, as the orchestrator writes them.
            await bus.publish_many([(topics.ORCHESTRATOR_STATE, f"job/j{i}", job_record(f"j{i}", types_pb2.QUEUED))
                                    for i in range(40)])
            first = await read_state(bus.bootstrap, bus.producer, name, parts)  # leaves markers behind
            await bus.publish_many([(topics.ORCHESTRATOR_STATE, f"job/j{i}", job_record(f"j{i}", types_pb2.RUNNING))
                                    for i in range(0, 40, 2)])
            await bus.publish_many([(topics.ORCHESTRATOR_STATE, "job/j1", None)])
            second = await read_state(bus.bootstrap, bus.producer, name, parts)
            return first, second
        finally:
            await bus.stop()

    first, second = asyncio.run(go())
    assert {k: v.job_record_state.job.state for k, v in first.items()} == \
        {f"job/j{i}": types_pb2.QUEUED for i in range(40)}
    expected = {f"job/j{i}": types_pb2.RUNNING if i % 2 == 0 else types_pb2.QUEUED
                for i in range(40) if i != 1}
    assert {k: v.job_record_state.job.state for k, v in second.items()} == expected


def test_poison_records_are_skipped_not_fatal(kafka_bootstrap):
    """A non-UTF-8 key or an undecodable value on a state topic used to crash the orchestrator
    and the scheduler on every restart; now the good records around it are read back."""
    async def go() -> dict:
        bus = Bus("statestore-test", BusSettings(kafka_bootstrap=kafka_bootstrap,
                                                 namespace=f"poison{uuid.uuid4().hex[:8]}"))
        await bus.start()
        try:
            name = bus.topic_name(topics.ORCHESTRATOR_STATE)
            await bus.publish_many([(topics.ORCHESTRATOR_STATE, f"job/a{i}", job_record(f"a{i}", types_pb2.QUEUED))
                                    for i in range(8)])
            for partition in range(topics.ORCHESTRATOR_STATE.partitions):
                await bus.producer.send_and_wait(name, b"x", key=b"\xff\xfejob", partition=partition)
                await bus.producer.send_and_wait(name, b"\xff not protobuf", key=b"job/bad",
                                                 partition=partition)
            await bus.publish_many([(topics.ORCHESTRATOR_STATE, f"job/b{i}", job_record(f"b{i}", types_pb2.QUEUED))
                                    for i in range(8)])
            return await read_state(bus.bootstrap, bus.producer, name, topics.ORCHESTRATOR_STATE.partitions)
        finally:
            await bus.stop()

    state = asyncio.run(go())
    assert set(state) == {f"job/a{i}" for i in range(8)} | {f"job/b{i}" for i in range(8)}
