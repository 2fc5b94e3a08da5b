"""The executor on real MPI processes: every algorithm against MPI's own collectives, failure cases, traces."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import ringlab as rl
from ringlab.mpi.plan import compile_plan
from ringlab.cluster.launch import run_mpi

HERE = Path(__file__).parent / "mpi"


@pytest.mark.parametrize("nranks", [1, 2, 3, 4, 7])
def test_every_algorithm_matches_mpi(nranks):
    done = run_mpi(nranks, [str(HERE / "check_collectives.py")], timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"ok {nranks} ranks" in done.stdout


def lines_by_rank(stdout: str) -> dict[int, str]:
    out = {}
    for line in stdout.splitlines():
        if line.startswith("rank "):
            head, _, text = line.partition(": ")
            out[int(head.split()[1])] = text
    return out


@pytest.mark.parametrize("nranks", [2, 3])
def test_different_sizes_raise_the_same_error_everywhere(nranks):
    done = run_mpi(nranks, [str(HERE / "failures.py"), "sizes"], timeout=60)
    seen = lines_by_rank(done.stdout)
    assert sorted(seen) == list(range(nranks)), done.stderr
    assert len(set(seen.values())) == 1
    expected = "rl.allreduce: the ranks disagree (shape: rank 0 has [10], rank 1 has [11])"
    assert seen[0] == expected


def test_different_dtypes_raise_the_same_error_everywhere():
    done = run_mpi(3, [str(HERE / "failures.py"), "dtypes"], timeout=60)
    seen = lines_by_rank(done.stdout)
    assert set(seen.values()) == {"rl.broadcast: the ranks disagree (dtype: rank 0 has float32, rank 1 has float64)"}
    assert len(seen) == 3


def test_a_bad_root_raises_on_every_rank():
    done = run_mpi(3, [str(HERE / "failures.py"), "root"], timeout=60)
    seen = lines_by_rank(done.stdout)
    assert seen == {r: "rl.reduce: root must be a rank in 0..2, got 3" for r in range(3)}


def test_an_exception_on_one_rank_ends_the_job():
    start = time.monotonic()
    done = run_mpi(3, [str(HERE / "failures.py"), "raise"], timeout=60)
    assert done.returncode != 0
    assert "boom on rank 1" in done.stderr
    assert time.monotonic() - start < 30


@pytest.mark.parametrize("started", ["by ringlab", "by hand"])
def test_an_aborted_job_leaves_no_shared_memory_or_topology_file_behind(tmp_path, started):
    """MPICH removes its segments' names from /dev/shm only in MPI_Finalize, which an aborted job never reaches:
    ringlab removes them once every rank has started, so the memory goes with the job's last rank. In the jobs
    ringlab starts the runner does so before the script runs (here rank 1 raises before any ringlab call); in a
    job started by hand (``mpiexec python -m mpi4py``), ringlab's first call on COMM_WORLD does."""
    if started == "by ringlab":
        done = run_mpi(3, [str(HERE / "failures.py"), "segments", str(tmp_path / "mapped")], timeout=60)
    else:
        from ringlab.cluster.launch import find_mpiexec, local_env
        done = subprocess.run([find_mpiexec(), "-n", "3", sys.executable, "-m", "mpi4py", str(HERE / "failures.py"),
                               "segments-after-call", str(tmp_path / "mapped")], capture_output=True, text=True,
                              timeout=60, env={**os.environ, **local_env(nranks=3)})
    assert done.returncode != 0 and "boom on rank 1" in done.stderr
    mapped = {name for r in range(3) for name in (tmp_path / f"mapped.{r}").read_text().split()}
    if not Path("/dev/shm").is_dir():
        pytest.skip("no /dev/shm here: MPICH's segments live elsewhere")
    assert mapped and all(name.startswith("/dev/shm/mpich_shm_") for name in mapped)  # the ranks shared memory
    assert [name for name in mapped if os.path.exists(name)] == []  # and no name outlived the job
    # nor hydra's topology file: its proxy held it open, under a name the runner had removed before the script ran
    held = {name for r in range(3) for name in (tmp_path / f"mapped-topology.{r}").read_text().splitlines()}
    assert held and all(name.endswith(" (deleted)") for name in held), held
    assert [name for name in held if os.path.exists(name.removesuffix(" (deleted)"))] == []


@pytest.mark.parametrize("call", ["rl.allreduce(np.ones(3))", "describe_machine()", "report()"])
def test_a_killed_singleton_leaves_no_shared_memory_behind(call):
    """A process that is MPI's only rank (a notebook's kernel: lab 00 asks the MPI library its version, nbval
    ends a kernel with SIGKILL) leaves no segment in /dev/shm once ringlab has touched MPI."""
    code = ("import os, numpy as np, ringlab as rl\n"
            "from ringlab.measure.machine import describe_machine\nfrom ringlab.measure.doctor import report\n"
            f"{call}\n"
            "from ringlab.mpi.devices import MPICH_SEGMENT\n"
            "print(' '.join(sorted(set(MPICH_SEGMENT.findall(open('/proc/self/maps').read())))), flush=True)\n"
            "os.kill(os.getpid(), 9)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "PMIX_", "HYDRA_", "MPIR_CVAR_"))}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env,
                          cwd=HERE)
    assert done.returncode == -9, done.stderr[-2000:]
    mapped = done.stdout.split()
    if not Path("/dev/shm").is_dir():
        pytest.skip("no /dev/shm here: MPICH's segments live elsewhere")
    assert mapped and all(name.startswith("/dev/shm/mpich_shm_") for name in mapped), done.stdout
    assert [name for name in mapped if os.path.exists(name)] == []


def test_a_stuck_step_times_out_naming_step_and_peer(tmp_path):
    start = time.monotonic()
    run_mpi(3, [str(HERE / "failures.py"), "stuck", str(tmp_path / "said")], timeout=60)
    seen = lines_by_rank((tmp_path / "said").read_text())
    assert seen[0] == ("rank 0: step 0 (reduce-scatter) did not finish within 1 s: "
                       "still waiting to receive chunk 2 from rank 2")
    assert time.monotonic() - start < 30
    # rank 0 waited for rank 2; rank 1 got past step 0 (its send to rank 2 was small enough to leave without
    # rank 2) and waited for rank 0 in step 1. Each tells the others that it gave up, except the peer it was
    # waiting for (still in the call, and maybe dead: MPICH's UCX transport crashes a send to a dead process)
    assert (tmp_path / "said.peers-0").read_text() == "2"
    assert (tmp_path / "said.peers-1").read_text() == "0"
    assert (tmp_path / "said.notices").read_text() == "1"


def test_a_missing_rank_times_out_in_the_argument_check(tmp_path):
    run_mpi(3, [str(HERE / "failures.py"), "absent", str(tmp_path / "said")], timeout=60)
    seen = lines_by_rank((tmp_path / "said").read_text())
    assert seen[0] == "rank 0: rl.allreduce: rank 2 did not call it within 1 s"


@pytest.mark.parametrize("bad", ["nan", "-1.0", "inf"])
def test_a_bad_timeout_with_a_rank_missing_waits_the_default_deadline_not_forever(bad, tmp_path):
    """NaN never expires, and a negative deadline expires before the ranks compare anything: an unusable timeout
    stands for the default deadline (RINGLAB_TIMEOUT, 2 s here), so the ranks that came name the one that did
    not, where they used to wait forever (NaN) or give up at once (-1)."""
    run_mpi(3, [str(HERE / "failures.py"), "bad-timeout", str(tmp_path / "said"), bad], timeout=60,
            env={"RINGLAB_TIMEOUT": "2"})
    seen = lines_by_rank((tmp_path / "said").read_text())
    assert seen[0] == "rank 0: rl.allreduce: rank 2 did not call it within 2 s"


def test_unusable_timeouts_stand_for_the_default_deadline(monkeypatch):
    from ringlab.mpi.deadlines import seconds

    monkeypatch.setenv("RINGLAB_TIMEOUT", "7")
    for bad in (float("nan"), -1.0, 0.0, float("inf"), -5, 0, True, "soon", np.float64("nan")):
        assert seconds(bad) == 7.0, bad
    assert seconds(2.5) == 2.5 and seconds(3) == 3.0 and seconds(None) is None and seconds("default") == 7.0


def test_a_rank_missing_from_the_first_call_is_named_in_jobs_ringlab_starts(tmp_path):
    """The jobs ringlab starts make its private communicator at start (ringlab.cluster.runner), so even the first
    call names a rank that never comes; started by hand with mpi4py's runner, that first call can only say
    that not every rank arrived."""
    import subprocess
    import sys

    from ringlab.cluster.launch import find_mpiexec, local_env, start, stop

    start_time = time.monotonic()
    run_mpi(3, [str(HERE / "failures.py"), "first", str(tmp_path / "said")], timeout=60)
    seen = lines_by_rank((tmp_path / "said").read_text())
    assert seen[0] == ("rank 0: step 0 (reduce-scatter) did not finish within 1 s: still waiting to receive chunk 2 "
                       "from rank 2"), seen
    by_hand = start([find_mpiexec(), "-n", "3", sys.executable, "-m", "mpi4py", str(HERE / "failures.py"), "first",
                     str(tmp_path / "by-hand")], env=local_env(nranks=3), stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL)
    try:
        by_hand.wait(60)
    finally:
        stop(by_hand)
        for mapped in tmp_path.glob("by-hand.mapped.*"):  # without the runner, the abort leaves MPICH's segment
            for name in mapped.read_text().split():
                Path(name).unlink(missing_ok=True)
        for held in tmp_path.glob("by-hand.topology.*"):  # and hydra's topology file
            for name in held.read_text().splitlines():
                if not name.endswith(" (deleted)"):
                    Path(name).unlink(missing_ok=True)
    seen = lines_by_rank((tmp_path / "by-hand").read_text())
    assert seen[0].startswith("rank 0: rl.allreduce: not every rank of the communicator (3 ranks) arrived within 1 s "
                              "to set up ringlab's private communicator"), seen
    assert time.monotonic() - start_time < 60


def test_trace_has_a_row_for_each_side_of_each_transfer():
    done = run_mpi(3, [str(HERE / "trace.py")], timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(done.stdout.strip().splitlines()[-2])
    ring = rl.build("allreduce.ring", 3)
    assert len(rows) == 2 * ring.num_transfers
    for step_index, step in enumerate(ring.steps):
        for t in step:
            sent = [r for r in rows if r["step"] == step_index and r["rank"] == t.src and r["side"] == "send"]
            got = [r for r in rows if r["step"] == step_index and r["rank"] == t.dst and r["side"] == "recv"]
            assert [(r["peer"], r["chunk"]) for r in sent if r["chunk"] == t.chunk] == [(t.dst, t.chunk)]
            assert [(r["peer"], r["chunk"]) for r in got if r["chunk"] == t.chunk] == [(t.src, t.chunk)]
    assert all(0 <= r["start"] <= r["end"] for r in rows)
    assert all(r["nbytes"] in (3336, 3328) for r in rows)  # 1250 float64 over 3 chunks: 417, 417, 416 elements
    per_step = json.loads(done.stdout.strip().splitlines()[-1])  # measured against predicted
    assert [s for s, _, _ in per_step] == list(range(4))
    assert all(measured > 0 for _, measured, _ in per_step)
    expected = 20e-6 + 3336 / 5e9
    assert all(abs(predicted - expected) < 1e-12 for _, _, predicted in per_step)


def test_plans_merge_neighbouring_chunks_and_segment_reductions():
    rhd = rl.build("allreduce.rhd", 4)
    plan = compile_plan(rhd, 0, 4000, 8)
    first = plan.steps[0]
    # rank 0 keeps chunks 0-1 and sends chunks 2-3 to rank 2 as one message
    assert [(m.peer, m.lo, m.hi, m.first, m.last) for m in first.sends] == [(2, 2000, 4000, 2, 3)]
    big = compile_plan(rl.build("allreduce.ring", 2), 1, 1 << 20, 8)  # 4 MiB chunks, 1 MiB segments
    assert len(big.steps[0].recvs) == 4 and all(m.op == "reduce" for m in big.steps[0].recvs)
    assert big.scratch_elems == 1 << 19
    assert big.steps[1].recvs[0].op == "copy" and big.steps[1].recvs[0].slot == -1  # copies land in place
    # over CUDA IPC nothing overlaps the adding, and each piece would be a kernel launch: one message
    whole = compile_plan(rl.build("allreduce.ring", 2), 1, 1 << 20, 8, True, pieces=False)
    assert [(m.lo, m.hi) for m in whole.steps[0].recvs] == [(0, 1 << 19)]


def test_transport_choice_on_numpy():
    from ringlab.mpi.transports import choose

    class FakeComm:
        def Get_rank(self):
            return 0

    assert choose(None, FakeComm(), "auto") == "host"  # no GPU: a numpy buffer
    assert rl.which_transport(np.ones(3), FakeComm()) == "host"
    with pytest.raises(ValueError, match="transport='ipc' needs a cupy array"):
        rl.which_transport(np.ones(3), FakeComm(), "ipc")
    with pytest.raises(ValueError, match="transport must be one of auto, host, cuda-aware, ipc"):
        choose(None, FakeComm(), "nvlink")


def test_resolve_names():
    from ringlab.mpi.collectives import resolve

    assert resolve("allreduce", "ring", 4).name == "allreduce.ring"
    assert resolve("allreduce", "allreduce.rhd", 4).name == "allreduce.rhd"
    assert resolve("broadcast", "chain", 4, root=1, segments=3).options == {"root": 1, "segments": 3}
    with pytest.raises(ValueError, match="unknown allreduce algorithm 'chain'; choose one of: "
                                         "dbtree, hierarchical, naive, oneshot, ps, rhd, ring, rings, tree, twoshot"):
        resolve("allreduce", "chain", 4)
    with pytest.raises(ValueError, match="this schedule is for reduce, not allreduce"):
        resolve("allreduce", rl.build("reduce.tree", 4), 4)
    with pytest.raises(ValueError, match="this schedule is for 3 ranks; the communicator has 4"):
        resolve("allreduce", rl.build("allreduce.ring", 3), 4)


def test_the_readme_mpi_example_runs(tmp_path):
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    code = readme.split("Save this as `mine.py`:", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    script = tmp_path / "mine.py"
    script.write_text(code)
    for nranks in (2, 3):
        done = run_mpi(nranks, [str(script)], timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize("nranks", [2, 3])
def test_the_fast_path_gives_mpis_sums_however_the_result_is_passed(nranks):
    done = run_mpi(nranks, [str(HERE / "fast_path.py")], timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"ok {nranks} ranks" in done.stdout
    assert "freeing inactive persistent request" not in done.stderr  # freed before MPI finalizes


@pytest.mark.parametrize("nranks", [2, 3])
def test_what_calls_keep_is_bounded_by_bytes_not_by_their_count(nranks):
    """70 calls on 70 sizes near 4 MiB kept 318 MiB on each rank before (the count of calls was bounded, 64,
    and 256 MiB of spare results); now at most RINGLAB_CACHE_BYTES, 64 MiB by default, and 16 MiB when set so."""
    done = run_mpi(nranks, [str(HERE / "cache_bytes.py")], timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count(": ok") == nranks


@pytest.mark.parametrize("mode", ["disagreement", "trace-start", "trace-rows"])
def test_a_rank_late_to_a_calls_own_exchange_is_a_timeout_not_a_wait(mode):
    """The last rank comes 8 s late to the texts of a disagreement, a trace's starting barrier or the trace's
    rows; rank 0, with a 2 s deadline, raises a StepTimeout within it (mpi4py's blocking allgather, Barrier
    and gather waited the 8 s, and for a rank that died, for ever)."""
    done = run_mpi(3, [str(HERE / "late.py"), mode], timeout=90)
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("rank 0: "))
    took, said = line[len("rank 0: "):].split(" s: ", 1)
    assert said.startswith("StepTimeout") and "within 2 s" in said, line
    assert float(took) < 6, line


@pytest.mark.parametrize("name", ["allreduce.naive", "allreduce.ps", "reduce.direct", "allreduce.ring", "allreduce.rhd"])
@pytest.mark.parametrize("nranks", [2, 3, 5])
def test_a_root_takes_its_peers_messages_in_a_window_of_scratch_within_one_chunk(name, nranks):
    from ringlab.mpi.plan import PIECE_BYTES
    from ringlab.schedule import chunk_bounds

    count, itemsize = 3_000_017, 4
    schedule = rl.build(name, nranks)
    plans = [compile_plan(schedule, r, count, itemsize) for r in range(nranks)]
    piece = PIECE_BYTES // itemsize
    chunk = max(int(np.diff(chunk_bounds(count, schedule.nchunks)).max()), piece)
    for plan in plans:
        assert plan.scratch_elems <= chunk, f"rank {plan.rank}: {plan.scratch_elems} elements of scratch"
        for step in plan.steps:
            for peer in {m.peer for m in step.recvs}:  # MPI matches one source's messages in the order sent
                got = [(m.lo, m.hi) for m in step.recvs if m.peer == peer]
                sent = [(m.lo, m.hi) for m in plans[peer].steps[step.index].sends if m.peer == plan.rank]
                assert got == sent, f"rank {plan.rank} step {step.index}: messages from {peer} out of order"
            if step.window:  # receives in flight together never share scratch
                assert len({m.peer for m in step.recvs[:step.window]}) == len({m.peer for m in step.recvs})
                for i, m in enumerate(step.recvs):
                    for o in step.recvs[i + 1:i + step.window]:
                        assert m.slot < 0 or o.slot < 0 or m.slot + m.size <= o.slot or o.slot + o.size <= m.slot
    if name in ("allreduce.naive", "reduce.direct") and nranks > 2:  # (n-1) buffers would arrive at once
        assert plans[0].steps[0].window > 0 and plans[0].scratch_elems < count


def test_the_peak_memory_of_a_call_stays_within_the_result_and_one_chunk():
    script = Path(__file__).resolve().parent.parent / "benchmarks" / "memory_peak.py"
    done = run_mpi(3, [str(script), "--mib", "32", "--check"], timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    assert "OVER" not in done.stdout and "naive     returned" in done.stdout


def test_a_step_that_sends_what_it_receives_into_posts_every_receive_at_once():
    # all ranks swap whole buffers in one step: each send must finish before anything lands, and a
    # peer's send finishes only once its receive is posted, so no window may hold receives back
    n, count = 4, 3_000_017
    swap = rl.make_schedule("allreduce", n, 1, [[(s, d, 0, "reduce") for s in range(n) for d in range(n) if s != d]],
                            name="swap")
    step = compile_plan(swap, 0, count, 4).steps[0]
    assert step.sends_before_landing and step.window == 0


def test_a_timed_out_step_names_every_peer_whose_message_had_not_finished():
    """What set_aside spares from its notices: the peers of the step whose requests had not finished
    (a receive not yet posted, None, is not one of them)."""
    from types import SimpleNamespace

    from ringlab.mpi.plan import Message
    from ringlab.mpi.run import unfinished

    class Request:
        def __init__(self, done: bool):
            self.done = done

        def Test(self) -> bool:
            return self.done

    def message(peer: int) -> Message:
        return Message(peer=peer, lo=0, hi=1, first=0, last=0, op="copy")

    step = SimpleNamespace(recvs=[message(1), message(2), message(3)], sends=[message(4), message(1)])
    assert unfinished(step, [Request(True), Request(False), None], [Request(False), Request(True)]) == (2, 4)
    assert unfinished(step, [Request(True)] * 3, [Request(True)] * 2) == ()
    assert rl.StepTimeout("late").peers == ()


@pytest.mark.parametrize("nranks", [2, 3])
def test_out_of_place_calls_read_their_input_where_it_is(nranks):
    """From plan.SOURCE_BYTES an out= call sends and adds its input from the caller's array (no copy into the
    result first): every allreduce, reduce and broadcast algorithm, against MPI's, the input untouched."""
    done = run_mpi(nranks, [str(HERE / "input_in_place.py")], timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    oks = [line for line in done.stdout.splitlines() if ": ok " in line]
    assert len(oks) == nranks and all(int(line.rsplit(" ", 1)[1]) > 200 for line in oks), done.stdout


def test_sources_say_where_the_input_is_read():
    """The ring on 2 ranks: step 0 sends and adds the input itself; step 1 sends what landed; nothing is left
    untouched. The naive root adds the first arrival to its input and the next to the sum."""
    from ringlab.mpi.plan import sources

    plan = compile_plan(rl.build("allreduce.ring", 2), 0, 1000, 8)
    found = sources(plan, 1000)
    assert [set(s) for s in found.sends] == [{True}, {False}]
    assert [set(r) for r in found.reduces] == [{True}, {False}]
    assert found.untouched == ()
    root = sources(compile_plan(rl.build("allreduce.naive", 3), 0, 1000, 8), 1000)
    assert root.reduces[0] == (True, False)
    bcast = sources(compile_plan(rl.build("broadcast.chain", 3), 0, 1000, 8), 1000)
    assert bcast.untouched == ((0, 1000),)  # the root lands nothing: its input is copied at the end


@pytest.mark.parametrize("unbuffered", ["1", ""])
def test_ranks_printing_at_once_keep_their_lines_whole(unbuffered):
    """With PYTHONUNBUFFERED set, print wrote a line's text and its newline apart, and mpiexec joined two ranks'
    lines into one (seen: 'rank 0: ... 1.0 srank 1: ...'); the runner now line-buffers every rank's stdout."""
    done = run_mpi(3, [str(HERE / "whole_lines.py")], timeout=60, env={"PYTHONUNBUFFERED": unbuffered})
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    expected = {f"rank {r}: line {i} " + "x" * 300 for r in range(3) for i in range(200)}
    assert len(lines) == len(expected) and set(lines) == expected, [x for x in lines if x not in expected][:3]
