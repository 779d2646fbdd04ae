"""An algorithm's checkpoint as a run file holds it: the cluster tree in /hierarchy and the
algorithm's own state in /state/algorithm, written to HDF5 and read back."""

from __future__ import annotations

import io

import h5py

from distfl.runfile.reader import _read_tree, read_hierarchy
from distfl.runfile.writer import _write_tree, storable, write_hierarchy


def snapshot(algorithm) -> bytes:
    """What a run file stores of ``algorithm`` (its tree and its state), as HDF5 bytes."""
    buf = io.BytesIO()
    with h5py.File(buf, "w") as f:
        write_hierarchy(f.create_group("hierarchy"), algorithm.tree.to_nodes())
        _write_tree(f.create_group("state"), storable(algorithm.state_dict()))
    return buf.getvalue()


def restore(target, image: bytes) -> None:
    """Give ``target`` the tree, then the state, of a :func:`snapshot`."""
    with h5py.File(io.BytesIO(image), "r") as f:
        target.tree.restore(read_hierarchy(f["hierarchy"]))
        target.load_state_dict(_read_tree(f["state"]))


def restore_from(target, source) -> None:
    """Give ``target`` what a run file holds of ``source`` now."""
    restore(target, snapshot(source))


#: the settings the FedGWC unit tests are written for: the paper's plain algorithm (a split
#: test each round below ε = 1e-5, each test deciding alone, no Gaussian references, the
#: dense K×K P, eq. 1 at every local step, no observation floor, α the participation rate,
#: a client never moved after a split), not the tool's defaults (FedGWCParams)
FEDGWC_PAPER = {
    "epsilon": 1e-5, "patience": 1, "stable_tests": 1, "reference_draws": 0,
    "interaction": "dense", "reward": "steps", "min_observations": 0, "min_alpha": 0.0,
    "reassign": "none",
}  # fmt: skip


def paper_fedgwc(**kwargs):
    """FedGWC with :data:`FEDGWC_PAPER`'s settings, ``kwargs`` in place of any of them."""
    from distfl.algorithms.fedgwc import FedGWC

    return FedGWC(**{**FEDGWC_PAPER, **kwargs})
