"""Misuse of the collectives on real MPI ranks: the same clear error on every rank, never a wrong
number, never a hang; and the collective after it is still right."""
from pathlib import Path

import pytest

from ringlab.cluster.launch import run_mpi

SCRIPT = Path(__file__).parent / "mpi" / "misuse.py"


def outcomes(mode: str, nranks: int) -> dict[str, dict[int, str]]:
    """{case: {rank: what that rank saw}} from one run of misuse.py."""
    done = run_mpi(nranks, [str(SCRIPT), mode], timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    seen: dict[str, dict[int, str]] = {}
    for line in done.stdout.splitlines():
        if line.startswith("rank "):
            head, case, text = line.split(": ", 2)
            seen.setdefault(case, {})[int(head.split()[1])] = text
    return seen


def same_everywhere(cases: dict[int, str], nranks: int) -> str:
    assert sorted(cases) == list(range(nranks)), cases
    assert len(set(cases.values())) == 1, cases
    return cases[0]


@pytest.mark.parametrize("nranks", [2, 3])
def test_different_collectives_on_different_ranks_are_refused_everywhere(nranks):
    everything = outcomes("kinds", nranks)
    seen = everything["kinds"]
    assert seen[0] == "ValueError: rl.broadcast: the ranks disagree (collective: rank 0 has broadcast, rank 1 has reduce)"
    assert all(seen[r] == seen[0].replace("rl.broadcast", "rl.reduce") for r in range(1, nranks)), seen
    assert set(everything["kinds then allreduce"].values()) == {"right"}


@pytest.mark.parametrize("nranks", [2, 3])
def test_schedules_of_ones_own_are_checked_and_compared(nranks):
    seen = outcomes("schedules", nranks)
    for case in ("wrong schedule, allreduce", "wrong schedule, execute"):
        said = same_everywhere(seen[case], nranks)
        assert "this schedule is wrong, so it is not run" in said and "a second time" in said, said
    assert set(seen["execute by name"].values()) == {"right"}
    assert "did you mean 'allreduce.ring'" in same_everywhere(seen["execute unknown name"], nranks)
    said = same_everywhere(seen["different schedules"], nranks)
    assert said.startswith("ValueError: rl.allreduce: the ranks disagree (schedule: "), said
    assert set(seen["schedules then allreduce"].values()) == {"right"}


@pytest.mark.parametrize("nranks", [2, 3])
def test_in_place_problems_on_one_rank_raise_on_every_rank(nranks):
    seen = outcomes("in-place", nranks)
    said = same_everywhere(seen["read-only on rank 1"], nranks)
    assert "rank 1 has ['in_place=True needs a writable array']" in said
    said = same_everywhere(seen["strided on rank 1"], nranks)
    assert "in_place=True needs a C-contiguous array" in said
    assert same_everywhere(seen["read-only everywhere"], nranks) == \
        "ValueError: rl.allreduce: in_place=True needs a writable array"
    assert set(seen["in-place then allreduce"].values()) == {"right"}


def test_timeouts_must_be_positive_numbers():
    seen = outcomes("timeouts", 3)
    for bad in ("0", "-1", "nan", "inf", "True"):
        said = same_everywhere(seen[f"timeout={bad}"], 3)
        assert said == (f"ValueError: rl.allreduce: timeout must be a number of seconds > 0 (or None: no limit), "
                        f"got {bad}"), said
    assert "rank 1 has ['timeout must be" in same_everywhere(seen["timeout=0 on rank 1 only"], 3)
    assert set(seen["timeouts then allreduce"].values()) == {"right"}


def test_booleans_are_refused_where_they_would_be_summed():
    seen = outcomes("booleans", 3)
    assert "x holds booleans, which have no sum" in same_everywhere(seen["allreduce of booleans"], 3)
    assert set(seen["broadcast of booleans"].values()) == {"ok [True, True, False]"}
    assert set(seen["booleans then allreduce"].values()) == {"right"}
