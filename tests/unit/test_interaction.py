"""FedGWC's interaction matrix as observations (distfl.algorithms.fedgwc.interaction), the split
test on degenerate matrices, and a split test that cannot be computed."""

from __future__ import annotations

import numpy as np
import pytest
from algostate import paper_fedgwc
from sklearn.metrics import adjusted_rand_score

import distfl.algorithms.fedgwc as fedgwc
import distfl.algorithms.fedgwc.algorithm as fedgwc_module
import distfl.algorithms.fedgwc.interaction as interaction
from distfl.algorithms.api.base import ClientReports
from distfl.algorithms.fedgwc import FedGWC, FedGWCParams, update_interaction
from distfl.algorithms.fedgwc.interaction import (
    BlockStore,
    PairStore,
    gaussian_coordinates,
    imputed_coordinates,
    store_from_state,
    stored_bytes,
    stored_pairs,
)
from distfl.algorithms.fedgwc.spectral import choose_split, spectral_embedding


def _rounds(K: int, cohort: int, rounds: int, seed: int, level=None):
    """(sampled positions, rewards) of ``rounds`` random rounds."""
    rng = np.random.default_rng(seed)
    level = np.full(K, 0.7) if level is None else level
    for _ in range(rounds):
        pos = np.sort(rng.choice(K, cohort, replace=False))
        yield pos, level[pos] + rng.normal(0.0, 0.05, cohort)


def test_the_store_holds_the_dense_matrix_observed_entries():
    K, alpha = 30, 0.2
    store, dense = PairStore(K), np.zeros((K, K))
    observed = np.zeros((K, K), dtype=bool)
    for pos, omega in _rounds(K, 6, 40, 0):
        new = update_interaction(dense, pos, omega, alpha)
        change = store.update(pos, omega, alpha)
        assert change == pytest.approx(float(np.sum((new - dense) ** 2)), rel=1e-12)
        dense = new
        observed[np.ix_(pos, pos)] = True
    np.testing.assert_array_equal(store.dense(impute=False), dense)
    assert len(store) == observed.sum()
    assert np.all(np.diff(store.keys) > 0)  # sorted, no key twice


def test_missing_entries_read_as_the_rows_mean():
    store = PairStore(3)
    store.update(np.array([0, 1]), np.array([0.5, 1.0]), 0.5)  # P[0, 0:2] = 0.25, P[1, 0:2] = 0.5
    store.update(np.array([0, 2]), np.array([1.0, 0.2]), 0.5)  # P[0,0] = .625, P[0,2] = .5, ...
    expected = np.array(
        [
            [0.625, 0.25, 0.5],  # row 0: all observed
            [0.5, 0.5, 0.5],  # row 1: P[1, 2] missing, the mean of P[1, 0]
            [0.1, 0.1, 0.1],  # row 2: P[2, 1] missing, the mean of P[2, 0]
        ]
    )
    np.testing.assert_allclose(store.dense(), expected)
    np.testing.assert_allclose(store.row_means(), [(0.25 + 0.5) / 2, 0.5, 0.1])  # off-diagonal


def test_a_subset_is_the_dense_sub_block():
    K = 25
    store, dense = PairStore(K), np.zeros((K, K))
    for pos, omega in _rounds(K, 5, 30, 1):
        store.update(pos, omega, 0.3)
        dense = update_interaction(dense, pos, omega, 0.3)
    pos = np.array([1, 4, 5, 9, 17, 24])
    np.testing.assert_array_equal(store.subset(pos).dense(impute=False), dense[np.ix_(pos, pos)])


def test_coordinates_keep_the_distances_of_low_rank_rows():
    """Rows that are a level per client (rank one once imputed) keep their distances."""
    K = 60
    level = np.repeat([0.2, 0.5, 0.9], 20)
    store = PairStore(K)
    for pos, _ in _rounds(K, 12, 80, 2):
        store.update(pos, level[pos], 1.0)  # each observed entry is the client's level
    X = store.dense()
    Y = imputed_coordinates(store, 2, seed=0)
    d_full = np.square(X[:, None, :] - X[None, :, :]).sum(-1)
    d_low = np.square(Y[:, None, :] - Y[None, :, :]).sum(-1)
    np.testing.assert_allclose(d_low, d_full, rtol=1e-6, atol=1e-9)


def test_gaussian_coordinates_have_the_mean_and_covariance():
    rng = np.random.default_rng(4)
    Y = rng.normal(size=(200, 3)) @ np.diag([2.0, 1.0, 0.1]) + [1.0, -1.0, 0.0]
    draws = gaussian_coordinates(Y, 200_000, rng)
    np.testing.assert_allclose(draws.mean(axis=0), Y.mean(axis=0), atol=0.02)
    np.testing.assert_allclose(np.cov(draws, rowvar=False), np.cov(Y, rowvar=False), atol=0.03)


def test_stored_pairs_follow_the_rounds_up_to_k_squared():
    assert stored_pairs(100_000, 1000, 100, 3, 5) == 100 * 1015**2
    assert stored_pairs(100, 10, 10_000, 3, 5) == 100**2


# ----------------------------------------------------------- P as the rounds that made it


@pytest.mark.parametrize(("K", "cohort", "rounds", "alpha"),
                         [(30, 6, 40, 0.2), (200, 20, 300, 0.1), (50, 10, 8, 1.0)])  # fmt: skip
def test_the_block_store_is_the_pair_store_to_the_bit(K, cohort, rounds, alpha):
    """The same rounds into both: the same change of eq. 3 each round (to the bit), the
    same number of entries, and, made into entries, the same keys and values; pairs met
    once, several times and the diagonal (met every time) are all among them."""
    pairs, blocks = PairStore(K), BlockStore(K)
    for pos, omega in _rounds(K, cohort, rounds, K + cohort):
        assert blocks.update(pos, omega, alpha) == pairs.update(pos, omega, alpha)
        assert len(blocks) == len(pairs) and blocks.off_diagonal() == pairs.off_diagonal()
    made = blocks.pair_store()
    np.testing.assert_array_equal(made.keys, pairs.keys)
    np.testing.assert_array_equal(made.values, pairs.values)
    assert (blocks.multi_counts >= 2).all() and len(blocks.multi_keys) < len(pairs)
    np.testing.assert_allclose(blocks.row_means(), pairs.row_means(), rtol=1e-13, atol=1e-15)
    assert blocks.finite() and blocks.scale() == pairs.scale()
    again = store_from_state(blocks.state())
    assert isinstance(again, BlockStore) and len(again) == len(blocks)
    np.testing.assert_array_equal(again.pair_store().values, pairs.values)


def test_the_block_stores_products_are_the_entries_products():
    """E·Z and Eᵀ·Z from the rounds (the split test's products) against the same products
    with the entries' sparse matrix, and the coordinates made from them."""
    K = 200
    pairs, blocks = PairStore(K), BlockStore(K)
    for pos, omega in _rounds(K, 20, 300, 3):
        pairs.update(pos, omega, 0.1)
        blocks.update(pos, omega, 0.1)
    mu = pairs.row_means()
    Z = np.random.default_rng(0).normal(size=(K, 4))
    for want, got in zip(pairs.centred(mu)[:2], blocks.centred(mu)[:2], strict=True):
        np.testing.assert_allclose(got(Z), want(Z), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(blocks.centred(mu)[2], pairs.centred(mu)[2], atol=1e-12)
    np.testing.assert_allclose(imputed_coordinates(blocks, 3, 0),
                               imputed_coordinates(pairs, 3, 0), atol=1e-10)  # fmt: skip


def test_a_block_stores_subset_is_the_entries_subset(monkeypatch):
    """Split: the children's P are the sub-blocks, kept as rounds while they are large and
    as entries at BLOCKS_ABOVE clients and below; eq. 3 goes on alike in both."""
    K = 60
    pairs, blocks = PairStore(K), BlockStore(K)
    for pos, omega in _rounds(K, 12, 60, 4):
        pairs.update(pos, omega, 0.3)
        blocks.update(pos, omega, 0.3)
    pos = np.sort(np.random.default_rng(1).choice(K, 25, replace=False))
    monkeypatch.setattr(interaction, "BLOCKS_ABOVE", 10)
    big, want = blocks.subset(pos), pairs.subset(pos)
    assert isinstance(big, BlockStore) and len(big) == len(want)
    for sub_pos, omega in _rounds(25, 5, 20, 5):
        assert big.update(sub_pos, omega, 0.3) == want.update(sub_pos, omega, 0.3)
    np.testing.assert_array_equal(big.pair_store().values, want.values)
    monkeypatch.setattr(interaction, "BLOCKS_ABOVE", 2048)
    small = blocks.subset(pos)
    assert isinstance(small, PairStore)
    np.testing.assert_array_equal(small.values, pairs.subset(pos).values)


def test_a_block_store_refuses_arrays_that_are_no_history():
    with pytest.raises(ValueError, match="history"):
        BlockStore(10, np.array([1, 2]), np.array([0.1, 0.2]), np.array([0, 3]))


def test_the_estimate_covers_what_a_block_store_holds():
    """K = 5,000, 100 a round, 300 rounds: the estimate of the rounds and the repeated pairs
    against the arrays the store holds; at 100,000 clients and 1,000 a round, the 300 rounds
    the defaults wait for before a test are estimated at under 4 GiB."""
    K, cohort, rounds = 5000, 100, 300
    blocks = BlockStore(K)
    for pos, omega in _rounds(K, cohort, rounds, 6):
        blocks.update(pos, omega, 0.1)
    held = blocks.nbytes()
    estimate = stored_bytes(K, cohort, rounds, 3, 5)
    assert held <= estimate < 40 * held
    assert stored_bytes(100_000, 1000, 300, 3, 5) < 4 * 2**30 < stored_pairs(
        100_000, 1000, 300, 3, 5) * interaction.ENTRY_BYTES  # fmt: skip


def test_fedgwc_keeps_a_large_cluster_as_rounds_and_decides_as_on_entries(monkeypatch):
    """Above BLOCKS_ABOVE clients FedGWC's observed P is a BlockStore; the same run on a
    PairStore takes the same rounds (eq. 3's MSE to the bit) to the same split."""
    monkeypatch.setattr(fedgwc_module, "BLOCKS_ABOVE", 40)
    monkeypatch.setattr(interaction, "BLOCKS_ABOVE", 40)
    K = 150
    level = np.where(np.arange(K) < 110, 0.8, 0.3)
    runs = []
    for store in ("blocks", "pairs"):
        alg = _observed_fedgwc(K, stable_tests=2, reference_draws=0, min_observations=2,
                               epsilon=1.0, alpha=1.0)  # fmt: skip
        if store == "pairs":
            alg.state["0"].P = PairStore(K)
        assert isinstance(alg.state["0"].P, BlockStore if store == "blocks" else PairStore)
        rng = np.random.default_rng(0)
        mses, split_at = [], None
        for r in range(1, 80):
            plan = alg.plan(r)
            ids = np.array(sorted(plan.train), dtype=np.int64)
            losses = (1.0 - level[ids])[:, None] + rng.normal(0, 0.02, (len(ids), 4))
            update = alg.update(
                r,
                plan,
                ClientReports(
                    clients=ids, losses=losses, num_samples=np.full(len(ids), 10, np.int64)
                ),
            )
            mses.append(update.stats.get("0", {}).get("mse"))
            if update.splits:
                split_at = (r, update.splits[0].info["labels"])
                break
        runs.append((mses, split_at))
    (mses_b, split_b), (mses_p, split_p) = runs
    assert mses_b == mses_p and split_b is not None and split_p is not None
    assert split_b[0] == split_p[0]
    np.testing.assert_array_equal(split_b[1], split_p[1])
    assert adjusted_rand_score(level < 0.5, split_b[1]) > 0.8  # 0.89: a few noisy clients


# ----------------------------------------------------------- degenerate matrices


def _observed_fedgwc(K: int = 40, **keys) -> FedGWC:
    return paper_fedgwc(num_clients=K, clients_per_round=10, seed=0, interaction="observed", **keys)


def _store_from(P: np.ndarray) -> PairStore:
    K = len(P)
    keys = np.arange(K * K, dtype=np.int64)
    return PairStore(K, keys, P.reshape(-1).astype(np.float64))


#: every row alike (constant), identical rows that vary along them (rank one), two rows
#: repeated in alternation (rank two, but every client's perception the same)
DEGENERATE = {
    "constant": np.full((40, 40), 0.5),
    "identical rows": np.tile(np.linspace(0.1, 0.9, 40), (40, 1)),
    "zeros": np.zeros((40, 40)),
}


@pytest.mark.parametrize("name", sorted(DEGENERATE))
@pytest.mark.parametrize("path", ["dense", "observed", "coordinates"])
def test_a_degenerate_p_proposes_nothing(monkeypatch, name, path):
    if path == "coordinates":
        monkeypatch.setattr(fedgwc_module, "COORDINATES_ABOVE", 10)
    alg = paper_fedgwc(num_clients=40, clients_per_round=10, seed=0) if path == "dense" else (
        _observed_fedgwc()
    )  # fmt: skip
    P = DEGENERATE[name]
    alg.state["0"].P = P.copy() if path == "dense" else _store_from(P)
    stats: dict[str, float] = {}
    assert alg._try_split("0", alg.state["0"], 5, stats=stats) is None
    assert alg.state["0"].proposal is None


def test_a_constant_affinity_has_no_determined_eigenvectors():
    _, determined = spectral_embedding(np.ones((30, 30)), 4, 0, gaps=True)
    assert determined.tolist() == [True, False, False, False]
    n, labels, scores = choose_split(np.ones((30, 30)), 4, 0)
    assert n == 1 and not labels.any() and np.isinf(scores).all()


def test_a_rank_deficient_affinity_offers_only_its_blocks():
    """Two blocks of identical rows: the first two eigenvectors are determined (the two
    blocks), the rest (a repeated eigenvalue) are not."""
    W = np.kron(np.array([[1.0, 0.1], [0.1, 1.0]]), np.ones((15, 15)))
    _, determined = spectral_embedding(W, 4, 0, gaps=True)
    assert determined.tolist() == [True, True, False, False]
    n, labels, _ = choose_split(W, 4, 0)
    assert n == 2 and sorted(np.bincount(labels)) == [15, 15]


@pytest.mark.parametrize("bad", [np.nan, np.inf])
@pytest.mark.parametrize("path", ["dense", "observed", "coordinates"])
def test_a_p_holding_nan_or_inf_is_a_failed_test_not_a_crash(monkeypatch, bad, path):
    if path == "coordinates":
        monkeypatch.setattr(fedgwc_module, "COORDINATES_ABOVE", 10)
    rng = np.random.default_rng(0)
    P = np.where(np.arange(40) < 30, 0.8, 0.4)[:, None] + rng.normal(0, 0.02, (40, 40))
    P[3, 7] = bad
    alg = paper_fedgwc(num_clients=40, clients_per_round=10, seed=0) if path == "dense" else (
        _observed_fedgwc()
    )  # fmt: skip
    alg.state["0"].P = P if path == "dense" else _store_from(P)
    stats: dict[str, float] = {}
    assert alg._try_split("0", alg.state["0"], 5, stats=stats) is None
    assert stats["test_failed"] == 1.0 and "db" not in stats


def test_a_numerical_failure_inside_a_split_test_leaves_the_run_going(monkeypatch):
    """eigh failing (scipy's LinAlgError, as it does on some BLAS for some matrices): every
    round still updates, the failed tests are recorded, no split is made; once the
    eigensolver works again, the same algorithm splits."""
    import scipy.linalg

    def broken(*args, **kwargs):
        raise np.linalg.LinAlgError("Internal Error")

    alg = paper_fedgwc(num_clients=12, clients_per_round=4, seed=0, epsilon=1e9, patience=1)
    rng = np.random.default_rng(0)

    def one_round(r):
        plan = alg.plan(r)
        ids = np.array(sorted(plan.train), dtype=np.int64)
        losses = np.where(ids < 6, 0.1, 2.0)[:, None] + rng.normal(0.0, 0.01, (len(ids), 5))
        reports = ClientReports(
            clients=ids, losses=losses, num_samples=np.full(len(ids), 10, dtype=np.int64)
        )
        return alg.update(r, plan, reports)

    with monkeypatch.context() as m:
        m.setattr(scipy.linalg, "eigh", broken)
        updates = [one_round(r) for r in range(4)]
    assert not any(u.splits for u in updates)
    assert all(u.stats["0"]["test_failed"] == 1.0 for u in updates)
    assert alg.times_sampled.sum() == 16  # every round's rewards were taken
    assert any(one_round(r).splits for r in range(4, 8))


# ----------------------------------------------------------- the two paths agree


def _two_group_store(
    K: int, minority: int, rounds: int, seed: int, alpha: float = 1.0
) -> tuple[PairStore, np.ndarray]:
    """A majority rewarded 0.8 and a minority 0.4 (with noise); α = 1: each entry the last
    reward, the same whatever how often the pair was sampled together."""
    groups = (np.arange(K) >= K - minority).astype(int)
    store = PairStore(K)
    for pos, omega in _rounds(K, 20, rounds, seed, level=np.where(groups == 0, 0.8, 0.4)):
        store.update(pos, omega, alpha)
    return store, groups


@pytest.mark.parametrize("seed", [0, 1])
def test_the_dense_and_coordinates_paths_agree_at_small_k(monkeypatch, seed):
    store, groups = _two_group_store(150, 40, 150, seed)
    outcomes = []
    for knn_above in (10_000, 10):  # the exact dense path, then the neighbour-graph path
        monkeypatch.setattr(fedgwc_module, "COORDINATES_ABOVE", knn_above)
        alg = _observed_fedgwc(150, stable_tests=1, reference_draws=0)
        alg.state["0"].P = PairStore(store.n, store.keys.copy(), store.values.copy())
        split = alg._try_split("0", alg.state["0"], 5)
        assert split is not None
        labels = split.info["labels"]
        assert adjusted_rand_score(groups, labels) == 1.0
        outcomes.append((sorted(split.info), labels))
    assert "affinity" in outcomes[0][0] and "coordinates" in outcomes[1][0]
    np.testing.assert_array_equal(outcomes[0][1], outcomes[1][1])


def test_the_coordinates_reference_refuses_one_cloud_and_passes_groups(monkeypatch):
    monkeypatch.setattr(fedgwc_module, "COORDINATES_ABOVE", 10)
    rng = np.random.default_rng(5)
    level = rng.uniform(0.3, 0.9, 150)  # a continuum: how hard each client's data are
    cloud = PairStore(150)
    for pos, omega in _rounds(150, 20, 150, 6, level=level):
        cloud.update(pos, omega, 1.0)
    groups, _ = _two_group_store(150, 40, 150, 7)
    decided = {}
    for name, store in (("cloud", cloud), ("groups", groups)):
        alg = _observed_fedgwc(150, stable_tests=1, reference_draws=9, db_threshold=10.0)
        alg.state["0"].P = store
        stats: dict[str, float] = {}
        decided[name] = alg._try_split("0", alg.state["0"], 5, stats=stats) is not None
        assert np.isfinite(stats["db_reference"])
    assert decided == {"cloud": False, "groups": True}


def test_defaults_are_one_fedgwc_and_old_files_keep_theirs():
    params = FedGWCParams()
    assert (params.stable_tests, params.reference_draws, params.min_observations) == (2, 15, 3)
    old = FedGWCParams.stored_defaults
    assert old["interaction"] == "dense" and old["stable_tests"] == 1
    assert old["reference_draws"] == 0 and old["min_observations"] == 0
    assert old["reward"] == "steps"
    assert (params.interaction, params.reward) == ("auto", "auto")


@pytest.mark.parametrize(
    ("K", "cohort", "interaction", "reward"),
    [(100, 10, "dense", "steps"), (40, 10, "dense", "steps"), (2000, 100, "observed", "round"),
     (2714, 10, "observed", "round"), (100_000, 1000, "observed", "round"),
     (1000, 51, "dense", "steps")],
)  # fmt: skip
def test_auto_keys_follow_the_participation_rate(K, cohort, interaction, reward):
    """The paper's P and reward where a round samples more than 5% of the population (its
    100 clients at 10%), observed entries and the round's reward at 5% and below."""
    alg = paper_fedgwc(num_clients=K, clients_per_round=cohort, seed=0, interaction="auto",
                 reward="auto")  # fmt: skip
    assert (alg.interaction, alg.reward) == (interaction, reward)
    assert alg.observed == (interaction == "observed")


def test_the_round_reward_is_eq_1_on_the_mean_loss():
    """Three clients whose mean losses are 1, 2 and 6: m = 3, σ² = 7, by hand."""
    losses = np.array([[0.5, 1.5], [2.0, 2.0], [5.0, 7.0]])
    want = np.exp(-np.array([4.0, 1.0, 9.0]) / 14.0)
    np.testing.assert_allclose(fedgwc.round_rewards(losses), want, rtol=1e-15)
    # per step it is another number: the steps' own means and variances
    assert not np.allclose(fedgwc.gaussian_rewards(losses), want)


def test_the_memory_check_counts_observed_entries_not_k_squared():
    observed = FedGWC.pair_memory(
        FedGWCParams(interaction="observed"), num_clients=100_000, clients_per_round=1000,
        rounds=100,
    )  # fmt: skip
    dense = FedGWC.pair_memory(
        FedGWCParams(interaction="dense"), num_clients=100_000, clients_per_round=1000,
        rounds=100,
    )  # fmt: skip
    auto = FedGWC.pair_memory(
        FedGWCParams(), num_clients=100_000, clients_per_round=1000, rounds=100
    )
    assert auto == observed  # 1% a round: observed entries
    assert dense == 100_000**2 * 32  # P, W, a reference and its Gram product
    assert observed < 4 * 2**30 < dense
    assert observed >= stored_bytes(100_000, 1000, 100, 3, 5)


# ----------------------------------------------------------- where most of P is missing


def test_unimodality_gap_of_two_point_masses_is_a_quarter():
    """Hartigan's dip of two equal point masses is 1/4; so is this statistic's."""
    x = np.r_[np.zeros(200), np.ones(200)] + np.linspace(0, 1e-9, 400)
    assert interaction.unimodality_gap(x) == pytest.approx(0.25, abs=0.01)


def test_unimodality_gap_tells_two_modes_from_one():
    rng = np.random.default_rng(0)
    n = 2000
    uniform = max(interaction.unimodality_gap(rng.uniform(size=n)) for _ in range(15))
    skewed = interaction.unimodality_gap(rng.exponential(size=n))  # one mode, a long tail
    normal = interaction.unimodality_gap(rng.normal(size=n))
    two = interaction.unimodality_gap(np.r_[rng.normal(0, 1, 1500), rng.normal(5, 1, 500)])
    assert skewed < uniform and normal < uniform < two
    assert two > 3 * uniform


def test_valley_test_separates_groups_and_not_a_split_cloud():
    rng = np.random.default_rng(1)
    groups = np.r_[rng.normal(0, 0.3, (300, 2)), rng.normal(0, 0.3, (100, 2)) + [3.0, 0.0]]
    labels = np.r_[np.zeros(300, int), np.ones(100, int)]
    gap, reference = interaction.valley_test(groups, labels, draws=15, rng=rng)
    assert gap > reference
    cloud = rng.normal(size=(400, 2))
    halves = (cloud[:, 0] > 0).astype(int)  # what k-means makes of one cloud
    gap, reference = interaction.valley_test(cloud, halves, draws=15, rng=rng)
    assert gap <= reference


def test_same_partition_allows_a_few_clients_to_change_side():
    a = np.r_[np.zeros(10, int), np.ones(10, int)]
    b = a.copy()
    b[[0, 19]] = 1 - b[[0, 19]]
    renamed = 1 - a  # the same partition, other labels
    assert interaction.same_partition(a, renamed, tolerance=0) is False  # exact: the labels
    assert interaction.same_partition(a, renamed, tolerance=1)
    assert interaction.same_partition(a, b, tolerance=2)
    assert not interaction.same_partition(a, b, tolerance=1)
    assert not interaction.same_partition(a, np.r_[a[:-1], 2], tolerance=5)  # 3 clusters


def test_choose_split_rows_is_kmeans_scored_on_the_rows():
    from sklearn.cluster import KMeans
    from sklearn.metrics import davies_bouldin_score

    from distfl.algorithms.fedgwc.spectral import choose_split_rows

    rng = np.random.default_rng(2)
    Y = np.r_[rng.normal(0, 0.2, (40, 3)), rng.normal(0, 0.2, (20, 3)) + 2.0]
    n, labels, scores = choose_split_rows(Y, 4, 7, min_size=3, threshold=1.0)
    assert n == 2 and sorted(np.bincount(labels)) == [20, 40]
    for k in (2, 3, 4):
        km = KMeans(n_clusters=k, n_init=10, random_state=7).fit_predict(Y[:, :k])
        assert scores[k - 2] == pytest.approx(davies_bouldin_score(Y, km), rel=1e-9)


def _sparse_store(level: np.ndarray, rounds: int, seed: int) -> PairStore:
    """Ten clients a round: most pairs never meet."""
    store = PairStore(len(level))
    for pos, omega in _rounds(len(level), 10, rounds, seed, level=level):
        store.update(pos, omega, 0.1)
    return store


def test_where_most_pairs_never_met_groups_split_and_a_continuum_does_not():
    K = 300
    rng = np.random.default_rng(8)
    two = np.where(np.arange(K) < 225, 0.8, 0.4)
    continuum = rng.uniform(0.4, 0.8, K)
    outcome = {}
    for name, level in (("groups", two), ("continuum", continuum)):
        alg = _observed_fedgwc(K, stable_tests=1, reference_draws=15, db_threshold=10.0)
        alg.state["0"].P = _sparse_store(level, 300, 9)
        assert alg._sparse(alg.state["0"])  # fewer than half of the pairs observed
        stats: dict[str, float] = {}
        split = alg._try_split("0", alg.state["0"], 5, stats=stats)
        outcome[name] = split is not None
        assert {"valley", "valley_reference"} <= set(stats) and "db_reference" not in stats
        if split is not None:
            assert adjusted_rand_score(two == 0.4, split.info["labels"]) == 1.0
    assert outcome == {"groups": True, "continuum": False}
