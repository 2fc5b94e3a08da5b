"""MPICluster's launchers (local, mpi, ssh, slurm): the ipyparallel Cluster each would build, the command line or
batch script it would run, and clear errors for options that do not fit. Nothing is started: there is no
Slurm and no second host here, so only the construction is tested."""
import sys

import pytest

ipp = pytest.importorskip("ipyparallel", reason="ipyparallel is not installed (the lab extra)")

from ipyparallel.cluster.launcher import MPIEngineSetLauncher, SlurmEngineSetLauncher  # noqa: E402

from ringlab.lab.cluster import MPICluster, cluster_kwargs  # noqa: E402


def built(tmp_path, **options) -> "ipp.Cluster":
    """The ipyparallel Cluster MPICluster would start, constructed only."""
    return ipp.Cluster(**cluster_kwargs(**options), profile_dir=str(tmp_path), shutdown_atexit=False)


def test_local_is_what_it_was():
    kwargs = cluster_kwargs(4)
    assert kwargs.pop("config").MPIEngineSetLauncher.engine_args == ["--log-level=20"]  # logs a failed start quotes
    assert kwargs == {"engines": "mpi", "n": 4,  # the Cluster the labs have always started, with
                      "controller_args": ["--HeartMonitor.period=250",  # a quicker heartbeat
                                          "--HeartMonitor.max_heartmonitor_misses=120", "--log-level=20"]}
    ranks = MPICluster(3, activate=False)
    assert ranks.plan().split() == ["mpiexec", "-n", "3", sys.executable, "-m", "ipyparallel.engine", "--mpi",
                                    "--log-level=20"]
    assert ranks.shared_dir is None and ranks.client is None  # nothing started by planning


def test_ssh_is_one_mpi_job_over_ssh_in_blocks_per_host(tmp_path):
    cluster = built(tmp_path, n=16, launcher="ssh", hosts={"node1": 8, "node2": 8})
    assert cluster.engine_launcher_class is MPIEngineSetLauncher and cluster.controller_ip == "*"
    assert cluster.config.MPIEngineSetLauncher.mpi_args == ["-launcher", "ssh", "-hosts", "node1:8,node2:8"]
    plan = MPICluster(16, launcher="ssh", hosts=["node1", "node2"], shared_dir=str(tmp_path)).plan()
    assert plan.startswith("mpiexec -n 16 -launcher ssh -hosts node1:8,node2:8 ") and plan.endswith("--mpi --log-level=20")


def test_mpi_takes_hosts_a_host_file_or_none_and_more_arguments(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node1:4\nnode2:4\n")
    plan = MPICluster(8, launcher="mpi", hosts=str(hostfile),
                      launcher_options={"mpi_args": ["-bind-to", "core"]}).plan()
    assert plan.startswith(f"mpiexec -n 8 -f {hostfile} -bind-to core ")
    assert MPICluster(8, launcher="mpi").plan().startswith("mpiexec -n 8 " + sys.executable)  # mpiexec chooses
    assert MPICluster(8, launcher="mpi").shared_dir is not None  # the cluster's folder where every host sees it


def test_slurm_writes_the_batch_script_with_its_options(tmp_path):
    options = {"partition": "gpu", "account": "proj42", "time": "01:00:00", "options": "--nodes=2 --ntasks-per-node=8"}
    cluster = built(tmp_path, n=16, launcher="slurm", launcher_options=options)
    assert cluster.engine_launcher_class is SlurmEngineSetLauncher and cluster.controller_ip == "*"
    assert cluster.config.SlurmEngineSetLauncher.queue == "gpu"  # sbatch's partition is ipyparallel's queue
    submit, script = MPICluster(16, launcher="slurm", launcher_options=options).plan().split("\n", 1)
    assert submit.startswith("sbatch --nodes=2 --ntasks-per-node=8 ") and submit.endswith("slurm_engine.sbatch")
    for line in ("#SBATCH --ntasks=16", "#SBATCH --partition=gpu", "#SBATCH --account=proj42",
                 "#SBATCH --time=01:00:00"):
        assert line in script.splitlines()
    assert script.splitlines()[-1].startswith("srun ") and script.splitlines()[-1].endswith(" --mpi --log-level=20")


@pytest.mark.parametrize("options, message", [
    (dict(launcher="pbs"), "unknown launcher 'pbs': use one of local, mpi, ssh, slurm"),
    (dict(hosts={"a": 4}), "launcher='local' runs every rank on this machine"),
    (dict(launcher="ssh"), "launcher='ssh' needs hosts"),
    (dict(launcher="ssh", hosts={"a": 3, "b": 3}), r"add up to 6 \({'a': 3, 'b': 3}\), not n=4"),
    (dict(launcher="ssh", hosts={"a": 0, "b": 4}), "rank counts >= 1, got 'a': 0"),
    (dict(launcher="mpi", hosts=["a", "b", "c"]), "4 ranks do not split evenly over 3 hosts"),
    (dict(launcher="mpi", hosts="/no/such/hostfile"), "nor a host file that exists"),
    (dict(launcher="slurm", hosts=["a"]), "Slurm chooses the hosts"),
    (dict(launcher="slurm", launcher_options={"partitoin": "gpu"}), "SlurmEngineSetLauncher has no option 'partitoin'"),
    (dict(launcher="mpi", launcher_options={"queue": "gpu"}), "MPIEngineSetLauncher has no option 'queue'"),
    (dict(launcher_options=["-bind-to"]), "launcher_options must be a dict"),
])
def test_options_that_do_not_fit_say_why(options, message):
    with pytest.raises(ValueError, match=message):
        MPICluster(4, **options)


def test_rank_counts_are_checked_against_this_machine_only_for_local():
    with pytest.raises(ValueError, match="more than"):
        MPICluster(10_000)  # every rank here: too many for this machine's cores
    assert MPICluster(10_000, launcher="ssh", hosts=[f"node{i}" for i in range(100)]).n == 10_000
    with pytest.raises(ValueError, match="need at least 1 rank"):
        MPICluster(0, launcher="slurm")
