"""The declarations of where each key takes effect (distfl/config/effects.py) hold in real
runs: every algorithm, and each setting that turns keys off, run once on a tiny federation
in this process with a config whose sections record which of their keys are read.

- A key no part of the run reads is declared without effect there (or is one of the few
  read outside a run, :data:`READ_ELSEWHERE`): a key added later and read only under some
  setting, undeclared, fails here.
- Every key declared without effect there, set to another value all at once (past the
  config's check, which refuses them), leaves the run file's results as they were, to the
  bit.
(The command line's lines: tests/integration/test_unused_key_lines.py.)"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
from typing import Any

import h5py
import numpy as np
import pytest
from keyeffects import another_value, contexts, entries, with_values

from distfl import config as C
from distfl.comm.env import LaunchInfo
from distfl.config.effects import unused_keys
from distfl.config.groups import GroupSpec
from distfl.launch import launch
from distfl.settings import Params

pytestmark = pytest.mark.integration

#: keys read outside a run, each with where
READ_ELSEWHERE = {
    "run.plugins": "imported by the config's build, before the run",
    "eval.loss_target": "read by inspect, gather, report and suite from the run file",
    "data.groups[].name": "the group's label, read by the report and Run.group_names",
}


class Reads:
    """The keys read of a config's tracked sections (``section.key``, a group's as
    ``data.groups[].key``); recording is paused while the config is copied or stored."""

    def __init__(self) -> None:
        self.keys: set[str] = set()
        self.on = True
        self._classes: dict[tuple[type, str], type] = {}

    def tracked(self, obj: Any, where: str) -> Any:
        """A copy of the dataclass ``obj`` (a section, a group, an own key's Params) whose
        fields' reads are recorded as ``where.<field>``."""
        cls = type(obj)
        sub = self._classes.get((cls, where))
        if sub is None:
            fields = {f.name for f in dataclasses.fields(cls)} - {"params", "groups"}
            reads = self

            def read(self, name, cls=cls, fields=fields, where=where):
                if reads.on and name in fields:
                    reads.keys.add(f"{where}.{name}")
                return cls.__getattribute__(self, name)

            sub = type(cls.__name__, (cls,), {"__getattribute__": read})
            self._classes[(cls, where)] = sub
        copy = object.__new__(sub)
        for f in dataclasses.fields(cls):
            value = object.__getattribute__(obj, f.name)
            if f.name == "params" and isinstance(value, Params):
                value = self.tracked(value, where)
            elif f.name == "groups":
                value = tuple(self.tracked(g, "data.groups[]") for g in value)
            object.__setattr__(copy, f.name, value)
        return copy

    def config(self, config: C.Config) -> C.Config:
        copy = object.__new__(C.Config)
        for f in dataclasses.fields(C.Config):
            object.__setattr__(copy, f.name, self.tracked(getattr(config, f.name), f.name))
        return copy

    def quiet(self, fn):
        def call(*args, **kwargs):
            was, self.on = self.on, False
            try:
                return fn(*args, **kwargs)
            finally:
                self.on = was

        return call


def every_key(config: C.Config) -> set[str]:
    """Every key of ``config``: the sections', their plug-ins' own and a group's."""
    out = set()
    for f in dataclasses.fields(config):
        section = getattr(config, f.name)
        out |= {f"{f.name}.{g.name}" for g in dataclasses.fields(section)} - {
            f"{f.name}.params", "data.groups"}  # fmt: skip
        if isinstance(section.params if hasattr(section, "params") else None, Params):
            out |= {f"{f.name}.{k}" for k in section.params.keys()}
    if config.data.groups:
        out |= {f"data.groups[].{f.name}" for f in dataclasses.fields(GroupSpec)}
    return out


def results(path) -> str:
    """SHA-256 of every dataset of the run file but its timings, its integrity record and
    its world (what the run computed, not how long it took or where)."""
    h = hashlib.sha256()
    with h5py.File(path, "r") as f:

        def add(name, obj):
            if isinstance(obj, h5py.Dataset) and not name.startswith(
                ("timing", "integrity", "world")
            ):
                value = obj[()]
                h.update(name.encode())
                h.update(repr(value.tolist()).encode() if obj.dtype.kind == "O"
                         else np.ascontiguousarray(value).tobytes())  # fmt: skip

        f.visititems(add)
    return h.hexdigest()


def run(config: C.Config, out) -> None:
    """``config`` run in this process as ``distfl.run`` runs it, unchecked."""
    config = dataclasses.replace(config, run=dataclasses.replace(config.run, out=str(out)))
    one = LaunchInfo(launcher="single", rank=0, world_size=1, local_rank=0)
    with contextlib.redirect_stderr(io.StringIO()):
        launch(config, info=one, force=True, stream=io.StringIO())


def declared_without_effect(config: C.Config) -> set[str]:
    """The keys ``config`` declares without effect, a group's as ``data.groups[].key`` where
    it is so in every group."""
    found = {u.key for u in unused_keys(config, every=True)}
    out = {k for k in found if not k.startswith("data.groups[")}
    for f in dataclasses.fields(GroupSpec):
        every = [f"data.groups[{i}].{f.name}" for i in range(len(config.data.groups))]
        if every and all(k in found for k in every):
            out.add(f"data.groups[].{f.name}")
    return out


@pytest.mark.parametrize(("name", "algorithm", "sets"), contexts(files=False),
                         ids=[c[0] for c in contexts(files=False)])  # fmt: skip
def test_what_a_run_reads_and_what_changes_it(tmp_path, monkeypatch, name, algorithm, sets):
    config = C.load(overrides=sets)
    reads = Reads()
    for owner, attr in ((C.Config, "to_dict"), (C.Config, "to_json"),
                        (dataclasses, "replace"), (dataclasses, "asdict")):  # fmt: skip
        monkeypatch.setattr(owner, attr, reads.quiet(getattr(owner, attr)))
    run(reads.config(config), tmp_path / "plain.h5")
    monkeypatch.undo()
    unread = every_key(config) - reads.keys - set(READ_ELSEWHERE)
    assert unread <= declared_without_effect(config), (
        f"read nowhere in this run, yet not declared without effect: "
        f"{sorted(unread - declared_without_effect(config))}"
    )
    by_key = entries(config)
    changes = {u.key: another_value(by_key[u.key]) if u.key in by_key else 5
               for u in unused_keys(config, every=True)}  # fmt: skip
    changed = with_values(config, changes)
    assert {u.key for u in unused_keys(changed)} == set(changes)  # each set, none read
    run(changed, tmp_path / "changed.h5")
    assert results(tmp_path / "changed.h5") == results(tmp_path / "plain.h5"), sorted(changes)
