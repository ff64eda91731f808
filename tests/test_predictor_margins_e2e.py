"""The predictor applies margins learned from the error recorder's table, read from the table's
changelog topic on the real broker (records written here as the recorder's faust table writes
them: raw key "<model>|<gpu_type>", JSON value)."""
from __future__ import annotations

import asyncio
import json
import uuid

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from frenzy import topics
from frenzy.bus import Bus
from frenzy.config import BusSettings
from frenzy.jobspec import JobSpecModel
from frenzy.v1 import events_pb2
from frenzy_predictor.error_table import changelog_topic, margin_key
from frenzy_predictor.margins import MarginBook
from frenzy_predictor.service import PredictorService

pytestmark = pytest.mark.e2e


def test_margin_book_skips_garbage_and_honours_tombstones():
    book = MarginBook("unused:9092", "t")
    record = {"framework": "frenzy", "family": "gpt2", "gpu_type": "T4", "ratios": [1.2] * 5}
    book.apply(b"gpt2|T4", json.dumps(record).encode())
    book.apply(b"gpt2-xl|T4", b"{not json")
    book.apply(b"x|T4", b"[1, 2]")
    assert book.margins() == {margin_key("frenzy", "gpt2", "T4"): 1.2}
    book.apply(b"gpt2|T4", None)
    assert book.margins() == {}


async def _planned_with_recorded_margin(bootstrap: str) -> events_pb2.JobPlanned:
    settings = BusSettings(kafka_bootstrap=bootstrap, namespace=f"margin{uuid.uuid4().hex[:8]}")
    bus = Bus("margin-test", settings)
    changelog = changelog_topic(bus.prefix)
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(changelog, num_partitions=1, replication_factor=1)])
    finally:
        await admin.close()
    await bus.start()
    stop = asyncio.Event()
    service = PredictorService(Bus("predictor", settings))
    running = asyncio.create_task(service.run(stop))
    planned_consumer = AIOKafkaConsumer(bus.topic_name(topics.JOBS_PLANNED), bootstrap_servers=bootstrap,
                                        auto_offset_reset="earliest", enable_auto_commit=False)
    await planned_consumer.start()
    try:
        record = {"jobs": 6, "framework": "frenzy", "family": "gpt2", "gpu_type": "A100-80GB",
                  "ratios": [1.0, 1.1, 1.2, 1.3, 1.25, 1.05]}
        await bus.producer.send_and_wait(changelog, json.dumps(record).encode(),
                                         key=b"gpt2|A100-80GB")
        for _ in range(200):  # the predictor has read the table
            if service.margin_book.margins():
                break
            await asyncio.sleep(0.05)
        spec = JobSpecModel.model_validate({
            "name": "m", "model": "gpt2", "constraints": {"gpu_types": ["A100-80GB"]},
            "training": {"seq_len": 1024, "global_batch_size": 64, "steps": 10}}).to_proto()
        await bus.publish(topics.JOBS_SUBMITTED, "job-m", events_pb2.JobSubmitted(job_id="job-m", spec=spec))
        async with asyncio.timeout(30):
            while True:
                for records in (await planned_consumer.getmany(timeout_ms=200)).values():
                    for r in records:
                        from frenzy import events
                        env = events.decode(r.value, list(r.headers or []))
                        if env.type == "job_planned":
                            return env.job_planned
    finally:
        stop.set()
        await asyncio.wait_for(running, timeout=15)
        await planned_consumer.stop()
        await bus.stop()


def test_the_predictor_plans_with_the_margin_learned_from_the_recorders_table(kafka_bootstrap):
    planned = asyncio.run(_planned_with_recorded_margin(kafka_bootstrap))
    assert planned.options
    assert all(o.memory_margin == pytest.approx(1.3) for o in planned.options)
    assert all(o.peak_allocated_bytes < o.peak_reserved_bytes < o.peak_bytes_per_gpu
               for o in planned.options)
