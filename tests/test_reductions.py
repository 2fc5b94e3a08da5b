"""NCCL's reduction operators (sum, prod, max, min, avg) and bfloat16, in every reducing algorithm."""
from pathlib import Path

import numpy as np
import pytest

from ringlab.cluster.launch import run_mpi
from ringlab.mpi.reduction import OPS, bfloat16, problems, reduction, wire_dtype

HERE = Path(__file__).parent / "mpi"


@pytest.mark.parametrize("nranks", [2, 3])
def test_every_op_of_every_reducing_algorithm_matches_mpi(nranks):
    done = run_mpi(nranks, [str(HERE / "check_ops.py")], timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    count = int(done.stdout.split("ok ")[-1].split()[0])
    assert count > 100 * nranks  # the comparisons were made, on every rank


def test_avg_of_integers_rounds_toward_zero_as_nccl():
    sums = np.array([7, -7, 6, -6, 0, -1, 1, np.iinfo(np.int64).max], dtype=np.int64)
    flat = sums.copy()
    reduction("avg", flat.dtype).finish(np, flat, 3)
    assert flat.tolist() == [2, -2, 2, -2, 0, 0, 0, np.iinfo(np.int64).max // 3]
    floats = np.array([7.0, -7.0])
    reduction("avg", floats.dtype).finish(np, floats, 2)
    assert floats.tolist() == [3.5, -3.5]


def test_other_ops_are_not_finished_and_land_by_their_ufunc():
    target, arrived = np.array([1, 5, -2]), np.array([3, 4, -7])
    for op, want in (("sum", [4, 9, -9]), ("prod", [3, 20, 14]), ("max", [3, 5, -2]), ("min", [1, 4, -7])):
        t = target.copy()
        reduction(op, t.dtype).land(np, t, arrived)
        assert t.tolist() == want, op
        reduction(op, t.dtype).finish(np, t, 4)
        assert t.tolist() == want, op


def test_bfloat16_travels_as_words_and_reduces_as_bfloat16():
    bf = bfloat16()
    assert bf is not None, "ml_dtypes is a dependency of ringlab"
    assert wire_dtype(bf) == np.uint16 and wire_dtype(np.dtype(np.float32)) == np.float32
    a, b = np.array([1.5, 3.0], bf), np.array([0.25, -8.0], bf)
    words = a.view(np.uint16)
    reduction("max", bf).land(np, words, b.view(np.uint16))
    assert words.view(bf).astype(float).tolist() == [1.5, 3.0]
    reduction("sum", bf).land(np, words, b.view(np.uint16))
    assert words.view(bf).astype(float).tolist() == [1.75, -5.0]


def test_problems_name_what_is_wrong():
    assert problems("sum", np.dtype(np.float32), "allreduce") == []
    assert "one of sum, prod, max, min, avg" in problems("mean", np.dtype(np.float32), "allreduce")[0]
    assert "complex" in problems("min", np.dtype(np.complex64), "allreduce")[0]
    assert "broadcast reduces nothing" in problems("prod", np.dtype(np.float32), "broadcast")[0]
    assert set(OPS) == {"sum", "prod", "max", "min", "avg"}
