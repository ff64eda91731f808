"""CLI commands over gRPC: submit, status, watch, cancel, nodes."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click
import grpc
from rich.table import Table

from frenzy.client import FrenzyClient
from frenzy.console import table_console
from frenzy.convert import describe_plan
from frenzy.jobspec import SpecError, load_spec_file
from frenzy.jobstates import HOLDING
from frenzy.v1 import types_pb2

STATE = types_pb2.JobState.Name
NODE_STATE = {types_pb2.NODE_READY: "ready", types_pb2.NODE_LOST: "lost"}


def _client() -> FrenzyClient:
    return FrenzyClient()


def _fail_rpc(err: grpc.RpcError) -> None:
    code = err.code()
    if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED,
                grpc.StatusCode.RESOURCE_EXHAUSTED):  # "not authenticated: ...", quota, rate
        click.echo(f"error: {err.details()}", err=True)
        sys.exit(1)
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        raise click.UsageError(err.details())
    if code == grpc.StatusCode.NOT_FOUND:
        raise click.UsageError(err.details())
    click.echo(f"error: cannot reach Frenzy at {FrenzyClient().address}: {err.details()}", err=True)
    sys.exit(1)


def job_row(job: types_pb2.Job) -> dict:
    """The `frenzy status --json` record."""
    return {"id": job.id, "name": job.spec.name, "state": STATE(job.state), "reason": job.reason,
            "gpu_type": job.option.gpu_type, "num_gpus": job.option.num_gpus,
            "attempt": job.attempt, "step": job.progress.step,
            "checkpoint_step": job.checkpoint_step if job.HasField("checkpoint_step") else None,
            "resumed_from_step": job.resumed_from_step}


@click.command()
@click.argument("spec_file", type=click.Path(path_type=Path))
def submit(spec_file: Path) -> None:
    """Submit a job spec (YAML); prints the job id."""
    try:
        spec = load_spec_file(spec_file)
    except SpecError as err:
        raise click.UsageError(str(err)) from None
    try:
        with _client() as client:
            click.echo(client.submit(spec))
    except grpc.RpcError as err:
        _fail_rpc(err)


@click.command()
@click.argument("job_id", required=False)
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
def status(job_id: str | None, as_json: bool) -> None:
    """Show one job, or every job."""
    try:
        with _client() as client:
            jobs = [client.get(job_id)] if job_id else client.list()
    except grpc.RpcError as err:
        _fail_rpc(err)
    if as_json:
        click.echo(json.dumps([job_row(j) for j in jobs], indent=2))
        return
    table = Table("job", "name", "state", "gpus", "plan", "progress", "reason")
    for j in jobs:
        gpus = f"{j.option.num_gpus}x{j.option.gpu_type}" if j.option.gpu_type else ""
        progress = f"{j.progress.fraction:.0%}" if j.progress.steps else ""
        table.add_row(j.id, j.spec.name, STATE(j.state), gpus,
                      describe_plan(j.option.plan) if j.option.gpu_type else "", progress, j.reason)
    table_console().print(table)


@click.command()
@click.argument("job_id")
def watch(job_id: str) -> None:
    """Stream a job's state changes until it ends."""
    try:
        with _client() as client:
            for job in client.watch(job_id):
                line = f"{STATE(job.state):<10} {job.reason}"
                if job.progress.steps:
                    line += f"  step {job.progress.step}/{job.progress.steps} loss {job.progress.loss:.3f}"
                click.echo(line)
    except grpc.RpcError as err:
        _fail_rpc(err)


@click.command()
@click.argument("job_id")
def cancel(job_id: str) -> None:
    """Cancel a job; its processes are stopped."""
    try:
        with _client() as client:
            job = client.cancel(job_id)
    except grpc.RpcError as err:
        _fail_rpc(err)
    click.echo(f"{job.id} {STATE(job.state)}")


@click.command()
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
def nodes(as_json: bool) -> None:
    """List nodes with their GPUs."""
    try:
        with _client() as client:
            listed = client.list_nodes()
    except grpc.RpcError as err:
        _fail_rpc(err)
    rows = [{"id": n.id, "gpu_type": n.gpu_type, "gpus_total": n.gpus_total, "gpus_free": n.gpus_free,
             "state": NODE_STATE.get(n.state, "unknown"), "agent_pid": n.agent_pid,
             "agent_restarts": n.agent_restarts} for n in listed]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    table = Table(*rows[0].keys()) if rows else Table("id")
    for r in rows:
        table.add_row(*(str(v) for v in r.values()))
    table_console().print(table)


def margins_in_use(jobs: list[types_pb2.Job]) -> dict[str, tuple[float, int]]:
    """Per GPU type, the largest learned memory margin among the placed or running jobs' options
    (MARP's safety factor; 1.0 = none) and how many jobs run with a margin above 1."""
    out: dict[str, tuple[float, int]] = {}
    for job in jobs:
        if job.state not in HOLDING or not job.option.gpu_type:
            continue
        margin = job.option.memory_margin or 1.0
        top, count = out.get(job.option.gpu_type, (1.0, 0))
        out[job.option.gpu_type] = (max(top, margin), count + (margin > 1.0))
    return out


@click.command()
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
def cluster(as_json: bool) -> None:
    """GPUs and jobs per GPU type, and how MARP's memory predictions compare with measured peaks."""
    from google.protobuf import json_format

    try:
        with _client() as client:
            summary = client.cluster_summary()
            margins = margins_in_use(client.list())
    except grpc.RpcError as err:
        _fail_rpc(err)
    if as_json:
        click.echo(json_format.MessageToJson(summary, always_print_fields_with_no_presence=True,
                                             preserving_proto_field_name=True))
        return
    table = Table("gpu_type", "nodes", "total", "free", "allocated", "running_jobs", "queued_jobs")
    for t in summary.gpu_types:
        table.add_row(t.gpu_type, *(str(v) for v in (t.nodes, t.total, t.free, t.allocated,
                                                     t.running_jobs, t.queued_jobs)))
    table_console().print(table)
    memory = summary.memory_prediction
    click.echo(f"nodes ready {summary.nodes_ready}, lost {summary.nodes_lost}, agent restarts "
               f"{summary.agent_restarts}; memory prediction over "
               f"{memory.jobs} finished jobs: mean |error| {memory.mean_abs_error:.1%}, worst "
               f"under-prediction {memory.worst_under_prediction:.1%}")
    learned = {t: m for t, m in margins.items() if m[1]}
    click.echo("learned memory margins in use: " + (", ".join(
        f"{t} x{top:.3g} ({count} job{'s' if count > 1 else ''})"
        for t, (top, count) in sorted(learned.items())) or "none"))
