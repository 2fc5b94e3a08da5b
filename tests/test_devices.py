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
    from ringlab.mpi.transports import _query_cuda_support, mpi_is_cuda_aware

    # the mpich wheel answers (MPIX_Query_cuda_support): not found would mean the lookup is broken,
    # and every GPU run would quietly fall back to staging through the host
    assert _query_cuda_support() is False
    monkeypatch.setenv("RINGLAB_CUDA_AWARE", "1")
    assert mpi_is_cuda_aware() is True
    monkeypatch.setenv("RINGLAB_CUDA_AWARE", "0")
    assert mpi_is_cuda_aware() is False


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
    assert devices.mps_running()
    assert devices.sharing(3).startswith(f"3 ranks share each GPU through MPS (control pipe in {tmp_path})")
    (tmp_path / "control").unlink()
    import socket

    with socket.socket(socket.AF_UNIX) as listening:  # newer daemons listen on a socket of that name
        listening.bind(str(tmp_path / "control"))
        assert devices.mps_running()
