"""Row a of ``distfl bench``, the baseline: FedAvg as a plain PyTorch loop.

One client after another, a fresh ``torch.optim.SGD`` per client and round, S steps on
random batches, then the sample-weighted average. Its time in local training is the time
from loading the global model into the client's model to the end of its S steps, summed
over clients; the rest of the loop (client sampling and averaging) is its overhead.
"""

from __future__ import annotations

import time

from distfl.tools.bench.common import rates, row
from distfl.tools.bench.workload import Workload, sgd_steps


def plain_loop(w: Workload) -> dict:
    """FedAvg written the way one writes it without a framework: the same clients (distfl's
    own partition), one after another, a fresh SGD per client per round, S steps on random
    batches, then the sample-weighted average of the client models."""
    import numpy as np
    import torch
    from torch import nn

    from distfl.data import load_clients, load_dataset, make_partition
    from distfl.models import build_model

    cfg = w.config(out="unused.h5")
    dataset = load_dataset(cfg)
    partition = make_partition(cfg, dataset)
    cpu = torch.device("cpu")
    data = load_clients(dataset, partition, range(w.clients), cpu, groups=cfg.groups, seed=w.seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(w.seed)
        model = build_model(
            w.model, dataset.input_shape, dataset.num_classes, hidden=cfg.model.hidden
        )
        loss_fn = nn.CrossEntropyLoss()
        lr = cfg.train.lr
        global_state = {k: v.detach().clone() for k, v in model.state_dict().items()}

        def local_train(k: int, round_index: int) -> int:
            model.load_state_dict(global_state)
            return sgd_steps(model, loss_fn, data[k], w, lr=lr, round_index=round_index, k=k)

        local_train(0, 0)  # warm-up, untimed (the global model is left as it was)
        rng = np.random.default_rng(w.seed)
        train_s = 0.0
        steps = 0
        t_start = time.perf_counter()
        for t in range(1, w.rounds + 1):
            chosen = np.sort(rng.choice(w.clients, size=w.per_round, replace=False))
            total = {k: torch.zeros_like(v) for k, v in global_state.items()}
            weight = 0
            for k in chosen:
                t0 = time.perf_counter()
                n = local_train(int(k), t)
                train_s += time.perf_counter() - t0
                steps += w.steps
                with torch.no_grad():
                    for name, v in model.state_dict().items():
                        total[name].add_(v, alpha=n)
                weight += n
            global_state = {k: v / weight for k, v in total.items()}
        wall = time.perf_counter() - t_start
    finally:
        torch.set_num_threads(threads)
    return rates(
        row(
            "plain",
            "plain PyTorch loop",
            rounds=w.rounds,
            client_steps=steps,
            wall_s=wall,
            train_s=train_s,
            overhead_note="client sampling and averaging",
            bytes_per_round=0,
            bytes_note="one process",
        )
    )
