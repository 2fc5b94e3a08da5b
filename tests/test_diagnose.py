"""Lab 07's diagnosis tools (ringlab.lessons.lab07_hangs_and_crawls.diagnose): real mistakes on MPI ranks against what the schedule
predicts, stragglers found from traces, the published P2P sweeps and topology read back in sentences whose
verdict follows the numbers, and the exercises' checks accepting the right answer and rejecting a wrong one."""
import numpy as np
import pytest

from ringlab.lessons.lab07_hangs_and_crawls import checklist, diagnose
from ringlab.lab.exercises import NotDoneYet

D02 = "D02_chlc_rtx4090x8_topo"


# --- a rank that never comes ---------------------------------------------------------------------------

def test_a_missing_rank_is_named_by_the_argument_check_on_real_ranks():
    said = diagnose.run_on_ranks("skip")
    assert said == {r: f"rank {r}: rl.allreduce: rank 2 did not call it within 1 s" for r in (0, 1, 3)}
    assert diagnose.describe_timeouts(said, 4).startswith("Ranks 0, 1 and 3 each waited in the argument check "
                                                         "for rank 2, which never called")


def test_without_the_check_the_real_messages_are_the_predicted_ones():
    said = diagnose.run_on_ranks("skip-unchecked")
    assert said == diagnose.predicted_timeouts(4, 2)
    assert said[3].endswith("step 0 (reduce-scatter) did not finish within 1 s: still waiting to receive chunk 2 "
                            "from rank 2")
    assert "Rank 2 is named at the earliest step and said nothing itself" in diagnose.describe_timeouts(said, 4)


def test_different_sizes_raise_one_error_everywhere_and_are_described_so():
    said = diagnose.run_on_ranks("sizes")
    assert set(said.values()) == {"rl.allreduce: the ranks disagree (shape: rank 0 has [10], rank 1 has [11])"}
    assert len(said) == 4
    text = diagnose.describe_timeouts(said, 4)
    assert text.startswith("All 4 ranks raised the same error before any data moved") and "shape" in text


def test_the_description_follows_the_messages_both_ways():
    predicted = diagnose.predicted_timeouts(5, 1)
    assert "Rank 1 is named at the earliest step and said nothing itself" in diagnose.describe_timeouts(predicted, 5)
    # the same messages with the culprit's own line present: it timed out too, so it is not called absent
    with_it = {**predicted, 1: "rank 1: step 0 (reduce-scatter) did not finish within 1 s: still waiting to "
                               "receive chunk 0 from rank 0"}
    assert "which itself timed out: look further back" in diagnose.describe_timeouts(with_it, 5)


def test_bad_input_says_what_is_wrong():
    with pytest.raises(ValueError, match="no mistake 'nope'"):
        diagnose.run_on_ranks("nope")
    with pytest.raises(ValueError, match="3 to 8 ranks"):
        diagnose.run_on_ranks("skip", nranks=2)
    with pytest.raises(ValueError, match="absent rank must be one of 0..3"):
        diagnose.predicted_timeouts(4, 4)
    with pytest.raises(ValueError, match="not a StepTimeout of ringlab"):
        diagnose.read_timeouts({0: "something else"})
    with pytest.raises(ValueError, match="no messages"):
        diagnose.describe_timeouts({}, 4)


def test_every_absent_rank_is_predicted_and_found():
    for n in (3, 4, 5, 8):
        for absent in range(n):
            messages = diagnose.predicted_timeouts(n, absent)
            assert absent not in messages and len(messages) == n - 1
            assert diagnose._culprit(messages) == absent


# --- a straggler -----------------------------------------------------------------------------------------

def test_a_slowed_rank_is_named_from_a_real_trace_and_a_plain_one_is_not():
    traces = diagnose.straggler_traces(nranks=4, slow_rank=1, pause=0.02)
    gaps = diagnose.step_gaps(traces["slowed"])
    assert gaps.shape == (4, 6) and gaps.sum(axis=1).argmax() == 1
    assert gaps[1].sum() >= 6 * 0.02 * 0.9
    assert diagnose.describe_straggler(traces["slowed"]).startswith("Rank 1 is the straggler")
    assert diagnose.describe_straggler(traces["as it is"]).startswith("No rank stands out")
    assert traces["slowed"].wall_s >= 6 * 0.02  # on this machine the pause is slept


def test_an_emulated_straggler_pauses_on_its_virtual_clock_and_nobody_sleeps():
    traces = diagnose.straggler_traces(nranks=4, slow_rank=2, pause=0.5, machine="uniform:1:10")
    took = float(traces["slowed"].records["end"].max())
    assert took >= 6 * 0.5 and traces["slowed"].wall_s < 1.0  # six pauses of 0.5 s, none slept
    assert diagnose.describe_straggler(traces["slowed"]).startswith("Rank 2 is the straggler")
    assert "send" not in diagnose.describe_straggler(traces["slowed"])  # a virtual send takes its link's time, no wait
    assert "0.00 ms" not in diagnose.describe_straggler(traces["slowed"])  # no other rank's gap printed as 0.00


def test_a_bad_emulated_machine_is_refused_before_any_job_starts():
    with pytest.raises(ValueError, match="a uniform machine is uniform:GBPS:US"):
        diagnose.straggler_traces(machine="uniform:fast")


def test_the_straggler_sentence_follows_the_model_both_ways():
    text = diagnose.describe_straggler(diagnose.model_trace(4, slow_rank=2, pause=0.02, transfer=1e-4))
    assert text.startswith("Rank 2 is the straggler: it spent 120.0 ms between its steps")
    assert "rank 3, which receives from rank 2, waited longest, and ranks 0 and 1 after it in turn: a ring" in text
    assert "Time in receives: rank 3 120.6 ms, rank 0 100.6 ms, rank 1 80.6 ms; rank 2 itself 0.6 ms" in text
    assert diagnose.describe_straggler(diagnose.model_trace(4)).startswith("No rank stands out")


def test_the_straggler_lesson_words_what_the_traces_show_beside_both_models():
    """On lockstep traces whose steps take exactly the links' predicted time, every conclusion holds; a call
    slower than the links allow, or a straggler slower than its pauses, is said to be so."""
    import ringlab as rl
    from ringlab.algorithms import build

    links, _ = rl.topology.from_spec(diagnose.STRAGGLER_MACHINE, 4)
    step = rl.predict(build("allreduce.ring", 4), 1 << 18, links, itemsize=4).seconds / 6
    assert step == pytest.approx(1e-3 + (1 << 16) / 5e6)  # a message: 1 ms and 64 KiB at 5 MB/s

    def traces(transfer: float, pause: float) -> dict:
        return {"as it is": diagnose.model_trace(4, transfer=transfer, nbytes=1 << 18),
                "slowed": diagnose.model_trace(4, 2, pause, transfer, nbytes=1 << 18)}

    found = diagnose.straggler_lesson(traces(1e-4, 0.02), traces(step, 0.02))
    assert found.conclusions == ("the straggler is named on the emulated machine",
                                 "the call is link-bound on the emulated machine",
                                 "the straggler sets the pace on the emulated machine, as the lockstep model predicts")
    assert found.observations == ("the straggler is named on this machine",)
    assert f"the call took {6 * step * 1e3:.1f} ms, against {6 * step * 1e3:.1f} ms predicted for its 6 steps" in str(found)
    assert f"Measured: {(6 * step + 0.12) * 1e3:.1f} ms (1.00x the model): the straggler set the pace" in str(found)
    slow = diagnose.straggler_lesson(traces(1e-4, 0.0), traces(2 * step, 0.04))
    assert slow.conclusions == ("the straggler is named on the emulated machine",
                                "the call is not link-bound on the emulated machine",
                                "the straggler's pace differs from the lockstep model on the emulated machine")
    assert slow.observations == ("the straggler is not named on this machine",)
    assert "(2.00x; the rest is this CPU's additions, counted as the CPU time they took)" in str(slow)
    assert "wall time" not in str(slow)  # model traces carry no wall time
    walled = traces(step, 0.02)
    for name, wall in (("as it is", 0.004), ("slowed", 0.005)):
        walled[name].wall_s = wall
    found = diagnose.straggler_lesson(traces(1e-4, 0.02), walled)
    assert "This machine took 4.0 ms of wall time to run the call as it is and 5.0 ms with the straggler" in str(found)


def test_a_send_blocked_by_the_straggler_is_explained_and_no_other():
    from ringlab.mpi.run import Trace

    model = diagnose.model_trace(4, slow_rank=2, pause=0.02, transfer=1e-4)
    rows = [tuple(r) for r in model.records]
    blocked = [r[:7] + (r[6] + 0.02,) + r[8:] if r[0] == 1 and r[2] == 2 and r[5] == "send" else r for r in rows]
    text = diagnose.describe_straggler(Trace(blocked, model.schedule, clock="test", itemsize=4))
    assert "The longest send to rank 2, rank 1's 16 KiB at step 3, took 20.0 ms, where the quickest send of the call " \
           "took 0.10 ms: it could not complete before rank 2 posted the receive" in text
    assert "the sender waits for the straggler too" in text and "as well" not in text
    assert "The longest send" not in diagnose.describe_straggler(model)  # sends of 0.1 ms: nothing to explain
    # a longer send to another rank (rank 0's to rank 1, held up behind rank 1) does not hide the one to the straggler,
    # and is said to have waited behind it
    chained = [r[:7] + (r[6] + 0.03,) + r[8:] if r[0] == 0 and r[2] == 1 and r[5] == "send" else r for r in blocked]
    text = diagnose.describe_straggler(Trace(chained, model.schedule, clock="test", itemsize=4))
    assert "The longest send to rank 2, rank 1's 16 KiB at step 3, took 20.0 ms" in text
    assert "Rank 0's sends to rank 1 waited up to 30.0 ms as well: rank 1, held in a send of its own" in text
    assert "the wait passes back along the ring from rank 2 to rank 1 to rank 0." in text
    # one rank further back: rank 3's sends to rank 0 wait behind rank 0, which waits behind rank 1
    longer = [r[:7] + (r[6] + 0.04,) + r[8:] if r[0] == 3 and r[2] == 0 and r[5] == "send" else r for r in chained]
    text = diagnose.describe_straggler(Trace(longer, model.schedule, clock="test", itemsize=4))
    assert "the wait passes back along the ring from rank 2 to rank 1 to rank 0 to rank 3." in text
    # on an emulated machine every send takes its link's time, 14 ms here: long, but none waited for its receiver
    linked = [r[:7] + (r[6] + 0.014,) + r[8:] if r[5] == "send" else r for r in rows]
    assert "send" not in diagnose.describe_straggler(Trace(linked, model.schedule, clock="test", itemsize=4))


def test_a_traced_send_ends_when_it_completes_not_when_the_rank_looks():
    """The rank after the straggler waits in its receive from it; its own send, to a rank that is ready, completes
    at once. Traced, that send must end then, not when the rank finished waiting for its receive."""
    traces = diagnose.straggler_traces(nranks=4, slow_rank=2, pause=0.02)
    rows = traces["slowed"].records
    after = rows[rows["rank"] == 3]
    sent, received = after[after["side"] == "send"], after[after["side"] == "recv"]
    assert (received["end"] - received["start"]).max() >= 0.015  # it waited for the straggler
    assert np.median(sent["end"] - sent["start"]) < 0.005, sent  # its sends did not
    before = rows[(rows["rank"] == 1) & (rows["side"] == "send")]
    assert np.median(before["end"] - before["start"]) >= 0.015  # the rank before it waits in its sends to it
    # and not in its receives: the chain of ranks waiting in turn stops before it
    assert "waited longest, and rank 0 after it in turn: a ring" in diagnose.describe_straggler(traces["slowed"])


def test_slowed_pauses_inside_only_and_refuses_silly_pauses():
    from ringlab.mpi import emulate

    with diagnose.slowed(0.001):
        assert emulate.stall() == 0.001
    assert emulate.stall() == 0.0
    with pytest.raises(ValueError, match="a pause of 0 to 10 s"):
        with diagnose.slowed(-1):
            pass


def test_a_trace_without_rows_is_refused():
    from ringlab.mpi.run import Trace

    empty = Trace([], diagnose.model_trace(3).schedule, clock="none")
    with pytest.raises(ValueError, match="the trace has no rows"):
        diagnose.step_gaps(empty)


# --- settings, published sweeps, links --------------------------------------------------------------------

def test_the_settings_table_has_every_setting_with_a_source():
    rows = checklist.nccl_settings()
    names = " ".join(r["setting"] for r in rows)
    for setting in ("NCCL_DEBUG", "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE", "NCCL_SOCKET_IFNAME",
                    "NCCL_ALGO", "NCCL_PROTO", "--shm-size", "memlock"):
        assert setting in names
    assert all(r["source"].startswith("https://docs.nvidia.com/") for r in rows)
    shown = checklist.html_table(rows[:1], {"setting": "setting", "source": "source"}).data
    assert "<td style='text-align:left'>NCCL_DEBUG=INFO</td>" in shown and "<a href='https://" in shown
    with pytest.raises(ValueError, match="the rows have no 'nope'"):
        checklist.html_table(rows, {"x": "nope"})
    with pytest.raises(ValueError, match="no rows"):
        checklist.html_table([], {"x": "setting"})


def test_p2p_rows_are_the_published_numbers_and_the_sentence_follows_them():
    rows = checklist.p2p_rows()
    assert {r["algorithm"] for r in rows} == {"published: P2P off (A10)", "published: P2P on (A11)"}
    top = {r["algorithm"]: r["busbw_Bps"] for r in rows if r["bytes"] == 128 << 20}
    assert top == {"published: P2P off (A10)": 14.45e9, "published: P2P on (A11)": 20.64e9}
    assert checklist.describe_p2p(rows) == ("At 128 MiB, the largest size of both published sweeps: 20.64 GB/s with "
                                           "P2P on, 14.45 GB/s with P2P off, peer access on reached 1.43x the busbw of off.")
    swapped = [dict(r, algorithm=r["algorithm"].replace("off", "X").replace("on", "off").replace("X", "on"))
               for r in rows]
    assert "here P2P did not help" in checklist.describe_p2p(swapped)
    even = [dict(r, busbw_Bps=1e9) for r in rows]
    assert "about the same busbw either way" in checklist.describe_p2p(even)
    with pytest.raises(ValueError, match="need one 'P2P off' and one 'P2P on' sweep"):
        checklist.describe_p2p([r for r in rows if "off" in r["algorithm"]])


def test_visible_devices_renumber_and_rank_links_name_the_physical_gpus():
    from ringlab.measure import published

    topo = published.load(D02)
    rows = checklist.rank_links(topo.data["codes"], "2,3,6,7", 4, numa=topo.data["numa"])
    assert [(r["rank"], r["device"], r["gpu"], r["next_gpu"]) for r in rows] == [
        (0, 0, 2, 3), (1, 1, 3, 6), (2, 2, 6, 7), (3, 3, 7, 2)]
    assert rows[0]["says"] == ("rank 0 -> rank 1: device 0 -> 1 is GPU 2 -> GPU 3 over SYS (PCIe and the SMP "
                               "interconnect between NUMA nodes, such as QPI/UPI), NUMA node 1 -> 0")
    shared = checklist.rank_links(topo.data["codes"], "2,3", 4)
    assert "ranks 0 and 2 both drive GPU 2" in shared[0]["says"]
    alone = checklist.rank_links(topo.data["codes"], "5", 2)
    assert alone[0]["code"] == "X" and "NCCL refuses two ranks" in alone[0]["says"]
    assert checklist.visible_gpus(None, 3) == [0, 1, 2]


def test_rank_links_read_a_parsed_topo_and_nvlink():
    import ringlab as rl

    rows = checklist.rank_links(rl.topology.published_topo("rtx5090x2")[1], None, 2)
    assert rows[0]["code"] == "PHB" and "host bridge" in rows[0]["says"]
    nv = checklist.rank_links(rl.topology.published_topo("dgx-a100-partial")[1], "0,1,2,3", 4)
    assert nv[0]["says"].endswith("over NV12 (12 bonded NVLinks)")


def test_rank_links_refuse_bad_input():
    codes = [["X", "SYS"], ["SYS", "X"]]
    with pytest.raises(ValueError, match="names GPU 9; the topology has GPUs 0-1"):
        checklist.rank_links(codes, "0,9", 2)
    with pytest.raises(ValueError, match="UUIDs"):
        checklist.rank_links(codes, "GPU-1234", 2)
    with pytest.raises(ValueError, match="names a GPU twice"):
        checklist.rank_links(codes, "1,1", 2)
    with pytest.raises(ValueError, match="at least 2 ranks"):
        checklist.rank_links(codes, None, 1)
    with pytest.raises(ValueError, match="square"):
        checklist.rank_links([["X", "SYS"]], None, 2)
    with pytest.raises(ValueError, match="unknown topo -m code 'WAT'"):
        checklist.rank_links([["X", "WAT"], ["WAT", "X"]], None, 2)


# --- the exercises ---------------------------------------------------------------------------------------------

def test_culprit_check_accepts_the_answer_and_rejects_the_first_named_rank(capsys):
    right = diagnose.check_culprit(diagnose._culprit, strict=True)
    assert right is diagnose._culprit and "Correct" in capsys.readouterr().out

    def first_named(messages):  # the rank the lowest rank waits for: a neighbour, not the culprit
        return diagnose.read_timeouts(messages)[min(messages)][1][0]

    with pytest.raises(AssertionError, match="culprit returned 3; the rank that never came is 1"):
        diagnose.check_culprit(first_named, strict=True)
    with pytest.raises(NotDoneYet):
        diagnose.check_culprit(lambda messages: None, strict=True)
    assert diagnose.check_culprit(first_named, strict=False) is diagnose._culprit
    assert "is not right yet" in capsys.readouterr().out


def test_straggler_check_accepts_the_answer_and_rejects_the_longest_waiter(capsys):
    assert diagnose.check_straggler(diagnose._straggler, strict=True) is diagnose._straggler

    def longest_waiter(trace):  # the rank after the straggler
        return int(diagnose.receive_waits(trace).argmax())

    with pytest.raises(AssertionError, match="rank 2 pauses before every step, straggler returned 3"):
        diagnose.check_straggler(longest_waiter, strict=True)
    with pytest.raises(NotDoneYet):
        diagnose.check_straggler(lambda trace: None, strict=True)
    assert diagnose.check_straggler(lambda trace: None, strict=False) is diagnose._straggler
    assert "not done yet" in capsys.readouterr().out
