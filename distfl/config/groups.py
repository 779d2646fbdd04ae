"""A group of clients (one table of ``data.groups``): its size, how its samples are drawn,
the transforms applied to its data and how its clients take part in rounds."""

from __future__ import annotations

from dataclasses import dataclass

from distfl.settings import setting

#: a dirichlet group's ``alpha`` where the config gives none: a natural partition needs none,
#: a group drawn from a pooled dataset is refused without one (distfl.config.checks)
ALPHA_NOT_GIVEN = -1.0


@dataclass(frozen=True)
class GroupSpec:
    """A group of clients: its size, how its samples are drawn, and the transforms applied
    to its data (in the order listed; see :mod:`distfl.data.transforms`)."""

    count: int = setting(allowed="int ≥ 1", doc="clients in the group")
    alpha: float = setting(
        allowed="0 to 1e6",
        doc="class proportions of each client ~ Dir(α·1): α = 0 one class per client, "
        "α = 1000 near-IID (required by a `dirichlet` group drawn from a pooled dataset; "
        "refused by the other partitions; a natural partition needs none, and one given "
        "there is warned of)",
    )
    name: str = setting("", "string", "a label for tables and plots")
    samples_per_client: int = setting(
        0, "int ≥ 0", "the group's own sample count (0: `data.samples_per_client`)"
    )
    test_fraction: float = setting(
        0.0, "[0, 1)", "the group's own test share (0: `data.test_fraction`)"
    )
    classes: tuple[int, ...] = setting(
        (), "list of class indices", "the classes the group's samples are drawn from (`[]`: all)"
    )
    partition: str = setting(
        "dirichlet",
        "`dirichlet`, `classes_per_client`, `shards`",
        "how the group's clients split the samples of its `classes` "
        "([Datasets](datasets.md#k-classes-per-client-and-shards)): `dirichlet` by `alpha`; "
        "`classes_per_client` each client holds exactly `classes_per_client` classes, its "
        "samples split equally over them; `shards` the group's samples sorted by label are cut "
        "into shards of `samples_per_client / shards_per_client` samples and each client "
        "holds `shards_per_client` of them (McMahan et al. 2017)",
    )
    classes_per_client: int = setting(
        0,
        'int ≥ 1 with `partition = "classes_per_client"`, ≤ the group\'s classes',
        "k, the classes each client of a `classes_per_client` group holds",
    )
    class_choice: str = setting(
        "random",
        "`random`, `first_deterministic`, `deterministic`",
        "how a `classes_per_client` group picks each client's k classes (i is the client's "
        "position in the group, C the number of the group's classes, positions in increasing "
        "class order): `random` k of the C at random (Vahidian et al. 2023's code); "
        "`first_deterministic` the class at position i mod C, then k−1 others at random "
        "(NIID-Bench's, Li et al. 2022); `deterministic` the classes at positions i, i+1, …, "
        "i+k−1 mod C. The random picks come from (seed, group)",
    )
    shards_per_client: int = setting(
        0,
        'int ≥ 1 with `partition = "shards"`, dividing the group\'s samples per client',
        "shards each client of a `shards` group holds",
    )
    rotation: float = setting(
        0.0,
        "degrees",
        "rotate every image by this many degrees counter-clockwise (multiples of 90 exact, others "
        "bilinear); on tabular data the first two features",
    )
    blur: int = setting(
        0,
        "0 or odd, ≤ 99",
        "Gaussian blur with this odd kernel size (σ = 0.3·((k−1)/2 − 1) + 0.8, reflect padding)",
    )
    patch: int = setting(
        0,
        "int ≥ 0",
        "a p×p patch in the top-left corner whose colour encodes the sample's class (a backdoor "
        "feature; one colour table per seed, the same for every group)",
    )
    noise: float = setting(
        0.0, "0 to 1e30", "add Gaussian noise of this σ to every feature, drawn per client"
    )
    shift: float = setting(
        0.0,
        "0 to 1e30",
        "add a fixed vector of this norm, drawn per group, to every sample (feature shift, for "
        "tabular data)",
    )
    permute_labels: bool = setting(
        False,
        "bool",
        "pass the group's labels through one fixed permutation that moves every class (a concept "
        "shift; for two classes a label flip)",
    )
    availability: float = setting(
        -1.0,
        "-1 or [0, 1]",
        "the mean share of rounds in which a client of the group is available "
        '(`participation.availability = "fraction"`); -1: `participation.fraction`',
    )
    dropout: float = setting(
        -1.0,
        "-1 or [0, 1)",
        "the probability that a selected client of the group drops out before it reports; "
        "-1: `participation.dropout`",
    )
    speed_scale: float = setting(
        1.0, "1e-6 to 1e6", "a factor on the compute speed of the group's clients ([participation])"
    )
    bandwidth_scale: float = setting(
        1.0,
        "1e-6 to 1e6",
        "a factor on the link bandwidth of the group's clients ([participation])",
    )


__all__ = ["ALPHA_NOT_GIVEN", "GroupSpec"]
