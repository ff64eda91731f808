"""Checkpoint, resume and live reshape through the whole system: real broker, real services, the
reference trainer as real processes (gloo on CPU). Two 2-GPU simulated nodes."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path
from statistics import mean, median

import pytest

pytest.importorskip("torch")

from frenzy import topics  # noqa: E402
from frenzy.bus import Bus  # noqa: E402
from frenzy.client import FrenzyClient  # noqa: E402
from frenzy.config import BusSettings  # noqa: E402
from frenzy.v1 import events_pb2, types_pb2  # noqa: E402
from frenzy_agent.executor import job_dir_name, job_key  # noqa: E402
from jobwatch import losses, wait_for  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.torch]
GPU_TYPE = "H100-80GB"
EVERY = 5  # checkpoint interval, steps


@pytest.fixture(scope="module")
def cluster(local_cluster):
    return local_cluster(f"elastic{int(time.time())}", "cluster_elastic.yaml", time_scale=None,
                         extra_env={"FRENZY_NODE_TIMEOUT_S": "4", "FRENZY_CHECKPOINT_GRACE_S": "30"})


def spec(name: str, steps: int) -> types_pb2.JobSpec:
    """tiny-gpt2 on 2 GPUs of one node (DP2), a checkpoint every EVERY steps."""
    return types_pb2.JobSpec(
        name=name, model="tiny-gpt2",
        constraints=types_pb2.Constraints(gpu_types=[GPU_TYPE], max_gpus=2, min_gpus=2),
        entrypoint=[sys.executable, "-m", "frenzy_trainer"],
        env={"FRENZY_LR": "3e-3", "FRENZY_DIST_TIMEOUT_S": "60"},
        training=types_pb2.TrainingConfig(seq_len=64, global_batch_size=8, steps=steps,
                                          checkpoint_every_steps=EVERY))


def _publish(cluster, reshape: events_pb2.ReshapeJob) -> None:
    """What the elastic scheduler would publish on frenzy.jobs.placed."""
    async def go() -> None:
        bus = Bus("test-reshape", BusSettings(kafka_bootstrap=cluster.bootstrap,
                                              namespace=cluster.namespace))
        await bus.start()
        try:
            await bus.publish(topics.JOBS_PLACED, reshape.job_id, reshape)
        finally:
            await bus.stop()
    asyncio.run(go())


def _logs(cluster, job_id: str) -> str:
    parts = []
    for log in sorted((cluster.workdir / "agents").glob(f"*/{job_key(job_id)}.*/rank*.log")):
        parts.append(f"--- {log.parent.name}/{log.name}\n{log.read_text(errors='replace')[-1500:]}")
    return "\n".join(parts)


# RESIZE legs after MARP's DP2: (GPUs, plan fields); the checkpoint reshards every time.
LEGS = [(1, {"dp": 1}), (2, {"dp": 1, "tp": 2, "sequence_parallel": True}), (2, {"dp": 1, "pp": 2})]


@pytest.mark.timeout(600)  # five attempts, each starting torch; about 2 min on an idle machine
def test_dp2_resized_to_dp1_tp2_pp2_then_preempted_and_back_to_dp2_with_the_loss_continuing(cluster):
    """Every leg resumes from the checkpoint the previous one saved on checkpoint-now (nothing
    before the decision is redone), trains, and commits a checkpoint under its own plan: DP1,
    then a 2-rank TP run and a 2-stage PP run through the whole system; then a preemption sends
    the job back to the queue, HAS places it on MARP's DP2 plan again, and it finishes."""
    with FrenzyClient(cluster.grpc_address) as client:
        job_id = client.submit(spec("elastic-resize", 120))
        job, seen = wait_for(client, job_id, lambda j: j.HasField("checkpoint_step")
                          and j.checkpoint_step >= EVERY)
        assert job.option.plan.dp == 2, job.option
        first_loss = losses(seen, 0)[0][1]
        for attempt, (gpus, fields) in enumerate(LEGS):
            current = client.get(job_id)
            assert current.attempt == attempt and current.state == types_pb2.RUNNING, current
            option = types_pb2.PlanOption()
            option.CopyFrom(current.option)
            option.num_gpus = gpus
            option.plan.CopyFrom(types_pb2.ParallelPlan(**{
                "micro_batch": option.plan.micro_batch or 1, "zero": option.plan.zero,
                "recompute": option.plan.recompute, "tp": 1, "pp": 1, **fields}))
            node, decided_at = current.assignments[0].node_id, current.progress.step
            _publish(cluster, events_pb2.ReshapeJob(
                job_id=job_id, kind=events_pb2.RESIZE, attempt=attempt, option=option,
                assignments=[types_pb2.GpuAssignment(node_id=node, gpu_indices=list(range(gpus)))]))
            job, more = wait_for(client, job_id, lambda j, a=attempt: j.attempt == a + 1
                              and j.progress.step > j.resumed_from_step > 0
                              and j.checkpoint_step > j.resumed_from_step)
            before = losses(seen, attempt)
            seen += more
            assert job.option.plan == option.plan, (job.option, _logs(cluster, job_id))
            assert job.resumed_from_step >= decided_at, (job.resumed_from_step, decided_at)
            resumed = losses(more, attempt + 1)
            assert resumed and resumed[0][0] > job.resumed_from_step, resumed
            # The loss continues: where the last attempt left it (within noise), clearly below
            # an untrained model's (about ln(vocab), where the job started), which a restart
            # from scratch would show again.
            assert resumed[0][1] < first_loss - 0.2, (first_loss, resumed)
            # One early step can sit well above its neighbours (the loss falls fast here, and
            # where the decision lands moves the batches; test_e2e_live_elastic's run saw 2.6),
            # so compare the median of the first three resumed steps with the last three
            # before, on average.
            assert median(loss for _, loss in resumed[:3]) < \
                mean(loss for _, loss in before[-3:]) + 0.5, (before[-3:], resumed)
        preempted_at = client.get(job_id).progress.step
        _publish(cluster, events_pb2.ReshapeJob(job_id=job_id, kind=events_pb2.PREEMPT,
                                                attempt=len(LEGS)))
        job, more = wait_for(client, job_id, lambda j: j.state == types_pb2.SUCCEEDED, timeout_s=300)
        seen += more
    assert job.attempt == len(LEGS) + 1, (job, _logs(cluster, job_id))
    assert job.resumed_from_step >= preempted_at > 0 and job.option.plan.dp == 2, job
    assert any(s.state == types_pb2.QUEUED and s.reason.startswith("PREEMPTED") for s in more)
    assert job.progress.step == 120
    final = losses(more, len(LEGS) + 1)
    assert final[-1][1] < final[0][1] + 0.1 and final[0][1] < first_loss - 0.5, final
    # Every attempt resumed from the job's directory; once it succeeded, the agents remove it.
    _gone(cluster.workdir / "agents" / "checkpoints" / job_key(job_id))


def _gone(path: Path, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not path.exists(), sorted(p.name for p in path.iterdir())


def _program(name: str, sleep_s: float, **training) -> types_pb2.JobSpec:
    """A user program, not the trainer: commits a checkpoint where the agent says, then fails
    (exit 1, not retried) after `sleep_s`."""
    script = ('d="$FRENZY_CHECKPOINT_URI/step-000000002"; mkdir -p "$d" && echo {} > "$d/COMMITTED"; '
              f'sleep {sleep_s}; exit 1')
    return types_pb2.JobSpec(
        name=name, model="tiny-gpt2", entrypoint=["sh", "-c", script],
        constraints=types_pb2.Constraints(gpu_types=[GPU_TYPE], max_gpus=1),
        training=types_pb2.TrainingConfig(seq_len=64, global_batch_size=8, steps=10, **training))


def test_checkpoints_are_removed_when_a_job_fails_or_is_cancelled_unless_the_spec_keeps_them(
        cluster, tmp_path):
    """Real agents act on the orchestrator's DeleteCheckpoints: the agent's own per-job
    directory goes whole; in a directory the spec named only the step directories go (a note
    beside them and a linked directory outside stay); keep_checkpoints keeps them."""
    named = tmp_path / "named"
    named.mkdir()
    (named / "notes.txt").write_text("mine")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("x")
    (named / "step-000000009").symlink_to(outside, target_is_directory=True)
    root = cluster.workdir / "agents" / "checkpoints"
    with FrenzyClient(cluster.grpc_address) as client:
        own = client.submit(_program("cleanup-own", 0))
        spec_dir = client.submit(_program("cleanup-named", 0, checkpoint_uri=str(named)))
        kept = client.submit(_program("cleanup-kept", 0, keep_checkpoints=True))
        cancelled = client.submit(_program("cleanup-cancelled", 600))
        for job_id in (own, spec_dir, kept):
            job, _ = wait_for(client, job_id, lambda j: j.state == types_pb2.FAILED)
        wait_for(client, cancelled, lambda j: j.state == types_pb2.RUNNING)
        deadline = time.monotonic() + 60
        while not (root / job_key(cancelled) / "step-000000002" / "COMMITTED").exists():
            assert time.monotonic() < deadline, "the cancelled job never wrote its checkpoint"
            time.sleep(0.2)
        client.cancel(cancelled)
    _gone(root / job_key(own))
    _gone(root / job_key(cancelled))
    _gone(named / "step-000000002")
    assert sorted(p.name for p in named.iterdir()) == ["notes.txt", "step-000000009"]
    assert (outside / "precious").read_text() == "x"
    time.sleep(2)  # the kept job's DeleteCheckpoints would have come with the others
    assert (root / job_key(kept) / "step-000000002" / "COMMITTED").exists()


def test_node_killed_after_first_checkpoint_resumes_on_the_other_node_from_that_step(cluster):
    """Last in the module: it kills a node (its agent and the job's processes)."""
    with FrenzyClient(cluster.grpc_address) as client:
        job_id = client.submit(spec("elastic-node-loss", 60))
        job, _ = wait_for(client, job_id, lambda j: j.HasField("checkpoint_step")
                       and j.checkpoint_step >= EVERY)
        node = job.assignments[0].node_id
        killed_at_step = job.progress.step
        killed = time.monotonic()
        cluster.stop_process(f"agent-{node}", signal.SIGKILL)
        for state in (cluster.workdir / "agents" / node).glob(f"{job_dir_name(job_id, 0)}/state.json"):
            os.killpg(json.loads(state.read_text())["pgid"], signal.SIGKILL)
        job, seen = wait_for(client, job_id, lambda j: j.attempt == 1 and j.state == types_pb2.RUNNING
                          and j.progress.step > j.resumed_from_step, timeout_s=240)
        back_s = time.monotonic() - killed
        assert job.assignments[0].node_id != node
        job, _ = wait_for(client, job_id, lambda j: j.state == types_pb2.SUCCEEDED, timeout_s=300)
    assert job.resumed_from_step >= EVERY, job
    redone = killed_at_step - job.resumed_from_step
    assert redone <= 2 * EVERY + 5, (killed_at_step, job.resumed_from_step)  # loose: report latency
    assert job.progress.step == 60 and back_s < 240, back_s
