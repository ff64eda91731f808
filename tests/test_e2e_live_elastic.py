"""Live elasticity with the defaults (FRENZY_RESHAPE_JOBS on): the scheduler itself grows a
running job once GPUs free up, and the orchestrator carries it out from a checkpoint. Real
broker, real services, the reference trainer as real processes (gloo on CPU), one 2-GPU node.

The policy's minimum gain is lowered for this cluster (a job here runs for a minute, not hours;
the rules that make a job a candidate are the defaults): a move must still save more than the
restart the job measured for its own start."""
from __future__ import annotations

import sys
import time
from statistics import mean, median

import pytest

pytest.importorskip("torch")

from frenzy.client import FrenzyClient  # noqa: E402
from frenzy.v1 import types_pb2  # noqa: E402
from jobwatch import losses, wait_for  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.torch]
GPU_TYPE = "P100-16GB"
EVERY = 5  # checkpoint interval, steps
STEPS = 150  # long enough that DP2 saves more than a restart, even on a loaded machine


@pytest.fixture(scope="module")
def cluster(local_cluster):
    return local_cluster(f"liveelastic{int(time.time())}", "cluster_live_elastic.yaml", time_scale=None,
                         extra_env={"FRENZY_RESHAPE_MIN_GAIN_S": "0",
                                    "FRENZY_RESHAPE_MIN_GAIN_FRACTION": "0",
                                    "FRENZY_CHECKPOINT_GRACE_S": "60"})


def _blocker() -> types_pb2.JobSpec:
    """A user program on one GPU that never checkpoints (so it is never moved), until cancelled.
    Its steps make MARP predict hours, as long as it really holds the GPU: has then starts the
    trainer narrow at once rather than hold it for a release it expects at once (and decides
    again only at the blocker's predicted end, `SchedulerService.redecide_loop`)."""
    return types_pb2.JobSpec(
        name="blocker", model="tiny-gpt2", entrypoint=["sleep", "900"],
        constraints=types_pb2.Constraints(gpu_types=[GPU_TYPE], max_gpus=1),
        training=types_pb2.TrainingConfig(seq_len=64, global_batch_size=16, steps=1_000_000))


def _trainer() -> types_pb2.JobSpec:
    """tiny-gpt2, up to 2 GPUs (MARP: DP1, or DP2 at about 0.64x the time), a checkpoint every
    EVERY steps: a job that can resume."""
    return types_pb2.JobSpec(
        name="grown", model="tiny-gpt2",
        constraints=types_pb2.Constraints(gpu_types=[GPU_TYPE], max_gpus=2),
        entrypoint=[sys.executable, "-m", "frenzy_trainer"],
        env={"FRENZY_LR": "3e-3", "FRENZY_DIST_TIMEOUT_S": "120"},
        training=types_pb2.TrainingConfig(seq_len=64, global_batch_size=16, steps=STEPS,
                                          checkpoint_every_steps=EVERY))


@pytest.mark.timeout(900)  # about 2 min on an idle machine; bounded waits, generous under load
def test_a_job_started_narrow_is_grown_by_the_scheduler_once_gpus_free_and_its_loss_continues(cluster):
    with FrenzyClient(cluster.grpc_address) as client:
        blocker = client.submit(_blocker())
        wait_for(client, blocker, lambda j: j.state == types_pb2.RUNNING, timeout_s=240)
        job_id = client.submit(_trainer())
        job, seen = wait_for(client, job_id, lambda j: j.state == types_pb2.RUNNING
                          and j.HasField("checkpoint_step") and j.progress.step > EVERY + 2,
                          timeout_s=300)
        assert job.attempt == 0 and job.option.num_gpus == 1, job  # the other GPU was taken
        step_at_free = job.progress.step
        client.cancel(blocker)
        job, more = wait_for(client, job_id, lambda j: j.attempt == 1 and j.state == types_pb2.RUNNING
                          and j.progress.step > j.resumed_from_step, timeout_s=300)
        seen += more
        # grown by the scheduler, from the checkpoint it saved on request
        assert job.option.num_gpus == 2 and len(job.assignments[0].gpu_indices) == 2, job
        assert job.decision.policy == "has" and job.decision.reason.startswith("resize"), job.decision
        assert job.resumed_from_step >= step_at_free, (job.resumed_from_step, step_at_free)
        assert job.reshaped_at.ToNanoseconds() > 0 and not job.reshaping
        job, more = wait_for(client, job_id, lambda j: j.state == types_pb2.SUCCEEDED, timeout_s=480)
        seen += more
        assert client.get(blocker).attempt == 0  # the blocker, which cannot resume, never moved
    assert job.attempt == 1 and job.progress.step == STEPS, job  # grown once, never moved again
    before, after = losses(seen, 0), losses(seen, 1)
    assert before and after and after[0][0] > job.resumed_from_step, (before[-3:], after[:3])
    # The loss continues: where the narrow run left it (within noise), well below the start.
    # Early on one step can jump 2.5 above its neighbours (lr 3e-3; attempt 0 of one run: 6.60,
    # 7.42, 6.21 at steps 2-4; the first step after a resume at 13 at 7.52, then 4.87): the
    # median of the first three resumed steps. A restart from scratch sits near 6.6 or above
    # for its first three steps (steps 1-3 above).
    assert median(loss for _, loss in after[:3]) < mean(loss for _, loss in before[-3:]) + 0.5, \
        (before[-3:], after[:3])
    assert after[-1][1] < before[0][1] - 0.5, (before[0], after[-1])
