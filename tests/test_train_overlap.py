"""ringlab.train.overlap: the bucket sizes swept, and the sweep measured on 2 real MPI ranks (a few steps each)."""
import json

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the train extra)")

from ringlab.cluster.launch import run_mpi  # noqa: E402
from ringlab.train.overlap import bucket_sizes, gradient_bytes, make_wide_model, measure_overlap  # noqa: E402

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
