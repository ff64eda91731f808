"""Records are size-checked before they are produced: an oversized one fails with its topic and
key named, and nothing of a batch is sent (no broker needed: the check comes first)."""
from __future__ import annotations

import asyncio

import pytest

from frenzy import topics
from frenzy.bus import Bus, RecordTooLarge
from frenzy.config import BusSettings
from frenzy.v1 import events_pb2, types_pb2


class _NoProducer:
    def __getattr__(self, name):
        raise AssertionError("nothing may be sent")


def bus() -> Bus:
    b = Bus("limits-test", BusSettings(kafka_bootstrap="127.0.0.1:1", max_record_bytes=10_000))
    b.producer = _NoProducer()  # type: ignore[assignment]
    return b


def big_status() -> events_pb2.JobStatusChanged:
    return events_pb2.JobStatusChanged(job_id="j", reason="x" * 20_000)


def test_an_oversized_record_is_refused_naming_topic_and_key():
    with pytest.raises(RecordTooLarge, match="frenzy.jobs.status.*'j'.*more than 10000"):
        asyncio.run(bus().publish(topics.JOBS_STATUS, "j", big_status()))


def test_a_batch_with_one_oversized_record_sends_nothing():
    small = events_pb2.JobStatusChanged(job_id="k", state=types_pb2.RUNNING)
    with pytest.raises(RecordTooLarge):
        asyncio.run(bus().publish_many([(topics.JOBS_STATUS, "k", small),
                                        (topics.JOBS_STATUS, "j", big_status())]))
