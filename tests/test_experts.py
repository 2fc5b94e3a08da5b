"""ringlab.train.experts: the expert-parallel layer equals the single-rank one on 2 and 3 real ranks (outputs and
every gradient, float64, one and two experts a rank, uneven tokens, experts no token chose)."""
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
    assert len(rows) == 2 * 3 + 3  # output, input gradient, router; and one line per owned expert
    for row in rows:
        assert row["difference"] < 1e-9, row
    assert any(0 in row["per_expert"] for row in rows)  # an expert no token chose still takes part


def test_one_rank_is_the_layer_itself_and_uneven_experts_are_refused():
    from mpi4py import MPI

    moe = MixtureOfExperts(features=4, experts=3, hidden=5).double()
    x = torch.randn(9, 4, dtype=torch.float64)
    assert torch.allclose(ExpertParallel(moe, MPI.COMM_SELF)(x), moe(x), rtol=1e-12, atol=0)
    with pytest.raises(ValueError, match="3 experts do not spread evenly over 2 ranks"):
        ExpertParallel(moe, type("Two", (), {"Get_size": lambda self: 2, "Get_rank": lambda self: 0})())
