"""Lab sources and the notebooks made from them.

Each lab is written once, with its solutions, as a jupytext percent script: ``labs/src/NN_name.py``
(text, so diffs read well). From it, :func:`build` writes

- ``labs/NN_name.ipynb``: the exercise version learners open. In cells tagged ``solution``,
  everything after a line ``# solution`` becomes ``# Write your code here.``;
- ``labs/solutions/NN_name.ipynb``: the solution version, which CI runs under nbval.

Notebooks are written without outputs. ``python -m ringlab.lab check`` (and a test) fails
when a notebook and its source have drifted apart; ``python -m ringlab.lab build`` mends it.
``python -m ringlab.lab script 03`` prints a lab's ``%%px`` cells as one script, which runs
under ``mpiexec`` just as the cells run on the notebook's MPI engines.

Learners work in their own copies: :func:`learner_copy` (``python -m ringlab.lab copy``, run by
``python3 dev.py lab`` before it opens them) copies the labs into ``my_labs/``, which git ignores, so that
saving a lab never touches the committed notebooks and a ``git pull`` never meets a learner's outputs.
"""
from __future__ import annotations

import copy
import sys
from pathlib import Path

LABS = Path(__file__).resolve().parents[2] / "labs"
MY_LABS = LABS.parent / "my_labs"  # the learner's copies (git-ignored), beside labs/ so that its links still work
MARKER = "# solution"
PLACEHOLDER = "# Write your code here."


def _read(source: Path):
    import jupytext

    notebook = jupytext.read(source)
    notebook.metadata.pop("jupytext", None)
    notebook.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    notebook.metadata["language_info"] = {"name": "python"}
    for i, cell in enumerate(notebook.cells):
        cell["id"] = f"{source.stem[:2]}-{i:02d}"
        cell.metadata = {k: v for k, v in cell.metadata.items() if k == "tags"}  # jupytext's layout hints go
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return notebook


def exercise_version(notebook):
    """The notebook with every solution cut out after its ``# solution`` line."""
    out = copy.deepcopy(notebook)
    for cell in out.cells:
        if cell.cell_type == "code" and "solution" in cell.metadata.get("tags", []):
            lines = cell.source.splitlines()
            if MARKER not in [line.strip() for line in lines]:
                raise ValueError(f"a cell tagged 'solution' has no '{MARKER}' line:\n{cell.source}")
            cut = [line.strip() for line in lines].index(MARKER)
            indent = lines[cut][:len(lines[cut]) - len(lines[cut].lstrip())]
            cell.source = "\n".join(lines[:cut] + [indent + PLACEHOLDER])
    return out


def targets(source: Path) -> dict[str, object]:
    """{path: notebook} that ``source`` should produce."""
    solution = _read(source)
    return {str(LABS / f"{source.stem}.ipynb"): exercise_version(solution),
            str(LABS / "solutions" / f"{source.stem}.ipynb"): solution}


def cut(notebook, fragment: str):
    """A copy of ``notebook`` that ends with the first code cell containing ``fragment``.

    For running the opening of a lab on its own, for example its figures without its MPI cells.
    """
    out = copy.deepcopy(notebook)
    for i, cell in enumerate(out.cells):
        if cell.cell_type == "code" and fragment in cell.source:
            out.cells = out.cells[:i + 1]
            return out
    raise ValueError(f"no code cell contains {fragment!r}")


def rank_script(lab: str) -> tuple[int, str]:
    """The per-rank code of a lab as one script for mpiexec: (ranks the lab starts, script text).

    ``lab`` is a lab's number or name (``"03"``, ``"03_allreduce"``). The script is the lab's ``%%px``
    cells, in order, with their solutions, so that
    ``mpiexec -n N python -m mpi4py script.py`` runs on N ranks exactly what the notebook runs on its
    ipyparallel engines.
    """
    import re

    matches = [p for p in sources() if p.stem == lab or p.stem.startswith(f"{lab}_")]
    if len(matches) != 1:
        raise ValueError(f"no single lab named {lab!r}; the labs are {', '.join(p.stem for p in sources())}")
    notebook = _read(matches[0])
    cells = [c.source for c in notebook.cells if c.cell_type == "code" and c.source.startswith("%%px")]
    if not cells:
        raise ValueError(f"{matches[0].stem} has no %%px cells: it runs in the notebook's own process")
    ranks = re.search(r"MPICluster\((\d+)\)", "\n".join(c.source for c in notebook.cells))
    n = int(ranks.group(1)) if ranks else 2
    body = "\n\n".join(cell.split("\n", 1)[1] if "\n" in cell else "" for cell in cells)
    header = (f'"""The per-rank cells of lab {matches[0].stem}, as one script.\n\n'
              f'    mpiexec -n {n} python -m mpi4py {matches[0].stem}_ranks.py\n"""\n')
    return n, header + body + "\n"


def sources() -> list[Path]:
    return sorted((LABS / "src").glob("[0-9][0-9]_*.py"))


def _text(notebook) -> str:
    import nbformat

    return nbformat.writes(notebook) + "\n"


def build() -> list[str]:
    """Write every lab's notebooks from its source; return the paths written."""
    written = []
    for source in sources():
        for path, notebook in targets(source).items():
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            text = _text(notebook)
            if not Path(path).exists() or Path(path).read_text() != text:
                Path(path).write_text(text)
                written.append(path)
    return written


def stale() -> list[str]:
    """Notebooks that differ from what their sources would build (empty when all is in step)."""
    out = []
    for source in sources():
        for path, notebook in targets(source).items():
            if not Path(path).exists() or Path(path).read_text() != _text(notebook):
                out.append(path)
    return out


def learner_copy(dest: str | Path | None = None) -> list[Path]:
    """Copy the labs into ``dest`` (default :data:`MY_LABS`): the exercise notebooks, the solutions and the
    pages they link to. A file already there is the learner's and stays as it is; returns the files written.

    Each notebook copied names this environment's kernel and language as JupyterLab fills them in when the
    kernel starts (the committed ones carry only their names), so that it opens without unsaved changes.
    """
    import nbformat

    dest = Path(dest) if dest is not None else MY_LABS
    written = []
    for path in sorted([*LABS.glob("*.ipynb"), *LABS.glob("*.md"), *(LABS / "solutions").glob("*")]):
        target = dest / path.relative_to(LABS)
        if target.exists() or not path.is_file():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if path.suffix == ".ipynb":
            notebook = nbformat.read(path, as_version=4)
            notebook.metadata.update(kernel_metadata())
            nbformat.write(notebook, target)
        else:
            target.write_bytes(path.read_bytes())
        written.append(target)
    return written


def kernel_metadata(kernel: str = "python3") -> dict:
    """The ``kernelspec`` and ``language_info`` JupyterLab writes into a notebook run on ``kernel`` here (from the
    kernel's spec, and ipykernel's language_info, which reports this Python's version)."""
    from ipykernel.ipkernel import IPythonKernel
    from jupyter_client.kernelspec import KernelSpecManager

    spec = KernelSpecManager().get_kernel_spec(kernel)
    return {"kernelspec": {"name": kernel, "display_name": spec.display_name, "language": spec.language},
            "language_info": copy.deepcopy(IPythonKernel.language_info)}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["build"]:
        for path in build():
            print(f"wrote {path}")
        return 0
    if argv == ["check"]:
        behind = stale()
        for path in behind:
            print(f"out of date with its source: {path} (run: python -m ringlab.lab build)")
        return 1 if behind else 0
    if argv == ["settings"]:
        from .settings import write_overrides

        print(f"JupyterLab will save widget state with notebooks: {write_overrides()}")
        return 0
    if argv and argv[0] == "copy" and len(argv) <= 2:
        dest = Path(argv[1]) if len(argv) == 2 else MY_LABS
        written = learner_copy(dest)
        print(f"your labs are in {dest}" + (f" ({len(written)} file{'s' * (len(written) != 1)} copied from labs/; "
                                            "the ones already there are kept as you left them)" if written else ""))
        return 0
    if len(argv) == 2 and argv[0] == "script":
        try:
            print(rank_script(argv[1])[1], end="")
        except ValueError as err:
            print(f"ringlab.lab: {err}", file=sys.stderr)
            return 2
        return 0
    print("usage: python -m ringlab.lab build | check | copy [DEST] | settings | script LAB\n"
          "  build         write labs/*.ipynb and labs/solutions/*.ipynb from labs/src/\n"
          "  check         fail when a notebook and its source differ\n"
          "  copy [DEST]   copy the labs into my_labs/ (or DEST) to work in, keeping the files already there\n"
          "  settings      make this environment's JupyterLab save widget state with notebooks\n"
          "  script LAB    print a lab's %%px cells as one script for mpiexec (LAB: 03 or 03_allreduce)",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
