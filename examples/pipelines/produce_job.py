"""Submit a Frenzy job by writing it to Kafka: what a data pipeline does when it already speaks
Kafka and not gRPC. Needs only aiokafka and PyYAML, not the frenzy package.

The record is a JobSubmitted in protobuf's JSON mapping (proto field names are accepted as they
are, so a job-spec YAML maps one to one), keyed by the job id, on `frenzy.jobs.submitted` (with
FRENZY_NAMESPACE's prefix when the deployment uses one). Producing the same job id again is
harmless: the orchestrator ignores a job id it knows.

    python examples/pipelines/produce_job.py examples/jobs/gpt2.yaml --job-id nightly-2026-12-03
    # prints the job id; follow it with `frenzy watch JOB` or the dashboard
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import uuid

import yaml
from aiokafka import AIOKafkaProducer

TOPIC = "frenzy.jobs.submitted"


def record(spec: dict, job_id: str) -> bytes:
    return json.dumps({"job_id": job_id, "spec": spec}).encode()


async def produce(bootstrap: str, topic: str, job_id: str, value: bytes) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=False)
    await producer.start()
    try:
        await producer.send_and_wait(topic, value, key=job_id.encode(),
                                     headers=[("content-type", b"application/json")])
    finally:
        await producer.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("spec", help="job-spec YAML (examples/jobs/*.yaml)")
    parser.add_argument("--job-id", default="", help="default: a new one")
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092"))
    parser.add_argument("--namespace", default=os.environ.get("FRENZY_NAMESPACE", ""))
    args = parser.parse_args()
    with open(args.spec) as f:
        spec = yaml.safe_load(f)
    job_id = args.job_id or f"job-{uuid.uuid4().hex[:10]}"
    topic = f"{args.namespace}.{TOPIC}" if args.namespace else TOPIC
    asyncio.run(produce(args.bootstrap, topic, job_id, record(spec, job_id)))
    print(job_id)


if __name__ == "__main__":
    main()
