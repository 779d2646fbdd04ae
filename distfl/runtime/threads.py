"""The threads of the numeric libraries a run uses, fixed by ``run.threads``.

torch's threads are set with ``torch.set_num_threads``. numpy's and scipy's BLAS (OpenBLAS
in their wheels, MKL in some builds) keep threads of their own, as many as the machine has
cores unless ``OPENBLAS_NUM_THREADS``/``OMP_NUM_THREADS`` says otherwise — and torchrun sets
``OMP_NUM_THREADS=1`` for each rank, ``mpiexec`` does not. A threaded BLAS call splits its
work by the thread count, and where it splits a sum (a long inner product, a blocked
factorisation) the last bits depend on it: on an AVX-512 CPU, the server's distances and
affinities differed between one process and a torchrun world. So for the length of
a run every loaded BLAS is limited to ``run.threads``, and one loaded during the run
(scipy's, on its first ``scipy.linalg`` import) starts with that many, through the
variables OpenBLAS and MKL read when they load."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

#: the variables a BLAS library reads once, when it is loaded
LOAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


@contextlib.contextmanager
def blas_threads(n: int) -> Iterator[None]:
    """numpy's and scipy's BLAS at ``n`` threads while the block runs; the loaded libraries'
    limits and the variables are restored after it (a library first loaded inside keeps
    ``n``)."""
    from threadpoolctl import ThreadpoolController

    saved = {name: os.environ.get(name) for name in LOAD_VARIABLES}
    os.environ.update({name: str(n) for name in LOAD_VARIABLES})
    try:
        with ThreadpoolController().limit(limits=n, user_api="blas"):
            yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
