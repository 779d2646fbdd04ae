"""What a process sets before it trains on a CUDA device, so that a run's bits repeat there.

The exact sums make the result independent of the order of the ranks' contributions (see
docs/launching.md, "The same bits on any world size"); what is left is the device's own
kernels. On CUDA torch picks, by default, some kernels whose floating-point sums depend on
thread scheduling (cuBLAS's split reductions, cuDNN's algorithms chosen by timing, atomic
adds). :func:`prepare_device` asks torch for the deterministic ones:

- ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` (unless it already holds ``:4096:8`` or ``:16:8``):
  cuBLAS gives the same bits for the same call only with a fixed workspace (NVIDIA's
  cuBLAS documentation, "Results reproducibility"). cuBLAS reads it when the process first
  uses it, so it is set before any CUDA work of the run;
- ``torch.use_deterministic_algorithms(True, warn_only=True)``: deterministic kernels
  where torch has them (scatter_add, index_add, convolutions, ...); an operation without
  one warns ("... does not have a deterministic implementation") instead of stopping the
  run, and its run's bits may then differ from run to run;
- ``torch.backends.cudnn.deterministic = True`` and ``benchmark = False``: cuDNN's
  algorithm is fixed, not chosen by timing;
- TF32 off for matrix products and convolutions (``torch.backends.cuda.matmul.allow_tf32``,
  ``torch.backends.cudnn.allow_tf32``): float32 stays float32, as on the CPU.

These are settings of the process (torch has no narrower scope), and they stay set after
the run. A process that used cuBLAS before it starts a run (a notebook that trained
something first, then calls :func:`distfl.run`) keeps its first workspace: set
``CUBLAS_WORKSPACE_CONFIG`` before that first use.
"""

from __future__ import annotations

import os

import torch

#: the cuBLAS workspace settings that make its results repeat (NVIDIA documents both)
DETERMINISTIC_WORKSPACES = (":4096:8", ":16:8")


def prepare_device(device: torch.device) -> torch.device:
    """Make this process train deterministically on ``device`` (on CUDA: the settings of
    this module's docstring; on any other device nothing changes). Returns ``device``."""
    if device.type != "cuda":
        return device
    if os.environ.get("CUBLAS_WORKSPACE_CONFIG") not in DETERMINISTIC_WORKSPACES:
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = DETERMINISTIC_WORKSPACES[0]
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return device


def deterministic_settings() -> dict[str, object]:
    """The settings :func:`prepare_device` makes, as this process has them now."""
    return {
        "CUBLAS_WORKSPACE_CONFIG": os.environ.get("CUBLAS_WORKSPACE_CONFIG", ""),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
        "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
        "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
    }


__all__ = ["DETERMINISTIC_WORKSPACES", "deterministic_settings", "prepare_device"]
