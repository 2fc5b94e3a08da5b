"""Lists and counts in the labs' sentences, said one way everywhere."""
from __future__ import annotations


def and_join(items) -> str:
    """``[1, 2, 3]`` -> ``"1, 2 and 3"``; ``[1, 2]`` -> ``"1 and 2"``; one item as it is."""
    items = [str(i) for i in items]
    return " and ".join(items) if len(items) < 3 else ", ".join(items[:-1]) + " and " + items[-1]


def plural(n: int, what: str, many: str | None = None) -> str:
    """``plural(3, "step")`` -> ``"3 steps"``; ``plural(1, "step")`` -> ``"1 step"``; ``many`` where adding an s
    is not the plural: ``plural(2, "micro-batch", "micro-batches")``."""
    return f"{n:,} {what if n == 1 else many or what + 's'}"


def article(name: str) -> str:
    """``"an H100"``, ``"a B200"``, ``"an MI300X"``: the article of a GPU's (or any capitalised) name as it is read
    aloud, letter by letter."""
    return f"{'an' if name[:1].upper() in 'AEFHILMNORSX' else 'a'} {name}"


def share(fraction: float) -> str:
    """A share in whole percent, '12%'; 'under 1%' where a share above nothing would print as 0%."""
    return "under 1%" if 0 < fraction and round(fraction * 100) == 0 else f"{fraction:.0%}"
