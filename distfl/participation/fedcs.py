"""FedCS client selection (Nishio and Yonetani, "Client Selection for Federated Learning with
Heterogeneous Resources in Mobile Edge", ICC 2019, arXiv 1804.08333): the paper's Algorithm 2,
the greedy choice of as many of the requested clients as can distribute, update and upload
before the round's deadline, and the duration of the round it schedules.

The server sends the model to all the selected clients S at once, which takes
``T^d_S = model_bytes / min_{k in S} download_rate_k`` (0 for S empty); each client then
updates (trains) for ``t^UD_k`` and uploads for ``t^UL_k``, one upload at a time, in the order
of selection. Θ is the elapsed time of the updates and uploads scheduled so far: the next
client x starts its upload when both the uploads before it and its own update are done, so
``Θ' = Θ + t^UL_x + max(0, t^UD_x - Θ)``. Algorithm 2, as the paper states it::

    S ← {}, Θ ← 0
    while |K'| > 0:
        x ← argmax_{k in K'} 1 / (T^d_{S∪{k}} - T^d_S + t^UL_k + max(0, t^UD_k - Θ))
        remove x from K'
        Θ' ← Θ + t^UL_x + max(0, t^UD_x - Θ)
        t ← T_cs + T^d_{S∪{x}} + Θ' + T_agg
        if t < T_round: Θ ← Θ'; add x to S
    return S

numpy only: this runs on the server.
"""

from __future__ import annotations

import numpy as np

__all__ = ["fedcs_select", "fedcs_round_s"]


def _resources(update_s, upload_s, download_rate) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The three per-candidate arrays as float64 vectors of one length, checked: times
    finite and at least 0, rates above 0 (``inf``, an instant download, is allowed)."""
    update = np.asarray(update_s, dtype=np.float64)
    upload = np.asarray(upload_s, dtype=np.float64)
    rate = np.asarray(download_rate, dtype=np.float64)
    if update.ndim != 1 or upload.shape != update.shape or rate.shape != update.shape:
        raise ValueError(
            "update_s, upload_s and download_rate must be vectors of one length, got shapes "
            f"{update.shape}, {upload.shape} and {rate.shape}"
        )
    for name, times in (("update_s", update), ("upload_s", upload)):
        if not np.all(np.isfinite(times) & (times >= 0.0)):
            raise ValueError(f"{name} must be finite and at least 0")
    if not np.all(rate > 0.0):  # NaN fails too
        raise ValueError("download_rate must be above 0")
    return update, upload, rate


def _check_scalars(model_bytes: float, t_cs: float, t_agg: float) -> None:
    for name, value in (("model_bytes", model_bytes), ("t_cs", t_cs), ("t_agg", t_agg)):
        if not (np.isfinite(value) and value >= 0.0):
            raise ValueError(f"{name} must be finite and at least 0, got {value}")


def fedcs_select(
    update_s,
    upload_s,
    download_rate,
    *,
    model_bytes: float,
    round_s: float,
    t_cs: float = 0.0,
    t_agg: float = 0.0,
) -> np.ndarray:
    """FedCS's Algorithm 2 over the requested candidates: the positions (int64) into the
    candidate arrays of the clients selected, in the order they were added.

    ``update_s`` (t^UD, the local training time), ``upload_s`` (t^UL) and ``download_rate``
    (bytes per second) are one entry a candidate; ``model_bytes`` the size of the model sent;
    ``round_s`` the deadline T_round; ``t_cs`` and ``t_agg`` the times of the selection and of
    the aggregation. A client is added when the round would end strictly before the
    deadline with it (``t < T_round``).

    The argmax is taken over the scores ``1 / denominator`` as the paper writes them, its
    ties to the lowest position; a denominator of 0 (a client that adds no time at all) is a
    score of +inf, so such clients come first, the lowest position first. Every candidate is
    examined once, as in the pseudocode (in exact arithmetic ``t`` is ``T_cs + T^d_S + Θ +
    denominator + T_agg``, so the first client refused ends the additions, but the loop is
    kept as written). O(n²) in the candidates, the inner argmax vectorised.
    """
    update, upload, rate = _resources(update_s, upload_s, download_rate)
    _check_scalars(model_bytes, t_cs, t_agg)
    if np.isnan(round_s):
        raise ValueError("round_s must be a number")
    model_bytes = float(model_bytes)
    remaining = np.arange(update.shape[0], dtype=np.int64)  # ascending: argmax ties go low
    selected: list[int] = []
    theta = 0.0
    min_rate = np.inf  # min download rate over S; T^d_S = model_bytes / min_rate
    td_s = 0.0  # T^d_S, 0 for S empty
    while remaining.size:
        td_with = model_bytes / np.minimum(min_rate, rate[remaining])  # T^d_{S∪{k}}
        denom = td_with - td_s + upload[remaining] + np.maximum(0.0, update[remaining] - theta)
        score = np.full(remaining.shape, np.inf)
        np.divide(1.0, denom, out=score, where=denom != 0.0)
        i = int(np.argmax(score))
        x = int(remaining[i])
        remaining = np.delete(remaining, i)
        theta_next = theta + upload[x] + max(0.0, update[x] - theta)
        td_x = float(td_with[i])
        if t_cs + td_x + theta_next + t_agg < round_s:
            theta = theta_next
            min_rate = min(min_rate, float(rate[x]))
            td_s = td_x
            selected.append(x)
    return np.asarray(selected, dtype=np.int64)


def fedcs_round_s(
    selected_positions,
    update_s,
    upload_s,
    download_rate,
    *,
    model_bytes: float,
    t_cs: float = 0.0,
    t_agg: float = 0.0,
) -> float:
    """The duration of a round that selected ``selected_positions`` (positions into the
    candidate arrays, in the order of selection: the order of the uploads), for the virtual
    clock: ``T_cs + T^d_S + Θ + T_agg`` with Θ built as Algorithm 2 builds it. For the
    selection :func:`fedcs_select` returned, this is the ``t`` of its last addition (the same
    arithmetic), so it is below the deadline; for no selection it is ``T_cs + T_agg``."""
    update, upload, rate = _resources(update_s, upload_s, download_rate)
    _check_scalars(model_bytes, t_cs, t_agg)
    positions = np.asarray(selected_positions)
    if positions.ndim != 1 or (positions.size and positions.dtype.kind not in "iu"):
        raise ValueError("selected_positions must be a vector of integer positions")
    positions = positions.astype(np.int64)
    if positions.size and (positions.min() < 0 or positions.max() >= update.shape[0]):
        raise ValueError(f"selected_positions must be in [0, {update.shape[0]})")
    if np.unique(positions).size != positions.size:
        raise ValueError("selected_positions must not repeat a position")
    theta = 0.0
    min_rate = np.inf
    for x in positions.tolist():
        theta = theta + upload[x] + max(0.0, update[x] - theta)
        min_rate = min(min_rate, float(rate[x]))
    td_s = float(model_bytes) / min_rate if positions.size else 0.0
    return float(t_cs + td_s + theta + t_agg)
