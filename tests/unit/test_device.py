"""What a process sets before it trains on CUDA (distfl.runtime.device), and that a run which
picks a CUDA device sets it. The settings are process-wide torch flags and one environment
variable, present in every torch build, so these run without a GPU; each test restores them.
"""

from __future__ import annotations

import os
import types

import pytest
import torch

from distfl import config as configs
from distfl.comm.local import LocalCommunicator
from distfl.runtime import roles
from distfl.runtime.device import deterministic_settings, prepare_device

#: what prepare_device leaves on CUDA
ON_CUDA = {
    "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
    "deterministic_algorithms": True,
    "warn_only": True,
    "cudnn_deterministic": True,
    "cudnn_benchmark": False,
    "matmul_allow_tf32": False,
    "cudnn_allow_tf32": False,
}


@pytest.fixture(autouse=True)
def settings(monkeypatch):
    """The process's settings as torch starts: nothing deterministic, TF32 for cuDNN, no
    workspace variable; put back as they were afterwards."""
    saved = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.benchmark,
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
    )
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    torch.use_deterministic_algorithms(False)
    torch.backends.cudnn.deterministic = False
    torch.backends.cudnn.allow_tf32 = True
    yield
    torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])
    (
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.benchmark,
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
    ) = saved[2:]


def test_cpu_changes_nothing():
    before = deterministic_settings()
    assert prepare_device(torch.device("cpu")) == torch.device("cpu")
    assert deterministic_settings() == before
    assert before["deterministic_algorithms"] is False


def test_cuda_asks_torch_for_deterministic_kernels():
    device = torch.device("cuda:1")
    assert prepare_device(device) is device
    assert deterministic_settings() == ON_CUDA
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"


@pytest.mark.parametrize(
    "given, kept",
    [(":16:8", ":16:8"), (":4096:8", ":4096:8"), (":0:0", ":4096:8"), ("", ":4096:8")],
)
def test_a_deterministic_workspace_already_set_is_kept(monkeypatch, given, kept):
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", given)
    prepare_device(torch.device("cuda"))
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == kept


def _pretend_one_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)


def test_a_run_on_cuda_sets_them_where_it_picks_the_device(monkeypatch):
    """run.device = "cuda" with a CPU communicator (one process, gloo or MPI): the clients'
    device is cuda:(local rank mod GPUs), and the settings are made there."""
    _pretend_one_gpu(monkeypatch)
    config = configs.load(overrides=['run.device="cuda"'])
    assert roles._train_device(config, LocalCommunicator()) == torch.device("cuda:0")
    assert deterministic_settings() == ON_CUDA


def test_a_run_whose_communicator_is_on_cuda_sets_them_too(monkeypatch):
    """NCCL: the communicator's device is the clients' device."""
    comm = types.SimpleNamespace(device=torch.device("cuda:0"), local_rank=0)
    assert roles._train_device(configs.load(), comm) == torch.device("cuda:0")
    assert deterministic_settings() == ON_CUDA


def test_a_run_on_the_cpu_sets_nothing(monkeypatch):
    _pretend_one_gpu(monkeypatch)
    config = configs.load(overrides=['run.device="cpu"'])
    before = deterministic_settings()
    assert roles._train_device(config, LocalCommunicator()) == torch.device("cpu")
    assert deterministic_settings() == before
