"""How the agent reads a job's end (exit codes recorded per rank, the ranks' status files and
log tails, the progress file) and what it reports for one that ended while it was down."""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from frenzy.config import ServiceSettings
from hypothesis import given
from hypothesis import strategies as st

from frenzy.outcomes import (EXIT_OOM, EXIT_RENDEZVOUS, OOM_REASON, RENDEZVOUS_REASON, RankStatus,
                             write_status)
from frenzy.v1 import events_pb2, types_pb2
from frenzy_agent.classify import JobFacts, classify
from frenzy_agent.executor import RunningJob, facts, job_dir_name, read_progress
from frenzy_agent.gpus import parse_inventory
from frenzy_agent.service import NodeAgent
from jobwatch import process_group_exists


def ended_job(tmp_path: Path, codes: list[int], logs: dict[int, str] | None = None,
              statuses: dict[int, tuple[str, str]] | None = None) -> RunningJob:
    for rank, code in enumerate(codes):
        (tmp_path / f"exit.{rank}").write_text(f"{code}\n")
    for rank, text in (logs or {}).items():
        (tmp_path / f"rank{rank}.log").write_text(text)
    for rank, (said, detail) in (statuses or {}).items():
        write_status(said, detail, tmp_path / f"status.{rank}.json")
    return RunningJob("job-1", 0, tmp_path, 0, list(range(len(codes))), 10 * 2**30, [0, 1])


def outcome(job: RunningJob):
    return classify(facts(job))


def test_all_zero_succeeds(tmp_path):
    assert outcome(ended_job(tmp_path, [0, 0])).state == "succeeded"


def test_rendezvous_failure_is_reported_with_the_trainers_reason(tmp_path):
    detail = "DistNetworkError at 127.0.0.1:29811: EADDRINUSE"
    # rank 0 could not listen; rank 1 was stopped by the agent (143)
    result = outcome(ended_job(tmp_path, [EXIT_RENDEZVOUS, 143],
                               statuses={0: (RENDEZVOUS_REASON, detail)}))
    assert (result.state, result.exit_code) == ("failed", EXIT_RENDEZVOUS)
    assert result.reason == "RENDEZVOUS: DistNetworkError at 127.0.0.1:29811: EADDRINUSE"


def test_oom_wins_over_rendezvous_and_plain_failures(tmp_path):
    result = outcome(ended_job(tmp_path, [1, EXIT_OOM], statuses={1: (OOM_REASON, "")}))
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
    job = ended_job(tmp_path, codes, statuses={0: (RENDEZVOUS_REASON, "peer gone")}
                    if codes[0] == EXIT_RENDEZVOUS else None)
    if codes[0] == -1:
        (tmp_path / "exit.0").unlink()
    result = outcome(job)
    assert (result.state, result.reason, result.exit_code) == ("failed", "exit code 1", 1)


def test_bad_configuration_is_not_retried_as_a_rendezvous_failure(tmp_path):
    result = outcome(ended_job(tmp_path, [2, EXIT_RENDEZVOUS], statuses={1: (RENDEZVOUS_REASON, "")}))
    assert result.exit_code == 2 and not result.reason.startswith("RENDEZVOUS")


def test_terminated_from_outside(tmp_path):
    result = outcome(ended_job(tmp_path, [143, 143]))
    assert (result.state, result.exit_code) == ("failed", 143)


def test_missing_exit_record_is_lost(tmp_path):
    job = ended_job(tmp_path, [0])
    job.pids.append(1)  # rank 1 never recorded an exit code
    result = outcome(job)
    assert result.state == "lost" and result.reason.startswith("LOST: ")  # the orchestrator retries it


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
    write_status(OOM_REASON, "over the limit", workdir / "status.0.json")
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


@pytest.mark.parametrize("code", [EXIT_OOM, EXIT_RENDEZVOUS])
def test_a_user_programs_exit_code_3_or_4_is_reported_as_that_exit_code(tmp_path, code):
    """Only a status file makes an end OOM or RENDEZVOUS; a program's own exit 3 or 4 is not
    re-planned or retried."""
    result = outcome(ended_job(tmp_path, [code]))
    assert (result.state, result.reason, result.exit_code) == ("failed", f"exit code {code}", code)


def test_a_status_file_that_is_not_ours_is_ignored(tmp_path):
    job = ended_job(tmp_path, [EXIT_OOM])
    (tmp_path / "status.0.json").write_text('{"outcome": "SUCCEEDED"}')
    assert outcome(job).reason == "exit code 3"
    (tmp_path / "status.0.json").write_bytes(b"\xff" * 10_000)
    assert outcome(job).reason == "exit code 3"


def test_preempted_is_reported_with_its_prefix(tmp_path):
    result = outcome(ended_job(tmp_path, [143, 143], statuses={0: ("PREEMPTED", "checkpoint at 40")}))
    assert result.reason == "PREEMPTED: checkpoint at 40"


_codes = st.lists(st.one_of(st.none(), st.integers(-1, 255)), min_size=1, max_size=4)
_status = st.one_of(st.none(), st.builds(RankStatus, st.sampled_from(["OOM", "RENDEZVOUS", "PREEMPTED"])))


@given(_codes, st.lists(_status, max_size=4), st.booleans())
def test_classify_is_total_and_interprets_only_what_a_status_file_says(codes, statuses, down):
    """Every combination of facts gets an outcome; an interpreted reason needs a status file
    saying so (logs here say nothing about memory)."""
    result = classify(JobFacts(tuple(codes), tuple(statuses[:len(codes)]), agent_was_down=down))
    assert result.state in ("succeeded", "failed", "lost")
    said = {s.outcome for s in statuses[:len(codes)] if s is not None}
    prefix = result.reason.split(":")[0]
    if prefix in ("OOM", "RENDEZVOUS", "PREEMPTED"):
        assert prefix in said
    if result.state == "succeeded":
        assert all(c == 0 for c in codes)


@pytest.mark.parametrize("job_id", ["a/b/../c", "x" * 256, "nul\x00byte", "dots..", "ünï"])
def test_any_job_id_gets_one_flat_directory_per_attempt(job_id):
    name = job_dir_name(job_id, 2)
    assert "/" not in name and "\x00" not in name and len(name) < 100 and name.endswith(".2")
    assert job_dir_name(job_id, 2) != job_dir_name(job_id + "_", 2)


def launch_cmd(job_id: str, env: dict[str, str] | None = None) -> events_pb2.LaunchJob:
    spec = types_pb2.JobSpec(name="x", model="gpt2", entrypoint=[sys.executable, "-c", "pass"],
                             env=env or {})
    return events_pb2.LaunchJob(job_id=job_id, node_id="node-0", attempt=0, gpu_indices=[0],
                                world_size=1, master_addr="127.0.0.1", master_port=29500, spec=spec)


@pytest.mark.parametrize("job_id,env", [("ok", {"A=B": "1"}), ("ok", {"A": "nul\x00"}),
                                        ("x" * 256, None), ("a/b", None), ("nul\x00id", None)])
def test_a_launch_that_breaks_ends_its_job_with_a_reason(tmp_path, job_id, env):
    """Inputs that made the handler raise (and the job sit LAUNCHING forever) now either run or
    end with a FAILED report naming the cause."""
    bus = _RecordingBus()
    agent = NodeAgent(bus, "node-0", parse_inventory("1xT4"), tmp_path, ServiceSettings())  # type: ignore[arg-type]

    async def go():
        await agent.on_launch(events_pb2.Envelope(launch_job=launch_cmd(job_id, env)), "node-0")
        await asyncio.gather(*agent.supervisors.values())

    asyncio.run(go())
    states = [s.state for s in bus.published]
    assert states[-1] in (types_pb2.SUCCEEDED, types_pb2.FAILED)
    if states[-1] == types_pb2.FAILED:
        assert bus.published[-1].reason.startswith("launch failed: ")
    assert all(s.job_id == job_id for s in bus.published)


def _sleeper(job_env: dict[str, str] | None = None) -> subprocess.Popen:
    """A process group of its own that sleeps 60 s: a job's rank when given the job's
    environment, anyone else's process otherwise."""
    import os

    env = {**os.environ, **(job_env or {})}
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env,
                            process_group=0)


def _running_record(workdir: Path, job_id: str, pid: int, cluster_id: str = "",
                    start_ticks: list | None = None) -> RunningJob:
    from frenzy_agent.procfs import boot_id, process_start_ticks

    ticks = [process_start_ticks(pid)] if start_ticks is None else start_ticks
    job = RunningJob(job_id, 0, workdir, pid, [pid], 1, [0], cluster_id, start_ticks=ticks,
                     boot_id=boot_id())
    job.save()
    return job


def test_a_restarted_agent_adopts_only_its_own_clusters_jobs(tmp_path):
    workdir = tmp_path / "node-0" / job_dir_name("a/b", 0)
    workdir.mkdir(parents=True)
    sleeper = _sleeper({"FRENZY_JOB_ID": "a/b", "FRENZY_ATTEMPT": "0"})
    try:
        _running_record(workdir, "a/b", sleeper.pid, "old-cluster")
        settings = ServiceSettings(stop_grace_s=2)
        stranger = NodeAgent(_RecordingBus(), "node-0", parse_inventory("1xT4"), tmp_path, settings,
                             cluster_id="new-cluster")  # type: ignore[arg-type]
        asyncio.run(stranger.adopt_survivors())
        assert stranger.running == {} and stranger.bus.published == []
        sleeper.wait(5)  # stopped long before its 60 s, not adopted (TimeoutExpired otherwise)
    finally:
        sleeper.kill()
        sleeper.wait()


@pytest.mark.parametrize("record", ["start time", "environment"])
def test_a_restarted_agent_adopts_its_running_job_by_start_time_or_environment(tmp_path, record):
    """`environment`: a record written before start times were kept."""
    workdir = tmp_path / "node-0" / job_dir_name("j", 0)
    workdir.mkdir(parents=True)
    sleeper = _sleeper({"FRENZY_JOB_ID": "j", "FRENZY_ATTEMPT": "0"})
    try:
        _running_record(workdir, "j", sleeper.pid, start_ticks=None if record == "start time" else [])
        agent = NodeAgent(_RecordingBus(), "node-0", parse_inventory("1xT4"), tmp_path,
                          ServiceSettings())  # type: ignore[arg-type]

        async def adopt() -> None:
            await agent.adopt_survivors()
            for supervisor in agent.supervisors.values():
                supervisor.cancel()

        asyncio.run(adopt())
        assert list(agent.running) == ["j"] and agent.bus.published == []
    finally:
        sleeper.kill()
        sleeper.wait()


@pytest.mark.parametrize("record", ["start time", "environment"])
def test_a_dead_jobs_pid_held_by_another_process_is_neither_adopted_nor_signalled(tmp_path, record):
    """After a container restart the fresh pid namespace hands the dead job's pid to the agent's
    own pre-started launchers: adopted as the job, an idle launcher was supervised forever and
    the job never ended (the compose test, 4 Dec). The job is reported lost; the process that
    has its pid now is left alone."""
    workdir = tmp_path / "node-0" / job_dir_name("j", 0)
    workdir.mkdir(parents=True)
    other = _sleeper()  # not the job: another start time, none of the job's environment
    try:
        from frenzy_agent.procfs import process_start_ticks

        ticks = [process_start_ticks(other.pid) - 1] if record == "start time" else []
        _running_record(workdir, "j", other.pid, start_ticks=ticks)
        bus = _RecordingBus()
        agent = NodeAgent(bus, "node-0", parse_inventory("1xT4"), tmp_path,
                          ServiceSettings(stop_grace_s=1))  # type: ignore[arg-type]
        asyncio.run(agent.adopt_survivors())
        assert agent.running == {}
        [status] = bus.published
        assert status.job_id == "j" and status.state == types_pb2.FAILED
        assert other.poll() is None, "another process's group was signalled"
        from frenzy_agent import executor

        job = RunningJob.load(workdir)
        asyncio.run(executor.stop(job, "test", grace_s=1))  # a stop, too, leaves it alone
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_a_reused_job_id_from_another_cluster_is_launched_not_mistaken_for_a_redelivery(tmp_path):
    """A second cluster in the same state directory once left a reused job id LAUNCHING forever:
    the agent took the first cluster's directory for "this attempt already ran here"."""
    old = tmp_path / "node-0" / job_dir_name("job-1", 0)
    old.mkdir(parents=True)
    RunningJob("job-1", 0, old, 2**22 + 7, [2**22 + 7], 1, [0], "old-cluster").save()
    (old / "reported").touch()
    bus = _RecordingBus()
    agent = NodeAgent(bus, "node-0", parse_inventory("1xT4"), tmp_path, ServiceSettings(),  # type: ignore[arg-type]
                      cluster_id="new-cluster")

    async def go():
        await agent.on_launch(events_pb2.Envelope(launch_job=launch_cmd("job-1")), "node-0")
        await asyncio.gather(*agent.supervisors.values())
        await agent.on_launch(events_pb2.Envelope(launch_job=launch_cmd("job-1")), "node-0")  # redelivered

    asyncio.run(go())
    assert [s.state for s in bus.published] == [types_pb2.RUNNING, types_pb2.SUCCEEDED]


def test_checkpoint_commits_are_tracked_apart_from_progress(tmp_path):
    job = ended_job(tmp_path, [0])
    with open(job.progress_file, "a") as f:
        f.write('{"event": "resumed", "step": 4}\n{"step": 5, "loss": 6.0}\n'
                '{"event": "checkpoint", "step": 6, "save_s": 0.02, "write_s": 1.5}\n')
    assert read_progress(job) == {"step": 5, "loss": 6.0}  # events are not progress
    assert job.checkpoint_step == 6 and job.checkpoint_write_s == 1.5  # what a save takes
    with open(job.progress_file, "a") as f:
        f.write('{"event": "checkpoint", "step": 9, "write_s": "x"}\n')  # not a number: kept
    read_progress(job)
    assert job.checkpoint_step == 9 and job.checkpoint_write_s == 1.5


def test_a_preempted_status_is_read_as_preemption_and_nothing_else_is(tmp_path):
    """Checkpoint-now goes through the same per-rank status file as OOM and RENDEZVOUS: the
    trainer saves, writes PREEMPTED with its checkpoint step on every rank and exits 0."""
    job = ended_job(tmp_path, [0, 0])
    assert outcome(job).state == "succeeded"  # exit 0 alone is never a preemption
    for rank in (0, 1):
        write_status("PREEMPTED", "checkpoint at step 7", tmp_path / f"status.{rank}.json",
                     checkpoint_step=7)
    result = outcome(job)
    assert (result.state, result.reason, result.exit_code) == (
        "failed", "PREEMPTED: checkpoint at step 7", 0)
    assert job.checkpoint_step == 7  # the agent reports it with the PREEMPTED status


def test_a_checkpoint_now_stop_without_a_status_is_still_a_preemption(tmp_path):
    job = ended_job(tmp_path, [138, 143])  # a program without checkpoint support: SIGUSR1 kills it
    job.checkpoint_first, job.stop_reason = True, "RESIZE"
    result = outcome(job)
    assert result.state == "failed" and result.reason.startswith("PREEMPTED: stopped without")
    job.stopping = True  # past the checkpoint grace the agent stopped it: still a preemption
    assert outcome(job).reason.startswith("PREEMPTED: stopped without")


def test_launch_environment_names_the_jobs_checkpoint_directory_and_policy(tmp_path):
    from frenzy.v1 import events_pb2
    from frenzy_agent.executor import job_environment, job_key

    launch = events_pb2.LaunchJob(job_id="j1", attempt=2, gpu_indices=[0], world_size=1,
                                  resume_from_step=40, spec=types_pb2.JobSpec(
                                      training=types_pb2.TrainingConfig(
                                          seq_len=8, global_batch_size=2, steps=5,
                                          checkpoint_every_steps=10, keep_checkpoints=True)))
    env = job_environment(launch, 0, tmp_path / "agents" / "n1" / "j1.2", 1.0,
                          checkpoint_root=tmp_path / "ckpt")
    assert env["FRENZY_CHECKPOINT_URI"] == str((tmp_path / "ckpt" / job_key("j1")).resolve())
    assert env["FRENZY_RESUME_FROM_STEP"] == "40"
    assert env["FRENZY_CHECKPOINT_EVERY_STEPS"] == "10" and env["FRENZY_KEEP_CHECKPOINTS"] == "1"
    assert "FRENZY_CHECKPOINT_EVERY_S" not in env
    launch.spec.training.checkpoint_uri = "/shared/ckpt/j1"
    assert job_environment(launch, 0, tmp_path, 1.0)["FRENZY_CHECKPOINT_URI"] == "/shared/ckpt/j1"
    # The trainer never removes them itself under an agent: the job's end decides (DeleteCheckpoints)
    launch.spec.training.keep_checkpoints = False
    assert job_environment(launch, 0, tmp_path, 1.0)["FRENZY_KEEP_CHECKPOINTS"] == "1"


@given(_codes, st.lists(_status, max_size=4), st.booleans())
def test_a_checkpoint_now_stop_always_ends_as_a_preemption(codes, statuses, down):
    """Whatever its ranks did, a job the agent asked to checkpoint and yield is reported with
    the PREEMPTED prefix (the orchestrator resumes it), never as a success or a plain failure."""
    result = classify(JobFacts(tuple(codes), tuple(statuses[:len(codes)]), stop_reason="RESIZE",
                               checkpoint_requested=True, agent_was_down=down))
    assert result.state == "failed" and result.reason.startswith("PREEMPTED: ")

def test_heartbeats_list_ended_attempts_until_forgotten(tmp_path):
    bus = _RecordingBus()
    agent = NodeAgent(bus, "node-0", parse_inventory("1xT4"), tmp_path, ServiceSettings())  # type: ignore[arg-type]

    async def go():
        await agent.on_launch(events_pb2.Envelope(launch_job=launch_cmd("job-1")), "node-0")
        await asyncio.gather(*agent.supervisors.values())

    asyncio.run(go())
    hb = agent.heartbeat()
    assert list(hb.running_jobs) == [] and list(hb.ended_jobs) == ["job-1:0"]


def test_checkpoint_now_reaches_the_program_not_the_wrapper_and_reads_as_preempted(tmp_path):
    """A real process group: SIGUSR1 goes to the `sh` exit-recording wrapper and the program;
    the wrapper survives it, the program saves (here: writes its PREEMPTED status) and exits 0."""
    from frenzy_agent.executor import checkpoint_and_stop, launch, wait_for_exit

    program = ("import signal, time\n"
               "from frenzy.outcomes import write_status\n"
               "got = []\n"
               "signal.signal(signal.SIGUSR1, lambda *a: got.append(1))\n"
               "open('ready', 'w').close()\n"
               "while not got: time.sleep(0.01)\n"
               "write_status('PREEMPTED', 'checkpoint at step 9', checkpoint_step=9)\n")
    cmd = events_pb2.LaunchJob(job_id="j", attempt=0, gpu_indices=[0], world_size=1,
                               spec=types_pb2.JobSpec(entrypoint=[sys.executable, "-c", program]))
    job = launch(cmd, tmp_path, 1.0, "", checkpoint_root=tmp_path / "ckpt")

    async def scenario():
        waiter = asyncio.create_task(wait_for_exit(job, lambda p: asyncio.sleep(0)))
        for _ in range(500):
            if (job.workdir / "ready").exists():
                break
            await asyncio.sleep(0.01)
        await checkpoint_and_stop(job, "RESIZE", checkpoint_grace_s=20, stop_grace_s=2)
        return await asyncio.wait_for(waiter, 20)

    result = classify(asyncio.run(scenario()))
    assert (job.workdir / "exit.0").read_text().strip() == "0"  # the wrapper recorded the exit
    assert result.state == "failed" and result.reason == "PREEMPTED: checkpoint at step 9"
    assert job.checkpoint_step == 9


def test_a_job_that_finished_as_checkpoint_now_arrived_succeeded(tmp_path):
    job = ended_job(tmp_path, [0, 0])
    job.checkpoint_first, job.stop_reason = True, "RESIZE"
    job.progress_file.write_text('{"step": 5}\n{"event": "done", "step": 5}\n')
    assert outcome(job).state == "succeeded"


def test_checkpoint_removal_stays_inside_the_jobs_directory(tmp_path):
    """The agent's own per-job directory goes whole; a directory the spec named loses only its
    step directories (and itself once empty); links are never followed; twice is harmless."""
    from frenzy.checkpointdir import remove_checkpoints
    from frenzy_agent.executor import checkpoint_location, job_key

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("x")
    own, owned = checkpoint_location("j/1", "", tmp_path / "root")
    assert owned and own == str((tmp_path / "root" / job_key("j/1")).resolve())
    (Path(own) / "step-000000004").mkdir(parents=True)
    (Path(own) / "step-000000004" / "link").symlink_to(outside, target_is_directory=True)
    assert remove_checkpoints(Path(own), owned) == [Path(own)]
    assert not Path(own).exists() and (outside / "precious").exists()
    assert remove_checkpoints(Path(own), owned) == []  # idempotent

    named, owned = checkpoint_location("j", str(tmp_path / "named"), tmp_path / "root")
    named = Path(named)
    assert not owned
    (named / "step-000000002").mkdir(parents=True)
    (named / "step-000000002" / "COMMITTED").write_text("{}")
    (named / "step-000000003").symlink_to(outside, target_is_directory=True)
    (named / "notes.txt").write_text("mine")
    assert remove_checkpoints(named, owned) == [named / "step-000000002"]
    assert sorted(p.name for p in named.iterdir()) == ["notes.txt", "step-000000003"]
    assert (outside / "precious").exists()
    (named / "notes.txt").unlink()
    (named / "step-000000003").unlink()
    (named / "step-000000005").mkdir()
    assert remove_checkpoints(named, owned) == [named / "step-000000005", named]
    linked = tmp_path / "linked"
    linked.symlink_to(outside, target_is_directory=True)
    assert remove_checkpoints(linked, True) == [] and (outside / "precious").exists()


def test_checkpoints_left_says_whether_the_agent_may_acknowledge_the_delete(tmp_path):
    """The agent acknowledges a DeleteCheckpoints only when nothing it should remove is left."""
    from frenzy.checkpointdir import checkpoints_left, remove_checkpoints

    own = tmp_path / "own"
    (own / "step-000000004").mkdir(parents=True)
    assert checkpoints_left(own, owned=True)
    remove_checkpoints(own, owned=True)
    assert not checkpoints_left(own, owned=True)  # gone, or never there: nothing left
    named = tmp_path / "named"
    (named / "step-000000002").mkdir(parents=True)
    (named / "notes.txt").write_text("mine")
    assert checkpoints_left(named, owned=False)
    remove_checkpoints(named, owned=False)
    assert not checkpoints_left(named, owned=False)  # the note is not the job's to remove
    linked = tmp_path / "linked"
    linked.symlink_to(own.parent, target_is_directory=True)
    assert not checkpoints_left(linked, owned=True)  # never followed, so never "left"


def test_an_exit_wakes_the_watcher_before_its_poll_interval(tmp_path):
    """ExitWatch: a job process's exit wakes the supervising loop at once (pidfd), so freed GPUs
    are reported without waiting out the poll; its descriptors are closed afterwards. The poll
    interval here is an hour: only the exit can end the wait within the test's bound."""
    import os

    from frenzy_agent.executor import ExitWatch, wait_for_exit

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    job = RunningJob("j", 0, tmp_path, proc.pid, [proc.pid], 0, [0])

    async def scenario():
        with ExitWatch([proc.pid]) as watch:
            fds = list(watch._fds)
            await asyncio.wait_for(watch.wait(3600), 60)
        return fds, await asyncio.wait_for(wait_for_exit(job, lambda p: asyncio.sleep(0),
                                                         poll_s=3600), 60)

    fds, result = asyncio.run(scenario())
    assert len(fds) == 1 and proc.poll() is not None
    with pytest.raises(OSError):
        os.fstat(fds[0])  # closed when the watch ended
    assert result.exit_codes == (None,)  # no wrapper here: no exit file, but it returned


def test_an_exit_watch_on_a_process_already_gone_falls_back_to_polling(tmp_path):
    from frenzy_agent.executor import ExitWatch

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()

    async def scenario():
        with ExitWatch([proc.pid]) as watch:
            await watch.wait(0.01)  # a plain sleep: nothing to watch
            return watch._fds

    assert asyncio.run(scenario()) == []


def test_a_multi_rank_launch_starts_every_rank_in_the_jobs_process_group_in_rank_order(tmp_path):
    """Ranks after the first start in parallel: each still joins the first one's process group
    (stop and checkpoint-now reach the whole job), gets its own rank and log, and `pids` stays
    in rank order (exit files and status files are read by it)."""
    import time

    from frenzy_agent.executor import launch, ranks_alive

    program = ("import os\n"
               "print('rank', os.environ['LOCAL_RANK'])\n"
               "open('rank-' + os.environ['LOCAL_RANK'], 'w').write(f'{os.getppid()} {os.getpgid(0)}')\n")
    ranks = 6
    cmd = events_pb2.LaunchJob(job_id="j", attempt=0, gpu_indices=list(range(ranks)), world_size=ranks,
                               spec=types_pb2.JobSpec(entrypoint=[sys.executable, "-c", program]))
    job = launch(cmd, tmp_path, 1.0, "", checkpoint_root=tmp_path / "ckpt")
    deadline = time.monotonic() + 60
    while ranks_alive(job) and time.monotonic() < deadline:
        time.sleep(0.02)  # ranks_alive reaps (subprocess may have reaped some already)
    assert len(set(job.pids)) == ranks and job.pgid == job.pids[0]
    for rank, pid in enumerate(job.pids):
        wrapper, group = map(int, (job.workdir / f"rank-{rank}").read_text().split())
        assert wrapper == pid and group == job.pgid  # the wrapper of rank r is pids[r]
        assert (job.workdir / f"rank{rank}.log").read_text().strip() == f"rank {rank}"
        assert (job.workdir / f"exit.{rank}").read_text().strip() == "0"


def test_a_launch_that_fails_midway_leaves_no_rank_running(tmp_path, monkeypatch):
    """A rank that cannot start ends the ranks already started: a job never half-runs."""
    import os
    import time

    from frenzy_agent import executor

    real = executor.job_environment

    def breaks_on_rank_2(launch, local_rank, *args, **kwargs):
        if local_rank == 2:
            raise OSError("no such device")
        return real(launch, local_rank, *args, **kwargs)

    monkeypatch.setattr(executor, "job_environment", breaks_on_rank_2)
    killed: list[int] = []
    kill_group = executor._kill_group
    monkeypatch.setattr(executor, "_kill_group", lambda pgid: (killed.append(pgid), kill_group(pgid)))
    program = "import time; open('started', 'a').write('x'); time.sleep(60)"
    cmd = events_pb2.LaunchJob(job_id="j", attempt=0, gpu_indices=[0, 1, 2, 3], world_size=4,
                               spec=types_pb2.JobSpec(entrypoint=[sys.executable, "-c", program]))
    started_s = time.monotonic()
    with pytest.raises(OSError, match="no such device"):
        executor.launch(cmd, tmp_path, 1.0, "", checkpoint_root=tmp_path / "ckpt")
    (workdir,) = tmp_path.glob("j-*.0")
    [pgid] = killed
    while process_group_exists(pgid) and time.monotonic() - started_s < 30:  # not their 60 s
        try:
            os.waitpid(-pgid, os.WNOHANG)  # SIGKILLed ranks linger as zombies until reaped
        except ChildProcessError:
            pass
        time.sleep(0.01)
    assert not process_group_exists(pgid)
    assert not (workdir / "state.json").exists()


def test_a_child_that_exits_between_two_polls_is_reaped_when_it_is_called_gone(monkeypatch):
    """The exit lands inside one poll, after the first look: the poll that calls the child gone
    must also reap it, or its zombie keeps its process group alive for good (a CI failure of
    test_agent_prestart's reaped-spares test, when the read came after the reap)."""
    from frenzy_agent import executor, procfs

    child = subprocess.Popen(["sh", "-c", "read line"], stdin=subprocess.PIPE)
    real_stat = procfs.stat_fields

    def exits_first(pid: int) -> list[str] | None:  # the child exits, then /proc is read
        if pid == child.pid and child.stdin is not None and not child.stdin.closed:
            child.stdin.close()
            while (fields := real_stat(pid)) is not None and fields[0] != "Z":
                pass
        return real_stat(pid)

    monkeypatch.setattr(executor, "stat_fields", exits_first)
    try:
        assert not executor.process_running(child.pid)
        assert real_stat(child.pid) is None, "called gone, left a zombie"
    finally:
        if child.stdin is not None:
            child.stdin.close()
        child.wait()


def test_progress_is_paced_but_the_first_step_and_checkpoint_commits_go_at_once(tmp_path):
    """Every progress report becomes an authoritative status read by the whole control plane,
    so the agent sends at most one per `report_interval_s`. The first step goes at once, and
    so does a checkpoint commit (the orchestrator resumes from the last commit it heard of);
    a step held back goes when the interval is up, and the last one read is what the final
    status carries. With no interval every step goes, as before the pacing."""
    from frenzy_agent.executor import wait_for_exit
    from frenzy_agent.procfs import process_start_ticks

    interval_s = 2.0

    def scenario(report_interval_s: float) -> tuple[list, RunningJob]:
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        job = RunningJob("j", 0, tmp_path / str(report_interval_s), proc.pid, [proc.pid], 0, [0],
                         start_ticks=[process_start_ticks(proc.pid)])
        job.workdir.mkdir()
        reports: list[tuple[float, int, int | None]] = []

        async def on_progress(progress: dict) -> None:
            reports.append((time.monotonic(), progress["step"], job.checkpoint_step))

        def write(*lines: dict) -> None:
            with open(job.progress_file, "a") as f:
                f.writelines(json.dumps(line) + "\n" for line in lines)

        async def until(predicate, timeout_s: float = 20.0) -> None:
            deadline = time.monotonic() + timeout_s
            while not predicate() and time.monotonic() < deadline:
                await asyncio.sleep(0.01)

        async def go() -> None:
            waiter = asyncio.create_task(wait_for_exit(job, on_progress, poll_s=0.02,
                                                       report_interval_s=report_interval_s))
            write({"step": 1})
            await until(lambda: len(reports) == 1)
            write({"step": 2}, {"step": 3})
            await asyncio.sleep(0.5)
            write({"event": "checkpoint", "step": 3})
            await until(lambda: any(c == 3 for _, _, c in reports))
            write({"step": 4})
            await until(lambda: any(s == 4 for _, s, _ in reports))
            write({"step": 5})
            proc.kill()
            proc.wait()
            await asyncio.wait_for(waiter, 20)

        asyncio.run(go())
        return reports, job

    reports, job = scenario(interval_s)
    steps = [(step, ckpt) for _, step, ckpt in reports]
    assert steps == [(1, None), (3, 3), (4, 3)], steps  # 2 held back, then overtaken
    (first_s, _, _), (commit_s, _, _), (fourth_s, _, _) = reports
    assert commit_s - first_s < interval_s  # the commit did not wait for the pace
    assert fourth_s - commit_s >= interval_s - 0.05  # step 4 did
    assert job.last_progress["step"] == 5  # what the final status carries

    reports, job = scenario(0.0)
    steps = [(step, ckpt) for _, step, ckpt in reports]
    assert steps[:4] == [(1, None), (3, None), (3, 3), (4, 3)], steps  # 2 and 3 were read together
