"""ringlab.train.experts: the expert-parallel layer equals the single-rank one on 2 and 3 real ranks (outputs and
every gradient, float64, one and two experts a rank, uneven tokens, experts no token chose), padded, dropless
(rl.alltoallv) and with a capacity factor (the same tokens dropped); a capacity's choice of tokens; bad options."""
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the train extra)")

from ringlab.cluster.launch import run_mpi  # noqa: E402
from ringlab.train.experts import ExpertParallel, MixtureOfExperts  # noqa: E402

SCRIPT = Path(__file__).parent / "mpi" / "experts_equivalence.py"


@pytest.mark.parametrize("nranks", [2, 3])
def test_expert_parallel_equals_one_rank(nranks):
    done = run_mpi(nranks, [str(SCRIPT)], timeout=200)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == 3 * (2 * 3 + 3)  # three ways; output, input gradient, router, and one line per owned expert
    for row in rows:
        assert row["difference"] < 1e-9, row
        assert row["dropped"] == row["reference_dropped"], row  # the same tokens dropped as on one rank
    assert any(0 in row["per_expert"] for row in rows)  # an expert no token chose still takes part
    by_way = {(r["dispatch"], r["capacity_factor"], r["experts_per_rank"]): r for r in rows}
    for per_rank in (1, 2):
        padded, dropless, capped = (by_way[(d, f, per_rank)] for d, f in (("padded", None), ("dropless", None),
                                                                          ("padded", 1.0)))
        assert padded["dropped"] == dropless["dropped"] == 0 < capped["dropped"]
        assert dropless["capacity"] is None and "alltoall" not in dropless["sent"]
        assert dropless["sent"]["alltoallv"] < padded["sent"]["alltoall"]  # no padding sent


def test_a_capacity_takes_the_first_tokens_that_chose_each_expert():
    from ringlab.train.experts import expert_capacity, within_capacity

    choice = torch.tensor([2, 0, 2, 2, 1, 0, 2])
    assert within_capacity(choice, 2).tolist() == [True, True, True, False, True, True, False]
    assert within_capacity(choice, 0).tolist() == [False] * 7
    assert expert_capacity(1.25, 1024, 8) == 160 and expert_capacity(1.0, 10, 4) == 3
    moe = MixtureOfExperts(features=4, experts=3, hidden=5).double()
    x = torch.randn(40, 4, dtype=torch.float64)
    _, chosen = moe.route(x)
    dropped = ~within_capacity(chosen, 5)
    out = moe(x, capacity=5)
    assert dropped.any() and (out[dropped] == 0).all() and torch.equal(out[~dropped], moe(x)[~dropped])
    with pytest.raises(ValueError, match="capacity must be a whole number of tokens >= 0, got 2.5"):
        moe(x, capacity=2.5)


def test_a_dispatch_or_capacity_factor_that_cannot_be_is_refused():
    from mpi4py import MPI

    moe = MixtureOfExperts(features=4, experts=2, hidden=5).double()
    with pytest.raises(ValueError, match="dispatch is 'padded' or 'dropless', got 'fast'"):
        ExpertParallel(moe, MPI.COMM_SELF, dispatch="fast")
    for factor in (0, -1.0, float("inf"), True, "1.25"):
        with pytest.raises(ValueError, match="capacity_factor must be a number > 0"):
            ExpertParallel(moe, MPI.COMM_SELF, capacity_factor=factor)
    with pytest.raises(ValueError, match="a dropless dispatch drops nothing: give it no capacity_factor"):
        ExpertParallel(moe, MPI.COMM_SELF, dispatch="dropless", capacity_factor=1.25)


def test_one_rank_is_the_layer_itself_and_uneven_experts_are_refused():
    from mpi4py import MPI

    moe = MixtureOfExperts(features=4, experts=3, hidden=5).double()
    x = torch.randn(9, 4, dtype=torch.float64)
    assert torch.allclose(ExpertParallel(moe, MPI.COMM_SELF)(x), moe(x), rtol=1e-12, atol=0)
    with pytest.raises(ValueError, match="3 experts do not spread evenly over 2 ranks"):
        ExpertParallel(moe, type("Two", (), {"Get_size": lambda self: 2, "Get_rank": lambda self: 0})())
