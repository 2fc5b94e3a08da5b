"""Issue 47's findings on the lab cluster: a start that fails leaves nothing behind, and %%px --targets is read
without eval."""
import os
import sys
import threading
import time

import pytest

pytest.importorskip("ipyparallel", reason="ipyparallel is not installed (the lab extra)")
psutil = pytest.importorskip("psutil")

from ringlab.lab.cluster import MPICluster, px_targets  # noqa: E402

# an "engine" that never registers: it writes its PID where the test finds it, then waits
NEVER_REGISTERS = "import os, sys, time; open(os.path.join(sys.argv[1], f'engine-{os.getpid()}'), 'w').close(); " \
                  "print('no controller here', file=sys.stderr, flush=True); time.sleep(600)"


def _processes_started(seen: dict, stop: threading.Event) -> None:
    """Collect {PID: command line} of every process this one starts (and they start) until ``stop``."""
    while not stop.is_set():
        for proc in psutil.Process().children(recursive=True):
            try:
                seen.setdefault(proc.pid, " ".join(proc.cmdline()))
            except psutil.Error:
                pass
        time.sleep(0.1)


def _gone_within(pids, seconds: float) -> list[int]:
    """The PIDs still running (zombies count as gone) after up to ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        left = [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def _failing_start(tmp_path, monkeypatch, interrupt: bool):
    """Start a cluster whose engines never register (or whose wait is interrupted): what start() raised, the
    {PID: command line} of what it started, the PIDs of the engines, and, seconds after the failure, which of
    those PIDs still run and which cluster folders are left."""
    import ipyparallel as ipp

    if interrupt:
        def interrupted(self, *args, **kwargs):
            # the learner interrupts while the engines run: once both have started and the watcher has seen them
            # (an interrupt raised at once could come before mpiexec started them, and the test would find none)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                started = {int(p.name.split("-")[1]) for p in tmp_path.glob("engine-*")}
                if len(started) == 2 and started <= set(seen):
                    break
                time.sleep(0.05)
            raise KeyboardInterrupt
        monkeypatch.setattr(ipp.Client, "wait_for_engines", interrupted)
    cluster = MPICluster(2, activate=False, timeout=5, shared_dir=str(tmp_path), launcher_options={
        "engine_cmd": [sys.executable, "-c", NEVER_REGISTERS, str(tmp_path)]})
    seen, stop = {}, threading.Event()
    watcher = threading.Thread(target=_processes_started, args=(seen, stop), daemon=True)
    watcher.start()
    try:
        try:
            cluster.start()
        except BaseException as error:  # noqa: B036 - an interrupt is one of the outcomes under test
            raised = error
        else:
            raise AssertionError("start() did not fail")
        stop.set()
        watcher.join()
        engines = [int(p.name.split("-")[1]) for p in tmp_path.glob("engine-*")]
        return raised, seen, engines, _gone_within(seen, 20), list(tmp_path.glob("ringlab-cluster-*"))
    finally:  # whatever the code under test left, the test leaves nothing
        stop.set()
        cluster.stop()
        for pid in _gone_within(seen, 0):
            psutil.Process(pid).kill()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("interrupt", [False, True], ids=["engines-never-register", "interrupted"])
def test_a_start_that_fails_stops_the_controller_and_engines_and_removes_its_folder(tmp_path, monkeypatch, interrupt):
    started = time.monotonic()
    error, pids, engines, left, folders = _failing_start(tmp_path, monkeypatch, interrupt)
    controllers = [pid for pid, words in pids.items() if "-m ipyparallel.controller" in words]  # and its forks
    assert controllers and len(engines) == 2 and set(engines) <= set(pids), (pids, engines)
    assert left == [], {pid: pids[pid] for pid in left}  # controller, mpiexec and engines: gone, by PID
    assert folders == []  # the profile folder went with them
    if interrupt:
        assert isinstance(error, KeyboardInterrupt)  # an interrupt stays one
    else:
        assert isinstance(error, RuntimeError) and "did not start" in str(error) and "engines not ready" in str(error)
        assert "no controller here" in str(error)  # what the engines said, before their folder went
        assert "[the engines: still running (pid " in str(error)  # mpiexec's state when the wait ran out
        assert "[the controller: still running (pid " in str(error)  # and the controller's, with its log (INFO)
        assert time.monotonic() - started < 50  # the wait was ours (5 s), not ipyparallel's own 60 s


IDS = [10, 11, 12, 13]  # engine ids, as a client lists them


@pytest.mark.parametrize("targets, engines", [
    ("11", [11]), ("-1", [13]), ("[10,12]", [10, 12]), ("10,12", [10, 12]), ("(13, 11)", [13, 11]),
    (" [ 10 ] ", [10]), ("1:3", [11, 12]), ("::2", [10, 12]), ("-2:", [12, 13]), (":", IDS), ("1:4:2", [11, 13]),
])
def test_px_targets_select_as_ipyparallels_px(targets, engines):
    from ipyparallel.client.magics import ParallelMagics

    assert px_targets(targets, IDS) == engines
    magics = ParallelMagics.__new__(ParallelMagics)  # what ipyparallel's %%px makes of the same text
    magics.view = type("View", (), {"client": type("Client", (), {"ids": IDS})})
    theirs = magics._eval_target_str(targets)
    theirs = ([IDS[theirs]] if theirs < 0 else [theirs]) if isinstance(theirs, int) else list(theirs)
    assert theirs == engines


@pytest.mark.parametrize("targets", [
    "__import__('os').system('touch {mark}')", "1:__import__('os').system('touch {mark}')",
    "[__import__('os').system('touch {mark}')]", "open('{mark}', 'w')", "ids", "1.5", "True", "'0'", "[]",
    "1:2:3:4", "1:2;import os", "{{0: 1}}",
])
def test_px_targets_refuse_code_and_never_run_it(targets, tmp_path):
    mark = tmp_path / "ran"
    text = targets.format(mark=mark)
    with pytest.raises(ValueError, match="--targets .* is not an engine id"):
        px_targets(text, [0, 1, 2, 3])
    assert not mark.exists()


def test_ranks_of_reads_targets_without_eval(tmp_path):
    class Running:
        ids = [7, 5, 6]
    cluster = MPICluster.__new__(MPICluster)
    cluster.client, cluster.view = Running, type("View", (), {"targets": [5, 6, 7]})
    assert cluster.ranks_of("[7,5]") == [0, 2]
    assert cluster.ranks_of("1:") == [0, 1]  # ids[1:] = engines 5 and 6, ranks 0 and 1
    assert cluster.ranks_of("all") is None
    with pytest.raises(ValueError):
        cluster.ranks_of(f"__import__('os').system('touch {tmp_path / 'ran'}')")
    assert not (tmp_path / "ran").exists()


@pytest.mark.timeout(240)
def test_a_rank_whose_abort_handler_fails_still_ends_the_job():
    """IPython drops a custom exception handler that raises, for good: then the rank that raised never aborts
    and the rank waiting for it in a collective waits forever (a view.execute has no cell deadline). Here rank 1
    loses the cluster's folder, where the handler writes what it raised, just before it raises."""
    from ipyparallel.error import CompositeError, EngineError

    from ringlab.lab.cluster import ERRORS

    with MPICluster(2, activate=False) as ranks:
        cell = ("import shutil\nimport numpy as np\nfrom mpi4py import MPI\n"
                "if MPI.COMM_WORLD.Get_rank() == 1:\n"
                f"    shutil.rmtree({os.path.join(ranks.profile_dir, ERRORS)!r})\n"
                "    raise RuntimeError('boom on rank 1')\n"
                "MPI.COMM_WORLD.Allreduce(np.ones(3), np.empty(3))\n")
        started = time.monotonic()
        with pytest.raises((CompositeError, EngineError)):
            ranks.view.execute(cell, block=False).get(timeout=60)
        assert time.monotonic() - started < 45  # the grace (5 s), the abort, ipyparallel noticing
        deadline = time.monotonic() + 30
        while ranks.alive() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not ranks.alive()  # the job ended: both engines went
