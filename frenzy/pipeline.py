"""Submit jobs by writing to Kafka directly: for pipelines that already speak Kafka, not gRPC.

    from frenzy.pipeline import produce_job
    job_id = produce_job("examples/jobs/gpt2.yaml", job_id="nightly-2026-12-03")

The record is what SubmitJob publishes: a JobSubmitted envelope (protobuf), keyed by the job id,
on frenzy.jobs.submitted in FRENZY_NAMESPACE. The spec is validated here first, so a bad field
raises SpecError naming it instead of becoming a dead letter. Producing a known job id again is
harmless: the orchestrator ignores a job id it knows, so a retried pipeline step is idempotent
when its job id comes from the pipeline run.

The orchestrator dead-letters unsigned records: pass the tenant's pipeline key
(`pipeline_key="<id>.<secret>"` as `frenzy token create --kind pipeline` prints it, default
FRENZY_PIPELINE_KEY) and the record carries its HMAC signature (frenzy/security/signing.py). `sign`
is the general hook: (key, value) -> headers to add. A pipeline that cannot import frenzy signs
and writes the record itself: examples/pipelines/produce_job.py.
"""
from __future__ import annotations

import asyncio
import os
import time
import uuid
from typing import Callable

from aiokafka import AIOKafkaProducer

from frenzy import events, topics
from frenzy.client import SpecLike, to_spec
from frenzy.config import BusSettings, bootstrap
from frenzy.jobspec import SpecError, resolve_spec
from frenzy.security.signing import pipeline_headers
from frenzy.v1 import events_pb2

# (record key, record value) -> headers to add, e.g. [("x-frenzy-signature", b"...")].
RecordSigner = Callable[[bytes, bytes], events.Headers]


def pipeline_signer(pipeline_key: str) -> RecordSigner:
    """A signer for JobSubmitted records from a pipeline key "<id>.<secret>"."""
    key_id, dot, secret = pipeline_key.partition(".")
    if not dot or not key_id or not secret:
        raise SpecError("pipeline_key", "expected <id>.<secret> as `frenzy token create --kind "
                                        "pipeline` prints it")
    return lambda key, value: pipeline_headers(key_id, secret.encode(), topics.JOBS_SUBMITTED.name,
                                               key, value)


def _signer(sign: RecordSigner | None, pipeline_key: str | None) -> RecordSigner | None:
    key = pipeline_key if pipeline_key is not None else os.environ.get("FRENZY_PIPELINE_KEY", "")
    return sign or (pipeline_signer(key) if key else None)


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
                            namespace: str | None = None, sign: RecordSigner | None = None,
                            pipeline_key: str | None = None) -> str:
    """produce_job for code already inside an event loop."""
    settings = BusSettings()
    job_id = job_id or new_job_id()
    key, value, headers = job_submitted_record(spec, job_id, _signer(sign, pipeline_key))
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
                namespace: str | None = None, sign: RecordSigner | None = None,
                pipeline_key: str | None = None) -> str:
    """Validate a spec and write it to frenzy.jobs.submitted; returns the job id.

    spec: a dict, a YAML path or string, or a JobSpec. bootstrap_servers: default
    FRENZY_KAFKA_BOOTSTRAP / KAFKA_BOOTSTRAP. namespace: default FRENZY_NAMESPACE.
    """
    return asyncio.run(produce_job_async(spec, job_id, bootstrap_servers=bootstrap_servers,
                                         namespace=namespace, sign=sign,
                                         pipeline_key=pipeline_key))
