"""Named starting points for a run (``--preset NAME``): the embedded default job, the plain
FedAvg federation and the papers' scenarios. Each is a ``{section: {key: value}}`` mapping
merged over the key defaults (see :func:`distfl.config.load`)."""

from __future__ import annotations

from typing import Any

#: FedGWC as the default job and every scenario run it: the key defaults (the calibrated
#: split test on the observed entries of P; docs: algorithms, "The calibrated split test")
FEDGWC: dict[str, Any] = {"name": "fedgwc"}


def _scenario(groups: list[dict[str, Any]], **sections: dict[str, Any]) -> dict[str, Any]:
    """A preset of the papers' scenarios: the groups, FedGWC with the settings that the
    default job uses, and ``sections`` on top."""
    preset: dict[str, Any] = {
        "run": {"rounds": 300},
        "data": {"num_clients": sum(g["count"] for g in groups), "groups": groups},
        "server": {"clients_per_round": 10},
        "algorithm": dict(FEDGWC),
        "eval": {"every": 50},
    }
    for section, values in sections.items():
        preset.setdefault(section, {}).update(values)
    return preset


# Label skew (FedGWC Table 3): Hom alpha = 1000, Het alpha = 0.05, XHet alpha = 0 (one class).
#: ``data.dataset``'s default: the embedded one, no download (its spec is datasets/digits.py)
DEFAULT_DATASET = "digits"

_HOM = {"alpha": 1000.0, "name": "hom"}
_HET = {"alpha": 0.05, "name": "het"}
_XHET = {"alpha": 0.0, "name": "xhet"}
# Visual domains (FedGWC Table 4): near-IID labels (alpha = 100), clean, noisy or blurred.
_CLEAN = {"alpha": 100.0, "name": "clean"}
_NOISE = {"alpha": 100.0, "name": "noise", "noise": 0.3}
_BLUR = {"alpha": 100.0, "name": "blur", "blur": 3}

#: The papers' scenarios, each a preset (``--preset NAME``) on any image dataset.
SCENARIOS: dict[str, dict[str, Any]] = {
    "table3-hom-xhet": _scenario([{"count": 10, **_HOM}, {"count": 90, **_XHET}]),
    "table3-hom-het": _scenario([{"count": 10, **_HOM}, {"count": 90, **_HET}]),
    "table3-mixed": _scenario(
        [{"count": 40, **_HOM}, {"count": 30, **_HET}, {"count": 30, **_XHET}]
    ),
    "table4-clean-noise": _scenario([{"count": 50, **_CLEAN}, {"count": 50, **_NOISE}]),
    "table4-clean-blur": _scenario([{"count": 50, **_CLEAN}, {"count": 50, **_BLUR}]),
    "table4-mixed": _scenario(
        [{"count": 40, **_CLEAN}, {"count": 30, **_NOISE}, {"count": 30, **_BLUR}]
    ),
    # EMD-CFL's rotated benchmark: 40 clients, 10 per rotation of 0, 90, 180, 270 degrees.
    "rotated": _scenario(
        [
            {"count": 10, "alpha": 1000.0, "name": f"rot{angle}", "rotation": float(angle)}
            for angle in (0, 90, 180, 270)
        ]
    ),
    # EMD-CFL's backdoor benchmark (its CIFAR-10 form): 15 clients, 5 with the first five
    # classes, 5 with the same classes and a class-coloured 2x2 patch in the corner (the
    # backdoor), 5 with the last five classes.
    "backdoor": _scenario(
        [
            {"count": 5, "alpha": 1000.0, "name": "clean", "classes": [0, 1, 2, 3, 4]},
            {
                "count": 5,
                "alpha": 1000.0,
                "name": "backdoor",
                "classes": [0, 1, 2, 3, 4],
                "patch": 2,
            },
            {"count": 5, "alpha": 1000.0, "name": "other", "classes": [5, 6, 7, 8, 9]},
        ],
        server={"clients_per_round": 5},
    ),
}


def _default(minority: dict[str, Any] | None = None) -> dict[str, Any]:
    """The default job's layer, its permuted minority's group with ``minority``'s keys."""
    return {
        "run": {"rounds": 300},
        "data": {
            "num_clients": 40,
            "samples_per_client": 80,
            "groups": [
                {"count": 30, "alpha": 1000.0, "name": "clean"},
                {
                    "count": 10,
                    "alpha": 1000.0,
                    "name": "permuted",
                    "permute_labels": True,
                    **(minority or {}),
                },
            ],
        },
        "server": {"clients_per_round": 10},
        "algorithm": dict(FEDGWC),
        "eval": {"every": 50},
    }


PRESETS: dict[str, dict[str, Any]] = {
    # The embedded default job (`distfl run` with neither --config nor --preset): FedGWC on
    # the digits data shipped with scikit-learn, 30 clients with the true labels and 10
    # whose labels pass through one permutation (a concept shift). FedGWC separates the
    # two groups (Rand index 1.0, seeds 0-2).
    "default": _default(),
    # The default job with its permuted minority available a quarter as often as the
    # majority (availability 0.25 against 1 each round): a group that is online less often
    # is sampled, and so seen, less ([Participation](participation.md)).
    "default-rare-minority": {
        **_default(minority={"availability": 0.25}),
        "participation": {"availability": "fraction"},
    },
    # FedAvg on a near-IID digits federation: the plain key defaults.
    "digits": {},
    **SCENARIOS,
    # Concept-shift minorities: 100 clients, of which 10, 20 or 30 see the labels through
    # one permutation (the default job's shift, at the papers' 100 clients and 10%
    # participation).
    **{
        f"permuted-{n}": _scenario(
            [
                {"count": 100 - n, "alpha": 1000.0, "name": "clean"},
                {"count": n, "alpha": 1000.0, "name": "permuted", "permute_labels": True},
            ]
        )
        for n in (10, 20, 30)
    },
    # The FedGWC paper's large-scale regime (iNaturalist: 2,714 clients, 10 a round, 2,000
    # rounds) with the default job's concept shift: a quarter of the clients, 678, see the
    # labels through one permutation.
    "permuted-large": _scenario(
        [
            {"count": 2036, "alpha": 1000.0, "name": "clean"},
            {"count": 678, "alpha": 1000.0, "name": "permuted", "permute_labels": True},
        ],
        run={"rounds": 2000},
        eval={"every": 500},
    ),
    # The FLCL paper's (Sinha, Kibilda, Saad) section V pools for its Fig. 1 and Fig. 2: 40
    # clients of the binary Gaussian mixture, a linear model and the hinge loss; FLCL trains
    # every member, the sampling methods it is compared with 10 clients a round. Fig. 1: the
    # rotations within [0, π/2), so no two clients' means meet at π/2 or more (input
    # heterogeneity); Fig. 2: rotations in [0, π] and 12 label-flipped clients (output
    # heterogeneity). The loss target is the paper's 0.28; every client has the clock's
    # resources, and the coverage (in-sample and out-of-sample loss) is recorded. (FLCL
    # expels one client a period of 5 rounds: 200 rounds leave it the periods to expel the
    # flipped clients of 40.)
    **{
        name: {
            "run": {"rounds": 200},
            "data": {
                "dataset": "gaussian",
                "num_clients": 40,
                "samples_per_client": 100,
                "rotation_span": span,
                "groups": groups,
            },
            "model": {"hidden": []},
            "train": {"loss": "hinge", "local_steps": 5},
            "server": {"clients_per_round": 10},
            "algorithm": {"name": "flcl"},
            "eval": {"every": 2, "coverage": True, "loss_target": 0.28},
            "participation": {"resources": "loguniform"},
        }
        for name, span, groups in (
            ("flcl-fig1", 0.5, [{"count": 40, "name": "input"}]),
            (
                "flcl-fig2",
                1.0,
                [
                    {"count": 28, "name": "input"},
                    {"count": 12, "name": "flipped", "permute_labels": True},
                ],
            ),
        )
    },
    # The mixed label-skew example (docs/configuration.md): 8 near-IID clients, 4 single-class.
    "digits-mixed": {
        "run": {"seed": 7, "rounds": 20},
        "data": {
            "num_clients": 12,
            "samples_per_client": 60,
            "groups": [{"count": 8, "alpha": 1000.0}, {"count": 4, "alpha": 0.0}],
        },
        "train": {"local_steps": 4, "batch_size": 16, "lr": 0.05},
        "server": {"clients_per_round": 6},
    },
}


__all__ = ["FEDGWC", "PRESETS", "SCENARIOS"]
