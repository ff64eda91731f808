"""Ranks started ahead of their jobs: idle `rank_launcher` processes kept by each node agent.

Starting a rank with `subprocess.Popen` returns only once the child has exec'd, and on a busy
node the child first waits for a core: in the e2e burst on the 2-core development machine a
job's ranks took 45 ms p50 and 233 ms p99 to start (`spawn_s`), the largest part of GPU freed
-> next job launched (docs/reaction-latency.md). An idle launcher already exists, so starting a
rank on one is a write to its pipe; the launchers that replace it start in the background,
after the launch. Everything else about a rank stays as it was: the same exit-recording `sh`
wrapper and environment, one process group per job, the pid the agent watches and adopts after
a restart, the rank's log.

Launchers come in sets, one per job: a leader in a process group of its own and members
started inside that group. A job's ranks must share a group (stop and cancel signal it), and a
process can be moved into a group only before it execs, by itself or its parent; a launcher
has exec'd its interpreter already, and moving itself when its request comes would race with
the job's first signal. So the group exists from the start, and a launch takes a whole set:
rank 0 is the leader, the members it does not need are retired.

A launcher reads its request from a pipe only this agent holds, so it outlives its agent only
until the pipe closes, then exits without running anything.
"""
from __future__ import annotations

import marshal
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

from frenzy.logs import get_logger
from frenzy_agent.procfs import process_start_ticks

log = get_logger("node-agent")

LAUNCHER_PROGRAM = Path(__file__).with_name("rank_launcher.py")

# What a rank is started with: argv, environment, working directory, log file.
RankRequest = tuple[list[str], dict[str, str], Path, Path]


class IdleLauncher:
    """One pre-started interpreter waiting for its request on stdin."""

    def __init__(self, process_group: int) -> None:
        # -I -S: no site, no user paths, no PYTHON* variables; the program imports built-ins only.
        self.process = subprocess.Popen(
            [sys.executable, "-I", "-S", str(LAUNCHER_PROGRAM)], stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, process_group=process_group)
        # The rank it becomes keeps this start time (an exec does not change it): read now, in
        # the background; read in the launch, while the rank execs, it slowed the launch.
        self.start_ticks = process_start_ticks(self.process.pid)

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def start_rank(self, request: RankRequest) -> int:
        """Make this launcher the rank; its pid. OSError: it is gone."""
        argv, env, cwd, log_path = request
        assert self.process.stdin is not None
        self.process.stdin.write(marshal.dumps((argv, env, str(cwd), str(log_path))))
        self.process.stdin.close()
        return self.pid

    def retire(self) -> None:
        """Close its pipe: an idle launcher then exits on its own (its set's `Reaper` reaps it)."""
        try:
            if self.process.stdin is not None:
                self.process.stdin.close()
        except OSError:
            pass


class Reaper:
    """Waits for retired launchers to exit, in one background thread per pool. Left unreaped, a
    spare stayed a zombie in its job's process group, which then never looked empty
    (`killpg(pgid, 0)` counts zombies) until some later launch's Popen happened to collect it.
    One thread started with the pool, not one per retirement: `Thread.start` waits until the new
    thread runs, and in the launch path on a busy node that took the launch's spawn from 13-14
    to 20-22 ms at the p50 (bench/e2e_latency.py, docs/reaction-latency.md, ninth round)."""

    def __init__(self) -> None:
        self._retired: queue.SimpleQueue[subprocess.Popen | None] = queue.SimpleQueue()
        threading.Thread(target=self._run, name="reap-launchers", daemon=True).start()

    def reap(self, process: subprocess.Popen) -> None:
        self._retired.put(process)

    def close(self) -> None:
        """After the launchers already handed over are reaped, the thread ends."""
        self._retired.put(None)

    def _run(self) -> None:
        while (process := self._retired.get()) is not None:
            process.wait()


class LauncherSet:
    """A leader with a process group of its own and `size - 1` members in that group."""

    def __init__(self, size: int, reaper: Reaper) -> None:
        self.reaper = reaper
        self.leader = IdleLauncher(process_group=0)
        self.members: list[IdleLauncher] = []
        try:
            self.members = [IdleLauncher(process_group=self.leader.pid) for _ in range(size - 1)]
        except OSError:
            self.retire()
            raise

    @property
    def size(self) -> int:
        return 1 + len(self.members)

    def start_ticks(self) -> list[int | None]:
        """Each launcher's start time, in rank order (`procfs.process_start_ticks`)."""
        return [launcher.start_ticks for launcher in [self.leader, *self.members]]

    def alive(self) -> bool:
        return self.leader.alive() and all(m.alive() for m in self.members)

    def start_ranks(self, requests: list[RankRequest]) -> list[int]:
        """Rank i on launcher i (rank 0 on the leader, whose pid is the job's process group);
        the members left over are retired. OSError: a launcher is gone; the ones already
        started are killed (a job never half-runs), and the caller starts the ranks anew."""
        launchers = [self.leader, *self.members][:len(requests)]
        try:
            pids = [launcher.start_rank(request) for launcher, request in zip(launchers, requests)]
        except OSError:
            self.kill()
            raise
        for spare in self.members[len(requests) - 1:]:
            spare.retire()
            self.reaper.reap(spare.process)
        return pids

    def retire(self) -> None:
        for launcher in [self.leader, *self.members]:
            launcher.retire()
            self.reaper.reap(launcher.process)

    def kill(self) -> None:
        self.retire()
        try:
            os.killpg(self.leader.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class PrestartedRanks:
    """Up to `sets` launcher sets of `ranks_per_set` launchers each (the node's GPUs), refilled in
    a background thread after each launch. Thread-safe: executor.launch runs in worker threads."""

    def __init__(self, sets: int, ranks_per_set: int) -> None:
        self.sets = sets if ranks_per_set > 0 else 0
        self.ranks_per_set = ranks_per_set
        self._idle: list[LauncherSet] = []
        self._lock = threading.Lock()
        self._filling = False
        self._closed = False
        self.reaper = Reaper() if self.sets else None

    def take(self, ranks: int) -> LauncherSet | None:
        """An idle set with room for `ranks`, or None (the caller starts them with Popen). The
        caller calls `refill` once its launch is done: a launcher started meanwhile holds the
        GIL through its fork and exec, and would stall the launch it is meant to speed up."""
        if ranks > self.ranks_per_set:
            return None
        with self._lock:
            while self._idle:
                launchers = self._idle.pop()
                if launchers.alive():
                    return launchers
                launchers.kill()
        return None

    def idle_sets(self) -> int:
        with self._lock:
            return len(self._idle)

    def refill(self) -> None:
        """Start sets in the background until the pool is full again."""
        with self._lock:
            if self._filling or self._closed or len(self._idle) >= self.sets:
                return
            self._filling = True
        threading.Thread(target=self._fill, name="prestart-ranks", daemon=True).start()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for launchers in idle:
            launchers.retire()
        if self.reaper is not None:
            self.reaper.close()

    def _fill(self) -> None:
        try:
            while True:
                with self._lock:
                    if self._closed or len(self._idle) >= self.sets:
                        return
                try:
                    launchers = LauncherSet(self.ranks_per_set, self.reaper)
                except OSError as err:  # out of processes or memory: launches use Popen
                    log.warning("cannot pre-start ranks", error=str(err))
                    return
                with self._lock:
                    if self._closed:
                        launchers.retire()
                        return
                    self._idle.append(launchers)
        finally:
            with self._lock:
                self._filling = False
