"""Lab 05's measured sweep and its published comparison in words, computed from the numbers, both ways
(ringlab.lessons.lab05_scaling)."""
import ringlab as rl
from ringlab.lessons.lab05_scaling.predictions import against_published, describe_against, with_ranks
from ringlab.lessons.lab05_scaling.sizes import EMULATED_SIZES, MACHINE, sizes_lesson
from ringlab.predict.fitting import fit_rows
from ringlab.schedule import bus_factor


def ring_rows(seconds: dict, n: int = 4) -> list[dict]:
    return [{"algorithm": "ring", "bytes": k, "time_s": t, "busbw_Bps": k / t * bus_factor("allreduce", n)}
            for k, t in seconds.items()]


def predicted(n: int = 4) -> dict:
    """The ring's times on the lab's emulated machine, in its units."""
    topology, _ = rl.topology.from_spec(MACHINE, n)
    return {k: rl.predict(rl.build("allreduce.ring", n), k, topology, itemsize=4).seconds for k in EMULATED_SIZES}


def test_links_that_behave_as_predicted_climb_then_flatten_and_the_fit_recovers_them():
    raw = ring_rows({k: (2e-3 + k / 2e9) / (1 + (k == EMULATED_SIZES[-1])) for k in EMULATED_SIZES})  # a jump at the top
    emulated = [dict(r, wall_time_s=0.025 if r["bytes"] == EMULATED_SIZES[-1] else 0.001) for r in ring_rows(predicted())]
    finding = sizes_lesson(raw, emulated, 4)
    assert "this machine took 25.0 ms of wall time to run it" in finding.text
    assert finding.conclusions == ("busbw climbs with size on the emulated machine",
                                   "busbw flattens at large sizes on the emulated machine",
                                   "the fit recovers the emulated links' bandwidth")
    assert "busbw climbs with size on this machine" in finding.observations
    assert "busbw does not flatten at large sizes on this machine" in finding.observations
    assert "the fit of this machine is too loose to use" in finding.observations
    assert "the links: 1000 us and 200 MB/s" in finding.text
    fitted = fit_rows(emulated, "ring", 4)
    assert f"The alpha-beta fit: alpha {fitted.alpha * 1e6:.0f} us, " in finding.text.split("On the emulated")[1]


def test_the_fitted_alpha_is_printed_in_microseconds_as_the_fit_prints_it():
    """A 12.8 us alpha read '0.01 ms' beside the fit's own 'alpha=12.8 us': one unit, that shows the value."""
    raw = ring_rows({k: 2 * 3 * (12.8e-6 + k / 4 / 3e9) for k in EMULATED_SIZES})  # 2(n-1) steps of 12.8 us + chunk
    finding = sizes_lesson(raw, ring_rows(predicted()), 4)
    fitted = fit_rows(raw, "ring", 4)
    here = finding.text.split("On the emulated")[0]
    assert f"alpha {fitted.alpha * 1e6:.3g} us" in here and f"alpha={fitted.alpha * 1e6:.3g} us" in repr(fitted)
    assert "12.8 us" in here and " ms," not in here


def test_a_sweep_that_stops_short_of_bandwidth_bound_is_said_not_to_flatten():
    short = {k: t for k, t in predicted().items() if k <= 4 << 20}  # at 1 ms a message, 4 MiB is not long enough
    finding = sizes_lesson(ring_rows(short), ring_rows(short), 4)
    assert "busbw does not flatten at large sizes on the emulated machine" in finding.conclusions
    assert "it does not flatten within these sizes" in finding.text


def test_the_published_comparison_keeps_allreduce_sweeps_and_full_labels():
    against = against_published("allreduce")
    assert not any(label.startswith(("A13", "A17", "A19", "A43")) for label in against)  # allgather, single points
    assert all(r["collective"] == "allreduce" for rows in against.values() for r in rows)
    assert "A02: 2 nodes x 8 H100 80GB HBM3 (SXM)" in against
    said = describe_against(against)
    assert "A01 (" in said and "A02 (" in said.split("Measured more than 25% below")[1]


def test_the_double_binary_tree_is_predicted_at_its_best_segment_count_and_wins_at_scale():
    seconds = with_ranks(["allreduce.ring", "allreduce.tree", "allreduce.dbtree"], 64 << 20, [2, 1024], 12.5e9, 5e-6)
    assert seconds["allreduce.dbtree"][-1] < seconds["allreduce.ring"][-1] < seconds["allreduce.tree"][-1]
