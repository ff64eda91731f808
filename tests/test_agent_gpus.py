"""Node-agent GPU discovery: NVML through a fake module, declared inventories, heartbeats."""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from frenzy.catalog.gpus import GIB, get_gpu
from frenzy.config import ServiceSettings
from frenzy.v1 import events_pb2, types_pb2
from frenzy_agent import executor
from frenzy_agent.gpus import (Gpu, NvmlMonitor, NvmlUnavailable, catalog_name, discover,
                               discover_nvml, open_nvml, parse_inventory)
from frenzy_agent.service import NodeAgent

MIB = 1024**2


class NVMLError(Exception):
    """Like pynvml.NVMLError: carries an NVML return code."""

    def __init__(self, value: int, text: str) -> None:
        super().__init__(text)
        self.value = value


NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_DRIVER_NOT_LOADED = 9


@dataclass
class FakeDevice:
    name: str | bytes
    total: int
    used: int = 0
    uuid: str = ""
    fails: str = ""  # "", "handle", "name", "memory" or "uuid": that query raises GPU-is-lost


@dataclass
class Memory:
    total: int
    used: int
    free: int


@dataclass
class FakeNvml:
    """The part of pynvml that frenzy_agent.gpus calls; records init/shutdown balance."""

    devices: list[FakeDevice] = field(default_factory=list)
    init_error: Exception | None = None
    inits: int = 0
    shutdowns: int = 0
    NVMLError = NVMLError

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise self.init_error
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def _check(self, device: FakeDevice, query: str) -> None:
        if device.fails == query:
            raise NVMLError(NVML_ERROR_GPU_IS_LOST, "GPU is lost")

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeDevice:
        device = self.devices[index]
        self._check(device, "handle")
        return device

    def nvmlDeviceGetName(self, handle: FakeDevice) -> str | bytes:
        self._check(handle, "name")
        return handle.name

    def nvmlDeviceGetMemoryInfo(self, handle: FakeDevice) -> Memory:
        self._check(handle, "memory")
        return Memory(handle.total, handle.used, handle.total - handle.used)

    def nvmlDeviceGetUUID(self, handle: FakeDevice) -> str:
        self._check(handle, "uuid")
        return handle.uuid


def a100s(count: int = 8) -> FakeNvml:
    return FakeNvml([FakeDevice("NVIDIA A100-SXM4-80GB", 81920 * MIB, used=(i + 1) * 512 * MIB,
                                uuid=f"GPU-a100-{i}") for i in range(count)])


# ----- NVML discovery ---------------------------------------------------------------------

def test_eight_a100s_are_discovered_with_memory_used_and_uuids():
    nvml = a100s()
    gpus = discover_nvml(nvml)
    assert [g.index for g in gpus] == list(range(8))
    assert {g.gpu_type for g in gpus} == {"A100-80GB"}
    assert all(g.memory_total_bytes == 80 * GIB and not g.simulated and g.healthy for g in gpus)
    assert [g.memory_used_bytes for g in gpus] == [(i + 1) * 512 * MIB for i in range(8)]
    assert [g.uuid for g in gpus] == [f"GPU-a100-{i}" for i in range(8)]
    assert gpus[0].name == "NVIDIA A100-SXM4-80GB"
    assert nvml.inits == nvml.shutdowns == 1
    assert discover("", nvml) == gpus  # no declared inventory: NVML


def test_names_as_bytes_are_decoded():
    nvml = FakeNvml([FakeDevice(b"NVIDIA H200", 143771 * MIB, uuid="GPU-h200")])
    (gpu,) = discover_nvml(nvml)
    assert gpu.gpu_type == "H200-141GB" and gpu.name == "NVIDIA H200"


@pytest.mark.parametrize("name, memory_gib, expected", [
    ("NVIDIA A100-SXM4-80GB", 80, "A100-80GB"),
    ("NVIDIA A100-PCIE-40GB", 40, "A100-40GB"),  # A100, not A10; memory picks 40GB
    ("NVIDIA A100 80GB PCIe", 80, "A100-80GB"),
    ("NVIDIA A10", 22.5, "A10"),
    ("NVIDIA H100 80GB HBM3", 79.6, "H100-80GB"),
    ("NVIDIA H100 PCIe", 79.6, "H100-80GB"),
    ("NVIDIA H200", 140.4, "H200-141GB"),
    ("Tesla V100-SXM2-16GB", 15.8, "V100-16GB"),
    ("Tesla V100-SXM2-32GB", 31.7, "V100-32GB"),
    ("Tesla T4", 15, "T4"),
    ("Tesla P100-PCIE-16GB", 15.9, "P100-16GB"),
    ("NVIDIA GeForce RTX 4090", 23.6, "RTX-4090"),  # not RTX-3090, which has as much memory
    ("NVIDIA GeForce RTX 3090", 23.7, "RTX-3090"),
    ("NVIDIA GeForce RTX 2080 Ti", 10.8, "RTX-2080Ti"),
    ("Quadro RTX 6000", 23.6, "Quadro-RTX-6000"),
    ("NVIDIA L40S", 44.5, "L40S"),
    ("NVIDIA GeForce GTX 1080", 7.9, "NVIDIA GeForce GTX 1080"),  # not in the catalog
])
def test_nvml_names_map_to_catalog_types(name, memory_gib, expected):
    assert catalog_name(name, int(memory_gib * GIB)) == expected


def test_mixed_node_reports_each_type_and_keeps_unknown_names():
    nvml = FakeNvml([FakeDevice("NVIDIA H100 80GB HBM3", 81559 * MIB, uuid="GPU-0"),
                     FakeDevice("Tesla T4", 15360 * MIB, uuid="GPU-1"),
                     FakeDevice("NVIDIA GeForce GTX 1080", 8192 * MIB, uuid="GPU-2")])
    gpus = discover_nvml(nvml)
    assert [g.gpu_type for g in gpus] == ["H100-80GB", "T4", "NVIDIA GeForce GTX 1080"]
    assert all(g.healthy for g in gpus)  # unknown is not unhealthy: it is just never planned for


@pytest.mark.parametrize("fails", ["handle", "name", "memory"])
def test_a_failing_device_is_kept_at_its_index_as_unhealthy(fails):
    nvml = a100s(4)
    nvml.devices[2].fails = fails
    gpus = discover_nvml(nvml)
    assert [g.index for g in gpus] == [0, 1, 2, 3]  # indices stay aligned with the hardware
    bad = gpus[2]
    assert not bad.healthy and "GPU is lost" in bad.error and "NVMLError" in bad.error
    assert bad.gpu_type == "A100-80GB"  # the node's type, so the node stays one type
    assert all(g.healthy for i, g in enumerate(gpus) if i != 2)
    assert nvml.shutdowns == nvml.inits == 1


def test_a_failing_uuid_query_is_not_unhealthy():
    nvml = a100s(2)
    nvml.devices[1].fails = "uuid"
    gpus = discover_nvml(nvml)
    assert gpus[1].healthy and gpus[1].uuid == "" and gpus[0].uuid == "GPU-a100-0"


def test_every_device_failing_leaves_type_unknown():
    nvml = FakeNvml([FakeDevice("x", 0, fails="handle")])
    (gpu,) = discover_nvml(nvml)
    assert gpu.gpu_type == "unknown" and not gpu.healthy


def test_nvml_init_failure_is_a_clear_error():
    nvml = FakeNvml(init_error=NVMLError(NVML_ERROR_DRIVER_NOT_LOADED, "Driver Not Loaded"))
    with pytest.raises(NvmlUnavailable, match="nvmlInit failed.*Driver Not Loaded"):
        discover_nvml(nvml)
    with pytest.raises(ValueError) as err:
        discover("", nvml)
    message = str(err.value)
    assert message.startswith("gpus:") and "Driver Not Loaded" in message and "--gpus" in message


def test_nvml_init_failure_falls_back_to_a_declared_inventory():
    nvml = FakeNvml(init_error=NVMLError(NVML_ERROR_DRIVER_NOT_LOADED, "Driver Not Loaded"))
    gpus = discover("2xT4", nvml)
    assert [(g.gpu_type, g.simulated) for g in gpus] == [("T4", True), ("T4", True)]
    assert nvml.inits == 0  # a declared inventory wins: NVML is not even asked


def test_no_devices_is_a_clear_error():
    with pytest.raises(ValueError, match="NVML found no GPUs.*--gpus"):
        discover("", FakeNvml([]))


def test_missing_nvidia_ml_py_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    with pytest.raises(NvmlUnavailable, match="nvidia-ml-py is not installed"):
        open_nvml()


# ----- declared inventories ---------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("8xA100-80GB", ["A100-80GB"] * 8),
    ("4XT4", ["T4"] * 4),
    ("2 x H100", ["H100-80GB"] * 2),  # an alias, with spaces
    ("2xT4, 1xV100-32GB", ["T4", "T4", "V100-32GB"]),
    ("1xA10,", ["A10"]),
])
def test_parse_inventory(text, expected):
    gpus = parse_inventory(text)
    assert [g.gpu_type for g in gpus] == expected
    assert [g.index for g in gpus] == list(range(len(expected)))
    assert all(g.simulated and g.healthy and g.memory_total_bytes == get_gpu(t).memory_bytes
               for g, t in zip(gpus, expected))


@pytest.mark.parametrize("text, words", [
    ("", ["gpus:", "empty"]),
    (" , ", ["gpus:", "empty"]),
    ("8", ["gpus:", "'8'", "COUNTxTYPE"]),
    ("A100-80GB", ["gpus:", "'A100-80GB'", "COUNTxTYPE"]),
    ("0xT4", ["gpus:", "'0xT4'", "COUNTxTYPE"]),
    ("-1xT4", ["gpus:", "'-1xT4'"]),
    ("2xT4,3", ["gpus:", "'3'"]),
    ("8xNoSuchGPU", ["gpus:", "'NoSuchGPU'", "known:", "A100-80GB"]),
])
def test_parse_inventory_errors_name_the_field_and_part(text, words):
    with pytest.raises(ValueError) as err:
        parse_inventory(text)
    assert all(word in str(err.value) for word in words), str(err.value)


def test_discover_rejects_a_bad_declared_inventory():
    with pytest.raises(ValueError, match="^gpus: 'xT4'"):
        discover("xT4", a100s())


# ----- the agent: heartbeats and the job environment -------------------------------------

def _agent(gpus: list[Gpu], monitor: NvmlMonitor | None = None, tmp_path: Path = Path(".")) -> NodeAgent:
    return NodeAgent(None, "node-0", gpus, tmp_path, ServiceSettings(), monitor=monitor)  # type: ignore[arg-type]


def _job(gpu_indices: list[int], predicted: int, progress: dict | None = None) -> executor.RunningJob:
    job = executor.RunningJob("job-1", 0, Path("/nonexistent"), 1, [1], predicted, gpu_indices)
    job.last_progress = progress or {}
    return job


def test_heartbeat_reports_nvml_memory_used_and_health():
    nvml = a100s(2)
    gpus = discover_nvml(nvml)
    monitor = NvmlMonitor(nvml)
    agent = _agent(gpus, monitor)
    nvml.devices[0].used = 30 * GIB  # a job allocated since discovery
    beat = agent.heartbeat()
    assert not beat.simulated
    assert [g.memory_used_bytes for g in beat.gpus] == [30 * GIB, 1024 * MIB]
    assert [g.health for g in beat.gpus] == [types_pb2.HEALTHY, types_pb2.HEALTHY]
    assert [g.gpu_type for g in beat.gpus] == ["A100-80GB"] * 2
    nvml.devices[1].fails = "memory"  # falls off the bus
    beat = agent.heartbeat()
    assert [g.health for g in beat.gpus] == [types_pb2.HEALTHY, types_pb2.UNHEALTHY]
    nvml.devices[1].fails = ""  # back after a reset
    assert agent.heartbeat().gpus[1].health == types_pb2.HEALTHY
    monitor.close()
    assert nvml.inits == nvml.shutdowns == 2  # discovery's, and the monitor's


def test_heartbeat_marks_gpus_unhealthy_when_nvml_goes_away():
    gpus = discover_nvml(a100s(2))
    broken = FakeNvml(init_error=NVMLError(NVML_ERROR_DRIVER_NOT_LOADED, "Driver Not Loaded"))
    beat = _agent(gpus, NvmlMonitor(broken)).heartbeat()
    assert [g.health for g in beat.gpus] == [types_pb2.UNHEALTHY] * 2


def test_simulated_heartbeat_reports_the_jobs_measured_peak_else_its_prediction():
    agent = _agent(parse_inventory("4xT4"))
    assert agent.monitor is None  # nothing to read on a simulated inventory
    agent.running["job-1"] = _job([1, 2], predicted=5 * GIB)
    beat = agent.heartbeat()
    assert beat.simulated
    assert [g.memory_used_bytes for g in beat.gpus] == [0, 5 * GIB, 5 * GIB, 0]
    assert [g.job_id for g in beat.gpus] == ["", "job-1", "job-1", ""]
    agent.running["job-1"].last_progress = {"step": 3, "peak_memory_bytes": 123_456}
    beat = agent.heartbeat()
    assert [g.memory_used_bytes for g in beat.gpus] == [0, 123_456, 123_456, 0]
    assert all(g.health == types_pb2.HEALTHY for g in beat.gpus)


def test_jobs_on_a_simulated_inventory_see_no_cuda_device():
    agent = _agent(parse_inventory("4xA100-80GB"))
    assert agent.visible_devices([0, 1]) == ""


def test_jobs_on_real_gpus_get_their_uuids_else_indices():
    gpus = discover_nvml(a100s(4))
    agent = _agent(gpus, NvmlMonitor(a100s(4)))
    assert agent.visible_devices([1, 3]) == "GPU-a100-1,GPU-a100-3"
    nvml = a100s(4)
    nvml.devices[3].fails = "uuid"
    agent = _agent(discover_nvml(nvml), NvmlMonitor(nvml))
    assert agent.visible_devices([1, 3]) == "1,3"


def test_job_environment_carries_the_visible_devices(tmp_path):
    launch = events_pb2.LaunchJob(job_id="j", attempt=0, node_id="node-0", gpu_indices=[0, 1],
                                  world_size=2, master_addr="127.0.0.1", master_port=29500)
    env = executor.job_environment(launch, 1, tmp_path, 1.0, "")
    assert env["CUDA_VISIBLE_DEVICES"] == "" and env["RANK"] == "1" and env["WORLD_SIZE"] == "2"
    assert executor.job_environment(launch, 0, tmp_path, 1.0)["CUDA_VISIBLE_DEVICES"] == "0,1"


# ----- the real NVML path (machines with an NVIDIA driver) --------------------------------

def test_real_nvml_when_a_driver_is_present():
    try:
        open_nvml().nvmlShutdown()
    except NvmlUnavailable as err:
        pytest.skip(str(err))
    gpus = discover_nvml()
    assert gpus and all(not g.simulated and g.memory_total_bytes > 0 for g in gpus)
    assert all(g.uuid.startswith(("GPU-", "MIG-")) for g in gpus if g.healthy)
