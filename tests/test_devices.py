import numpy as np
import pytest

from ringlab.mpi import devices
from ringlab.measure.timing import bandwidths


def test_numpy_is_the_default():
    assert devices.array_module(np.ones(2)) is np
    assert not devices.is_device_array(np.ones(2))
    devices.wait_for_gpu(np.ones(2))  # a no-op for host arrays


@pytest.mark.skipif(devices.cupy_module() is not None, reason="this machine has a GPU")
def test_without_a_gpu_everything_is_host_memory():
    assert devices.gpu_count() == 0
    assert devices.bind_device() is None
    buf = devices.pinned_empty(10, np.float32)
    assert isinstance(buf, np.ndarray) and buf.shape == (10,) and buf.dtype == np.float32


def test_bus_bandwidth_factors_follow_nccl_tests():
    assert bandwidths("allreduce", 1000, 1.0, 4) == (1000.0, 1500.0)
    assert bandwidths("allgather", 1000, 1.0, 4)[1] == 750.0
    assert bandwidths("broadcast", 1000, 2.0, 8) == (500.0, 500.0)
    with pytest.raises(ValueError, match="no bus factor for 'gossip'"):
        bandwidths("gossip", 1, 1.0, 2)


def test_the_mpi_library_itself_is_asked_whether_it_is_cuda_aware(monkeypatch):
    from ringlab.mpi.devices import mpi_is_cuda_aware, query_cuda_support

    # the mpich wheel answers (MPIX_Query_cuda_support): not found would mean the lookup is broken,
    # and every GPU run would quietly fall back to staging through the host
    assert query_cuda_support() is False
    monkeypatch.delenv("RINGLAB_CUDA_AWARE", raising=False)
    assert mpi_is_cuda_aware() is False
    monkeypatch.setenv("RINGLAB_CUDA_AWARE", "0")
    assert mpi_is_cuda_aware() is False
    monkeypatch.setenv("RINGLAB_CUDA_AWARE", "force")  # the user knows better than the query
    assert mpi_is_cuda_aware() is True


CLAIMED = ["RINGLAB_CUDA_AWARE=1", "the library itself says it cannot", "segmentation fault",
           "Unset RINGLAB_CUDA_AWARE to stage GPU buffers through host memory", "RINGLAB_CUDA_AWARE=force"]


@pytest.fixture(autouse=True)
def _gathered_by_the_fake(monkeypatch):
    """The network path gathers with deadlines.allgather (non-blocking collectives, real MPI): here the fake
    communicator below answers the gathering itself."""
    from ringlab.mpi import transports

    monkeypatch.setattr(transports, "allgather", lambda comm, obj, what, limit: comm.allgather(obj))


class _Ranks:
    """A communicator of this rank (0) and others whose answers to an allgather are given."""

    def __init__(self, others):
        self.others = others

    def allgather(self, mine):
        return [mine, *self.others]

    def Get_size(self):
        return 1 + len(self.others)

    def Get_rank(self):
        return 0


def said(transports) -> str:
    """What ``ringlab doctor`` says about CUDA-aware MPI."""
    return next(line for line in transports.describe() if line.startswith("cuda-aware:"))


def test_cuda_aware_claimed_against_the_mpi_librarys_answer_is_an_error_on_every_rank(monkeypatch):
    """RINGLAB_CUDA_AWARE=1 where MPI itself says no would segfault on the first GPU buffer: it is one
    ValueError, naming the setting, MPI's answer and both ways out, on every rank (the choice is
    collective, so a rank without the setting raises it too); force takes the cuda-aware path."""
    from ringlab.mpi import devices, transports

    monkeypatch.setenv("RINGLAB_CUDA_AWARE", "1")
    with pytest.raises(ValueError) as refused:
        devices.mpi_is_cuda_aware()
    assert all(part in str(refused.value) for part in CLAIMED), refused.value
    assert said(transports).startswith("cuda-aware: refused: RINGLAB_CUDA_AWARE=1")
    with pytest.raises(ValueError) as everywhere:
        transports._network_path(_Ranks([None, str(refused.value)]))
    assert str(everywhere.value) == f"{refused.value} (on ranks 0, 2 of 3)"
    monkeypatch.delenv("RINGLAB_CUDA_AWARE")  # this rank is fine; rank 2 is not: the same error here
    with pytest.raises(ValueError) as here:
        transports._network_path(_Ranks([None, str(refused.value)]))
    assert str(here.value) == f"{refused.value} (on rank 2 of 3)"
    assert transports._network_path(_Ranks([None, None])) == "host"
    monkeypatch.setenv("RINGLAB_CUDA_AWARE", "force")
    assert transports._network_path(_Ranks([None, None])) == "cuda-aware"
    assert said(transports) == "cuda-aware: yes (RINGLAB_CUDA_AWARE=force; the MPI library says it cannot)"
    # the MPI library cannot say: =1 is trusted, as before
    monkeypatch.setattr(devices, "query_cuda_support", lambda: None)
    monkeypatch.setenv("RINGLAB_CUDA_AWARE", "1")
    assert devices.mpi_is_cuda_aware() is True and transports._network_path(_Ranks([None])) == "cuda-aware"


def test_a_cuda_aware_setting_it_does_not_take_is_an_error_on_every_rank(monkeypatch):
    """RINGLAB_CUDA_AWARE=true (or yes, or on) would have been ignored, staging through the host while the user
    believed otherwise: it is a ValueError naming the three values, on every rank, and doctor says so."""
    from ringlab.mpi import devices, transports

    for value in ("true", "yes", "2"):
        monkeypatch.setenv("RINGLAB_CUDA_AWARE", value)
        with pytest.raises(ValueError, match=f"RINGLAB_CUDA_AWARE must be 0 .* 1 .* or force .*, or unset; got '{value}'"):
            devices.mpi_is_cuda_aware()
        with pytest.raises(ValueError, match="on ranks 0, 1, 2 of 3"):
            transports._network_path(_Ranks([f"RINGLAB_CUDA_AWARE must be ... got '{value}'"] * 2))
        assert said(transports).startswith(f"cuda-aware: refused: RINGLAB_CUDA_AWARE must be 0")
    monkeypatch.setenv("RINGLAB_CUDA_AWARE", " ")  # empty: as if unset
    assert devices.mpi_is_cuda_aware() is (devices.query_cuda_support() is True)


def test_mps_is_found_by_its_control_pipe_and_changes_what_sharing_a_gpu_means(tmp_path, monkeypatch):
    import os

    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path))
    assert devices.mps_pipe() == str(tmp_path) and not devices.mps_running()
    assert devices.sharing(1) is None
    alone = devices.sharing(2)
    assert alone.startswith("2 ranks share each GPU without MPS") and "nvidia-cuda-mps-control -d" in alone
    (tmp_path / "control").write_text("")  # a plain file is not the daemon's pipe
    assert not devices.mps_running()
    (tmp_path / "control").unlink()
    os.mkfifo(tmp_path / "control")
    assert not devices.mps_running()  # a pipe left behind by a daemon that has gone: nobody reads it
    daemon = os.open(tmp_path / "control", os.O_RDONLY | os.O_NONBLOCK)  # the daemon reads its pipe
    try:
        assert devices.mps_running()
        assert devices.sharing(3).startswith(f"3 ranks share each GPU through MPS (control pipe in {tmp_path})")
    finally:
        os.close(daemon)
    assert not devices.mps_running()
    (tmp_path / "control").unlink()
    import socket

    with socket.socket(socket.AF_UNIX) as listening:  # newer daemons listen on a socket of that name
        listening.bind(str(tmp_path / "control"))
        assert not devices.mps_running()  # bound, nobody accepting: a daemon that has gone
        listening.listen()
        assert devices.mps_running()


def _fake_nvidia_smi(folder, version: str):
    """An nvidia-smi on PATH that prints the header line a driver of CUDA ``version`` prints."""
    tool = folder / "nvidia-smi"
    tool.write_text(f"#!/bin/sh\necho '| NVIDIA-SMI 580.159.04   Driver Version: 580.159.04   CUDA Version: {version} |'\n")
    tool.chmod(0o755)
    return str(folder)


def test_one_install_command_per_cuda_major_of_the_driver(monkeypatch, tmp_path):
    import os

    assert devices.gpu_extra(12) == "gpu-cuda12" and devices.gpu_extra(13) == "gpu-cuda13"
    assert devices.gpu_extra(11) is None and devices.gpu_extra(None) is None
    assert "pip install -e '.[gpu-cuda13]'" in devices.install_advice(13)
    assert "pip install -e '.[gpu-cuda12]'" in devices.install_advice(12)
    assert "older than ringlab's GPU packages need" in devices.install_advice(11)
    # the driver's CUDA version read from nvidia-smi (NVML, tried first, has no driver here)
    monkeypatch.setenv("PATH", _fake_nvidia_smi(tmp_path, "13.0") + os.pathsep + os.environ["PATH"])
    assert devices.driver_cuda_major() == 13
    assert "gpu-cuda13" in devices.install_advice()


def test_pyproject_has_a_gpu_extra_per_cuda_major_with_the_toolkit_wheels():
    import tomllib
    from pathlib import Path

    extras = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(r.startswith("cupy-cuda12x[ctk]") for r in extras["gpu-cuda12"])
    assert any(r.startswith("nvidia-nccl-cu12") for r in extras["gpu-cuda12"])
    assert any(r.startswith("cupy-cuda13x[ctk]") for r in extras["gpu-cuda13"])
    assert any(r.startswith("nvidia-nccl-cu13") for r in extras["gpu-cuda13"])


def test_dev_py_gpu_picks_the_extra_from_the_driver_and_refuses_without_one(monkeypatch, tmp_path):
    import importlib.util
    import os
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("dev", Path(__file__).parents[1] / "dev.py")
    dev = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dev)
    monkeypatch.setenv("PATH", _fake_nvidia_smi(tmp_path, "12.8") + os.pathsep + os.environ["PATH"])
    assert dev.driver_cuda_major() == 12
    with pytest.raises(SystemExit, match="no NVIDIA driver here"):
        dev.install_gpu(None)
    with pytest.raises(SystemExit, match="need a driver for CUDA 12 or 13"):
        dev.install_gpu(11)
    ran = []
    monkeypatch.setattr(dev, "run", ran.append)
    monkeypatch.setattr(dev, "VENV", tmp_path / "venv")
    monkeypatch.setattr(dev, "GPU_STAMP", tmp_path / "gpu-stamp")
    monkeypatch.setattr(dev, "STAMP", tmp_path / "stamp")
    dev.install_gpu(13)
    assert ran[0][-3:] == ["-q", "cupy-cuda12x", "nvidia-nccl-cu12"]  # the other major's wheels go first
    assert ran[1][-1].endswith("[gpu-cuda13]") and (tmp_path / "gpu-stamp").read_text() == "gpu-cuda13"
    assert "gpu-cuda13" in dev.extras() and "gpu-check" not in dev.extras()  # later installs keep it


def test_the_doctor_names_the_install_command_where_a_driver_has_no_cupy(monkeypatch, tmp_path):
    import os

    from ringlab.measure.doctor import report

    if devices.cupy_module() is not None:
        pytest.skip("this machine has a usable GPU")
    sign = tmp_path / "nvidiactl"
    sign.write_text("")
    monkeypatch.setattr(devices, "DRIVER_SIGNS", (str(sign),))
    monkeypatch.setenv("PATH", _fake_nvidia_smi(tmp_path, "13.0") + os.pathsep + os.environ["PATH"])
    line = next(line for line in report() if line.startswith("GPUs:"))
    assert "numpy buffers" in line and "pip install -e '.[gpu-cuda13]'" in line


def test_host_buffers_for_a_gpu_are_made_on_its_numa_nodes_cpus(monkeypatch, tmp_path):
    """local_cpulist in sysfs says which CPUs are near a PCI device; the measurement runs there, then returns."""
    import os

    from ringlab.measure import bandwidth

    folder = tmp_path / "0000:19:00.0"
    folder.mkdir()
    (folder / "local_cpulist").write_text("0-3,8,10-11\n")
    assert bandwidth.local_cpus("00000000:19:00.0", root=str(tmp_path)) == {0, 1, 2, 3, 8, 10, 11}
    assert bandwidth.local_cpus("0000:3b:00.0", root=str(tmp_path)) is None  # Linux does not say: None
    assert bandwidth._cpu_list({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11"
    before = os.sched_getaffinity(0)
    near = {min(before)}
    monkeypatch.setattr(bandwidth, "local_cpus", lambda bus: near)
    with bandwidth.placed_near("0000:19:00.0") as cpus:
        assert cpus == near and os.sched_getaffinity(0) == near
    assert os.sched_getaffinity(0) == before
    monkeypatch.setattr(bandwidth, "local_cpus", lambda bus: {max(before) + 1000})  # CPUs this process may not use
    with bandwidth.placed_near("0000:19:00.0") as cpus:
        assert cpus is None and os.sched_getaffinity(0) == before
