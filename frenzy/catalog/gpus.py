"""GPU types from vendor datasheets (a copy of shared/data/gpus.csv ships in the package)."""
from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import cache
from importlib import resources

GIB = 1024**3


@dataclass(frozen=True)
class GpuType:
    name: str
    memory_bytes: int
    peak_tflops_16bit: float  # dense tensor-core rate, datasheet peak
    bf16: bool
    mem_bandwidth_gbs: float
    nvlink_gbs_per_gpu: float  # 0 when the card has no NVLink
    pcie_gbs: float
    typical_gpus_per_node: int

    @property
    def intra_node_gbs(self) -> float:
        """Bandwidth between GPUs of one node: NVLink when present, else PCIe."""
        return self.nvlink_gbs_per_gpu if self.nvlink_gbs_per_gpu > 0 else self.pcie_gbs


def _parse(row: dict[str, str]) -> GpuType:
    return GpuType(
        name=row["name"],
        # Datasheet "80GB" cards expose ~80 GiB; smaller cards expose a little less than the
        # nominal figure, which the fit margin in MARP absorbs.
        memory_bytes=int(float(row["memory_gb"]) * GIB),
        peak_tflops_16bit=float(row["peak_tflops_16bit_dense"]),
        bf16=row["bf16"].strip().lower() == "yes",
        mem_bandwidth_gbs=float(row["mem_bandwidth_gbs"]),
        nvlink_gbs_per_gpu=float(row["nvlink_gbs_per_gpu"]),
        pcie_gbs=float(row["pcie_gbs"]),
        typical_gpus_per_node=int(row["typical_gpus_per_node"]),
    )


@cache
def gpu_catalog() -> dict[str, GpuType]:
    text = resources.files("frenzy").joinpath("data/gpus.csv").read_text()
    return {g.name: g for g in map(_parse, csv.DictReader(text.splitlines()))}


# Names that other data sets (Alibaba node lists, nvidia-smi) use for catalog types.
GPU_ALIASES: dict[str, str] = {
    "A100-SXM4-80GB": "A100-80GB",
    "A100-SXM4-40GB": "A100-40GB",
    "A800-SXM4-80GB": "A800-80GB",
    "H800": "H800-80GB",
    "H100": "H100-80GB",
    "V100M16": "V100-16GB",
    "V100M32": "V100-32GB",
    "P100": "P100-16GB",
    "NVIDIA A100-SXM4-80GB": "A100-80GB",
    "NVIDIA H100 80GB HBM3": "H100-80GB",
    "NVIDIA H200": "H200-141GB",
    "Tesla T4": "T4",
}


def get_gpu(name: str) -> GpuType:
    """Look up a GPU type by catalog name or a known alias; KeyError names the choices."""
    catalog = gpu_catalog()
    canonical = GPU_ALIASES.get(name, name)
    if canonical not in catalog:
        raise KeyError(f"unknown GPU type {name!r}; known: {', '.join(sorted(catalog))}")
    return catalog[canonical]
