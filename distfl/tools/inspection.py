"""``distfl inspect RUN.h5``: the cluster hierarchy as a tree, accuracies, WAS/WADB, Rand/ARI."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from distfl.checkpoint import RunFile, read_run_file
from distfl.hierarchy import HierarchyNode, node_order
from distfl.metrics import adjusted_rand_index, federation_mean, rand_index, wadb, was


def _fmt(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def world_line(world: Mapping[str, Any]) -> str:
    """``/world`` (as :attr:`RunFile.world` holds it) in one line: each host with its
    ranks, the launcher, the backend and the rendezvous (e.g. ``node1 ranks 0-1, node2
    ranks 2-3; slurm, gloo, rendezvous node1:15007 = 10.231.1.1``)."""
    hosts = [str(h) for h in world["host"]]
    spans: list[tuple[str, int, int]] = []  # (host, first rank, last rank), in rank order
    for rank, host in enumerate(hosts):
        if spans and spans[-1][0] == host and spans[-1][2] == rank - 1:
            spans[-1] = (host, spans[-1][1], rank)
        else:
            spans.append((host, rank, rank))
    where = ", ".join(f"{h} rank {a}" if a == b else f"{h} ranks {a}-{b}" for h, a, b in spans)
    how = f"{world.get('launcher', '')}, {world.get('backend', '')}"
    if world.get("rendezvous"):
        how += f", rendezvous {world['rendezvous']}"
        if world.get("rendezvous_ip"):
            how += f" = {world['rendezvous_ip']}"
    return f"{where}; {how}"


def tree_lines(hierarchy: list[HierarchyNode], accuracy: np.ndarray) -> list[str]:
    """The cluster tree as ``distfl inspect`` draws it, one line per node, parents before
    children: the node's id under its parent's branch, its member count, and for a split
    node the round it split in, its number of children and its best Davies-Bouldin score;
    for a leaf the mean balanced accuracy of its members (``accuracy``: each client's, as
    /clients/accuracy holds it)."""
    out: list[str] = []
    nodes = {n.id: n for n in hierarchy}
    children: dict[str, list[str]] = {}
    for n in hierarchy:
        if n.parent:
            children.setdefault(n.parent, []).append(n.id)
    roots = sorted((n.id for n in hierarchy if not n.parent), key=node_order)
    width = max(len(i) for i in nodes) + 4 * max(i.count(".") for i in nodes) + 4

    def line(node: HierarchyNode, prefix: str, last: bool, depth: int) -> None:
        branch = "" if depth == 0 else ("└── " if last else "├── ")
        label = f"{prefix}{branch}{node.id}"
        members = np.asarray(node.members, dtype=np.int64)
        text = f"{label:<{width}} {len(members):>6} clients"
        if node.split_round >= 0:
            kids = children.get(node.id, [])
            scores = node.datasets.get("db_scores")
            best = float(np.min(scores)) if scores is not None and len(scores) else math.nan
            text += f"  split at round {node.split_round} into {len(kids)} (DB {_fmt(best)})"
        else:
            acc = federation_mean(accuracy[members]) if len(members) else math.nan
            text += f"  leaf, accuracy {_fmt(acc)}"
        out.append(text)
        kids = sorted(children.get(node.id, []), key=node_order)
        for i, kid in enumerate(kids):
            ext = "" if depth == 0 else ("    " if last else "│   ")
            line(nodes[kid], prefix + ext, i == len(kids) - 1, depth + 1)

    for root in roots:
        line(nodes[root], "", True, 0)
    return out


def final_scores(run: RunFile) -> dict[str, Any]:
    """The numbers ``distfl inspect`` prints below the tree: ``clusters`` (the final
    leaves, empty ones included), ``accuracy`` (the mean over the clients of their balanced
    accuracy at the last evaluation; NaN without one), ``was`` and ``wadb`` (None where
    undefined: one cluster, or every cluster a singleton), ``groups`` (the distinct
    ground-truth groups recorded), ``rand`` and ``ari`` (the final assignment against
    them)."""
    groups = run.clients["group"]
    class_counts = run.clients["class_counts"]
    assignment = run.assignment
    return {
        "clusters": len(run.leaves),
        "accuracy": federation_mean(run.clients["accuracy"]),
        "was": was(class_counts, assignment),
        "wadb": wadb(class_counts, assignment),
        "groups": int(len(np.unique(groups))),
        "rand": float(rand_index(groups, assignment)),
        "ari": float(adjusted_rand_index(groups, assignment)),
    }


def inspect_run(path: str | Path, stream: TextIO, *, run: RunFile | None = None) -> None:
    """``run``: the file's RunFile when the caller has read it already."""
    run = run if run is not None else read_run_file(path)
    cfg = run.config
    version, created = run.version, run.created
    world = world_line(run.world) if run.world else None
    done = int(run.state["round"])
    w = stream.write
    w(f"run file   {path} (distfl {version}, created {created}, world size {run.world_size})\n")
    if world:
        w(f"world      {world}\n")
    w(
        f"run        {cfg.algorithm.name} on {cfg.data.dataset}, {cfg.data.num_clients} clients in "
        f"{len(cfg.groups)} group(s), round {done} of {cfg.run.rounds}"
        + (" (incomplete: resume with distfl run --resume)" if done < cfg.run.rounds else "")
        + "\n"
    )
    w("hierarchy\n")
    for text in tree_lines(run.hierarchy, run.clients["accuracy"]):
        w(text + "\n")
    s = final_scores(run)
    fed = _fmt(s["accuracy"])
    w(f"final      {s['clusters']} cluster(s); federation balanced accuracy {fed}\n")
    w(f"WAS        {_fmt(s['was'])}   (silhouette, sorted frequencies)\n")
    w(f"WADB       {_fmt(s['wadb'])}   (Davies-Bouldin, the same vectors)\n")
    if s["groups"] > 1 or s["clusters"] > 1:
        ri, ari = _fmt(s["rand"]), _fmt(s["ari"])
        w(f"truth      Rand index {ri}, ARI {ari} against the {s['groups']} recorded groups\n")
