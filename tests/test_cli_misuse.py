"""The command line under misuse: every mistake said once, clearly, before any MPI job starts; limits
stated; rank 0's message never lost inside a job; single-node jobs on loopback."""
import shutil
import subprocess
import sys

import pytest

from ringlab.cluster.launch import RANKS_PER_CORE, check_nranks, local_env, mpiexec_command, run_mpi


def run_cli(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "ringlab", *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("args, message", [
    (["bench", "-n", "0"], "ringlab bench: error: need at least 1 rank, got 0"),
    (["bench", "-n", "100000"], "is more than 16 a core"),
    (["bench", "-n", "2", "--iters", "0"], "iters must be at least 1"),
    (["bench", "-n", "2", "-w", "-1"], "warmup must be 0 or more, got -1"),
    (["bench", "-n", "3", "--root", "3"], "root must be a rank in 0..2, got 3"),
    (["bench", "-n", "2", "-a", "ring,gossip"], "no allreduce implementation 'gossip'; choose from dbtree, hierarchical, naive"),
    (["bench", "-n", "2", "-c", "scatter"], "collective must be one of"),
    (["bench", "-n", "2", "-d", "float8"], "dtype must be one of"),
    (["bench", "-n", "2", "--json", "/no/such/folder/out.json"], "there is no folder /no/such/folder"),
    (["bench", "-n", "3", "--emulate", "pcie3-switch-2"], "the emulated machine pcie3-switch-2 has 2 ranks; this job has 3"),
    (["bench", "-n", "2", "--emulate", "uniform:1:5@0"], "SCALE must be > 0 (how many times slower)"),
    (["bench", "-n", "2", "--emulate", "nvlink"], "'nvlink' names no machine: a preset name"),
    (["bandwidth", "-n", "0"], "ringlab bandwidth: error: need at least 1 rank, got 0"),
    (["bandwidth", "--sizes", "8,lots"], "cannot read 'lots' as a size"),
    (["demo", "-n", "1000"], "past 32 ranks no one can read"),
    (["predict", "--crossover", "allreduce.ring"], "--crossover takes two algorithms, A,B"),
    (["predict", "-b", "0"], "-b must be at least 1 byte, got 0"),
    (["predict", "--steps", "-a", "allreduce.ring"], "--steps shows one algorithm on one topology"),
])
def test_mistakes_are_said_once_before_anything_runs(args, message):
    done = run_cli(*args)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert message in done.stderr
    assert done.stderr.count("error:") == 1
    assert "Traceback" not in done.stderr and done.stdout.count("#") <= 1


def test_limits_are_in_the_help():
    assert "1 to 32" in run_cli("demo", "--help").stdout
    assert f"more than {RANKS_PER_CORE} a core: refused" in " ".join(run_cli("bench", "--help").stdout.split())


def test_rank_counts_beyond_the_cores_warn_and_far_beyond_are_refused():
    assert check_nranks(2, cores=2) is None
    assert "3 ranks share 2 cores (oversubscribed)" in check_nranks(3, cores=2)
    with pytest.raises(ValueError, match="33 ranks on 2 cores is more than 16 a core"):
        check_nranks(33, cores=2)
    for bad in (0, -1, 2.5, True, "4"):
        with pytest.raises(ValueError, match="need at least 1 rank"):
            check_nranks(bad)


@pytest.mark.parametrize("form", [["-n3"], ["--nranks=3"], ["--nranks", "3"]])
def test_every_way_of_writing_the_rank_count_starts_the_job(form):
    done = run_cli("bench", *form, "-e", "64", "-a", "ring,mpi", "--iters", "2", "-w", "0", timeout=120)
    assert done.returncode == 0, done.stderr
    assert "allreduce on 3 ranks" in done.stdout


def test_inside_a_job_rank_0_always_says_what_is_wrong():
    for _ in range(6):  # once it was lost in 4 runs of 10: another rank ended the job first
        done = run_mpi(3, ["-m", "ringlab", "bench", "--iters", "0"], timeout=60)
        assert done.returncode != 0
        assert done.stderr.count("ringlab bench: error: iters must be at least 1") == 1, done.stderr


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2) to list listening sockets")
def test_single_node_jobs_listen_on_loopback_only(tmp_path):
    script = tmp_path / "listening.py"
    script.write_text(
        "import os, subprocess\nfrom mpi4py import MPI\ncomm = MPI.COMM_WORLD\n"
        "comm.Barrier()\n"
        "pids = comm.gather(os.getpid(), root=0)\n"
        "if comm.Get_rank() == 0:\n"
        "    out = subprocess.run(['ss', '-ltnpH'], capture_output=True, text=True).stdout\n"
        "    for line in out.splitlines():\n"
        "        if any(f'pid={p},' in line for p in pids):\n"
        "            print(line.split()[3])\n"
        "comm.Barrier()\n")
    done = run_mpi(2, [str(script)], timeout=60)
    assert done.returncode == 0, done.stderr
    addresses = done.stdout.split()
    # the ranks' own sockets; mpiexec's process manager (hydra) still listens on every address, which
    # its command line cannot change (said in the README)
    ranks_own = [a for a in addresses if not a.startswith(("0.0.0.0:", "*:", "[::]:"))]
    assert ranks_own and all(a.startswith(("127.", "[::1]")) for a in ranks_own), addresses
    assert local_env({})["UCX_NET_DEVICES"] == "lo"
    assert local_env({"UCX_NET_DEVICES": "eth0"})["UCX_NET_DEVICES"] == "eth0"  # the user's choice stays
    assert mpiexec_command(2, ["x.py"])[1:3] == ["-n", "2"]


def test_oversubscribed_jobs_get_mpichs_yielding_settings(monkeypatch):
    from ringlab.mpi import devices

    monkeypatch.setattr(devices, "cores", lambda: 2)
    crowded = local_env({}, nranks=4)
    assert crowded["MPIR_CVAR_POLLS_BEFORE_YIELD"] == "1" and crowded["MPIR_CVAR_CH4_PROGRESS_THROTTLE"] == "1"
    assert "MPIR_CVAR_POLLS_BEFORE_YIELD" not in local_env({}, nranks=2)
    assert local_env({"MPIR_CVAR_POLLS_BEFORE_YIELD": "50"}, nranks=4)["MPIR_CVAR_POLLS_BEFORE_YIELD"] == "50"
    monkeypatch.setenv("MPI_LOCALNRANKS", "3")
    assert devices.ranks_on_node() == 3 and devices.oversubscribed()


def test_cores_shared_with_other_work_make_every_job_yield(monkeypatch):
    """RINGLAB_YIELD=1 (several jobs at once, tests on several workers, a namespace cluster's nodes): MPICH's and
    ringlab's waiting give the core away though the job's ranks fit the cores; unset, they spin."""
    from ringlab.mpi import devices

    monkeypatch.setattr(devices, "cores", lambda: 2)
    monkeypatch.setenv("MPI_LOCALNRANKS", "2")
    monkeypatch.delenv("RINGLAB_YIELD", raising=False)
    assert not devices.gives_way() and "MPIR_CVAR_POLLS_BEFORE_YIELD" not in local_env({}, nranks=2)
    shared = local_env({"RINGLAB_YIELD": "1"}, nranks=2)
    assert shared["MPIR_CVAR_POLLS_BEFORE_YIELD"] == "1" and shared["MPIR_CVAR_CH4_PROGRESS_THROTTLE"] == "1"
    assert "MPIR_CVAR_POLLS_BEFORE_YIELD" not in local_env({"RINGLAB_YIELD": "0"}, nranks=2)
    monkeypatch.setenv("RINGLAB_YIELD", "1")
    assert devices.gives_way() and not devices.oversubscribed()


def test_mpi_ring_is_for_allreduce_only():
    from ringlab.measure.bench import check_arguments

    with pytest.raises(ValueError, match="mpi-ring is MPICH's ring allreduce"):
        check_arguments("broadcast", ["chain", "mpi-ring"], "float32", 5, 1, 0, 2)
    check_arguments("allreduce", ["ring", "mpi-ring"], "float32", 5, 1, 0, 2)


@pytest.mark.parametrize("args, message", [
    (["bench", "-n", "2", "-f", "0"], "factor must be >= 2, got 0"),
    (["bench", "-n", "2", "-i", "0"], "increment must be >= 1, got 0"),
    (["bench", "-n", "2", "-e", "1T"], "needs about 6 TiB a rank"),
    (["bench", "-n", "2", "-e", "2000T"], "is more than 1 PiB"),
])
def test_sweeps_that_cannot_work_are_refused_before_a_job_starts(args, message):
    done = run_cli(*args, timeout=60)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert message in done.stderr and "Traceback" not in done.stderr, done.stderr


@pytest.mark.parametrize("bad", ["nan", "-1", "0", "inf", "soon"])
def test_cluster_run_refuses_a_timeout_that_is_no_deadline(bad):
    """NaN or inf would never end the command, 0 or -1 end it before it starts: refused before anything runs."""
    done = subprocess.run([sys.executable, "-m", "ringlab", "cluster", "run", "--timeout", bad, "--", "true"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and f"argument --timeout: a number of seconds > 0, got '{bad}'" in done.stderr, done.stderr
    from ringlab.cluster.control import ClusterError, run

    with pytest.raises(ClusterError, match="--timeout wants a number of seconds > 0"):
        run("no-such-cluster", ["true"], timeout=float(bad) if bad != "soon" else bad)
