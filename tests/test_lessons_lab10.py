"""Lab 10's room: the exercise checks accept the reference and refuse a wrong answer, NCCL's model agrees with what
NCCL ran and its channels with what NCCL's logs printed, PAT wins where it should, and the plots draw."""
import pytest

from ringlab.lessons.lab10_inside_nccl import checks, nccl


def test_the_checks_take_the_reference_and_refuse_a_wrong_answer():
    assert checks.check_switch_size(checks._switch_size, strict=True) is checks._switch_size
    with pytest.raises(AssertionError, match="Hint"):
        checks.check_switch_size(lambda small, large: (large[0] - small[0]) * large[1], strict=True)
    assert checks.check_pick_symmetric(checks._pick_symmetric, strict=True) is checks._pick_symmetric
    with pytest.raises(AssertionError, match="Hint"):
        checks.check_pick_symmetric(lambda nbytes, nranks, sync_s, read_Bps: "one-shot", strict=True)


def test_nccl_choices_switch_by_size_and_agree_with_what_nccl_ran():
    rows = nccl.choice_rows(machines=("hgx-h100-8",), collectives=("allreduce",))
    moves = nccl.switches(rows)
    assert [m["to"] for m in moves] == ["nvls/Simple"] and rows[0]["choice"] == "ring/LL"
    published_runs = nccl.against_published()
    agree = [r for r in published_runs if r["nccl_ran"].lower() == r["model_picks"]]
    assert len(agree) >= len(published_runs) - 1
    assert all(r["margin"] < 0.05 for r in published_runs if r not in agree)  # only near ties differ
    forced = nccl.forced_ring_sizes()
    assert all(p != "ring" for p, r in zip(forced["picks"], forced["ratio"]) if r > 1.1)
    channels = {r["board"]: r for r in nccl.channel_rows()}
    assert round(channels["8 x H100"]["port_Bps"] / channels["8 x H100"]["link_Bps"]) == 18  # 370.8 GB/s: 18 x 20.6
    assert {board: r["channels"] for board, r in channels.items()} == {"8 x A100": 24, "8 x H100": 24, "8 x H800": 16,
                                                                      "8 x B200": 32}  # ringlab.predict.channels
    assert all(r["channels"] == r["logged"] for r in channels.values() if r["logged"] is not None)


def test_pat_wins_at_many_nodes_and_small_sizes():
    rows = nccl.pat_rows(nodes=(2, 64), sizes=(1 << 12,))
    assert [r["choice"].split("/")[0] for r in rows] == ["ring", "pat"]
    assert rows[-1]["pat_steps"] == 6 and rows[-1]["ring_steps"] == 63
    assert "PAT" in nccl.describe_pat(rows)


def test_the_plots_draw():
    from ringlab.viz import parallelism as P

    assert P.choice_map(nccl.choice_rows(machines=("hgx-h100-8",))).data
    assert len(P.protocol_plot(nccl.protocol_rows(sizes=[1 << 10, 1 << 20])).data) == 3
