"""GPU transports under mpiexec: skipped, with the reason, where there is no GPU."""
import pytest

from ringlab.devices import cupy_module
from ringlab.launch import run_mpi

from test_executor import HERE

pytestmark = pytest.mark.skipif(cupy_module() is None, reason="no GPU here (cupy missing or sees no device)")


@pytest.mark.parametrize("transport", ["host", "cuda-aware", "ipc", "auto"])
@pytest.mark.parametrize("nranks", [2, 3])
def test_gpu_transport_matches_mpi(transport, nranks):
    done = run_mpi(nranks, [str(HERE / "check_gpu.py"), transport], timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"ok {nranks} ranks" in done.stdout
    print(done.stdout)
