"""GPU discovery: NVML when real GPUs exist, else a declared simulated inventory (`4xA100-80GB`).

NVML (nvidia-ml-py, module `pynvml`) is injectable: every function that talks to it takes the
module, so tests pass a fake one. A device NVML cannot query is kept, at its index, as an
unhealthy GPU: indices stay aligned with the hardware and the orchestrator never places on it.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, replace
from types import ModuleType
from typing import Any

from frenzy.catalog.gpus import GPU_ALIASES, get_gpu, gpu_catalog

UNKNOWN_TYPE = "unknown"


@dataclass(frozen=True)
class Gpu:
    index: int
    gpu_type: str
    memory_total_bytes: int
    simulated: bool
    memory_used_bytes: int = 0  # NVML's reading (0 for simulated GPUs)
    healthy: bool = True
    uuid: str = ""  # NVML's "GPU-..." id; CUDA_VISIBLE_DEVICES accepts it
    name: str = ""  # the device name NVML reports
    error: str = ""  # why the GPU is unhealthy


class NvmlUnavailable(ValueError):
    """NVML cannot be used on this machine; the message says why."""


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


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _error(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"


def open_nvml(nvml: ModuleType | None = None) -> ModuleType:
    """Import (unless given) and initialise NVML; NvmlUnavailable says why it cannot be used.

    The caller owns the initialisation and ends it with `nvml.nvmlShutdown()`.
    """
    if nvml is None:
        try:
            import pynvml as nvml  # type: ignore[no-redef]
        except ImportError:
            raise NvmlUnavailable("NVML unavailable: nvidia-ml-py is not installed "
                                  "(pip install 'frenzy[nvml]')") from None
    try:
        nvml.nvmlInit()
    except Exception as err:  # noqa: BLE001 - NVMLError, or OSError from a broken driver
        raise NvmlUnavailable(f"NVML unavailable: nvmlInit failed ({_error(err)})") from None
    return nvml


def read_gpu(nvml: ModuleType, index: int) -> Gpu:
    """One device as NVML sees it now; a device whose queries fail is an unhealthy Gpu."""
    name, memory_total, used, uuid = "", 0, 0, ""
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        name = _text(nvml.nvmlDeviceGetName(handle))
        memory = nvml.nvmlDeviceGetMemoryInfo(handle)
        memory_total, used = int(memory.total), int(memory.used)
        try:
            uuid = _text(nvml.nvmlDeviceGetUUID(handle))
        except Exception:  # noqa: BLE001 - the UUID is a convenience, not health
            uuid = ""
    except Exception as err:  # noqa: BLE001 - NVMLError (GPU lost, reset required, ...)
        gpu_type = catalog_name(name, memory_total) if name else UNKNOWN_TYPE
        return Gpu(index, gpu_type, memory_total, False, used, healthy=False, name=name,
                   error=_error(err))
    return Gpu(index, catalog_name(name, memory_total), memory_total, False, used, uuid=uuid,
               name=name)


def discover_nvml(nvml: ModuleType | None = None) -> list[Gpu]:
    """Real GPUs through NVML; NvmlUnavailable when NVML or a driver is absent.

    A device whose type could not be read takes the node's most common type (a node's GPUs
    are normally alike); it is unhealthy either way, so nothing is placed on it.
    """
    nvml = open_nvml(nvml)
    try:
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except Exception as err:  # noqa: BLE001
            raise NvmlUnavailable(f"NVML unavailable: nvmlDeviceGetCount failed ({_error(err)})") from None
        gpus = [read_gpu(nvml, index) for index in range(count)]
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - nothing to do about a failing shutdown
            pass
    known = Counter(g.gpu_type for g in gpus if g.gpu_type != UNKNOWN_TYPE)
    if known:
        common = known.most_common(1)[0][0]
        gpus = [replace(g, gpu_type=common) if g.gpu_type == UNKNOWN_TYPE else g for g in gpus]
    return gpus


def _compact(text: str) -> str:
    text = text.upper()
    for word in ("NVIDIA", "TESLA", "GEFORCE"):
        text = text.replace(word, "")
    return re.sub(r"[\s\-_]", "", text)


def _model_key(catalog_type: str) -> str:
    """A catalog name without its memory size: 'A100-80GB' -> 'A100', 'RTX-2080Ti' -> 'RTX2080TI'."""
    return _compact("".join(p for p in catalog_type.split("-") if not re.fullmatch(r"\d+GB", p)))


def catalog_name(nvml_name: str, memory_bytes: int) -> str:
    """Map an NVML device name (e.g. 'NVIDIA H200') to the catalog type it matches.

    The longest catalog model name contained in the device name wins ('A100' over 'A10'),
    then the memory size nearest the device's ('A100-80GB' over 'A100-40GB'). A device that
    matches nothing keeps its NVML name: it is reported but no plan ever targets it.
    """
    canonical = GPU_ALIASES.get(nvml_name.strip(), nvml_name.strip())
    catalog = gpu_catalog()
    if canonical in catalog:
        return canonical
    compact = _compact(nvml_name)
    best: tuple[tuple[int, int], str] | None = None
    for name, gpu in catalog.items():
        key = _model_key(name)
        if key and key in compact:
            rank = (-len(key), abs(gpu.memory_bytes - memory_bytes) if memory_bytes else 0)
            if best is None or rank < best[0]:
                best = (rank, name)
    return best[1] if best else (nvml_name.strip() or UNKNOWN_TYPE)


class NvmlMonitor:
    """Live readings (memory used, health) of real GPUs for heartbeats; NVML stays open."""

    def __init__(self, nvml: ModuleType | None = None) -> None:
        self._module = nvml
        self._nvml: ModuleType | None = None
        self.error = ""

    def read(self, gpu: Gpu) -> Gpu:
        """The GPU with its memory used and health as NVML reports them now."""
        if self._nvml is None:
            try:
                self._nvml = open_nvml(self._module)
            except NvmlUnavailable as err:
                self.error = str(err)
                return replace(gpu, healthy=False, error=self.error)
        now = read_gpu(self._nvml, gpu.index)
        return replace(gpu, memory_used_bytes=now.memory_used_bytes, healthy=now.healthy,
                       error=now.error)

    def close(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception:  # noqa: BLE001
                pass
            self._nvml = None


def discover(inventory: str = "", nvml: ModuleType | None = None) -> list[Gpu]:
    """A declared inventory wins (simulated clusters); otherwise ask NVML.

    ValueError (starting "gpus:") when neither gives a GPU, with NVML's reason.
    """
    if inventory:
        return parse_inventory(inventory)
    try:
        gpus = discover_nvml(nvml)
    except NvmlUnavailable as err:
        raise ValueError(f"gpus: {err}; declare a simulated inventory with --gpus 8xA100-80GB") from None
    if not gpus:
        raise ValueError("gpus: NVML found no GPUs; declare a simulated inventory with --gpus 8xA100-80GB")
    return gpus
