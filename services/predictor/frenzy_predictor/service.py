"""Predictor service: JobSubmitted in, JobPlanned out. Stateless, so it scales as a consumer group."""
from __future__ import annotations

import asyncio
import time

from frenzy import topics
from frenzy.bus import Bus
from frenzy.config import ServiceSettings
from frenzy.events import submitted_job_id
from frenzy.jobspec import SpecError
from frenzy.logs import get_logger
from frenzy.runtime import run_service, run_until_stopped
from frenzy.security.wiring import predictor_verifier
from frenzy.v1 import events_pb2
from frenzy_predictor.error_table import changelog_topic
from frenzy_predictor.margins import MarginBook
from frenzy_predictor.planner import job_planned

GROUP = "frenzy-predictor"
log = get_logger("predictor")


class PredictorService:
    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        # learned memory margins, from the error recorder's table (empty until it has records)
        self.margin_book = MarginBook(bus.bootstrap, changelog_topic(bus.prefix), bus.client_options)

    async def on_submitted(self, env: events_pb2.Envelope, key: str) -> None:
        submitted = events_pb2.JobSubmitted()
        submitted.CopyFrom(env.job_submitted)
        submitted.job_id = submitted_job_id(env)
        started_s = time.perf_counter()
        try:
            planned = await asyncio.to_thread(job_planned, submitted, self.margin_book.margins())
        except SpecError as err:
            # The orchestrator validates the same spec and fails the job with this reason.
            log.info("invalid spec, not planned", job_id=submitted.job_id, error=str(err))
            return
        except (ValueError, ArithmeticError) as err:  # e.g. sizes past int64 in a config.json
            log.warning("cannot plan", job_id=submitted.job_id, error=str(err))
            planned = events_pb2.JobPlanned(job_id=submitted.job_id, attempt=submitted.attempt,
                                            reason=f"unschedulable: cannot plan this model: {err}"[:300])
        planned.tenant = submitted.tenant  # for the scheduler's fair share (signed upstream)
        await self.bus.publish(topics.JOBS_PLANNED, submitted.job_id, planned, trace_id=env.trace_id)
        # plan_s: MARP's share of the submit -> placed path (bench/e2e_latency.py has the rest).
        log.info("planned", job_id=submitted.job_id, options=len(planned.options),
                 best=planned.options[0].gpu_type if planned.options else None,
                 plan_s=round(time.perf_counter() - started_s, 4))

    async def run(self, stop: asyncio.Event) -> None:
        await self.bus.start()
        try:
            consumer = self.bus.consumer(GROUP, topics.JOBS_SUBMITTED)
            task = asyncio.create_task(self.bus.run_consumer(
                consumer, GROUP, {"job_submitted": self.on_submitted},
                json_payloads={topics.JOBS_SUBMITTED.name: "job_submitted"},
                verify=predictor_verifier(ServiceSettings())))
            margins = asyncio.create_task(self.margin_book.run(stop))
            log.info("predictor started")
            await run_until_stopped(stop, task, margins)
        finally:
            await self.bus.stop()


def main() -> None:
    run_service(lambda stop: PredictorService(Bus("predictor")).run(stop))
