"""The DistributedOptimizer's trace (trace=True) on real MPI ranks, 2 and 3: a row per gradient and per bucket's
allreduce every step, bytes that add up, and the order overlap puts them in (tests/mpi/train_trace.py)."""
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the train extra)")

from ringlab.cluster.launch import run_mpi  # noqa: E402

SCRIPT = Path(__file__).parent / "mpi" / "train_trace.py"


@pytest.fixture(scope="module", params=[(2, 4 << 10), (3, 1)], ids=["2 ranks, 4 KiB buckets", "3 ranks, a bucket a parameter"])
def traced(request, tmp_path_factory):
    nranks, bucket_bytes = request.param
    out = tmp_path_factory.mktemp("trace") / "trace.npz"
    done = run_mpi(nranks, [str(SCRIPT), str(out), str(bucket_bytes)], timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return np.load(out)


@pytest.mark.parametrize("mode", ["no_overlap", "overlap"])
def test_one_row_per_parameter_and_per_bucket_every_step(traced, mode):
    rows, names, buckets = traced[mode], list(traced["names"]), traced[mode + "_buckets"]
    assert len(buckets) >= 2
    for rank in range(int(traced["ranks"])):
        for step in range(int(traced["steps"])):
            mine = rows[(rows["rank"] == rank) & (rows["step"] == step)]
            backward, allreduce = mine[mine["kind"] == "backward"], mine[mine["kind"] == "allreduce"]
            assert sorted(backward["name"]) == sorted(names)
            assert sorted(allreduce["bucket"]) == list(range(len(buckets)))
            assert list(allreduce["name"]) == [f"bucket {b}" for b in allreduce["bucket"]]
            assert allreduce["bytes"].sum() == backward["bytes"].sum() == traced["grad_bytes"]
            for b, count in enumerate(buckets):  # each parameter's row names the bucket its gradient went into
                assert (backward["bucket"] == b).sum() == count
                assert allreduce[allreduce["bucket"] == b]["bytes"][0] == backward[backward["bucket"] == b]["bytes"].sum()
            assert (mine["start"] <= mine["end"]).all()
            assert (backward["start"][1:] == backward["end"][:-1]).all()  # a layer's backward runs from the hook before


@pytest.mark.parametrize("mode", ["no_overlap", "overlap"])
def test_the_backward_pass_starts_where_it_was_marked(traced, mode):
    rows, forward_ends = traced[mode], traced[mode + "_forward_ends"]
    firsts = [rows[(rows["rank"] == 0) & (rows["step"] == step) & (rows["kind"] == "backward")][0]
              for step in range(int(traced["steps"]))]
    assert firsts[0]["start"] == 0.0  # loss.backward() alone: from the barrier at construction, forward included
    assert all(row["start"] > forward_ends[step] for step, row in enumerate(firsts) if step)  # opt.backward(loss)


def _per_step(rows):
    for rank in np.unique(rows["rank"]):
        for step in np.unique(rows["step"]):
            mine = rows[(rows["rank"] == rank) & (rows["step"] == step)]
            yield mine[mine["kind"] == "backward"], mine[mine["kind"] == "allreduce"]


def test_without_overlap_every_allreduce_starts_after_backward_ends(traced):
    for backward, allreduce in _per_step(traced["no_overlap"]):
        assert (allreduce["issued"] >= backward["end"].max()).all()
        assert (allreduce["start"] >= backward["end"].max()).all()
        assert (allreduce["waited"] >= allreduce["end"] - allreduce["start"]).all()  # step() waited for all of it


def test_with_overlap_the_first_bucket_is_averaged_during_backward(traced):
    for backward, allreduce in _per_step(traced["overlap"]):
        last = backward["end"].max()
        first = allreduce[allreduce["bucket"] == 0][0]
        assert first["issued"] < last  # the hook of its last gradient handed it over
        assert first["start"] < last  # and the communication thread began while the slow first layer ran
        for row in allreduce:  # never before the bucket's own gradients were all in
            assert row["start"] >= row["issued"] >= backward[backward["bucket"] == row["bucket"]]["end"].max()
        assert (allreduce["waited"] >= 0).all()


def test_tracing_off_installs_no_hook_of_its_own_and_says_so(traced):
    assert int(traced["untraced_hooks"]) == 0
    assert str(traced["refused"]) == "DistributedOptimizer: nothing traced; construct it with trace=True"
