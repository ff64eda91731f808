"""The reference trainer through the whole system: gRPC submit, MARP plans 2 GPUs, HAS places
them, the agent launches two `python -m frenzy_trainer` ranks (gloo DDP on CPU), progress
flows back through Kafka to the orchestrator and WatchJob."""
from __future__ import annotations

import json
import socket
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
psutil = pytest.importorskip("psutil")

from frenzy.client import FrenzyClient  # noqa: E402
from frenzy.v1 import types_pb2  # noqa: E402
from frenzy_agent.executor import job_dir_name  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.torch]
GPU_TYPE = "H100-80GB"  # the node type in cluster_trainer.yaml
STEPS, SEQ_LEN, GLOBAL_BATCH = 30, 64, 16


@pytest.fixture(scope="module")
def cluster(local_cluster):
    return local_cluster(f"trainer{int(time.time())}", "cluster_trainer.yaml", time_scale=None)


def ddp_spec() -> types_pb2.JobSpec:
    """tiny-gpt2 (~1M parameters) on exactly 2 GPUs of one type: a 2-rank DDP job."""
    constraints = types_pb2.Constraints(gpu_types=[GPU_TYPE], max_gpus=2, min_gpus=2)
    return types_pb2.JobSpec(
        name="ddp-tiny-gpt2", model="tiny-gpt2", constraints=constraints,
        entrypoint=[sys.executable, "-m", "frenzy_trainer"],
        env={"FRENZY_LR": "3e-3", "FRENZY_DIST_TIMEOUT_S": "60"},
        training=types_pb2.TrainingConfig(seq_len=SEQ_LEN, global_batch_size=GLOBAL_BATCH, steps=STEPS))


def trainer_ranks(workdir: Path) -> dict[int, dict[str, str]]:
    """RANK -> rendezvous environment of the job's live `frenzy_trainer` processes."""
    ranks: dict[int, dict[str, str]] = {}
    try:
        state = json.loads((workdir / "state.json").read_text())
    except (OSError, ValueError):
        return ranks
    for pid in state["pids"]:  # the `sh` wrappers that record exit codes
        try:
            for proc in psutil.Process(pid).children(recursive=True):
                if "frenzy_trainer" in " ".join(proc.cmdline()):
                    env = proc.environ()
                    ranks[int(env["RANK"])] = {k: env.get(k, "") for k in (
                        "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "FRENZY_PLAN",
                        "CUDA_VISIBLE_DEVICES")}
        except (psutil.Error, KeyError, ValueError):
            continue
    return ranks


def test_two_rank_ddp_trainer_succeeds_with_falling_loss(cluster):
    with FrenzyClient(cluster.grpc_address) as client:
        job_id = client.submit(ddp_spec())
        snapshots, ranks, gpu_readings = [], {}, []
        for job in client.watch(job_id, timeout_s=120):
            snapshots.append(job)
            if job.state == types_pb2.RUNNING:
                for workdir in (cluster.workdir / "agents").glob(f"*/{job_dir_name(job_id, job.attempt)}"):
                    ranks.update(trainer_ranks(workdir))
                for node in client.list_nodes():
                    gpu_readings += [g.memory_used_bytes for g in node.gpus if g.job_id == job_id]
        job = client.get(job_id)

    assert job.state == types_pb2.SUCCEEDED, f"{job.reason}\n{_logs(cluster, job_id)}"
    # MARP's plan: two GPUs of the node, data parallel over both.
    assert job.option.gpu_type == GPU_TYPE and job.option.num_gpus == 2, job.option
    plan = job.option.plan
    assert (plan.dp, plan.tp, plan.pp) == (2, 1, 1), plan
    assert [len(a.gpu_indices) for a in job.assignments] == [2]
    # Both ranks ran, with the torchrun environment the agent gave them.
    assert set(ranks) == {0, 1}, ranks
    assert {r["WORLD_SIZE"] for r in ranks.values()} == {"2"}
    assert {r["LOCAL_RANK"] for r in ranks.values()} == {"0", "1"}
    assert len({(r["MASTER_ADDR"], r["MASTER_PORT"]) for r in ranks.values()}) == 1
    assert all(json.loads(r["FRENZY_PLAN"])["dp"] == 2 for r in ranks.values())
    assert {r["CUDA_VISIBLE_DEVICES"] for r in ranks.values()} == {""}  # simulated GPUs: CPU + gloo
    # Progress came back through Kafka and WatchJob: steps in order, loss falling.
    progress = [(j.progress.step, j.progress.loss) for j in snapshots if j.progress.step > 0]
    steps = [step for step, _ in progress]
    assert steps == sorted(steps) and steps[-1] == STEPS, steps
    assert steps[0] <= 5, steps  # the early loss was seen
    first_loss, last_loss = progress[0][1], progress[-1][1]
    assert last_loss < first_loss - 0.5, progress
    # The orchestrator's Job.progress: the trainer's last line, with its measured peak memory.
    assert (job.progress.step, job.progress.steps) == (STEPS, STEPS)
    assert job.progress.tokens == STEPS * SEQ_LEN * GLOBAL_BATCH
    assert job.progress.fraction == 1.0 and job.progress.loss == pytest.approx(last_loss)
    assert job.progress.peak_memory_bytes > 0
    # Heartbeats showed the job's GPUs busy, with the measured peak or MARP's prediction.
    measured = {j.progress.peak_memory_bytes for j in snapshots} - {0}
    assert gpu_readings and all(used in measured | {job.option.peak_bytes_per_gpu}
                                for used in gpu_readings), (gpu_readings, measured)


def _logs(cluster, job_id: str) -> str:
    """The job's rank logs (kept when it fails; last lines first, where the exception is) and
    the agent log tail, for the failure message."""
    parts = []
    attempts = job_dir_name(job_id, 0).rsplit(".", 1)[0] + ".*"  # every attempt's directory
    for log in sorted((cluster.workdir / "agents").glob(f"*/{attempts}/rank*.log")):
        text = log.read_text(errors="replace")
        last = "\n".join(text.splitlines()[-3:])
        parts.append(f"--- {log.parent.name}/{log.name} ends: {last}\n{text[-3000:]}")
    for log in sorted((cluster.workdir / "logs").glob("agent-*.log")):
        parts.append(f"--- {log.name}\n{log.read_text(errors='replace')[-2000:]}")
    return "\n".join(parts)


def test_taken_master_port_is_retried_on_a_new_port_and_succeeds(cluster):
    """Something else listens on the port the orchestrator derives for attempt 0: the ranks exit
    RENDEZVOUS, the orchestrator re-queues the job, and attempt 1 (a new port) trains to the end."""
    from frenzy_orchestrator.core import master_port

    job_id = f"job-rdzv{int(time.time() * 1000) % 10**8}"
    spec = ddp_spec()
    spec.training.steps = 5
    with socket.socket() as squatter, FrenzyClient(cluster.grpc_address) as client:
        squatter.bind(("", master_port(job_id, 0)))
        squatter.listen()
        assert client.submit(spec, job_id=job_id) == job_id
        snapshots = list(client.watch(job_id, timeout_s=120))
        job = client.get(job_id)
    assert job.state == types_pb2.SUCCEEDED, f"{job.reason}\n{_logs(cluster, job_id)}"
    assert job.attempt == 1 and job.progress.step == 5
    retried = [s for s in snapshots if s.state == types_pb2.QUEUED and s.attempt == 1]
    assert retried and retried[0].reason.startswith("RENDEZVOUS"), [s.reason for s in snapshots]
    assert f":{master_port(job_id, 0)}" in retried[0].reason
