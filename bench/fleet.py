"""A fleet of simulated node agents in one process, for load benchmarks.

Each node heartbeats at 1 Hz (spread evenly over the second) with per-GPU state, takes the
LaunchJob/StopJob commands keyed to it, reports RUNNING at once and SUCCEEDED after the job's
simulated duration. It speaks the same events as the real agent (frenzy_agent) but starts no
processes, so a few fleet processes stand in for a thousand machines.

    python bench/fleet.py --first 0 --nodes 250 --gpu-type A100-80GB --gpus-per-node 8
"""
from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
from dataclasses import dataclass, field

from frenzy import topics
from frenzy.bus import Bus
from frenzy.catalog.gpus import get_gpu
from frenzy.config import ServiceSettings
from frenzy.runtime import run_service, run_until_stopped
from frenzy.v1 import events_pb2, types_pb2


@dataclass
class SimNode:
    node_id: str
    gpu_type: str
    gpus: int
    memory_bytes: int
    allocations: dict[int, str] = field(default_factory=dict)  # GPU index -> job id
    sequence: int = 0


def job_duration_s(job_id: str, low_s: float, high_s: float) -> float:
    """Deterministic per job, so every node of a multi-node job finishes together."""
    fraction = int.from_bytes(hashlib.sha1(job_id.encode()).digest()[:4], "big") / 2**32
    return low_s + (high_s - low_s) * fraction


class Fleet:
    def __init__(self, bus: Bus, nodes: list[SimNode], job_s: tuple[float, float]) -> None:
        self.bus = bus
        self.nodes = {n.node_id: n for n in nodes}
        self.job_s = job_s
        self.tasks: dict[tuple[str, str], asyncio.Task] = {}  # (node, job) -> simulated run

    def heartbeat(self, node: SimNode) -> events_pb2.NodeHeartbeat:
        node.sequence += 1
        gpus = [types_pb2.GpuStatus(index=i, gpu_type=node.gpu_type,
                                    memory_total_bytes=node.memory_bytes,
                                    memory_used_bytes=node.memory_bytes // 2 if i in node.allocations else 0,
                                    health=types_pb2.HEALTHY, job_id=node.allocations.get(i, ""))
                for i in range(node.gpus)]
        return events_pb2.NodeHeartbeat(
            node_id=node.node_id, host="127.0.0.1", agent_pid=os.getpid(), gpus=gpus,
            running_jobs=sorted(set(node.allocations.values())), sequence=node.sequence,
            simulated=True)

    async def heartbeat_loop(self, interval_s: float = 1.0) -> None:
        nodes = list(self.nodes.values())
        slot_s = interval_s / max(1, len(nodes))
        loop = asyncio.get_running_loop()
        start = loop.time()
        tick = 0
        while True:
            node = nodes[tick % len(nodes)]
            await self.bus.publish_nowait(topics.NODES_HEARTBEATS, node.node_id, self.heartbeat(node))
            tick += 1
            delay = start + tick * slot_s - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)

    async def report(self, node: SimNode, job_id: str, attempt: int, state: int, reason: str) -> None:
        await self.bus.publish(topics.JOBS_STATUS, job_id, events_pb2.JobStatusChanged(
            job_id=job_id, state=state, reason=reason, source=events_pb2.AGENT,
            node_id=node.node_id, attempt=attempt,
            progress=types_pb2.Progress(peak_memory_bytes=node.memory_bytes // 2)))

    async def run_job(self, node: SimNode, cmd: events_pb2.LaunchJob) -> None:
        try:
            await self.report(node, cmd.job_id, cmd.attempt, types_pb2.RUNNING, "processes started")
            await asyncio.sleep(job_duration_s(cmd.job_id, *self.job_s))
            await self.report(node, cmd.job_id, cmd.attempt, types_pb2.SUCCEEDED, "exit code 0")
        finally:
            for gpu in cmd.gpu_indices:
                node.allocations.pop(gpu, None)
            self.tasks.pop((node.node_id, cmd.job_id), None)

    async def on_launch(self, env: events_pb2.Envelope, key: str) -> None:
        cmd = env.launch_job
        node = self.nodes.get(cmd.node_id)
        if node is None or (cmd.node_id, cmd.job_id) in self.tasks:
            return  # another fleet's node, or a redelivered command
        for gpu in cmd.gpu_indices:
            node.allocations[gpu] = cmd.job_id
        launch = events_pb2.LaunchJob()
        launch.CopyFrom(cmd)
        self.tasks[(cmd.node_id, cmd.job_id)] = asyncio.create_task(self.run_job(node, launch))

    async def on_stop(self, env: events_pb2.Envelope, key: str) -> None:
        task = self.tasks.get((env.stop_job.node_id, env.stop_job.job_id))
        if task is not None:
            task.cancel()

    async def run(self, stop: asyncio.Event, group: str) -> None:
        await self.bus.start()
        try:
            consumer = self.bus.consumer(group, topics.AGENT_COMMANDS)
            commands = asyncio.create_task(self.bus.run_consumer(
                consumer, group, {"launch_job": self.on_launch, "stop_job": self.on_stop}))
            await run_until_stopped(stop, commands, asyncio.create_task(self.heartbeat_loop()))
        finally:
            await self.bus.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--first", type=int, default=0, help="index of this fleet's first node")
    parser.add_argument("--nodes", type=int, default=250)
    parser.add_argument("--gpu-type", default="A100-80GB")
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--job-min-s", type=float, default=5.0)
    parser.add_argument("--job-max-s", type=float, default=20.0)
    args = parser.parse_args()
    gpu = get_gpu(args.gpu_type)
    prefix = gpu.name.lower()
    nodes = [SimNode(f"{prefix}-sim-{i}", gpu.name, args.gpus_per_node, gpu.memory_bytes)
             for i in range(args.first, args.first + args.nodes)]
    settings = ServiceSettings()
    group = f"bench-fleet-{prefix}-{args.first}"
    run_service(lambda stop: Fleet(Bus(group, settings), nodes,
                                   (args.job_min_s, args.job_max_s)).run(stop, group))


if __name__ == "__main__":
    main()
