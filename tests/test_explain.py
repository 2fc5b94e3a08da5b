"""Is my number normal? (ringlab.measure.explain, `ringlab explain`): a sweep against healthy hardware of its
kind, and the cause whose machine it matches. Sweeps made up here are the model's own prediction for a machine
with one thing wrong, written as nccl-tests prints them; the published ones are the shipped data set."""
import json
import subprocess
import sys

import pytest

import ringlab as rl
from ringlab.measure import published
from ringlab.measure.explain import CAUSES, describe, explain, guess_machine, machine_from, variants
from ringlab.measure.logs import read_log
from ringlab.predict.nccl import predict_nccl
from ringlab.schedule import bus_factor
from test_logs import float_str

SIZES = [1 << k for k in range(16, 34, 2)]


def devices(ranks: int, hosts: int, name: str) -> list[dict]:
    per = ranks // hosts
    return [{"rank": r, "host": f"node{r // per}", "device": r % per, "bus": "0000:19:00", "name": name}
            for r in range(ranks)]


def sweep_on(topology, gpu_name: str, hosts: int, scale: float = 1.0) -> dict:
    """A sweep as read_log gives it, whose busbw is NCCL's model on ``topology`` (times ``scale``)."""
    rows = [{"bytes": s, "busbw_Bps": scale * predict_nccl("allreduce", s, topology).busbw} for s in SIZES]
    return {"format": "nccl-tests", "collective": "allreduce", "ranks": topology.nranks, "gpus_per_thread": 1,
            "devices": devices(topology.nranks, hosts, gpu_name), "rows": rows}


def log_text(result: dict) -> str:
    """``result`` as all_reduce_perf prints it (one process a GPU)."""
    n = result["ranks"]
    out = ["# nccl-tests version 2.17.6 nccl-headers=22703 nccl-library=22703",
           "# Collective test starting: all_reduce_perf",
           "# nThread 1 nGpus 1 minBytes 65536 maxBytes 8589934592 step: 4(factor) warmup iters: 5 iters: 20 agg "
           "iters: 1 validation: 1 graph: 0", "#", "# Using devices"]
    out += ["#  Rank %2d Group %2d Pid %6d on %10s device %2d [%s] %s" % (d["rank"], 0, 4000 + d["rank"], d["host"],
                                                                         d["device"], d["bus"], d["name"])
            for d in result["devices"]]
    out += ["#", "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw"
                 "   busbw #wrong"]
    for r in result["rows"]:
        busbw = r["busbw_Bps"] / 1e9
        algbw = busbw / bus_factor("allreduce", n)
        cells = f"  {float_str(r['bytes'] / algbw / 1e3, 7)}  {float_str(algbw, 6)}  {float_str(busbw, 6)}       0"
        out.append("%12li  %12li  %8s  %6s  %6s" % (r["bytes"], r["bytes"] // 4, "float", "sum", "-1") + cells * 2)
    return "\n".join(out + ["# Out of bounds values : 0 OK", "#"])


@pytest.mark.parametrize("name", ["A02_nccltests290_h100_2x8_ib_ndr_allreduce_default",
                                  "A03_nccltests290_h100_2x8_ib_ndr_allreduce_ring",
                                  "A08_coreweave_a100_16x8_ib_allreduce"])
def test_the_published_multi_node_sweeps_are_below_their_rails_without_gpudirect(name):
    got = explain(published.load(name).data, name=name)
    assert got["verdict"] == "below its hardware" and got["ratio"] < 0.35
    assert got["causes"][0]["key"] == "gdr" and 0.8 <= got["causes"][0]["ratio"] <= 1.25
    assert "rails" not in {c["key"] for c in got["causes"]}  # one NIC's worth is far slower still
    assert all(set(r) >= {"bytes", "measured_busbw", "expected_busbw", "ratio"} for r in got["rows"])
    assert all(r["ratio"] == r["measured_busbw"] / r["expected_busbw"] for r in got["rows"])


@pytest.mark.parametrize("name", ["A01_nccltests290_h100x8_hgx_1node_allreduce",
                                  "A05_azure_nd_h100_v5_8xh100_allreduce_busbw",
                                  "A40_mlengineering_h200x8_allreduce_bench_sweep",
                                  "A23_facebookresearch-gcm_a100-80gb_2x8_allreduce",
                                  "A24_mlengineering_b200x8_p6_4node_efa_allreduce_bench_busbw"])
def test_healthy_published_sweeps_are_called_healthy(name):
    got = explain(published.load(name).data, name=name)
    assert got["verdict"] == "healthy" and got["causes"] == [] and got["ratio"] >= 0.8


@pytest.mark.parametrize("cause, change", [("rails", dict(nics_per_node=1)), ("gdr", dict(nic_gbps=100))])
def test_a_cluster_sweep_names_the_cause_whose_machine_it_matches(cause, change):
    healthy = rl.topology.cluster("h100", 2)
    broken = rl.topology.cluster("h100", 2, **change)
    got = explain(sweep_on(broken, "NVIDIA H100 80GB HBM3", hosts=2))
    assert got["machine"] == "ib-2x8-h100" and got["verdict"] == "below its hardware"
    assert got["causes"][0]["key"] == cause and got["causes"][0]["cause"] == CAUSES[cause]
    assert explain(sweep_on(healthy, "NVIDIA H100 80GB HBM3", hosts=2))["verdict"] == "healthy"


def test_nvls_off_and_p2p_off_are_told_apart_from_healthy_boards():
    board = rl.topology.preset("hgx-h100-8")
    off = explain(sweep_on(rl.topology.cluster("h100", 1, nvls=False), "NVIDIA H100 80GB HBM3", hosts=1,
                           scale=0.95))
    assert off["machine"] == board.name and [c["key"] for c in off["causes"]] == ["nvls"]
    box = explain(sweep_on(rl.topology.preset("rtx4090-8-p2p-off"), "NVIDIA GeForce RTX 4090", hosts=1))
    # staged through host memory or at PCIe 3.0, a ring over PCIe gets the same 12 GB/s: the model cannot tell
    assert box["machine"] == "rtx4090-8-p2p-on" and {c["key"] for c in box["causes"]} == {"p2p", "pcie"}
    assert set(variants(rl.topology.preset("hgx-a100-8"))) == set()  # nothing to switch off on one A100 board


def test_the_machine_comes_from_the_log_or_a_description():
    assert guess_machine({"ranks": 16, "devices": devices(16, 2, "NVIDIA H100 80GB HBM3")}).name == "ib-2x8-h100"
    assert guess_machine({"ranks": 128, "devices": devices(128, 32, "NVIDIA GB200")}).name == "ib-2x64-gb200"
    with pytest.raises(ValueError, match="cannot tell the machine from this log .*Tesla T4.*--machine"):
        guess_machine({"ranks": 4, "devices": devices(4, 1, "Tesla T4")})
    assert machine_from("a100:16x8:nic=200").machine.nic_bandwidth == 25e9
    assert machine_from("h100:4x8:nics=4:fabric=roce").name == "roce-4x8-h100-4nic"
    assert machine_from("hgx-b200-8").name == "hgx-b200-8"
    # a log whose INFO lines show AWS's EFA plugin: an AWS machine, whose plugin sets NCCL's NVLS chunk
    on_aws = guess_machine({"ranks": 8, "devices": devices(8, 1, "NVIDIA B200"), "network": "efa"})
    assert on_aws.name == machine_from("b200:1x8:fabric=efa").name == "efa-1x8-b200"
    assert guess_machine({"ranks": 8, "devices": devices(8, 1, "NVIDIA B200"), "network": None}).name == "hgx-b200-8"
    assert guess_machine({"ranks": 16, "devices": devices(16, 2, "NVIDIA H100 80GB HBM3"),
                          "network": "roce"}).name == "roce-2x8-h100"
    with pytest.raises(ValueError, match="cannot read machine 'h100'"):
        machine_from("h100")
    with pytest.raises(ValueError, match="cannot read 'speed=3'"):
        machine_from("h100:2x8:speed=3")


def test_explain_on_the_command_line_reads_a_log_and_writes_its_verdict(tmp_path):
    log = tmp_path / "all_reduce_perf.log"
    quarter = rl.topology.cluster("h100", 2, nic_gbps=100)
    log.write_text(log_text(sweep_on(quarter, "NVIDIA H100 80GB HBM3", hosts=2)))
    assert read_log(log.read_text())["gpus_per_thread"] == 1
    out = tmp_path / "verdict.json"
    done = subprocess.run([sys.executable, "-m", "ringlab", "explain", str(log), "--json", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    answer = json.loads(out.read_text())
    assert answer["verdict"] == "below its hardware" and answer["causes"][0]["key"] == "gdr"
    assert {"bytes", "measured_busbw", "expected_busbw", "ratio"} <= set(answer["rows"][0])
    assert "likely cause: rails at a quarter" in done.stdout and "ib-2x8-h100" in done.stdout
    wrong = subprocess.run([sys.executable, "-m", "ringlab", "explain", str(log), "--machine", "h100"],
                           capture_output=True, text=True, timeout=120)
    assert wrong.returncode == 2 and "ringlab explain: error: " in wrong.stderr and "GPU:NODESxGPUS" in wrong.stderr
    helped = subprocess.run([sys.executable, "-m", "ringlab", "explain", "--help"], capture_output=True, text=True,
                            timeout=120)
    assert "is my number normal" in helped.stdout.lower() or "healthy hardware" in helped.stdout


def test_a_bench_result_is_explained_by_its_nccl_rows_on_its_machine():
    board = rl.topology.preset("hgx-h100-8")
    rows = [{"algorithm": "nccl", "bytes": s, "busbw_Bps": predict_nccl("allreduce", s, board).busbw} for s in SIZES]
    result = {"kind": "ringlab-bench", "collective": "allreduce", "ranks": 8,
              "machine": {"host": "box", "gpus": [{"name": "NVIDIA H100 80GB HBM3"}] * 8},
              "rows": rows + [{"algorithm": "ring", "bytes": 1 << 20, "busbw_Bps": 1e9}]}
    got = explain(result)
    assert got["machine"] == "hgx-h100-8" and got["verdict"] == "healthy" and len(got["rows"]) == len(SIZES)
    with pytest.raises(ValueError, match="ringlab models no machine like A14's .*not published.*--machine"):
        explain(published.load("A14_tinygrad_rtx4090x6_p2p_allreduce_32MiB").data,
                name="A14_tinygrad_rtx4090x6_p2p_allreduce_32MiB")
    with pytest.raises(ValueError, match="no NCCL rows"):
        explain(dict(result, rows=[{"algorithm": "ring", "bytes": 1 << 20, "busbw_Bps": 1e9}]))


def middle_slowed(topology, gpu_name: str, hosts: int, gpus_per_thread: int = 1, factor: float = 0.5) -> dict:
    """A sweep at the model's prediction on ``topology``, its sizes below 64 MiB at ``factor`` of it."""
    result = sweep_on(topology, gpu_name, hosts)
    for r in result["rows"]:
        r["busbw_Bps"] *= factor if r["bytes"] < 64 << 20 else 1.0
    return dict(result, gpus_per_thread=gpus_per_thread)


def test_a_healthy_verdict_says_where_the_sizes_below_the_large_ones_fall_short_and_what_to_look_at():
    board = rl.topology.preset("hgx-h100-8")
    fine = explain(sweep_on(board, "NVIDIA H100 80GB HBM3", hosts=1))
    assert fine["verdict"] == "healthy" and fine["notes"] == []
    # a process a GPU, half the model below 64 MiB: the channels and the hosts' cores to look at
    one = explain(middle_slowed(board, "NVIDIA H100 80GB HBM3", hosts=1))
    assert one["verdict"] == "healthy" and len(one["notes"]) == 1
    low = [r for r in one["rows"] if r["bytes"] < 64 << 20]
    assert f"{len(low)} of the sizes below them" in one["notes"][0] and "64 KiB to 16 MiB" in one["notes"][0]
    assert "NCCL_MAX_NCHANNELS" in one["notes"][0] and "-g " not in one["notes"][0]
    # the same from one thread driving the eight GPUs: run a process a GPU to see NCCL's own time
    threaded = explain(middle_slowed(board, "NVIDIA H100 80GB HBM3", hosts=1, gpus_per_thread=8))
    assert "(-g 8)" in threaded["notes"][0] and "mpirun -np 8 all_reduce_perf ... -g 1" in threaded["notes"][0]
    assert f"# note: {threaded['notes'][0]}" in describe(threaded, "all_reduce_perf.log")
    # within 1.5x of the model is not called short; a sweep below its hardware gets its causes, not a note
    assert explain(middle_slowed(board, "NVIDIA H100 80GB HBM3", hosts=1, factor=0.7))["notes"] == []
    quarter = explain(middle_slowed(rl.topology.cluster("h100", 2, nic_gbps=100), "NVIDIA H100 80GB HBM3", hosts=2))
    assert quarter["verdict"] == "below its hardware" and not any("sizes below them" in n for n in quarter["notes"])
    # two nodes and no NCCL INFO lines: the NICs the model assumed are said, with the --machine form to correct them
    assert [n for n in quarter["notes"] if "names no network" in n and "--machine h100:2x8:" in n]


@pytest.mark.parametrize("name, says", [("A41_mlengineering_a100x8_nvlink3_allreduce_sweep", "(-g 8)"),
                                        ("A20_galvatron_dgx-a100-40gb_allreduce", "(-g 8)"),
                                        ("A24_mlengineering_b200x8_p6_4node_efa_allreduce_bench_busbw",
                                         "after a barrier"),
                                        ("A21_facebookresearch-gcm_a100-80gb_allreduce", None)])
def test_the_published_sweeps_the_model_misses_below_64_mib_carry_a_note_naming_how_they_were_timed(name, says):
    got = explain(published.load(name).data, name=name)
    short = [r for r in got["rows"] if r["bytes"] < 64 << 20 and r["ratio"] < 1 / 1.5]
    assert got["verdict"] == "healthy" and bool(got["notes"]) == bool(short) == (says is not None)
    if says:
        worst = min(short, key=lambda r: r["ratio"])
        assert says in got["notes"][0] and f"{worst['ratio']:.0%} at" in got["notes"][0]
