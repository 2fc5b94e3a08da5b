"""MPI ranks for notebooks: ipyparallel engines started under mpiexec, and always stopped.

    from ringlab.lab.cluster import MPICluster
    ranks = MPICluster(4).start()     # then %%px cells run on every rank
    ...
    result = ranks.pull_rank0("result")   # what rank 0 computed
    ranks.stop()                      # also at exit, and by `with MPICluster(4) as ranks:`

A rank that raises while the others wait in a collective would hang the cell, and nbval's
timeout cannot interrupt it through ipyparallel. So when a ``%%px`` cell raises on a rank, that
rank waits a few seconds (:data:`GRACE_S`) for every rank to reach the end of the cell: when all do
(a typo or a NameError raises alike everywhere), the cell just fails and the ranks live on with
what they held. When some rank does not (it waits in a collective for the one that raised), the
rank writes what it raised to the cluster's folder and aborts the whole MPI job: the cell fails,
showing each rank's own error, and :meth:`MPICluster.restart` brings up fresh engines, with
``replay=True`` running again the ``%%px`` cells that had finished on every rank they ran on (the
lab's setup), on those ranks again (``--targets``); a cell that was interrupted, or ran with
``--noblock``, is not run again. An exception in a function sent with ``apply`` always aborts.
Engine ids need not equal MPI ranks: :attr:`MPICluster.view` is ordered by rank.

Every ``%%px`` cell has a deadline (:data:`CELL_TIMEOUT_S`, ``RINGLAB_CELL_TIMEOUT`` seconds or
``none``, or ``MPICluster(cell_timeout=)``): a cell still running past it on a rank (waiting in an MPI
call of the user's for a message that never comes, say) writes why and aborts the job, as a rank
that raised does. ringlab's own collectives keep to their shorter deadline
(:mod:`ringlab.mpi.deadlines`). Starting a cluster stops any other this process started: one at a time.

Everything a cluster writes (connection files, logs, those errors) goes into its own temporary
profile folder, removed when it stops. A watchdog process stops the engines and the controller
within seconds when the Python process that started them ends, however it ends (a kernel that
is restarted or killed included).

On a cluster the engines can start elsewhere (:func:`cluster_kwargs` says exactly how; untested
here, where there is one machine and no Slurm):

    MPICluster(16, launcher="slurm", launcher_options={"partition": "gpu", "time": "01:00:00",
               "options": "--nodes=2 --ntasks-per-node=8"})   # sbatch, then srun of 16 engines
    MPICluster(16, launcher="ssh", hosts={"node1": 8, "node2": 8})   # mpiexec reaches them over ssh
    MPICluster(16, launcher="mpi")    # mpiexec picks the hosts (inside salloc: the allocation's)

Every engine is one rank of one MPI job, as ``%%px`` cells expect: so ``launcher="ssh"`` is
mpiexec over ssh, not ipyparallel's ``SSHEngineSetLauncher``, which starts each engine as an MPI
job of its own. Engines on other hosts need the same Python environment at the same path, and the
cluster's folder on a file system every host sees (``shared_dir``, by default the current folder).
"""
from __future__ import annotations

import ast
import atexit
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..cluster.launch import check_nranks, local_env

LAUNCHERS = {"local": "mpi", "mpi": "mpi", "ssh": "mpi", "slurm": "slurm"}  # ringlab's name -> ipyparallel's engines
SLURM_WORDS = {"partition": "queue", "time": "timelimit"}  # sbatch's words for SlurmEngineSetLauncher's options

_RUNNING: list["MPICluster"] = []
ERRORS = "ringlab-errors"  # inside the profile folder: one file per rank that raised, and cells' end marks
GRACE_S = 5.0  # how long a rank that raised waits for the others to end the cell before aborting the job
# The controller pings the engines every HEARTBEAT_MS and takes an engine in only once it has answered a ping, at the
# next one: at ipyparallel's 3000 ms an engine up in 1.5 s was taken in after about 6; at 1000 ms the controller took
# them in 1.1 s after they had registered, half the start of 2 ranks, idle. An engine is given up after
# HEARTBEAT_MISSES pings unanswered, 30 s as at ipyparallel's defaults (10 x 3 s); an engine gives itself up after
# 50 of its checks without a ping (every HEARTBEAT_MS + 500 ms: 37.5 s; 175 s at the defaults).
HEARTBEAT_MS = 250
LOG_LEVEL = "--log-level=20"  # the controller's and the engines' logs (files in the cluster's folder): INFO, which
#                               says who registered and who answered the heartbeat, for a start that fails to quote
HEARTBEAT_MISSES = 120
CELL_TIMEOUT_S = 600.0  # a %%px cell still running after this long aborts the job (RINGLAB_CELL_TIMEOUT)
CELL_TIMEOUT_ENV = "RINGLAB_CELL_TIMEOUT"
MARK_SLACK_S = 2.0  # a rank's end-of-cell mark counts if written at most this long before this rank began the cell


def cell_timeout(value="default") -> float | None:
    """The deadline of a ``%%px`` cell in seconds (None: no limit): ``value``, or for "default"
    ``RINGLAB_CELL_TIMEOUT`` (seconds, or none/off), else :data:`CELL_TIMEOUT_S`."""
    from ..mpi.deadlines import default_seconds, usable

    if isinstance(value, str) and value == "default":
        return default_seconds(name=CELL_TIMEOUT_ENV, fallback=CELL_TIMEOUT_S)
    if not usable(value):
        raise ValueError(f"cell_timeout must be a number of seconds > 0, None (no limit) or 'default', got {value!r}")
    return None if value is None else float(value)


def _cell_digest(source: str) -> str:
    """A cell's text as a short digest, trailing blank space aside (IPython adds a newline to a cell magic's body)."""
    import hashlib

    return hashlib.sha256(source.rstrip().encode()).hexdigest()[:12]


def _abort_on_exception(errors: str, grace: float = GRACE_S, deadline: float | None = None) -> int:
    """Runs on each engine: when a cell raises here, wait up to ``grace`` seconds for every rank to
    end the cell, and abort every rank unless all did (then the cell just fails); an exception in an
    applied function records itself in the folder ``errors`` and aborts at once. A cell still running
    after ``deadline`` seconds aborts too. A cell that succeeds leaves a mark (for replay)."""
    import os as _os
    import sys as _sys
    import threading as _threading
    import time as _time
    import traceback as _traceback

    from IPython import get_ipython
    from mpi4py import MPI

    from ringlab.mpi.devices import forget_job_files

    forget_job_files()  # every engine has registered, so finished MPI_Init: an aborted job leaves no segment in
    # /dev/shm, nor mpiexec's topology file in /tmp
    rank, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
    cell = ["0"]  # the cell running now: how many this engine has run, and a digest of its text
    timer, started, running = [None], [0.0], [False]  # running: a cell seen by pre_run_cell (not a silent one)

    def starting(info) -> None:
        count = int(cell[0].split("-")[0]) + 1
        cell[0] = f"{count}-{_cell_digest(info.raw_cell or '')}"
        started[0], running[0] = _time.time(), True
        if deadline is not None:
            timer[0] = _threading.Timer(deadline, too_long, args=(cell[0],))
            timer[0].daemon = True
            timer[0].start()

    def too_long(which: str) -> None:
        if which == cell[0] and running[0]:
            abort_with("CellTimeout", f"the cell ran past its deadline of {deadline:g} s on rank {rank} (waiting for "
                       "a message or a rank that never came?); set RINGLAB_CELL_TIMEOUT or "
                       "MPICluster(cell_timeout=) for cells that must run longer", "")

    def ended(r: int) -> str:  # ranks that ran different cells never see each other's marks: they abort
        return f"{errors}/cell-{cell[0].partition('-')[2]}-rank-{r}.ended"

    def has_ended(r: int) -> bool:  # its mark, left by this run of the cell (a run of the same text before is older)
        try:
            return _os.path.getmtime(ended(r)) >= started[0] - MARK_SLACK_S
        except OSError:
            return False

    def mark_ended(*_) -> None:
        if timer[0] is not None:
            timer[0].cancel()
        if running[0]:
            open(ended(rank), "w").close()
            running[0] = False

    def mark_done(result) -> None:  # this rank finished the cell without an error: it may be replayed
        if result.success:
            open(f"{errors}/done-{cell[0].partition('-')[2]}-rank-{rank}", "w").close()

    def abort_with(name: str, value, text: str) -> None:  # never returns: the job ends
        try:  # what the rank raised, for the notebook: nothing here may keep the job from ending
            with open(f"{errors}/rank-{rank}.txt", "w") as fh:
                fh.write(f"rank {rank} raised {name}: {value}\n{text}")
            print(f"ringlab: rank {rank} raised {name}: {value}; aborting every rank", file=_sys.stderr)
            _sys.stdout.flush()
            _sys.stderr.flush()
            _time.sleep(0.3)  # let the output reach the notebook before the job goes
        finally:
            MPI.COMM_WORLD.Abort(1)  # MPICH 5's returns, leaving the rest to mpiexec, and the rank ran on:
            _os._exit(1)  # it ends here, and mpiexec ends a job one of whose ranks exits with an error all the same

    def on_exception(shell, etype, value, tb, tb_offset=None):
        try:  # IPython drops a handler that raises for good, and then no rank would abort again: this one aborts
            shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
            seen = running[0]  # a silent execution (view.execute) leaves no marks: nobody can say it ended
            mark_ended()
            until = _time.monotonic() + grace
            while seen and _time.monotonic() < until:
                if all(has_ended(r) for r in range(size)):
                    return  # every rank got to the end of the cell: nobody waits for this one
                _time.sleep(0.05)
            if not seen:
                _time.sleep(grace)  # as long as a cell's ranks would have had to end it
            late = [r for r in range(size) if not has_ended(r)]
            print(f"ringlab: rank{'s' * (len(late) > 1)} {', '.join(map(str, late))} did not end the cell within "
                  f"{grace:g} s (waiting in a collective for rank {rank}?)", file=_sys.stderr)
        except BaseException as error:  # an interrupt in the grace too: the others may wait for this rank
            said = f"{value} (and, while ringlab handled it, {type(error).__name__}: {error})"
        else:
            said = value
        abort_with(etype.__name__, said, "".join(_traceback.format_exception(etype, value, tb)))

    shell = get_ipython()
    shell.set_custom_exc((Exception,), on_exception)
    shell.events.register("pre_run_cell", starting)
    shell.events.register("post_run_cell", mark_ended)
    shell.events.register("post_run_cell", mark_done)
    from ringlab.mpi import private  # ringlab's own communicator, made now that every rank is here, so that a
    private.state(MPI.COMM_WORLD).comm("MPICluster", 120)  # rank missing from the first collective is named
    from ringlab.mpi.devices import bind_device
    bind_device(MPI.COMM_WORLD)  # each rank on its own GPU (where there are GPUs) before any cell runs
    kernel = shell.kernel
    plain_apply = kernel.do_apply

    def do_apply(*args, **kwargs):
        reply, result = plain_apply(*args, **kwargs)
        if reply.get("status") == "error":
            abort_with(reply.get("ename"), reply.get("evalue"), "\n".join(reply.get("traceback") or []))
        return reply, result

    kernel.do_apply = do_apply
    return rank


def _fetch(names):
    """Runs on rank 0's engine for :meth:`MPICluster.pull_rank0`: the values, or which names are missing."""
    from IPython import get_ipython

    namespace = get_ipython().user_ns
    missing = [n for n in names if n not in namespace]
    return ("missing", missing) if missing else ("ok", [namespace[n] for n in names])


def px_targets(targets: str, ids: list[int]) -> list[int]:
    """The engine ids a ``%%px --targets`` value names, read as ipyparallel's %%px reads it but never run
    as code: an id (a negative one counts from the end of ``ids``), ids (``[0,2]``, ``0,2``) or a slice
    of ``ids`` (``1:3``, ``::2``); a ValueError naming the value otherwise."""
    wrong = ValueError(f"--targets {targets!r} is not an engine id, a list of ids ([0,2] or 0,2) or a slice "
                       "of them (1:3, ::2)")
    if ":" in targets:  # %%px reads it as ids[targets]
        bounds = targets.split(":")
        if len(bounds) > 3 or not all(re.fullmatch(r"\s*[+-]?[0-9]+\s*", b) for b in bounds if b.strip()):
            raise wrong
        return ids[slice(*(int(b) if b.strip() else None for b in bounds))]
    try:
        value = ast.literal_eval(targets.strip())  # literals only: a call or a name is refused, not run
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise wrong from None
    engines = list(value) if isinstance(value, (list, tuple)) else [value]
    if not engines or not all(isinstance(e, int) and not isinstance(e, bool) for e in engines):
        raise wrong
    if isinstance(value, int) and value < 0:  # as ipyparallel: one negative id counts from the end
        engines = [ids[value]]
    return engines


def _host_args(n: int, hosts) -> list[str]:
    """mpiexec's (hydra's) arguments that put ``n`` ranks on ``hosts``, in consecutive blocks per host."""
    if isinstance(hosts, (str, os.PathLike)):
        if not Path(hosts).is_file():
            raise ValueError(f"hosts={str(hosts)!r} is neither a dict, a list of host names nor a host file "
                             "that exists")
        return ["-f", str(hosts)]  # lines "host:count": hydra fills each host's slots in turn
    if isinstance(hosts, (list, tuple)):
        if not hosts or n % len(hosts):
            raise ValueError(f"{n} ranks do not split evenly over {len(hosts)} hosts: give counts, "
                             "hosts={host: ranks}")
        hosts = {host: n // len(hosts) for host in hosts}
    if not isinstance(hosts, dict) or not hosts:
        raise ValueError(f"hosts must be {{host: ranks}}, a list of hosts or a host file, got {hosts!r}")
    for host, count in hosts.items():
        if not isinstance(host, str) or not host or isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"hosts wants host names and rank counts >= 1, got {host!r}: {count!r}")
    if sum(hosts.values()) != n:
        raise ValueError(f"the ranks per host add up to {sum(hosts.values())} ({hosts}), not n={n}")
    return ["-hosts", ",".join(f"{host}:{count}" for host, count in hosts.items())]


def cluster_kwargs(n: int, launcher: str = "local", hosts=None, launcher_options: dict | None = None) -> dict:
    """What :class:`MPICluster` gives ``ipyparallel.Cluster`` (besides its folder and log level): the engine
    launcher, ``n``, and the launcher's configuration; a ValueError for options that do not fit.

    - ``local``: ``mpiexec -n N`` on this machine (the default, and all that is tested here).
    - ``mpi``: ``mpiexec -n N`` wherever mpiexec puts them: ``hosts`` ({host: ranks}, a list of hosts for
      equal shares, or a host file) becomes ``-hosts``/``-f``; without hosts, inside a Slurm allocation
      mpiexec uses its nodes.
    - ``ssh``: the same with ``-launcher ssh``; ``hosts`` is required.
    - ``slurm``: ipyparallel's ``SlurmEngineSetLauncher`` (``sbatch``, ``srun`` of N engines);
      ``launcher_options`` sets its ``queue`` (or ``partition``), ``account``, ``qos``, ``timelimit``
      (or ``time``) and ``options``: more sbatch options (``"--nodes=2 --ntasks-per-node=8"``), put on
      sbatch's command line, since ipyparallel's default batch script leaves them out.

    ``launcher_options`` may set any configurable option of the launcher class (``mpi_args`` are added
    after the host arguments); the controller listens on every interface unless ``launcher="local"``.
    """
    import ipyparallel as ipp
    from traitlets.config import Config

    if launcher not in LAUNCHERS:
        raise ValueError(f"unknown launcher {launcher!r}: use one of {', '.join(LAUNCHERS)}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"need at least 1 rank, got {n!r}")
    if hosts is not None and launcher in ("local", "slurm"):
        raise ValueError("launcher='local' runs every rank on this machine: hosts are for launcher='mpi' or 'ssh'"
                         if launcher == "local" else "Slurm chooses the hosts: ask for nodes in launcher_options, "
                         "e.g. {'options': '--nodes=2 --ntasks-per-node=8'}")
    if launcher == "ssh" and hosts is None:
        raise ValueError("launcher='ssh' needs hosts: {host: ranks}, a list of hosts or a host file")
    if launcher_options is not None and not isinstance(launcher_options, dict):
        raise ValueError(f"launcher_options must be a dict of the launcher's options, got {launcher_options!r}")
    kind = ipp.cluster.launcher.find_launcher_class(LAUNCHERS[launcher], "engine")
    options = {SLURM_WORDS.get(k, k) if launcher == "slurm" else k: v for k, v in (launcher_options or {}).items()}
    known = set(kind.class_traits(config=True))
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"{kind.__name__} has no option {', '.join(map(repr, unknown))}; it has "
                         + ", ".join(sorted(known | (set(SLURM_WORDS) if launcher == "slurm" else set()))))
    if launcher in ("mpi", "ssh"):
        where = (["-launcher", "ssh"] if launcher == "ssh" else []) + ([] if hosts is None else _host_args(n, hosts))
        options["mpi_args"] = where + list(options.get("mpi_args", []))
    # the engines log their registration and heartbeat (INFO) into the cluster's folder, for a start that fails to
    # quote; a --log-level of the user's comes after and wins
    told = [LOG_LEVEL] + list(options.get("engine_args", []))
    options["engine_args"] = ["--mpi"] + told if launcher == "slurm" else told  # slurm: as the MPI launcher's engines
    if launcher == "slurm":
        if options.get("options"):  # ipyparallel's own script leaves `options` out: give them to sbatch instead
            sbatch = list(options.get("submit_command", ["sbatch"]))
            options["submit_command"] = sbatch + shlex.split(options["options"])
    kwargs = {"engines": LAUNCHERS[launcher], "n": n,
              "controller_args": [f"--HeartMonitor.period={HEARTBEAT_MS}",
                                  f"--HeartMonitor.max_heartmonitor_misses={HEARTBEAT_MISSES}", LOG_LEVEL]}
    if launcher != "local":
        kwargs["controller_ip"] = "*"  # engines on other hosts must reach the controller
    if options:
        kwargs["config"] = Config({kind.__name__: options})
    return kwargs


NEVER = 1e9  # seconds: a progress bar put off this long never shows (see _no_transient_progress)


def _no_transient_progress() -> None:
    """``%%px`` without ipyparallel's progress bar. The bar is a widget that appears only when a cell runs longer
    than 2 s, so whether a notebook holds it depends on how busy the machine was; reopened from a save, such a
    bar has been seen to say "Error displaying widget: model not found". A cell's output streams as it runs.

    The bar is put off for ``NEVER`` seconds, not switched off with ``-1``: with ``-1`` ipyparallel skips its wait
    for the engines' output and returns once the results are in, so a rank's last lines could be lost (seen in CI:
    ``print`` on two ranks showed rank 0's line only)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None and "pxconfig" in shell.magics_manager.magics["line"]:
        shell.run_line_magic("pxconfig", f"--progress-after {NEVER:g}")


def _every_rank_streams_its_own_output() -> None:
    """Keep each rank's streamed ``%%px`` output apart, however late streaming starts.

    ipyparallel (8.x to 9.2 at least) streams an engine's output as a display whose id is the engine's request
    id plus the stream's name. Output that reached the client before streaming began is published first, from a
    message made up without that request id, so every engine's early output gets the one id ``"-stdout"``: the
    second engine's display then *replaces* the first's. On a busy machine both ranks can finish ``print`` before
    the notebook starts streaming, and the cell shows rank 1's line alone (seen in CI: ``[stdout:1] still 11``
    without rank 0's ``still 10``). Here the made-up message gets its engine's request id, so an early line and
    the later lines of one engine share one display, and two engines never share one."""
    try:
        from ipyparallel.client.asyncresult import AsyncResult
    except ImportError:
        return
    original = getattr(AsyncResult, "_iopub_streaming_output_callback", None)
    if original is None or getattr(original, "ringlab_keeps_ranks_apart", False):
        return

    def callback(self, eid, msg_future, msg):
        if not msg.get("parent_header", {}).get("msg_id"):
            msg = dict(msg, parent_header={"msg_id": msg_future.msg_id})
        return original(self, eid, msg_future, msg)

    callback.ringlab_keeps_ranks_apart = True
    AsyncResult._iopub_streaming_output_callback = callback


class MPICluster:
    """``n`` MPI ranks as ipyparallel engines; ``activate=True`` makes ``%%px`` target them.

    ``launcher``, ``hosts`` and ``launcher_options`` start them elsewhere (:func:`cluster_kwargs`; Slurm,
    ssh and other hosts are untested here); ``shared_dir`` is where the cluster's folder goes (default:
    the system's temporary folder for ``launcher="local"``, else the current folder, which every host
    must see); ``timeout`` is how long to wait for the engines (a Slurm queue may need longer).
    """

    def __init__(self, n: int = 4, activate: bool = True, timeout: float = 120, launcher: str = "local",
                 hosts=None, launcher_options: dict | None = None, shared_dir: str | None = None,
                 cell_timeout="default"):
        self.kwargs = cluster_kwargs(n, launcher, hosts, launcher_options)  # bad options fail here, not at start
        self.cell_timeout = globals()["cell_timeout"](cell_timeout)
        if launcher == "local":
            check_nranks(n)
        self.n, self.activate, self.timeout = n, activate, timeout
        self.launcher = launcher
        self.shared_dir = shared_dir if shared_dir is not None or launcher == "local" else os.getcwd()
        self._cluster = self.client = self.view = None
        self.profile_dir: str | None = None
        self._watchdog = None
        self.cells: list[tuple[str, list[int] | None]] = []  # %%px cells that finished on their ranks (None: all)

    def start(self) -> "MPICluster":
        """Start the engines (stopping any this object started before) and install the abort hook."""
        import ipyparallel as ipp

        self.stop()
        for other in [c for c in _RUNNING if c is not self]:  # one cluster at a time: the earlier one would linger
            print(f"ringlab: stopping the cluster of {other.n} ranks started earlier in this process", file=sys.stderr)
            other.stop()
        bin_dir = str(Path(sys.executable).parent)  # mpiexec of the mpich wheel sits beside python
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
        if self.launcher == "local":
            os.environ.update(local_env(nranks=self.n))  # the engines' MPI talks over loopback, yields when oversubscribed
        elif os.environ.get("UCX_NET_DEVICES") == "lo":  # a local cluster set it: it keeps MPI off the network
            del os.environ["UCX_NET_DEVICES"]
            print("ringlab: UCX_NET_DEVICES=lo removed: engines on other hosts reach each other over the network",
                  file=sys.stderr)
        self.profile_dir = tempfile.mkdtemp(prefix="ringlab-cluster-", dir=self.shared_dir)
        _RUNNING.append(self)
        try:
            ranks = self._start_ranks(ipp)
        except BaseException as error:  # an interrupt too: nothing started may outlive a start that failed
            said = self._engines_said()  # read before stop() removes it
            self._forget_engine_files()  # nor leave MPICH's files behind (an engine that never answered kept them)
            self.stop()
            if not isinstance(error, Exception):
                raise
            raise RuntimeError(f"the {self.n} ranks did not start ({type(error).__name__}: {error}); their "
                               "engines, the controller and the cluster's folder are gone again"
                               + (f". What they said:\n{said}" if said else "")) from error
        by_rank = [engine for _, engine in sorted(zip(ranks, self.client.ids))]
        self.view = self.client[by_rank]
        self.view.block = True  # %%px waits for every rank, so an error fails its own cell
        if self.activate:
            self.view.activate()
            _no_transient_progress()
            _every_rank_streams_its_own_output()
        _explain_rank_errors_in(self)
        return self

    def _start_ranks(self, ipp) -> list[int]:
        """The controller, its watchdog, then the engines, each engine's abort hook: each rank's number by engine."""
        os.makedirs(os.path.join(self.profile_dir, ERRORS))
        self._cluster = ipp.Cluster(**self.kwargs, log_level=40, profile_dir=self.profile_dir)
        self._cluster.start_controller_sync()
        self._watchdog = subprocess.Popen(  # from here on, the end of this process stops what it started
            [sys.executable, "-m", "ringlab.lab.cluster", "watch", str(os.getpid()), self._cluster.cluster_file],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self._cluster.start_engines_sync(self.n)
        self.client = self._cluster.connect_client_sync()
        self.client.wait_for_engines(self.n, timeout=self.timeout, interactive=False)  # (see _no_transient_progress)
        first = self.client[:].apply_async(_abort_on_exception, os.path.join(self.profile_dir, ERRORS), GRACE_S,
                                           self.cell_timeout)
        try:  # a registered engine that never answers must not hang the start (seen once in CI: 240 s, no answer)
            return first.get(timeout=self.timeout)
        except ipp.error.TimeoutError:
            answered = sum(1 for msg_id in first.msg_ids if msg_id not in self.client.outstanding)
            stacks = self._engine_stacks() if self.launcher == "local" else ""
            said = (f"the {self.n} engines registered, but {self.n - answered} of them did not answer their first "
                    f"call (installing the abort hook) within {self.timeout:g} s")
            raise TimeoutError(said + (f". What each engine was doing then (py-spy dump):\n{stacks}\n" if stacks
                                       else "")) from None

    def _engine_stacks(self, lines: int = 40) -> str:
        """Each local engine's Python stacks now (``py-spy dump``, where py-spy is installed: the test extra installs
        it), for a start whose engines went silent: where a silent engine waits says why it did not answer."""
        spy = shutil.which("py-spy", path=os.pathsep.join([str(Path(sys.executable).parent),
                                                           os.environ.get("PATH", "")]))
        pids = self._engine_pids()
        if spy is None or not pids:
            return ""
        said = []
        for pid in pids:
            try:
                done = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=30)
                text = (done.stdout or done.stderr).splitlines()
            except (OSError, subprocess.TimeoutExpired) as error:
                text = [f"py-spy could not read process {pid}: {error}"]
            said += text[:lines] + ([f"... ({len(text) - lines} lines more)"] if len(text) > lines else [])
        return "\n".join(said)

    def _engine_pids(self) -> list[int]:
        """The Python processes below the engines' launchers on this host (the engines themselves)."""
        if self._cluster is None:
            return []
        roots = [getattr(launcher, "pid", None) for launcher in self._cluster.engines.values()]
        return sorted(pid for root in roots if root for pid in _descendants(root) if _is_python(pid))

    def _forget_engine_files(self) -> list[str]:
        """For a start that failed, before its engines are stopped: remove the shared-memory segment and the
        topology file MPICH made for the local engines (:func:`ringlab.mpi.devices.forget_files_of`), which each
        engine removes itself only in its first call; what was removed. An engine killed before it answered left
        both behind (one of each a run of the tests, whose engines are made silent on purpose)."""
        from ringlab.mpi.devices import forget_files_of

        return forget_files_of(self._engine_pids())

    def _engines_said(self, lines: int = 10) -> str:
        """What the engines' launcher (mpiexec, with the engines' own logs) and the controller wrote last, and
        whether the launcher still runs: why the engines did not start, or did not register in time."""
        if self._cluster is None:
            return ""
        said = []
        parts = [("the engines", e) for e in self._cluster.engines.values()] + [("the controller",
                                                                                 self._cluster.controller)]
        for who, launcher in parts:
            if launcher is None:
                continue
            state = getattr(launcher, "state", None)
            stop = getattr(launcher, "stop_data", None) or {}
            how = (f"exited with code {stop.get('exit_code')}" if state == "after" else
                   f"still running (pid {getattr(launcher, 'pid', '?')})" if state == "running" else "never started")
            try:
                if state == "after":  # ipyparallel read an ended launcher's output and removed its file: its copy
                    text = (launcher.get_output() or "").splitlines()[-lines:]
                else:
                    text = Path(launcher.output_file).read_text(errors="replace").splitlines()[-lines:]
            except (AttributeError, TypeError, OSError):  # a launcher without an output file, or none written
                text = []
            said.append(f"[{who}: {how}; " + ("their last lines]" if text else "nothing written]"))
            said += text
        return "\n".join(said)

    def plan(self) -> str:
        """What :meth:`start` would run to start the engines, without starting anything: the mpiexec command
        line, or for Slurm the batch script it would submit."""
        import ipyparallel as ipp

        folder = tempfile.mkdtemp(prefix="ringlab-plan-")
        try:
            cluster = ipp.Cluster(**self.kwargs, log_level=40, profile_dir=folder, shutdown_atexit=False)
            engines = cluster.engine_launcher_class(work_dir=folder, parent=cluster, log=cluster.log,
                                                    profile_dir=folder, cluster_id=cluster.cluster_id)
            if self.launcher == "slurm":
                engines.write_batch_script(self.n)
                return f"{shlex.join(engines.args)}\n{Path(engines.batch_file).read_text()}"
            engines.n = self.n
            return shlex.join(engines.find_args())
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def rank_errors(self) -> list[str]:
        """What each rank that raised wrote before the job was aborted (empty when none did)."""
        if self.profile_dir is None:
            return []
        folder = Path(self.profile_dir, ERRORS)
        return [p.read_text() for p in sorted(folder.glob("rank-*.txt"))] if folder.exists() else []

    def pull_rank0(self, *names: str):
        """Rank 0's value of one name, or a tuple of rank 0's values of several (where results are gathered)."""
        if not names:
            raise ValueError("name at least one variable to pull")
        if self.view is None:
            raise RuntimeError("the ranks are not running: call start() first")
        status, values = self.client[self.view.targets[0]].apply_sync(_fetch, list(names))
        if status == "missing":
            raise NameError(f"rank 0 has no variable named {', '.join(map(repr, values))}")
        return values[0] if len(names) == 1 else tuple(values)

    def alive(self) -> bool:
        """Whether all engines are still there (an aborted job leaves none)."""
        return self.client is not None and len(self.client.ids) == self.n

    def gone(self) -> list[int]:
        """The ranks whose engines are no longer there."""
        if self.view is None:
            return []
        here = set(self.client.ids) if self.client is not None else set()
        return [rank for rank, engine in enumerate(self.view.targets) if engine not in here]

    def restart(self, replay: bool = False) -> "MPICluster":
        """Fresh engines. With ``replay=True``, run again, in order, every ``%%px`` cell that had succeeded
        on all ranks (imports, the communicator, data: the lab's setup), saying which."""
        self.start()
        if replay:
            for body, ranks in list(self.cells):
                where = "" if ranks is None else f" (on rank{'s' * (len(ranks) > 1)} {', '.join(map(str, ranks))})"
                print(f"ringlab: running again{where}: "
                      f"{body.strip().splitlines()[0] if body.strip() else '(empty)'} ...")
                view = self.view if ranks is None else self.client[[self.view.targets[r] for r in ranks]]
                view.execute(body, block=True)
        return self

    def ranks_of(self, targets: str | None) -> list[int] | None:
        """The ranks a ``%%px --targets`` value names (engine ids, as ipyparallel reads them; None: all)."""
        if targets is None or "all" in targets:
            return None
        engines = px_targets(targets, list(self.client.ids))
        return sorted(self.view.targets.index(e) for e in engines)

    def finished(self, body: str, ranks: list[int] | None) -> bool:
        """Whether every rank of ``ranks`` (None: all) marked ``body`` as finished without an error."""
        folder = Path(self.profile_dir or "", ERRORS)
        digest = _cell_digest(body)
        return all((folder / f"done-{digest}-rank-{r}").exists() for r in (range(self.n) if ranks is None else ranks))

    def forget_marks(self, body: str) -> None:
        """Before a cell runs: earlier runs' marks of the same text must not count for this one."""
        for mark in Path(self.profile_dir or "", ERRORS).glob(f"done-{_cell_digest(body)}-rank-*"):
            mark.unlink(missing_ok=True)

    def stop(self) -> None:
        """Stop the engines and the controller and remove the cluster's folder; safe to call twice,
        or after an abort."""
        cluster, self._cluster = self._cluster, None
        if self.client is not None:
            try:
                self.client.close()
            except Exception:
                pass
        self.client = self.view = None
        if cluster is not None:
            # the engines, then the controller: ipyparallel's stop_cluster stops both at once, and then took 3 s
            # more (this way stop() took 0.4 s on 2 ranks and 0.7 s on 4, measured on a 2-core machine)
            for stop in (cluster.stop_engines_sync, cluster.stop_controller_sync):
                try:
                    stop()
                except Exception:
                    pass
        if self._watchdog is not None:
            self._watchdog.terminate()  # ours, by PID: it has nothing left to watch
            self._watchdog.wait(timeout=10)
            self._watchdog = None
        if self.profile_dir is not None:
            shutil.rmtree(self.profile_dir, ignore_errors=True)
            self.profile_dir = None
        if self in _RUNNING:
            _RUNNING.remove(self)

    def __enter__(self) -> "MPICluster":
        return self.start()

    def __exit__(self, etype, value, tb) -> None:
        if etype is not None and self.profile_dir is not None:  # said before stop() removes what the ranks wrote
            said = self.rank_errors()
            gone = [] if said or self.client is None else self.gone()
            if said:
                print("ringlab: the MPI job was aborted; what the ranks raised:\n" + "\n".join(said), file=sys.stderr)
            elif gone:
                print(f"ringlab: rank{'s' * (len(gone) != 1)} {', '.join(map(str, gone))} stopped without an error "
                      "of their own (a crash, out of memory, or lost by ipyparallel), and the MPI job went with them",
                      file=sys.stderr)
        self.stop()


def _explain_rank_errors_in(cluster: MPICluster) -> None:
    """In IPython (a notebook), a failed ``%%px`` cell also shows what each rank that raised wrote,
    in case its own traceback was lost when the job was aborted."""
    try:
        from IPython import get_ipython
        from ipyparallel.error import AlreadyDisplayedError, CompositeError, EngineError
    except ImportError:
        return
    shell = get_ipython()
    if shell is None:
        return

    def explain(shell, etype, value, tb, tb_offset=None):
        shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
        said = [text for running in _RUNNING for text in running.rank_errors()]
        if said:
            print("ringlab: the MPI job was aborted; what the ranks raised:\n" + "\n".join(said)
                  + "\nStart fresh ranks with ranks.restart(replay=True): it runs your earlier %%px cells again.",
                  file=sys.stderr)
        elif cluster.alive() and not isinstance(value, EngineError):
            print("ringlab: every rank raised and ended the cell, so the ranks are still running, with everything "
                  "they held: fix the cell and run it again.", file=sys.stderr)
        else:
            gone = cluster.gone()
            print(f"ringlab: rank{'s' * (len(gone) != 1)} {', '.join(map(str, gone)) or '?'} stopped without an "
                  "error of their own (sys.exit, os._exit, a crash or out of memory), and the MPI job went with "
                  "them. Start fresh ranks with ranks.restart(replay=True): it runs your earlier %%px cells again.",
                  file=sys.stderr)

    shell.set_custom_exc((CompositeError, EngineError, AlreadyDisplayedError), explain)
    if getattr(cluster, "_recording", False):
        return
    cluster._recording = True

    def split(source: str):
        """(the %%px line's options, the body) of a %%px cell, or None for any other cell."""
        source = source.lstrip()
        if not source.startswith("%%px"):
            return None
        line, _, body = source.partition("\n")
        return _px_options(line), body

    def forget(info) -> None:
        cell = split(getattr(info, "raw_cell", "") or "")
        if cell is not None and cluster.profile_dir is not None:
            cluster.forget_marks(cell[1])

    def remember(result) -> None:
        cell = split(getattr(result.info, "raw_cell", "") or "")
        if cell is None or not result.success or not cluster.alive():
            return
        (targets, block), body = cell
        try:
            ranks = cluster.ranks_of(targets)
        except Exception:  # targets ipyparallel took but we cannot map to ranks: not replayed
            return
        if block is not False and cluster.finished(body, ranks):  # interrupted, or --noblock: not known to be done
            cluster.cells.append((body, ranks))

    shell.events.register("pre_run_cell", forget)
    shell.events.register("post_run_cell", remember)


def _px_options(line: str) -> tuple[str | None, bool | None]:
    """(``--targets``, block: True for ``--block``, False for ``--noblock``, None if not said) of a ``%%px`` line."""
    words, targets, block = shlex.split(line)[1:], None, None
    for i, word in enumerate(words):
        if word in ("--targets", "-t") and i + 1 < len(words):
            targets = words[i + 1]
        elif word.startswith("--targets="):
            targets = word.split("=", 1)[1]
        elif word == "--block":
            block = True
        elif word == "--noblock":
            block = False
    return targets, block


@atexit.register
def _stop_all() -> None:
    for cluster in list(_RUNNING):
        cluster.stop()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie has ended too
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def _descendants(root: int) -> list[int]:
    """The processes below ``root`` (its children, theirs, ...), from /proc; none where there is no /proc."""
    parents = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):  # ended meanwhile
            pass
    found, frontier = [], [root]
    while frontier:
        below = [pid for pid, parent in parents.items() if parent in frontier]
        found += below
        frontier = below
    return found


def _is_python(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/comm").read_text().startswith("python")
    except OSError:
        return False


def watch(owner: int, cluster_file: str, every: float = 1.0) -> int:
    """The watchdog: while the cluster's file exists, check its owner every ``every`` seconds; when the
    owner has gone, stop that cluster (and only it) and remove its folder."""
    while os.path.exists(cluster_file):
        if not _alive(owner):
            import ipyparallel as ipp

            try:
                ipp.Cluster.from_file(cluster_file).stop_cluster_sync()
            finally:
                shutil.rmtree(Path(cluster_file).parents[1], ignore_errors=True)  # the cluster's profile folder
            return 0
        time.sleep(every)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "watch":
        sys.exit(watch(int(sys.argv[2]), sys.argv[3]))
    sys.exit("usage: python -m ringlab.lab.cluster watch OWNER_PID CLUSTER_FILE")
