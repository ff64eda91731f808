"""Ranks started on pre-started launchers (frenzy_agent.prestart): real processes throughout.
A rank on a launcher must be indistinguishable from one Popen starts (environment, working
directory, log, process group, signal dispositions, exit record), spare and idle launchers must
go away on their own, and a launcher that died while idle must not fail the launch."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from frenzy.v1 import events_pb2, types_pb2
from frenzy_agent import executor
from frenzy_agent.prestart import LauncherSet, PrestartedRanks, Reaper
from frenzy_agent.procfs import stat_fields


def full_pool(ranks_per_set: int, sets: int = 1) -> PrestartedRanks:
    pool = PrestartedRanks(sets, ranks_per_set)
    pool.refill()
    deadline = time.monotonic() + 60
    while pool.idle_sets() < sets:
        assert time.monotonic() < deadline, "the pool never filled"
        time.sleep(0.01)
    return pool


def wait_gone(pids: list[int], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while any(executor.process_running(pid) for pid in pids):  # reaps our own children
        assert time.monotonic() < deadline, f"still running: {pids}"
        time.sleep(0.01)


def launch_cmd(job_id: str, ranks: int, program: str) -> events_pb2.LaunchJob:
    return events_pb2.LaunchJob(job_id=job_id, attempt=0, gpu_indices=list(range(ranks)),
                                world_size=ranks,
                                spec=types_pb2.JobSpec(entrypoint=["/bin/sh", "-c", program]))


# What a rank sees of how it was started: its signal masks, group, directory and environment.
SELF_REPORT = ("grep -E '^(SigBlk|SigIgn|SigCgt)' /proc/self/status > seen.$LOCAL_RANK; "
               "echo pgid $(ps -o pgid= -p $$) >> seen.$LOCAL_RANK; pwd >> seen.$LOCAL_RANK; "
               "env | grep -E '^(RANK|LOCAL_RANK|WORLD_SIZE|FRENZY_JOB_ID)=' | sort >> seen.$LOCAL_RANK; "
               "echo on stdout; echo on stderr >&2")


def seen(job: executor.RunningJob, rank: int) -> list[str]:
    return (job.workdir / f"seen.{rank}").read_text().replace(str(job.pgid), "PGID").splitlines()


def test_a_rank_on_a_launcher_starts_as_a_popen_rank_does(tmp_path: Path) -> None:
    pool = full_pool(4)
    try:
        on_launchers = executor.launch(launch_cmd("j", 3, SELF_REPORT), tmp_path / "a", 1.0, "",
                                       checkpoint_root=tmp_path / "ckpt", prestarted=pool)
        assert pool.idle_sets() == 0  # the set was taken (refilling is the caller's)
        with_popen = executor.launch(launch_cmd("j", 3, SELF_REPORT), tmp_path / "b", 1.0, "",
                                     checkpoint_root=tmp_path / "ckpt")
        wait_gone(on_launchers.pids + with_popen.pids)
    finally:
        pool.close()
    assert on_launchers.pgid == on_launchers.pids[0] and len(set(on_launchers.pids)) == 3
    for rank in range(3):
        mine, popens = seen(on_launchers, rank), seen(with_popen, rank)
        assert mine[:4] == popens[:4]  # signal masks and the job's process group
        assert mine[4] == str(on_launchers.workdir) and popens[4] == str(with_popen.workdir)
        assert mine[5:] == popens[5:] and f"LOCAL_RANK={rank}" in mine
        assert (on_launchers.workdir / f"exit.{rank}").read_text().strip() == "0"
        log = (on_launchers.workdir / f"rank{rank}.log").read_text()
        assert "on stdout" in log and "on stderr" in log


def test_the_spare_launchers_of_a_set_exit_and_the_taken_set_is_replaced(tmp_path: Path) -> None:
    pool = full_pool(4)
    try:
        launchers = pool._idle[0]
        spares = [m.process for m in launchers.members[1:]]
        job = executor.launch(launch_cmd("j", 2, "sleep 0.2"), tmp_path, 1.0, "",
                              checkpoint_root=tmp_path / "ckpt", prestarted=pool)
        assert job.pids == [launchers.leader.pid, launchers.members[0].pid]
        for spare in spares:
            assert spare.wait(timeout=30) == 0  # retired: its pipe closed, it ran nothing
        wait_gone(job.pids)
        pool.refill()
        deadline = time.monotonic() + 60
        while pool.idle_sets() < 1:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        pool.close()


def test_idle_launchers_end_when_their_agent_goes(tmp_path: Path) -> None:
    """An agent killed outright closes the launchers' pipes with it: they exit, running nothing."""
    script = ("import sys, time\n"
              "from frenzy_agent.prestart import PrestartedRanks\n"
              "pool = PrestartedRanks(2, 3); pool.refill()\n"
              "while pool.idle_sets() < 2: time.sleep(0.01)\n"
              "print(' '.join(str(p.pid) for s in pool._idle for p in [s.leader, *s.members]), flush=True)\n"
              "import os; os.kill(os.getpid(), 9)\n")
    agent = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    pids = [int(p) for p in agent.stdout.split()]
    assert agent.returncode == -signal.SIGKILL and len(pids) == 6
    deadline = time.monotonic() + 30
    while any(executor.process_running(pid) for pid in pids):  # orphans: read from /proc
        assert time.monotonic() < deadline, "idle launchers outlived their agent"
        time.sleep(0.02)


def test_the_spare_launchers_of_a_taken_set_are_reaped_and_leave_the_jobs_group_empty(
        tmp_path: Path) -> None:
    """Nobody else waits for the spares: the pool must. A spare left a zombie kept the job's
    process group alive to `killpg(pgid, 0)` for good (test_e2e_failures' fenced attempt)."""
    pool = full_pool(4)
    try:
        spares = [m.process for m in pool._idle[0].members]  # held: no Popen.__del__ reaps them
        job = executor.launch(launch_cmd("j", 1, "true"), tmp_path, 1.0, "",
                              checkpoint_root=tmp_path / "ckpt", prestarted=pool)
        wait_gone(job.pids)
        deadline = time.monotonic() + 30
        while True:
            try:
                os.killpg(job.pgid, 0)
            except ProcessLookupError:
                break
            assert time.monotonic() < deadline, "the job's process group outlived its processes"
            time.sleep(0.02)
        assert all(spare.returncode == 0 for spare in spares)
    finally:
        pool.close()


def test_a_launch_on_launchers_records_each_ranks_start_time(tmp_path: Path) -> None:
    """Read when the launchers started (a read while a rank execs would wait for the exec):
    the same start time /proc gives the running rank, which a restarted agent checks."""
    from frenzy_agent.procfs import process_start_ticks

    pool = full_pool(3)
    try:
        job = executor.launch(launch_cmd("j", 3, "sleep 2"), tmp_path, 1.0, "",
                              checkpoint_root=tmp_path / "ckpt", prestarted=pool)
        assert job.start_ticks == [process_start_ticks(pid) for pid in job.pids]
        assert None not in job.start_ticks and executor.ranks_alive(job) == [0, 1, 2]
        wait_gone(job.pids)
    finally:
        pool.close()


def test_closing_the_pool_ends_its_idle_launchers() -> None:
    pool = full_pool(2, sets=2)
    processes = [p.process for s in pool._idle for p in [s.leader, *s.members]]
    pool.close()
    assert [p.wait(timeout=30) for p in processes] == [0, 0, 0, 0]


@pytest.mark.parametrize("dead", ["leader", "member"])
def test_a_launcher_that_died_while_idle_does_not_fail_the_launch(tmp_path: Path, dead: str) -> None:
    pool = full_pool(3)
    try:
        launchers = pool._idle[0]
        victim = launchers.leader if dead == "leader" else launchers.members[1]
        victim.process.kill()
        victim.process.wait()
        job = executor.launch(launch_cmd("j", 3, "sleep 0.2"), tmp_path, 1.0, "",
                              checkpoint_root=tmp_path / "ckpt", prestarted=pool)
        wait_gone(job.pids)
    finally:
        pool.close()
    assert launchers.leader.pid not in job.pids  # the set was dropped, Popen started the ranks
    assert [(job.workdir / f"exit.{r}").read_text().strip() for r in range(3)] == ["0", "0", "0"]


def test_checkpoint_now_before_a_launcher_has_become_its_rank_does_not_end_it(tmp_path: Path) -> None:
    """SIGUSR1 goes to the job's process group; a launcher still reading its request must not
    die of it (the rank would never run), and the rank gets the signal's default back."""
    launchers = LauncherSet(2, Reaper())
    time.sleep(0.5)  # the interpreters have installed their handler
    os.killpg(launchers.leader.pid, signal.SIGUSR1)
    time.sleep(0.2)
    assert launchers.alive()
    report = "grep -E '^SigCgt' /proc/self/status > caught.$LOCAL_RANK"
    workdir = tmp_path / "w"
    workdir.mkdir()
    requests = []
    for rank in range(2):
        (workdir / f"rank{rank}.log").touch()
        requests.append((["/bin/sh", "-c", report], {"LOCAL_RANK": str(rank), "PATH": os.environ["PATH"]},
                         workdir, workdir / f"rank{rank}.log"))
    pids = launchers.start_ranks(requests)
    wait_gone(pids)
    for rank in range(2):
        caught = int((workdir / f"caught.{rank}").read_text().split()[1], 16)
        assert not caught & (1 << (signal.SIGUSR1 - 1))


def test_a_launch_larger_than_a_set_uses_popen() -> None:
    pool = full_pool(2)
    try:
        assert pool.take(3) is None and pool.idle_sets() == 1
        assert isinstance(pool.take(2), LauncherSet) and pool.idle_sets() == 0
    finally:
        pool.close()


NICE_FIELD = 16  # procfs.stat_fields, which starts at field 3: field 19, the nice value


@pytest.mark.parametrize("pre_started", [True, False])
def test_ranks_run_the_configured_niceness_below_the_agent_and_keep_their_pids(
        tmp_path: Path, pre_started: bool) -> None:
    """ServiceSettings.agent_rank_nice: the pid the agent holds (the exit-recording wrapper) and
    what it runs are both at the agent's niceness + 7, on a launcher and with Popen alike."""
    pool = full_pool(2) if pre_started else None
    try:
        job = executor.launch(launch_cmd("j", 2, "ps -o ni= -p $$ > nice.$LOCAL_RANK; sleep 30"),
                              tmp_path, 1.0, "", checkpoint_root=tmp_path / "ckpt",
                              prestarted=pool, rank_nice=7)
        try:
            expected = os.getpriority(os.PRIO_PROCESS, 0) + 7
            deadline = time.monotonic() + 30
            while not all((job.workdir / f"nice.{r}").is_file() for r in range(2)):
                assert time.monotonic() < deadline, "the ranks never ran"
                time.sleep(0.01)
            time.sleep(0.05)  # ps has written its line
            for rank, pid in enumerate(job.pids):
                assert (job.workdir / f"nice.{rank}").read_text().strip() == str(expected)
                fields = stat_fields(pid)
                assert fields is not None and int(fields[NICE_FIELD]) == expected
            assert job.pgid == job.pids[0]
        finally:
            os.killpg(job.pgid, signal.SIGKILL)
            wait_gone(job.pids)
    finally:
        if pool is not None:
            pool.close()
