from hypothesis import given, strategies as st
import pytest

from frenzy import events
from frenzy.v1 import events_pb2


def test_protobuf_roundtrip():
    env = events.envelope(events_pb2.JobSubmitted(job_id="j1"), trace_id="t")
    value, headers = events.encode(env)
    decoded = events.decode(value, headers)
    assert decoded == env and decoded.type == "job_submitted"
    assert dict(headers)["content-type"].startswith(b"application/x-protobuf")


def test_bare_json_payload_gets_a_stable_event_id():
    value = b'{"jobId": "j2", "spec": {"name": "x", "model": "gpt2"}}'
    a = events.decode(value, [("content-type", b"application/json")], json_payload="job_submitted",
                      record_id="t/0/5")
    b = events.decode(value, None, json_payload="job_submitted", record_id="t/0/5")
    assert a.job_submitted.job_id == "j2" and a.event_id == b.event_id
    assert events.decode(value, None, json_payload="job_submitted", record_id="t/0/6").event_id != a.event_id


def test_json_envelope_is_accepted():
    value = b'{"eventId": "e1", "jobSubmitted": {"jobId": "j3"}}'
    env = events.decode(value, None)
    assert env.event_id == "e1" and env.job_submitted.job_id == "j3"


@pytest.mark.parametrize("value,reason", [
    (b"", "empty"), (b"{not json", "invalid JSON"), (b"[1, 2]", "object"),
    (b'{"jobId": 5, "bogus": 1}', "schema"), (b"\x08\x96\x01garbage\xff", "protobuf"),
])
def test_malformed_records_name_the_reason(value, reason):
    with pytest.raises(events.MalformedEvent, match=reason):
        events.decode(value, None, json_payload="job_submitted", record_id="t/0/1")


@given(st.binary(max_size=200))
def test_decode_never_raises_anything_but_malformed(value):
    try:
        events.decode(value, None, json_payload="job_submitted", record_id="t/0/1")
    except events.MalformedEvent:
        pass
