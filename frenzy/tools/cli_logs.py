"""`frenzy logs JOB [--rank N] [-f]`: a job's rank logs through the API, no shell on any node.

One rank: its bytes as written. Every rank: whole lines, each prefixed with its rank (as
`kubectl logs --prefix` does), so interleaved ranks stay readable.
"""
from __future__ import annotations

import sys

import click
import grpc

from frenzy.joblogs import LineSplitter
from frenzy.tools.cli_jobs import _client, _fail_rpc


@click.command()
@click.argument("job_id")
@click.option("--rank", type=click.IntRange(min=0), default=None, help="one global rank (default: all)")
@click.option("-f", "--follow", is_flag=True, help="keep streaming until the job ends")
@click.option("--attempt", type=click.IntRange(min=0), default=0, help="one attempt (default: all)")
def logs(job_id: str, rank: int | None, follow: bool, attempt: int) -> None:
    """Print JOB's rank logs; -f follows them until the job ends."""
    out = sys.stdout.buffer
    lines = LineSplitter()
    try:
        with _client() as client:
            for chunk in client.logs(job_id, rank=rank, follow=follow, attempt=attempt):
                if rank is not None:
                    out.write(chunk.data)
                else:
                    for line in lines.feed(chunk.rank, chunk.data):
                        out.write(f"[rank {chunk.rank}] {line}\n".encode())
                out.flush()
            for left_rank, line in lines.flush():
                out.write(f"[rank {left_rank}] {line}\n".encode())
            out.flush()
    except grpc.RpcError as err:
        _fail_rpc(err)
    except KeyboardInterrupt:
        pass
