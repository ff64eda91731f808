"""The predictor's durable record of its memory error: a faust table per model and GPU type.

    python -m frenzy_predictor.error_recorder            # a worker, JSON logs (what `frenzy up` runs)
    python -m frenzy_predictor.error_recorder worker -l info   # the same through faust's CLI

Two agents:
- `measure` reads frenzy.jobs.status (protobuf Envelopes, raw bytes), keeps the orchestrator's
  events that carry a measured peak (`error_table.measurement_of`), and forwards each as JSON to
  a one-partition internal topic keyed "<model>|<gpu_type>" (the table's key; the status topic is
  keyed by job id, so this is the repartition step). Records that do not decode go to
  frenzy.deadletter with an x-frenzy-reason header.
- `record` folds each measurement into the table (`error_table.apply`), which dedupes
  redeliveries by job id and attempt.

The table lives in memory and is rebuilt from its changelog topic at start. The web view serves
it as JSON at /memory-errors/ (503 until recovery is done) and as Prometheus text at /metrics.

Settings for the embedded broker (Tansu; DEVELOPERS.md): at-least-once processing (no
transactions), producer_max_batch_size=1 (Tansu's end offsets are wrong after a batched produce
and table recovery would stop short), and the 6 s session / 1 s heartbeat of BusSettings (each
group join waits half the session timeout).
"""
from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import faust
from faust.types import ProcessingGuarantee

from frenzy import events, topics
from frenzy.bus import ensure_topics
from frenzy.config import ErrorRecorderSettings, bootstrap
from frenzy.logs import JsonFormatter, get_logger
from frenzy_predictor import error_table

APP_NAME = error_table.RECORDER_APP_NAME
TABLE_NAME = error_table.TABLE_NAME
WEB_PATH = "/memory-errors/"
CONSUMER = "error-recorder"

log = get_logger("error-recorder")


def _headers(message: Any) -> list[tuple[str, bytes]]:
    headers = message.headers or []
    if isinstance(headers, dict):
        headers = list(headers.items())
    return [(str(k), v if isinstance(v, bytes) else str(v).encode()) for k, v in headers]


def create_app(settings: ErrorRecorderSettings | None = None) -> faust.App:
    settings = settings or ErrorRecorderSettings()
    prefix = topics.namespace_prefix(settings.namespace)
    brokers = [f"kafka://{host.strip()}" for host in bootstrap(settings).split(",") if host.strip()]
    web_port = settings.errors_web_port
    app = faust.App(
        prefix + APP_NAME,
        broker=brokers,
        store="memory://",
        datadir=str(Path(settings.errors_data_dir).resolve()),
        processing_guarantee=ProcessingGuarantee.AT_LEAST_ONCE,  # Tansu: no transactions
        producer_max_batch_size=1,  # Tansu: table recovery loses updates with batched produces
        producer_acks=-1,
        broker_session_timeout=settings.session_timeout_ms / 1000,
        broker_heartbeat_interval=settings.heartbeat_interval_ms / 1000,
        broker_commit_interval=1.0,
        broker_client_id=f"frenzy-{CONSUMER}",
        consumer_auto_offset_reset="earliest",
        topic_replication_factor=settings.replication_factor,
        topic_partitions=1,
        topic_allow_declare=True,
        table_standby_replicas=0,
        web_enabled=web_port > 0,
        web_port=web_port or 6066,
        web_bind=settings.errors_web_host,
        web_host=settings.errors_web_host,
        web_in_thread=False,
    )

    status_topic = app.topic(prefix + topics.JOBS_STATUS.name, key_type=bytes, value_type=bytes,
                             key_serializer="raw", value_serializer="raw")
    deadletter = app.topic(prefix + topics.DEADLETTER.name, key_type=bytes, value_type=bytes,
                           key_serializer="raw", value_serializer="raw")
    measurements = app.topic(f"{app.conf.id}-measurements", internal=True, partitions=1,
                             key_type=str, value_type=None, key_serializer="raw",
                             value_serializer="json")
    table = app.Table(TABLE_NAME, partitions=1,
                      schema=faust.Schema(key_type=str, value_type=None, key_serializer="raw",
                                          value_serializer="json"),
                      help="memory prediction error per model|gpu_type")
    app.error_table = table  # type: ignore[attr-defined]

    async def dead_letter(message: Any, reason: str) -> None:
        headers = _headers(message) + [
            ("x-frenzy-reason", reason.encode()),
            ("x-frenzy-source", f"{message.topic}/{message.partition}/{message.offset}".encode()),
            ("x-frenzy-consumer", (prefix + CONSUMER).encode()),
        ]
        try:
            await deadletter.send(key=message.key, value=message.value or b"", headers=headers)
            log.warning("dead-lettered record", reason=reason, topic=message.topic,
                        partition=message.partition, offset=message.offset)
        except Exception:  # never crash on bad input: log and skip
            log.exception("could not dead-letter record; skipped", reason=reason,
                          topic=message.topic, partition=message.partition, offset=message.offset)

    @app.agent(status_topic, name=f"{app.conf.id}.measure")
    async def measure(stream: Any) -> None:
        async for event in stream.events():
            message = event.message
            record_id = f"{message.topic}/{message.partition}/{message.offset}"
            try:
                env = events.decode(message.value, _headers(message), record_id=record_id)
            except events.MalformedEvent as err:
                await dead_letter(message, f"malformed: {err}")
                continue
            except Exception as err:
                await dead_letter(message, f"decode error: {type(err).__name__}: {err}")
                continue
            if env.type != "job_status_changed":
                continue
            try:
                m = error_table.measurement_of(env.job_status_changed)
            except Exception as err:
                await dead_letter(message, f"invalid job_status_changed: {type(err).__name__}: {err}")
                continue
            if m is not None:
                await measurements.send(key=m.key, value=m.to_dict())

    @app.agent(measurements, name=f"{app.conf.id}.record")
    async def record(stream: Any) -> None:
        async for key, value in stream.items():
            try:
                m = error_table.Measurement.from_dict(value)
                updated, counted = error_table.apply(table.get(m.key), m)
            except Exception:
                log.exception("bad measurement; skipped", key=key)
                continue
            if counted:
                table[m.key] = updated
                log.info("memory error recorded", key=m.key, job_id=m.job_id, attempt=m.attempt,
                         error=round(m.error, 4), jobs=updated["jobs"])
            else:
                log.info("measurement already recorded", key=m.key, job_id=m.job_id,
                         attempt=m.attempt)

    def ready() -> bool:
        return (app.tables.recovery.completed.is_set() and not app.in_recovery
                and not app.rebalancing)

    def records() -> dict[str, dict[str, Any]]:
        return {str(k): dict(v) for k, v in table.items() if v}

    @app.page(WEB_PATH)
    async def memory_errors(web: Any, request: Any) -> Any:
        if not ready():
            return web.json({"status": "recovering"}, status=503)
        return web.json({key: error_table.summary(rec) for key, rec in sorted(records().items())})

    @app.page("/memory-margins/")
    async def memory_margins(web: Any, request: Any) -> Any:
        if not ready():
            return web.json({"status": "recovering"}, status=503)
        return web.json(error_table.learned_margins(records()))

    @app.page("/metrics")
    async def metrics(web: Any, request: Any) -> Any:
        return web.text(error_table.prometheus_text(records()),
                        content_type="text/plain; version=0.0.4")

    return app


# Faust's worker configures logging itself; this makes it write Frenzy's JSON lines.
LOGGING_CONFIG = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": JsonFormatter}},
    "handlers": {"default": {"class": "logging.StreamHandler", "formatter": "json",
                             "stream": "ext://sys.stderr"}},
    "root": {"level": "INFO", "handlers": ["default"]},
    "loggers": {"aiokafka": {"level": "WARNING"}},
}


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    settings = ErrorRecorderSettings()
    Path(settings.errors_data_dir).mkdir(parents=True, exist_ok=True)
    # Frenzy's own topics (the status topic with its partition count, the dead-letter topic)
    # are created as every service creates them; faust creates its internal ones.
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    loop.run_until_complete(ensure_topics(
        bootstrap(settings), prefix=topics.namespace_prefix(settings.namespace),
        replication_factor=settings.replication_factor))
    app = create_app(settings)
    if argv:  # faust's own command line: `worker -l info`, `tables`, ...
        _faust_cli(app, argv)
        return
    from faust.worker import Worker

    worker = Worker(app, loglevel="INFO", logging_config=dict(LOGGING_CONFIG), loop=loop,
                    quiet=True, redirect_stdouts=False)
    worker.execute_from_commandline()


def _faust_cli(app: faust.App, argv: list[str]) -> None:
    sys.argv = [sys.argv[0], *argv]
    app.main()


if __name__ == "__main__":
    main()
