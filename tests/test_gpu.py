"""GPU transports under mpiexec: skipped, with the reason, where there is no GPU.

The multi-rank tests run at 2 and 3 ranks; ``RINGLAB_GPU_TEST_RANKS=2,4`` picks other counts (on a
machine with one GPU every rank shares it: in time slices, or through MPS where its daemon runs).
"""
import os

import pytest

from ringlab.mpi.devices import cupy_module
from ringlab.cluster.launch import run_mpi

from test_executor import HERE

pytestmark = pytest.mark.skipif(cupy_module() is None, reason="no GPU here (cupy missing or sees no device)")
RANKS = [int(n) for n in os.environ.get("RINGLAB_GPU_TEST_RANKS", "2,3").split(",") if n.strip()]


@pytest.mark.parametrize("transport", ["host", "cuda-aware", "ipc", "auto"])
@pytest.mark.parametrize("nranks", RANKS)
def test_gpu_transport_matches_mpi(transport, nranks):
    done = run_mpi(nranks, [str(HERE / "check_gpu.py"), transport], timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"ok {nranks} ranks" in done.stdout
    print(done.stdout)


@pytest.mark.parametrize("nranks", RANKS)
def test_gpu_alltoallv_on_cupy_arrays_matches_the_numpy_call(nranks):
    done = run_mpi(nranks, [str(HERE / "check_gpu_alltoallv.py")], timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"ok {nranks} ranks" in done.stdout


def test_gpu_copies_are_measured_against_their_link_peak(capsys):
    from ringlab.measure.recorded import gpu_bandwidth

    shown = gpu_bandwidth()
    assert shown["source"] == "measured here"
    rows = shown["host_device"]
    assert {(r["what"], r["pinned"]) for r in rows} == {(w, p) for w in ("host->device", "device->host",
                                                                          "both ways at once") for p in (True, False)}
    assert all(r["Bps"] > 0 for r in rows) and shown["device_copy_Bps"] > 0
    assert all(r["peak_Bps"] is None or r["Bps"] < 1.2 * r["peak_Bps"] for r in rows)  # nothing beats its link
    assert "measured here on" in capsys.readouterr().out


@pytest.mark.timeout(600)
def test_gpu_bench_runs_and_checks_every_result():
    from ringlab.measure.recorded import gpu_bench

    sweep = gpu_bench("allreduce", sizes="-b 64K -e 1M -f 4")
    assert sweep.label == "measured here" and sweep.data["gpu"] is True
    assert sweep.data["rows"] and all(r["wrong"] == 0 for r in sweep.data["rows"])


def _torch_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.mark.skipif(not _torch_cuda(), reason="torch cannot use the GPU here")
@pytest.mark.parametrize("transport,overlap", [("auto", "overlap"), ("host", "no-overlap")])
@pytest.mark.parametrize("nranks", RANKS)
def test_gpu_training_matches_ddp(transport, overlap, nranks):
    done = run_mpi(nranks, [str(HERE / "check_gpu_train.py"), transport, overlap], timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"ok {nranks} ranks" in done.stdout
    print(done.stdout)


@pytest.mark.parametrize("nranks", RANKS)
def test_gpu_ranks_are_bound_before_their_first_line(nranks):
    """The job's runner binds every rank (local rank modulo the GPUs here); a collective on an array leaves the
    caller's GPU current; sharing is counted from the GPUs' bus ids, and NCCL is refused only for sharing."""
    import json

    from ringlab.mpi.devices import gpu_count

    done = run_mpi(nranks, [str(HERE / "gpusim_bind.py")], timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("[")))
    gpus = gpu_count()
    assert [r["device"] for r in rows] == [rank % gpus for rank in range(nranks)]
    assert all(r["current_after"] == [0, 0] and r["total"] == [nranks * k for k in range(4)] for r in rows)
    shared = -(-nranks // gpus)
    assert all(r["per_gpu"] == shared for r in rows)
    assert all(("share one" in r["nccl_refused"]) == (shared > 1) for r in rows)
    assert (f"{nranks} ranks share {gpus} GPU(s)" in done.stderr) == (shared > 1)
