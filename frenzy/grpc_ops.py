"""Operations conventions for every gRPC server: the standard health service (grpc.health.v1,
which Kubernetes' gRPC probes and grpc_health_probe call) and server reflection (so grpcurl and
other tools discover the API without the .proto files)."""
from __future__ import annotations

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection


async def enable_health_and_reflection(server: grpc.aio.Server,
                                       service_names: list[str]) -> health.aio.HealthServicer:
    """Register both on a server that is not started yet. Each named service, and the whole
    server (""), report SERVING once the server answers: a server starts only after its service
    is ready (the orchestrator recovers its state first), and a stopping server refuses calls."""
    servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    reflection.enable_server_reflection(
        [*service_names, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
         reflection.SERVICE_NAME], server)
    for name in ["", *service_names]:
        await servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    return servicer

