"""Tracing across hops: W3C trace context through Kafka headers and gRPC metadata, one trace per
job, exported over OTLP/HTTP to a real receiver (the OpenTelemetry protobuf, decoded here)."""
from __future__ import annotations

import threading
import time
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

import frenzy
from frenzy import tracing
from frenzy.v1 import types_pb2



def test_without_a_span_nothing_is_added_to_records_or_metadata():
    assert tracing.current_headers() == [] and tracing.current_metadata() == ()


def test_a_traceparent_header_round_trips():
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    ctx = tracing.context_from_headers([("content-type", b"x"), ("traceparent", parent.encode())])
    assert tracing.has_span(ctx) and tracing.current_headers(ctx) == [("traceparent", parent.encode())]
    assert not tracing.has_span(tracing.context_from_headers([]))


class Receiver(BaseHTTPRequestHandler):
    spans: list[tuple[str, str, str, bytes, bytes]] = []  # (service, name, trace id, span id, parent)

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            service = next((a.value.string_value for a in resource_spans.resource.attributes
                            if a.key == "service.name"), "")
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    Receiver.spans.append((service, span.name, span.trace_id.hex(), span.span_id,
                                           span.parent_span_id))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def collector():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def cluster(collector, local_cluster):
    """The collector first, so it is torn down last: stopped before the cluster, it made every
    service's last export wait out the exporter's timeout (a 9-15 s teardown)."""
    return local_cluster("tracing", extra_env={"FRENZY_OTLP_ENDPOINT": collector,
                                               "OTEL_BSP_SCHEDULE_DELAY": "200"})


@pytest.mark.e2e
def test_one_jobs_path_from_submit_to_its_end_is_one_trace(cluster):
    spec = {"name": "traced", "model": "gpt2",
            "training": {"seq_len": 1024, "global_batch_size": 8, "tokens": 20_000_000}}
    with frenzy.Client(cluster.grpc_address) as client:
        job_id = client.submit(spec)
        assert client.wait(job_id, timeout_s=90).state == types_pb2.SUCCEEDED
    wanted = {"frenzy_orchestrator", "frenzy_predictor", "frenzy_scheduler", "frenzy_agent"}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        roots = [s for s in Receiver.spans if s[1] == "SubmitJob" and s[0] == "frenzy_orchestrator"]
        services = defaultdict(set)
        for service, name, trace_id, *_ in Receiver.spans:
            services[trace_id].add(service)
        if roots and wanted <= services[roots[-1][2]]:
            break
        time.sleep(0.5)
    assert roots, "the orchestrator exported no SubmitJob span"
    trace_id = roots[-1][2]
    in_trace = {(s[0], s[1]) for s in Receiver.spans if s[2] == trace_id}
    assert wanted <= {service for service, _ in in_trace}, in_trace
    for hop in [("frenzy_predictor", "handle job_submitted"), ("frenzy_scheduler", "handle job_planned"),
                ("frenzy_orchestrator", "handle job_placed"), ("frenzy_agent", "handle launch_job")]:
        assert hop in in_trace, (hop, in_trace)
    assert not roots[-1][4], "SubmitJob starts the trace"
