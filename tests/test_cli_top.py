"""`frenzy top`: the frame from API answers (pure), and the live view against a real cluster,
drawn into a recorded terminal and as `--once` from the command line."""
from __future__ import annotations

import io
import os
import subprocess
import sys
import time

import pytest
from rich.console import Console

import frenzy
from frenzy.tools.cli_top import Snapshot, frame, job_letters, run_top
from frenzy.v1 import services_pb2, types_pb2



def job(job_id, state, submitted_s, node="", gpus=(), tenant="team-a", **fields) -> types_pb2.Job:
    j = types_pb2.Job(id=job_id, state=state, tenant=tenant, spec=types_pb2.JobSpec(name=job_id, model="gpt2"),
                      **fields)
    j.submitted_at.FromSeconds(submitted_s)
    if node:
        j.assignments.add(node_id=node, gpu_indices=list(gpus))
        j.option.CopyFrom(types_pb2.PlanOption(gpu_type="A100-80GB", num_gpus=len(gpus),
                                               plan=types_pb2.ParallelPlan(dp=len(gpus), tp=1, pp=1)))
    return j


def render(snap: Snapshot) -> str:
    console = Console(file=io.StringIO(), width=200, color_system=None)
    console.print(frame(snap))
    return console.file.getvalue()


def snapshot() -> Snapshot:
    summary = services_pb2.ClusterSummary(nodes_ready=1, nodes_lost=1, gpu_types=[
        services_pb2.GpuTypeSummary(gpu_type="A100-80GB", nodes=2, total=8, free=1, allocated=3,
                                    running_jobs=2, queued_jobs=1)])
    nodes = [types_pb2.Node(id="n1", gpu_type="A100-80GB", gpus_total=4, state=types_pb2.NODE_READY),
             types_pb2.Node(id="n2", gpu_type="A100-80GB", gpus_total=4, state=types_pb2.NODE_LOST)]
    jobs = [job("job-late", types_pb2.RUNNING, 200, "n1", [2]),
            job("job-early", types_pb2.RUNNING, 100, "n1", [0, 1],
                progress=types_pb2.Progress(step=50, steps=100, fraction=0.5)),
            job("job-wait", types_pb2.QUEUED, 900, reason="waiting for GPUs"),
            job("job-done", types_pb2.SUCCEEDED, 50)]
    return Snapshot(summary, nodes, jobs, at_s=1000.0)


def test_holding_jobs_get_letters_in_submit_order_and_their_gpus_show_them():
    snap = snapshot()
    assert job_letters(snap.jobs) == {"job-early": "A", "job-late": "B"}
    text = render(snap)
    n1 = next(line for line in text.splitlines() if "│ n1" in line)
    assert "A A B ·" in n1 and "A=job-early B=job-late" in n1
    n2 = next(line for line in text.splitlines() if "│ n2" in line)
    assert "x x x x" in n2 and "lost" in n2


def test_the_queue_says_how_long_a_job_waits_and_live_jobs_come_before_ended_ones():
    text = render(snapshot())
    rows = [line for line in text.splitlines() if "job-" in line and "=" not in line]
    assert [r.split("│")[2].strip() for r in rows] == ["job-early", "job-late", "job-wait", "job-done"]
    wait = next(r for r in rows if "job-wait" in r)
    assert "waits 1m40s" in wait and "waiting for GPUs" in wait
    assert "50%" in next(r for r in rows if "job-early" in r)
    assert "Jobs: 2 holding GPUs, 1 waiting" in text and "GPUs 3/8 allocated" in text


@pytest.fixture(scope="module")
def cluster(local_cluster):
    return local_cluster("top", time_scale=0.05)


@pytest.mark.e2e
def test_top_redraws_a_running_job_live_and_prints_one_frame_with_once(cluster):
    spec = {"name": "topped", "model": "gpt2",
            "training": {"seq_len": 1024, "global_batch_size": 8, "tokens": 400_000_000}}
    with frenzy.Client(cluster.grpc_address) as client:
        job_id = client.submit(spec)
        deadline = time.monotonic() + 30
        while client.get(job_id).state != types_pb2.RUNNING and time.monotonic() < deadline:
            time.sleep(0.1)
        terminal = Console(file=io.StringIO(), force_terminal=True, width=200, color_system=None)
        run_top(client, terminal, refresh_s=0.2, iterations=3)
        once = subprocess.run([sys.executable, "-m", "frenzy.tools.cli", "top", "--once"], capture_output=True,
                              text=True, timeout=60, env={**os.environ, "FRENZY_ADDR": cluster.grpc_address})
        client.cancel(job_id)
    drawn = terminal.file.getvalue()
    # Three frames (and Live's last redraw on exit), each drawn over the last: cursor up, erase line.
    assert drawn.count("frenzy top") >= 3 and "\x1b[1A" in drawn and "\x1b[2K" in drawn
    assert job_id in drawn and "RUNNING" in drawn and "A=" + job_id in drawn
    assert once.returncode == 0, once.stderr
    assert job_id in once.stdout and once.stdout.count("frenzy top") == 1
    assert cluster.node_ids and all(node in once.stdout for node in cluster.node_ids)
