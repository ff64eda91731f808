"""Health checking and reflection on a gRPC server, and the HTTP health endpoint of the Kafka-only
services (frenzy.runtime), as Kubernetes probes and grpcurl would call them."""
from __future__ import annotations

import asyncio

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from frenzy.grpc_ops import enable_health_and_reflection
from frenzy.ports import free_port
from frenzy.runtime import serve_health

SERVING = health_pb2.HealthCheckResponse.SERVING


async def list_services(channel: grpc.aio.Channel) -> set[str]:
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    async for response in stub.ServerReflectionInfo(iter([request])):
        return {s.name for s in response.list_services_response.service}
    return set()


async def test_health_says_serving_per_service_and_reflection_lists_the_api():
    server = grpc.aio.server()
    await enable_health_and_reflection(server, ["frenzy.v1.JobService"])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)
            for service in ("", "frenzy.v1.JobService"):
                answer = await health.Check(health_pb2.HealthCheckRequest(service=service))
                assert answer.status == SERVING, service
            with pytest.raises(grpc.aio.AioRpcError) as unknown:
                await health.Check(health_pb2.HealthCheckRequest(service="frenzy.v1.Nope"))
            assert unknown.value.code() == grpc.StatusCode.NOT_FOUND
            assert {"frenzy.v1.JobService", "grpc.health.v1.Health",
                    "grpc.reflection.v1alpha.ServerReflection"} <= await list_services(channel)
    finally:
        await server.stop(None)


async def test_the_http_health_endpoint_answers_while_the_loop_runs():
    port = free_port()
    server = await serve_health(port, "127.0.0.1")
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        answer = await reader.read()
        writer.close()
        assert answer.startswith(b"HTTP/1.1 200 OK") and answer.endswith(b"ok\n")
    finally:
        server.close()
    assert await serve_health(0) is None


def test_a_service_runs_with_its_startup_heap_frozen_out_of_full_collections(monkeypatch):
    """run_service collects, then freezes what the imports built, before the service's loop
    starts, so a full collection later walks only what the service made since (the 71-123 ms
    pauses of the scheduler's loop in docs/reaction-latency.md, twelfth round)."""
    import gc

    from frenzy import runtime

    monkeypatch.setattr(runtime, "setup_logging", lambda: None)  # the suite's logging stays
    gc.unfreeze()
    seen: list[int] = []

    async def main(stop) -> None:
        seen.append(gc.get_freeze_count())

    try:
        runtime.run_service(main)
    finally:
        gc.unfreeze()  # the rest of the suite runs with the collector as usual
    assert seen and seen[0] > 1000, seen
