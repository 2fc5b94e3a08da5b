"""Starting MPI jobs and torch process groups: a command that takes -n runs again on that many ranks
without its -n, and the process group comes up over MPI ranks and goes down cleanly."""
import json
import os

import pytest

from ringlab.cluster.launch import relaunch, run_mpi, without_nranks


@pytest.mark.parametrize("argv, rest", [
    (["bench", "-n", "4", "-a", "ring"], ["bench", "-a", "ring"]),
    (["--nranks", "2", "--json", "out.json"], ["--json", "out.json"]),
    (["-n3", "-c", "reduce"], ["-c", "reduce"]),
    (["--nranks=2", "-b", "8"], ["-b", "8"]),
    (["-b", "8"], ["-b", "8"]),
])
def test_the_rank_count_is_taken_out(argv, rest):
    assert without_nranks(argv) == rest


SHOW_JOB = """
import json, sys
from mpi4py import MPI
everyone = MPI.COMM_WORLD.gather(sys.argv[1:], root=0)
if MPI.COMM_WORLD.Get_rank() == 0:
    print(json.dumps(everyone))
"""


@pytest.mark.timeout(120)
def test_relaunch_runs_the_command_on_n_ranks_without_its_n(tmp_path, capfd):
    script = tmp_path / "show_job.py"
    script.write_text(SHOW_JOB)
    assert relaunch(2, ["--json", "x.json", "-n", "2", "-v"], [str(script)]) == 0
    assert json.loads(capfd.readouterr().out) == [["--json", "x.json", "-v"]] * 2  # every rank's arguments


TORCH_GROUP = """
import torch
import torch.distributed as dist
from mpi4py import MPI
from ringlab.cluster.launch import torch_process_group

rank = MPI.COMM_WORLD.Get_rank()
for attempt in range(3):  # up and down again: each time on a fresh port, each time torn down
    with torch_process_group() as group:
        total = torch.tensor([rank + 1.0])
        group.all_reduce(total)
        assert total.item() == 3.0, total
        with torch_process_group():  # a running group is used as it is and left running
            pass
        assert dist.is_initialized()
    assert not dist.is_initialized()
clean = MPI.COMM_WORLD.gather(rank, root=0)
if rank == 0:
    print("clean", *clean)
"""


@pytest.mark.timeout(200)
def test_torch_process_group_comes_up_over_mpi_ranks_and_goes_down_cleanly():
    pytest.importorskip("torch", reason="torch is not installed (the train extra)")
    done = run_mpi(2, ["-c", TORCH_GROUP], timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "clean 0 1"


def test_the_mpi_package_imports_without_torch():
    code = ("import sys\nsys.modules['torch'] = None  # any import of torch now fails\n"
            "import ringlab.cluster.launch, ringlab.measure.bench\nprint('ok')\n")
    done = run_mpi(1, ["-c", code], timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(c) for c in fh.read().split()]
    except OSError:
        return []


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


@pytest.mark.timeout(120)
def test_the_job_bench_starts_ends_when_bench_is_killed():
    """``ringlab bench -n`` killed outright (SIGKILL: no handler runs) leaves no mpiexec and no rank behind."""
    import signal
    import subprocess
    import sys
    import time

    bench = subprocess.Popen([sys.executable, "-m", "ringlab", "bench", "-n", "2", "-b", "1M", "-e", "1M", "--iters",
                              "100000", "-a", "ring"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        job = []
        while not job and time.monotonic() < deadline:  # its mpiexec, and the ranks under it
            job = _children(bench.pid)
            time.sleep(0.2)
        assert job, "bench started no mpiexec"
        time.sleep(3)
        family = job + [g for c in job for g in _children(c)] + [h for c in job for g in _children(c)
                                                                    for h in _children(g)]
        assert len(family) >= 3, family  # mpiexec, its proxy, the ranks
        bench.send_signal(signal.SIGKILL)
        bench.wait(10)
        deadline = time.monotonic() + 30
        while not all(_gone(p) for p in family) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert all(_gone(p) for p in family), [p for p in family if not _gone(p)]
    finally:
        if bench.poll() is None:
            bench.kill()  # ours, by PID


LISTENERS = """
import os, subprocess
from mpi4py import MPI
from ringlab.cluster.launch import torch_process_group
with torch_process_group() as dist:
    pid = os.getpid()
    lines = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout.splitlines()
    # (hydra's own port is inherited by the ranks: mpiexec listens there, as the README says; not ours)
    mine = [line.split()[3] for line in lines if f"pid={pid}," in line and "mpiexec" not in line]
    everyone = MPI.COMM_WORLD.gather(mine, root=0)
    dist.barrier()
if MPI.COMM_WORLD.Get_rank() == 0:
    print(sorted({address.rsplit(":", 1)[0] for found in everyone for address in found}))
"""


@pytest.mark.timeout(200)
def test_torchs_store_and_gloo_listen_on_loopback_only():
    import shutil

    pytest.importorskip("torch", reason="torch is not installed (the train extra)")
    if shutil.which("ss") is None:
        pytest.skip("no ss here to list the listening sockets")
    done = run_mpi(2, ["-c", LISTENERS], timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    addresses = json.loads(done.stdout.strip().replace("'", '"'))
    assert addresses and set(addresses) <= {"127.0.0.1", "[::1]"}, addresses


class TwoHosts:
    """Rank 0 of a job whose ranks span node1 and node2, as torch_process_group sees its communicator."""

    def Get_rank(self):
        return 0

    def Get_size(self):
        return 2

    def allgather(self, _name):
        return ["node1", "node2"]

    def bcast(self, value, root=0):
        return value


def _resolving(monkeypatch, **addresses):
    """socket.gethostbyname that answers ``addresses`` (Debian's /etc/hosts maps a host's own name to 127.0.1.1)."""
    import socket

    monkeypatch.setattr(socket, "gethostbyname", lambda host: addresses[host])


def test_across_hosts_torchs_store_listens_where_the_other_hosts_reach_it(monkeypatch):
    pytest.importorskip("torch", reason="torch is not installed (the train extra)")
    import ringlab.cluster.launch as launch

    _resolving(monkeypatch, node1="127.0.1.1", node2="192.0.2.7")
    monkeypatch.setattr(launch, "_route_to", lambda peer: {"192.0.2.7": "192.0.2.1"}[peer], raising=False)
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    bound = []

    def listener(address="127.0.0.1"):
        bound.append(address)
        raise InterruptedError("no store in a unit test")
    monkeypatch.setattr(launch, "_listener", listener)
    with pytest.raises(InterruptedError):
        with launch.torch_process_group(TwoHosts()):
            pass
    assert bound == ["192.0.2.1"]  # its route to node2, not 127.0.1.1, where node2 cannot reach it


def test_a_store_address_no_other_host_reaches_is_refused_naming_master_addr(monkeypatch):
    pytest.importorskip("torch", reason="torch is not installed (the train extra)")
    import ringlab.cluster.launch as launch

    _resolving(monkeypatch, node1="127.0.1.1", node2="127.0.1.1")  # the route to 127.0.1.1 is loopback too
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    monkeypatch.setattr(launch, "_listener", lambda *a: pytest.fail("bound a store no other host reaches"))
    with pytest.raises(RuntimeError, match="node1 resolves to a loopback address.*set MASTER_ADDR"):
        with launch.torch_process_group(TwoHosts()):
            pass


def test_the_store_address_is_master_addr_else_the_host_names_else_the_route(monkeypatch):
    from ringlab.cluster.launch import _route_to, store_address

    assert _route_to("127.0.0.1") == "127.0.0.1"
    _resolving(monkeypatch, node1="10.0.0.5", node2="10.0.0.6")
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    assert store_address(["node1", "node2"]) == "10.0.0.5"
    monkeypatch.setenv("MASTER_ADDR", "10.9.9.9")
    assert store_address(["node1", "node2"]) == "10.9.9.9"


def test_hydras_topology_file_is_removed_only_where_the_parent_is_hydras_proxy(tmp_path):
    """unname_topology_file removes the hwloc file its parent holds open when that parent is hydra_pmi_proxy,
    and nothing of any other parent's (a shell, Slurm's step daemon)."""
    from ringlab.cluster.runner import unname_topology_file
    proc = tmp_path / "proc"
    parent = proc / str(os.getppid())
    (parent / "fd").mkdir(parents=True)
    topology, other = tmp_path / "hydra_hwloc_xmlfile_Ab12Cd", tmp_path / "notes.txt"
    for name in (topology, other):
        name.write_text("<topology/>")
    (parent / "fd" / "12").symlink_to(topology)
    (parent / "fd" / "13").symlink_to(other)
    (parent / "comm").write_text("slurmstepd\n")
    assert unname_topology_file(str(proc)) == [] and topology.exists()
    (parent / "comm").write_text("hydra_pmi_proxy\n")
    assert unname_topology_file(str(proc)) == [str(topology)]
    assert not topology.exists() and other.exists()
    assert unname_topology_file(str(proc)) == []  # already gone: another rank of the host was first
    assert unname_topology_file(str(tmp_path / "no-proc")) == []
    topology.write_text("<topology/>")  # another process's (a rank being stopped): its parent is read from its stat
    (proc / "4242").mkdir()
    (proc / "4242" / "stat").write_text(f"4242 (python (engine)) S {os.getppid()} 1 1 0")
    assert unname_topology_file(str(proc), pid=4242) == [str(topology)] and not topology.exists()
    assert unname_topology_file(str(proc), pid=4343) == []  # ended meanwhile
