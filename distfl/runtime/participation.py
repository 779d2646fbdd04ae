"""What [participation] is refused for before any work, on rank 0: a selection strategy that
cannot choose the algorithm's cohorts, a malformed or missing trace file (one line naming
the key, the file and the line) and a deadline that no client could meet. Every other rank
refuses alike (the run's start agreement)."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from distfl.algorithms import ClientReports
from distfl.errors import ConfigError
from distfl.participation.model import fastest_client_s
from distfl.participation.traces import nothing, read_profiles, read_windows
from distfl.plugins import ALGORITHMS, SELECTIONS


def _fewest_samples_a_step(config) -> int:
    """The fewest samples a local step of a client can take: min(B, train samples) of a
    client of the smallest group when no quantity skew spreads them, else 1."""
    data = config.data
    if data.quantity_skew:
        return 1
    sizes = []
    for g in config.groups:
        n = g.samples_per_client or data.samples_per_client
        frac = g.test_fraction or data.test_fraction
        sizes.append(n - round(n * frac))
    return max(1, min(config.train.batch_size, min(sizes)))


def check_selection(config) -> None:
    """Refuse (ConfigError) a selection strategy that cannot choose the algorithm's
    cohorts, as the algorithm declares it (:meth:`ClusteringAlgorithm.selection_refusal
    <distfl.algorithms.api.base.ClusteringAlgorithm.selection_refusal>`), naming the
    strategies it takes. A run, not a config: a file written before the refusal existed
    is read as it is (and refused a resume)."""
    selection = config.participation.selection
    name = config.algorithm.name
    if selection == "uniform" or name not in ALGORITHMS.names():
        return  # (an algorithm not registered is refused with the run's other checks)
    cls = ALGORITHMS.get(name)
    why = cls.selection_refusal(selection)
    if why:
        taken = [
            s for s in SELECTIONS.first_then_by_name("uniform") if not cls.selection_refusal(s)
        ]
        raise ConfigError(
            f"participation.selection = {selection!r} cannot choose the clients of "
            f"algorithm.name = {name!r}: {why}; it takes {', '.join(taken)}"
        )


def check_participation(config) -> None:
    """Refuse (ConfigError, exit 2) a selection strategy that cannot act
    (:func:`check_selection`), trace files that do not read and a deadline below the time
    the fastest client the resources allow would need."""
    check_selection(config)
    p = config.participation
    if p.availability == "trace":
        read_windows("participation.trace", p.trace, keep=nothing)
    if p.resources == "trace":
        read_profiles("participation.resource_trace", p.resource_trace, keep=nothing)
    if not p.deadline:
        return
    from distfl.runtime.model_size import config_parameters

    try:
        params = config_parameters(config)
    except ConfigError:
        return  # a model or dataset of a plug-in not imported: its size is not known here
    fastest = fastest_client_s(config, params, _fewest_samples_a_step(config))
    if p.deadline < fastest:
        raise ConfigError(
            f"participation.deadline = {p.deadline!r} s: no client can meet it; the fastest "
            f"the resources allow needs {fastest:.4g} s for its download, "
            f"{config.train.local_steps} local steps and upload of {params:,} parameters"
        )


def admitted_training(server, plan, may_give_up: bool, took_part):
    """The training of a plan the participation admitted (:meth:`ClientSteps.train
    <distfl.runtime.client_steps.ClientSteps.train>`; reports of no client when it holds
    none), then the selection's say (FedPNS: the clusters' models it replaces, the reports it left
    out, counted in ``took_part``) and the clients trained so far (``eval.coverage``).
    (None, ...) when a stop signal gave the training up."""
    if not plan.train:
        now = {c: m.numpy() for c, m in server.state.models.items()}
        return ClientReports.none(now, server.local_steps), took_part
    reads = server.participation.selection.reads_models
    starts = {c: server.state.models[c].numpy().copy() for c in plan.clusters()} if reads else {}
    reports = server.clients.train(plan, may_give_up)
    if reports is None:
        return None, took_part
    chosen, rejected = server.participation.after_training(plan, reports, starts)
    for cid, flat in chosen.items():
        server.state.models[cid] = torch.from_numpy(flat)
        reports.cluster_models[cid] = flat
    if server.config.eval.coverage:
        server.state.trained_ids = np.union1d(server.state.trained_ids, reports.clients)
    return reports, dataclasses.replace(took_part, rejected=rejected)


__all__ = ["admitted_training", "check_participation", "check_selection"]
