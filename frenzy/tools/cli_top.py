"""`frenzy top`: the cluster and the queue, live in a terminal (rich Live), for people who live there.

Each refresh reads three API calls (GetCluster, ListNodes, ListJobs) and draws one frame with
`frame`, a pure function of what they returned, so the frame is tested without a terminal. Every
job holding GPUs gets a letter; the node grid shows that letter on the GPUs it holds, as the
dashboard's cluster view colours them.
"""
from __future__ import annotations

import string
import time
from dataclasses import dataclass

import click
import grpc
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from frenzy.client import Client
from frenzy.console import table_console
from frenzy.convert import describe_plan
from frenzy.jobstates import HOLDING, TERMINAL, WAITING
from frenzy.tools.cli_jobs import _client, _fail_rpc
from frenzy.v1 import services_pb2, types_pb2

STATE = types_pb2.JobState.Name
LETTERS = string.ascii_uppercase + string.ascii_lowercase + string.digits
FREE_GPU, LOST_GPU, OTHER_GPU = "·", "x", "#"  # idle, on a lost node, held by a job not listed
RECENT_ENDED = 5  # finished jobs shown under the live ones
STATE_STYLE = {"RUNNING": "green", "SUCCEEDED": "dim green", "FAILED": "red", "CANCELLED": "dim",
               "QUEUED": "yellow", "PLANNED": "yellow", "SUBMITTED": "yellow"}


@dataclass(frozen=True)
class Snapshot:
    """What one refresh read from the API."""

    summary: services_pb2.ClusterSummary
    nodes: list[types_pb2.Node]
    jobs: list[types_pb2.Job]
    at_s: float

    @classmethod
    def read(cls, client: Client) -> "Snapshot":
        return cls(client.cluster_summary(), client.list_nodes(), client.list(), time.time())


def _seconds(ts) -> float:
    return ts.ToNanoseconds() / 1e9 if ts.seconds or ts.nanos else 0.0


def _age(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds // 60:.0f}m{seconds % 60:02.0f}s"
    return f"{seconds // 3600:.0f}h{seconds % 3600 // 60:02.0f}m"


def _bar(fraction: float, width: int = 10) -> str:
    filled = round(max(0.0, min(1.0, fraction)) * width)
    return "█" * filled + "░" * (width - filled)


def job_letters(jobs: list[types_pb2.Job]) -> dict[str, str]:
    """A letter per job holding GPUs, in submit order, so a job keeps its letter while it runs."""
    holding = sorted((j for j in jobs if j.state in HOLDING), key=lambda j: (_seconds(j.submitted_at), j.id))
    return {j.id: LETTERS[i % len(LETTERS)] for i, j in enumerate(holding)}


def gpu_types_table(snap: Snapshot) -> Table:
    table = Table("GPU type", "nodes", "allocated", "", "free", "running", "queued",
                  title="GPUs", title_justify="left")
    for t in snap.summary.gpu_types:
        table.add_row(t.gpu_type, str(t.nodes), f"{t.allocated}/{t.total}",
                      _bar(t.allocated / t.total if t.total else 0.0), str(t.free),
                      str(t.running_jobs), str(t.queued_jobs))
    return table


def nodes_table(snap: Snapshot, letters: dict[str, str]) -> Table:
    held = {(a.node_id, i): j.id for j in snap.jobs if j.state in HOLDING
            for a in j.assignments for i in a.gpu_indices}
    table = Table("node", "type", "state", "GPUs", "jobs", title="Nodes", title_justify="left")
    for n in snap.nodes:
        lost = n.state == types_pb2.NODE_LOST
        cells = []
        for i in range(n.gpus_total):
            job_id = held.get((n.id, i))
            cells.append(LOST_GPU if lost else letters.get(job_id, OTHER_GPU) if job_id else FREE_GPU)
        jobs_here = sorted({held[k] for k in held if k[0] == n.id})
        table.add_row(n.id, n.gpu_type, Text("lost", style="red") if lost else Text("ready"),
                      " ".join(cells), " ".join(f"{letters.get(j, '?')}={j}" for j in jobs_here))
    return table


def jobs_table(snap: Snapshot, letters: dict[str, str]) -> Table:
    live = [j for j in snap.jobs if j.state not in TERMINAL]
    live.sort(key=lambda j: (j.state in WAITING, _seconds(j.submitted_at), j.id))
    ended = sorted((j for j in snap.jobs if j.state in TERMINAL),
                   key=lambda j: _seconds(j.finished_at), reverse=True)[:RECENT_ENDED]
    table = Table("", "job", "name", "tenant", "state", "GPUs", "plan", "progress", "time", "reason",
                  title=f"Jobs: {sum(j.state in HOLDING for j in live)} holding GPUs, "
                        f"{sum(j.state in WAITING for j in live)} waiting",
                  title_justify="left")
    for j in live + ended:
        state = STATE(j.state)
        gpus = f"{j.option.num_gpus}×{j.option.gpu_type}" if j.option.gpu_type else ""
        plan = describe_plan(j.option.plan) if j.option.gpu_type else ""
        progress = f"{_bar(j.progress.fraction, 8)} {j.progress.fraction:.0%}" if j.progress.steps else ""
        if j.state in WAITING:  # how long it has waited
            elapsed = f"waits {_age(snap.at_s - _seconds(j.submitted_at))}"
        elif j.state in TERMINAL:
            elapsed = f"ran {_age(_seconds(j.finished_at) - _seconds(j.started_at))}" if _seconds(
                j.started_at) else ""
        else:
            elapsed = f"runs {_age(snap.at_s - _seconds(j.started_at))}" if _seconds(j.started_at) else ""
        table.add_row(letters.get(j.id, ""), j.id, j.spec.name, j.tenant or "-",
                      Text(state, style=STATE_STYLE.get(state, "")), gpus, plan, progress, elapsed,
                      j.reason)
    return table


def frame(snap: Snapshot) -> Group:
    """One screen of `frenzy top` (pure)."""
    letters = job_letters(snap.jobs)
    s = snap.summary
    total = sum(t.total for t in s.gpu_types)
    allocated = sum(t.allocated for t in s.gpu_types)
    header = Text.assemble(
        ("frenzy top", "bold"), f"  {time.strftime('%H:%M:%S', time.localtime(snap.at_s))}  ",
        f"nodes {s.nodes_ready} ready" + (f", {s.nodes_lost} lost" if s.nodes_lost else ""),
        f"  GPUs {allocated}/{total} allocated  ",
        f"jobs {sum(j.state not in TERMINAL for j in snap.jobs)} live, {len(snap.jobs)} in all")
    return Group(header, gpu_types_table(snap), nodes_table(snap, letters), jobs_table(snap, letters),
                 Text(f"GPU: letter = the job holding it, {FREE_GPU} free, {LOST_GPU} on a lost node. "
                      "Ctrl-C quits.", style="dim"))


def run_top(client: Client, console: Console, refresh_s: float, iterations: int = 0) -> None:
    """Redraw every refresh_s until Ctrl-C, or `iterations` frames (0: no limit)."""
    drawn = 0
    with Live(frame(Snapshot.read(client)), console=console, auto_refresh=False,
              screen=False, transient=False) as live:
        drawn += 1
        while not iterations or drawn < iterations:
            time.sleep(refresh_s)
            live.update(frame(Snapshot.read(client)), refresh=True)
            drawn += 1


@click.command()
@click.option("--refresh", "refresh_s", type=click.FloatRange(min=0.1), default=1.0, show_default=True,
              help="seconds between frames")
@click.option("--once", is_flag=True, help="print one frame and exit (scripts, logs)")
@click.option("--iterations", type=click.IntRange(min=0), default=0, help="stop after N frames (0: Ctrl-C)")
def top(refresh_s: float, once: bool, iterations: int) -> None:
    """A live view of the cluster and the queue."""
    console = table_console()
    try:
        with _client() as client:
            if once:
                console.print(frame(Snapshot.read(client)))
            else:
                run_top(client, console, refresh_s, iterations)
    except grpc.RpcError as err:
        _fail_rpc(err)
    except KeyboardInterrupt:
        pass
