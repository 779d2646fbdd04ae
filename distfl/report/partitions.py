"""The figures of [Datasets](datasets.md#k-classes-per-client-and-shards): each client's
samples per class under a group's ``classes_per_client`` and ``shards`` partitions, drawn
from the partition itself (no run needed). ``python -m distfl.report.partitions DIR`` writes
them to ``DIR`` (the docs' copies: ``python -m distfl.report.partitions docs``); a test
redraws them and compares the pixels with the docs' copies."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from distfl.plot import LEGEND_PT, new_figure, save

#: file name -> (--set overrides of the drawn config, the figure's title)
FIGURES: dict[str, tuple[list[str], str]] = {
    "partition-classes-per-client.png": (
        ['data.groups=[{count=20, partition="classes_per_client", classes_per_client=2}]'],
        "classes_per_client = 2 (class_choice = random, the default)",
    ),
    "partition-shards.png": (
        ['data.groups=[{count=20, partition="shards", shards_per_client=2}]'],
        "shards_per_client = 2 (shards of 40 label-sorted samples)",
    ),
}
#: what every figure draws: digits, 20 clients of 80 samples, seed 0
BASE = ['data.dataset="digits"', "data.num_clients=20", "data.samples_per_client=80",
        "run.seed=0"]  # fmt: skip


def client_counts(overrides: list[str]) -> np.ndarray:
    """[K, C] samples of each class of each client (train and test) of the config that
    ``overrides`` make, as the run would draw them."""
    from distfl.config import load
    from distfl.data import load_dataset, make_partition

    config = load(overrides=[*BASE, *overrides])
    dataset = load_dataset(config)
    return make_partition(config, dataset).class_counts(dataset.y)


def draw_counts(counts: np.ndarray, title: str):
    """A stacked bar per client, one colour per class."""
    from matplotlib import colormaps

    K, C = counts.shape
    fig = new_figure(7.0, 3.2)
    ax = fig.add_subplot()
    colours = colormaps["tab10" if C <= 10 else "tab20"]
    bottom = np.zeros(K)
    for c in range(C):
        ax.bar(np.arange(K), counts[:, c], bottom=bottom, color=colours(c % colours.N),
               width=0.8, label=str(c))  # fmt: skip
        bottom += counts[:, c]
    ax.set_xlabel("client")
    ax.set_ylabel("samples")
    ax.set_xticks(np.arange(K))
    ax.tick_params(labelsize=LEGEND_PT)
    ax.set_title(title, fontsize=LEGEND_PT + 1, loc="left")
    ax.legend(title="class", fontsize=LEGEND_PT, title_fontsize=LEGEND_PT, ncols=1,
              loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)  # fmt: skip
    return fig


def write(out: Path) -> list[Path]:
    """Draw every figure of :data:`FIGURES` into directory ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, (overrides, title) in FIGURES.items():
        path = out / name
        save(draw_counts(client_counts(overrides), title), path, replace=True)
        paths.append(path)
    return paths


if __name__ == "__main__":
    for p in write(Path(sys.argv[1] if len(sys.argv) > 1 else ".")):
        print(p)
