"""Lab 04's quiz: each expected answer computed by ringlab from the stated inputs."""
from __future__ import annotations

from ...algorithms import build
from ...lab.quiz import Question, Quiz
from ...simulate import traffic

GiB, MiB, KiB = 1 << 30, 1 << 20, 1 << 10


def _server_receives_gb(n, servers, mb):
    return traffic(build("allreduce.ps", n, servers=servers), mb * 10**6)["received"][0] / 1e9


def _server_over_ring(n, mb):
    return _server_receives_gb(n, 1, mb) / (max(traffic(build("allreduce.ring", n), mb * 10**6)["received"]) / 1e9)


def _stalest_worker(pushes):
    from .staleness import by_worker

    return max(by_worker(pushes).items(), key=lambda item: item[1]["mean"])[0]


def _staleness_means(pushes):
    from .staleness import by_worker

    return {"means": ", ".join(f"worker {w} {v['mean']:.1f}" for w, v in by_worker(pushes).items())}


QUIZ = Quiz("04", [
    Question(
        "`allreduce.ps` with one server (rank 0, which also works) on {n} ranks, and {mb} MB of gradients per "
        "rank: how many GB does the server receive each step?",
        _server_receives_gb, given=dict(n=16, servers=1, mb=100), unit="GB",
        worked="Each of the other {n} - 1 ranks pushes its whole buffer: (n-1) x K = {answer:g} GB a step, counted "
               "from "
               "ringlab's schedule, and as much goes back out. It grows with every worker added.",
        hint="every rank but the server pushes all of its K bytes to the server."),
    Question(
        "The same {n} ranks and {mb} MB with the parameters split into M = {servers} shards (ranks 0-{last} serve one "
        "each): how many GB does server rank 0 receive each step?",
        _server_receives_gb, given=dict(n=16, servers=4, mb=100), unit="GB",
        derived=lambda n, servers, mb: {"last": servers - 1, "single": _server_receives_gb(n, 1, mb)},
        worked="As a server it receives its shard K/M from the other n-1 ranks, (n-1)K/M; as a worker it also "
               "receives the M-1 shards it does not serve, (M-1)K/M: ({n}-1+{servers}-1) x {mb}/{servers} MB = "
               "{answer:g} GB, against {single:g} GB with a single server (exercise 1's count).",
        hint="(n-1)K/M as a server plus (M-1)K/M as a worker."),
    Question(
        "On {n} ranks, how many times more bytes does a single parameter server receive each step than a rank of "
        "a ring allreduce of the same buffer?",
        _server_over_ring, given=dict(n=16, mb=100), unit="times",
        worked="(n-1)K against 2(n-1)/n x K: n/2 = {answer:g} times, from both schedules' traffic. The server's link "
               "is the bottleneck, and it grows with the number of workers; the ring's does not.",
        hint="divide (n-1)K by 2(n-1)K/n."),
    Question(
        "Read the staleness plot of your asynchronous run above: which worker's pushes had the highest mean "
        "staleness?",
        _stalest_worker, measured=("pushes",), rel_tol=0, derived=_staleness_means,
        worked="Worker {answer}, from the pushes your server recorded (mean staleness: {means}). Whether that is the "
               "straggler depends on the run: its pushes are stale while the fast workers run and fresh once it "
               "runs alone (the sentences under the plot say which happened here).",
        hint="in the first plot, compare the workers' mean staleness (or "
             "`ringlab.lessons.lab04_parameter_servers.staleness.by_worker(pushes)`)."),
])
