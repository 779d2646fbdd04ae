"""Shared by the integration and Slurm tests: a FedGWC scenario that splits, reading and
comparing run files bit for bit, and changing a run file and sealing it anew as someone who
knows distfl's code can (a checksum is no signature)."""

from __future__ import annotations

import shutil
from pathlib import Path
from unittest import mock

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
            assert np.array_equal(x.view(np.uint8), y.view(np.uint8)), (key, x, y)
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
    sampling_seed; eval.coverage; data.held_out; [participation] and its keys of a group;
    [privacy]) existed, so
    computed without them, from every other key but those a resume may change and
    run.plugins."""
    import hashlib
    import json

    from distfl.runfile.digest import RESUMABLE_CHANGES

    tables = {s: sec for s, sec in config.to_dict().items()
              if s not in ("participation", "privacy")}  # fmt: skip
    group_keys = ("availability", "dropout", "speed_scale", "bandwidth_scale")
    tables["data"]["groups"] = [
        {k: v for k, v in g.items() if k not in group_keys} for g in tables["data"]["groups"]
    ]
    added = ("train.optimizer", "train.beta1", "train.beta2", "train.eps", "run.data_seed",
             "run.init_seed", "run.sampling_seed", "eval.coverage", "data.held_out",
             "train.batches")  # fmt: skip
    keys = {f"{s}.{k}": v for s, sec in tables.items() for k, v in sec.items()}
    before = {
        k: v for k, v in keys.items()
        if k not in RESUMABLE_CHANGES and k != "run.plugins" and k not in added
    }  # fmt: skip
    return hashlib.sha256(json.dumps(before, sort_keys=True).encode()).hexdigest()


# -- a run file changed and sealed anew -----------------------------------------------------


def seal_anew(f: h5py.File) -> None:
    """The integrity record of ``f`` written anew (:func:`distfl.runfile.integrity.seal`),
    with a made-up digest for a dataset that claims more than its bytes on disk hold
    (hashing it would read all it claims)."""
    from distfl.runfile import integrity

    if integrity.GROUP in f:
        del f[integrity.GROUP]
    real = integrity._dataset_digest

    def digest(ds: h5py.Dataset) -> str:
        claimed, held = ds.size * ds.dtype.itemsize, ds.id.get_storage_size()
        return "0" * 64 if claimed > max(integrity.LZF_RATIO * held, 1 << 20) else real(ds)

    with mock.patch.object(integrity, "_dataset_digest", digest):
        integrity.seal(f)


def resealed(change, *, digest: bool = False):
    """``change``, then the integrity record written anew; ``digest``: also the digest of
    the (changed) stored config in /state, as someone who knows distfl's code would."""
    from distfl.config import from_json
    from distfl.runfile.digest import config_digest

    def tamper(f: h5py.File) -> None:
        change(f)
        if digest:
            config = from_json(f.attrs["config"])
            f["state"].attrs["config_sha256"] = config_digest(config)
        seal_anew(f)

    tamper.__name__ = change.__name__
    return tamper


def tampered(written: Path, tmp_path: Path, tamper) -> Path:
    """A copy of ``written`` as ``tmp_path/run.h5``, changed by ``tamper`` (and the file
    untouched beside it as ``good.h5``, for ``compare``)."""
    path = tmp_path / "run.h5"
    shutil.copy(written, path)
    shutil.copy(written, tmp_path / "good.h5")
    with h5py.File(path, "r+") as f:
        tamper(f)
    return path


#: every command that reads a run file, with its arguments for a file and a folder
READERS = {
    "status": lambda f, d, rounds: ["status", f],
    "inspect": lambda f, d, rounds: ["inspect", f],
    "report": lambda f, d, rounds: ["report", f, "--out", d / "report"],
    "gather": lambda f, d, rounds: ["gather", f],
    "compare": lambda f, d, rounds: ["compare", f, d / "good.h5"],
    "resume": lambda f, d, rounds: ["run", "--resume", f, "--set", f"run.rounds={rounds + 1}"],
}


def refused_by_every_reader(helpers, path: Path, needle: str, *, rounds: int) -> None:
    """Every reader of :data:`READERS` (in this process: ``helpers.cli``) and
    ``distfl.open`` refuse the run file ``path`` of ``rounds`` rounds (``good.h5`` beside
    it, for ``compare``) with one line (exit code 2) holding ``needle`` and its name, no
    escape character printed, nothing written (``gather`` skips the file: 1 or 2)."""
    import re

    import pytest
    from cliproc import assert_one_line_error
    from timing import limit

    import distfl
    from distfl.errors import CheckpointError

    folder = path.parent
    before = path.read_bytes()
    for reader, args in READERS.items():
        proc = helpers.cli(folder, *args(path, folder, rounds), timeout=limit(30))
        assert "\x1b" not in proc.stderr + proc.stdout, (reader, proc.stderr)
        if reader == "gather":  # gather skips what it cannot read, says why, exits 1 or 2
            assert proc.returncode in (1, 2) and needle in proc.stderr, (reader, proc.stderr)
            continue
        line = assert_one_line_error(proc, needle)
        assert path.name in line, (reader, line)
    assert path.read_bytes() == before  # nothing rewrote it
    assert not (folder / "report").exists() or not any((folder / "report").iterdir())
    with pytest.raises(CheckpointError, match=re.escape(needle)):
        distfl.open(path)
