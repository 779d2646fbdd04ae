"""The server's pool: a job's bytes round-trip, tasks cover the indices once, a failing piece
is reported after every piece ran, only registered functions run, and FedGWC's references
drawn as independent pieces keep the sequential loop's bits."""

from __future__ import annotations

import numpy as np
import pytest

from distfl.algorithms.api.pool import (
    LOCAL_POOL,
    PooledTaskFailed,
    pooled,
    pooled_function,
    pooled_name,
)
from distfl.algorithms.fedgwc.reference import (
    _reference_normals,
    affinity,
    best_split_score,
    gaussian_reference,
    reference_score,
    rng_at,
    rng_state,
)
from distfl.runtime.pool import decode_job, encode_job, tasks_of


@pooled
def _square_plus(payload, i):
    return payload["x"][i] ** 2 + payload["add"]


@pooled
def _fails_on_odd(payload, i):
    if i % 2:
        raise np.linalg.LinAlgError(f"piece {i}")
    return [float(i)]


def _unregistered(payload, i):
    return [0.0]


def test_a_job_round_trips_every_dtype_and_shape():
    payload = {
        "f64": np.arange(12, dtype=np.float64).reshape(3, 4) / 7,
        "f32": np.linspace(-1, 1, 5, dtype=np.float32),
        "i64": np.array([[-(2**62), 3]], dtype=np.int64),
        "u64": np.array([2**64 - 1, 0], dtype=np.uint64),
        "flag": np.array([True, False]),
        "empty": np.zeros((0, 3)),
    }
    name, tasks, width, back = decode_job(encode_job("m:f", 9, 2, payload))
    assert (name, tasks, width) == ("m:f", 9, 2)
    assert sorted(back) == sorted(payload)
    for key, a in payload.items():
        assert back[key].dtype == a.dtype and back[key].shape == a.shape
        assert np.array_equal(back[key], a)


def test_a_payload_of_objects_is_refused():
    with pytest.raises(TypeError, match="dtype object"):
        encode_job("m:f", 1, 1, {"x": np.array([{}], dtype=object)})


@pytest.mark.parametrize("world", [2, 3, 5, 17])
def test_every_task_goes_to_one_worker(world):
    tasks = 15
    got = np.concatenate([tasks_of(r, tasks, world) for r in range(1, world)])
    assert sorted(got.tolist()) == list(range(tasks))
    sizes = [len(tasks_of(r, tasks, world)) for r in range(1, world)]
    assert max(sizes) - min(sizes) <= 1


def test_the_local_pool_returns_rows_in_task_order():
    x = np.array([3.0, -1.0, 2.0])
    out = LOCAL_POOL.map(_square_plus, {"x": x, "add": np.float64(0.5)}, 3, 1)
    assert out.shape == (3, 1) and out[:, 0].tolist() == [9.5, 1.5, 4.5]


def test_a_failing_piece_is_reported_after_all_ran():
    with pytest.raises(PooledTaskFailed, match=r"task 1: LinAlgError: piece 1; task 3"):
        LOCAL_POOL.map(_fails_on_odd, {}, 4, 1)


def test_a_row_of_the_wrong_width_fails():
    with pytest.raises(PooledTaskFailed, match="returned 1 values, not 2"):
        LOCAL_POOL.map(_square_plus, {"x": np.ones(1), "add": np.zeros(1)}, 1, 2)


def test_only_registered_functions_run():
    with pytest.raises(ValueError, match="not registered"):
        pooled_name(_unregistered)
    with pytest.raises(ValueError, match="no pooled function"):
        pooled_function("os:system")
    assert pooled_function(pooled_name(_square_plus)) is _square_plus


def test_a_generator_state_round_trips():
    rng = np.random.default_rng([4, 2])
    rng.standard_normal(3)  # a state with a cached half of a 64-bit draw would also do
    rng.random(1)
    state = rng_state(rng)
    again = rng_at(state)
    assert np.array_equal(rng.standard_normal(50), again.standard_normal(50))
    assert np.array_equal(rng.integers(0, 2**32, 7, dtype=np.uint32),
                          again.integers(0, 2**32, 7, dtype=np.uint32))  # fmt: skip


def test_references_as_pieces_keep_the_sequential_loops_bits():
    """The references' median from the pieces equals the loop that draws reference after
    reference from one generator (the code before the pieces), bit for bit."""
    rng = np.random.default_rng(1)
    P = rng.random((50, 50))
    P = (P + P.T) / 2
    kw = dict(n_max=4, seed=3, min_size=3)
    seq = np.random.default_rng([9, 1])
    loop = [best_split_score(affinity(gaussian_reference(P, seq), 2.0), **kw) for _ in range(6)]
    got = reference_score(P, beta=2.0, draws=6, rng=np.random.default_rng([9, 1]), **kw)
    assert got == float(np.median(loop))
    # and the generator is left where the loop left it
    after = np.random.default_rng([9, 1])
    for _ in range(6):
        for _lo, _strip in _reference_normals(50, after):
            pass
    assert np.array_equal(after.random(4), seq.random(4))
