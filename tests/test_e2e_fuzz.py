"""A short fuzz of a running cluster (bench/fuzz.py runs the long one): hypothesis-generated
gRPC requests and random or mutated records on every topic a service consumes."""
from __future__ import annotations

from pathlib import Path

import pytest

from frenzy.tools.fuzz import run_fuzz

pytestmark = pytest.mark.e2e


def test_fuzzed_requests_and_records_break_nothing(local_cluster):
    cluster = local_cluster("fuzz")
    try:
        report = run_fuzz(cluster, grpc_requests=300, records_per_topic=30, seed=11)
    finally:
        cluster.stop()
    summary = report.summary()
    assert report.grpc_requests >= 300
    assert not report.bad_answers, report.bad_answers[:5]
    assert not report.dead_processes, summary
    assert report.undecodable and not report.missing_dead_letters, report.missing_dead_letters[:5]
    assert report.final_job_state == "SUCCEEDED", summary
    assert not list(Path("/tmp").glob("frenzy-fuzz-pwned"))
