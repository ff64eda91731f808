"""`frenzy demo` (`make run`): start the local cluster, run a mixed workload, print the outcome."""
from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import click
from rich.console import Console
from rich.live import Live
from rich.table import Table

from frenzy.client import FrenzyClient
from frenzy.console import table_console
from frenzy.convert import describe_plan
from frenzy.jobstates import TERMINAL
from frenzy.tools.localcluster import DEFAULT_CLUSTER, WorkdirInUse, start_cluster
from frenzy.v1 import types_pb2

STATE = types_pb2.JobState.Name
GIB = 1024**3

# (name, model, seq_len, global batch, tokens): a mix from 124M to 13B parameters.
SAMPLE_WORKLOAD = [
    ("gpt2-small-ft", "gpt2", 1024, 32, 200_000_000),
    ("gpt2-medium-pt", "gpt2-medium", 1024, 64, 300_000_000),
    ("gpt2-xl-ft", "gpt2-xl", 1024, 32, 100_000_000),
    ("tinyllama-sft", "tinyllama-1.1b", 2048, 64, 200_000_000),
    ("llama3.2-1b-pt", "llama3.2-1b", 2048, 128, 300_000_000),
    ("llama2-7b-sft", "llama2-7b", 4096, 64, 50_000_000),
    ("mistral-7b-ft", "mistral-7b", 4096, 32, 40_000_000),
    ("llama3-8b-ctx", "llama3-8b", 8192, 32, 40_000_000),
    ("llama2-13b-ft", "llama2-13b", 4096, 32, 20_000_000),
    ("gpt2-large-pt", "gpt2-large", 1024, 64, 200_000_000),
]


def sample_specs() -> list[types_pb2.JobSpec]:
    return [types_pb2.JobSpec(name=name, model=model, training=types_pb2.TrainingConfig(
                seq_len=seq, global_batch_size=batch, tokens=tokens, precision="bf16", optimizer="adamw"))
            for name, model, seq, batch, tokens in SAMPLE_WORKLOAD]


def _seconds(later, earlier) -> float | None:
    if not later.seconds or not earlier.seconds:
        return None
    return (later.ToNanoseconds() - earlier.ToNanoseconds()) / 1e9


def progress_table(jobs: list[types_pb2.Job]) -> Table:
    table = Table("job", "model", "state", "GPUs", "progress", "loss", title="Frenzy demo")
    for j in jobs:
        gpus = f"{j.option.num_gpus}x{j.option.gpu_type}" if j.option.gpu_type else "-"
        bar = ""
        if j.progress.steps:
            filled = int(20 * j.progress.fraction)
            bar = "█" * filled + "░" * (20 - filled) + f" {j.progress.fraction:4.0%}"
        table.add_row(j.spec.name, j.spec.model, STATE(j.state), gpus, bar,
                      f"{j.progress.loss:.3f}" if j.progress.steps else "")
    return table


def summary_table(jobs: list[types_pb2.Job]) -> Table:
    table = Table("job", "model", "state", "GPU type", "GPUs", "plan", "pred. mem/GPU",
                  "queue s", "run s", title="Summary")
    for j in jobs:
        queue_s = _seconds(j.placed_at, j.submitted_at)
        run_s = _seconds(j.finished_at, j.started_at)
        table.add_row(j.spec.name, j.spec.model, STATE(j.state), j.option.gpu_type or "-",
                      str(j.option.num_gpus or "-"),
                      describe_plan(j.option.plan) if j.option.gpu_type else "-",
                      f"{j.option.peak_bytes_per_gpu / GIB:.1f} GiB" if j.option.gpu_type else "-",
                      f"{queue_s:.1f}" if queue_s is not None else "-",
                      f"{run_s:.1f}" if run_s is not None else "-")
    return table


def run_workload(client: FrenzyClient, specs: list[types_pb2.JobSpec], console: Console,
                 timeout_s: float) -> list[types_pb2.Job]:
    ids = [client.submit(spec) for spec in specs]
    deadline = time.monotonic() + timeout_s
    with Live(console=console, refresh_per_second=4, transient=not console.is_terminal) as live:
        while True:
            jobs = [client.get(i) for i in ids]
            live.update(progress_table(jobs))
            if all(j.state in TERMINAL for j in jobs) or time.monotonic() > deadline:
                return jobs
            time.sleep(0.25)


def _raise_interrupt(*_: object) -> None:
    raise KeyboardInterrupt


@click.command("demo")
@click.option("--cluster", "cluster_file", type=click.Path(dir_okay=False, path_type=Path),
              default=DEFAULT_CLUSTER, show_default=True)
@click.option("--grpc-port", default=50051, show_default=True, type=click.IntRange(1, 65535))
@click.option("--policy", default="has", show_default=True)
@click.option("--time-scale", default=0.0002, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="synthetic jobs run for predicted duration x this")
@click.option("--timeout", "timeout_s", default=300.0, show_default=True)
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path), default=Path(".frenzy"))
def demo_command(cluster_file: Path, grpc_port: int, policy: str, time_scale: float,
                 timeout_s: float, workdir: Path) -> None:
    """Start the local cluster, run ~10 mixed jobs to completion, print a summary."""
    signal.signal(signal.SIGTERM, _raise_interrupt)  # so `finally` stops the cluster
    console = table_console()
    console.print(f"starting the local cluster from {cluster_file} ...")
    started = time.monotonic()
    try:
        cluster = start_cluster(cluster_file, grpc_port, workdir, policy,
                                extra_env={"FRENZY_TIME_SCALE": str(time_scale)})
    except WorkdirInUse as err:
        raise click.UsageError(str(err)) from None
    try:
        console.print(f"cluster ready in {time.monotonic() - started:.1f}s; "
                      f"{len(cluster.node_ids)} nodes; gRPC {cluster.grpc_address}; logs in {workdir / 'logs'}")
        click.echo(f"dashboard: {cluster.dashboard_link}")
        with cluster.client() as client:  # the admin token `frenzy up` made, transparently
            jobs = run_workload(client, sample_specs(), console, timeout_s)
        console.print(summary_table(jobs))
    finally:
        cluster.stop()
    succeeded = sum(1 for j in jobs if j.state == types_pb2.SUCCEEDED)
    click.echo(f"demo: {succeeded}/{len(jobs)} jobs succeeded")
    sys.exit(0 if succeeded == len(jobs) else 1)
