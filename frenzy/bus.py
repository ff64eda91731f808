"""The Kafka shell every service shares: topic creation, publishing, and an at-least-once consumer.

Delivery is at-least-once: offsets are committed only after the handler ran, so a crash replays
records. Handlers therefore dedupe on the envelope's event_id (see `Deduper`) and keep their
state transitions idempotent. A record that cannot be decoded, or whose handler raised, goes to
frenzy.deadletter with the reason; the consumer never stops on bad input.
"""
from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Awaitable, Callable, Iterable

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import CommitFailedError
from google.protobuf.message import Message

from opentelemetry import context as otel_context
from opentelemetry.trace import SpanKind

from frenzy import events, offsetgaps, topics, tracing
from frenzy.config import BusSettings, bootstrap
from frenzy.logs import get_logger
from frenzy.security.kafka import kafka_client_options
from frenzy.security.limits import MAX_RECORD_BYTES
from frenzy.v1 import events_pb2

Handler = Callable[[events_pb2.Envelope, str], Awaitable[None]]
# (record, its envelope, its logical topic) -> why to refuse it, or "" (signature checks).
# SKIP: not for this consumer, not bad either (left to the consumer that judges it).
Verifier = Callable[[object, events_pb2.Envelope, str], str]
SKIP = "skip"
HOLE_REFETCH_PAUSE_S = 0.005  # between fetches while waiting for a hole to fill (offsetgaps.py)
TOPIC_EXISTS = 36
# With urgent topics, how many other records are handled between two looks for urgent ones: a
# look costs microseconds (the fetcher's buffer), a record 0.2-0.5 ms (decode, signature check,
# handler; more on a loaded machine), so an urgent record waits for at most a few of them.
URGENT_CHECK_EVERY = 4


class RecordTooLarge(ValueError):
    """A record above BusSettings.max_record_bytes, refused before it reaches the broker."""

log = get_logger("bus")


async def ensure_topics(bootstrap_servers: str, wanted: Iterable[topics.Topic] = topics.ALL_TOPICS,
                        prefix: str = "", replication_factor: int = 1,
                        client_options: dict | None = None) -> None:
    """Create missing topics. Safe to call from every service at start-up."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers, **(client_options or {}))
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        new = [NewTopic(prefix + t.name, t.partitions, replication_factor,
                        topic_configs={"cleanup.policy": "compact"} if t.compacted else None)
               for t in wanted if prefix + t.name not in existing]
        if new:
            response = await admin.create_topics(new)
            for name, code, *_ in getattr(response, "topic_errors", []) or []:
                if code not in (0, TOPIC_EXISTS):
                    raise RuntimeError(f"creating topic {name} failed with error code {code}")
    finally:
        await admin.close()


class Deduper:
    """Remembers the last N event ids so a redelivered event is handled once."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._seen: OrderedDict[str, None] = OrderedDict()

    def first_time(self, event_id: str) -> bool:
        if event_id in self._seen:
            self._seen.move_to_end(event_id)
            return False
        self._seen[event_id] = None
        if len(self._seen) > self.capacity:
            self._seen.popitem(last=False)
        return True


class Bus:
    """One producer per service; `publish` wraps payloads in envelopes keyed per entity."""

    def __init__(self, service: str, settings: BusSettings | None = None) -> None:
        self.service = service
        self.settings = settings or BusSettings()
        self.bootstrap = bootstrap(self.settings)
        self.prefix = topics.namespace_prefix(self.settings.namespace)
        self.producer: AIOKafkaProducer | None = None
        self.client_options = kafka_client_options(self.settings)
        # Adds signature headers to records on the topics it signs (frenzy.security.signing).
        self.signer = None
        # key (a job id) -> the trace context of the last traced record handled with that key, so
        # a record about a job continues that job's trace even when another event triggered it
        # (the scheduler places a waiting job when some other job ends).
        self._key_contexts: OrderedDict[str, otel_context.Context] = OrderedDict()

    def topic_name(self, topic: topics.Topic) -> str:
        """The topic's name on the broker, in this deployment's namespace."""
        return self.prefix + topic.name

    def check_size(self, topic: topics.Topic, key: bytes, value: bytes | None, headers=()) -> None:
        size = len(key) + len(value or b"") + sum(len(k) + len(v) for k, v in headers or ())
        if size > self.settings.max_record_bytes:
            raise RecordTooLarge(f"record for {topic.name} (key {key[:80]!r}) is {size} bytes, "
                                 f"more than {self.settings.max_record_bytes}")

    async def start(self) -> None:
        """Create topics if needed and connect; must run inside the event loop."""
        await ensure_topics(self.bootstrap, prefix=self.prefix,
                            replication_factor=self.settings.replication_factor,
                            client_options=self.client_options)
        self.producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap, acks="all", linger_ms=self.settings.linger_ms,
            enable_idempotence=False, client_id=f"frenzy-{self.service}", **self.client_options)
        await self.producer.start()

    async def stop(self) -> None:
        if self.producer is not None:
            await self.producer.stop()

    def _encode(self, topic: topics.Topic, key: str, env: events_pb2.Envelope) -> tuple[bytes, list]:
        """Encode, sign (pipeline HMAC) and size-check a record before it is produced."""
        value, headers = events.encode(env)
        if self.signer is not None:
            headers += self.signer.headers(topic.name, key.encode(), value)
        self.check_size(topic, key.encode(), value, headers)
        return value, headers

    async def publish(self, topic: topics.Topic, key: str, payload: Message,
                      trace_id: str = "") -> events_pb2.Envelope:
        env = events.envelope(payload, trace_id=trace_id, producer=self.service)
        value, headers = self._encode(topic, key, env)
        await self.producer.send_and_wait(self.topic_name(topic), value, key=key.encode(),
                                          headers=headers + self._trace_headers(topic, key))
        return env

    def _trace_headers(self, topic: topics.Topic, key: str,
                       ctx: otel_context.Context | None = None) -> events.Headers:
        """The trace context a record continues: the one given, else its key's, else the current."""
        if not topic.traced:
            return []
        return tracing.current_headers(ctx or self._key_contexts.get(key))

    def _remember_context(self, key: str, ctx: otel_context.Context) -> None:
        self._key_contexts[key] = ctx
        self._key_contexts.move_to_end(key)
        if len(self._key_contexts) > self.settings.dedupe_window:
            self._key_contexts.popitem(last=False)

    async def publish_many(self, items: list[tuple[topics.Topic, str, Message | None]],
                           contexts: list[otel_context.Context | None] | None = None,
                           trace_ids: list[str] | None = None) -> None:
        """Publish in order, pipelined: enqueue every record, then wait for all acknowledgements.

        The producer keeps one request in flight per broker, so per-partition order holds. A
        None payload is a tombstone (deletes its key on a compacted topic). contexts: the trace
        context each record continues, for records produced by earlier handlers (default: now's).
        trace_ids: each envelope's trace id (as `publish` takes one).
        """
        records = []
        for i, (topic, key, payload) in enumerate(items):  # all checked before any is sent
            value, headers = None, None
            if payload is not None:
                env = events.envelope(payload, trace_id=trace_ids[i] if trace_ids else "",
                                      producer=self.service)
                value, headers = self._encode(topic, key, env)
                headers = headers + self._trace_headers(topic, key, contexts[i] if contexts else None)
            else:
                self.check_size(topic, key.encode(), value, headers)  # a tombstone's key
            records.append((topic, key, value, headers))
        acks = []
        for topic, key, value, headers in records:
            acks.append(await self.producer.send(self.topic_name(topic), value, key=key.encode(),
                                                 headers=headers))
        if acks:
            await asyncio.gather(*acks)

    async def publish_nowait(self, topic: topics.Topic, key: str, payload: Message) -> asyncio.Future:
        """Enqueue without waiting for the broker's acknowledgement: for high-rate telemetry
        (heartbeats) where the next record supersedes a lost one."""
        value, headers = self._encode(topic, key, events.envelope(payload, producer=self.service))
        return await self.producer.send(self.topic_name(topic), value, key=key.encode(),
                                        headers=headers + self._trace_headers(topic, key))

    async def publish_tombstone(self, topic: topics.Topic, key: str) -> None:
        """Delete a key from a compacted topic."""
        await self.producer.send_and_wait(self.topic_name(topic), None, key=key.encode())

    async def dead_letter(self, record, reason: str, group: str) -> None:
        headers = list(record.headers or []) + [
            ("x-frenzy-reason", reason.encode()),
            ("x-frenzy-source", f"{record.topic}/{record.partition}/{record.offset}".encode()),
            ("x-frenzy-consumer", group.encode()),
        ]
        await self.producer.send_and_wait(self.topic_name(topics.DEADLETTER), record.value or b"",
                                          key=record.key, headers=headers)
        log.warning("dead-lettered record", reason=reason, topic=record.topic,
                    partition=record.partition, offset=record.offset, consumer=group)

    def consumer(self, group: str, *subscribed: topics.Topic, **overrides) -> AIOKafkaConsumer:
        """A consumer in this deployment's namespace; overrides replace the default options."""
        options = dict(
            bootstrap_servers=self.bootstrap, group_id=self.prefix + group,
            enable_auto_commit=False, auto_offset_reset="earliest",
            # A short fetch wait keeps event-to-reaction latency low. Apache Kafka answers a
            # long-poll as soon as data arrives; the embedded broker reads at 0, 1/2, 3/4, ...
            # of the wait, so a record waits up to half of it (BusSettings.fetch_max_wait_ms).
            fetch_max_wait_ms=self.settings.fetch_max_wait_ms,
            session_timeout_ms=self.settings.session_timeout_ms,
            heartbeat_interval_ms=self.settings.heartbeat_interval_ms,
            client_id=f"frenzy-{self.service}", **self.client_options)
        options.update(overrides)
        return AIOKafkaConsumer(*(self.topic_name(t) for t in subscribed), **options)

    async def run_consumer(self, consumer: AIOKafkaConsumer, group: str,
                           handlers: dict[str, Handler], *,
                           json_payloads: dict[str, str] | None = None,
                           ready: asyncio.Event | None = None,
                           started: bool = False,
                           before_commit: Callable[[], Awaitable[None]] | None = None,
                           verify: Verifier | None = None,
                           urgent: Iterable[topics.Topic] = ()) -> None:
        """Consume until cancelled. handlers maps payload type (e.g. "job_planned") to a coroutine.

        before_commit runs after each batch and before its offsets are committed: a service that
        defers publishing its handlers' output flushes it there (at-least-once holds).

        json_payloads maps a topic's name (without namespace) to the payload type it accepts
        as bare JSON.

        verify checks a decoded record before its handler sees it (signatures); a record it
        refuses is dead-lettered with its reason.

        urgent: topics whose records must not wait behind a burst of others (the scheduler's GPU
        availability). They are handled ahead of the rest of their batch, and between every
        URGENT_CHECK_EVERY records of the rest the consumer takes any that arrived meanwhile;
        before_commit runs right after them, so the service reacts at once (the offsets are
        still committed only after the whole batch). Safe for any consumer of several topics:
        Kafka orders records only within a partition, so the interleaving of topics is never
        given, and per partition the order stays as fetched.
        """
        deduper = Deduper(self.settings.dedupe_window)
        gaps = offsetgaps.OffsetGaps(self.settings.offset_hole_wait_s)
        compacted = {t.name for t in topics.ALL_TOPICS if t.compacted}  # holes are normal there
        json_payloads = json_payloads or {}
        if not started:
            await consumer.start()
        try:
            if ready is not None:
                await _wait_assigned(consumer)
                ready.set()
            urgent_names = {self.topic_name(t) for t in urgent}

            holes: set[TopicPartition] = set()  # partitions sought back to a hole this batch

            async def handle(records: list) -> None:
                for record in records:
                    logical_topic = record.topic.removeprefix(self.prefix)
                    tp = TopicPartition(record.topic, record.partition)
                    if logical_topic not in compacted and await self._hole_before(
                            consumer, gaps, tp, record.offset, group):
                        holes.add(tp)  # its later records come again after the seek
                        continue
                    await self._handle_record(record, group, handlers, deduper,
                                              json_payloads.get(logical_topic, ""),
                                              verify, logical_topic)
                    gaps.handled(tp, record.offset)

            async def handle_urgent(records: list) -> None:
                await handle(records)
                if records and before_commit is not None:
                    await before_commit()

            while True:
                batch = await consumer.getmany(timeout_ms=200, max_records=500)
                holes.clear()
                first, rest = split_urgent(batch, urgent_names)
                await handle_urgent(first)
                for start in range(0, len(rest), URGENT_CHECK_EVERY):
                    await handle(rest[start:start + URGENT_CHECK_EVERY])
                    if urgent_names and start + URGENT_CHECK_EVERY < len(rest):
                        await handle_urgent(await _fetched_urgent(consumer, urgent_names))
                if holes:
                    await asyncio.sleep(HOLE_REFETCH_PAUSE_S)
                if batch:
                    if before_commit is not None:
                        await before_commit()
                    try:
                        await consumer.commit()
                    except CommitFailedError as err:  # e.g. the broker restarted: the group
                        # rebalanced and these records come again (handlers are idempotent)
                        log.warning("offset commit failed; records will be redelivered",
                                    consumer=group, error=str(err))
        finally:
            await consumer.stop()

    async def _hole_before(self, consumer: AIOKafkaConsumer, gaps: offsetgaps.OffsetGaps,
                           tp: TopicPartition, offset: int, group: str) -> bool:
        """Whether `offset` skips records not yet seen here; if so, seek back to fetch them
        (frenzy/offsetgaps.py says why the embedded broker can skip one)."""
        verdict = gaps.check(tp, offset, asyncio.get_running_loop().time())
        if verdict == offsetgaps.NEW_HOLE:
            committed = await consumer.committed(tp)
            if committed is not None and committed > gaps.expected[tp]:
                gaps.forget(tp)  # another member handled them (a rebalance)
                return False
        if verdict in (offsetgaps.NEW_HOLE, offsetgaps.REFETCH):
            consumer.seek(tp, gaps.expected[tp])
            return True
        if verdict == offsetgaps.ACCEPT:
            log.warning("offset hole accepted", consumer=group, topic=tp.topic,
                        partition=tp.partition, missing_from=gaps.expected[tp], next_offset=offset)
        return False

    async def _handle_record(self, record, group: str, handlers: dict[str, Handler],
                             deduper: Deduper, json_payload: str,
                             verify: Verifier | None = None, logical_topic: str = "") -> None:
        record_id = f"{record.topic}/{record.partition}/{record.offset}"
        limit = max(MAX_RECORD_BYTES, self.settings.max_record_bytes)
        if record.value is not None and len(record.value) > limit:
            await self.dead_letter(record, f"oversized: {len(record.value)} bytes exceeds the "
                                   f"limit of {limit}", group)
            return
        try:
            env = events.decode(record.value, record.headers, json_payload=json_payload,
                                record_id=record_id)
        except events.MalformedEvent as err:
            await self.dead_letter(record, f"malformed: {err}", group)
            return
        handler = handlers.get(env.type)
        if handler is None:
            return
        if verify is not None:
            refused = verify(record, env, logical_topic)
            if refused == SKIP:
                return
            if refused:
                await self.dead_letter(record, refused, group)
                return
        if not deduper.first_time(env.event_id):
            return
        key = record.key.decode(errors="replace") if record.key else ""
        parent = tracing.context_from_headers(record.headers)
        try:
            with tracing.tracer().start_as_current_span(
                    f"handle {env.type}", context=parent, kind=SpanKind.CONSUMER,
                    attributes={"frenzy.key": key, "frenzy.group": group,
                                "messaging.destination.name": record.topic}):
                if key and tracing.has_span(parent):
                    self._remember_context(key, otel_context.get_current())
                await handler(env, key)
        except events.MalformedEvent as err:
            await self.dead_letter(record, f"invalid {env.type}: {err}", group)
        except asyncio.CancelledError:
            raise
        except Exception as err:  # a handler bug must not stop the service or lose the record
            log.exception("handler failed", event_type=env.type, event_id=env.event_id)
            await self.dead_letter(record, f"handler error in {group}: {type(err).__name__}: {err}", group)


def split_urgent(batch: dict[TopicPartition, list], urgent_topics: set[str]) -> tuple[list, list]:
    """A fetched batch as two lists: the records of the urgent topics, then the others, each
    partition's records in their order."""
    first, rest = [], []
    for tp, records in batch.items():
        (first if tp.topic in urgent_topics else rest).extend(records)
    return first, rest


async def _fetched_urgent(consumer: AIOKafkaConsumer, urgent_topics: set[str]) -> list:
    """Records of the urgent topics already fetched in the background, without waiting."""
    mine = [tp for tp in consumer.assignment() if tp.topic in urgent_topics]
    if not mine:  # getmany() with no partitions would return every partition's records
        return []
    return split_urgent(await consumer.getmany(*mine, timeout_ms=0), urgent_topics)[0]


async def records_in_order(consumer: AIOKafkaConsumer, gaps: offsetgaps.OffsetGaps,
                           batch: dict, what: str) -> list:
    """For a reader outside `Bus.run_consumer` (group-less, its partitions assigned, and
    `gaps.expected` set to where it started): a fetched batch's records, each partition's only
    up to its first hole (frenzy/offsetgaps.py: the embedded broker can show a later record
    first). At a hole the consumer seeks back to it, so the records after it come again with a
    later fetch, and pauses a moment; after `gaps.wait_s` the hole is logged and taken as real.
    Not for compacted topics, where holes are normal."""
    out, waiting = [], False
    now_s = asyncio.get_running_loop().time()
    for tp, records in batch.items():
        for record in records:
            verdict = gaps.check(tp, record.offset, now_s)
            if verdict in (offsetgaps.NEW_HOLE, offsetgaps.REFETCH):
                consumer.seek(tp, gaps.expected[tp])
                waiting = True
                break
            if verdict == offsetgaps.ACCEPT:
                log.warning("offset hole accepted", consumer=what, topic=tp.topic,
                            partition=tp.partition, missing_from=gaps.expected[tp],
                            next_offset=record.offset)
            gaps.handled(tp, record.offset)
            out.append(record)
    if waiting:
        await asyncio.sleep(HOLE_REFETCH_PAUSE_S)
    return out


async def _wait_assigned(consumer: AIOKafkaConsumer, timeout_s: float = 30.0) -> None:
    """Block until the group has assigned partitions, so callers know consumption has begun."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not consumer.assignment():
        if consumer.subscription() is None:
            return  # manual assignment
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError("consumer got no partition assignment")
        await asyncio.sleep(0.05)


def partition_for_key(key: str, num_partitions: int) -> int:
    """The partition Kafka's default partitioner (murmur2) sends a key to."""
    from aiokafka.partitioner import murmur2

    return (murmur2(key.encode()) & 0x7FFFFFFF) % num_partitions


__all__ = ["Bus", "Deduper", "RecordTooLarge", "ensure_topics", "partition_for_key", "split_urgent",
           "TopicPartition"]
