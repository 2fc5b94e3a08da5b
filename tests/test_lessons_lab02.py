"""Lab 02's measured lesson in words: computed from the runs, both ways (ringlab.lessons.lab02_reduce_broadcast)."""
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from ringlab.lessons.lab02_reduce_broadcast import (MACHINE, SEGMENTS, describe_emulated_fit, fit_chain, pipelining,
                                                    predicted_chain)


def run(times, machine=None, tree=0.01):
    return {"nbytes": 1 << 22, "nranks": 4, "segments": list(SEGMENTS), "chain": list(times), "tree": tree,
            "machine": machine}


def test_a_machine_where_splitting_only_adds_steps_is_said_not_to_pay_and_why():
    raw = run([0.016, 0.017, 0.030, 0.060, 0.062, 0.128, 0.236])
    emulated = run(predicted_chain(run([1] * 7, MACHINE)), MACHINE)  # exactly the prediction
    finding = pipelining(raw, emulated)
    assert finding.conclusions == ("pipelining pays on the emulated machine", "the emulated best S is the predicted one")
    assert finding.observations == ("pipelining does not pay on this machine",)
    assert "the best, S = 1, 16.0 ms" in finding.text and "the CPU, not a link, sets those times" in finding.text
    assert str(finding) == finding.text


def test_a_machine_where_pipelining_pays_says_so_and_a_far_best_s_is_named():
    raw = run([0.100, 0.060, 0.040, 0.045, 0.050, 0.070, 0.090])
    emulated = run([0.150, 0.116, 0.095, 0.094, 0.126, 0.183, 0.090], MACHINE)  # best at 64: far from the model's
    finding = pipelining(raw, emulated)
    assert finding.conclusions == ("pipelining pays on the emulated machine", "the emulated best S is not the predicted one")
    assert finding.observations == ("pipelining pays on this machine",)
    assert "2.5x faster: pipelining pays" in finding.text and "the CPU, not a link" not in finding.text
    assert "more than one step of the grid apart" in finding.text


def test_the_fit_of_an_emulated_run_is_set_against_its_links():
    exact = run(predicted_chain(run([1] * 7, MACHINE)), MACHINE)
    said = describe_emulated_fit(exact, fit_chain(exact))
    assert "against links of 2.00 ms and 100 MB/s: the fit recovers the links." in said
    slow = run([t + 0.002 * (S + 2) for t, S in zip(exact["chain"], SEGMENTS)], MACHINE)  # 2 ms more a step
    said = describe_emulated_fit(slow, fit_chain(slow))
    assert "ms a step beyond the links' latency is this machine's own work in a step, counted as the CPU time" in said


def test_a_fit_that_trades_latency_for_bandwidth_or_finds_no_cost_per_byte_says_so():
    exact = run(predicted_chain(run([1] * 7, MACHINE)), MACHINE)
    # each call as long as its steps' latency alone: the best fit has no cost per byte ("inf MB/s ... the bandwidth
    # is the links'")
    flat = run([0.002 * (S + 2) for S in SEGMENTS], MACHINE)
    said = describe_emulated_fit(flat, fit_chain(flat))
    assert "no cost per byte" in said and "inf" not in said and "the bandwidth is the links'" not in said
    # a run twice as slow per byte: the fit's bandwidth is half the links', said so rather than "the links'"
    topology_rate = 100e6
    slower = run([t + 4 * 2 ** 20 * (S + 2) / S / topology_rate for t, S in zip(exact["chain"], SEGMENTS)], MACHINE)
    said = describe_emulated_fit(slower, fit_chain(slower))
    assert "the bandwidth is 0.50x the links'" in said and "recovers" not in said


@settings(max_examples=60, deadline=None)
@given(times=st.lists(st.floats(min_value=1e-4, max_value=1.0), min_size=len(SEGMENTS), max_size=len(SEGMENTS)),
       raw=st.lists(st.floats(min_value=1e-4, max_value=1.0), min_size=len(SEGMENTS), max_size=len(SEGMENTS)))
def test_any_measured_chain_times_read_without_nan_or_a_claim_against_them(times, raw):
    emulated, here = run(times, MACHINE), run(raw)
    finding = pipelining(here, emulated)
    for text in (finding.text, describe_emulated_fit(emulated, fit_chain(emulated)),
                 describe_emulated_fit(here | {"machine": MACHINE}, fit_chain(here))):
        assert not re.search(r"\bnan\b|\binf\b|-\d", text), text
    best = min(times)
    assert ("pipelining pays on the emulated machine" in finding.conclusions) == (best <= 0.8 * times[0])
