"""Launch and supervise one job's processes on this node (torchrun-style: one process per GPU).

The processes of a job share one OS process group, so stop and cancel reach the whole tree.
Each process runs under `sh`, which records its exit code in a file: an agent that restarts can
still learn how an adopted (not its own child) process ended. This module gathers facts
(`facts`); what they mean is decided in one place, `frenzy_agent.classify`.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from frenzy import jobvars
from frenzy.convert import plan_json
from frenzy.outcomes import read_status
from frenzy.security.jobenv import clean_environment
from frenzy.security.limits import check_job_id
from frenzy.v1 import events_pb2
from frenzy_agent.classify import JobFacts
from frenzy_agent.prestart import LauncherSet, PrestartedRanks
from frenzy_agent.procfs import boot_id, process_start_ticks, start_ticks, stat_fields

MODEL_CONFIG_FILE = "model_config.json"
# `trap : USR1`: the checkpoint-now signal goes to the whole process group; the wrapper must
# outlive it (else the agent sees the job gone before the trainer saved). A caught signal is
# reset to its default in the program `sh` runs, so the trainer installs its own handler.
_RECORD_EXIT = f'trap : USR1; "$@"; rc=$?; echo $rc > "${jobvars.EXIT_FILE}"; exit $rc'
# coreutils' nice: it sets the priority and execs the rest, so the pid stays the rank's.
NICE_PROGRAM = "/usr/bin/nice"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


@dataclass
class RunningJob:
    job_id: str
    attempt: int
    workdir: Path
    pgid: int
    pids: list[int]
    predicted_peak_bytes: int
    gpu_indices: list[int]
    cluster_id: str = ""  # the local cluster that launched it; another cluster never adopts it
    stopping: bool = False
    stop_reason: str = ""
    checkpoint_first: bool = False  # the stop asked for a checkpoint (SIGUSR1) first
    last_progress: dict = field(default_factory=dict)
    progress_offset: int = 0  # bytes of the progress file already read
    checkpoint_step: int | None = None  # the newest committed checkpoint the trainer reported
    checkpoint_write_s: float = 0.0  # how long that save took, start to commit
    # Who `pids` name: each one's start time (None: gone before it was read) on the boot
    # `boot_id`. A pid alone is reused, by a new process or, after a container restart, by the
    # first processes of a fresh pid namespace (see `same_process`).
    start_ticks: list[int | None] = field(default_factory=list)
    boot_id: str = ""

    @property
    def progress_file(self) -> Path:
        return self.workdir / "progress.jsonl"

    def save(self) -> None:
        (self.workdir / "state.json").write_text(json.dumps({
            "job_id": self.job_id, "attempt": self.attempt, "pgid": self.pgid, "pids": self.pids,
            "predicted_peak_bytes": self.predicted_peak_bytes, "gpu_indices": self.gpu_indices,
            "cluster_id": self.cluster_id, "start_ticks": self.start_ticks, "boot_id": self.boot_id}))

    @classmethod
    def load(cls, workdir: Path) -> "RunningJob":
        data = json.loads((workdir / "state.json").read_text())
        # A record written before start times were kept has none: its processes are then
        # recognised by the environment they were started with (`_marked`).
        return cls(data["job_id"], data["attempt"], workdir, data["pgid"], data["pids"],
                   data["predicted_peak_bytes"], data["gpu_indices"], data.get("cluster_id", ""),
                   start_ticks=list(data.get("start_ticks", [])), boot_id=data.get("boot_id", ""))


def job_key(job_id: str) -> str:
    """A file name for a job, whatever its id holds ("/", NUL, 256 characters): a readable
    prefix plus a hash of the whole id. The real id lives in state.json."""
    digest = hashlib.sha1(job_id.encode(errors="surrogatepass")).hexdigest()[:12]
    return f"{_UNSAFE.sub('_', job_id)[:64]}-{digest}"


def job_dir_name(job_id: str, attempt: int) -> str:
    """One directory per attempt."""
    return f"{job_key(job_id)}.{attempt}"


def job_command(launch: events_pb2.LaunchJob) -> list[str]:
    if launch.spec.entrypoint:
        return list(launch.spec.entrypoint)
    return [sys.executable, "-m", "frenzy_agent.workload"]


def job_environment(launch: events_pb2.LaunchJob, local_rank: int, workdir: Path,
                    time_scale: float, visible_devices: str | None = None,
                    checkpoint_root: Path | None = None) -> dict[str, str]:
    """The torchrun-compatible rendezvous environment plus Frenzy's own contract.

    `visible_devices` is CUDA_VISIBLE_DEVICES: the node's GPU UUIDs or indices for real GPUs,
    "" for a simulated inventory (its indices name no real device); None: the indices.
    """
    spec, option = launch.spec, launch.option
    if visible_devices is None:
        visible_devices = ",".join(str(g) for g in launch.gpu_indices)
    tokens_per_step = spec.training.seq_len * spec.training.global_batch_size
    steps = spec.training.steps or max(1, -(-spec.training.tokens // max(1, tokens_per_step)))
    return {
        **clean_environment(), **dict(spec.env),
        "CUDA_VISIBLE_DEVICES": visible_devices,
        "WORLD_SIZE": str(launch.world_size),
        "RANK": str(launch.rank_offset + local_rank),
        "LOCAL_RANK": str(local_rank),
        "LOCAL_WORLD_SIZE": str(len(launch.gpu_indices)),
        "GROUP_RANK": str(launch.node_rank),
        "MASTER_ADDR": launch.master_addr,
        "MASTER_PORT": str(launch.master_port),
        jobvars.PLAN: json.dumps(plan_json(option.plan)),
        jobvars.JOB_ID: launch.job_id,
        jobvars.ATTEMPT: str(launch.attempt),
        jobvars.GPU_TYPE: option.gpu_type,
        # An inline config.json is written into the job's directory (see launch).
        jobvars.MODEL: str(workdir / MODEL_CONFIG_FILE) if spec.model_config_json else spec.model,
        jobvars.SEQ_LEN: str(spec.training.seq_len),
        jobvars.GLOBAL_BATCH: str(spec.training.global_batch_size),
        jobvars.STEPS: str(steps),
        jobvars.PRECISION: spec.training.precision or "bf16",
        jobvars.OPTIMIZER: spec.training.optimizer or "adamw",
        jobvars.GRAD_DTYPE: spec.training.grad_dtype or "fp32",
        jobvars.ATTENTION: spec.training.attention or "flash",
        jobvars.DROPOUT: str(spec.training.dropout),
        jobvars.TOKENS_PER_STEP: str(tokens_per_step),
        jobvars.PREDICTED_DURATION_S: str(option.duration_s),
        # What max_memory_allocated should reach: the allocated peak (the synthetic workload
        # reports it as its measurement; options from before the three peaks carry only one).
        jobvars.PREDICTED_PEAK_BYTES: str(option.peak_allocated_bytes or option.peak_bytes_per_gpu),
        jobvars.TIME_SCALE: str(time_scale),
        jobvars.PROGRESS_FILE: str(workdir / "progress.jsonl"),
        jobvars.EXIT_FILE: str(workdir / f"exit.{local_rank}"),
        jobvars.STATUS_FILE: str(workdir / f"status.{local_rank}.json"),
        "PYTHONUNBUFFERED": "1",
        **checkpoint_environment(launch, checkpoint_root or workdir.parent / "checkpoints"),
    }


def checkpoint_environment(launch: events_pb2.LaunchJob, root: Path) -> dict[str, str]:
    """Where the job's checkpoints live (one directory per job, shared by its attempts, so a
    new attempt finds the last one) and the spec's checkpoint policy (docs/trainer.md)."""
    t = launch.spec.training
    uri, _ = checkpoint_location(launch.job_id, launch.checkpoint_uri or t.checkpoint_uri, root)
    # The trainer keeps its checkpoints when it finishes: the orchestrator decides when the job
    # has ended for good (no retry needs them) and tells the agents (DeleteCheckpoints).
    env = {jobvars.CHECKPOINT_URI: uri, jobvars.RESUME_FROM_STEP: str(launch.resume_from_step),
           jobvars.KEEP_CHECKPOINTS: "1"}
    if t.checkpoint_every_steps:
        env[jobvars.CHECKPOINT_EVERY_STEPS] = str(t.checkpoint_every_steps)
    if t.checkpoint_every_s:
        env[jobvars.CHECKPOINT_EVERY_S] = str(t.checkpoint_every_s)
    if t.checkpoint_keep:
        env[jobvars.CHECKPOINT_KEEP] = str(t.checkpoint_keep)
    return env


def checkpoint_location(job_id: str, uri: str, root: Path) -> tuple[str, bool]:
    """A job's checkpoint directory, and whether the agent owns it: made for this job alone
    under the checkpoint root (the default), rather than named by the spec (`uri`)."""
    if uri:
        return uri, False
    return str((root / job_key(job_id)).resolve()), True


def launch(launch_cmd: events_pb2.LaunchJob, jobs_dir: Path, time_scale: float,
           visible_devices: str | None = None, cluster_id: str = "",
           checkpoint_root: Path | None = None,
           prestarted: PrestartedRanks | None = None, rank_nice: int = 0) -> RunningJob:
    """Start the job's ranks on this node: on a set of pre-started launchers from `prestarted`
    when one is idle (frenzy_agent.prestart), else with Popen. The caller refills `prestarted`
    once the launch is reported (`PrestartedRanks.refill`). `rank_nice` > 0 runs the ranks that
    much below the agent's CPU priority (ServiceSettings.agent_rank_nice)."""
    # The orchestrator admits only valid ids (frenzy.security.limits); a record that bypassed
    # it still never names a directory outside jobs_dir (job_dir_name is flat whatever the id).
    check_job_id(launch_cmd.job_id)
    # Absolute: the job runs with this as its cwd, and its environment names files in it.
    workdir = (jobs_dir / job_dir_name(launch_cmd.job_id, launch_cmd.attempt)).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    if launch_cmd.spec.model_config_json:
        (workdir / MODEL_CONFIG_FILE).write_text(launch_cmd.spec.model_config_json)
    command = [*nice_prefix(rank_nice), "/bin/sh", "-c", _RECORD_EXIT, "sh",
               *job_command(launch_cmd)]

    def environment(local_rank: int) -> dict[str, str]:
        return job_environment(launch_cmd, local_rank, workdir, time_scale, visible_devices,
                               checkpoint_root)

    def log_path(local_rank: int) -> Path:
        return workdir / f"rank{local_rank}.log"

    def popen(local_rank: int, pgid: int) -> int:
        with open(log_path(local_rank), "ab") as log:
            # Plain Popen, not asyncio's: the agent reaps its children itself (see _alive),
            # which also works for processes it adopts after a restart. pgid 0: a new group.
            return subprocess.Popen(
                command, env=environment(local_rank), stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, cwd=workdir, process_group=pgid).pid

    def start_with_popen(ranks: int) -> list[int]:
        if not ranks:
            return []
        pgid = popen(0, 0)  # the first rank leads the job's process group
        if ranks == 1:
            return [pgid]
        # The other ranks at once, each from its own thread: a start returns only once its
        # child has exec'd, and on a busy node each child waits for a core, so one after the
        # other the waits add up (an 8-rank job: 0.25 s p50 at load 10 on 2 cores); in
        # parallel they overlap.
        with ThreadPoolExecutor(max_workers=ranks - 1) as pool:
            futures = [pool.submit(popen, rank, pgid) for rank in range(1, ranks)]
        try:
            return [pgid, *(f.result() for f in futures)]
        except BaseException:
            _kill_group(pgid)  # a job never half-runs
            raise

    def start_prestarted(launchers: LauncherSet, ranks: int) -> list[int]:
        requests = []
        for rank in range(ranks):
            log_path(rank).touch()  # made here, as Popen's log is: a launcher cannot fail to open it
            requests.append((command, environment(rank), workdir, log_path(rank)))
        return launchers.start_ranks(requests)

    ranks = len(launch_cmd.gpu_indices)
    launchers = prestarted.take(ranks) if prestarted is not None and ranks else None
    pids = None
    if launchers is not None:
        try:
            pids = start_prestarted(launchers, ranks)
            # Read when the launchers started: read now, while the ranks exec, it slowed the launch.
            ticks = launchers.start_ticks()[:ranks]
        except OSError:  # a launcher died while idle: start the ranks the usual way
            launchers.kill()
        except BaseException:
            launchers.kill()
            raise
    if pids is None:
        pids = start_with_popen(ranks)
        ticks = [process_start_ticks(pid) for pid in pids]  # Popen returned after the exec
    pgid = pids[0] if pids else 0
    job = RunningJob(launch_cmd.job_id, launch_cmd.attempt, workdir, pgid, pids,
                     launch_cmd.option.peak_bytes_per_gpu, list(launch_cmd.gpu_indices), cluster_id,
                     start_ticks=ticks, boot_id=boot_id())
    job.save()
    return job


def nice_prefix(rank_nice: int) -> list[str]:
    """What runs a command `rank_nice` below the caller's CPU priority: a prefix, as YARN's
    ContainerExecutor.getRunCommand puts `nice -n` before a container's command, rather than a
    `preexec_fn`, which is unsafe in the agent's threads and a pre-started launcher never runs."""
    return [NICE_PROGRAM, "-n", str(rank_nice)] if rank_nice else []


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def same_process(job: RunningJob, rank: int, fields: list[str]) -> bool:
    """Whether the process at rank's pid (`fields`: its /proc stat) is still the one the agent
    started for it.

    After a container restart the fresh pid namespace hands out the same small pids again, and
    the agent's own pre-started launchers took the pid of the job that died with the old
    container: taken for that job, an idle launcher was adopted and supervised for good (the
    compose test's job never ended). Start times tell them apart; a record without them falls
    back to the environment the job's processes were started with."""
    pid = job.pids[rank]
    if job.boot_id and job.boot_id != boot_id():
        return False
    ticks = job.start_ticks[rank] if rank < len(job.start_ticks) else None
    if ticks is not None:
        return start_ticks(fields) == ticks
    return _marked(pid, job)


def _marked(pid: int, job: RunningJob) -> bool:
    """Whether `pid` was started with this attempt's environment (job_environment), as every
    rank and everything it starts is unless it clears its environment."""
    try:
        environ = b"\0" + Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return (f"\0{jobvars.JOB_ID}={job.job_id}\0".encode() in environ
            and f"\0{jobvars.ATTEMPT}={job.attempt}\0".encode() in environ)


def process_running(pid: int) -> bool:
    """Whether a process runs at `pid` (whichever it is): not exited, not a zombie."""
    return _stat_if_running(pid) is not None


def _stat_if_running(pid: int) -> list[str] | None:
    """`pid`'s /proc stat fields if a process runs there (not exited, not a zombie); reaps it
    when it is our exited child. /proc first, then the reap: the other order (reap, then read)
    missed a child that exited between the two, saw its zombie, called it gone and never reaped
    it, so its process group stayed alive to `killpg(pgid, 0)` (one CI run of test_agent_prestart).
    A running rank costs one read of /proc, no waitpid."""
    fields = stat_fields(pid)
    if fields is not None and fields[0] != "Z":
        return fields
    try:
        os.waitpid(pid, os.WNOHANG)  # our exited child: reaped now (whoever's zombie it is)
    except ChildProcessError:
        pass  # not our child (adopted after an agent restart), or already reaped
    return None


def _alive(job: RunningJob, rank: int) -> bool:
    """Whether rank's process still runs, and not another process that has its pid now (even
    a child of ours: after a container restart the agent's own launchers took dead jobs'
    pids). Polled every few tens of ms for every rank: one read of /proc while it runs."""
    fields = _stat_if_running(job.pids[rank])
    return fields is not None and same_process(job, rank, fields)


def ranks_alive(job: RunningJob) -> list[int]:
    return [rank for rank in range(len(job.pids)) if _alive(job, rank)]


def group_alive(job: RunningJob) -> bool:
    """Whether anything of the job still runs: a rank, or a process left in its group (a
    rank's child). A group of that id that is not the job's (its id reused) does not count."""
    if ranks_alive(job):
        return True
    if job.boot_id and job.boot_id != boot_id():
        return False
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        fields = stat_fields(int(entry.name))
        if (fields is not None and len(fields) > 2 and fields[2] == str(job.pgid)
                and fields[0] != "Z" and _marked(int(entry.name), job)):
            return True
    return False


def read_progress(job: RunningJob) -> dict:
    """The last complete progress line of the job's progress file. Polled every few tens of ms,
    so it reads only the lines written since the last call: a long job's file grows by a line a
    step. Checkpoint commits (`{"event": "checkpoint", "step": N, "write_s": S}`) go to
    `job.checkpoint_step` and `job.checkpoint_write_s`."""
    try:
        with open(job.progress_file, "rb") as f:
            f.seek(job.progress_offset)
            new_bytes = f.read()
    except OSError:
        return job.last_progress
    complete = new_bytes[:new_bytes.rfind(b"\n") + 1]  # a line still being written waits
    job.progress_offset += len(complete)
    for line in complete.splitlines():
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if not isinstance(data, dict) or not isinstance(data.get("step"), int):
            continue
        if data.get("event") == "checkpoint":
            job.checkpoint_step = max(job.checkpoint_step or 0, data["step"])
            write_s = data.get("write_s")
            if isinstance(write_s, (int, float)) and write_s >= 0:
                job.checkpoint_write_s = float(write_s)
        elif data.get("event") != "resumed":
            job.last_progress = data
    return job.last_progress


def facts(job: RunningJob, agent_was_down: bool = False) -> JobFacts:
    """What the job left behind: each rank's recorded exit code and status file, the tails of
    its logs and its last measured memory peak. `classify` decides what they mean. A PREEMPTED
    status names the checkpoint its rank committed, kept in `job.checkpoint_step` for the report."""
    codes: list[int | None] = []
    for rank in range(len(job.pids)):
        try:
            codes.append(int((job.workdir / f"exit.{rank}").read_text().strip()))
        except (OSError, ValueError):
            codes.append(None)
    statuses = tuple(read_status(job.workdir / f"status.{rank}.json") for rank in range(len(job.pids)))
    saved = [s.checkpoint_step for s in statuses if s is not None and s.checkpoint_step is not None]
    if saved:
        job.checkpoint_step = max([job.checkpoint_step or 0, *saved])
    failed = any(code != 0 for code in codes)
    return JobFacts(
        exit_codes=tuple(codes), statuses=statuses,
        log_tails=tuple(_log_tails(job)) if failed else (),
        peak_memory_bytes=int(read_progress(job).get("peak_memory_bytes", 0) or 0),
        predicted_peak_bytes=job.predicted_peak_bytes,
        stop_reason=job.stop_reason if job.stopping or job.checkpoint_first else None,
        checkpoint_requested=job.checkpoint_first, agent_was_down=agent_was_down,
        finished=read_progress(job).get("event") == "done")


def _log_tails(job: RunningJob) -> list[str]:
    """The last 4 KiB of each rank's log: where a failing process says why."""
    tails = []
    for log in sorted(job.workdir.glob("rank*.log")):
        try:
            with open(log, "rb") as f:
                f.seek(max(0, log.stat().st_size - 4096))
                tails.append(f.read().decode(errors="replace"))
        except OSError:
            continue
    return tails


async def wait_for_exit(job: RunningJob, on_progress, poll_s: float = 0.05,
                        report_interval_s: float = 0.0) -> JobFacts:
    """Poll until every process of the job is gone, reporting progress as it changes.

    Progress is reported at most once per report_interval_s: every report fans out to the
    whole control plane (docs/architecture.md, "Reaction latency"). The first step and each
    checkpoint commit go at once, since the orchestrator resumes from the last commit it
    heard of; a step held back meanwhile goes when the interval is up, and the final status
    carries the last one read (`job.last_progress`).

    When one process fails the others are stopped, so a job never half-runs. A process's exit
    wakes the loop at once (`ExitWatch`): the GPUs it frees reach the orchestrator without
    waiting out the poll interval, which only paces the progress reports.
    """
    reported: tuple | None = None  # (step, checkpoint step) last reported
    reported_at_s = -math.inf
    with ExitWatch(job.pids) as exits:
        while True:
            alive = ranks_alive(job)
            progress = read_progress(job)
            current = (progress.get("step"), job.checkpoint_step)
            now_s = time.monotonic()
            if progress and current != reported and (
                    reported is None or current[1] != reported[1]
                    or now_s - reported_at_s >= report_interval_s):
                reported, reported_at_s = current, now_s
                await on_progress(progress)
            if not alive:
                return facts(job)
            if len(alive) < len(job.pids) and not job.stopping and _any_failed(job):
                await stop(job, "a process of the job failed", grace_s=2.0)
                job.stopping = False  # report the failure, not a stop
            await exits.wait(poll_s)


class ExitWatch:
    """Wakes a waiter when any of the given processes exits: a pidfd per process (Linux 5.3+;
    children and adopted processes alike) in the event loop, instead of waiting for the next
    poll. Where pidfds are missing (an older kernel, a process already gone) `wait` is a
    plain sleep and polling finds the exit, as before."""

    def __init__(self, pids: list[int]) -> None:
        self._pids = pids
        self._fds: list[int] = []
        self._exited: asyncio.Event | None = None

    def __enter__(self) -> "ExitWatch":
        loop = asyncio.get_running_loop()
        self._exited = asyncio.Event()
        for pid in self._pids:
            try:
                fd = os.pidfd_open(pid)
            except (AttributeError, OSError):
                continue
            self._fds.append(fd)
            loop.add_reader(fd, self._on_exit, fd)
        return self

    def _on_exit(self, fd: int) -> None:
        # A pidfd stays readable once its process is gone: watch it once, then stop.
        asyncio.get_running_loop().remove_reader(fd)
        self._exited.set()

    async def wait(self, timeout_s: float) -> None:
        """Until a watched process exits or timeout_s passes."""
        try:
            await asyncio.wait_for(self._exited.wait(), timeout_s)
        except asyncio.TimeoutError:
            pass
        self._exited.clear()

    def __exit__(self, *exc: object) -> None:
        loop = asyncio.get_running_loop()
        for fd in self._fds:
            loop.remove_reader(fd)
            os.close(fd)
        self._fds.clear()


def _any_failed(job: RunningJob) -> bool:
    for rank in range(len(job.pids)):
        try:
            if int((job.workdir / f"exit.{rank}").read_text().strip()) != 0:
                return True
        except (OSError, ValueError):
            continue
    return False


async def _gone_within(job: RunningJob, grace_s: float, whole_group: bool = False) -> bool:
    """Whether the job's processes (and, with whole_group, anything left in their process group)
    exit within grace_s after a signal."""
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not (group_alive(job) if whole_group else ranks_alive(job)):
            return True
        await asyncio.sleep(0.05)
    return False


async def stop(job: RunningJob, reason: str, grace_s: float) -> None:
    """SIGTERM the whole process group, then SIGKILL after the grace period."""
    job.stopping, job.stop_reason = True, reason
    if not group_alive(job):  # never signal a group whose id another has now
        return
    try:
        os.killpg(job.pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    if await _gone_within(job, grace_s, whole_group=True):
        return
    try:
        os.killpg(job.pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    ranks_alive(job)  # reaps


async def checkpoint_and_stop(job: RunningJob, reason: str, checkpoint_grace_s: float,
                              stop_grace_s: float) -> None:
    """Checkpoint-now: SIGUSR1 to the job's processes (the trainer saves at its next step
    boundary, writes a PREEMPTED status file per rank and exits); if they are still there after
    the grace period, stop them. Either way `classify` reports PREEMPTED and the last committed
    checkpoint stands."""
    job.checkpoint_first, job.stop_reason = True, reason
    if not group_alive(job):
        return
    try:
        os.killpg(job.pgid, signal.SIGUSR1)
    except ProcessLookupError:
        return
    if await _gone_within(job, checkpoint_grace_s):
        return
    await stop(job, f"{reason}: no checkpoint within {checkpoint_grace_s:g} s", stop_grace_s)
