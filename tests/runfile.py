"""Shared by the integration and Slurm tests: a FedGWC scenario that splits, and reading
and comparing run files bit for bit."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np

# FedGWC on 16 digits clients, 5 of them label-permuted: with seed 3 the root splits at
# round 19 and a child again at round 29, so a run of 40 rounds has state worth resuming.
# A scenario tuned on the sequential draw (FedGWC splits at rounds 19 and 29 with it):
# the resume and report tests rely on when it splits.
FEDGWC_TOML = """\
[run]
seed = 3
rounds = {rounds}
progress = "{progress}"
[data]
draw = "sequential"
num_clients = 16
samples_per_client = 40
groups = [{{count = 11, alpha = 1000.0}}, {{count = 5, alpha = 1000.0, permute_labels = true}}]
[train]
local_steps = 4
[server]
clients_per_round = 8
[algorithm]
name = "fedgwc"
epsilon = 0.001
patience = 2
stable_tests = 1
reference_draws = 0
min_observations = 0
[eval]
every = 5
"""


def docs_example() -> str:
    """The config example of the docs' configuration page (its first ```toml block), exactly
    as written there."""
    page = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"
    text = page.read_text(encoding="utf-8")
    start = text.index("```toml\n") + len("```toml\n")
    return text[start : text.index("```", start)]


def fedgwc_toml(rounds: int, progress: str = "lines") -> str:
    return FEDGWC_TOML.format(rounds=rounds, progress=progress)


def stored_round(path: Path) -> int:
    """The round a run file holds (``/state@round``), with one row of /metrics per round."""
    with h5py.File(path, "r") as f:
        assert len(f["metrics/round"]) == int(f["state"].attrs["round"])
        return int(f["state"].attrs["round"])


def read_run(path: Path, tops=("metrics", "hierarchy", "final", "clients", "state")) -> dict:
    """Every dataset and attribute under ``tops``, by path (``group/name@attr`` for attrs)."""
    out: dict[str, object] = {}
    with h5py.File(path, "r") as f:
        for top in tops:

            def keep(name, item, top=top):
                if isinstance(item, h5py.Dataset):
                    out[f"{top}/{name}"] = item[()]
                for key, value in item.attrs.items():
                    out[f"{top}/{name}@{key}"] = value

            f[top].visititems(keep)
    return out


def assert_same(a: dict, b: dict) -> None:
    """Equal keys; floats equal bit for bit (NaN where NaN), everything else equal."""
    assert sorted(a) == sorted(b)
    for key, x in a.items():
        y = b[key]
        if isinstance(x, np.ndarray) and x.dtype.kind == "f":
            assert np.array_equal(x.view(np.uint8), y.view(np.uint8)), key
        elif isinstance(x, np.ndarray):
            assert np.array_equal(x, y), key
        else:
            assert x == y, key


def assert_same_run(a: Path, b: Path, **kw) -> None:
    assert_same(read_run(a, **kw), read_run(b, **kw))


def kernel_fingerprint() -> str:
    """SHA-256 of a few local SGD steps of the digits MLP (64 -> 8 -> 10) for three clients
    on fixed data, by both trainers, with one torch thread as the stored runs used.

    torch picks its float32 kernels by CPU (AVX-512 or not, vendor): two machines whose
    fingerprints differ compute other last bits for the same run, so bits stored by one are
    not expected from the other."""
    import hashlib

    import torch

    from distfl.config import TrainSection
    from distfl.data import ClientData
    from distfl.models import build_model
    from distfl.train import SequentialTrainer
    from distfl.train.vectorised import VectorisedTrainer

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(0)
        model = build_model("mlp", (64,), 10, hidden=(8,))
        start = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        g = torch.Generator().manual_seed(1)
        datas = []
        for _ in range(3):
            x = torch.rand((40, 64), generator=g) * 16
            y = torch.randint(0, 10, (40,), generator=g)
            datas.append(ClientData(x[:30], y[:30], x[30:], y[30:]))
        cfg = TrainSection()
        new, losses = VectorisedTrainer(model, cfg, torch.device("cpu")).train_many(
            start, datas, [11, 12, 13]
        )
        one = SequentialTrainer(model, cfg, torch.device("cpu")).train(start, datas[0], seed=11)
    finally:
        torch.set_num_threads(threads)
    h = hashlib.sha256()
    for t in (new, torch.from_numpy(losses), one[0]):
        h.update(t.detach().cpu().numpy().tobytes())
    return h.hexdigest()


def format3_digest(config) -> str:
    """The config digest a run file of format 3 holds for ``config``: taken before the keys
    added since (train.optimizer, beta1, beta2, eps; run.data_seed, init_seed,
    sampling_seed; eval.coverage; [participation] and its keys of a group) existed, so
    computed without them, from every other key but those a resume may change and
    run.plugins."""
    import hashlib
    import json

    from distfl.runfile.checkpoint import RESUMABLE_CHANGES

    tables = {s: sec for s, sec in config.to_dict().items() if s != "participation"}
    group_keys = ("availability", "dropout", "speed_scale", "bandwidth_scale")
    tables["data"]["groups"] = [
        {k: v for k, v in g.items() if k not in group_keys} for g in tables["data"]["groups"]
    ]
    added = ("train.optimizer", "train.beta1", "train.beta2", "train.eps", "run.data_seed",
             "run.init_seed", "run.sampling_seed", "eval.coverage")  # fmt: skip
    keys = {f"{s}.{k}": v for s, sec in tables.items() for k, v in sec.items()}
    before = {
        k: v for k, v in keys.items()
        if k not in RESUMABLE_CHANGES and k != "run.plugins" and k not in added
    }  # fmt: skip
    return hashlib.sha256(json.dumps(before, sort_keys=True).encode()).hexdigest()
