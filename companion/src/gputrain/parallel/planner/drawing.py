"""One square per GPU: a layout's placement of ranks on nodes, drawn with matplotlib (chapter 8)."""

from __future__ import annotations

import matplotlib.pyplot as plt

from .cluster import Cluster, Layout


def draw_layout(ax, layout: Layout, cluster: Cluster) -> None:
    """Draw every GPU of ``layout``: one row per data-parallel replica, pipeline stages left to right.

    Ranks are numbered tensor-parallel first, then pipeline, then data
    parallel (Megatron's placement), so consecutive squares share a node;
    thick lines mark node boundaries, where traffic leaves NVLink.
    """
    cmap = plt.get_cmap("tab20")
    group = layout.tp * layout.cp  # GPUs of one pipeline stage
    width = layout.pp * group  # GPUs in one replica: one row
    for replica in range(layout.dp):
        for stage in range(layout.pp):
            for t in range(group):
                x = stage * group + t
                ax.add_patch(plt.Rectangle((x, replica), 1, 0.8, color=cmap(stage % 20), lw=0))
        for start in range(0, width + 1, cluster.gpus_per_node):  # rank = x + replica * width
            ax.plot([start, start], [replica - 0.05, replica + 0.85], color="k", lw=1.2)
    ax.set_xlim(-0.5, width + 0.5)
    ax.set_ylim(layout.dp, -0.2)
    ax.set_xlabel(
        f"pipeline stage (colour), {group} tensor-/context-parallel GPUs each; black lines: node boundaries", fontsize=9
    )
    ax.set_ylabel("data-parallel replica")
    ax.set_yticks([r + 0.4 for r in range(layout.dp)], [str(r) for r in range(layout.dp)])
    ax.set_xticks([])
    ax.set_title(f"{layout.label()} on {cluster.gpus} GPUs: one square per GPU")
