"""GPU discovery: NVML when real GPUs exist, else a declared simulated inventory (`4xA100-80GB`)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from types import ModuleType

from frenzy.catalog.gpus import get_gpu


@dataclass(frozen=True)
class Gpu:
    index: int
    gpu_type: str
    memory_total_bytes: int
    simulated: bool


def parse_inventory(text: str) -> list[Gpu]:
    """Parse `8xA100-80GB` (or `2xT4,2xV100-32GB` on one node); ValueError names the part."""
    gpus: list[Gpu] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        match = re.fullmatch(r"(\d+)\s*[xX]\s*(\S+)", part)
        if not match or int(match.group(1)) <= 0:
            raise ValueError(f"gpus: {part!r} is not COUNTxTYPE, e.g. 8xA100-80GB")
        try:
            gpu_type = get_gpu(match.group(2))
        except KeyError as err:
            raise ValueError(f"gpus: {err.args[0]}") from None
        for _ in range(int(match.group(1))):
            gpus.append(Gpu(len(gpus), gpu_type.name, gpu_type.memory_bytes, True))
    if not gpus:
        raise ValueError("gpus: the inventory is empty")
    return gpus


def discover_nvml(nvml: ModuleType | None = None) -> list[Gpu]:
    """Real GPUs through NVML (nvidia-ml-py); [] when NVML or a driver is absent."""
    if nvml is None:
        try:
            import pynvml as nvml  # type: ignore[no-redef]
        except ImportError:
            return []
    try:
        nvml.nvmlInit()
    except Exception:
        return []
    try:
        gpus = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            name = nvml.nvmlDeviceGetName(handle)
            name = name.decode() if isinstance(name, bytes) else name
            memory = nvml.nvmlDeviceGetMemoryInfo(handle).total
            gpus.append(Gpu(index, catalog_name(name, memory), int(memory), False))
        return gpus
    finally:
        nvml.nvmlShutdown()


def catalog_name(nvml_name: str, memory_bytes: int) -> str:
    """Map an NVML device name (e.g. 'NVIDIA H200') to the catalog type it matches."""
    from frenzy.catalog.gpus import gpu_catalog

    compact = nvml_name.upper().replace("NVIDIA", "").replace("TESLA", "").replace(" ", "")
    gib = memory_bytes / 1024**3
    best = None
    for name, gpu in gpu_catalog().items():
        family = name.split("-")[0].upper()
        if family in compact:
            distance = abs(gpu.memory_bytes / 1024**3 - gib)
            if best is None or distance < best[0]:
                best = (distance, name)
    return best[1] if best else nvml_name


def discover(inventory: str = "") -> list[Gpu]:
    """A declared inventory wins (simulated clusters); otherwise ask NVML."""
    if inventory:
        return parse_inventory(inventory)
    gpus = discover_nvml()
    if not gpus:
        raise ValueError("gpus: no NVML GPUs found; declare a simulated inventory with --gpus 8xA100-80GB")
    return gpus
