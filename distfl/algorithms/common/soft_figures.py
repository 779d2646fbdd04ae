"""The figure of a soft membership in ``distfl report``: each client's weights over the
clusters, clients ordered by ground-truth group, from an algorithm's table of weights
(a :class:`~distfl.algorithms.api.declarations.RecordTable` per client and cluster, with a
column ``weight``: FedEM's π)."""

from __future__ import annotations

import numpy as np

from distfl import plot
from distfl.hierarchy import node_order
from distfl.runfile.layout import ALGORITHM_PREFIX
from distfl.runfile.view import RunData

#: the name of the table the figure reads
TABLE = "weights"


def latest_weights(table: dict, num_clients: int) -> tuple[list[str], np.ndarray]:
    """(cluster ids in tree order, [K, M] each client's weights as its last round recorded
    them; NaN for a client never recorded) from a table of columns round, client, cluster,
    weight."""
    rounds = np.asarray(table["round"], dtype=np.int64)
    clients = np.asarray(table["client"], dtype=np.int64)
    clusters = np.array([str(c) for c in table["cluster"]], dtype=object)
    weights = np.asarray(table["weight"], dtype=np.float64)
    ids = sorted(set(clusters.tolist()), key=node_order)
    column = {cid: j for j, cid in enumerate(ids)}
    out = np.full((num_clients, len(ids)), np.nan)
    last = np.full(num_clients, -1, dtype=np.int64)
    np.maximum.at(last, clients, rounds)
    keep = rounds == last[clients]
    for k, cid, w in zip(clients[keep], clusters[keep], weights[keep], strict=True):
        out[int(k), column[cid]] = w
    return ids, out


def soft_weights(data: RunData, palette: plot.Palette) -> plot.Drawn | None:
    """Clients × clusters: each client's weights as last recorded, clients in ground-truth
    group order."""
    if data.run is None:
        return None
    table = data.run.stored.tables.get(ALGORITHM_PREFIX + TABLE)
    if not table or len(table.get("round", ())) == 0:
        return None
    K = len(data.groups)
    ids, W = latest_weights(table, K)
    order = np.argsort(data.groups, kind="stable")
    shown = W[order]
    fig = plot.new_figure(max(5.5, 2.5 + 0.6 * len(ids)), 3.0 + min(K, 400) * 0.012)
    ax = fig.add_subplot()
    image = ax.imshow(shown, aspect="auto", interpolation="nearest", cmap="viridis",
                      vmin=0.0, vmax=1.0)  # fmt: skip
    ax.set_xticks(range(len(ids)), ids, fontsize=plot.LEGEND_PT)
    ax.set_xlabel("cluster")
    groups = data.groups[order]
    starts = np.flatnonzero(np.r_[True, groups[1:] != groups[:-1]])
    for s in starts[1:]:
        ax.axhline(s - 0.5, color="white", lw=1.0)
    mids = [(a + b - 1) / 2 for a, b in zip(starts, np.r_[starts[1:], K], strict=True)]
    ax.set_yticks(mids, [palette.name(int(groups[s])) for s in starts], fontsize=plot.LEGEND_PT)
    ax.set_ylabel("clients, by ground-truth group")
    fig.colorbar(image, ax=ax, label="weight")
    never = int(np.isnan(W).all(axis=1).sum())
    note = f" {never} client(s) never trained (blank)." if never else ""
    ax.set_title("Each client's weights over the clusters")
    return fig, (
        "Each row is a client (grouped by its ground-truth group, white lines between groups), "
        "each column a cluster: the client's weight of it as its last training left it. A "
        "group recovered by one cluster is a bright column of its own; weights spread over "
        "the columns are a soft membership." + note
    )
