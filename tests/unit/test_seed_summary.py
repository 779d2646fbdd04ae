"""A suite's runs over their seeds (distfl.tools.seed_summary), on rows worked by hand."""

from __future__ import annotations

import math

from distfl.tools.seed_summary import COLUMNS, markdown, several_seeds, summarize, text


def row(seed, *, ari, clusters=2, rand=1.0, acc=0.9, worst=0.8, split=100, scenario="s",
        algorithm="a"):  # fmt: skip
    return {
        "scenario": scenario, "algorithm": algorithm, "seed": seed, "groups": 2,
        "clusters": clusters, "rand": rand, "ari": ari, "accuracy": acc,
        "accuracy_worst": worst, "first_split": split,
    }  # fmt: skip


def test_mean_sd_and_the_worst_seed_by_hand():
    rows = [
        row(0, ari=1.0, acc=0.9, worst=0.8, split=100),
        row(1, ari=0.5, clusters=3, acc=0.7, worst=0.6, split=120, rand=0.8),
        row(2, ari=1.0, acc=0.8, worst=0.4, split=None, clusters=1),
    ]
    (line,) = summarize(rows)
    # ARI: mean 2.5/3 = 0.8333; sd sqrt(((1/6)^2 * 2 + (1/3)^2) / 2) = sqrt(1/12) = 0.2887
    assert line["ari"] == "0.833 ± 0.289"
    assert math.isclose(math.sqrt(1 / 12), 0.28867, rel_tol=1e-4)
    assert line["ari_worst"] == "0.500 at seed 1"
    assert line["accuracy"] == "0.800 ± 0.100"
    assert line["accuracy_worst"] == "0.400 at seed 2"  # the worst client of the worst seed
    assert line["rand"] == "0.933 ± 0.115"
    assert line["clusters"] == "1–3"
    assert line["first_split"] == "100–120 (2 of 3)"
    assert line["seeds"] == "3"


def test_equal_seeds_have_no_worst_ari_and_one_count():
    rows = [row(s, ari=1.0, split=150) for s in range(4)]
    (line,) = summarize(rows)
    assert line["ari"] == "1.000 ± 0.000" and line["ari_worst"] == "–"
    assert line["clusters"] == "2" and line["first_split"] == "150"
    assert line["accuracy_worst"] == "0.800 at seed 0"  # the first of equal ones


def test_a_failed_run_is_counted_apart_and_pairs_keep_their_order():
    failed = {**row(1, ari=None), "accuracy": None, "clusters": None, "rand": None}
    rows = [row(0, ari=0.2, scenario="z"), failed | {"scenario": "z"}]
    rows += [row(s, ari=0.0, scenario="b", split=None) for s in (0, 1)]
    lines = summarize(rows)
    assert [ln["scenario"] for ln in lines] == ["z", "b"]
    assert lines[0]["seeds"] == "1 of 2" and lines[0]["ari"] == "0.200 ± 0.000"
    assert lines[0]["ari_worst"] == "0.200"  # one value: itself
    assert lines[1]["first_split"] == "–" and lines[1]["ari_worst"] == "–"


def test_nan_is_left_out_of_the_mean_and_the_worst():
    rows = [row(0, ari=float("nan")), row(1, ari=0.4), row(2, ari=0.6)]
    (line,) = summarize(rows)
    assert line["ari"] == "0.500 ± 0.141" and line["ari_worst"] == "0.400 at seed 1"


def test_a_mean_that_rounds_to_zero_has_no_sign():
    (line,) = summarize([row(0, ari=-0.0004), row(1, ari=0.0002)])
    assert line["ari"] == "0.000 ± 0.000" and line["ari_worst"] == "0.000 at seed 0"


def test_several_seeds_and_the_two_forms():
    one = [row(0, ari=1.0), row(0, ari=1.0, algorithm="b")]
    assert not several_seeds(one)
    assert several_seeds(one + [row(1, ari=1.0)])
    lines = summarize(one)
    md = markdown(lines).splitlines()
    assert md[0] == "| " + " | ".join(h for _, h in COLUMNS) + " |"
    assert md[2].startswith("| `s` | a | 1 | 2 |") and len(md) == 4
    printed = text(lines).splitlines()
    assert printed[0].split()[:3] == ["scenario", "algorithm", "seeds"] and len(printed) == 3
    assert text([]).split() == printed[0].split()  # no line: the header alone
    assert printed[1].index(" a ") + 1 == len("scenario  ")  # cells left-aligned


def test_the_newcomers_figures_beside_the_trained_clients_only_where_runs_have_them():
    rows = [row(0, ari=1.0), row(1, ari=1.0)]
    (plain,) = summarize(rows)
    assert "held_out_accuracy" not in plain and "newcomers" not in text([plain])
    for r, (acc, worst, ari) in zip(rows, [(0.9, 0.7, 1.0), (0.8, 0.5, 0.5)], strict=True):
        r.update(newcomers=4, held_out_accuracy=acc, held_out_accuracy_worst=worst,
                 held_out_ari=ari)  # fmt: skip
    (line,) = summarize(rows)
    # mean 0.85, sd sqrt((0.05^2 * 2) / 1) = 0.0707
    assert line["held_out_accuracy"] == "0.850 ± 0.071"
    assert line["held_out_accuracy_worst"] == "0.500 at seed 1"
    assert line["held_out_ari"] == "0.750 ± 0.354"
    shown = text([line])
    assert "newcomers" in shown and "worst newcomer" in shown and "newcomers' ARI" in shown
    assert (
        markdown([line]).splitlines()[0].endswith("| newcomers | worst newcomer | newcomers' ARI |")
    )
