"""A run file of format 3 holds the digest of its config taken with the keys of its day: every
key added since must be left out of the digest at the value that computes what such a file's
run did (distfl.runfile.digest.ADDED_KEYS), or every file written before it would be refused
as a config changed after its run. A key of the schema that is neither one of format 3's
keys nor an added one fails here."""

from __future__ import annotations

import dataclasses

from distfl import config as C
from distfl.runfile.digest import ADDED_KEYS, config_digest

#: the keys of the sections (their own keys: an algorithm's, a dataset's, a model's, aside)
#: when format 3's digest was first written
FORMAT3_KEYS = frozenset({
    "algorithm.name", "checkpoint.every", "checkpoint.seconds", "comm.backend", "comm.sums",
    "comm.timeout_s", "data.cache_mb", "data.dataset", "data.draw", "data.groups",
    "data.num_clients", "data.partition", "data.quantity_skew", "data.root",
    "data.samples_per_client", "data.test_fraction", "eval.clients", "eval.every",
    "eval.weighted", "model.name", "run.device", "run.export", "run.out", "run.plugins",
    "run.progress", "run.rounds", "run.seed", "run.threads", "server.aggregator",
    "server.clients_per_round", "server.lr", "server.momentum", "server.placement",
    "train.batch_size", "train.chunk_mb", "train.local_steps", "train.loss", "train.lr",
    "train.momentum", "train.prox_mu", "train.trainer", "train.weight_decay",
})  # fmt: skip


def test_every_key_since_format_3_is_left_out_of_the_digest_at_its_default():
    config = C.load(preset="digits")
    sections = {f.name for f in dataclasses.fields(config)}
    keys = set()
    for section in sections - {"algorithm", "model"}:
        keys |= {f"{section}.{k}" for k in dataclasses.asdict(getattr(config, section))}
    new = keys - FORMAT3_KEYS - {"data.params"}  # (the dataset's own keys)
    assert new <= set(ADDED_KEYS), f"keys added without a former value: {new - set(ADDED_KEYS)}"
    for key in new:
        section, name = key.split(".")
        assert ADDED_KEYS[key] == getattr(getattr(config, section), name), key


def test_privacy_at_its_defaults_leaves_the_digest_and_set_enters_it():
    plain = C.load(preset="digits")
    clipped = C.load(preset="digits", overrides=["privacy.clip=1.0"])
    assert config_digest(plain) != config_digest(clipped)
