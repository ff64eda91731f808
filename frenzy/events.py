"""Envelopes: wrap, encode and decode every Kafka event (pure; no I/O)."""
from __future__ import annotations

import hashlib
import json
import time
import uuid

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message

from frenzy.v1 import events_pb2

PROTOBUF_CONTENT_TYPE = "application/x-protobuf; messageType=frenzy.v1.Envelope"
JSON_CONTENT_TYPE = "application/json"
Headers = list[tuple[str, bytes]]

# Payload message name -> envelope oneof field, e.g. JobSubmitted -> job_submitted.
PAYLOAD_FIELDS: dict[str, str] = {
    field.message_type.name: field.name
    for field in events_pb2.Envelope.DESCRIPTOR.oneofs_by_name["payload"].fields
}


class MalformedEvent(ValueError):
    """A record no consumer can use; it goes to the dead-letter topic with this reason."""


def envelope(payload: Message, trace_id: str = "", producer: str = "") -> events_pb2.Envelope:
    field = PAYLOAD_FIELDS[type(payload).DESCRIPTOR.name]
    env = events_pb2.Envelope(event_id=uuid.uuid4().hex, type=field, trace_id=trace_id,
                              producer=producer)
    env.produced_at.FromNanoseconds(time.time_ns())
    getattr(env, field).CopyFrom(payload)
    return env


def encode(env: events_pb2.Envelope) -> tuple[bytes, Headers]:
    return env.SerializeToString(), [("content-type", PROTOBUF_CONTENT_TYPE.encode())]


def payload_of(env: events_pb2.Envelope) -> Message:
    return getattr(env, env.WhichOneof("payload"))


def _content_type(headers: Headers | None) -> str:
    for name, value in headers or ():
        if name.lower() == "content-type":
            return value.decode(errors="replace")
    return ""


def decode(value: bytes | None, headers: Headers | None, *, json_payload: str = "",
           record_id: str = "") -> events_pb2.Envelope:
    """Parse a record into an envelope.

    json_payload names the payload type a topic accepts as bare protobuf JSON (pipelines produce
    plain JSON onto frenzy.jobs.submitted). Such a record gets an event id derived from
    record_id (topic/partition/offset), so a redelivery dedupes and every consumer derives the
    same id.
    """
    if not value:
        raise MalformedEvent("empty record value")
    content_type = _content_type(headers)
    is_json = content_type.startswith(JSON_CONTENT_TYPE) or (
        not content_type and value.lstrip()[:1] in (b"{", b"["))
    if is_json:
        env = _decode_json(value, json_payload, record_id)
    else:
        env = events_pb2.Envelope()
        try:
            env.ParseFromString(value)
        except DecodeError as err:
            raise MalformedEvent(f"not a protobuf Envelope: {err}") from None
    if env.WhichOneof("payload") is None:
        raise MalformedEvent("envelope has no payload")
    if not env.event_id:
        raise MalformedEvent("envelope.event_id is empty")
    env.type = env.WhichOneof("payload")
    return env


def _decode_json(value: bytes, json_payload: str, record_id: str) -> events_pb2.Envelope:
    try:
        data = json.loads(value)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise MalformedEvent(f"invalid JSON: {err}") from None
    if not isinstance(data, dict):
        raise MalformedEvent("JSON event must be an object")
    env = events_pb2.Envelope()
    oneof_fields = set(PAYLOAD_FIELDS.values())
    try:
        if oneof_fields & set(data) or "eventId" in data or "event_id" in data:
            json_format.ParseDict(data, env)
        elif json_payload:
            getattr(env, json_payload).CopyFrom(
                json_format.ParseDict(data, type(getattr(env, json_payload))()))
        else:
            raise MalformedEvent("JSON is neither an Envelope nor a payload this topic accepts")
    except json_format.ParseError as err:
        raise MalformedEvent(f"JSON does not match the schema: {err}") from None
    if not env.event_id:
        env.event_id = "rec-" + hashlib.sha1(record_id.encode()).hexdigest()[:16]
    if not env.HasField("produced_at"):
        env.produced_at.FromNanoseconds(time.time_ns())
    return env


def submitted_job_id(env: events_pb2.Envelope) -> str:
    """A pipeline may omit job_id; every consumer then derives the same one from the event id."""
    return env.job_submitted.job_id or f"job-{env.event_id.removeprefix('rec-')[:12]}"
