"""Client-level differential privacy ([privacy]) in real runs of the default job (FedGWC on
digits): clipped and noised, one process, torchrun with three ranks (gloo) and a run stopped
and resumed give the same bits; /metrics dp_epsilon is opacus's RDP accountant's ε round by
round; with no noise and a bound no update reaches, the bits of a run without privacy; the
summary line docs/privacy.md shows is the one its first command prints."""

from __future__ import annotations

import math
from pathlib import Path

import h5py
import numpy as np
import pytest
from cliproc import assert_one_line_error
from docpage import first_run_and_its_output
from runfile import assert_same, assert_same_run, read_run

pytestmark = pytest.mark.integration

ROUNDS = 6


def _args(rounds: int, **privacy) -> tuple[str, ...]:
    sets = [f"run.rounds={rounds}", "run.progress=none", "eval.every=1"]  # resumed: the same
    sets += [f"privacy.{key}={value}" for key, value in privacy.items()]
    return tuple(part for s in sets for part in ("--set", s))


@pytest.fixture(scope="module")
def noised(tmp_path_factory, helpers):
    tmp = tmp_path_factory.mktemp("privacy")
    return helpers.alone_torchrun_resumed(
        tmp, lambda rounds: _args(rounds, clip=0.5, noise=1.0), ROUNDS
    )


def test_the_same_bits_alone_under_torchrun_and_resumed(noised):
    single, multi, resumed = noised
    assert_same_run(single, multi)
    assert_same_run(single, resumed)
    with h5py.File(multi, "r") as f:
        assert f.attrs["world_size"] == 3


def test_epsilon_is_the_rdp_accountants_round_by_round(noised):
    """q = 10 of 40 clients a round, z = 1, δ = 1e-5: ε after t rounds from opacus's RDP
    analysis called here directly (its default orders)."""
    from opacus.accountants import RDPAccountant
    from opacus.accountants.analysis.rdp import compute_rdp, get_privacy_spent

    with h5py.File(noised[0], "r") as f:
        eps = f["metrics/dp_epsilon"][()]
    orders = RDPAccountant.DEFAULT_ALPHAS
    expected = [
        get_privacy_spent(orders=orders, rdp=compute_rdp(q=0.25, noise_multiplier=1.0,
                                                         steps=t, orders=orders), delta=1e-5)[0]
        for t in range(1, ROUNDS + 1)
    ]  # fmt: skip
    assert np.allclose(eps, expected, rtol=1e-12, atol=0)
    assert 2.5 < eps[0] < eps[-1] < 10


def _without_config(run: dict) -> dict:
    return {k: v for k, v in run.items() if "config" not in k}


def test_no_noise_and_an_unreached_bound_give_the_bits_without_privacy(tmp_path, helpers):
    helpers.run_alone(tmp_path, *_args(ROUNDS), "--out", str(tmp_path / "plain.h5"))
    helpers.run_alone(tmp_path, *_args(ROUNDS, clip=1e6), "--out", str(tmp_path / "clip.h5"))
    helpers.run_alone(tmp_path, *_args(ROUNDS, clip=0.05), "--out", str(tmp_path / "tight.h5"))
    plain = read_run(tmp_path / "plain.h5")
    assert_same(_without_config(plain), _without_config(read_run(tmp_path / "clip.h5")))
    with h5py.File(tmp_path / "plain.h5", "r") as f:
        assert all(math.isnan(e) for e in f["metrics/dp_epsilon"][()])
    # a bound the updates do reach changes the models; so does noise on top of it
    tight = read_run(tmp_path / "tight.h5")
    assert not np.array_equal(plain["final/models"], tight["final/models"])


def test_noise_changes_the_models_the_clipping_alone_makes(tmp_path, helpers, noised):
    helpers.run_alone(tmp_path, *_args(ROUNDS, clip=0.5), "--out", str(tmp_path / "clip.h5"))
    clipped, noisy = read_run(tmp_path / "clip.h5"), read_run(noised[0])
    assert not np.array_equal(clipped["final/models"], noisy["final/models"])


def test_a_target_epsilon_is_met_and_its_rounds_cannot_change_on_resume(tmp_path, helpers):
    out = tmp_path / "eps.h5"
    args = _args(4, clip=0.5, epsilon=4.0)
    printed = helpers.run_alone(tmp_path, *args, "--out", str(out))
    with h5py.File(out, "r") as f:
        eps = f["metrics/dp_epsilon"][()]
    assert 3.95 <= eps[-1] <= 4.0 and (np.diff(eps) > 0).all()
    assert f"privacy                  ε = {eps[-1]:.3g} at δ = 1e-05 (C = 0.5, z = " in printed
    more = _args(6, clip=0.5, epsilon=4.0)
    proc = helpers.cli(tmp_path, "run", *more, "--resume", str(out))
    line = assert_one_line_error(proc, "run.rounds = 4 with privacy.epsilon = 4.0")
    assert "cannot change on resume" in line


def test_the_pages_first_command_prints_the_summary_line_it_shows(tmp_path, helpers):
    page = Path(__file__).resolve().parents[2] / "docs" / "privacy.md"
    printed, shown = first_run_and_its_output(page, tmp_path, helpers)
    assert shown.strip() in printed


def test_dp_sgd_gives_the_same_bits_alone_under_torchrun_and_resumed(tmp_path, helpers):
    """Sample-level DP (each sample's gradient clipped, noise from the client's own
    generator) beside client-level DP; the bound on ε grows with the busiest client's steps."""

    def args(rounds):
        return (*_args(rounds, clip=0.5, noise=1.0, sample_clip=1.0, sample_noise=1.0),
                "--set", 'train.trainer="vectorised"')  # fmt: skip

    single, multi, resumed = helpers.alone_torchrun_resumed(tmp_path, args, 4)
    assert_same_run(single, multi)
    assert_same_run(single, resumed)
    with h5py.File(single, "r") as f:
        steps, eps = f["metrics/dp_sample_steps"][()], f["metrics/dp_sample_epsilon"][()]
    assert steps.tolist() == [8, 16, 24, 32]  # 8 local steps, one training a client a round
    assert (np.diff(eps) > 0).all() and eps[0] > 1


def test_the_prv_accountant_gives_epsilon_at_the_evaluation_rounds(tmp_path, helpers):
    from distfl.config.privacy import PrivacySection
    from distfl.runtime.privacy import epsilon

    out = tmp_path / "prv.h5"
    args = (*_args(6, clip=0.5, noise=1.0), "--set", 'privacy.accountant="prv"',
            "--set", "eval.every=3")  # fmt: skip
    helpers.run_alone(tmp_path, *args, "--out", str(out))
    with h5py.File(out, "r") as f:
        eps = f["metrics/dp_epsilon"][()]
    assert np.isnan(eps[[0, 1, 3, 4]]).all()
    prv = PrivacySection(clip=0.5, noise=1.0, accountant="prv")
    assert eps[2] == epsilon(prv, 0.25, 3) and eps[5] == epsilon(prv, 0.25, 6)
    assert eps[5] < epsilon(PrivacySection(clip=0.5, noise=1.0), 0.25, 6)  # tighter than RDP
