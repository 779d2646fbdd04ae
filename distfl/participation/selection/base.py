"""What a selection strategy is (:class:`SelectionStrategy`) and how one registers
(:func:`register`).

A strategy is made once per run, on the server, with the run's
:class:`~distfl.participation.model.Participation` (which clients are available this round,
their resources and the times these give, the uniform draw among the available ones) and
the config. Each round the participation asks it to :meth:`~SelectionStrategy.choose` the
clients of each draw an algorithm makes (:meth:`ClusteringAlgorithm.sample_clients
<distfl.algorithms.api.base.ClusteringAlgorithm.sample_clients>`), tells it the clients of the
plan it admitted (:meth:`~SelectionStrategy.selected`), and after training gives it a say
over the clusters' models (:meth:`~SelectionStrategy.after_training`). Whatever it keeps
between rounds is its :meth:`~SelectionStrategy.state_dict`: the run file's
/state/selection where :attr:`~SelectionStrategy.keeps_state`, and the copy of the last
completed round every round. Its draws use only the generator it is given and what it
keeps, so that every world size and a resumed run choose the same clients.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import numpy as np

from distfl.plugins import SELECTIONS

if TYPE_CHECKING:
    from distfl.config import Config
    from distfl.participation.model import Participation


class SelectionStrategy:
    """One selection strategy; a subclass sets :attr:`name` and overrides :meth:`choose`
    and, where it has one, the say after training and its state."""

    #: the value of ``participation.selection`` that names it
    name: ClassVar[str] = ""
    #: whether it chooses the clients of a draw (False: the algorithm's draw, or the
    #: uniform one, as it is); a plan that trains a client it did not choose this round is
    #: refused (an algorithm that draws its cohort without sample_clients)
    chooses: ClassVar[bool] = True
    #: whether :meth:`after_training` reads the trained clients' models (they come back to
    #: the server from every client the round kept) and the clusters' models at the start
    reads_models: ClassVar[bool] = False
    #: whether its :meth:`state_dict` is written to the run file (/state/selection)
    keeps_state: ClassVar[bool] = False

    def __init__(self, participation: Participation, config: Config) -> None:
        self.participation = participation
        self.section = config.participation

    @classmethod
    def check(cls, config: Config) -> None:
        """Refuse (ConfigError, one line) a config the strategy cannot act on."""

    def choose(self, rng: np.random.Generator, pool, size: int, *, own=None, priority=None,
               trainings: int = 1) -> np.ndarray:  # fmt: skip
        """``size`` distinct clients of ``pool`` (an int K: clients 0..K-1, or an array of
        client ids), fewer when fewer can be chosen, in the order chosen (int64). ``own``:
        the algorithm's own draw where it is not the uniform one (a callable giving client
        ids, :func:`own_draw` checks them); ``priority``: its weight of each client (a
        callable of an id array); ``trainings``: the models each client trains."""
        raise NotImplementedError

    def selected(self, plan) -> None:
        """The plan of the round, as the algorithm made it from the draws (before
        availability, dropouts and the deadline take their share)."""

    def after_training(self, plan, reports, starts: dict[str, np.ndarray]) -> tuple[dict, int]:
        """Its say after the round's training: the clusters' models it replaces (cluster id
        to a float32 model) and how many reports it left out of them. ``starts``: each
        trained cluster's model at the round's start (given where :attr:`reads_models`)."""
        return {}, 0

    def state_dict(self) -> dict:
        """What it keeps between rounds (JSON-like values and numpy arrays), or {}."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Put back what :meth:`state_dict` returned."""


def own_draw(chosen, pool) -> np.ndarray:
    """An algorithm's own draw (int64), checked: distinct client ids of ``pool`` (ValueError
    otherwise: the round fails, naming it)."""
    ids = np.asarray(chosen)
    if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
        raise ValueError(f"an algorithm's own draw must be a vector of client ids, not an "
                         f"array of {ids.dtype} of shape {ids.shape}")  # fmt: skip
    ids = ids.astype(np.int64)
    if isinstance(pool, (int, np.integer)):
        inside = (ids >= 0) & (ids < int(pool))
    else:
        inside = np.isin(ids, np.asarray(pool))
    if not inside.all() or len(np.unique(ids)) != len(ids):
        raise ValueError(f"an algorithm's own draw must be distinct clients of the pool it "
                         f"draws from: {ids[:5].tolist()}...")  # fmt: skip
    return ids


def register(cls: type[SelectionStrategy]) -> type[SelectionStrategy]:
    """Class decorator: make ``cls`` available as ``participation.selection = cls.name``."""
    SELECTIONS.check_class(cls, SelectionStrategy)
    if cls.choose is SelectionStrategy.choose:
        raise TypeError(f"{cls.__name__} does not define choose()")
    return SELECTIONS.add(cls)


__all__ = ["SelectionStrategy", "own_draw", "register"]
