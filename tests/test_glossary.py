"""labs/glossary.md explains the labs' jargon, and each term is linked there the first time a lab's text uses it."""
import re
from pathlib import Path

import pytest

LABS = Path(__file__).resolve().parent.parent / "labs"
GLOSSARY = (LABS / "glossary.md").read_text()
# term as the labs write it -> the glossary heading that explains it
TERMS = {"algbw": "algbw", "busbw": "busbw", "alpha-beta": "alpha-beta", "rhd": "rhd", "ipyparallel": "ipyparallel",
         "%%px": "%%px", "NUMA": "NUMA", "P2P": "P2P", "NVLink": "NVLink", "NVSwitch": "NVSwitch", "NVLS": "NVLS",
         "LL128": "LL, LL128, Simple", "NCCL": "NCCL", "MPS": "MPS", "rails": "rail", "gloo": "gloo", "DDP": "DDP",
         "Horovod": "Horovod", "straggler": "straggler", "ZeRO": "ZeRO", "FSDP": "FSDP",
         "tensor parallelism": "tensor parallelism", "device mesh": "device mesh", "all-to-all": "all-to-all", "all-to-all-v": "all-to-all-v",
         "mixture of experts": "mixture of experts", "ring attention": "ring attention", "PAT": "PAT", "MFU": "MFU",
         "sequence parallelism": "sequence parallelism", "Ulysses": "Ulysses", "zigzag": "zigzag layout",
         "zero-bubble": "zero-bubble pipeline", "recomputation": "activation recomputation"}


def slug(heading: str) -> str:
    """A glossary heading's anchor, as GitHub makes it: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^a-z0-9 -]", "", heading.lower()).strip().replace(" ", "-")


def markdown(source: str) -> str:
    """The markdown cells of a jupytext percent script, as one text, comment marks removed."""
    cells = re.split(r"^# %%.*$", source, flags=re.M)
    heads = re.findall(r"^# %%.*$", source, flags=re.M)
    return "\n".join(re.sub(r"^# ?", "", cell, flags=re.M) for head, cell in zip(heads, cells[1:]) if "[markdown]" in head)


@pytest.mark.parametrize("term", sorted(TERMS))
def test_the_first_use_of_a_term_in_the_labs_text_links_the_glossary(term):
    assert f"\n## {TERMS[term]}\n" in GLOSSARY
    for source in sorted((LABS / "src").glob("*.py")):
        text = markdown(source.read_text())
        found = re.search(rf"(\[`?)?(?<![\w%]){re.escape(term)}(?![\w])", text)
        if found:
            after = text[found.start():found.start() + len(term) + 60]
            anchor = f"](glossary.md#{slug(TERMS[term])})"
            assert found.group(1) and anchor in after, f"{source.name}: first '{term}' is not linked to {anchor}: {after!r}"
            return
    pytest.fail(f"no lab uses {term!r}: drop it from the glossary's terms or the test")


def test_every_glossary_link_lands_on_its_term():
    """A link to the glossary names the heading it explains (an anchor placed before the heading, which GitHub and
    JupyterLab both follow), never the top of the file."""
    anchors = re.findall(r'^<a id="([^"]+)"></a>\n\n## (.+)$', GLOSSARY, flags=re.M)
    assert len(anchors) == GLOSSARY.count("\n## ") and all(a == slug(h) for a, h in anchors)
    known = {a for a, _ in anchors}
    sources = sorted((LABS / "src").glob("*.py")) + [LABS / "README.md", LABS.parent / "README.md"]
    for source in sources:
        for link in re.findall(r"\]\(glossary\.md([^)]*)\)", source.read_text()):
            assert link.startswith("#") and link[1:] in known, f"{source.name}: glossary link {link!r} lands on no term"
