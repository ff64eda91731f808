"""Submit jobs by writing to Kafka directly: for pipelines that already speak Kafka, not gRPC.

    from frenzy.pipeline import produce_job
    job_id = produce_job("examples/jobs/gpt2.yaml", job_id="nightly-2026-12-03")

The record is what SubmitJob publishes: a JobSubmitted envelope (protobuf), keyed by the job id,
on frenzy.jobs.submitted in FRENZY_NAMESPACE. The spec is validated here first, so a bad field
raises SpecError naming it instead of becoming a dead letter. Producing a known job id again is
harmless: the orchestrator ignores a job id it knows, so a retried pipeline step is idempotent
when its job id comes from the pipeline run.

Signing is the security issue's: `sign(key, value)` returns headers to add to the record (an
HMAC signature header), so a deployment that checks signatures passes it its signer. A pipeline
that cannot import frenzy writes JSON instead: examples/pipelines/produce_job.py.
"""
from __future__ import annotations

import asyncio
import time
import uuid
from typing import Callable

from aiokafka import AIOKafkaProducer

from frenzy import events, topics
from frenzy.client import SpecLike, to_spec
from frenzy.config import BusSettings, bootstrap
from frenzy.jobspec import SpecError, resolve_spec
from frenzy.v1 import events_pb2

# (record key, record value) -> headers to add, e.g. [("x-frenzy-signature", b"...")].
RecordSigner = Callable[[bytes, bytes], events.Headers]


def new_job_id() -> str:
    return f"job-{uuid.uuid4().hex[:10]}"


def job_submitted_record(spec: SpecLike, job_id: str, sign: RecordSigner | None = None
                         ) -> tuple[bytes, bytes, events.Headers]:
    """The (key, value, headers) of a JobSubmitted record: pure, so it is tested without a broker."""
    proto = to_spec(spec)
    try:
        resolve_spec(proto)
    except SpecError as err:
        raise SpecError(f"spec.{err.field}", str(err).split(": ", 1)[-1]) from None
    payload = events_pb2.JobSubmitted(job_id=job_id, spec=proto)
    payload.submitted_at.FromNanoseconds(time.time_ns())
    value, headers = events.encode(events.envelope(payload, trace_id=job_id, producer="pipeline"))
    key = job_id.encode()
    return key, value, headers + (sign(key, value) if sign else [])


async def produce_job_async(spec: SpecLike, job_id: str = "", *, bootstrap_servers: str = "",
                            namespace: str | None = None, sign: RecordSigner | None = None) -> str:
    """produce_job for code already inside an event loop."""
    settings = BusSettings()
    job_id = job_id or new_job_id()
    key, value, headers = job_submitted_record(spec, job_id, sign)
    prefix = topics.namespace_prefix(settings.namespace if namespace is None else namespace)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap_servers or bootstrap(settings), acks="all",
                                enable_idempotence=False, client_id="frenzy-pipeline")
    await producer.start()
    try:
        await producer.send_and_wait(prefix + topics.JOBS_SUBMITTED.name, value, key=key, headers=headers)
    finally:
        await producer.stop()
    return job_id


def produce_job(spec: SpecLike, job_id: str = "", *, bootstrap_servers: str = "",
                namespace: str | None = None, sign: RecordSigner | None = None) -> str:
    """Validate a spec and write it to frenzy.jobs.submitted; returns the job id.

    spec: a dict, a YAML path or string, or a JobSpec. bootstrap_servers: default
    FRENZY_KAFKA_BOOTSTRAP / KAFKA_BOOTSTRAP. namespace: default FRENZY_NAMESPACE.
    """
    return asyncio.run(produce_job_async(spec, job_id, bootstrap_servers=bootstrap_servers,
                                         namespace=namespace, sign=sign))
