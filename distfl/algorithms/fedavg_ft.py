"""FedAvg with local fine-tuning before each evaluation (FL-bench's ``finetune_epoch``; the
baseline that JedMills/MTFL issue 9 finds matching personalised methods).

Training is FedAvg's, bit for bit: the same sampling generator (seed and stream) as
``none``, the same aggregation, so that the global model of a ``fedavg_ft`` run is the one
of a ``none`` run of the same seed. At each evaluation each evaluated client first takes
``finetune_steps`` local steps from the global model, on its own train split, with the
run's optimiser settings (``train.optimizer``, ``lr``, ``momentum`` or Adam's keys,
``weight_decay``, ``batch_size``, ``prox_mu``) and trainer, seeded from (seed, round,
client) alone, so that one process and any world size give the same bits; then it is
measured on its test split. The fine-tuned
models are dropped: the global model is not changed, and the next round trains from it.

Where this differs from FL-bench: FL-bench counts fine-tuning in epochs over the client's
train loader (``finetune_epoch``, 0 by default: no fine-tuning), here it is counted in
local steps; the default, 0, means as many steps as a round's local training
(``train.local_steps``), FL-bench with ``finetune_epoch`` equal to ``local_epoch``.
FL-bench keeps each client's optimiser state (SGD's momentum buffers) from the client's
last training and loads it before the client trains or fine-tunes again (``opt_state_dict``
in its ``src/client/fedavg.py``); here every training and every fine-tuning starts with a
fresh optimiser, as every algorithm of distfl does. With SGD without momentum (the
default) the two agree; with momentum or Adam they differ.
"""

from __future__ import annotations

from dataclasses import dataclass

from distfl.algorithms import api
from distfl.algorithms.common.plain import GlobalModel

#: the most fine-tuning steps (as EMD-CFL's local steps before its distances)
MAX_FINETUNE_STEPS = 1_000_000


@dataclass(frozen=True)
class FedAvgFTParams(api.Params):
    finetune_steps: int = api.setting(
        0,
        f"0..{MAX_FINETUNE_STEPS:,}",
        "local steps each evaluated client takes from the global model on its own train "
        "split before it is measured (the global model is not changed); 0: as many as a "
        "round's local training, `train.local_steps`",
    )

    def check(self, config) -> None:
        steps = self.finetune_steps
        api.require(
            isinstance(steps, int) and not isinstance(steps, bool)
            and 0 <= steps <= MAX_FINETUNE_STEPS,
            "finetune_steps", steps,
            f"an integer from 0 (train.local_steps) to {MAX_FINETUNE_STEPS:,}",
        )  # fmt: skip


@api.register
class FedAvgFT(GlobalModel):
    name = "fedavg_ft"
    Params = FedAvgFTParams
    #: the key of the steps of evaluation_finetune (the size check names it)
    finetune_key = "finetune_steps"
    newcomers = ("the global model, fine-tuned on its own train split before it is measured, "
                 "as every client")  # fmt: skip

    @classmethod
    def evaluation_finetune(cls, params: api.Params, *, local_steps: int) -> int:
        return int(params.finetune_steps) or int(local_steps)


__all__ = ["FedAvgFT", "FedAvgFTParams"]
