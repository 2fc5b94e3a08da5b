"""Lab 08's measured peak of a whole step (issue 51): the operating system's resident high-water mark, without and
with recomputation, in processes of their own. The measurement itself (the cut is the activations autograd stops
keeping, the same every step) and the words, driven from both sides of each verdict."""
import pytest

from ringlab.lessons.lab08_sharding_and_memory import peak as P

MiB = 1 << 20


@pytest.fixture(scope="module")
def measured():
    return P.measure_peak()


def test_recomputation_cuts_the_measured_peak_by_the_activations_it_stops_keeping(measured):
    keep, again = P.peak_rows(measured)
    assert keep["spread"] <= MiB and again["spread"] <= MiB  # the measured steps agree to the page
    cut, counted = keep["peak"] - again["peak"], keep["held"] - again["held"]
    assert counted > 100 * MiB and cut == pytest.approx(counted, rel=P.AGREE)
    assert keep["rest"] > 0 and again["rest"] > 0 and keep["rest"] == pytest.approx(again["rest"], rel=P.AGREE)
    assert P.peak_lesson(measured).conclusions == ("recomputation cut the step's peak",
                                                   "the measured cut is the activations counted")


def _result(keep_peak, again_peak, keep_kept=(40 * MiB,) * 4, again_kept=(1 * MiB,) * 4):
    return {"shape": dict(P.SHAPE),
            "keep": {"recompute": False, "peaks": [keep_peak], "kept": list(keep_kept), "parameters": 6 * MiB},
            "recompute": {"recompute": True, "peaks": [again_peak], "kept": list(again_kept), "parameters": 6 * MiB}}


def test_the_words_follow_the_cut_the_count_and_the_rest():
    # counted: 160 MiB kept against 4 + 40 MiB: 116 MiB less
    good = P.peak_lesson(_result(210 * MiB, 94 * MiB))
    assert "its peak was 210 MiB keeping every activation and 94 MiB recomputing, 55% less" in str(good)
    assert "the measured cut is 116 MiB, within 0.0% of it: the cut is the activations" in str(good)
    assert "each peak has 50 MiB and 50 MiB more" in str(good) and "about the same either way" in str(good)
    off = P.peak_lesson(_result(210 * MiB, 150 * MiB))
    assert "the measured cut is 60 MiB, 48% less than that: the peak moved by other than" in str(off)
    assert "each peak has 50 MiB and 106 MiB more" in str(off) and "not the same either way" in str(off)
    assert off.conclusions[1] == "the measured cut is not the activations counted"
    more = P.peak_lesson(_result(210 * MiB, 40 * MiB))
    assert "the measured cut is 170 MiB, 47% more than that" in str(more)
    none = P.peak_lesson(_result(210 * MiB, 220 * MiB))
    assert "recomputing: no less" in str(none) and none.conclusions[0] == "recomputation did not cut the step's peak"


def test_without_linuxs_proc_the_measurement_says_what_it_needs(monkeypatch, tmp_path):
    monkeypatch.setattr(P, "CLEAR_REFS", tmp_path / "no-such-file")
    with pytest.raises(RuntimeError, match="resident high-water mark .* this machine has no /proc"):
        P.measure_peak()
