"""Staleness read back from an asynchronous server's pushes: per worker, whose updates were missed, and
sentences whose verdict follows the numbers (ringlab.lessons.lab04_parameter_servers.staleness)."""
import pytest

from ringlab.lessons.lab04_parameter_servers.staleness import (alone_from, by_worker, describe_staleness,
                                                               describe_waiting, missed_updates)


def applied(order):
    """(worker, staleness) pushes of workers pushing in ``order``, each pulling right after its own push."""
    pulled, pushes = {}, []
    for i, worker in enumerate(order):
        pushes.append((worker, i - pulled.get(worker, 0)))
        pulled[worker] = i + 1
    return pushes


# workers 0-2 push in turns, four times each; straggler 3 pushes at places 6 and 13, then six times alone:
# its staleness 6, 6, 0, 0, 0, 0, 0, 0; theirs 0 2 3 2 (worker 0), 1 2 3 2 (1), 2 2 3 2 (2)
STRAGGLER_ALONE = applied([0, 1, 2, 0, 1, 2, 3, 0, 1, 2, 0, 1, 2, 3, 3, 3, 3, 3, 3, 3])
# the same straggler, never alone: the fast workers keep pushing until after its last push
STRAGGLER_BUSY = applied([0, 1, 2, 0, 1, 2, 3, 0, 1, 2, 0, 1, 2, 3, 0, 1, 2])


def test_per_worker_counts_and_means():
    stats = by_worker(STRAGGLER_ALONE)
    assert stats[3] == {"pushes": 8, "mean": 1.5, "max": 6, "fresh": 6}
    assert stats[0] == {"pushes": 4, "mean": 1.75, "max": 3, "fresh": 1}  # only its first push saw no update


def test_the_order_says_whose_updates_were_missed():
    missed = missed_updates(STRAGGLER_ALONE)
    assert missed[3] == {0: 4, 1: 4, 2: 4}  # each early push missed the six updates before it, two per worker
    assert missed[0] == {1: 3, 2: 3, 3: 1}  # its push at place 7 missed places 4, 5, 6: workers 1, 2 and 3
    assert alone_from(STRAGGLER_ALONE, 3) == 13 and alone_from(STRAGGLER_BUSY, 3) == 17
    with pytest.raises(ValueError, match="not in the order the server applied them"):
        missed_updates([(0, 0), (1, 5)])


def test_a_straggler_that_ends_alone_is_called_the_least_stale():
    text = describe_staleness(STRAGGLER_ALONE, straggler=3)
    assert "the straggler (worker 3) 1.5 over 8 pushes, the other workers 2.0 over 12 pushes" in text
    assert "its 1 push had mean staleness 6.0 (up to 6), more than the others' 2.0" in text
    assert ("7 of its 8 pushes came after every other worker had finished; from then on nobody else moved the "
            "weights between its pull and its push, so 6 of them had staleness 0, all but the first, which had 6"
            in text)
    assert "least stale of all workers', because 7 of its 8 pushes came when it ran alone" in text
    assert "stalest" not in text and "staler than" not in text
    # its update at place 6 fell inside the windows of the pushes at 7, 8 and 9
    assert "of the 24 updates their pushes missed, 3 (12%) were the straggler's, less than an even share (33%)" in text


def test_a_straggler_that_never_runs_alone_is_called_staler():
    text = describe_staleness(STRAGGLER_BUSY, straggler=3)
    assert "staler than the others' on average: it never ran alone" in text
    assert "least stale" not in text and "came after every other worker had finished" not in text


def test_a_worker_that_never_pushed_is_an_error():
    with pytest.raises(ValueError, match="worker 7 made no push"):
        describe_staleness(STRAGGLER_ALONE, straggler=7)


def _worker(wait, compute):
    return {"wait_seconds": wait, "compute_seconds": compute}


def test_waiting_is_worded_from_the_shares():
    runs = {"sync": [_worker(3.0, 1.0), _worker(2.9, 1.1), _worker(3.2, 0.8), _worker(0.1, 4.0)],
            "async": [_worker(0.1, 1.0), _worker(0.2, 1.0), _worker(0.1, 0.9), _worker(0.1, 4.0)]}
    text = describe_waiting(runs, straggler=3)
    assert "Sync: the fast workers spent most of their time waiting (76% on average, 72% to 80%)" in text
    assert "the straggler (worker 3) 2%" in text
    assert "Async: the fast workers spent a small part of their time waiting" in text
    assert "so it waits less." in text
    # the other way round: the words follow the numbers, not the expectation
    runs["async"] = [_worker(3.5, 1.0)] * 3 + [_worker(0.1, 4.0)]
    text = describe_waiting(runs, straggler=3)
    assert "Async: the fast workers spent most of their time waiting (78% each)" in text
    assert "yet here it did not wait less" in text


def test_waiting_names_a_worker_that_is_not_there():
    with pytest.raises(ValueError, match="worker 5 is not among the 4 workers"):
        describe_waiting({"sync": [_worker(1, 1)] * 4}, straggler=5)
