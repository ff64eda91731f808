"""Ships each running job's rank logs to frenzy.jobs.logs, so `frenzy logs` needs no node access.

Every interval the shipper reads what the rank logs gained since the last pass and publishes it as
LogChunk records keyed by the job id (frenzy/joblogs.py). A job's last bytes are shipped before
its final status is reported (NodeAgent.supervise), so a reader that has seen the job end and then
reads to the topic's end has them all. Offsets live in memory only: a restarted agent ships from
the start again and readers drop what they already have (LogCursor).
"""
from __future__ import annotations

import asyncio
from pathlib import Path

from frenzy import topics
from frenzy.bus import Bus
from frenzy.joblogs import chunk_spans
from frenzy.logs import get_logger
from frenzy.v1 import types_pb2

log = get_logger("node-agent")
RANK_OFFSET_FILE = "rank_offset"  # the launch's first global rank, for an agent that adopts the job


def record_rank_offset(workdir: Path, rank_offset: int) -> None:
    (workdir / RANK_OFFSET_FILE).write_text(str(rank_offset))


def _rank_offset(workdir: Path) -> int:
    try:
        return int((workdir / RANK_OFFSET_FILE).read_text())
    except (OSError, ValueError):
        return 0


class LogShipper:
    def __init__(self, bus: Bus, node_id: str, interval_s: float = 0.5) -> None:
        self.bus = bus
        self.node_id = node_id
        self.interval_s = interval_s
        self.shipped: dict[Path, int] = {}  # rank log -> bytes shipped

    async def ship(self, job_id: str, attempt: int, workdir: Path) -> int:
        """Publish what the job's rank logs gained; returns the bytes shipped."""
        base_rank = _rank_offset(workdir)
        chunks: list[tuple[topics.Topic, str, types_pb2.LogChunk]] = []
        for path in sorted(workdir.glob("rank*.log")):
            try:
                local_rank = int(path.stem.removeprefix("rank"))
                with open(path, "rb") as f:
                    f.seek(0, 2)
                    size = f.tell()
                    for offset, length in chunk_spans(self.shipped.get(path, 0), size):
                        f.seek(offset)
                        data = f.read(length)
                        chunks.append((topics.JOBS_LOGS, job_id, types_pb2.LogChunk(
                            job_id=job_id, attempt=attempt, rank=base_rank + local_rank,
                            node_id=self.node_id, offset=offset, data=data)))
                self.shipped[path] = size
            except (OSError, ValueError):
                continue  # removed under us (a succeeded job's workdir) or not a rank log
        if chunks:
            await self.bus.publish_many(chunks)
        return sum(len(c.data) for _, _, c in chunks)

    def forget(self, workdir: Path) -> None:
        for path in [p for p in self.shipped if p.parent == workdir]:
            del self.shipped[path]

    async def loop(self, running: dict) -> None:
        """Ship every running job's logs each interval; `running` is the agent's job id -> job."""
        while True:
            for job in list(running.values()):
                try:
                    await self.ship(job.job_id, job.attempt, job.workdir)
                except Exception:  # a broker hiccup: the next pass ships the same bytes
                    log.warning("log shipping failed", job_id=job.job_id, exc_info=True)
            await asyncio.sleep(self.interval_s)
