"""`ringlab bench --gpu` and `ringlab bandwidth` end to end on the CPU stand-in for cupy, and what
the GPU clocks count. The stand-in's figures are CPU time: these tests check results, structure
and clocks, never speeds, and nothing here is ever shown as a GPU measurement."""
import json

import pytest

from gpusim_support import SCRIPTS, run_gpusim, run_python

pytestmark = pytest.mark.gpusim
TRANSPORTS = {"host": {}, "cuda-aware": {"cuda_aware": True}, "ipc": {}, "auto": {}}
CHOSEN = {"auto": "ipc"}  # what auto picks for ranks of one node (the rest are used as asked)


def bench(nranks, args, tmp_path, **env):
    path = tmp_path / "bench.json"
    done = run_gpusim(nranks, ["-m", "ringlab", "bench", "--gpu", "-b", "1K", "-e", "64K", "-f", "8",
                               "--iters", "3", "--warmup", "1", "--json", str(path), *args], timeout=180, **env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return json.loads(path.read_text()), done.stdout


@pytest.mark.parametrize("nranks", [2, 3])
@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
def test_bench_gpu_checks_every_result_and_labels_host_rows(transport, nranks, tmp_path):
    result, printed = bench(nranks, ["-a", "ring,naive,mpi", "--transport", transport, "--inplace"], tmp_path,
                            **TRANSPORTS[transport])
    rows = result["rows"]
    assert result["gpu"] is True and {r["algorithm"] for r in rows} == {"ring", "naive", "mpi"}
    assert all(r["wrong"] == 0 and r["inplace_wrong"] == 0 and r["inplace_time_s"] > 0 for r in rows)
    assert {r["memory"] for r in rows if r["algorithm"] != "mpi"} == {"device"}
    assert {r["memory"] for r in rows if r["algorithm"] == "mpi"} == {"host"}  # MPI on a host copy, and says so
    assert all(0 < r["time_s"] < 60 for r in rows)
    assert "mpi is MPI on a host copy" in printed and "    host " in printed and "  device " in printed
    # how each row's bytes went, as chosen, not as asked; one timing method for all; the rank per GPU said
    assert {r["transport"] for r in rows if r["algorithm"] != "mpi"} == {CHOSEN.get(transport, transport)}
    assert {r["transport"] for r in rows if r["algorithm"] == "mpi"} == {"mpi on a host copy"}
    assert result["timing"] == "back to back" and "back to back" in printed
    assert result["ranks_per_gpu"] >= 1
    provenance = result["machine"]
    assert provenance["ringlab"]["version"] and len(provenance["ringlab"]["commit"] or "x" * 40) == 40
    assert provenance["cuda_runtime"] == "12.8" and "nccl" in provenance


@pytest.mark.parametrize("collective, algorithms", [("reduce", "tree,chain,mpi"), ("broadcast", "chain,tree,mpi"),
                                                    ("reduce_scatter", "ring,mpi"), ("allgather", "ring,mpi")])
def test_bench_gpu_other_collectives(collective, algorithms, tmp_path):
    result, _ = bench(3, ["-c", collective, "-a", algorithms, "--root", "2"] if collective in ("reduce", "broadcast")
                      else ["-c", collective, "-a", algorithms], tmp_path)
    assert result["rows"] and all(r["wrong"] == 0 for r in result["rows"])


@pytest.mark.parametrize("op, dtype", [("avg", "bfloat16"), ("max", "float32"), ("prod", "int32")])
def test_bench_gpu_reduces_by_every_op_and_in_bfloat16(op, dtype, tmp_path):
    result, printed = bench(3, ["-a", "ring,naive,mpi", "-o", op, "-d", dtype, "--transport", "ipc"], tmp_path)
    rows = result["rows"]
    assert rows and all(r["wrong"] == 0 and r["op"] == op for r in rows)
    assert {r["algorithm"] for r in rows} == ({"ring", "naive"} if dtype == "bfloat16" else {"ring", "naive", "mpi"})
    assert {r["transport"] for r in rows if r["algorithm"] != "mpi"} == {"ipc"}


def test_bench_counts_a_wrong_gpu_result_and_times_out_of_place_work(tmp_path):
    """The check compares the device result with MPI's: an algorithm that returns a wrong buffer is
    counted; ringlab's calls write one preallocated output, never the input, and return it."""
    done = run_gpusim(2, [str(SCRIPTS / "gpusim_bench_wrong.py")], timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "ok: wrong elements counted; ringlab out of place into one output" in done.stdout


def test_bench_nccl_without_libnccl_is_one_clear_error_on_every_rank(tmp_path):
    done = run_gpusim(2, ["-m", "ringlab", "bench", "--gpu", "-b", "1K", "-e", "1K", "-a", "nccl"], timeout=60)
    assert done.returncode != 0
    said = done.stdout + done.stderr
    assert "nccl cannot run here" in said and "rank 0: cupy cannot load libnccl" in said
    assert "rank 1: cupy cannot load libnccl" in said


def test_bench_nccl_missing_on_one_rank_is_the_same_error_on_every_rank():
    """Ranks 0 and 2 look as if they had libnccl, rank 1 does not: all three raise, naming rank 1,
    before rank 0 calls get_unique_id (which would leave the others waiting in bcast)."""
    done = run_gpusim(3, [str(SCRIPTS / "gpusim_nccl_partial.py")], timeout=60)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    for rank in range(3):
        assert f"rank {rank} ValueError: nccl cannot run here (rank 1: cupy cannot load libnccl" in done.stdout


@pytest.mark.parametrize("machine, gpus", [("rtx2080ti-2", 2), ("h100-hgx-8", 8)])
def test_bandwidth_gpu_report_end_to_end(machine, gpus, tmp_path):
    path = tmp_path / "bw.json"
    done = run_gpusim(2, ["-m", "ringlab", "bandwidth", "--sizes", "8,1K", "--gpu-bytes", "64K", "--json", str(path)],
                      machine=machine, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    gpu = json.loads(path.read_text())["gpu"]
    assert gpu["gpus"] == gpus
    assert {(r["what"], r["pinned"]) for r in gpu["host_device"]} == {
        (w, p) for w in ("host->device", "device->host", "both ways at once") for p in (True, False)}
    assert all(r["Bps"] > 0 and r["peak_Bps"] > 0 for r in gpu["host_device"])  # peaks from the stand-in's NVML
    # every GPU measured, not only rank 0's, each with the spread of its repeats
    assert [g["gpu"] for g in gpu["per_gpu"]] == list(range(gpus)) and len({g["bus"] for g in gpu["per_gpu"]}) == gpus
    assert all(len(g["host_device"]) == 6 for g in gpu["per_gpu"])
    assert all(r["spread_Bps"][0] <= r["Bps"] * 1.0001 and r["Bps"] <= r["spread_Bps"][1] * 1.0001
               for g in gpu["per_gpu"] for r in g["host_device"])
    assert gpu["per_gpu"][0]["host_device"] == gpu["host_device"]  # rank 0's GPU, as before
    matrix = gpu["p2p"]["peer_access_on"]
    assert len(matrix) == gpus and all(matrix[a][b] > 0 for a in range(gpus) for b in range(gpus) if a != b)
    possible = gpu["p2p"]["peer_access_possible"]
    assert possible[0][1] is (machine == "h100-hgx-8")  # the 2080 Ti box has no P2P
    assert 0 < gpu["device_copy_Bps"] < float("inf") and 0 < gpu["small_h2d_latency_s"] < float("inf")
    assert len(gpu["p2p"]["peer_access_off"]) == gpus
    printed = done.stdout
    assert "measured here on" in printed and "8-byte host->device latency" in printed
    assert "pinned, between CUDA events" in printed
    assert "device->device copy" in printed and "peer access on" in printed and "peer access off" in printed
    assert all(f"{w:<18} {p:<9}" in printed for w in ("host->device", "device->host", "both ways at once")
               for p in ("pinned", "pageable"))


def test_gpu_clocks_count_the_queued_work_and_not_the_warm_up():
    done = run_python([str(SCRIPTS / "gpusim_timing.py")], machine="rtx2080ti-2", timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("ok:")


def test_pageable_copies_both_ways_at_once_are_asked_for_by_two_threads():
    """A pageable copy holds the thread that asks for it (the stand-in: 1 MiB at 25 MB/s, 42 ms), so
    both ways at once from one thread is one copy after the other; from two threads the copies overlap
    and the rate is about twice one way's."""
    done = run_python([str(SCRIPTS / "gpusim_both_ways.py")], timeout=120, RINGLAB_GPUSIM_PAGEABLE_BPS="2.5e7")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("ok:"), done.stdout


def test_gpu_clocks_start_every_rank_together_after_the_warm_up():
    done = run_gpusim(2, [str(SCRIPTS / "gpusim_timing_ranks.py")], timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "ok" in done.stdout
