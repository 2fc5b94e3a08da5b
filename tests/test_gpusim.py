"""Every GPU path of the executor and the optimizer, under mpiexec, on the CPU stand-in for cupy.

The stand-in (tests/gpusim) queues device work on streams and lands it only when they are
synchronised, so a missing synchronisation gives a wrong answer here. Figures it produces are
CPU time and are never shown as GPU measurements; these tests check results and structure.
"""
import json

import pytest

from gpusim_support import SCRIPTS, run_gpusim, run_gpusim_own_gpu, run_python

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
    # CUDA-aware forced (RINGLAB_CUDA_AWARE=force) while MPICH says it is not: said once, before the first GPU
    # buffer (on a real GPU that MPI would crash; on the stand-in device memory is host memory, so it works)
    warned = "RINGLAB_CUDA_AWARE=force: GPU buffers go to MPI as they are, although the MPI library says"
    assert done.stderr.count(warned) == (transport == "cuda-aware")


def test_cuda_aware_claimed_where_mpi_says_no_is_one_error_on_every_rank():
    """RINGLAB_CUDA_AWARE=1 with MPICH, which says it cannot read GPU memory: on a GPU it would segfault on
    the first buffer; here every rank raises the same ValueError before any transfer, also when only one
    rank has the setting, and force then takes the cuda-aware path."""
    done = run_gpusim(3, [str(SCRIPTS / "gpusim_misuse.py"), "cuda-aware-claimed"], timeout=120)
    said = ok(done, "ok cuda-aware-claimed")
    assert "RINGLAB_CUDA_AWARE=force if you know this MPI is CUDA-aware" in said and "(on rank 2 of 3)" in said
    assert done.stderr.count("RINGLAB_CUDA_AWARE=force: GPU buffers go to MPI as they are") == 1


@pytest.mark.parametrize("transport", ["host", "ipc"])
def test_ranks_sharing_one_gpu(transport):
    """Three ranks on one visible GPU: ipc between processes on the same device, staging through one device."""
    done = run_gpusim(3, [str(SCRIPTS / "gpusim_collectives.py"), transport, "quick"], CUDA_VISIBLE_DEVICES="0")
    assert "1 GPU(s) visible" in ok(done, "ok 3 ranks")


def test_ipc_where_each_rank_sees_only_its_own_gpu():
    """CUDA opens IPC handles of GPUs a process cannot see; NVML (which sees them all) vouches for peer access."""
    done = run_gpusim_own_gpu(3, [str(SCRIPTS / "gpusim_collectives.py"), "auto", "quick", "own-gpu"])
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


# --- each rank on its own GPU (rl.bind_device): the job's runner binds every rank before user code ---------------

def _bound(done) -> list[dict]:
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return json.loads(next(line for line in done.stdout.splitlines() if line.startswith("[")))


@pytest.mark.parametrize("nranks", [2, 3, 4])
def test_every_rank_is_on_its_own_gpu_before_its_first_line(nranks):
    rows = _bound(run_gpusim(nranks, [str(SCRIPTS / "gpusim_bind.py")], timeout=120))
    assert [r["device"] for r in rows] == list(range(nranks))  # a plain cp.asarray lands on the rank's GPU
    assert len({r["bus"] for r in rows}) == nranks  # distinct physical GPUs, not GPU 0 every time
    assert all(r["again"] == r["device"] == r["again_other_comm"] for r in rows)  # idempotent
    # a collective on another GPU's array: the result is on that GPU, and the caller's GPU is current again
    assert all(r["current_after"] == [0, 0] for r in rows)
    assert all(r["total_device"] == (r["rank"] + 1) % 8 for r in rows)
    assert all(r["total"] == [nranks * k for k in range(4)] for r in rows)
    assert all(r["per_gpu"] == 1 and r["nccl_refused"].startswith("cupy cannot load libnccl") for r in rows)


def test_one_visible_gpu_per_rank_is_a_gpu_each_and_not_sharing():
    """As Slurm and many launchers start ranks: CUDA_VISIBLE_DEVICES set per rank, so each sees one GPU as device 0."""
    done = run_gpusim_own_gpu(3, [str(SCRIPTS / "gpusim_bind.py")], first=2, timeout=120)
    rows = _bound(done)
    assert [r["visible"] for r in rows] == ["2", "3", "4"] and all(r["device"] == 0 for r in rows)
    assert len({r["bus"] for r in rows}) == 3 and all(r["per_gpu"] == 1 for r in rows)
    # NCCL is not refused for sharing a GPU (only for the stand-in's missing libnccl)
    assert all(r["nccl_refused"].startswith("cupy cannot load libnccl") for r in rows)
    assert "share" not in done.stderr


def test_more_ranks_than_gpus_share_them_and_say_so_once():
    done = run_gpusim(4, [str(SCRIPTS / "gpusim_bind.py")], machine="rtx2080ti-2", timeout=120)
    rows = _bound(done)
    assert [r["device"] for r in rows] == [0, 1, 0, 1] and all(r["per_gpu"] == 2 for r in rows)
    assert done.stderr.count("4 ranks share 2 GPU(s) on this node, up to 2 on one") == 1
    assert all("2 ranks share one" in r["nccl_refused"] for r in rows)


def test_an_exclusive_gpu_shared_by_ranks_is_one_clear_error_on_every_rank():
    done = run_gpusim(4, [str(SCRIPTS / "gpusim_bind.py")], machine="rtx2080ti-2", timeout=120,
                      RINGLAB_GPUSIM_COMPUTE_MODE="3")
    assert done.returncode != 0 and "EXCLUSIVE_PROCESS compute mode" in done.stderr
    assert "nvidia-smi -c DEFAULT" in done.stderr
    alone = _bound(run_gpusim(2, [str(SCRIPTS / "gpusim_bind.py")], machine="rtx2080ti-2", timeout=120,
                              RINGLAB_GPUSIM_COMPUTE_MODE="3"))  # a GPU each: exclusive mode is no problem
    assert [r["device"] for r in alone] == [0, 1]


def test_mig_instances_never_take_the_ipc_path(monkeypatch):
    from ringlab.mpi.ipc import on_mig

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-4f1c2a9e-5b7d-5c3e-9a1b-0c2d3e4f5a6b")
    assert on_mig()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert not on_mig()


@pytest.mark.parametrize("nranks", [3, 8])
def test_ipc_maps_only_the_peers_a_schedule_reads(nranks):
    """A GPU has peer access to 8 others at most: a ring on 16 GPUs must not map all 15."""
    done = run_gpusim(nranks, [str(SCRIPTS / "gpusim_ipc_peers.py")], timeout=180)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    mapped = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("[")))
    assert mapped == [[(r - 1) % nranks] for r in range(nranks)]  # each rank reads its left neighbour only


# --- a rank per GPU on boxes of 2, 4 and 8 GPUs --------------------------------------------------------------

BOXES = [("rtx2080ti-2", 2, "host"), ("v100-dgxstation-4", 4, "ipc"), ("h100-hgx-8", 8, "ipc")]  # auto's choice


@pytest.mark.parametrize("machine, gpus, chosen", BOXES)
def test_a_rank_per_gpu_on_boxes_of_two_four_and_eight(machine, gpus, chosen):
    """Every rank on its own GPU of the box, and every collective right through what auto picks there
    (no P2P on the 2080 Ti box: staged through the host; NVLink peers elsewhere: ipc)."""
    rows = _bound(run_gpusim(gpus, [str(SCRIPTS / "gpusim_bind.py")], machine=machine, timeout=240))
    assert [r["device"] for r in rows] == list(range(gpus)) and len({r["bus"] for r in rows}) == gpus
    done = run_gpusim(gpus, [str(SCRIPTS / "gpusim_collectives.py"), "auto", "quick"], machine=machine, timeout=400)
    assert f"via {chosen} (auto asked)" in ok(done, f"ok {gpus} ranks")


# --- what ringlab holds on a GPU, and when it lets go ----------------------------------------------------------

def test_the_standin_pools_dropped_blocks_as_cupy_does():
    """A dropped array's block stays in the default pool (no cudaFree) until free_all_blocks; pinned memory too."""
    done = run_python(["-c", """
import cupy as cp, cupyx, numpy as np
from cupy import _sim
pool, pinned = cp.get_default_memory_pool(), cp.get_default_pinned_memory_pool()
a, b = cp.ones(1000), cp.zeros(10)
cp.cuda.Device().synchronize()  # the stand-in's queued fills hold their arrays until they run
assert (pool.used_bytes(), pool.total_bytes()) == (8192 + 512, 8192 + 512)
del a
assert (pool.used_bytes(), pool.total_bytes(), pool.n_free_blocks(), len(_sim.FREES)) == (512, 8704, 1, 0)
c = cp.empty(1000)  # the same block again: no cudaMalloc
assert (pool.total_bytes(), pool.n_free_blocks()) == (8704, 0) and np.isnan(c.get()).all()  # freed bytes are garbage
del c
pool.free_all_blocks()
assert (pool.used_bytes(), pool.total_bytes(), len(_sim.FREES)) == (512, 512, 1) and b.get().sum() == 0
host = cupyx.empty_pinned(100, np.float64)
del host
assert pinned.n_free_blocks() == 1
pinned.free_all_blocks()
assert pinned.n_free_blocks() == 0
print("ok pools")
"""])
    assert done.returncode == 0 and "ok pools" in done.stdout, done.stderr[-3000:]


@pytest.mark.parametrize("nranks", [2, 3])
def test_ipc_buffer_growth_frees_no_device_memory(nranks):
    """cudaFree waits for all the device's work, a user's compute stream included: growing the IPC buffer
    must not call it. Outgrown buffers are unmapped and kept, less in all than the current one (powers of
    two), until rl.release_buffers() frees them with the current one."""
    for r in _bound(run_gpusim(nranks, [str(SCRIPTS / "gpusim_ipc_growth.py")], timeout=180)):
        assert r["frees"] == 0, r
        assert r["capacity"] == 32768 and r["retired"] == [1000, 2048, 4096, 8192], r
        assert sum(r["retired"]) < r["capacity"]
        assert r["mapped"] == r["opened"] >= 1, r  # the outgrown buffers' peers were unmapped as they grew
        assert r["held_after_release"] == 0 and r["mapped_after_release"] == 0, r


@pytest.mark.parametrize("nranks", [2, 3])
def test_release_buffers_empties_the_pools_but_for_the_users_arrays(nranks):
    """ringlab's scratch and pinned staging buffers, once dropped, stay cached in cupy's pools unless
    rl.release_buffers() frees the pools' unused blocks; the user's live array is kept, intact."""
    for r in _bound(run_gpusim(nranks, [str(SCRIPTS / "gpusim_release_pools.py")], timeout=180)):
        assert r["before"]["total"] > r["total"], r
        assert r["total"] == r["used"] == -(-r["keep_bytes"] // 512) * 512, r  # the user's array, nothing else
        assert r["pinned_free_blocks"] == 0 and r["keep_intact"], r


@pytest.mark.parametrize("nranks", [2, 3])
def test_gpu_buffers_on_emulated_links_give_mpis_sum_in_virtual_time(nranks):
    """cupy buffers staged through the host on emulated links: MPI's sum in both compute modes; with
    compute="model" the virtual time is rl.predict's for those links (this CPU and the stand-in never count)."""
    done = run_gpusim(nranks, [str(SCRIPTS / "vt_gpu_emulated.py")], timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert set(seen) == {"cpu", "model"}, done.stdout
    assert all(said.startswith("right ") for said in seen.values()), seen
    assert float(seen["cpu"].split()[1]) >= 0.999, seen  # never faster than its links
    assert abs(float(seen["model"].split()[1]) - 1) < 0.01, seen


@pytest.mark.parametrize("nranks", [2, 3])
def test_alltoallv_on_device_arrays_is_staged_through_host_memory(nranks):
    """rl.alltoallv on the stand-in's device arrays: the numpy call's rows, a device array on the rank's GPU,
    the input's pending asynchronous write landed before its bytes are sent."""
    done = run_gpusim(nranks, [str(SCRIPTS / "gpusim_alltoallv.py")])
    ok(done, f"ok {nranks} ranks")


def test_the_real_gpu_alltoallv_check_runs_on_the_stand_in():
    """tests/mpi/check_gpu_alltoallv.py (test_gpu.py's, on a real GPU) passes on the stand-in at 3 ranks, so a GPU
    session meets a script known to work, not one first run there."""
    done = run_gpusim(3, [str(SCRIPTS / "check_gpu_alltoallv.py")])
    ok(done, "ok 3 ranks")
