"""ringlab.train.payoff: one rank timed in this process and a real 2-rank MPI job (a ring-allreduce sweep
and training steps); the numbers' sizes and shapes, never how fast they are."""
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the train extra)")

from ringlab.train.payoff import SWEEP_SIZES, default_rank_counts, measure_payoff, time_steps  # noqa: E402
from ringlab.train.task import make_model, one_thread  # noqa: E402


def test_one_rank_is_all_compute():
    row = time_steps(32, steps=3, warmup=1)
    assert row["hidden"] == 32 and row["comm_s"] == 0.0 and row["step_s"] > 0
    assert row["gradient_bytes"] == sum(p.numel() * 4 for p in make_model(hidden=32).parameters())


def test_one_thread_is_given_back():
    before = torch.get_num_threads()
    with one_thread():
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_two_ranks_sweep_and_train():
    measured = measure_payoff((2,), widths=(16, 64), steps=3, timeout=300)
    assert measured["per_rank"] == 32 and measured["cores"] >= 1
    assert [row["hidden"] for row in measured["one_rank"]] == [16, 64]
    (run,) = measured["runs"]
    assert run["ranks"] == 2
    assert [row["bytes"] for row in run["sweep"]] == list(SWEEP_SIZES)
    assert all(row["time_s"] > 0 and row["algorithm"] == "ring" for row in run["sweep"])
    for alone, row in zip(measured["one_rank"], run["widths"]):
        assert row["hidden"] == alone["hidden"] and row["gradient_bytes"] == alone["gradient_bytes"]
        assert 0 < row["comm_s"] < row["step_s"]  # two ranks do communicate, inside the step


def test_by_default_a_core_per_rank_at_most_4_ranks():
    assert [default_rank_counts(c) for c in (1, 2, 3, 4, 16)] == [(2,), (2,), (2, 3), (2, 3, 4), (2, 3, 4)]


@pytest.mark.parametrize("counts", [(1, 2), (), (2.0,), (True,)])
def test_bad_rank_counts(counts):
    with pytest.raises(ValueError, match="rank_counts must be integers of 2 or more"):
        measure_payoff(counts)


def test_bad_steps_and_widths():
    with pytest.raises(ValueError, match="need steps >= 1"):
        time_steps(16, steps=0)
    with pytest.raises(ValueError, match="no widths to time"):
        measure_payoff((2,), widths=())


@pytest.mark.parametrize("nranks", [2, 3])
def test_the_averaging_is_said_apart_from_waiting_for_a_slower_ranks_compute(nranks):
    """Rank 1 computes 20 ms of virtual time more a step than the others: step() on the ranks that came first
    holds 20 ms of waiting, which is that rank's compute, not the averaging. ``comm_s`` is step() on the rank
    that came last (about the links' 1 ms for 2-3 messages of 500 us), ``waited_s`` the 20 ms."""
    import json
    from pathlib import Path

    from ringlab.cluster.launch import run_mpi

    slow = 0.02
    done = run_mpi(nranks, [str(Path(__file__).parent / "mpi" / "payoff_waiting.py"), str(slow)], timeout=120,
                   env={"RINGLAB_EMULATE": "uniform:1:500"})
    assert done.returncode == 0, done.stderr[-3000:]
    row = json.loads(done.stdout.strip().splitlines()[-1])
    links = 2 * (nranks - 1) * 500e-6  # the ring's messages one after another, each paying the latency
    assert links <= row["comm_s"] < links + 0.005, row  # this CPU's additions on 16 hidden units: well under 5 ms
    assert row["waited_s"] == pytest.approx(slow, abs=0.005), row
    assert row["step_s"] > slow + row["comm_s"], row
