"""Watching a job through the API until a condition holds, and its processes on this machine:
shared by the e2e tests that follow one job across attempts (elastic, live elastic) and the
tests that look for a job's processes (foundation, failures, executor)."""
from __future__ import annotations

import os

from frenzy.client import FrenzyClient
from frenzy.jobstates import TERMINAL
from frenzy.v1 import types_pb2


def wait_for(client: FrenzyClient, job_id: str, until, timeout_s: float = 240) -> tuple[types_pb2.Job, list]:
    """Watch until `until(job)`; returns that snapshot and all snapshots seen."""
    seen = []
    for job in client.watch(job_id, timeout_s=timeout_s):
        seen.append(job)
        if until(job):
            return job, seen
        if job.state in TERMINAL:
            break
    raise AssertionError(f"job {job_id} ended or timed out first: {seen[-1] if seen else None}")


def losses(snapshots: list[types_pb2.Job], attempt: int) -> list[tuple[int, float]]:
    """(step, loss) of one attempt's RUNNING snapshots, one per step (polling sees a step as
    often as it asks before the next one is reported)."""
    seen: dict[int, float] = {}
    for j in snapshots:
        if j.attempt == attempt and j.progress.step > 0 and j.state == types_pb2.RUNNING:
            seen.setdefault(j.progress.step, j.progress.loss)
    return list(seen.items())


def process_group_exists(pgid: int) -> bool:
    """Any process left in the group, zombies included (`os.killpg` reaches them)."""
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
