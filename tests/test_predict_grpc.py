"""The gRPC Predict dry run carries the spec's training.framework to MARP, and names a bad one."""
from __future__ import annotations

import asyncio

import grpc

from frenzy.catalog.models import model_catalog
from frenzy.convert import plan_from_proto
from frenzy.domain import Recipe
from frenzy.jobspec import JobSpecModel
from frenzy.ports import free_port
from frenzy.v1 import services_pb2, services_pb2_grpc
from frenzy_orchestrator.api import PredictorApi
from frenzy_predictor.memory import estimate_memory


def _spec(framework: str):
    return JobSpecModel.model_validate({
        "name": "p", "model": "gpt2",
        "training": {"seq_len": 1024, "global_batch_size": 64, "steps": 10,
                     "framework": framework}}).to_proto()


async def _predict(*specs) -> list:
    server = grpc.aio.server()
    services_pb2_grpc.add_PredictorServiceServicer_to_server(PredictorApi(), server)
    port = free_port()
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = services_pb2_grpc.PredictorServiceStub(channel)
            out = []
            for spec in specs:
                try:
                    out.append(await stub.Predict(services_pb2.PredictRequest(
                        spec=spec, gpu_types=["A100-80GB"])))
                except grpc.aio.AioRpcError as err:
                    out.append(err)
            return out
    finally:
        await server.stop(None)


def test_predict_uses_the_specs_framework_and_refuses_an_unknown_one():
    frenzy, megatron, bad = asyncio.run(_predict(_spec("frenzy"), _spec("megatron"), _spec("jax")))
    assert frenzy.options and megatron.options
    assert all(o.peak_allocated_bytes < o.peak_reserved_bytes < o.peak_bytes_per_gpu
               for o in megatron.options)
    # each option's peak is the named profile's estimate of its plan
    arch = model_catalog()["gpt2"]
    for response, framework in ((frenzy, "frenzy"), (megatron, "megatron")):
        for o in response.options:
            plan = plan_from_proto(o.plan)
            est = estimate_memory(arch, Recipe(framework=framework), plan, 1024,
                                  grad_accum=plan.grad_accum(64))
            assert o.peak_allocated_bytes == est.peak_allocated_bytes
    o = megatron.options[0]
    plan = plan_from_proto(o.plan)
    assert o.peak_allocated_bytes < estimate_memory(arch, Recipe(), plan, 1024,
                                                    grad_accum=plan.grad_accum(64)).peak_allocated_bytes
    assert isinstance(bad, grpc.aio.AioRpcError)
    assert bad.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "training.framework" in bad.details()
