"""Every GPU path of the executor and the optimizer, under mpiexec, on the CPU stand-in for cupy.

The stand-in (tests/gpusim) queues device work on streams and lands it only when they are
synchronised, so a missing synchronisation gives a wrong answer here. Figures it produces are
CPU time and are never shown as GPU measurements; these tests check results and structure.
"""
import pytest

from gpusim_support import SCRIPTS, run_gpusim, run_python

pytestmark = pytest.mark.gpusim

TRANSPORTS = {"host": {}, "cuda-aware": {"cuda_aware": True}, "ipc": {}}


def ok(done, expected: str) -> str:
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert expected in done.stdout, done.stdout
    return done.stdout


@pytest.mark.parametrize("nranks", [2, 3, 4])
@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
def test_every_collective_and_algorithm_on_device_arrays(transport, nranks):
    """host (staged through pinned memory), cuda-aware (MPI reads device pointers through
    __cuda_array_interface__) and ipc (peers' memory mapped over shared memory), each on its own GPU."""
    done = run_gpusim(nranks, [str(SCRIPTS / "gpusim_collectives.py"), transport], **TRANSPORTS[transport])
    assert f"via {transport} ({transport} asked)" in ok(done, f"ok {nranks} ranks")


@pytest.mark.parametrize("transport", ["host", "ipc"])
def test_ranks_sharing_one_gpu(transport):
    """Three ranks on one visible GPU: ipc between processes on the same device, staging through one device."""
    done = run_gpusim(3, [str(SCRIPTS / "gpusim_collectives.py"), transport, "quick"], CUDA_VISIBLE_DEVICES="0")
    assert "1 GPU(s) visible" in ok(done, "ok 3 ranks")


def test_ipc_where_each_rank_sees_only_its_own_gpu():
    """CUDA opens IPC handles of GPUs a process cannot see; NVML (which sees them all) vouches for peer access."""
    done = run_gpusim(3, [str(SCRIPTS / "gpusim_collectives.py"), "auto", "quick", "own-gpu"])
    assert "via ipc (auto asked)" in ok(done, "ok 3 ranks") and "1 GPU(s) visible" in done.stdout


def test_auto_picks_ipc_on_one_node_and_cuda_aware_mpi_when_told():
    done = run_gpusim(2, [str(SCRIPTS / "gpusim_collectives.py"), "auto", "quick"])
    assert "via ipc (auto asked)" in ok(done, "ok 2 ranks")


def test_without_peer_access_ipc_is_refused_on_every_rank():
    """The 2x RTX 2080 Ti box: P2P not supported, so auto uses host and ipc is a clear error."""
    ok(run_gpusim(2, [str(SCRIPTS / "gpusim_misuse.py"), "ipc-unreachable"], machine="rtx2080ti-2"),
       "ok ipc-unreachable")


@pytest.mark.parametrize("transport", ["host", "cuda-aware"])
def test_one_process_on_two_gpus_keeps_a_buffer_per_gpu(transport):
    """Scratch and staging buffers are kept per GPU: the 4090 box has no peer access, so a buffer of
    the other GPU would be refused."""
    ok(run_gpusim(2, [str(SCRIPTS / "gpusim_two_gpus.py"), transport], machine="rtx4090-8",
                  cuda_aware=transport == "cuda-aware"), "ok: 2 ranks")


@pytest.mark.parametrize("machine, says", [
    ("h100-hgx-8", ["every pair of the 8 GPUs", "auto picks: ipc for ranks all on this node"]),
    ("rtx2080ti-2", ["0 of 1 GPU pairs; not gpu0-gpu1", "auto picks: not ipc"]),
])
def test_doctor_says_why_a_transport_is_chosen(machine, says):
    done = run_python(["-m", "ringlab", "doctor"], machine=machine)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("transport:")]
    assert all(any(text in line for line in lines) for text in says), lines
    assert any("cuda-aware: no (the MPI library says so" in line for line in lines), lines


@pytest.mark.parametrize("case", ["mixed", "out-elsewhere"])
def test_device_misuse_is_the_same_error_everywhere(case):
    ok(run_gpusim(3, [str(SCRIPTS / "gpusim_misuse.py"), case]), f"ok {case}")


@pytest.mark.parametrize("nranks", [2, 3])
@pytest.mark.parametrize("overlap", ["overlap", "no-overlap"])
@pytest.mark.parametrize("transport", ["host", "ipc"])
def test_distributed_optimizer_device_path_averages_like_numpy(transport, overlap, nranks):
    """Backward writes gradients on torch's stream; the optimizer must wait for them with events."""
    ok(run_gpusim(nranks, [str(SCRIPTS / "gpusim_optimizer.py"), transport, overlap]), f"ok {nranks} ranks")


@pytest.mark.parametrize("nranks, per_node, cuda_aware", [(4, 2, False), (3, 2, True)])
def test_on_simulated_nodes_ipc_joins_only_the_ranks_of_a_node(nranks, per_node, cuda_aware):
    """RINGLAB_RANKS_PER_NODE: every algorithm and collective on device arrays equals numpy through
    ipc inside a node and the network path (host, or cuda-aware MPI) between nodes."""
    network = "cuda-aware" if cuda_aware else "host"
    done = run_gpusim(nranks, [str(SCRIPTS / "gpusim_collectives.py"), "ipc", "quick"], cuda_aware=cuda_aware,
                      RINGLAB_RANKS_PER_NODE=str(per_node))
    assert f"via ipc+{network} (ipc asked)" in ok(done, f"ok {nranks} ranks")


@pytest.mark.parametrize("transport", ["auto", "ipc"])
def test_on_simulated_nodes_each_transfer_takes_the_path_of_its_pair(transport):
    import json

    done = run_gpusim(4, [str(SCRIPTS / "gpusim_nodes.py"), transport], RINGLAB_RANKS_PER_NODE="2")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["ids"] == [0, 0, 1, 1] and seen["used"] == "ipc+host"
    for algorithm, pairs in seen["pairs"].items():
        assert pairs, algorithm
        for src, dst, via in pairs:
            assert via == ("ipc" if src // 2 == dst // 2 else "host"), (algorithm, src, dst, via)
        assert {via for *_, via in pairs} == {"ipc", "host"}, algorithm  # both paths were used
    # each rank mapped the memory of the other rank of its node, and nobody else's
    assert seen["mapped"] == [[1], [0], [3], [2]]
