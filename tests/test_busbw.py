"""Bus factors counted from the bytes of each collective's bandwidth-optimal schedule equal nccl-tests'
definitions; the lab's exercise checker accepts that and rejects a wrong factor; predicted algbw falls
with the ranks while busbw stays flat, and the sentence follows the numbers (ringlab.lessons.lab03_allreduce)."""
import pytest

from ringlab.lessons.lab03_allreduce import (OPTIMAL, bandwidth_optimal, bus_factor_from_traffic,
                                             nccl_tests_size, scaling_rows)
from ringlab.lessons.lab03_allreduce import check_bus_factor
from ringlab.schedule import bus_factor


@pytest.mark.parametrize("kind", sorted(OPTIMAL))
@pytest.mark.parametrize("nranks", [2, 3, 4, 5, 8, 16])
def test_the_factor_counted_from_traffic_is_nccl_tests(kind, nranks):
    assert bus_factor_from_traffic(kind, nranks, 720720 * 256) == pytest.approx(bus_factor(kind, nranks), rel=1e-3)


def test_alltoall_size_is_one_ranks_buffer():
    assert nccl_tests_size("alltoall", 4, 1 << 20) == (1 << 20) / 4
    assert nccl_tests_size("allreduce", 4, 1 << 20) == 1 << 20
    with pytest.raises(ValueError, match="no bandwidth-optimal schedule for 'gossip'"):
        bandwidth_optimal("gossip", 4)


def test_the_exercise_accepts_the_counted_factor_and_rejects_a_wrong_one(capsys):
    def counted(kind, n):
        return bus_factor_from_traffic(kind, n)

    assert check_bus_factor(counted, strict=True) is counted
    assert "Correct" in capsys.readouterr().out

    def sent_over_size(kind, n):  # a common slip: alltoall's size taken as the schedule's whole buffer
        return bus_factor_from_traffic(kind, n) / (n if kind == "alltoall" else 1)

    with pytest.raises(AssertionError, match=r"bus_factor\(kind=alltoall, n=2\) returned 0.25"):
        check_bus_factor(sent_over_size, strict=True)
    assert check_bus_factor(lambda kind, n: None, strict=False) is not None
    assert "not done yet" in capsys.readouterr().out


def test_busbw_stays_flat_while_algbw_falls():
    rows = scaling_rows(alpha=20e-6, bandwidth=10e9, ranks=(2, 4, 8), sizes=(1 << 28,))
    algbw = [r["algbw_Bps"] for r in rows]
    busbw = [r["busbw_Bps"] for r in rows]
    assert algbw[0] > algbw[1] > algbw[2]
    assert algbw[2] / algbw[0] == pytest.approx((2 * 1 / 2) / (2 * 7 / 8), rel=0.02)  # 1 / (2(n-1)/n) scaling
    assert max(busbw) / min(busbw) < 1.02 and busbw[0] == pytest.approx(10e9, rel=0.02)


def test_the_plot_has_both_panels_and_labels_its_sources():
    from ringlab.viz import algbw_busbw_plot

    rows = scaling_rows(alpha=20e-6, bandwidth=10e9, ranks=(2, 4))
    measured = [{"ranks": 4, "bytes": 1 << 20, "algbw_Bps": 3e9, "busbw_Bps": 4.5e9}]
    fig = algbw_busbw_plot(rows, measured=measured)
    names = [t.name for t in fig.data]
    assert names.count("2 ranks: predicted") == 2 and names.count("4 ranks: measured here") == 2
    assert [a.text for a in fig.layout.annotations][:2] == ["algbw = size / time", "busbw = algbw × 2(n-1)/n"]
    busbw_marker = [t for t in fig.data if t.name == "4 ranks: measured here"][1]
    assert list(busbw_marker.y) == [4.5]
