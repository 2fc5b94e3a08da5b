"""ringlab.train.overlap: the bucket sizes swept, and the sweep measured on 2 real MPI ranks (a few steps each)."""
import json
from pathlib import Path

import pytest
from busy_support import busy_processes

torch = pytest.importorskip("torch", reason="torch is not installed (the train extra)")

from ringlab.cluster.launch import run_mpi  # noqa: E402
from ringlab.train.overlap import bucket_sizes, gradient_bytes, make_wide_model, measure_overlap  # noqa: E402

HERE = Path(__file__).parent / "mpi"
LAYER = 512 * 512 * 4 + 512 * 4  # a hidden layer's weight and bias, float32

SWEEP = """
import json
import numpy as np
from mpi4py import MPI
from ringlab.train.overlap import bucket_sizes, make_wide_model, measure_overlap, time_bucket_allreduce
timed = time_bucket_allreduce([4096, 1 << 20], iters=2)
measured = measure_overlap(bucket_sizes(make_wide_model()), steps=2, warmup=1)
if MPI.COMM_WORLD.Get_rank() == 0:
    counts = [{"rank": [int(r) for r in np.unique(t["rank"])], "steps": [int(s) for s in np.unique(t["step"])],
               "backward": int((t["kind"] == "backward").sum()), "allreduce": int((t["kind"] == "allreduce").sum()),
               "bytes": int(t[t["kind"] == "allreduce"]["bytes"].sum())} for t in measured["traces"]]
    print(json.dumps({"rows": measured["rows"], "counts": counts, "timed": timed}))
else:
    assert measured is None and timed is None
"""


def test_bucket_sizes_from_one_parameter_to_the_whole_model():
    model = make_wide_model()
    total = gradient_bytes(model)
    assert total == 4 * (16 * 512 + 512 + 5 * (512 * 512 + 512) + 512 * 8 + 8)
    assert bucket_sizes(model) == [1, LAYER, 2 * LAYER, 4 * LAYER, total]
    assert bucket_sizes(make_wide_model(width=64, hidden_layers=1))[-1] == gradient_bytes(make_wide_model(64, 1))


def test_bad_arguments_are_refused_before_any_mpi():
    with pytest.raises(ValueError, match="need steps >= 1 and warmup >= 0, got steps=0"):
        measure_overlap([1], steps=0)
    with pytest.raises(ValueError, match="need bucket sizes of 1 byte or more"):
        measure_overlap([0, 100])


def test_the_sweep_on_two_ranks():
    done = run_mpi(2, ["-c", SWEEP], timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    rows, counts = result["rows"], result["counts"]
    total = gradient_bytes(make_wide_model())
    assert [(r["bucket_bytes"], r["overlap"]) for r in rows] == [(b, o) for o in (False, True)
                                                                  for b in bucket_sizes(make_wide_model())]
    assert [r["buckets"] for r in rows] == [14, 7, 4, 2, 1] * 2  # 14 parameters; then 1, 2, 4 layers a bucket
    for r, c in zip(rows, counts):
        assert (r["ranks"], r["steps"], r["gradient_bytes"]) == (2, 2, total)
        assert c == {"rank": [0, 1], "steps": [0, 1], "backward": 2 * 2 * 14, "allreduce": 2 * 2 * r["buckets"],
                     "bytes": 2 * 2 * total}  # warm-up left out, every rank's rows in
        assert r["step_s"] > 0 and r["backward_s"] > 0 and r["allreduce_s"] > 0 and r["waited_s"] >= 0
        assert r["skew_s"] >= 0
    assert [t["bytes"] for t in result["timed"]] == [4096, 1 << 20] and all(t["time_s"] > 0 for t in result["timed"])


@pytest.mark.parametrize("compute, busy", [("model", 2), ("cpu", 0), ("cpu", 2)])
def test_overlap_on_emulated_links_hides_communication_in_virtual_time(tmp_path, compute, busy):
    """The optimizer's two threads keep a clock each: with compute="model" (4 layers of 0.1 s forward and 0.2 s
    backward, one bucket a layer, one bucket's allreduce about 0.2 s on the links) a step takes 4 x (0.1 + 0.2)
    + one allreduce with overlap and 4 x (0.1 + 0.2 + one allreduce) without, to 5%, whatever else runs on the
    cores, and nobody sleeps (wall time under half of it); with compute="cpu" (the wide MLP's CPU time, on links
    where averaging takes half of it) overlap's step is clearly the shorter."""
    out = tmp_path / "overlap.json"
    with busy_processes(busy):
        done = run_mpi(2, [str(HERE / "vt_train_overlap.py"), str(out), compute], timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(out.read_text())
    off, on = seen["rows"]["False"], seen["rows"]["True"]
    assert off["buckets"] == on["buckets"] >= 4
    if compute == "model":
        layers, a = seen["layers"], seen["bucket_allreduce"]
        computing = layers * (seen["forward"] + seen["backward"])
        assert off["step_s"] == pytest.approx(computing + layers * a, rel=0.05), seen
        assert on["step_s"] == pytest.approx(computing + a, rel=0.05), seen
        assert on["comm_s"] == pytest.approx(a, rel=0.05) and off["comm_s"] == pytest.approx(layers * a, rel=0.05)
        assert max(off["wall_s"], on["wall_s"]) < 0.5 * on["step_s"], seen  # nobody sleeps
    else:
        assert on["step_s"] < 0.95 * off["step_s"], seen
        assert on["comm_s"] < off["comm_s"], seen


def test_modelled_compute_needs_an_emulated_machine_that_counts_no_cpu():
    from ringlab.mpi.emulate import emulate
    from ringlab.train.overlap import time_compute

    for where in (None, "cpu"):
        with emulate("uniform:1:10", compute=where) if where else open("/dev/null"):
            with pytest.raises(ValueError, match="call inside rl.emulate\\(machine, compute='model'\\)"):
                measure_overlap([1], compute=(0.01, 0.02))
    with emulate("uniform:1:10", compute="model"):
        for bad in ((0.01,), (0.01, -1.0), "fast", (True, 0.02), (0.01, float("inf")), (float("nan"), 0.02)):
            with pytest.raises(ValueError, match="compute is \\(forward, backward\\) seconds a step, each finite"):
                measure_overlap([1], compute=bad)
    with pytest.raises(ValueError, match="passes must be a whole number >= 1, got 0"):
        time_compute(passes=0)


def test_the_lessons_emulated_overlap_hides_communication_on_cpus_four_times_faster_to_six_times_slower(tmp_path):
    """Lab 06's emulated sweep with modelled compute: the fast CPU's passes (FAST in overlap_modelled.py) and
    those of CPUs 4x faster to 6x slower. Every setting's passes take the modelled compute; one bucket takes as
    long with overlap as without (nothing to overlap); overlap hides communication beyond the lesson's noise at
    every speed. Run again with two spinning processes beside the ranks, every step time is the same to the last
    digits: the machine's load has no say."""
    from ringlab.lessons.lab06_training.overlap import _gain, overlap_lesson

    factors = ["0.25", "1.0", "2.5", "6.0"]
    fast = (9.5e-3, 20e-3)
    figures = []
    for busy in (0, 2):
        out = tmp_path / f"modelled-{busy}.json"
        with busy_processes(busy):
            done = run_mpi(2, [str(HERE / "overlap_modelled.py"), str(out), *factors], timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        seen = json.loads(out.read_text())
        assert seen["timed"][0] == seen["timed"][1] and min(seen["timed"][0]) > 0  # the slowest rank's, everywhere
        for factor in factors:
            rows = seen["rows"][factor]
            forward, backward = (float(factor) * c for c in fast)
            assert all(r["compute"] == pytest.approx([forward, backward], rel=1e-12) for r in rows)
            assert all(r["backward_s"] == pytest.approx(backward, rel=0.01) for r in rows), rows
            one = [r["step_s"] for r in rows if r["buckets"] == 1]
            assert one[0] == pytest.approx(one[1], rel=1e-9)
            plain = next(r for r in rows if r["buckets"] == 1 and not r["overlap"])
            assert plain["step_s"] == pytest.approx(forward + backward + plain["allreduce_s"], rel=1e-6)
            _, _, gain, noise = _gain(rows)
            assert gain > noise == 0.05, (factor, gain)
            assert overlap_lesson(rows, rows, cores=2).conclusions == (
                "overlap hid communication on the emulated machine",)
        figures.append([r["step_s"] for f in factors for r in seen["rows"][f]])
    assert figures[0] == pytest.approx(figures[1], rel=1e-9)
