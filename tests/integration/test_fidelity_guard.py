"""The fidelity guard: the embedded default job (``distfl run``, FedGWC at its defaults on
40 digits clients, 30 clean and 10 label-permuted) on seeds 0-9 leaves no client in the
other group's cluster and no client at a balanced accuracy of 0.5 or below. Before FedGWC
could give a member back, one to three permuted clients ended in the clean cluster at
accuracy 0 on seeds 3, 5 and 7 (docs/fidelity.md, "The default job over 20 seeds").

The ARI is 1.0 on seeds 0-19 on the machine the docs name, but the guard asks for pure
clusters, not for exactly two: in a few seeds FedGWC cuts one group in two late in the run
(seeds 25, 75, 80 and 85 of 0-99 there, in the paper's mode as in the default one), and
which seeds do differs by CPU (float32 kernels), so an ARI of 1 on ten fixed seeds is not
a fact of the code on every machine. Such a cut serves every client its group's model; a
client in the other group's cluster does not, and that fails here on any machine."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest
from runfile import kernel_fingerprint

import distfl

pytestmark = pytest.mark.integration

SEEDS = range(10)
#: the float kernels of the machine that measured seeds 0-19 at ARI 1.0 (docs/fidelity.md)
MEASURED_ON = "959f544dd2550279c7f8d933003040892c262539440b78ffe22320866f5403ac"
fingerprint = cache(kernel_fingerprint)


@pytest.mark.parametrize("seed", SEEDS)
def test_the_default_job_leaves_no_client_in_the_other_groups_cluster(seed, tmp_path, helpers):
    out = tmp_path / f"seed{seed}.h5"
    helpers.run_alone(tmp_path, "--out", str(out), "--set", f"run.seed={seed}",
                      "--set", 'run.progress="none"')  # fmt: skip
    run = distfl.open(out)
    ari = run.scores()["ari"]
    groups, assignment = np.asarray(run.groups), np.asarray(run.assignment)
    wrong = {
        int(k): str(assignment[k]) for k in range(run.num_clients)
        if np.bincount(groups[assignment == assignment[k]]).argmax() != groups[k]
    }  # fmt: skip
    assert not wrong, (
        f"seed {seed}: clients in a cluster of the other group: {wrong} (ARI {ari:.3f})"
    )
    assert run.num_clusters >= 2, f"seed {seed}: no split"
    assert run.accuracy_worst > 0.5, f"seed {seed}: worst client {run.accuracy_worst:.3f}"
    if fingerprint() == MEASURED_ON:  # the machine of the docs' seeds 0-19: exactly two
        assert ari == 1.0, f"seed {seed}: ARI {ari:.3f} where seeds 0-19 measured 1.0"
