"""A pipeline step that trains: submit a job to Frenzy, wait for it, and hand the outcome on.

For Airflow, Kubeflow, Argo or a Makefile: it exits 0 when the job succeeded and 1 when it did not,
prints the job's state changes as they happen, and writes a JSON summary (--output) for the next
step. Give --job-id a value derived from the pipeline run: if the step is retried, SubmitJob with
a known id is idempotent, so the retry waits for the same job instead of training twice.

    FRENZY_ADDR=127.0.0.1:50051 python examples/pipelines/train_step.py examples/jobs/gpt2.yaml \\
        --job-id run-42-train --output train.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import grpc

from frenzy.client import FrenzyClient
from frenzy.jobspec import SpecError, load_spec_file
from frenzy.v1 import types_pb2

STATE = types_pb2.JobState.Name


def summary(job: types_pb2.Job) -> dict:
    seconds = lambda ts: ts.ToNanoseconds() / 1e9 if ts.seconds else None  # noqa: E731
    started, finished = seconds(job.started_at), seconds(job.finished_at)
    return {"job_id": job.id, "state": STATE(job.state), "reason": job.reason,
            "gpu_type": job.option.gpu_type, "num_gpus": job.option.num_gpus,
            "steps": job.progress.step, "loss": job.progress.loss,
            "run_s": finished - started if started and finished else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("spec", type=Path, help="job-spec YAML")
    parser.add_argument("--job-id", default="", help="a stable id makes a retried step idempotent")
    parser.add_argument("--output", type=Path, help="write the job's summary here as JSON")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds to wait for the job")
    args = parser.parse_args()
    try:
        spec = load_spec_file(args.spec)
    except SpecError as err:
        print(f"train_step: invalid spec {args.spec}: {err}", file=sys.stderr)
        return 2
    with FrenzyClient() as client:
        job_id = client.submit(spec, job_id=args.job_id)
        print(f"submitted {job_id}", flush=True)
        try:
            for job in client.watch(job_id, timeout_s=args.timeout):
                print(f"{job_id} {STATE(job.state)} {job.reason}", flush=True)
        except grpc.RpcError as err:
            if err.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
                raise
            print(f"train_step: {job_id} not finished after {args.timeout:.0f}s", file=sys.stderr)
        job = client.get(job_id)
    if args.output:
        args.output.write_text(json.dumps(summary(job), indent=2))
    return 0 if job.state == types_pb2.SUCCEEDED else 1


if __name__ == "__main__":
    sys.exit(main())
