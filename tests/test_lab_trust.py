"""Issue 47's findings on the lab cluster: a start that fails leaves nothing behind."""
import os
import sys
import threading
import time

import pytest

pytest.importorskip("ipyparallel", reason="ipyparallel is not installed (the lab extra)")
psutil = pytest.importorskip("psutil")

from ringlab.lab.cluster import MPICluster  # noqa: E402

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
    controllers = [pid for pid, words in pids.items() if words.endswith("-m ipyparallel.controller")]  # and its forks
    assert controllers and len(engines) == 2 and set(engines) <= set(pids), (pids, engines)
    assert left == [], {pid: pids[pid] for pid in left}  # controller, mpiexec and engines: gone, by PID
    assert folders == []  # the profile folder went with them
    if interrupt:
        assert isinstance(error, KeyboardInterrupt)  # an interrupt stays one
    else:
        assert isinstance(error, RuntimeError) and "did not start" in str(error) and "engines not ready" in str(error)
        assert "no controller here" in str(error)  # what the engines said, before their folder went
        assert time.monotonic() - started < 50  # the wait was ours (5 s), not ipyparallel's own 60 s
