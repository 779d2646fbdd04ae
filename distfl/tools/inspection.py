"""``distfl inspect RUN.h5``: the cluster hierarchy as a tree, accuracies (the mean, the worst
client's and the 10th percentile), WAS/WADB, Rand/ARI."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from distfl.hierarchy import empty_leaves_note
from distfl.runfile.run import Run, participation_line, read, score_text, unverified_warning
from distfl.text import printable


def newcomers_line(s: dict) -> str:
    """The newcomers' figures of a summary (:meth:`~distfl.runfile.run.Run.summary`), in
    words: how many, their balanced accuracy (mean, worst, 10th percentile) and the ARI of
    the clusters they joined."""
    ari = "" if s["held_out_ari"] is None else f", ARI {score_text(s['held_out_ari'])}"
    return (f"{s['newcomers']} never trained: balanced accuracy "
            f"{score_text(s['held_out_accuracy'])}, worst "
            f"{score_text(s['held_out_accuracy_worst'])}, 10th percentile "
            f"{score_text(s['held_out_accuracy_p10'])}{ari}")  # fmt: skip


def world_line(world: Mapping[str, Any]) -> str:
    """``/world`` (as :attr:`RunFile.world` holds it) in one line: each host with its
    ranks, the launcher, the backend and the rendezvous (e.g. ``node1 ranks 0-1, node2
    ranks 2-3; slurm, gloo, rendezvous node1:15007 = 10.231.1.1``)."""
    hosts = [printable(h) for h in world["host"]]
    spans: list[tuple[str, int, int]] = []  # (host, first rank, last rank), in rank order
    for rank, host in enumerate(hosts):
        if spans and spans[-1][0] == host and spans[-1][2] == rank - 1:
            spans[-1] = (host, spans[-1][1], rank)
        else:
            spans.append((host, rank, rank))
    where = ", ".join(f"{h} rank {a}" if a == b else f"{h} ranks {a}-{b}" for h, a, b in spans)
    how = f"{printable(world.get('launcher', ''))}, {printable(world.get('backend', ''))}"
    if world.get("rendezvous"):
        how += f", rendezvous {printable(world['rendezvous'])}"
        if world.get("rendezvous_ip"):
            how += f" = {printable(world['rendezvous_ip'])}"
    return f"{where}; {how}"


def inspect_run(
    path: str | Path,
    stream: TextIO,
    *,
    run: Run | None = None,
    errors: TextIO | None = None,
) -> None:
    """``distfl inspect``: the run, its tree and its :meth:`~distfl.runfile.run.Run.summary`.
    ``run``: the file's :class:`~distfl.runfile.run.Run` when the caller has read it already.
    A file without an integrity record is marked UNVERIFIED on its first line (and said so
    on ``errors``). Text from the file is printed with its control characters escaped."""
    run = run if run is not None else read(path)
    cfg, file = run.config, run.stored
    world = world_line(file.world) if file.world else None
    w = stream.write
    if not run.verified and errors is not None:
        errors.write(unverified_warning(path))
    unverified = "" if run.verified else "; UNVERIFIED: it has no integrity record"
    w(
        f"run file   {printable(path)} (distfl {printable(run.version)}, created "
        f"{printable(run.created)}, world size {run.world_size}{unverified})\n"
    )
    if world:
        w(f"world      {world}\n")
    algorithm, dataset = printable(cfg.algorithm.name), printable(cfg.data.dataset)
    w(
        f"run        {algorithm} on {dataset}, {cfg.data.num_clients} clients in "
        f"{len(cfg.groups)} group(s), round {run.round} of {run.rounds}"
        + ("" if run.finished else " (incomplete: resume with distfl run --resume)")
        + "\n"
    )
    w("hierarchy\n")
    w(f"{run.tree}\n")
    s = run.summary()
    also = empty_leaves_note(s["clusters"], s["leaves"])
    w(
        f"final      {s['clusters']} cluster(s){also}; federation balanced accuracy "
        f"{score_text(s['accuracy'])}\n"
    )
    if s["accuracy_worst"] is not None:
        w(
            f"worst      client {score_text(s['accuracy_worst'])}, 10th percentile "
            f"{score_text(s['accuracy_p10'])} (balanced accuracy, the same evaluation)\n"
        )
    if s["newcomers"]:
        w(f"newcomers  {newcomers_line(s)}\n")
    w(f"WAS        {score_text(s['was'])}   (silhouette, sorted frequencies)\n")
    w(f"WADB       {score_text(s['wadb'])}   (Davies-Bouldin, the same vectors)\n")
    if took_part := participation_line(run.stored.tables.get("metrics", {})):
        w(f"clients    {took_part}\n")
    if cfg.eval.loss_target > 0:
        w(f"target     {target_line(run, s, cfg.eval.loss_target)}\n")
    if s["membership"] == "none":
        w("truth      no clusters to score (each client's model is its own)\n")
    elif s["groups"] > 1 or s["clusters"] > 1:
        ri, ari = score_text(s["rand"]), score_text(s["ari"])
        on = " (each client in its cluster of largest weight)" if s["membership"] != "hard" else ""
        w(f"truth      Rand index {ri}, ARI {ari} against the {s['groups']} recorded "
          f"groups{on}\n")  # fmt: skip


def target_line(run, s: dict, target: float) -> str:
    """When the run's mean test loss, and each cluster's, first reached ``target``."""
    from distfl.metrics.complexity import clusters_to_target
    from distfl.progress import duration

    head = f"test loss ≤ {target:g}: "
    if s["rounds_to_target"] is None:
        head += "never reached"
    else:
        sim = (
            "" if s["sim_s_to_target"] is None else f", simulated {duration(s['sim_s_to_target'])}"
        )
        head += (f"first at round {s['rounds_to_target']} ({s['bytes_to_target']:,} federation "
                 f"bytes{sim})")  # fmt: skip
    per = clusters_to_target(run.stored.tables.get("evaluation", {}), target)
    if len(per) > 1:
        head += "; per cluster " + ", ".join(
            f"{printable(c)} {'never' if r is None else f'round {r}'}" for c, r in per.items()
        )
    return head
