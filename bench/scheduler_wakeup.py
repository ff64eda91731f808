"""The scheduler's wake-up behind a backlog: how long a GPU-availability event waits for the
policy while the scheduler works through a batch of status events, with and without urgent
topics (`Bus.run_consumer(urgent=...)`), in the same process, runs interleaved.

What is real: the scheduler service (its handlers, LiveState, the `has` policy over a queue of
waiting jobs), `Bus.run_consumer`'s loop, envelope decoding and the orchestrator's Ed25519
signatures checked on every state record (as with security on). What is not: the broker. A
scripted consumer hands the loop a batch of `--backlog` status records (agent and orchestrator
progress reports of running jobs), and one availability record (a node freed) that "arrives"
at a random moment while the batch is handled; getmany returns it once that moment has passed.
Placements are encoded and handed to a producer that acknowledges at once. So this isolates the
one cause the hop table could not separate on a loaded machine (`availability_to_scheduler_decision`
p99 0.57-1.1 s in a 200-job burst): CPU spent on records ahead of the availability event. The
broker hops come on top, in both arms alike (bench/e2e_latency.py measures the whole path).

    .venv/bin/python bench/scheduler_wakeup.py [--trials 30] [--backlogs 100 500] [--queued 190]
"""
from __future__ import annotations

import argparse
import asyncio
import os
import random
import time
from collections import namedtuple

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from frenzy import events, topics
from frenzy.bus import Bus, TopicPartition
from frenzy.config import BusSettings
from frenzy.security import signing
from frenzy.security.guards import orchestrator_state_only
from frenzy.v1 import events_pb2, types_pb2
from frenzy_scheduler.service import SchedulerService
from benchio import save_result

Record = namedtuple("Record", "topic partition offset key value headers")
STATUS = TopicPartition(topics.JOBS_STATUS.name, 0)
CLUSTER = TopicPartition(topics.CLUSTER_EVENTS.name, 0)
NODES = [(f"a100-{i}", "A100-80GB") for i in range(4)] + [(f"t4-{i}", "T4") for i in range(2)]
GPUS_PER_NODE = 8
TTL_S = 3600.0


class _AckedAtOnce:
    """A producer whose every send is acknowledged at once (the broker is not under test)."""

    async def send(self, *args, **kwargs) -> asyncio.Future:
        done = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


class _Script:
    """A consumer that serves one batch, then the availability record once its arrival time
    has passed (to getmany on the urgent partition too), then ends the loop."""

    def __init__(self, batch: list[Record], availability: Record, arrives_s: float) -> None:
        self.batch, self.availability, self.arrives_s = batch, availability, arrives_s
        self.served_batch = False
        self.served_availability = False

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    async def commit(self) -> None:
        pass

    def assignment(self) -> set[TopicPartition]:
        return {STATUS, CLUSTER}

    def _availability_now(self) -> dict:
        if self.served_availability or time.perf_counter() < self.arrives_s:
            return {}
        self.served_availability = True
        return {CLUSTER: [self.availability]}

    async def getmany(self, *partitions, timeout_ms=0, max_records=None) -> dict:
        if partitions:
            return self._availability_now()
        if not self.served_batch:
            self.served_batch = True
            return {STATUS: self.batch}
        while not self.served_availability:
            if time.perf_counter() >= self.arrives_s:
                return self._availability_now()
            await asyncio.sleep(0.0005)
        raise asyncio.CancelledError  # the scenario is over


def _signed(signer: signing.Ed25519Signer, tp: TopicPartition, offset: int, key: str,
            payload) -> Record:
    value, headers = events.encode(events.envelope(payload, producer="orchestrator"))
    return Record(tp.topic, tp.partition, offset, key.encode(), value,
                  headers + signer.headers(tp.topic, key.encode(), value))


def _option(gpu_type: str, gpus: int) -> types_pb2.PlanOption:
    return types_pb2.PlanOption(gpu_type=gpu_type, num_gpus=gpus, duration_s=600.0,
                                step_time_s=0.5, peak_bytes_per_gpu=20 << 30,
                                plan=types_pb2.ParallelPlan(dp=gpus, tp=1, pp=1))


def _job(job_id: str, state: int, version: int, option: types_pb2.PlanOption | None = None,
         node: str = "", step: int = 0) -> types_pb2.Job:
    job = types_pb2.Job(id=job_id, state=state, version=version,
                        spec=types_pb2.JobSpec(name=job_id, model="gpt2"))
    job.submitted_at.FromNanoseconds(time.time_ns() - 60 * 10**9)
    if option is not None:
        job.option.CopyFrom(option)
        job.assignments.add(node_id=node, gpu_indices=range(option.num_gpus))
        job.started_at.FromNanoseconds(time.time_ns() - 30 * 10**9)
        job.progress.step, job.progress.steps = step, 1000
    return job


def scheduler(signer_key: Ed25519PrivateKey, queued: int, rng: random.Random) -> tuple[SchedulerService, list]:
    """A scheduler that has seen every node full (each runs one 8-GPU job) and `queued` jobs
    waiting; returns it and the running jobs' (id, node, option)."""
    bus = Bus("scheduler", BusSettings(kafka_bootstrap="127.0.0.1:1"))
    bus.producer = _AckedAtOnce()  # type: ignore[assignment]
    service = SchedulerService(bus, "has")
    running = []
    for node_id, gpu_type in NODES:
        option = _option(gpu_type, GPUS_PER_NODE)
        job_id = f"run-{node_id}"
        running.append((job_id, node_id, option))
        service.state.on_status(events_pb2.JobStatusChanged(
            job_id=job_id, state=types_pb2.RUNNING, source=events_pb2.ORCHESTRATOR,
            job=_job(job_id, types_pb2.RUNNING, 5, option, node_id, 1)))
        service.state.on_availability(events_pb2.GpuAvailabilityChanged(
            node_id=node_id, gpu_type=gpu_type, gpus_total=GPUS_PER_NODE, version=1,
            node_state=types_pb2.NODE_READY, allocated_jobs=[job_id]))
    for i in range(queued):
        job_id = f"wait-{i}"
        planned = events_pb2.JobPlanned(job_id=job_id, options=[
            _option(gpu_type, gpus) for gpu_type in ("A100-80GB", "T4")
            for gpus in rng.sample([1, 2, 4, 8], 2)])
        planned.submitted_at.FromNanoseconds(time.time_ns() - (queued - i) * 10**8)
        service.state.on_planned(planned)
        service.state.on_status(events_pb2.JobStatusChanged(
            job_id=job_id, state=types_pb2.QUEUED, source=events_pb2.ORCHESTRATOR,
            job=_job(job_id, types_pb2.QUEUED, 3)))
    return service, running


def backlog(signer: signing.Ed25519Signer, running: list, size: int) -> list[Record]:
    """Progress reports of the running jobs: the agent's, then the orchestrator's signed record."""
    records = []
    for n in range(size // 2):
        job_id, node_id, option = running[n % len(running)]
        step = 2 + n // len(running)
        progress = types_pb2.Progress(step=step, steps=1000)
        agent = events_pb2.JobStatusChanged(job_id=job_id, state=types_pb2.RUNNING,
                                            source=events_pb2.AGENT, node_id=node_id,
                                            reason="progress", progress=progress)
        value, headers = events.encode(events.envelope(agent, producer=f"agent-{node_id}"))
        records.append(Record(STATUS.topic, 0, len(records), job_id.encode(), value, headers))
        orchestrator = events_pb2.JobStatusChanged(
            job_id=job_id, state=types_pb2.RUNNING, source=events_pb2.ORCHESTRATOR,
            progress=progress, job=_job(job_id, types_pb2.RUNNING, 5 + step, option, node_id, step))
        records.append(_signed(signer, STATUS, len(records), job_id, orchestrator))
    return records


async def one(signer_key, signer, verify, urgent: bool, size: int, queued: int,
              handling_s: float, rng: random.Random) -> dict:
    service, running = scheduler(signer_key, queued, rng)
    freed_job, freed_node, option = running[0]
    availability = _signed(signer, CLUSTER, 0, freed_node, events_pb2.GpuAvailabilityChanged(
        node_id=freed_node, gpu_type=option.gpu_type, gpus_total=GPUS_PER_NODE, version=2,
        node_state=types_pb2.NODE_READY, free_gpu_indices=range(GPUS_PER_NODE),
        cause=f"job {freed_job} finished"))
    records = backlog(signer, running, size)
    decided: list[float] = []
    schedule = service._schedule

    first_run: list[float] = []

    async def timed_schedule() -> None:
        first_run.append(time.perf_counter())
        if service.state.node_versions.get(freed_node) == 2 and not decided:
            decided.append(time.perf_counter())  # the policy's first run that sees the node free
        await schedule()

    service._schedule = timed_schedule  # type: ignore[method-assign]
    started = time.perf_counter()
    arrives_s = started + rng.uniform(0.0, handling_s)
    script = _Script(records, availability, arrives_s)
    try:
        await service.bus.run_consumer(
            script, "bench", {"job_planned": service.on_planned, "job_status_changed": service.on_status,
                              "gpu_availability_changed": service.on_availability},
            started=True, before_commit=service.schedule_if_changed, verify=verify,
            urgent=(topics.CLUSTER_EVENTS,) if urgent else ())
    except asyncio.CancelledError:
        pass
    if not decided:  # it came after the last run: the loop ended first
        await timed_schedule()
    return {"wait_s": decided[0] - arrives_s, "batch_s": first_run[0] - started}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--backlogs", type=int, nargs="+", default=[100, 500])
    parser.add_argument("--queued", type=int, default=190)
    parser.add_argument("--out", default="bench/results/scheduler_wakeup.json")
    args = parser.parse_args()
    rng = random.Random(13)
    key = Ed25519PrivateKey.generate()
    signer = signing.Ed25519Signer(key, signing.ORCHESTRATOR_SIGNER,
                                   {topics.JOBS_STATUS.name: TTL_S, topics.CLUSTER_EVENTS.name: TTL_S})
    verify = orchestrator_state_only([key.public_key()], TTL_S)
    load_before = os.getloadavg()
    result = {"trials": args.trials, "queued": args.queued, "runs": {}}
    asyncio.run(one(key, signer, verify, False, 50, args.queued, 0.0, rng))  # warm-up
    for size in args.backlogs:
        # How long the batch takes to handle, so the availability arrives while it is handled.
        handling_s = float(np.median([asyncio.run(one(key, signer, verify, False, size, args.queued,
                                                      0.0, rng))["batch_s"] for _ in range(3)]))
        waits: dict[str, list[float]] = {"before": [], "urgent": []}
        for _ in range(args.trials):
            for arm in rng.sample(sorted(waits), 2):  # interleaved, in random order
                waits[arm].append(asyncio.run(one(key, signer, verify, arm == "urgent", size,
                                                  args.queued, handling_s, rng))["wait_s"])
        result["runs"][str(size)] = {
            "batch_handling_ms": round(handling_s * 1e3, 1),
            **{arm: {"p50_ms": round(float(np.percentile(v, 50)) * 1e3, 2),
                     "p99_ms": round(float(np.percentile(v, 99)) * 1e3, 2),
                     "max_ms": round(max(v) * 1e3, 2)} for arm, v in waits.items()}}
    result["load_average_before_after"] = [round(load_before[0], 2), round(os.getloadavg()[0], 2)]
    print(f"scheduler wake-up behind a backlog of status records ({args.queued} jobs waiting, "
          f"{args.trials} trials per arm, load {result['load_average_before_after']}):")
    for size, r in result["runs"].items():
        print(f"  backlog {size:>4} records (handled in {r['batch_handling_ms']} ms): "
              f"availability -> policy  before p50 {r['before']['p50_ms']} / p99 {r['before']['p99_ms']} ms,"
              f"  urgent p50 {r['urgent']['p50_ms']} / p99 {r['urgent']['p99_ms']} ms")
    save_result(result, args.out)


if __name__ == "__main__":
    main()
