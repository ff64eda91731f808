"""Submit a Frenzy job by writing it to Kafka: what a data pipeline does when it already speaks
Kafka and not gRPC. Needs only aiokafka and PyYAML, not the frenzy package.

The record is a JobSubmitted in protobuf's JSON mapping (proto field names are accepted as they
are, so a job-spec YAML maps one to one), keyed by the job id, on `frenzy.jobs.submitted` (with
FRENZY_NAMESPACE's prefix when the deployment uses one). Producing the same job id again is
harmless: the orchestrator ignores a job id it knows.

The record is signed with the tenant's pipeline key (`frenzy token create --kind pipeline`
prints it as KEY_ID.SECRET; here --pipeline-key or FRENZY_PIPELINE_KEY): an HMAC-SHA256 over
the record's logical topic, key, value, expiry and signer (docs/security.md). Unsigned records
are dead-lettered. The few lines in `signature_headers` are all a pipeline in another language
needs to copy.

    FRENZY_PIPELINE_KEY=... python examples/pipelines/produce_job.py examples/jobs/gpt2.yaml --job-id nightly-2026-12-03
    # prints the job id; follow it with `frenzy watch JOB` or the dashboard
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import hmac
import json
import os
import time
import uuid

import yaml
from aiokafka import AIOKafkaProducer

TOPIC = "frenzy.jobs.submitted"


def record(spec: dict, job_id: str) -> bytes:
    return json.dumps({"job_id": job_id, "spec": spec}).encode()


def signature_headers(pipeline_key: str, key: bytes, value: bytes, ttl_s: int = 300) -> list:
    """frenzy.security.signing.pipeline_headers, without the frenzy package: each signed field
    length-prefixed (4 bytes, big-endian), in this order."""
    key_id, _, secret = pipeline_key.partition(".")
    signer, expires = f"tenant/{key_id}", str(int(time.time()) + ttl_s)
    parts = [b"frenzy-record-v1", TOPIC.encode(), key, value, expires.encode(), signer.encode()]
    canonical = b"".join(len(p).to_bytes(4, "big") + p for p in parts)
    mac = hmac.new(secret.encode(), canonical, hashlib.sha256).digest()
    return [("x-frenzy-signer", signer.encode()), ("x-frenzy-expires", expires.encode()),
            ("x-frenzy-hmac", base64.b64encode(mac))]


async def produce(bootstrap: str, topic: str, job_id: str, value: bytes, pipeline_key: str) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=False)
    await producer.start()
    try:
        await producer.send_and_wait(topic, value, key=job_id.encode(),
                                     headers=[("content-type", b"application/json")]
                                     + signature_headers(pipeline_key, job_id.encode(), value))
    finally:
        await producer.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("spec", help="job-spec YAML (examples/jobs/*.yaml)")
    parser.add_argument("--job-id", default="", help="default: a new one")
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092"))
    parser.add_argument("--namespace", default=os.environ.get("FRENZY_NAMESPACE", ""))
    parser.add_argument("--pipeline-key", default=os.environ.get("FRENZY_PIPELINE_KEY", ""),
                        help="KEY_ID.SECRET from `frenzy token create --kind pipeline`")
    args = parser.parse_args()
    if "." not in args.pipeline_key:
        parser.error("--pipeline-key (or FRENZY_PIPELINE_KEY): KEY_ID.SECRET is required")
    with open(args.spec) as f:
        spec = yaml.safe_load(f)
    job_id = args.job_id or f"job-{uuid.uuid4().hex[:10]}"
    topic = f"{args.namespace}.{TOPIC}" if args.namespace else TOPIC
    asyncio.run(produce(args.bootstrap, topic, job_id, record(spec, job_id), args.pipeline_key))
    print(job_id)


if __name__ == "__main__":
    main()
