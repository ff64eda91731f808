"""OpenTelemetry tracing across hops: off unless FRENZY_OTLP_ENDPOINT names an OTLP/HTTP collector.

One job's path (SubmitJob -> predictor -> scheduler -> orchestrator -> agent -> status) becomes one
trace because each hop carries W3C trace context (`traceparent`): in Kafka record headers (Bus
publishes the current context, and handles each record in a span whose parent is the record's
context) and in gRPC metadata (frenzy.Client sends it, SubmitJob continues it). With tracing off,
the API's no-op tracer makes spans free and nothing is added to records.
"""
from __future__ import annotations

import atexit
import sys
from pathlib import Path

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace

from frenzy.config import BusSettings

Headers = list[tuple[str, bytes]]
TRACER_NAME = "frenzy"


def service_name() -> str:
    """`python -m frenzy_agent` runs .../frenzy_agent/__main__.py: the package names the service."""
    main = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path("frenzy")
    return main.parent.name if main.name == "__main__.py" else main.stem


def setup(endpoint: str | None = None, name: str | None = None) -> bool:
    """Export spans over OTLP/HTTP to `endpoint` (default FRENZY_OTLP_ENDPOINT); False when off."""
    endpoint = endpoint if endpoint is not None else BusSettings().otlp_endpoint
    if not endpoint:
        return False
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": name or service_name()}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(
        endpoint=endpoint.rstrip("/") + "/v1/traces")))
    trace.set_tracer_provider(provider)
    atexit.register(provider.shutdown)  # flush the last spans when the service stops
    return True


def tracer() -> trace.Tracer:
    return trace.get_tracer(TRACER_NAME)


def current_headers(ctx: otel_context.Context | None = None) -> Headers:
    """The W3C trace context of `ctx` (default: the current one) as Kafka headers; [] without a span."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=ctx)
    return [(k, v.encode()) for k, v in carrier.items()]


def context_from_headers(headers) -> otel_context.Context:
    carrier = {k.lower(): v.decode(errors="replace") for k, v in headers or () if isinstance(v, bytes)}
    return propagate.extract(carrier)


def context_from_metadata(metadata) -> otel_context.Context:
    return propagate.extract({k.lower(): v for k, v in metadata or () if isinstance(v, str)})


def current_metadata() -> tuple[tuple[str, str], ...]:
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return tuple(carrier.items())


def has_span(ctx: otel_context.Context) -> bool:
    """Whether ctx carries a valid span context (a record that came with `traceparent`)."""
    return trace.get_current_span(ctx).get_span_context().is_valid
