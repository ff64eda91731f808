"""Node agent: heartbeats, this node's commands, and the job processes they start."""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import sys
import time
from collections import OrderedDict
from pathlib import Path

from aiokafka import TopicPartition

from frenzy import topics
from frenzy.bus import Bus, partition_for_key
from frenzy.checkpointdir import checkpoints_left, remove_checkpoints
from frenzy.config import ServiceSettings
from frenzy.logs import get_logger
from frenzy.runtime import run_service, run_until_stopped
from frenzy.security.wiring import agent_security
from frenzy.v1 import events_pb2, types_pb2
from frenzy_agent import executor
from frenzy_agent.classify import Outcome, classify
from frenzy_agent.gpus import Gpu, NvmlMonitor, discover
from frenzy_agent.logship import LogShipper, record_rank_offset
from frenzy_agent.prestart import PrestartedRanks

log = get_logger("node-agent")
REJOIN_EVERY_HEARTBEATS = 30
ENDED_REMEMBERED = 256  # ended attempts listed in heartbeats (a few KiB)


class NodeAgent:
    def __init__(self, bus: Bus, node_id: str, gpus: list[Gpu], state_dir: Path,
                 settings: ServiceSettings, host: str = "127.0.0.1",
                 monitor: NvmlMonitor | None = None, cluster_id: str = "") -> None:
        self.bus = bus
        self.node_id = node_id
        self.gpus = gpus
        # Live memory and health of real GPUs; a simulated inventory has nothing to read.
        self.monitor = monitor if monitor is not None or all(g.simulated for g in gpus) \
            else NvmlMonitor()
        self.settings = settings
        if settings.agent_rank_nice and not os.access(executor.NICE_PROGRAM, os.X_OK):
            # Said at start, not as every job's failed launch.
            raise RuntimeError(f"FRENZY_AGENT_RANK_NICE={settings.agent_rank_nice} needs "
                               f"{executor.NICE_PROGRAM} (coreutils), which is missing here")
        self.host = host
        # The local cluster this agent belongs to ("" outside `frenzy up`): its job records carry
        # it, and a restarted agent adopts only its own cluster's jobs.
        self.cluster_id = cluster_id
        self.jobs_dir = state_dir / node_id
        # One directory per job, shared by the agents of a state dir (or FRENZY_CHECKPOINT_ROOT,
        # shared storage on a real cluster), so an attempt on another node finds the checkpoint.
        self.checkpoint_root = Path(settings.checkpoint_root) if settings.checkpoint_root \
            else state_dir / "checkpoints"
        self.running: dict[str, executor.RunningJob] = {}  # job id -> its processes here
        self.supervisors: dict[str, asyncio.Task] = {}
        self.stoppers: set[asyncio.Task] = set()  # checkpoint-now stops in flight
        self.sequence = 0
        self.restarts = 0  # counted in count_start()
        # Signed commands in, signed status and heartbeats out (frenzy/security); None in
        # development without an orchestrator key.
        self.security = agent_security(settings, node_id, state_dir / ".keys" / node_id)
        if self.security is not None and bus is not None:
            bus.signer = self.security.signer
        self.ended: OrderedDict[str, None] = OrderedDict()  # "job:attempt", newest last
        self.logs = LogShipper(bus, node_id)
        self.prestarted = PrestartedRanks(settings.agent_prestarted_launches, len(gpus))

    # ----- status ---------------------------------------------------------------------
    async def report(self, job: executor.RunningJob, state: int, reason: str = "",
                     exit_code: int = 0, progress: dict | None = None) -> None:
        status = events_pb2.JobStatusChanged(
            job_id=job.job_id, state=state, reason=reason, source=events_pb2.AGENT,
            node_id=self.node_id, attempt=job.attempt, exit_code=exit_code)
        p = progress or job.last_progress
        if p:
            steps = int(p.get("steps", 0))
            status.progress.CopyFrom(types_pb2.Progress(
                step=int(p.get("step", 0)), steps=steps, tokens=int(p.get("tokens", 0)),
                loss=float(p.get("loss", 0.0)), peak_memory_bytes=int(p.get("peak_memory_bytes", 0)),
                fraction=min(1.0, int(p.get("step", 0)) / steps) if steps else 0.0,
                checkpoint_write_s=job.checkpoint_write_s))
        if job.checkpoint_step is not None:
            status.checkpoint_step = job.checkpoint_step
        await self.bus.publish(topics.JOBS_STATUS, job.job_id, status, trace_id=job.job_id)

    async def supervise(self, job: executor.RunningJob) -> None:
        async def on_progress(progress: dict) -> None:
            await self.report(job, types_pb2.RUNNING, "progress", progress=progress)

        try:
            result = classify(await executor.wait_for_exit(
                job, on_progress, report_interval_s=self.settings.agent_progress_interval_s))
        finally:
            if self.running.get(job.job_id) is job:
                self.running.pop(job.job_id, None)
                self.supervisors.pop(job.job_id, None)
        await self.finish(job, result)

    async def finish(self, job: executor.RunningJob, result: Outcome) -> None:
        """Report how a job ended (supervised or found after a restart), then tidy its files."""
        self.ended[f"{job.job_id}:{job.attempt}"] = None
        while len(self.ended) > ENDED_REMEMBERED:
            self.ended.popitem(last=False)
        log.info("job processes ended", job_id=job.job_id, attempt=job.attempt,
                 outcome=result.state, reason=result.reason, exit_code=result.exit_code)
        # A preemption is reported as FAILED with the PREEMPTED reason prefix, as OOM and
        # RENDEZVOUS are: the orchestrator reads the prefix and resumes the job from its checkpoint.
        await self.ship_last_logs(job)
        state = {"succeeded": types_pb2.SUCCEEDED, "failed": types_pb2.FAILED,
                 "lost": types_pb2.FAILED}.get(result.state)
        if state is not None:  # a stopped job was ended by the orchestrator; nothing to report
            await self.report(job, state, result.reason, result.exit_code)
        else:
            # Its GPUs stay fenced until a heartbeat shows them released: send that one now,
            # not up to a heartbeat interval later.
            await self.bus.publish(topics.NODES_HEARTBEATS, self.node_id, self.heartbeat())
        if state == types_pb2.SUCCEEDED:
            # The logs go; the record stays, so a redelivered LaunchJob for this attempt is
            # recognised and not run a second time.
            for path in job.workdir.iterdir():
                if path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
                elif path.name != "state.json":
                    path.unlink(missing_ok=True)
        # Failed ones keep their logs for post-mortems; a restarted agent must not report it again.
        if job.workdir.exists():
            (job.workdir / "reported").touch()

    async def ship_last_logs(self, job: executor.RunningJob) -> None:
        """Before the final status: a reader that saw the job end then finds all its lines."""
        try:
            await self.logs.ship(job.job_id, job.attempt, job.workdir)
        except Exception:
            log.warning("shipping the last log lines failed", job_id=job.job_id, exc_info=True)
        self.logs.forget(job.workdir)

    # ----- commands ----------------------------------------------------------------------
    async def on_launch(self, env: events_pb2.Envelope, key: str) -> None:
        cmd = env.launch_job
        if cmd.node_id != self.node_id:
            return  # another node's command on a shared partition
        try:
            await self._launch(cmd, lag_s=time.time() - env.produced_at.ToNanoseconds() / 1e9)
        except Exception as err:  # noqa: BLE001 - any input that breaks a launch ends its job
            log.exception("launch failed", job_id=cmd.job_id, attempt=cmd.attempt)
            failed = executor.RunningJob(cmd.job_id, cmd.attempt, self.jobs_dir, 0, [], 0, [])
            await self.report(failed, types_pb2.FAILED,
                              f"launch failed: {type(err).__name__}: {err}"[:300], exit_code=127)

    async def _launch(self, cmd: events_pb2.LaunchJob, lag_s: float = 0.0) -> None:
        current = self.running.get(cmd.job_id)
        if current is not None and current.attempt >= cmd.attempt:
            return  # duplicate delivery
        if current is not None:
            await executor.stop(current, "superseded by a newer attempt", self.settings.stop_grace_s)
        previous = self.jobs_dir / executor.job_dir_name(cmd.job_id, cmd.attempt)
        if previous.exists():
            if self._ran_here(previous):
                return  # this attempt already ran here (redelivered after it finished)
            # Another cluster's leftovers under a reused job id (adopt_survivors stopped them).
            shutil.rmtree(previous, ignore_errors=True)
        spawn_started_s = time.perf_counter()
        # In a thread: a rank without a pre-started launcher waits until its child has exec'd,
        # which on a busy node takes milliseconds per rank; the loop meanwhile sends reports.
        job = await asyncio.to_thread(
            executor.launch, cmd, self.jobs_dir, self.settings.time_scale,
            self.visible_devices(cmd.gpu_indices), cluster_id=self.cluster_id,
            checkpoint_root=self.checkpoint_root, prestarted=self.prestarted,
            rank_nice=self.settings.agent_rank_nice)
        self.running[cmd.job_id] = job
        record_rank_offset(job.workdir, cmd.rank_offset)
        # command_lag_s: produced to handled (the broker hop); spawn_s: starting the processes.
        log.info("launched", job_id=cmd.job_id, attempt=cmd.attempt, gpus=list(cmd.gpu_indices),
                 pgid=job.pgid, rank_offset=cmd.rank_offset, world_size=cmd.world_size,
                 command_lag_s=round(lag_s, 4), spawn_s=round(time.perf_counter() - spawn_started_s, 4))
        await self.report(job, types_pb2.RUNNING, "processes started")
        self.prestarted.refill()  # after the report: its forks would hold the GIL before it
        self.supervisors[cmd.job_id] = asyncio.create_task(self.supervise(job))

    async def on_stop(self, env: events_pb2.Envelope, key: str) -> None:
        cmd = env.stop_job
        job = self.running.get(cmd.job_id)
        if cmd.node_id != self.node_id or job is None or job.attempt > cmd.attempt:
            return
        log.info("stopping", job_id=cmd.job_id, reason=cmd.reason, checkpoint_first=cmd.checkpoint_first)
        if cmd.checkpoint_first:  # may take the checkpoint grace: other commands go on meanwhile
            task = asyncio.create_task(executor.checkpoint_and_stop(
                job, cmd.reason, self.settings.checkpoint_grace_s, self.settings.stop_grace_s))
            self.stoppers.add(task)
            task.add_done_callback(self.stoppers.discard)
        else:
            await executor.stop(job, cmd.reason, self.settings.stop_grace_s)

    async def on_delete_checkpoints(self, env: events_pb2.Envelope, key: str) -> None:
        """The job has ended for good: remove its checkpoints, then acknowledge (idempotent; a
        redelivered or re-sent command finds nothing left and is acknowledged again). A process
        of the job still running here is stopped first, or it could write a checkpoint into the
        directory after it went. No acknowledgement while something is left: the orchestrator
        keeps the delete pending and asks again."""
        cmd = env.delete_checkpoints
        if cmd.node_id != self.node_id:
            return
        job = self.running.get(cmd.job_id)
        if job is not None:
            await executor.stop(job, f"job ended: {cmd.reason}", self.settings.stop_grace_s)
        directory, owned = executor.checkpoint_location(cmd.job_id, cmd.checkpoint_uri,
                                                        self.checkpoint_root)
        ack = events_pb2.CheckpointsDeleted(job_id=cmd.job_id, node_id=self.node_id,
                                            checkpoint_uri=cmd.checkpoint_uri)
        if "://" in directory or not Path(directory).is_absolute():
            log.warning("checkpoints not removed: not a local absolute path", job_id=cmd.job_id,
                        directory=directory[:200])
            ack.note = "not a local absolute path: left alone"
        else:
            removed = await asyncio.to_thread(remove_checkpoints, Path(directory), owned)
            if checkpoints_left(Path(directory), owned):
                log.error("checkpoints not all removed; not acknowledged", job_id=cmd.job_id,
                          directory=directory)
                return
            ack.removed = len(removed)
            log.info("checkpoints removed", job_id=cmd.job_id, directory=directory,
                     removed=len(removed), reason=cmd.reason)
        await self.bus.publish(topics.NODES_HEARTBEATS, self.node_id, ack)

    # ----- restart and heartbeats --------------------------------------------------------
    def count_start(self) -> None:
        """Count this start in the state directory (agent.json), per cluster: heartbeats carry
        the restarts, which `frenzy nodes` shows."""
        record = self.jobs_dir / "agent.json"
        try:
            saved = json.loads(record.read_text())
        except (OSError, ValueError):
            saved = {}
        starts = saved.get("starts", 0) if saved.get("cluster_id") == self.cluster_id else 0
        self.restarts = starts
        self.jobs_dir.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps({"cluster_id": self.cluster_id, "starts": starts + 1}))

    async def adopt_survivors(self) -> None:
        """After an agent restart: supervise job processes that still run, report the rest."""
        if not self.jobs_dir.exists():
            return
        for workdir in sorted(self.jobs_dir.iterdir()):
            if not (workdir / "state.json").exists() or (workdir / "reported").exists():
                continue
            try:
                job = executor.RunningJob.load(workdir)
            except (OSError, ValueError, KeyError, TypeError) as err:
                log.error("unreadable job record skipped", path=str(workdir), error=str(err))
                continue
            if job.cluster_id != self.cluster_id:
                # Another cluster's job (one that held this state directory before): its
                # orchestrator is gone, so nobody will account for its GPUs. End it unreported.
                log.warning("stranger's job stopped", job_id=job.job_id, pgid=job.pgid,
                            cluster_id=job.cluster_id)
                if executor.group_alive(job):
                    await executor.stop(job, "another cluster's job", self.settings.stop_grace_s)
                (workdir / "reported").touch()
            elif executor.group_alive(job):
                log.info("adopted running job", job_id=job.job_id, pgid=job.pgid)
                self.running[job.job_id] = job
                self.supervisors[job.job_id] = asyncio.create_task(self.supervise(job))
            else:
                await self.finish(job, classify(executor.facts(job, agent_was_down=True)))

    def _ran_here(self, workdir: Path) -> bool:
        """Whether this cluster launched the attempt in `workdir` (an unreadable record counts
        as ours: launching twice is worse than a launch timeout)."""
        try:
            return executor.RunningJob.load(workdir).cluster_id == self.cluster_id
        except (OSError, ValueError, KeyError, TypeError):
            return True

    def visible_devices(self, gpu_indices) -> str:
        """CUDA_VISIBLE_DEVICES for a job: UUIDs of real GPUs (CUDA and NVML may number them
        differently), else their indices; "" on a simulated inventory, whose indices name no
        real device (its jobs run on CPU even on a machine that has GPUs)."""
        by_index = {g.index: g for g in self.gpus}
        chosen = [by_index[i] for i in gpu_indices if i in by_index]
        if not chosen or any(g.simulated for g in chosen):
            return ""
        if all(g.uuid for g in chosen):
            return ",".join(g.uuid for g in chosen)
        return ",".join(str(g.index) for g in chosen)

    def gpu_status(self, gpu: Gpu, job: executor.RunningJob | None) -> types_pb2.GpuStatus:
        """Real GPUs: NVML's memory used and health now. Simulated: the job's measured peak
        (its trainer's progress), else MARP's prediction, as the memory a job uses."""
        if self.monitor is not None and not gpu.simulated:
            gpu = self.monitor.read(gpu)
            used = gpu.memory_used_bytes
        elif job is not None:
            used = int(job.last_progress.get("peak_memory_bytes") or 0) or job.predicted_peak_bytes
        else:
            used = 0
        return types_pb2.GpuStatus(
            index=gpu.index, gpu_type=gpu.gpu_type, memory_total_bytes=gpu.memory_total_bytes,
            memory_used_bytes=used,
            health=types_pb2.HEALTHY if gpu.healthy else types_pb2.UNHEALTHY,
            job_id=job.job_id if job is not None else "")

    def heartbeat(self) -> events_pb2.NodeHeartbeat:
        self.sequence += 1
        busy = {gpu: job for job in self.running.values() for gpu in job.gpu_indices}
        return events_pb2.NodeHeartbeat(
            node_id=self.node_id, host=self.host, agent_pid=os.getpid(), sequence=self.sequence,
            agent_restarts=self.restarts,
            simulated=all(g.simulated for g in self.gpus),
            running_jobs=[f"{j.job_id}:{j.attempt}" for j in self.running.values()],
            ended_jobs=list(self.ended),
            gpus=[self.gpu_status(g, busy.get(g.index)) for g in self.gpus])

    async def heartbeat_loop(self) -> None:
        while True:
            # The join goes first on the heartbeat partition, and again now and then for an
            # orchestrator that lost its agent keys.
            if self.security is not None and self.sequence % REJOIN_EVERY_HEARTBEATS == 0:
                await self.bus.publish(topics.NODES_HEARTBEATS, self.node_id,
                                       self.security.join_record(self.node_id))
            await self.bus.publish(topics.NODES_HEARTBEATS, self.node_id, self.heartbeat())
            await asyncio.sleep(self.settings.heartbeat_interval_s)

    async def run(self, stop: asyncio.Event) -> None:
        await self.bus.start()
        group = f"frenzy-agent-{self.node_id}"
        consumer = self.bus.consumer(group, fetch_max_wait_ms=self.settings.agent_fetch_max_wait_ms)
        try:
            await consumer.start()
            commands_topic = self.bus.topic_name(topics.AGENT_COMMANDS)
            # The producer waits until the broker's metadata lists the topic (just-created topics
            # can be missing for a moment on Kafka); guessing the count would pick the wrong
            # partition and the agent would never see its commands.
            partitions = await self.bus.producer.partitions_for(commands_topic)
            mine = partition_for_key(self.node_id, len(partitions))
            consumer.assign([TopicPartition(commands_topic, mine)])
            self.count_start()
            # Survivors first: a launcher started before them could take a dead job's pid (in
            # a restarted container's fresh pid namespace); `executor.same_process` tells them
            # apart anyway, and this keeps the adoption from racing the refill thread.
            await self.adopt_survivors()
            self.prestarted.refill()
            commands = asyncio.create_task(self.bus.run_consumer(
                consumer, group, {"launch_job": self.on_launch, "stop_job": self.on_stop,
                                     "delete_checkpoints": self.on_delete_checkpoints}, started=True,
                verify=self.security.guard.verify if self.security is not None else None))
            log.info("agent started", node_id=self.node_id, gpus=len(self.gpus),
                     gpu_type=self.gpus[0].gpu_type, partition=mine)
            await run_until_stopped(stop, commands, asyncio.create_task(self.heartbeat_loop()),
                                    asyncio.create_task(self.logs.loop(self.running)))
        finally:
            # Job processes outlive an agent restart on purpose (see adopt_survivors); a clean
            # shutdown of the whole cluster stops them through `frenzy up`. Idle launchers end.
            self.prestarted.close()
            await self.bus.stop()


def arg_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="frenzy-agent")
    parser.add_argument("--node-id", required=True)
    parser.add_argument("--gpus", default="", help="simulated inventory, e.g. 8xA100-80GB")
    parser.add_argument("--state-dir", default=".frenzy/agents")
    parser.add_argument("--host", default="127.0.0.1", help="address other nodes reach this one at")
    parser.add_argument("--cluster-id", default="",
                        help="the local cluster's identity; only its job records are adopted")
    return parser


# Ranks are started from a worker thread (`_launch`), and every step of a start (building its
# environment, Popen, waiting for the exec) needs the GIL back from the event loop's thread,
# which holds it up to the switch interval (5 ms by default) each time while it ships logs and
# reports. A start from a thread beside a busy loop took 7.9 ms p50 at 5 ms, 0.1 ms at 0.5 ms
# (a microbenchmark: /bin/sh from a one-thread pool beside a Python loop); in the e2e burst the
# agent's spawn_s was 65 ms p50, 319 ms p99 (bench/e2e_latency.py, docs/architecture.md).
SPAWN_SWITCH_INTERVAL_S = 0.0005


def main(argv: list[str] | None = None) -> None:
    parser = arg_parser()
    args = parser.parse_args(argv)
    sys.setswitchinterval(SPAWN_SWITCH_INTERVAL_S)
    try:
        gpus = discover(args.gpus)
    except ValueError as err:
        parser.error(str(err))
    settings = ServiceSettings()
    agent = NodeAgent(Bus(f"agent-{args.node_id}", settings), args.node_id, gpus,
                      Path(args.state_dir), settings, args.host or socket.gethostname(),
                      cluster_id=args.cluster_id)
    run_service(agent.run)
