import pytest

from ringlab.measure.units import format_bytes, parse_size


@pytest.mark.parametrize("text, nbytes", [("8", 8), ("1K", 1024), ("64M", 64 << 20), ("1G", 1 << 30),
                                          ("2 MiB", 2 << 20), ("1.5K", 1536), ("512B", 512), (7, 7)])
def test_parse_size(text, nbytes):
    assert parse_size(text) == nbytes


@pytest.mark.parametrize("text", ["", "1X", "-5", "1.3B", "K"])
def test_parse_size_rejects(text):
    with pytest.raises(ValueError):
        parse_size(text)


def test_format_bytes():
    assert format_bytes(1536) == "1.5 KiB"
    assert format_bytes(64 << 20) == "64 MiB"
    assert format_bytes(12) == "12 B"
