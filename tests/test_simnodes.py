"""Lab 05's simulated nodes (ringlab.lessons.lab05_scaling.simnodes): measured under mpiexec, predicted by the cost model."""
import json
from pathlib import Path

import numpy as np
import pytest

from ringlab.lessons.lab05_scaling import simnodes
from ringlab.cluster.launch import run_mpi

HERE = Path(__file__).parent / "mpi"


@pytest.mark.parametrize("nranks", [4, 3])
def test_the_measurement_checks_and_times_both_algorithms_on_every_size(nranks):
    done = run_mpi(nranks, [str(HERE / "simnodes_measure.py")], timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(done.stdout.strip().splitlines()[-1])
    assert [(r["algorithm"], r["bytes"]) for r in rows] == [(a, k) for k in (1 << 12, 1 << 16) for a in simnodes.ALGORITHMS]
    factor = 2 * (nranks - 1) / nranks
    for r in rows:
        assert r["time_s"] > 0 and r["busbw_Bps"] == pytest.approx(r["bytes"] / r["time_s"] * factor)
    # the slowed link is a floor: a boundary rank of the ring sends 2(n-1)/n of the buffer across it
    ring = next(r for r in rows if r["algorithm"] == "ring" and r["bytes"] == 1 << 16)
    assert ring["time_s"] >= (1 << 16) * factor / 0.05e9 * 0.99


def test_the_prediction_is_the_emulated_machine_free_inside_a_node_and_slow_between():
    assert simnodes.simulated_spec(2, 1e9) == "nodes:2:1.0:0"
    sizes = [1 << 20, 1 << 24]
    model = simnodes.predicted_on_simulated(sizes, 4, 2, link_Bps=1e9)
    time = {(r["algorithm"], r["bytes"]): r["time_s"] for r in model}
    # the flat ring sends 2(n-1)/n of the buffer across the link, one chunk a step; the hierarchy 2(G-1)/n: 3x less
    assert time[("ring", 1 << 24)] == pytest.approx(6 * (1 << 24) / 4 / 1e9)
    assert time[("ring", 1 << 24)] == pytest.approx(3 * time[("hierarchical", 1 << 24)])
    text = simnodes.describe_simulated(model, model, 1.0, 4, 2)
    assert "as predicted" in text and "within 1.5x" in text and "2(n-1)/n = 1.50" in text and "2(G-1)/n = 0.50" in text
    assert "measured here, in virtual time" in text and "wall time" not in text
    walled = [dict(r, wall_time_s=0.002) for r in model]
    assert "This machine took 2.0 and 2.0 ms of wall time" in simnodes.describe_simulated(walled, model, 1.0, 4, 2)
    worse = [dict(r, time_s=r["time_s"] * (10 if r["algorithm"] == "hierarchical" else 1)) for r in model]
    text = simnodes.describe_simulated(worse, model, 1.0, 4, 2)
    assert "was not faster, though the model predicts" in text and "below the predicted one" in text
    assert "this CPU's additions, counted as the CPU time they took, are not in the model" in text


def test_the_ratio_comes_from_the_presets_figures():
    assert simnodes.nvlink_to_nic() == pytest.approx(9.0)
    assert np.isfinite(simnodes.nvlink_to_nic())


def test_side_by_side_sets_the_simulated_nodes_beside_the_h100_prediction_and_the_published_sweeps():
    from ringlab.lessons.lab05_scaling.predictions import hierarchical_against_flat

    sizes = [1 << 16, 1 << 20]
    model = simnodes.predicted_on_simulated(sizes, 4, 2, link_Bps=1e9)
    measured = [dict(r, time_s=r["time_s"] * 2) for r in model]  # twice as slow, same ratio
    h100 = hierarchical_against_flat("ib-2x8-h100", [1 << k for k in range(16, 31)], local=8)
    rows = simnodes.side_by_side(measured, model, 1.0, 4, 2, h100)
    assert [r["source"].split(" ")[0] for r in rows] == ["measured", "predicted", "predicted", "published"]
    assert rows[0]["speedup"] == pytest.approx(rows[1]["speedup"]) and rows[0]["bytes"] == 1 << 20
    assert rows[0]["setup"].startswith("4 ranks as 2 simulated nodes")
    flat = {r["bytes"]: r["busbw_Bps"] for r in h100["flat ring: predicted"]}
    hier = {r["bytes"]: r["busbw_Bps"] for r in next(v for k, v in h100.items() if k.startswith("hierarchical"))}
    assert rows[2]["speedup"] == pytest.approx(hier[rows[2]["bytes"]] / flat[rows[2]["bytes"]])
    assert rows[3]["bytes"] == rows[2]["bytes"] and rows[3]["speedup"] > 1  # NCCL's choice beats the forced ring


def test_measure_here_runs_one_job_and_returns_rank_zeros_checked_rows():
    rows = simnodes.measure_here([1 << 12], per_node=2, link_gbps=0.05, nranks=4, repeats=2, timeout=180)
    assert [(r["algorithm"], r["bytes"]) for r in rows] == [(a, 1 << 12) for a in simnodes.ALGORITHMS]
    assert all(r["time_s"] > 0 for r in rows)


def test_measure_here_names_a_failed_job_and_bad_input(monkeypatch):
    with pytest.raises(ValueError, match="simulated nodes of 3"):
        simnodes.measure_here([1 << 12], per_node=3, link_gbps=1.0, nranks=4)
    with pytest.raises(ValueError, match="link_gbps"):
        simnodes.measure_here([1 << 12], per_node=2, link_gbps=0.0, nranks=4)
    # a job whose ranks fail (here: an emulated machine in the environment beside the simulated nodes' own link,
    # which every rank refuses) is named with what the ranks said
    monkeypatch.setenv("RINGLAB_EMULATE", "uniform:1:1")
    with pytest.raises(RuntimeError, match=r"(?s)failed \(exit status.*has links of its own"):
        simnodes.measure_here([1 << 12], per_node=2, link_gbps=1.0, nranks=4, repeats=1, timeout=120)


def test_a_link_slower_than_the_deadline_allows_still_measures_in_virtual_time():
    """Virtual time: a step of 3 s on the slowed link passes within the ranks' deadline, nobody waiting for it."""
    rows = simnodes.measure_here([1 << 22], per_node=2, link_gbps=1e-3, nranks=4, repeats=1, timeout=120)
    ring = next(r for r in rows if r["algorithm"] == "ring")
    assert ring["time_s"] >= 6 * (1 << 20) / 1e6 * 0.99 and ring["wall_time_s"] < ring["time_s"] / 10


def test_the_simulated_link_is_finite_even_where_the_fit_found_no_bandwidth():
    """CI's browser run of lab 05 fitted an infinite bandwidth on a busy machine (its times did not grow with size)
    and lab 05 then asked for a link of 'inf' GB/s between simulated nodes, which ringlab refuses. The link now
    comes from the ring's measured busbw at the largest fitted size where the fit has no finite bandwidth."""
    from types import SimpleNamespace

    from ringlab.schedule import bus_factor

    sizes, measured = np.array([1 << 20, 4 << 20, 2 << 20]), np.array([1e-3, 2e-3, 1.5e-3])
    flat = SimpleNamespace(bandwidth=float("inf"), sizes=sizes, measured=measured)
    gbps, said = simnodes.simulated_link_gbps(flat, nranks=4)
    busbw = (4 << 20) / 2e-3 * bus_factor("allreduce", 4)
    assert gbps == pytest.approx(busbw / simnodes.nvlink_to_nic() / 1e9) and np.isfinite(gbps)
    assert type(gbps) is float  # a numpy scalar's repr, 'np.float64(...)', is no GB/s in an emulated machine's spec
    assert simnodes.simulated_spec(2, gbps * 1e9).count(":") == 3
    assert "found no finite bandwidth" in said and "at 4 MiB" in said
    gbps, said = simnodes.simulated_link_gbps(SimpleNamespace(bandwidth=18e9, sizes=sizes, measured=measured), 4)
    assert gbps == pytest.approx(2.0) and said.startswith("B = the bandwidth fitted above, 18.00 GB/s")
    with pytest.raises(ValueError, match="no measurements"):
        simnodes.simulated_link_gbps(SimpleNamespace(bandwidth=0.0, sizes=np.array([]), measured=np.array([])), 4)
