"""The scheduler's view of a cluster file (frenzy.clusterfile): every node with every GPU free."""
from __future__ import annotations

from frenzy.clusterfile import NodeGroup, node_layout
from frenzy_scheduler.core import ClusterView, NodeState


def build_cluster(groups: list[NodeGroup]) -> ClusterView:
    """The nodes of `frenzy.clusterfile.node_layout`, idle."""
    return ClusterView({n.node_id: NodeState(n.node_id, n.gpu_type, n.gpus, list(range(n.gpus)))
                        for n in node_layout(groups)})
