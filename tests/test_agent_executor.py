"""How the agent reads a job's end (exit codes recorded per rank, the ranks' log tails, the
progress file) and what it reports for one that ended while it was down."""
from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from frenzy.config import ServiceSettings
from frenzy.outcomes import EXIT_OOM, EXIT_RENDEZVOUS
from frenzy.v1 import types_pb2
from frenzy_agent.executor import RunningJob, outcome, read_progress
from frenzy_agent.gpus import parse_inventory
from frenzy_agent.service import NodeAgent


def ended_job(tmp_path: Path, codes: list[int], logs: dict[int, str] | None = None) -> RunningJob:
    for rank, code in enumerate(codes):
        (tmp_path / f"exit.{rank}").write_text(f"{code}\n")
    for rank, text in (logs or {}).items():
        (tmp_path / f"rank{rank}.log").write_text(text)
    return RunningJob("job-1", 0, tmp_path, 0, list(range(len(codes))), 10 * 2**30, [0, 1])


def test_all_zero_succeeds(tmp_path):
    assert outcome(ended_job(tmp_path, [0, 0])).state == "succeeded"


def test_rendezvous_failure_is_reported_with_the_trainers_reason(tmp_path):
    log = "frenzy_trainer: rendezvous failed: DistNetworkError at 127.0.0.1:29811: EADDRINUSE\n"
    # rank 0 could not listen; rank 1 was stopped by the agent (143)
    result = outcome(ended_job(tmp_path, [EXIT_RENDEZVOUS, 143], {0: log}))
    assert (result.state, result.exit_code) == ("failed", EXIT_RENDEZVOUS)
    assert result.reason == "RENDEZVOUS: DistNetworkError at 127.0.0.1:29811: EADDRINUSE"


def test_oom_wins_over_rendezvous_and_plain_failures(tmp_path):
    result = outcome(ended_job(tmp_path, [1, EXIT_OOM]))
    assert result.reason.startswith("OOM") and result.exit_code == EXIT_OOM


@pytest.mark.parametrize("text", ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate"])
def test_oom_found_in_a_log_when_the_exit_code_is_generic(tmp_path, text):
    result = outcome(ended_job(tmp_path, [1, 1], {1: f"Traceback\n{text}\n"}))
    assert result.reason.startswith("OOM")


def test_plain_failure_names_the_first_nonzero_code(tmp_path):
    result = outcome(ended_job(tmp_path, [0, 7]))
    assert (result.state, result.reason, result.exit_code) == ("failed", "exit code 7", 7)


@pytest.mark.parametrize("codes", [[143, 1], [EXIT_RENDEZVOUS, 1], [-1, 1]])
def test_a_ranks_own_failure_wins_over_what_it_caused_in_its_peers(tmp_path, codes):
    """Rank 1 crashed (exit 1); rank 0 was stopped by the agent, left waiting at the rendezvous,
    or recorded nothing. The job failed for rank 1's reason and is not retried as a rendezvous."""
    result = outcome(ended_job(tmp_path, codes))
    assert (result.state, result.reason, result.exit_code) == ("failed", "exit code 1", 1)


def test_bad_configuration_is_not_retried_as_a_rendezvous_failure(tmp_path):
    result = outcome(ended_job(tmp_path, [2, EXIT_RENDEZVOUS]))
    assert result.exit_code == 2 and not result.reason.startswith("RENDEZVOUS")


def test_terminated_from_outside(tmp_path):
    result = outcome(ended_job(tmp_path, [143, 143]))
    assert (result.state, result.exit_code) == ("failed", 143)


def test_missing_exit_record_is_lost(tmp_path):
    job = ended_job(tmp_path, [0])
    job.pids.append(1)  # rank 1 never recorded an exit code
    assert outcome(job).state == "lost"


def test_progress_is_tailed_line_by_line(tmp_path):
    job = ended_job(tmp_path, [0])
    assert read_progress(job) == {}  # no file yet
    with open(job.progress_file, "a") as f:
        f.write('{"step": 1, "loss": 7.0}\n{"step": 2, "loss": 6.5}\n{"step": 3, "lo')
    assert read_progress(job) == {"step": 2, "loss": 6.5}  # the half-written line waits
    with open(job.progress_file, "a") as f:
        f.write('ss": 6.1}\nnot json\n')
    assert read_progress(job) == {"step": 3, "loss": 6.1}
    assert job.progress_offset == job.progress_file.stat().st_size  # nothing is read twice
    assert read_progress(job) == {"step": 3, "loss": 6.1}  # nothing new: the last one stands


class _RecordingBus:
    """Only what `NodeAgent.report` calls; this test is about the reason the agent reports."""

    def __init__(self) -> None:
        self.published: list = []

    async def publish(self, topic, key, message, trace_id="") -> None:
        self.published.append(message)


def test_a_job_that_ended_while_the_agent_was_down_keeps_its_reason_prefix(tmp_path):
    workdir = tmp_path / "node-0" / "job-1.0"
    workdir.mkdir(parents=True)
    (workdir / "exit.0").write_text(f"{EXIT_OOM}\n")
    (workdir / "state.json").write_text(json.dumps({
        "job_id": "job-1", "attempt": 0, "pgid": 2**22 + 7, "pids": [2**22 + 7],
        "predicted_peak_bytes": 1, "gpu_indices": [0]}))  # a process group long gone
    bus = _RecordingBus()
    agent = NodeAgent(bus, "node-0", parse_inventory("1xT4"), tmp_path, ServiceSettings())  # type: ignore[arg-type]
    asyncio.run(agent.adopt_survivors())
    [status] = bus.published
    assert status.state == types_pb2.FAILED and status.reason.startswith("OOM")  # re-planned, not failed
    assert "ended while the agent was down" in status.reason
    assert (workdir / "reported").exists()


def test_checkpoint_commits_are_tracked_apart_from_progress(tmp_path):
    job = ended_job(tmp_path, [0])
    with open(job.progress_file, "a") as f:
        f.write('{"event": "resumed", "step": 4}\n{"step": 5, "loss": 6.0}\n'
                '{"event": "checkpoint", "step": 6}\n')
    assert read_progress(job) == {"step": 5, "loss": 6.0}  # events are not progress
    assert job.checkpoint_step == 6


def test_preempted_marker_is_read_as_preemption_and_nothing_else_is(tmp_path):
    from frenzy.outcomes import PREEMPTED_MARKER_FILE

    job = ended_job(tmp_path, [0, 0])
    assert outcome(job).state == "succeeded"  # exit 0 alone is never a preemption
    (tmp_path / PREEMPTED_MARKER_FILE).write_text('{"step": 7, "checkpoint_step": 7}')
    result = outcome(job)
    assert result.state == "preempted" and result.reason == "PREEMPTED: checkpoint at step 7"
    assert job.checkpoint_step == 7


def test_a_checkpoint_now_stop_without_a_marker_is_still_a_preemption(tmp_path):
    job = ended_job(tmp_path, [138, 143])  # a program without checkpoint support: SIGUSR1 kills it
    job.checkpoint_first, job.stop_reason = True, "RESIZE"
    result = outcome(job)
    assert result.state == "preempted" and result.reason.startswith("PREEMPTED: stopped without")


def test_launch_environment_names_the_jobs_checkpoint_directory_and_policy(tmp_path):
    from frenzy.v1 import events_pb2
    from frenzy_agent.executor import job_environment

    launch = events_pb2.LaunchJob(job_id="j1", attempt=2, gpu_indices=[0], world_size=1,
                                  resume_from_step=40, spec=types_pb2.JobSpec(
                                      training=types_pb2.TrainingConfig(
                                          seq_len=8, global_batch_size=2, steps=5,
                                          checkpoint_every_steps=10, keep_checkpoints=True)))
    env = job_environment(launch, 0, tmp_path / "agents" / "n1" / "j1.2", 1.0,
                          checkpoint_root=tmp_path / "ckpt")
    assert env["FRENZY_CHECKPOINT_URI"] == str((tmp_path / "ckpt" / "j1").resolve())
    assert env["FRENZY_RESUME_FROM_STEP"] == "40"
    assert env["FRENZY_CHECKPOINT_EVERY_STEPS"] == "10" and env["FRENZY_KEEP_CHECKPOINTS"] == "1"
    assert "FRENZY_CHECKPOINT_EVERY_S" not in env
    launch.spec.training.checkpoint_uri = "/shared/ckpt/j1"
    assert job_environment(launch, 0, tmp_path, 1.0)["FRENZY_CHECKPOINT_URI"] == "/shared/ckpt/j1"


def test_checkpoint_now_reaches_the_program_not_the_wrapper_and_reads_as_preempted(tmp_path):
    """A real process group: SIGUSR1 goes to the `sh` exit-recording wrapper and the program;
    the wrapper survives it, the program saves (here: writes the marker) and exits 0."""
    import sys

    from frenzy.v1 import events_pb2
    from frenzy_agent.executor import checkpoint_and_stop, launch, wait_for_exit

    program = ("import json, os, signal, time\n"
               "got = []\n"
               "signal.signal(signal.SIGUSR1, lambda *a: got.append(1))\n"
               "open('ready', 'w').close()\n"
               "while not got: time.sleep(0.01)\n"
               "marker = os.path.join(os.path.dirname(os.environ['FRENZY_PROGRESS_FILE']), 'preempted.json')\n"
               "json.dump({'step': 9, 'checkpoint_step': 9}, open(marker, 'w'))\n")
    cmd = events_pb2.LaunchJob(job_id="j", attempt=0, gpu_indices=[0], world_size=1,
                               spec=types_pb2.JobSpec(entrypoint=[sys.executable, "-c", program]))
    job = launch(cmd, tmp_path, 1.0, "", tmp_path / "ckpt")

    async def scenario():
        waiter = asyncio.create_task(wait_for_exit(job, lambda p: asyncio.sleep(0)))
        for _ in range(500):
            if (job.workdir / "ready").exists():
                break
            await asyncio.sleep(0.01)
        await checkpoint_and_stop(job, "RESIZE", checkpoint_grace_s=20, stop_grace_s=2)
        return await asyncio.wait_for(waiter, 20)

    result = asyncio.run(scenario())
    assert (job.workdir / "exit.0").read_text().strip() == "0"  # the wrapper recorded the exit
    assert result.state == "preempted" and result.reason == "PREEMPTED: checkpoint at step 9"


def test_a_job_that_finished_as_checkpoint_now_arrived_succeeded(tmp_path):
    job = ended_job(tmp_path, [0, 0])
    job.checkpoint_first = True
    job.progress_file.write_text('{"step": 5}\n{"event": "done", "step": 5}\n')
    assert outcome(job).state == "succeeded"
