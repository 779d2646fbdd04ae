"""A plug-in is checked before round 1, each failure one line naming it, exit code 2 and
no run file: the worked examples of docs/adding-a-dataset.md (``blobs.py``) and
docs/adding-a-model.md (``resnet.py``) changed, one defect at a time, print the lines the
pages show (a file that calls ``sys.exit(0)`` as it is imported ran to exit code 0 with no
file; a loader that gives labels shorter than its features, samples of another shape, an
object array, float or out-of-range labels, another class count or three samples, and a
model whose logits are twice as wide or detached, ran to exit code 0 or stopped with a
misleading line; ``load()`` returning None and ``build()`` raising, returning None or a
module without parameters gave a traceback). A plug-in's ``sys.exit`` in ``load()`` or
``build()``, a ``KeyboardInterrupt`` or an exception whose message cannot be read as it is
imported, are one line too; the check of the logits leaves the run's bits as they were."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cliproc import assert_one_line_error

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DATASET_PAGE = ROOT / "docs" / "adding-a-dataset.md"
MODEL_PAGE = ROOT / "docs" / "adding-a-model.md"
SHOWN_AS = "/home/me"


def fenced(page: Path, kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.S)


def shown_lines(page: Path) -> list[str]:
    """The lines of the page's last block of output."""
    return fenced(page, "text")[-1].strip("\n").splitlines()


#: the return of the page's blobs.py, and what each case makes of the file, in the order
#: the page shows the lines
BLOBS_RETURN = "        return Dataset(name=cls.name, x=x.astype(np.float32), y=y, num_classes=3)\n"
DATASET_CASES = {
    "exits as it is imported": ("import numpy as np\n", "import sys\nsys.exit(0)\nimport numpy\n"),
    "returns None": (BLOBS_RETURN, "        return None\n"),
    "fewer labels": ("y=y, num_classes=3", "y=y[:500], num_classes=3"),
    "another shape": ("x=x.astype(np.float32)", "x=x[:, :1].astype(np.float32)"),
    "object features": ("x=x.astype(np.float32)", "x=x.astype(object)"),
    "float labels": ("y=y, num_classes=3", "y=y.astype(np.float32), num_classes=3"),
    "labels out of range": ("y=y, num_classes=3", "y=y + 1, num_classes=3"),
    "another class count": ("y=y, num_classes=3", "y=y, num_classes=4"),
    "a NaN": ("x=x.astype(np.float32)",
              "x=np.where(np.arange(600)[:, None] == 7, np.nan, x).astype(np.float32)"),
    "three samples": ("x=x.astype(np.float32), y=y,", "x=x[:3].astype(np.float32), y=y[:3],"),
}  # fmt: skip

MODEL_FORWARD = "        return self.head(self.stages(self.stem(x)).mean(dim=(2, 3)))\n"
MODEL_BUILD = "        return ResNet(input_shape[0], num_classes, params)\n"
MODEL_CASES = {
    "logits twice as wide": (MODEL_FORWARD, MODEL_FORWARD.replace("\n", ".repeat(1, 2)\n")),
    "detached logits": (MODEL_FORWARD, MODEL_FORWARD.replace("\n", ".detach()\n")),
    "build raises": (MODEL_BUILD, '        raise RuntimeError("no memory left")\n'),
    "build returns None": (MODEL_BUILD, "        return None\n"),
    "no parameters": (MODEL_BUILD, "        return nn.Identity()\n"),
}


def changed(code: str, old: str, new: str) -> str:
    assert code.count(old) == 1, old
    return code.replace(old, new)


def refused(helpers, tmp: Path, files: dict[str, str], *args: str) -> str:
    """``distfl run ARGS`` in this process from ``tmp`` holding ``files``: its one line
    (exit code 2, no run file), with ``tmp`` as the page shows it."""
    for name, text in files.items():
        (tmp / name).write_text(text)
    with helpers.plugins_forgotten():
        proc = helpers.cli(tmp, "run", *args, "--out", "run.h5")
    line = assert_one_line_error(proc)
    assert not (tmp / "run.h5").exists()
    return line.replace(str(tmp.resolve()), SHOWN_AS).replace(str(tmp), SHOWN_AS)


@pytest.mark.parametrize("case", list(DATASET_CASES))
def test_a_broken_dataset_plugin_is_one_line_before_round_1(case, tmp_path, helpers):
    (blobs,), (toml,) = fenced(DATASET_PAGE, "python"), fenced(DATASET_PAGE, "toml")
    line = refused(helpers, tmp_path, {"blobs.py": changed(blobs, *DATASET_CASES[case]),
                                       "blobs.toml": toml}, "--config", "blobs.toml")  # fmt: skip
    assert line == shown_lines(DATASET_PAGE)[list(DATASET_CASES).index(case)]


@pytest.mark.parametrize("case", list(MODEL_CASES))
def test_a_broken_model_plugin_is_one_line_before_round_1(case, tmp_path, helpers):
    (resnet, stripes), (toml,) = fenced(MODEL_PAGE, "python"), fenced(MODEL_PAGE, "toml")
    files = {"resnet.py": changed(resnet, *MODEL_CASES[case]), "stripes.py": stripes,
             "resnet.toml": toml}  # fmt: skip
    line = refused(helpers, tmp_path, files, "--config", "resnet.toml")
    assert line == shown_lines(MODEL_PAGE)[list(MODEL_CASES).index(case)]


def test_the_pages_show_a_line_for_each_case():
    assert len(shown_lines(DATASET_PAGE)) == len(DATASET_CASES)
    assert len(shown_lines(MODEL_PAGE)) == len(MODEL_CASES)


QUICK = ("--preset", "digits", "--set", "run.rounds=1", "--set", "data.num_clients=4",
         "--set", "server.clients_per_round=2", "--set", "data.samples_per_client=20")  # fmt: skip


@pytest.mark.parametrize(
    ("code", "status", "line"),
    [
        ("import sys\nsys.exit(3)\n", 2,
         "distfl: error: run.plugins: 'odd.py' cannot be imported (SystemExit: sys.exit(3))"),
        ("import sys\nsys.exit('bye\\nnow')\n", 2, "distfl: error: run.plugins: 'odd.py' cannot "
         "be imported (SystemExit: sys.exit('bye\\nnow'))"),
        ("class Odd(BaseException):\n    pass\nraise Odd('odd')\n", 2,
         "distfl: error: run.plugins: 'odd.py' cannot be imported (Odd: odd)"),
        ("class Mute(Exception):\n    def __str__(self):\n        raise ValueError\nraise Mute\n",
         2, "distfl: error: run.plugins: 'odd.py' cannot be imported (Mute)"),
        ("raise KeyboardInterrupt\n", 130,
         "distfl: interrupted while run.plugins imported 'odd.py'; nothing was run"),
    ],
    ids=["exit 3", "exit with a message", "a BaseException", "a message that raises", "Ctrl-C"],
)  # fmt: skip
def test_whatever_a_plugin_raises_as_it_is_imported_is_one_line(code, status, line, tmp_path,
                                                                helpers):  # fmt: skip
    (tmp_path / "odd.py").write_text(code)
    with helpers.plugins_forgotten():
        proc = helpers.cli(tmp_path, "run", *QUICK, "--set", 'run.plugins=["odd.py"]',
                           "--out", "run.h5")  # fmt: skip
    assert (proc.returncode, proc.stderr) == (status, line + "\n")
    assert not (tmp_path / "run.h5").exists()


EXITING = """
import sys

from torch import nn

from distfl.datasets import DatasetSpec, register
from distfl.model_specs import ModelSpec, register as register_model


@register
class Leaving(DatasetSpec):
    name = "leaving"
    num_classes = 2
    sample_shape = (2,)

    @classmethod
    def load(cls, config):
        sys.exit(0)


@register_model
class Gone(ModelSpec):
    name = "gone"

    @classmethod
    def accepts(cls, input_shape, num_classes, params):
        return ""

    @classmethod
    def build(cls, input_shape, num_classes, params):
        sys.exit(0)
"""


@pytest.mark.parametrize(
    ("key", "line"),
    [
        ('data.dataset="leaving"', "data.dataset = 'leaving' ({}): load() raised SystemExit: "
         "sys.exit(0)"),
        ('model.name="gone"', "model.name = 'gone' ({}): build() raised SystemExit: sys.exit(0)"),
    ],
    ids=["load", "build"],
)  # fmt: skip
def test_a_plugins_exit_before_round_1_is_one_line(key, line, tmp_path, helpers):
    (tmp_path / "leaving.py").write_text(EXITING)
    with helpers.plugins_forgotten():
        proc = helpers.cli(tmp_path, "run", *QUICK, "--set", 'run.plugins=["leaving.py"]',
                           "--set", key, "--out", "run.h5")  # fmt: skip
    assert_one_line_error(proc, line.format(tmp_path / "leaving.py"))
    assert not (tmp_path / "run.h5").exists()


def test_the_check_of_the_logits_leaves_the_model_and_the_generator_as_they_were(helpers):
    """A model with dropout (a draw in training mode) and batch norm (running statistics
    moved in training mode) is built through the check and without it: the same
    parameters, buffers, training modes and generator state after."""
    import torch
    from torch import nn

    from distfl.model_specs import ModelSpec, register
    from distfl.models import build_model
    from distfl.plugins import MODELS

    class Noisy(ModelSpec):
        name = "noisy"

        @classmethod
        def accepts(cls, input_shape, num_classes, params):
            return ""

        @classmethod
        def build(cls, input_shape, num_classes, params):
            return nn.Sequential(nn.Flatten(), nn.Linear(4, 6), nn.BatchNorm1d(6),
                                 nn.Dropout(0.5), nn.Linear(6, num_classes))  # fmt: skip

    register(Noisy)
    try:
        torch.manual_seed(3)
        checked = build_model("noisy", (4,), 3)
        after_checked = torch.random.get_rng_state()
        torch.manual_seed(3)
        plain = Noisy.build((4,), 3, None)
        after_plain = torch.random.get_rng_state()
    finally:
        MODELS.remove("noisy")
    assert torch.equal(after_checked, after_plain)
    assert all(m.training for m in checked.modules())
    for a, b in zip(checked.state_dict().values(), plain.state_dict().values(), strict=True):
        assert torch.equal(a, b)
