"""rl.alltoallv (ringlab.mpi.collectives.alltoallv): equal to MPI's own Alltoallv on random tables, bad input refused alike on
every rank, its virtual time on emulated machines equal to the pairwise rounds' recurrence, and a rank that never
comes a StepTimeout naming the round; at 2 and 3 ranks."""
import json
from pathlib import Path

import pytest

from ringlab.cluster.launch import run_mpi

SCRIPT = Path(__file__).parent / "mpi" / "alltoallv_check.py"


@pytest.fixture(scope="module", params=[2, 3])
def checked(request):
    done = run_mpi(request.param, [str(SCRIPT), "uniform:10:5" if request.param == 2 else "hgx-h100-8"], timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return request.param, json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(180)
def test_alltoallv_equals_mpis_own(checked):
    _, seen = checked
    assert seen["same"] == [True] * 6


@pytest.mark.timeout(180)
def test_bad_input_is_the_same_value_error_on_every_rank(checked):
    n, seen = checked
    for name, said in seen["refused"].items():
        assert len(said) == n and len(set(said)) == 1 and said[0] is not None, (name, said)  # one error, everywhere
    refused = {name: said[0] for name, said in seen["refused"].items()}
    assert "the ranks disagree (counts: rank 0 has [[1," in refused["one rank's table differs"]
    assert f"rank 0's x has {n - 1} rows, but its row of counts sends {n}" in refused["one rank's rows do not match its counts"]
    assert f"counts must be an {n} x {n} table of whole numbers" in refused["not a square table"]
    assert "counts must be >= 0, got -1" in refused["a negative count"]
    assert "x must be a numpy or cupy array, got Tensor: pass t.numpy() (on the CPU) or cupy.from_dlpack(t)" \
        in refused["a torch tensor"]


@pytest.mark.timeout(180)
def test_on_an_emulated_machine_each_rank_finishes_when_its_last_message_arrives(checked):
    _, seen = checked
    measured, recurrence = seen["emulated"]["measured"], seen["emulated"]["recurrence"]
    assert max(recurrence) > 0
    assert measured == pytest.approx(recurrence, rel=1e-9, abs=1e-12)


@pytest.mark.timeout(180)
def test_a_rank_that_never_comes_is_a_timeout_naming_the_round_and_the_peers(checked):
    n, seen = checked
    assert seen["late"][0] is None  # rank 0 never called
    for rank, (said, peers) in enumerate(seen["late"][1:], start=1):  # rank r receives from rank 0 in round r
        assert said == (f"rank {rank}: rl.alltoallv round {rank} of {n - 1} did not finish within 1 s: still waiting "
                        "to receive 1 row from rank 0"), said  # its own send, small, is on its way: not waited for
        assert peers == [0], peers
