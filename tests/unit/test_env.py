"""Launcher detection from hand-made environments (nothing is initialised)."""

from __future__ import annotations

import pytest

from distfl.comm import resolve_backend
from distfl.comm.env import LaunchInfo, detect, expand_nodelist, slurm_port
from distfl.errors import ConfigError

# --------------------------------------------------------------------------- detect


def test_torchrun():
    env = {
        "RANK": "3",
        "WORLD_SIZE": "4",
        "LOCAL_RANK": "1",
        "MASTER_ADDR": "10.0.0.2",
        "MASTER_PORT": "29611",
        "LOCAL_WORLD_SIZE": "2",
        "GROUP_WORLD_SIZE": "2",
    }
    assert detect(env) == LaunchInfo(
        launcher="torchrun",
        rank=3,
        world_size=4,
        local_rank=1,
        master_addr="10.0.0.2",
        master_port=29611,
        num_hosts=2,
    )


def test_torchrun_defaults_for_missing_rendezvous():
    info = detect({"RANK": "0", "WORLD_SIZE": "2"})
    assert (info.launcher, info.rank, info.world_size, info.local_rank) == ("torchrun", 0, 2, 0)
    assert (info.master_addr, info.master_port) == ("127.0.0.1", 29500)


def test_torchrun_wins_over_slurm_and_mpi():
    env = {
        "RANK": "1",
        "WORLD_SIZE": "2",
        "OMPI_COMM_WORLD_SIZE": "5",
        "OMPI_COMM_WORLD_RANK": "4",
        "SLURM_STEP_ID": "0",
        "SLURM_PROCID": "7",
    }
    info = detect(env)
    assert (info.launcher, info.rank, info.world_size) == ("torchrun", 1, 2)


def test_open_mpi():
    env = {
        "OMPI_COMM_WORLD_RANK": "2",
        "OMPI_COMM_WORLD_SIZE": "6",
        "OMPI_COMM_WORLD_LOCAL_RANK": "0",
    }
    assert detect(env) == LaunchInfo(launcher="mpi", rank=2, world_size=6, local_rank=0)
    assert detect(env).master_addr == ""


def test_open_mpi_wins_over_slurm_step():
    env = {
        "OMPI_COMM_WORLD_RANK": "1",
        "OMPI_COMM_WORLD_SIZE": "3",
        "OMPI_COMM_WORLD_LOCAL_RANK": "1",
        "SLURM_STEP_ID": "0",
        "SLURM_PROCID": "1",
        "SLURM_STEP_NUM_TASKS": "3",
        "SLURM_JOB_NODELIST": "n1",
    }
    info = detect(env)
    assert (info.launcher, info.rank, info.world_size, info.local_rank) == ("mpi", 1, 3, 1)


def test_pmi_hydra():
    env = {"PMI_RANK": "5", "PMI_SIZE": "8", "MPI_LOCALRANKID": "1"}
    assert detect(env) == LaunchInfo(launcher="mpi", rank=5, world_size=8, local_rank=1)


def test_pmi_local_rank_from_slurm_or_default():
    info = detect({"PMI_RANK": "1", "PMI_SIZE": "2", "SLURM_LOCALID": "1"})
    assert info.local_rank == 1
    info = detect({"PMI_RANK": "1", "PMI_SIZE": "2"})
    assert info.local_rank == 0
    info = detect({"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "x"})
    assert info.local_rank == 0


def test_pmi_needs_both_rank_and_size():
    assert detect({"PMI_SIZE": "4"}).launcher == "single"


def test_slurm_step():
    env = {
        "SLURM_STEP_ID": "0",
        "SLURM_PROCID": "2",
        "SLURM_STEP_NUM_TASKS": "3",
        "SLURM_LOCALID": "0",
        "SLURM_JOB_NODELIST": "node[03-05]",
        "SLURM_JOB_ID": "123456",
        "SLURM_NTASKS": "3",
    }
    info = detect(env)
    assert info.launcher == "slurm"
    assert (info.rank, info.world_size, info.local_rank) == (2, 3, 0)
    assert info.master_addr == "node03"
    # 15000 + 123456 % 20000 = 15000 + 3456
    assert info.master_port == 18456
    assert info.num_hosts == 1  # the step's node count not given
    assert detect({**env, "SLURM_JOB_NUM_NODES": "3"}).num_hosts == 3
    assert detect({**env, "SLURM_JOB_NUM_NODES": "3", "SLURM_STEP_NUM_NODES": "2"}).num_hosts == 2


def test_slurm_port_hand_computed():
    assert slurm_port({"SLURM_JOB_ID": "123456"}) == 18456
    assert slurm_port({"SLURM_JOB_ID": "20000"}) == 15000
    assert slurm_port({"SLURM_JOB_ID": "39999"}) == 34999
    assert slurm_port({}) == 15000
    # two jobs sharing a node get different ports
    assert slurm_port({"SLURM_JOB_ID": "1001"}) != slurm_port({"SLURM_JOB_ID": "1002"})


def test_slurm_step_overrides():
    env = {
        "SLURM_STEP_ID": "1",
        "SLURM_PROCID": "0",
        "SLURM_NTASKS": "4",
        "SLURM_STEP_NODELIST": "gpu[7-8]",
        "SLURM_JOB_NODELIST": "gpu[1-8]",
        "SLURM_JOB_ID": "5",
        "MASTER_PORT": "4000",
        "MASTER_ADDR": "head",
    }
    info = detect(env)
    assert info.world_size == 4  # SLURM_NTASKS when the step count is absent
    assert info.master_addr == "head"
    assert info.master_port == 4000
    del env["MASTER_ADDR"]
    assert detect(env).master_addr == "gpu7"  # the step's nodes, not the job's


def test_slurm_step_without_nodelist():
    info = detect({"SLURM_STEP_ID": "0", "SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "2"})
    assert info.master_addr == "127.0.0.1"
    assert info.world_size == 2


def test_sbatch_script_is_single():
    env = {
        "SLURM_PROCID": "0",
        "SLURM_JOB_ID": "42",
        "SLURM_NTASKS": "8",
        "SLURM_JOB_NODELIST": "node[01-02]",
        "SLURM_LOCALID": "0",
    }
    info = detect(env)
    assert info == LaunchInfo(launcher="single", rank=0, world_size=1, local_rank=0)


def test_empty_env_is_single():
    info = detect({})
    assert info.launcher == "single"
    assert (info.rank, info.world_size, info.local_rank) == (0, 1, 0)
    assert info.default_backend == "local"


def test_non_integer_variable_names_the_variable():
    with pytest.raises(ValueError, match="WORLD_SIZE"):
        detect({"RANK": "0", "WORLD_SIZE": "four"})


def test_detect_defaults_to_os_environ(monkeypatch):
    for key in (
        "RANK",
        "WORLD_SIZE",
        "OMPI_COMM_WORLD_SIZE",
        "PMI_SIZE",
        "PMI_RANK",
        "SLURM_STEP_ID",
    ):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    info = detect()
    assert (info.launcher, info.rank, info.world_size) == ("torchrun", 1, 3)


# --------------------------------------------------------------------------- expand_nodelist


@pytest.mark.parametrize(
    "nodelist, hosts",
    [
        ("a1", ["a1"]),
        ("gpu[01-03,07],cpu5", ["gpu01", "gpu02", "gpu03", "gpu07", "cpu5"]),
        ("n[8-10]", ["n8", "n9", "n10"]),
        ("n[08-10]", ["n08", "n09", "n10"]),
        ("n[098-101]", ["n098", "n099", "n100", "n101"]),
        ("rack1-n[1-2]", ["rack1-n1", "rack1-n2"]),
        ("a,b,c", ["a", "b", "c"]),
        ("x[1-2]y", ["x1y", "x2y"]),
        ("r[1-2]n[3-4]", ["r1n3", "r1n4", "r2n3", "r2n4"]),
        ("n[5]", ["n5"]),
        ("", []),
        ("gpu[1-2],gpu[5-6]", ["gpu1", "gpu2", "gpu5", "gpu6"]),
    ],
)
def test_expand_nodelist(nodelist, hosts):
    assert expand_nodelist(nodelist) == hosts


# --------------------------------------------------------------------------- backends


@pytest.mark.parametrize(
    "launcher, world, backend",
    [
        ("single", 1, "local"),
        ("torchrun", 1, "local"),
        ("mpi", 1, "local"),
        ("torchrun", 4, "torch"),
        ("slurm", 4, "torch"),
        ("mpi", 4, "mpi"),
    ],
)
def test_default_backend(launcher, world, backend):
    info = LaunchInfo(launcher=launcher, rank=0, world_size=world, local_rank=0)
    assert info.default_backend == backend


def test_resolve_backend_auto():
    mpi = LaunchInfo(launcher="mpi", rank=0, world_size=3, local_rank=0)
    assert resolve_backend("auto", mpi) == "mpi"
    tr = LaunchInfo("torchrun", 0, 3, 0, "127.0.0.1", 29500)
    assert resolve_backend("auto", tr) == "torch"
    assert resolve_backend("mpi", tr) == "mpi"
    single = LaunchInfo("single", 0, 1, 0)
    assert resolve_backend("auto", single) == "local"
    assert resolve_backend("local", single) == "local"


def test_resolve_backend_local_with_many_ranks():
    info = LaunchInfo(
        launcher="torchrun",
        rank=0,
        world_size=3,
        local_rank=0,
        master_addr="127.0.0.1",
        master_port=29500,
    )
    with pytest.raises(ConfigError) as err:
        resolve_backend("local", info)
    assert "comm.backend" in str(err.value)
    assert "3" in str(err.value)


def test_resolve_backend_torch_without_rendezvous():
    info = LaunchInfo(launcher="mpi", rank=0, world_size=3, local_rank=0)
    with pytest.raises(ConfigError, match="comm.backend"):
        resolve_backend("torch", info)


def test_torch_backend_in_a_slurm_step_ignores_pmi_vars():
    """Clusters with MpiDefault=pmi2 set PMI_* in every srun step; --comm torch must still
    take its rank, world and rendezvous from the step's Slurm variables."""
    env = {
        "PMI_RANK": "1",
        "PMI_SIZE": "3",
        "SLURM_STEP_ID": "0",
        "SLURM_PROCID": "1",
        "SLURM_STEP_NUM_TASKS": "3",
        "SLURM_LOCALID": "1",
        "SLURM_JOB_ID": "42",
        "SLURM_JOB_NODELIST": "cn[07-08]",
    }
    assert detect(env).launcher == "mpi"
    info = detect(env, backend="torch")
    assert info.launcher == "slurm"
    assert (info.rank, info.world_size, info.local_rank) == (1, 3, 1)
    assert info.master_addr == "cn07"
    assert info.master_port == 15000 + 42
    # torchrun's own variables still win over Slurm's
    torchrun = {**env, "RANK": "2", "WORLD_SIZE": "4", "MASTER_ADDR": "h", "MASTER_PORT": "1"}
    assert detect(torchrun, backend="torch").launcher == "torchrun"


def test_gloo_backend_is_torch_distributed_with_gloo():
    """comm.backend = "gloo": torch.distributed as for "torch", with the same rendezvous
    needs, and the same Slurm-step reading of the launch."""
    tr = LaunchInfo("torchrun", 0, 2, 0, "127.0.0.1", 29500)
    assert resolve_backend("gloo", tr) == "gloo"
    assert resolve_backend("gloo", LaunchInfo("single", 0, 1, 0)) == "gloo"
    with pytest.raises(ConfigError, match="comm.backend = 'gloo' needs a rendezvous address"):
        resolve_backend("gloo", LaunchInfo(launcher="mpi", rank=0, world_size=3, local_rank=0))
    step = {"PMI_RANK": "1", "PMI_SIZE": "2", "SLURM_STEP_ID": "0", "SLURM_PROCID": "1",
            "SLURM_STEP_NUM_TASKS": "2", "SLURM_JOB_NODELIST": "cn1"}  # fmt: skip
    assert detect(step, backend="gloo").launcher == "slurm"


@pytest.mark.parametrize(
    "backend, use_cuda, cuda_present, nccl",
    [
        ("torch", True, True, True),  # NCCL where CUDA is present
        ("torch", True, False, False),
        ("torch", False, True, False),  # run.device = "cpu"
        ("gloo", True, True, False),  # gloo whatever the device: ranks may share a GPU
        ("gloo", False, False, False),
    ],
)
def test_which_torch_backend_a_communicator_gets(
    monkeypatch, backend, use_cuda, cuda_present, nccl
):
    import torch

    from distfl.comm import make_communicator, torch_dist

    built = {}

    class Recorder:
        def __init__(self, info, *, timeout_s, use_cuda):
            built.update(info=info, use_cuda=use_cuda)

    monkeypatch.setattr(torch_dist, "TorchCommunicator", Recorder)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda_present)
    info = LaunchInfo("torchrun", 1, 2, 1, "127.0.0.1", 29500)
    comm = make_communicator(backend, timeout_s=5.0, use_cuda=use_cuda, info=info)
    assert isinstance(comm, Recorder)
    assert built == {"info": info, "use_cuda": nccl}
