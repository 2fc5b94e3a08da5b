"""The published measurements shipped in ringlab/data/published: numbers with their sources, in the
structures `ringlab import` gives, and the same numbers as the transcribed source files."""
import json
from pathlib import Path

import pytest

from ringlab.measure import published
from ringlab.schedule import bus_factor

SHARED = Path(__file__).resolve().parents[2] / "shared" / "published"


def test_at_least_ten_machines_with_their_sources():
    entries = [published.load(n) for n in published.names()]
    machines = {(e.data["machine"]["gpu"], e.data["machine"]["count"], e.data["machine"]["interconnect"])
                for e in entries}
    assert len(machines) >= 10, machines
    for e in entries:
        assert e.data["source"] and e.data["tool"] and "command" in e.data and "date" in e.data
        assert set(e.data["machine"]) == set(published.MACHINE_FIELDS)
        assert e.label.startswith("published measurement, ") and e.data["source"] in e.label
        assert "description" not in e.data["machine"] and "notes" not in e.data  # numbers, not the sources' prose
    formats = {e.format for e in entries}
    assert formats == {"nccl-tests", "p2pBandwidthLatencyTest", "bandwidthTest", "nvbandwidth", "topo"}


@pytest.mark.parametrize("name", published.names("nccl-tests"))
def test_nccl_sweeps_are_consistent_with_nccl_tests_definitions(name):
    """busbw = algbw x the collective's bus factor, algbw = bytes / time, wherever the source printed both."""
    data = published.load(name).data
    assert any(r["bytes"] > 0 for r in data["rows"]) and all(r["bytes"] >= 0 for r in data["rows"])  # nccl-tests prints size-0 rows too
    for row in data["rows"]:
        factor = bus_factor(row["collective"], row["ranks"])  # GPU-count tables and mixed tables vary per row
        assert data["collective"] in (row["collective"], None) and data["ranks"] in (row["ranks"], None)
        for side in ("", "inplace_"):
            algbw, busbw, time_s = row[f"{side}algbw_Bps"], row[f"{side}busbw_Bps"], row[f"{side}time_s"]
            if algbw and busbw and algbw > 1e9:  # printed with 2 decimals: small values are too coarse to compare
                assert busbw == pytest.approx(algbw * factor, rel=0.02), (row["bytes"], side)
            if algbw and time_s and algbw > 1e9:
                assert row["bytes"] / time_s == pytest.approx(algbw, rel=0.02), (row["bytes"], side)


@pytest.mark.parametrize("name", published.names("p2pBandwidthLatencyTest"))
def test_p2p_matrices_are_square_and_sized_to_the_machine(name):
    data = published.load(name).data
    count = data["machine"]["count"]
    for key, matrix in data["matrices"].items():
        assert len(matrix) == count and all(len(row) == count for row in matrix), key


@pytest.mark.skipif(not SHARED.is_dir(), reason="the transcribed source files (../shared/published) are not here")
def test_the_shipped_data_is_the_transcribed_sources_converted(tmp_path):
    written = published.build(SHARED, published.TRANSCRIBED, into=tmp_path)
    assert written == published.names()
    for name in written:
        assert json.loads((tmp_path / f"{name}.json").read_text()) == published.load(name).data, name


def test_tables_by_gpu_count_and_setting_keep_each_rows_ranks_and_setting():
    """A17: one 8 GiB allreduce per GPU count, NCCL's default beside NVLS switched off, as two rows per count."""
    data = published.load("A17_mlengineering_h200x8_nvls_on_off_by_gpucount_8GiB").data
    assert data["ranks"] is None and data["collective"] == "allreduce"
    assert [(r["ranks"], r["setting"]) for r in data["rows"][:2]] == [(4, None), (4, "NCCL_NVLS_ENABLE=0")]
    at8 = {r["setting"]: r for r in data["rows"] if r["ranks"] == 8}
    assert at8[None]["nccl_algorithm"] == "NVLS" and at8[None]["busbw_Bps"] == 473.1e9
    assert at8["NCCL_NVLS_ENABLE=0"]["busbw_Bps"] == 365.6e9 and at8["NCCL_NVLS_ENABLE=0"]["nccl_algorithm"] is None
    mixed = published.load("A19_mlengineering_h200x8_16GiB_allreduce_nvls_ring_allgather_reducescatter").data
    assert mixed["collective"] is None
    assert [r["collective"] for r in mixed["rows"]] == ["allreduce", "allreduce", "allgather", "reduce_scatter"]


def test_each_sweep_says_its_benchmark_library_and_which_columns_the_source_printed():
    by_code = {name[:3]: published.load(name).data for name in published.names("nccl-tests")}
    assert (by_code["A01"]["bench"], by_code["A01"]["sides"]) == ("nccl-tests", ["out-of-place", "in-place"])
    assert by_code["A05"]["sides"] == ["in-place"]
    assert (by_code["A40"]["bench"], by_code["A40"]["library"], by_code["A40"]["sides"]) == (
        "all_reduce_bench.py", "NCCL", ["unlabelled"])
    assert all(r["time_s"] is None and r["algbw_Bps"] for r in by_code["A40"]["rows"] if r["setting"] is None)
    assert by_code["A40"]["rows"][-1] == dict(by_code["A40"]["rows"][-1], setting="NCCL_NVLS_ENABLE=0",
                                              bytes=16 << 30, busbw_Bps=367.61e9, algbw_Bps=None)
    assert by_code["A41"]["rows"][0]["time_s"] == pytest.approx(43.83e-6)  # one unlabelled set: the main columns
    assert (by_code["A43"]["library"], by_code["A44"]["library"], by_code["A44"]["bench"]) == ("RCCL", "RCCL", "rccl-tests")
    assert [r["ranks"] for r in by_code["A43"]["rows"]] == [2, 8]


def test_a_tool_with_no_conversion_is_named():
    with pytest.raises(ValueError, match="no conversion for a 'iperf3' measurement"):
        published.convert({"source": "s", "tool": "iperf3", "machine": {}, "rows": []})


def test_an_unknown_name_is_a_clear_error():
    with pytest.raises(ValueError, match="no published measurement 'nope'; there are: A01"):
        published.load("nope")


@pytest.mark.parametrize("lab", ["00_your_machine", "01_moving_bytes", "05_scaling"])
def test_the_gpu_labs_show_a_published_figure_with_its_label(lab):
    """Labs 00, 01 and 05 show published GPU numbers on a machine without GPUs (nbval runs them);
    each figure's title carries the measurement's label: machine and source."""
    source = (Path(__file__).resolve().parents[1] / "labs" / "src" / f"{lab}.py").read_text()
    assert "from ringlab.measure import published" in source
    assert ".label" in source or "published.busbw_rows" in source


def test_every_sweep_has_a_preset_or_a_reason():
    from ringlab.topology import preset_names
    from ringlab.predict.versus import MODELS

    assert set(published.MODELLED) == set(published.names("nccl-tests"))
    for name in published.names("nccl-tests"):
        match = published.model_for(name)
        if isinstance(match, str):
            assert len(match) > 20  # a reason a reader can act on
            with pytest.raises(ValueError, match=f"no preset models {name}"):
                published.against_model(name)
        else:
            assert match[0] in preset_names() and match[1] in MODELS
            rows = published.against_model(name)
            assert rows and all(r["preset"] == match[0] and r["ratio"] > 0 for r in rows)


def test_a_sweep_against_its_model_is_the_published_numbers_beside_predictions():
    rows = published.against_model("A11_chlc_rtx4090x8_pcie_p2pon_allreduce")
    data = published.load("A11_chlc_rtx4090x8_pcie_p2pon_allreduce").data
    assert [r["bytes"] for r in rows] == [r["bytes"] for r in data["rows"] if r["bytes"] and r["busbw_Bps"]]
    assert [r["measured_busbw"] for r in rows] == [r["busbw_Bps"] for r in data["rows"] if r["bytes"] and r["busbw_Bps"]]
    assert {r["predicted"].split(",")[0] for r in rows} == {"ring"}  # a PCIe box: no NVLS, one node: no tree
    nvls = published.against_model("A05_azure_nd_h100_v5_8xh100_allreduce_busbw")
    assert {r["predicted"] for r in nvls} == {"nvls, Simple"}  # forced, as the source ran it


def test_each_sweep_is_timed_as_its_benchmark_timed_it():
    from ringlab.predict.harness import LAUNCH_PER_GPU, TORCH_HOST_OVERHEAD

    assert published.benchmark("A11_chlc_rtx4090x8_pcie_p2pon_allreduce").floor == 8 * LAUNCH_PER_GPU  # -g 8
    assert published.benchmark("A01_nccltests290_h100x8_hgx_1node_allreduce").floor == 8 * LAUNCH_PER_GPU  # header
    assert published.benchmark("A02_nccltests290_h100_2x8_ib_ndr_allreduce_default").floor == 0  # nGpus 1
    assert published.benchmark("A20_galvatron_dgx-a100-40gb_allreduce").floor == 8 * LAUNCH_PER_GPU  # its text
    torch = published.benchmark("A40_mlengineering_h200x8_allreduce_bench_sweep")
    assert torch.added == TORCH_HOST_OVERHEAD and torch.floor == 0


def test_pageable_and_pinned_copies_of_one_gpu_are_in_the_data_set():
    rows = published.load("C20_gengwg-gpu_dgx-a100_bandwidthtest_pageable").data["rows"]
    assert {(r["direction"], r["memory"]) for r in rows} == {(d, m) for d in ("host_to_device", "device_to_host")
                                                             for m in ("pinned", "pageable")}


def test_topo_table_prints_the_codes_and_the_numa_node_of_each_gpu():
    entry = published.load("D02_chlc_rtx4090x8_topo")
    assert entry.data["numa"] == [3, 2, 1, 0, 7, 6, 5, 4]  # the source's NUMA column (two sockets, four nodes each)
    lines = published.topo_table("D02_chlc_rtx4090x8_topo").splitlines()
    assert lines[0].split()[-2:] == ["NUMA", "node"] and len(lines) == 9
    assert lines[1].split()[:3] == ["GPU0", "X", "SYS"] and lines[8].split()[-1] == "4"
    with pytest.raises(ValueError, match="not nvidia-smi topo -m"):
        published.topo_table("B06_chlc_rtx4090x8_p2p_tinygraddriver")


def test_host_device_rates_in_the_shape_ringlab_bandwidth_gives():
    got = published.host_device("C21_gengwg-gpu_dell-a100-pcie_bandwidthtest_pageable", peak_Bps=31.5e9)
    rates = {(r["what"], r["pinned"]): r["Bps"] for r in got["host_device"]}
    assert rates == {("host->device", True): 17.3e9, ("device->host", True): 24.6e9,
                     ("host->device", False): 3.3e9, ("device->host", False): 8.5e9}
    assert {r["peak_Bps"] for r in got["host_device"]} == {31.5e9} and got["source"].startswith("published measurement")
    with pytest.raises(ValueError, match="has no device 'GPU 7'"):
        published.host_device("C21_gengwg-gpu_dell-a100-pcie_bandwidthtest_pageable", "GPU 7")


def test_peer_rows_are_medians_of_the_matrices_against_the_given_peaks():
    import numpy as np

    off, on = published.peer_rows("B20_hpe_2xh100pcie_nvlink_p2p", "2x H100", peak_on_Bps=300e9, peak_off_Bps=63e9)
    name = "B20_hpe_2xh100pcie_nvlink_p2p"
    assert on["Bps"] == np.nanmedian(published.peer_matrix(name, "unidirectional_enabled"))
    assert off["Bps"] == np.nanmedian(published.peer_matrix(name, "unidirectional_disabled"))
    assert 8 < on["Bps"] / off["Bps"] < 12 and on["peak_Bps"] == 300e9 and "median of 2 pairs" in on["note"]


def test_every_modelled_sweep_can_be_set_against_the_model():
    modelled = published.modelled()
    assert "A01_nccltests290_h100x8_hgx_1node_allreduce" in modelled and "A09_a3mega_h100_2x8_tcpxo_allreduce" not in modelled
    for name in modelled:
        rows = published.against_model(name)
        assert rows and all(r["predicted_busbw"] > 0 and r["ratio"] == r["predicted_busbw"] / r["measured_busbw"]
                            for r in rows)


def test_sweeps_are_size_sweeps_of_one_ranks_and_setting_labelled_with_their_tool():
    found = {s["name"][:3]: s for s in published.sweeps("allreduce")}
    assert "A17" not in found and "A43" not in found  # one size per GPU count: points, not sweeps
    a40 = found["A40"]  # its one NVLS-off point is left out of the line
    assert a40["setting"] is None and len(a40["rows"]) == 20 and "all_reduce_bench.py" in a40["label"]
    assert "rccl-tests" in found["A44"]["label"] and "(A01)" in found["A01"]["label"]
    assert [s["name"][:3] for s in published.sweeps("allgather")] == ["A13"]
    rows = published.busbw_rows("allreduce")
    assert {r["algorithm"] for r in rows} == {s["label"] for s in found.values()}


def test_peer_latency_is_the_median_of_the_gpu_latency_matrices_off_and_on():
    latency = published.peer_latency("B06_chlc_rtx4090x8_p2p_tinygraddriver")  # the tinygrad driver: P2P on
    assert latency == {"off_s": pytest.approx(12.545e-6), "on_s": pytest.approx(1.44e-6), "pairs": 56}
    stock = published.peer_latency("B05_chlc_rtx4090x8_p2p_stockdriver")  # P2P unavailable: "on" is staged too
    assert stock["off_s"] == pytest.approx(12.415e-6) and stock["on_s"] == pytest.approx(12.48e-6)
    with pytest.raises(ValueError, match="B01_ugache_dgx1_v100x8_p2p has no latency matrices"):
        published.peer_latency("B01_ugache_dgx1_v100x8_p2p")  # only bidirectional bandwidth was published


# Where each published-measurement bar of lab 01's links figure comes from: a p2pBandwidthLatencyTest's
# unidirectional matrix (row = source GPU), or a host -> device copy rate.
PEER_BARS = {"RTX 2080 Ti -> 2080 Ti, no P2P": ("B07_autodl_rtx2080ti_x2_p2p", "unidirectional_disabled", 0, 1),
             "RTX 4090 -> 4090, no P2P": ("B05_chlc_rtx4090x8_p2p_stockdriver", "unidirectional_disabled", 0, 1),
             "RTX 4090 -> 4090, P2P, across sockets": ("B06_chlc_rtx4090x8_p2p_tinygraddriver",
                                                       "unidirectional_enabled", 0, 4),
             "RTX 4090 -> 4090, P2P, one socket": ("B06_chlc_rtx4090x8_p2p_tinygraddriver",
                                                   "unidirectional_enabled", 0, 1),
             "H100 SXM -> H100, NVSwitch, P2P": ("B03_kr_h100x8_hgx_p2p", "unidirectional_enabled", 0, 1)}


def _host_to_device(name: str) -> float:
    entry = published.load(name)
    if entry.format == "bandwidthTest":
        return next(r["Bps"] for r in entry.data["rows"]
                    if r["direction"] == "host_to_device" and r["memory"] == "pinned")
    case = next(c for c in entry.data["testcases"] if c["name"] == "host_to_device_memcpy_ce")
    return case["matrix"][0][0] * 1e9  # CPU -> GPU 0


def test_the_published_link_bars_are_shipped_measurements_as_printed_and_name_their_source():
    """Every bar of PUBLISHED_LINKS is a spec figure or a number a shipped measurement printed, one direction, and
    its note (shown on hover) names the file and the GPU pair; none is left without a source."""
    from ringlab.topology.links import PUBLISHED_LINKS

    hosts = {"host -> RTX 2080 Ti, pinned": "C01_autodl_rtx2080ti_bandwidthtest_pinned",
             "host -> H100 SXM, pinned": "C05_kr_h100x8_nvbandwidth"}
    measured = [(what, Bps, note) for what, Bps, note in PUBLISHED_LINKS if not note.startswith(("spec", "NVIDIA:"))]
    assert {what for what, _, _ in measured} == set(PEER_BARS) | set(hosts)
    for what, Bps, note in measured:
        assert note.startswith("published measurement: ")
        if what in hosts:
            name = hosts[what]
            assert Bps == _host_to_device(name)
        else:
            name, key, src, dst = PEER_BARS[what]
            assert f"GPU {src} -> {dst}" in note and key.startswith("unidirectional")
            assert Bps == published.load(name).data["matrices"][key][src][dst] * 1e9
        assert note.endswith(f"({name[:3]})"), note
