"""ipyparallel MPI engines for the labs: ordered by rank, an exception on one rank ends the cell at
once instead of hanging it, and the helper restarts and always stops cleanly."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("ipyparallel", reason="ipyparallel is not installed (the lab extra)")

from ringlab.lab.cluster import GRACE_S, MPICluster  # noqa: E402


@pytest.mark.timeout(240)
def test_ranks_collective_abort_and_restart():
    with MPICluster(3, activate=False) as ranks:
        ranks.view.execute("from mpi4py import MPI\nme = MPI.COMM_WORLD.Get_rank()", block=True)
        assert ranks.view.pull("me", block=True) == [0, 1, 2]  # the view is ordered by rank
        ranks.view.execute("from ringlab.cluster.runner import MPICH_SEGMENT\n"
                           "mapped = MPICH_SEGMENT.findall(open('/proc/self/maps').read())", block=True)
        mapped = {name for names in ranks.view.pull("mapped", block=True) for name in names}
        assert mapped and not any(os.path.exists(name) for name in mapped)  # the abort below leaves no segment
        ranks.view.execute("import os\nparent, held = f'/proc/{os.getppid()}/fd', []\n"
                           "for fd in os.listdir(parent):\n"
                           "    try:\n        held.append(os.readlink(f'{parent}/{fd}'))\n"
                           "    except OSError:\n        pass  # closed meanwhile\n", block=True)
        held = {name for names in ranks.view.pull("held", block=True) for name in names if "hydra_hwloc" in name}
        assert held and all(name.endswith(" (deleted)") for name in held)  # nor mpiexec's topology file
        code = ("import numpy as np, ringlab as rl\n"
                "from mpi4py import MPI\n"
                "total = rl.allreduce(np.full(5, MPI.COMM_WORLD.Get_rank() + 1.0))\n")
        ranks.view.execute(code, block=True)
        assert ranks.pull_rank0("total").tolist() == [6.0] * 5
        ranks.view.execute("mine = 10 * me", block=True)
        me, mine = ranks.pull_rank0("me", "mine")  # rank 0's values, not another rank's
        assert (me, mine) == (0, 0)
        assert ranks.pull_rank0("me", "total")[1].tolist() == [6.0] * 5
        with pytest.raises(ValueError, match="at least one"):
            ranks.pull_rank0()
        failing = ("from mpi4py import MPI\nimport numpy as np\n"
                   "if MPI.COMM_WORLD.Get_rank() == 1:\n    raise RuntimeError('boom on rank 1')\n"
                   "MPI.COMM_WORLD.Allreduce(np.ones(3), np.empty(3))\n")
        start = time.monotonic()
        with pytest.raises(Exception, match="died"):
            ranks.view.execute(failing, block=False).get(timeout=60)
        assert time.monotonic() - start < 10 + GRACE_S  # rank 1 waits GRACE_S for rank 0, which is stuck: abort
        ranks.restart()
        assert ranks.alive()
        ranks.view.execute("seven = 7", block=True)
        assert ranks.view.pull("seven", block=True) == [7, 7, 7]
    assert ranks.client is None


OWNER = """
import json, os, signal, sys
from ringlab.lab.cluster import MPICluster
ranks = MPICluster(2, activate=False).start()
cluster = ranks._cluster
pids = ranks.client[:].apply_sync(os.getpid) + [cluster.controller.process.pid]
print(json.dumps({"pids": pids, "folder": ranks.profile_dir}), flush=True)
if sys.argv[1] == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
"""


def _gone_within(pids, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1][:3]
                   for pid in pids):
            return True
        time.sleep(0.5)
    return False


@pytest.mark.timeout(240)
@pytest.mark.parametrize("how", ["exit", "kill"])
def test_engines_end_with_the_process_that_started_them(how, tmp_path):
    """atexit stops the cluster on a normal exit; the watchdog when the owner is killed (SIGKILL)."""
    env = {**os.environ, "IPYTHONDIR": str(tmp_path / "ipython")}
    done = subprocess.run([sys.executable, "-c", OWNER, how], capture_output=True, text=True, timeout=180, env=env)
    said = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(said["pids"]) == 3
    assert _gone_within(said["pids"], 30), f"still running after 30 s: {said['pids']}"
    deadline = time.monotonic() + 15
    while Path(said["folder"]).exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not Path(said["folder"]).exists()  # the cluster's own folder went with it
    assert not (tmp_path / "ipython" / "profile_default" / "log").exists() or \
        not any((tmp_path / "ipython" / "profile_default" / "log").iterdir())  # nothing written elsewhere


@pytest.mark.timeout(240)
def test_a_rank_that_raises_in_apply_ends_the_job_with_its_error():
    with MPICluster(2, activate=False) as ranks:
        def raise_on_rank_1():
            from mpi4py import MPI
            import numpy as np
            if MPI.COMM_WORLD.Get_rank() == 1:
                raise ValueError("bad input on rank 1")
            MPI.COMM_WORLD.Allreduce(np.ones(3), np.empty(3))  # rank 0 waits here
        raise_on_rank_1.__module__ = "__main__"  # sent by value: the engines cannot import this test file
        start = time.monotonic()
        with pytest.raises(Exception):
            ranks.view.apply_async(raise_on_rank_1).get(timeout=60)
        assert time.monotonic() - start < 20
        said = ranks.rank_errors()
        assert any("rank 1 raised ValueError: bad input on rank 1" in text for text in said), said
        ranks.restart()
        assert ranks.rank_errors() == []
        with pytest.raises(NameError, match="rank 0 has no variable named 'nothing'"):
            ranks.pull_rank0("nothing")
        assert ranks.alive()  # a missing name is an error here, not an abort there


@pytest.mark.timeout(300)
def test_a_mistake_every_rank_makes_alike_keeps_the_ranks_and_a_restart_replays_the_setup():
    import nbformat
    from nbclient import NotebookClient

    cells = ["from ringlab.lab.cluster import MPICluster\nranks = MPICluster(2).start()",
             "%%px\nfrom mpi4py import MPI\nimport numpy as np\nbase = 10 + MPI.COMM_WORLD.Get_rank()",
             "%%px\nprint(undefined_name)",                         # a typo: every rank raises alike
             "print('alive after the typo:', ranks.alive())",
             "%%px\nprint('still', base)",                          # what the ranks held is still there
             "%%px\nif MPI.COMM_WORLD.Get_rank() == 1:\n    raise RuntimeError('boom on rank 1')\n"
             "MPI.COMM_WORLD.Allreduce(np.ones(3), np.empty(3))",     # rank 0 waits for rank 1: the job aborts
             "ranks.restart(replay=True)",
             "%%px\nprint('again', base)",
             "ranks.stop()"]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells], metadata={
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    done = NotebookClient(notebook, timeout=120, kernel_name="python3", allow_errors=True).execute()

    def said(i):
        return "".join(o.get("text", "") + "".join(o.get("traceback", [])) + str(o.get("data", {}))
                       for o in done.cells[i].outputs)

    assert "NameError" in said(2) and "still running" in said(2)
    assert "alive after the typo: True" in said(3)
    assert "still 10" in said(4) and "still 11" in said(4)
    assert "boom on rank 1" in said(5) and "restart(replay=True)" in said(5)
    assert "running again: from mpi4py import MPI" in said(6) and "undefined_name" not in said(6)
    assert "again 10" in said(7) and "again 11" in said(7)


@pytest.mark.timeout(300)
def test_every_rank_keeps_its_line_when_streaming_starts_after_the_ranks_printed():
    """On a busy machine every rank can print before the notebook starts streaming the cell's output. ipyparallel
    then published each rank's early output under one shared display id, so rank 2's line replaced rank 0's and
    rank 1's (seen in CI as '[stdout:1] still 11' alone). Here the client is held back until all output is in."""
    late = ("import ipyparallel.client.asyncresult as A\n_stream = A.AsyncResult.stream_output\n"
            "def late(self):\n    self.wait_for_output(30)\n    return _stream(self)\n"
            "A.AsyncResult.stream_output = late")
    said = _run_notebook(["from ringlab.lab.cluster import MPICluster\nranks = MPICluster(3).start()", late,
                          "%%px\nfrom mpi4py import MPI\nprint('rank', MPI.COMM_WORLD.Get_rank(), 'here')",
                          "%%px\nprint('first', flush=True)\nprint('second')", "ranks.stop()"])
    for rank in range(3):
        assert f"[stdout:{rank}] rank {rank} here" in said(2), said(2)
    assert said(3).count("first") == 3 and said(3).count("second") == 3, said(3)


def _run_notebook(cells: list[str], timeout: int = 120):
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells], metadata={
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    done = NotebookClient(notebook, timeout=timeout, kernel_name="python3", allow_errors=True).execute()

    def said(i):
        return "".join(o.get("text", "") + "".join(o.get("traceback", [])) + str(o.get("data", {}))
                       for o in done.cells[i].outputs)
    return said


@pytest.mark.quiet  # deadlines of 3 and 8 s, and every rank's output read back: run alone
@pytest.mark.timeout(300)
def test_deadlines_in_cells_and_a_replay_that_keeps_its_targets():
    """A collective one rank skips ends in a clear error within ringlab's deadline, the ranks live on and are
    in step again; a cell stuck in the user's own MPI call ends at the cell deadline; the replay runs again
    only the cells that finished, each on its own ranks (--targets), not the one that got stuck."""
    said = _run_notebook([
        "import os\nos.environ['RINGLAB_TIMEOUT'] = '3'\nfrom ringlab.lab.cluster import MPICluster\n"
        "ranks = MPICluster(3, cell_timeout=8).start()",
        "%%px\nfrom mpi4py import MPI\nimport numpy as np\nimport ringlab as rl\nrank = MPI.COMM_WORLD.Get_rank()",
        "%%px --targets 0\nonly_on_zero = 42",
        "%%px\nif rank != 2:\n    rl.allreduce(np.ones(3))",                      # rank 2 skips it
        "print('alive:', ranks.alive())",
        "%%px\nprint('sum', rl.allreduce(np.ones(3))[0])",                           # refused: rank 2 is a call behind
        "%%px\nprint('sum', rl.allreduce(np.ones(3))[0])",                           # in step again
        "%%px\nif rank == 1:\n    MPI.COMM_WORLD.recv(source=0, tag=99)",          # never comes: the cell deadline
        "ranks.restart(replay=True)",
        "%%px\nprint('rank', rank, 'has it:', 'only_on_zero' in globals())",
        "ranks.stop()"])
    assert "rank 2 did not call it within 3 s" in said(3) and "still running" in said(3), said(3)
    assert "alive: True" in said(4)
    assert "OutOfStep" in said(5) and "the ranks are at different calls" in said(5), said(5)
    assert said(6).count("sum 3.0") == 3, said(6)
    assert "ran past its deadline of 8 s on rank" in said(7) and "restart(replay=True)" in said(7), said(7)
    assert "running again (on rank 0): only_on_zero = 42" in said(8), said(8)
    assert "running again: from mpi4py import MPI" in said(8) and "recv(source=0" not in said(8), said(8)
    assert "rank 0 has it: True" in said(9) and "rank 1 has it: False" in said(9), said(9)


@pytest.mark.timeout(240)
def test_starting_a_second_cluster_stops_the_first():
    first = MPICluster(2, activate=False).start()
    engines = first.client[:].apply_sync(os.getpid)
    second = MPICluster(2, activate=False)
    try:
        second.start()
        assert not first.alive() and first.profile_dir is None
        deadline = time.monotonic() + 30
        while any(os.path.exists(f"/proc/{pid}") for pid in engines) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(os.path.exists(f"/proc/{pid}") for pid in engines), engines
        assert second.alive()
    finally:
        second.stop()
        first.stop()


@pytest.mark.timeout(240)
def test_the_engines_beat_at_the_controllers_period_and_stop_ends_every_process():
    """The controller pings every HEARTBEAT_MS (the engines check for its pings every HEARTBEAT_MS + 500 ms, as
    they are told when they register), and stop() ends the engines, then the controller."""
    from ringlab.lab.cluster import HEARTBEAT_MS

    ranks = MPICluster(2, activate=False).start()
    try:
        ranks.view.execute("from ipyparallel.engine.app import IPEngine\n"
                           "period = IPEngine.instance().hb_check_period", block=True)
        assert ranks.view.pull("period", block=True) == [HEARTBEAT_MS + 500] * 2
        pids = ranks.client[:].apply_sync(os.getpid) + [ranks._cluster.controller.process.pid]
    finally:
        ranks.stop()
    deadline = time.monotonic() + 30
    while any(os.path.exists(f"/proc/{pid}") for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(os.path.exists(f"/proc/{pid}") for pid in pids), pids
    assert ranks.client is None and ranks.profile_dir is None


@pytest.mark.timeout(240)
def test_a_local_cluster_listens_on_loopback_only():
    """The controller and the engines listen on 127.0.0.1 (hydra's own port aside: its command line cannot
    change it, as the README says)."""
    import shutil

    if shutil.which("ss") is None:
        pytest.skip("no ss here to list the listening sockets")
    with MPICluster(2, activate=False) as ranks:
        ours = set(ranks.client[:].apply_sync(os.getpid))
        for entry in os.listdir("/proc"):  # the controller: a child of this process
            if entry.isdigit():
                try:
                    parent = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
                except OSError:
                    continue
                if parent == os.getpid():
                    ours.add(int(entry))
        lines = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout.splitlines()
        mine = [line for line in lines if any(f"pid={p}," in line for p in ours) and "hydra_pmi_proxy" not in line]
    addresses = {line.split()[3].rsplit(":", 1)[0] for line in mine}
    assert len(mine) >= 3 and addresses == {"127.0.0.1"}, mine


@pytest.mark.timeout(240)
def test_a_rank_that_dies_is_said_plainly():
    said = _run_notebook(["from ringlab.lab.cluster import MPICluster\nranks = MPICluster(2).start()",
                          "%%px\nimport os, time\nfrom mpi4py import MPI\nif MPI.COMM_WORLD.Get_rank() == 1:\n"
                          "    os._exit(3)\ntime.sleep(20)",
                          "ranks.stop()"], timeout=100)
    assert "stopped without an error of their own" in said(1) and "restart(replay=True)" in said(1), said(1)
    assert "AlreadyDisplayedError" not in said(1)


def test_px_cells_wait_for_every_ranks_output_before_they_end():
    """The progress bar is put off, not switched off: ``--progress-after -1`` made ipyparallel skip its wait for
    the engines' output, and a ``print`` on two ranks showed rank 0's line only (CI, 2026-11-29)."""
    script = r'''
import contextlib
from IPython.core.interactiveshell import InteractiveShell
from ipyparallel.client.magics import ParallelMagics
from ringlab.lab import cluster

calls = []

class Result:
    _output_ready = True
    def stream_output(self):
        return contextlib.nullcontext()
    def wait(self, timeout=None):
        calls.append(("wait", timeout)); return True
    def wait_for_output(self, timeout=-1):
        calls.append(("wait_for_output", timeout)); return True
    def wait_interactive(self):
        calls.append(("progress bar", None))
    def done(self):
        return True
    def get(self):
        return None

class View:
    block = True
    targets = "all"
    def execute(self, cell, silent=False, block=False):
        return Result()

shell = InteractiveShell.instance()
magics = ParallelMagics(shell, View())
shell.register_magics(magics)
cluster._no_transient_progress()
magics.stream_output = True
shell.run_cell_magic("px", "", "print('hello')")
print(magics.progress_after_seconds, calls)
assert [name for name, _ in calls].count("wait_for_output") == 1, calls
assert ("progress bar", None) not in calls, calls
'''
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.timeout(240)
def test_engines_that_fail_at_once_are_quoted_in_the_starts_error(monkeypatch, tmp_path):
    """Engines that cannot start (here each rank mpiexec starts writes a line and exits 3) fail the start within its
    timeout, quoting what they wrote, and leave nothing running."""
    (tmp_path / "sitecustomize.py").write_text(
        "import os, sys\n"
        "if os.environ.get('PMI_RANK') is not None:  # a process mpiexec started: an engine, not the controller\n"
        "    sys.stderr.write('engine made to fail by the test\\n'); sys.stderr.flush(); os._exit(3)\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    ranks = MPICluster(2, activate=False, timeout=15)
    with pytest.raises(RuntimeError, match="the 2 ranks did not start") as raised:
        ranks.start()
    said = str(raised.value)
    assert "[the engines: " in said and "engine made to fail by the test" in said, said
    assert ranks.profile_dir is None and not ranks.alive()


def test_an_ended_launchers_output_is_quoted_after_ipyparallel_removed_its_file(tmp_path):
    """CI once saw lab 09's MPICluster(4).start() fail with 'Engine set stopped: exit_code 1' and '[the engines:
    exited with code 1; nothing written]': when a launcher ends, ipyparallel reads its output and removes the file
    (``_log_output``), logging it at a level the cluster does not show, so the file was gone when the error was
    written. An ended launcher's output is now taken from ipyparallel's copy."""
    from types import SimpleNamespace

    from ipyparallel.cluster.launcher import LocalProcessLauncher

    engines = LocalProcessLauncher(output_file=str(tmp_path / "engines.log"))
    (tmp_path / "engines.log").write_text("Fatal error in PMPI_Init: the line that says why\n")
    engines.state, engines.stop_data = "after", {"exit_code": 1}
    engines._log_output(engines.stop_data)  # what ipyparallel does when the process ends
    assert not (tmp_path / "engines.log").exists()
    ranks = MPICluster(2, activate=False)
    ranks._cluster = SimpleNamespace(engines={"set": engines}, controller=None)
    said = ranks._engines_said()
    assert said == "[the engines: exited with code 1; their last lines]\nFatal error in PMPI_Init: the line that says why"


def test_engines_that_register_but_never_answer_their_first_call_fail_the_start_clearly(monkeypatch, tmp_path):
    """A start whose engines registered but do not answer the abort hook's install raises within the cluster's
    timeout, saying so, and leaves nothing running (it once hung CI for 240 s), nor MPICH's files: the engines'
    shared-memory segment in /dev/shm and mpiexec's topology file in /tmp (each run of this test left one of each)."""
    import ipyparallel as ipp

    import ringlab.lab.cluster as cluster

    ranks = MPICluster(2, activate=False)
    waited = ipp.Client.wait_for_engines

    def then_shorten(client, *args, **kwargs):  # the engines get the usual time to register, the call 3 s
        waited(client, *args, **kwargs)
        ranks.timeout = 3

    def never_answers(*args, record=str(tmp_path / "files")):
        import os as _os
        import time as _time

        from ringlab.mpi.devices import HYDRA_TOPOLOGY, MPICH_SEGMENT

        with open("/proc/self/maps") as f:  # the files MPICH made for this engine, which the start must remove
            names = set(MPICH_SEGMENT.findall(f.read()))
        fds = f"/proc/{_os.getppid()}/fd"  # the parent is mpiexec's proxy, which holds the topology file open
        for fd in _os.listdir(fds):
            try:
                target = _os.readlink(f"{fds}/{fd}")
            except OSError:  # closed meanwhile
                continue
            if HYDRA_TOPOLOGY.match(target):
                names.add(target)
        with open(f"{record}.{_os.getpid()}", "w") as f:
            f.write("\n".join(sorted(names)))
        _os.rename(f"{record}.{_os.getpid()}", f"{record}-{_os.getpid()}")  # whole, or not there
        _time.sleep(120)

    never_answers.__module__ = "__main__"  # sent by value: the engines cannot import this test module
    monkeypatch.setattr(ipp.Client, "wait_for_engines", then_shorten)
    monkeypatch.setattr(cluster, "_abort_on_exception", never_answers)
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="the 2 engines registered, but 2 of them did not answer their first call") \
            as raised:
        ranks.start()
    assert time.monotonic() - start < 120 and ranks.profile_dir is None and not ranks.alive()
    said = str(raised.value)  # where each engine waited, read by py-spy (the test extra installs it)
    assert "What each engine was doing then (py-spy dump)" in said and said.count("never_answers") >= 2, said
    made = [name for found in tmp_path.glob("files-*") for name in found.read_text().split()]
    assert len(list(tmp_path.glob("files-*"))) == 2, made
    assert any("mpich_shm" in name for name in made) and any("hydra_hwloc" in name for name in made), made
    assert not [name for name in made if os.path.exists(name)], made
