"""Lab 09's derive-it exercises (issue 51): the two groups' bytes, the smallest capacity factor, the block that hides
its transfer. Each check accepts the worked solution and refuses a wrong answer, saying what is wrong by its numbers;
the solutions in the notebook pass their checks, and the exercise version runs on unanswered."""
import math

import nbformat
import pytest

from ringlab.lab import notebooks
from ringlab.lab.exercises import NotDoneYet
from ringlab.lessons.lab09_model_parallelism import checks, experts, mesh
from ringlab.train.attention import hiding_block, hiding_examples

LAB = "09_model_parallelism"


def test_the_group_ratio_is_what_the_mesh_counts_and_about_tokens_t_over_6h():
    shape = checks.GROUP_SHAPE
    counted = mesh.group_bytes(mesh.LLAMA3_70B, shape["tokens"], shape["tensor"])
    assert checks.group_ratio() == counted["tensor_bytes"] / counted["data_bytes"] == pytest.approx(1.22, abs=0.01)
    assert checks.group_ratio(tokens=mesh.MICRO_BATCH) == pytest.approx(
        mesh.megatron_mesh()["tensor_bytes"] / mesh.megatron_mesh()["data_bytes"])  # the section's own count
    # 12 h^2 weights a layer; activations in 2 bytes, gradients reduced in fp32 (4 bytes)
    formula = shape["tokens"] * shape["tensor"] / (6 * mesh.LLAMA3_70B["hidden"])
    assert abs(formula / checks.group_ratio() - 1) < checks.GROUP_TOLERANCE


def test_the_group_ratio_check_takes_the_worked_answer_and_names_a_slip(capsys):
    worked = 4 * 8192 * 8192 * 2 / (12 * 8192**2 / 8 * 4)
    assert checks.check_group_ratio(worked, strict=True) == worked
    assert "Right: 1.33. ringlab counts 1.22" in capsys.readouterr().out
    want = checks.group_ratio()
    with pytest.raises(AssertionError, match="too high.*twice ringlab's count.*or that counts the gradients in 2 "
                                             "bytes.*in fp32, 4 bytes each"):
        checks.check_group_ratio(2 * want, strict=True)
    with pytest.raises(AssertionError, match="too low.*the section's 4096 tokens.*or that is forward only"):
        checks.check_group_ratio(want / 2, strict=True)
    with pytest.raises(AssertionError, match="1/8 of every layer's weights"):
        checks.check_group_ratio(want / 8, strict=True)
    with pytest.raises(NotDoneYet):
        checks.check_group_ratio(None, strict=True)
    with pytest.raises(AssertionError, match="answer with a number"):
        checks.check_group_ratio("2.4", strict=True)
    assert checks.check_group_ratio(2 * want, strict=False) == want  # the lab runs on with ringlab's
    assert "(The cells below use ringlab's ratio until yours passes.)" in capsys.readouterr().out


def test_the_group_bytes_lesson_follows_its_numbers():
    result = mesh.megatron_mesh()
    same = mesh.group_bytes_lesson(result, tokens=8192)
    assert same.conclusions == ("the two groups' bytes are of the same order",
                                "the tensor group's collectives block and the data group's overlap")
    assert "1.22x, against 0.61x at 4096 tokens" in same.text and "critical path" in same.text
    assert "Both groups are rings of 8" in same.text
    assert "Predicted above at 4096 tokens, the tensor group blocks a micro-batch" in same.text  # the mesh's own size
    heavy = mesh.group_bytes_lesson(result, tokens=8 * 8192)
    assert heavy.conclusions[0] == "the tensor group carries most of the bytes" and "critical path" not in heavy.text
    light = mesh.group_bytes_lesson(result, tokens=512)
    assert light.conclusions[0] == "the data group carries most of the bytes"
    uneven = mesh.group_bytes_lesson(dict(result, data=16), tokens=8192)
    assert "what a GPU sends compares as 1.14x" in uneven.text  # 1.2175 x (7/8) / (15/16)


def test_the_smallest_factor_drops_under_one_percent_and_one_step_less_does_not():
    table = experts.routing_table()
    assert table == experts.routing_table() and len(table) == 8 and {sum(row) for row in table} == {4096}
    factor = checks.smallest_factor()
    assert factor == 1.3
    assert experts.capacity_row(table, factor)["dropped_share"] < checks.DROP_LIMIT
    assert experts.capacity_row(table, factor - checks.FACTOR_STEP)["dropped_share"] >= checks.DROP_LIMIT
    loads = [sum(column) / (8 * 4096 / 8) for column in zip(*table)]
    assert max(loads) > 1.2 and min(loads) < 0.8  # skewed, as a trained router is


def test_the_capacity_check_refuses_a_factor_a_step_too_low_or_too_high(capsys):
    assert checks.check_capacity_factor(1.3, strict=True) == 1.3
    assert checks.check_capacity_factor(1 + 6 * 0.05, strict=True) == 1 + 6 * 0.05  # 1.3000000000000003
    assert "Right: factor 1.3 gives a capacity of 666 tokens" in capsys.readouterr().out
    with pytest.raises(AssertionError, match=r"factor 1.25 is too low: a capacity of 640 tokens .* 1\.24% of the"):
        checks.check_capacity_factor(1.25, strict=True)
    with pytest.raises(AssertionError, match=r"factor 1.35 drops under 1%, but it is not the smallest: 1.3 gives"):
        checks.check_capacity_factor(1.35, strict=True)
    with pytest.raises(AssertionError, match="not the smallest"):
        checks.check_capacity_factor(2.6, strict=True)  # off by 2x
    with pytest.raises(AssertionError, match="not a multiple of 0.05"):
        checks.check_capacity_factor(1.33, strict=True)
    with pytest.raises(AssertionError, match="is positive"):
        checks.check_capacity_factor(0, strict=True)


def test_the_hiding_block_is_hiding_blocks_with_kv_heads_over_heads():
    rates = hiding_examples()["NVLink"]
    shape = checks.HIDING_SHAPE
    plain = hiding_block(rates["flops_per_second"], rates["bandwidth"])
    assert checks.hiding_tokens() == pytest.approx(plain * shape["kv_heads"] / shape["heads"])
    assert (shape["heads"], shape["kv_heads"], shape["head_dim"]) == (64, 8, 128)


def test_the_hiding_check_takes_the_worked_answer_and_refuses_off_by_2x(capsys):
    rates = hiding_examples()["NVLink"]
    worked = rates["flops_per_second"] * 2 * 8 / (2 * rates["bandwidth"] * 64)
    assert checks.check_hiding_block(worked, strict=True) == worked
    assert checks.check_hiding_block(math.ceil(worked), strict=True) == math.ceil(worked)
    assert "Right: 275 tokens" in capsys.readouterr().out
    with pytest.raises(AssertionError, match=r"larger than it needs to be: .* computes for 10\.00 us and transfers "
                                             r"for 5\.00 us.*twice"):
        checks.check_hiding_block(2 * worked, strict=True)
    with pytest.raises(AssertionError, match=r"too small: .* the transfer is not hidden; half"):
        checks.check_hiding_block(worked / 2, strict=True)
    with pytest.raises(AssertionError, match="8 key-value heads travel for 64 query heads"):
        checks.check_hiding_block(8 * worked, strict=True)


def _answer_cells(notebook):
    """(solution cell, check cell) for each derive-it exercise: a solution cell whose next cell checks `answer`."""
    cells = [c for c in notebook.cells if c.cell_type == "code"]
    return cells[0], [(cell, cells[i + 1]) for i, cell in enumerate(cells[:-1])
                      if "solution" in cell.metadata.get("tags", []) and "answer = check_" in cells[i + 1].source]


def test_the_solutions_in_the_notebook_pass_their_checks_and_the_exercises_run_on(capsys):
    solved = nbformat.read(notebooks.LABS / "solutions" / f"{LAB}.ipynb", as_version=4)
    imports, pairs = _answer_cells(solved)
    assert [check.source.split("(")[0] for _, check in pairs] == [
        "answer = check_group_ratio", "answer = check_capacity_factor", "answer = check_hiding_block"]
    for solution, check in pairs:
        space = {}
        exec(imports.source, space)
        exec(solution.source, space)
        name = check.source.split("=")[1].split("(")[0].strip()
        assert space[name](space["answer"], strict=True) is space["answer"], check.source
    assert capsys.readouterr().out.count("Right: ") == 3
    fresh = nbformat.read(notebooks.LABS / f"{LAB}.ipynb", as_version=4)
    imports, pairs = _answer_cells(fresh)
    for solution, check in pairs:
        space = {}
        exec(imports.source, space)
        exec(solution.source, space)
        exec(check.source, space)  # not strict: says "not done yet" and goes on with ringlab's answer
        assert space["answer"] is not None
    assert capsys.readouterr().out.count("answer: not done yet") == 3


def test_the_lab_asks_the_shapes_the_checks_compute():
    source = (notebooks.LABS / "src" / f"{LAB}.py").read_text()
    assert f"group_bytes_lesson(megatron, tokens={checks.GROUP_SHAPE['tokens']})" in source
    assert f"tokens, tensor, hidden = {checks.GROUP_SHAPE['tokens']}, {checks.GROUP_SHAPE['tensor']}, " in source
    shape = checks.HIDING_SHAPE
    assert f"heads, kv_heads, head_dim, b = {shape['heads']}, {shape['kv_heads']}, {shape['head_dim']}, " in source
    listed = source.split("# ## Exercises\n")[1].split("# ## Quiz")[0]
    headings = [line for line in source.splitlines() if line.startswith("# ## Exercise ")]
    assert [h.split(":")[0] for h in headings] == [f"# ## Exercise {n}" for n in range(1, 9)]
    assert [line.split(".")[0] for line in listed.splitlines() if line[2:3].isdigit()] == [
        f"# {n}" for n in range(1, 9)]
