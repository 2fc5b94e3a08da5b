"""ringlab.train.zero: every ZeRO stage ends with plain data parallelism's weights (SGD and Adam, float64, 2 and 3
real ranks, parameter counts that do not divide by the ranks), sends what the paper's table says, and holds what
its formulas say, measured from the tensors."""
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the train extra)")

from ringlab.cluster.launch import run_mpi  # noqa: E402
from ringlab.train.zero import ZeroOptimizer, zero_memory, zero_traffic  # noqa: E402

SCRIPT = Path(__file__).parent / "mpi" / "zero_equivalence.py"
STEPS = 4


@pytest.fixture(scope="module", params=[2, 3])
def runs(request):
    done = run_mpi(request.param, [str(SCRIPT), str(STEPS)], timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == 6 + 4, done.stdout[-2000:]
    return rows


def test_accumulated_micro_batches_and_the_models_own_zero_grad(runs):
    others = [row for row in runs if "case" in row]
    assert [(row["case"], row["stage"]) for row in others] == [("accumulated", 1), ("accumulated", 2),
                                                              ("accumulated", 3), ("model.zero_grad", 1)]
    for row in others:
        assert row["difference"] < 1e-9, row


def test_every_stage_equals_plain_data_parallelism(runs):
    for row in [row for row in runs if "case" not in row]:
        assert row["difference"] < 1e-9, row
        assert row["ranks_agree"] and row["closed_model_equal"], row


def test_the_model_does_not_divide_by_the_ranks(runs):
    pieces = [held["pieces"] for held in runs[0]["held"]]
    assert len({tuple(p) for p in pieces}) > 1  # ranks hold pieces of different sizes
    assert 0 in pieces[-1]  # PReLU's one parameter leaves the last rank nothing of it
    assert [sum(sizes) for sizes in zip(*pieces)] == [88, 1, 60, 6]  # one flat unit per module


def test_what_each_stage_sends_is_the_papers_2_and_3_psi(runs):
    for row in [row for row in runs if "case" not in row]:
        n, psi = row["ranks"], row["nparams"]
        total = sum(sum(sent.values()) for sent in row["sent"]) / row["steps"]  # every rank, one step
        assert total == n * zero_traffic(psi, n, row["stage"], itemsize=8)
        assert total == (3 if row["stage"] == 3 else 2) * (n - 1) * psi * 8


def test_what_each_rank_holds_is_the_papers_formula_with_its_own_pieces(runs):
    for row in [row for row in runs if "case" not in row]:
        n, psi, stage = row["ranks"], row["nparams"], row["stage"]
        state_bytes = 16 if row["optimizer"] == "adam" else 8  # Adam: two moments; SGD: its momentum
        for held in row["held"]:
            mine = sum(held["pieces"])
            formula = zero_memory(psi, n, stage, param_bytes=8, grad_bytes=8, state_bytes=state_bytes)
            exact = {k: v / (psi / n) * mine if v < psi * 8 or k == "optimizer_state" else v for k, v in formula.items()}
            steps = 4 * len(held["pieces"]) if row["optimizer"] == "adam" else 0  # Adam's step counters (float32)
            assert held["memory"]["parameters"] == pytest.approx(exact["parameters"])
            assert held["memory"]["gradients"] == pytest.approx(exact["gradients"])
            assert held["memory"]["optimizer_state"] == pytest.approx(exact["optimizer_state"] + steps)


def test_the_papers_figure_1():
    """7.5 billion parameters on 64 GPUs, mixed-precision Adam (K = 12): 120, 31.4, 16.6 and 1.9 GB."""
    got = [sum(zero_memory(7.5e9, 64, stage).values()) / 1e9 for stage in range(4)]
    assert got == pytest.approx([120, 31.4, 16.6, 1.9], abs=0.05)  # as the paper prints them
    assert zero_traffic(100, 4, 3) / zero_traffic(100, 4, 1) == 1.5


def _model():
    return torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.ReLU(), torch.nn.Linear(2, 1)).double()


def test_misuse_is_a_clear_error():
    from mpi4py import MPI

    model = _model()
    with pytest.raises(ValueError, match="stage must be 1"):
        ZeroOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model, stage=4, comm=MPI.COMM_SELF)
    with pytest.raises(ValueError, match="stage must be 1"):
        ZeroOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model, stage=True, comm=MPI.COMM_SELF)
    with pytest.raises(ValueError, match="exactly the model's parameters"):
        ZeroOptimizer(torch.optim.SGD(list(model.parameters())[:2], lr=0.1), model, comm=MPI.COMM_SELF)
    used = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 3, dtype=torch.float64)).sum().backward()
    used.step()
    with pytest.raises(ValueError, match="fresh optimizer"):
        ZeroOptimizer(used, model, comm=MPI.COMM_SELF)
    with pytest.raises(ValueError, match="stage must be 0"):
        zero_memory(10, 2, 5)


def test_one_rank_is_plain_training_and_full_parameters_at_stage_3():
    from mpi4py import MPI

    plain, sharded = _model(), _model()
    sharded.load_state_dict(plain.state_dict())
    opt_plain = torch.optim.Adam(plain.parameters(), lr=0.1)
    opt = ZeroOptimizer(torch.optim.Adam(sharded.parameters(), lr=0.1), sharded, stage=3, comm=MPI.COMM_SELF)
    x = torch.linspace(-1, 1, 12, dtype=torch.float64).reshape(4, 3)
    for _ in range(3):
        for model, o in ((plain, opt_plain), (sharded, opt)):
            o.zero_grad()
            model(x).pow(2).sum().backward()
            o.step()
    assert opt.memory()["parameters"] == sum(p.numel() * 8 for p in plain.parameters())  # one rank holds it all
    for mine, theirs in zip(opt.full_parameters(), plain.parameters()):
        assert torch.allclose(mine, theirs, rtol=1e-12, atol=0)


def test_frozen_parameters_stay_whole_and_come_back_in_order():
    from mpi4py import MPI

    model = _model()
    model[0].weight.requires_grad_(False)
    frozen = model[0].weight.detach().clone()
    opt = ZeroOptimizer(torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1), model, stage=3,
                        comm=MPI.COMM_SELF)
    model(torch.ones(2, 3, dtype=torch.float64)).sum().backward()
    opt.step()
    full = opt.full_parameters()
    assert [t.shape for t in full] == [p.shape for p in model.parameters()]
    assert torch.equal(full[0], frozen)
    assert opt.memory()["parameters"] == sum(p.numel() * 8 for p in model.parameters())
