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


def test_the_step_runs_in_fp32_as_the_lab_says(measured):
    """fp32, which every CPU computes at speed (bf16 took 5x as long a step, and the lab's cell minutes, on an
    AVX2-only CPU): the processes measured that width, as autograd's bytes show (Korthikanti et al.'s 16-bit count
    doubled, with LayerNorm's statistics, and the causal mask, a bool, once), and the lab and the lesson say so."""
    from pathlib import Path

    from ringlab.lessons.lab08_sharding_and_memory.recompute import korthikanti_bytes

    s = P.SHAPE
    assert s["dtype"] == measured["shape"]["dtype"] == "float32"
    count = korthikanti_bytes(s["seq"], s["batch"], s["hidden"], s["heads"])
    tokens = s["seq"] * s["batch"]
    assert measured["keep"]["kept"] == [2 * count["full"] + 2 * 4 * tokens * 2 + s["seq"] ** 2] * s["layers"]
    assert measured["recompute"]["kept"] == [2 * count["recompute"]] * s["layers"]
    said = str(P.peak_lesson(measured))
    assert f"hidden {s['hidden']}, fp32)" in said and "in fp32)" in said
    lab = (Path(__file__).parents[1] / "labs" / "src" / "08_sharding_and_memory.py").read_text()
    assert f"{s['seq']} tokens of {s['batch']} sequences, h = {s['hidden']}, {s['heads']} heads, in\n# fp32" in lab


def test_a_shape_that_names_no_width_is_measured_and_said_in_fp32():
    assert P._dtype({"layers": 1}) == "fp32" and P._dtype({"dtype": "bfloat16"}) == "bf16"


def test_an_unknown_width_is_refused_before_any_process_starts():
    with pytest.raises(ValueError, match="the stack's dtype is one of float32, bfloat16, float16; got 'float8'"):
        P.measure_peak(dict(P.SHAPE, dtype="float8"))


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
