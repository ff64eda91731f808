"""The predictor's view of the error recorder's table, and the safety margins learned from it.

The error recorder (error_recorder.py, a faust worker) keeps its table in a compacted changelog
topic; every update of a "<model>|<gpu_type>" record is a JSON value there. The predictor reads
that topic from the start (no consumer group: every predictor replica needs the whole table),
so planning applies `error_table.learned_margins` of the records seen so far. Until the
recorder has written anything, margins are empty and planning is unchanged.
"""
from __future__ import annotations

import asyncio
import json
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from frenzy.logs import get_logger
from frenzy_predictor import error_table

RETRY_S = 2.0  # wait between looks for a changelog topic that does not exist yet
FETCH_TIMEOUT_MS = 500

log = get_logger("predictor-margins")


class MarginBook:
    """Records of the error table, updated from its changelog; `margins()` is what planning uses."""

    def __init__(self, bootstrap: str, changelog_topic: str,
                 client_options: dict | None = None) -> None:
        self.bootstrap, self.topic = bootstrap, changelog_topic
        self.client_options = client_options or {}  # Kafka TLS/SASL (frenzy.security.kafka)
        self.records: dict[str, dict[str, Any]] = {}
        self._margins: dict[str, float] | None = {}

    def margins(self) -> dict[str, float]:
        """Learned margins per error_table.margin_key; recomputed only after an update."""
        if self._margins is None:
            self._margins = error_table.learned_margins(self.records)
        return self._margins

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        """One changelog record: a JSON record, or a tombstone (None) deleting its key. A value
        that is not a JSON object is logged and skipped: it must not stop planning."""
        if key is None:
            return
        name = key.decode(errors="replace")
        if value is None:
            self.records.pop(name, None)
        else:
            try:
                record = json.loads(value)
            except (json.JSONDecodeError, UnicodeDecodeError) as err:
                log.warning("skipped an undecodable error-table record", key=name, error=str(err))
                return
            if not isinstance(record, dict):
                log.warning("skipped an error-table record that is not an object", key=name)
                return
            self.records[name] = record
        self._margins = None

    async def run(self, stop: asyncio.Event) -> None:
        """Follow the changelog until `stop`. A broker error restarts the read from the start
        (after RETRY_S) rather than stopping the predictor: margins are an addition to planning."""
        while not stop.is_set():
            try:
                await self._follow(stop)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("lost the error table; reading it again", topic=self.topic)
                await _wait(stop, RETRY_S)

    async def _follow(self, stop: asyncio.Event) -> None:
        """Read the changelog from its start into `records`, then follow it; waits for the
        topic to appear."""
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None,
                                    enable_auto_commit=False, auto_offset_reset="earliest",
                                    client_id="frenzy-predictor-margins", **self.client_options)
        await consumer.start()
        try:
            while not stop.is_set():
                if self.topic in await consumer.topics():
                    break
                await _wait(stop, RETRY_S)
            else:
                return
            partitions = [TopicPartition(self.topic, p)
                          for p in sorted(consumer.partitions_for_topic(self.topic) or {0})]
            consumer.assign(partitions)
            await consumer.seek_to_beginning(*partitions)
            self.records, self._margins = {}, None
            log.info("following the error table", topic=self.topic)
            while not stop.is_set():
                batches = await consumer.getmany(timeout_ms=FETCH_TIMEOUT_MS)
                for records in batches.values():
                    for record in records:
                        self.apply(record.key, record.value)
        finally:
            await consumer.stop()


async def _wait(stop: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stop.wait(), timeout=seconds)
    except asyncio.TimeoutError:
        pass
