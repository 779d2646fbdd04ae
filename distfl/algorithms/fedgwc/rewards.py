"""FedGWC's Gaussian weighting of the clients' losses (eq. 2) and the update of the
interaction matrix P with the round's rewards (eq. 3)."""

from __future__ import annotations

import numpy as np

# -- pure functions --------------------------------------------------------------------


def gaussian_rewards(losses: np.ndarray) -> np.ndarray:
    """Rewards ω_k of the n clients sampled in one cluster and round (eq. 1).

    ``losses`` is [n, S]. For each step s, m_s and σ_s² are the mean and the unbiased
    variance of the n losses; r_k^s = exp(-(l_k^s - m_s)² / (2 σ_s²)), 1 where σ_s² = 0
    (and where n < 2, when no variance is defined); ω_k = mean over s of r_k^s."""
    losses = np.asarray(losses, dtype=np.float64)
    if losses.ndim != 2:
        raise ValueError(f"losses must be [n, S], not shape {losses.shape}")
    n = losses.shape[0]
    if n < 2:
        return np.ones(n)
    mean = losses.mean(axis=0)
    var = losses.var(axis=0, ddof=1)
    dev2 = (losses - mean) ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(var > 0, np.exp(-dev2 / (2.0 * np.where(var > 0, var, 1.0))), 1.0)
    return r.mean(axis=1)


def round_rewards(losses: np.ndarray) -> np.ndarray:
    """Rewards of eq. 1 on each client's loss averaged over the round's S steps: one
    Gaussian reward per client and round (``reward = "round"``). The mean over steps takes
    the minibatch noise out of each step's loss before the reward, where eq. 1 per step
    lets it dominate a client seen only a few times."""
    losses = np.asarray(losses, dtype=np.float64)
    if losses.ndim != 2:
        raise ValueError(f"losses must be [n, S], not shape {losses.shape}")
    return gaussian_rewards(losses.mean(axis=1, keepdims=True))


def update_interaction(
    P: np.ndarray, sampled: np.ndarray, rewards: np.ndarray, alpha: float
) -> np.ndarray:
    """Eq. 3: P[k, j] ← (1-α) P[k, j] + α ω_k for every k, j in ``sampled``; a new array.

    ``sampled`` indexes rows/columns of P (positions within the cluster)."""
    out = np.array(P, dtype=np.float64, copy=True)
    idx = np.asarray(sampled, dtype=np.int64)
    w = np.asarray(rewards, dtype=np.float64)
    block = np.ix_(idx, idx)
    out[block] = (1.0 - alpha) * out[block] + alpha * w[:, None]
    return out


#: Up to this many entries of P the MSE of eq. 3's change is the mean over a K×K array of
#: the change (the bits every run of this size has had); above, the block's squared change
#: over |C|², with no K×K temporaries each round (the same value up to rounding).
FULL_MSE_MAX = 2048 * 2048


def interaction_mse(change: np.ndarray, block, shape: tuple[int, int]) -> float:
    """Mean over all of P of the squared change of eq. 3, where only ``block`` (np.ix_
    positions) changed, by ``change``."""
    size = shape[0] * shape[1]
    if size <= FULL_MSE_MAX:
        diff = np.zeros(shape, dtype=np.float64)
        diff[block] = change
        return float(np.mean(np.square(diff, out=diff)))
    return float(np.sum(np.square(change)) / size)
