"""Lab 02's measured lesson in words: computed from the runs, both ways (ringlab.lessons.lab02_reduce_broadcast)."""
import pytest

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
