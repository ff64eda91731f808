"""Cluster files: YAML node groups, or node lists from the Alibaba GPU traces.

The format is shared: `frenzy up` starts one agent per node of a cluster file, and the scheduler's
simulator and benchmarks build their cluster from the same file (`frenzy_scheduler.clusterfile`
turns these nodes into its live view).

YAML schema (deploy/clusters/*.yaml)::

    node_groups:
      - {gpu_type: A100-40GB, gpus_per_node: 8, nodes: 8}
      - {gpu_type: T4, gpus_per_node: 2, nodes: 16, name: t4-rack}   # name: optional id prefix

`gpu_type` may be a catalog name or a known alias (A100-SXM4-80GB, H800, V100M32, ...).
Pydantic validates at this edge; everything inside is a plain `NodeGroup`.
"""
from __future__ import annotations

import csv
import math
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from frenzy.catalog.gpus import GPU_ALIASES, get_gpu

# Alibaba's undisclosed types ("GPU-series-1/2" in v2026, "G2/G3" in v2023) have no datasheet.
# They are dropped by default; pass a stand-in map (e.g. DOCUMENTED_STANDINS) to keep them.
UNDISCLOSED_TYPES = ("GPU-series-1", "GPU-series-2", "G2", "G3")
DOCUMENTED_STANDINS: dict[str, str] = {
    # 1-, 4- and 8-GPU nodes beside A10s: sized like an inference card -> L40S stand-in.
    "GPU-series-1": "L40S",
    # 8-GPU training nodes beside A100/H800: H100-80GB stand-in.
    "GPU-series-2": "H100-80GB",
    "G2": "V100-32GB",
    "G3": "A100-40GB",
}


@dataclass(frozen=True)
class NodeGroup:
    gpu_type: str  # canonical catalog name
    gpus_per_node: int
    nodes: int
    name: str = ""  # node id prefix; defaults to the lower-cased type

    @property
    def total_gpus(self) -> int:
        return self.gpus_per_node * self.nodes


class _GroupModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    gpu_type: str
    gpus_per_node: int = Field(gt=0)
    nodes: int = Field(ge=0)
    name: str = ""


class _ClusterModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    node_groups: list[_GroupModel] = Field(min_length=1)
    description: str = ""


def canonical_gpu_type(name: str) -> str:
    """Catalog name for a type or alias; KeyError names the choices."""
    return get_gpu(name).name


def parse_cluster(data: object) -> list[NodeGroup]:
    """Validate a parsed YAML document; ValueError names the offending field."""
    try:
        model = _ClusterModel.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "cluster"
        raise ValueError(f"{where}: {first['msg']}") from None
    groups: list[NodeGroup] = []
    for i, group in enumerate(model.node_groups):
        try:
            gpu_type = canonical_gpu_type(group.gpu_type)
        except KeyError as err:
            raise ValueError(f"node_groups[{i}].gpu_type: {err.args[0]}") from None
        groups.append(NodeGroup(gpu_type, group.gpus_per_node, group.nodes, group.name))
    return groups


def load_cluster_file(path: str | Path, standins: dict[str, str] | None = None) -> list[NodeGroup]:
    """Read a YAML node-group file, or an Alibaba node-list CSV (v2023 or v2026 layout)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"cluster file {str(path)!r} does not exist")
    if path.suffix.lower() == ".csv":
        return groups_from_alibaba_csv(path, standins)
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ValueError(f"cluster file {str(path)!r} is not valid YAML ({err})") from None
    return parse_cluster(data)


def groups_from_alibaba_csv(path: str | Path,
                            standins: dict[str, str] | None = None) -> list[NodeGroup]:
    """Count nodes per (type, GPUs per node) in an Alibaba node list.

    v2026: `gpu_model,gpu_capacity_num,cpu_num,node_name`; v2023: `sn,cpu_milli,memory_mib,gpu,model`.
    Undisclosed types are dropped unless `standins` maps them to a catalog type.
    """
    counts: Counter[tuple[str, int]] = Counter()
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle)
        fields = set(reader.fieldnames or ())
        if {"gpu_model", "gpu_capacity_num"} <= fields:
            type_field, count_field = "gpu_model", "gpu_capacity_num"
        elif {"model", "gpu"} <= fields:
            type_field, count_field = "model", "gpu"
        else:
            raise ValueError(f"{path}: not an Alibaba node list (columns {sorted(fields)})")
        for row in reader:
            raw, gpus = row[type_field].strip(), int(float(row[count_field] or 0))
            if gpus <= 0:
                continue
            if raw in UNDISCLOSED_TYPES:
                if not standins or raw not in standins:
                    continue
                raw = standins[raw]
            counts[(canonical_gpu_type(GPU_ALIASES.get(raw, raw)), gpus)] += 1
    return [NodeGroup(t, per_node, n) for (t, per_node), n in sorted(counts.items())]


def scale_groups(groups: list[NodeGroup], factor: float) -> list[NodeGroup]:
    """Shrink a cluster keeping its type mix: every group keeps at least one node."""
    return [NodeGroup(g.gpu_type, g.gpus_per_node, max(1, math.floor(g.nodes * factor + 0.5)), g.name)
            for g in groups if g.nodes > 0]


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


@dataclass(frozen=True)
class NodeSpec:
    """One node of a cluster file: its id, GPU type and GPU count."""

    node_id: str
    gpu_type: str
    gpus: int


def node_layout(groups: list[NodeGroup]) -> list[NodeSpec]:
    """Expand node groups into nodes; ids like `a100-80gb-0`.

    Groups sharing a prefix continue its numbering; groups of one type but different node
    sizes get a `-<n>g` suffix so ids stay unique and readable. `frenzy up` names its agents
    and the simulator its nodes with these ids, so both see the same cluster.
    """
    sizes_per_type: dict[str, set[int]] = {}
    for g in groups:
        sizes_per_type.setdefault(g.gpu_type, set()).add(g.gpus_per_node)
    counters: Counter[str] = Counter()
    nodes: list[NodeSpec] = []
    for g in groups:
        prefix = _slug(g.name) if g.name else _slug(g.gpu_type)
        if not g.name and len(sizes_per_type[g.gpu_type]) > 1:
            prefix = f"{prefix}-{g.gpus_per_node}g"
        for _ in range(g.nodes):
            nodes.append(NodeSpec(f"{prefix}-{counters[prefix]}", g.gpu_type, g.gpus_per_node))
            counters[prefix] += 1
    return nodes


def dump_cluster_yaml(groups: list[NodeGroup], description: str = "") -> str:
    doc: dict[str, object] = {}
    if description:
        doc["description"] = description
    doc["node_groups"] = [{"gpu_type": g.gpu_type, "gpus_per_node": g.gpus_per_node,
                           "nodes": g.nodes} for g in groups]
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=None)
