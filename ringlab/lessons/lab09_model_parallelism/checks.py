"""Lab 09's derive-it exercises (issue 51): how a GPU's tensor-group bytes compare with its data group's at a real
model's size; the smallest capacity factor that drops under 1% of a drawn router's tokens; the smallest ring-attention
block whose compute hides its transfer on an H100. Each expected answer is computed here from ringlab's own counts
(``group_bytes``, ``capacity_rows``, ``hiding_block``), and a wrong answer is explained by its numbers."""
from __future__ import annotations

import functools
import math
import numbers

from ...lab.exercises import NotDoneYet, _strict
from .mesh import LLAMA3_70B, MICRO_BATCH, group_bytes

# Exercise 2: Llama 3 70B, a micro-batch of two sequences of 4096 tokens a data rank, a tensor group of 8
GROUP_SHAPE = {"tokens": 2 * MICRO_BATCH, "tensor": 8}
GROUP_TOLERANCE = 0.15  # 12 hidden^2 weights a layer is within 10% of Llama's own count
# Exercise 4: the capacity factor in steps of 0.05, under 1% of the layer's tokens dropped
FACTOR_STEP, DROP_LIMIT = 0.05, 0.01
# Exercise 7: Llama 3 70B's attention (64 query heads, 8 key-value heads of 128) on an H100's NVLink, no mask
HIDING_SHAPE = {"heads": LLAMA3_70B["heads"], "kv_heads": LLAMA3_70B["kv_heads"],
                "head_dim": LLAMA3_70B["hidden"] // LLAMA3_70B["heads"], "link": "NVLink", "value_bytes": 2}
HIDING_TOLERANCE = 0.05


def answer_check(reference, what: str):
    """Turn a strict check of a number (raises AssertionError saying what is wrong) into the learner's check: returns
    the answer to use from here on, yours when it is right, else ringlab's ``reference()`` after the verdict."""
    def wrap(strict_check):
        @functools.wraps(strict_check)
        def check_yours(yours, strict: bool | None = None):
            strict = _strict() if strict is None else strict
            try:
                if yours is None:
                    raise NotDoneYet(f"answer: not done yet. Set `answer` in the cell above to your {what}, run it, "
                                     "then run this cell again.")
                if isinstance(yours, bool) or not isinstance(yours, numbers.Real) or not math.isfinite(yours):
                    raise AssertionError(f"answer with a number ({what}), not {yours!r}.")
                strict_check(yours)
                return yours
            except AssertionError as err:
                if strict:
                    raise
                print(f"{err}\n(The cells below use ringlab's {what} until yours passes.)")
            return reference()
        return check_yours
    return wrap


def _near(value: float, target: float, tolerance: float) -> bool:
    return math.isclose(value, target, rel_tol=tolerance)


def group_ratio(tokens: int = GROUP_SHAPE["tokens"], tensor: int = GROUP_SHAPE["tensor"]) -> float:
    """A micro-batch's tensor-group bytes over a step's data-group bytes, a GPU's, counted by ``group_bytes``."""
    counted = group_bytes(LLAMA3_70B, tokens, tensor)
    return counted["tensor_bytes"] / counted["data_bytes"]


@answer_check(group_ratio, "ratio")
def check_group_ratio(answer):
    """The learner's ratio against ``group_ratio()``, within ``GROUP_TOLERANCE``; a known slip is named."""
    want, t = group_ratio(), GROUP_SHAPE["tensor"]
    counted = group_bytes(LLAMA3_70B, **GROUP_SHAPE)
    h, layers = LLAMA3_70B["hidden"], LLAMA3_70B["layers"]
    if _near(answer, want, GROUP_TOLERANCE):
        per_layer = counted["weights"] / layers / h**2
        print(f"Right: {answer:.3g}. ringlab counts {want:.2f} from Llama 3 70B's own shape: {per_layer:.1f} hidden^2 "
              "weights a layer (grouped-query attention, a SwiGLU MLP of "
              f"{LLAMA3_70B['ffn']}, and the embedding and output layer shared over the {layers} layers), not 12.")
        return
    section = MICRO_BATCH  # the section's micro-batch, whose ratio its printout gives
    slips = {f"that is the ratio at the section's {section} tokens a micro-batch; here a micro-batch holds "
             f"{GROUP_SHAPE['tokens']}": group_ratio(tokens=section),
             "that is forward only: Megatron's layer allreduces twice forward (after attention, after the MLP) and "
             "twice backward": want / 2,
             "twice ringlab's count: a layer runs 4 allreduces of tokens x hidden activations a micro-batch in all, "
             "2 forward and 2 backward": want * 2,
             f"that counts the gradients in {counted['value_bytes']} bytes, as the activations: Megatron-LM reduces a "
             f"bf16 model's gradients in fp32, {counted['grad_bytes']} bytes each": want * counted["grad_bytes"]
             / counted["value_bytes"],
             f"that counts a whole layer's gradients on a GPU: in a tensor group of {t} each GPU holds, and so "
             f"allreduces in its data group, 1/{t} of every layer's weights": want / t,
             f"that splits the activations over the tensor group: each of its allreduces sums a whole tokens x hidden "
             f"buffer of partial sums on every one of its {t} GPUs": want * t}
    slip = "; or ".join(why for why, value in slips.items() if _near(answer, value, GROUP_TOLERANCE)) or None
    side = "too high" if answer > want else "too low"
    raise AssertionError(
        f"Exercise 2: {answer:.3g} is {side}, more than {GROUP_TOLERANCE:.0%} from ringlab's count"
        + (f"; {slip}." if slip else ".")
        + f"\nHint: count one layer. Its tensor group allreduces tokens x hidden activations "
          f"{counted['tensor_calls'] // layers} times a micro-batch; its data group allreduces, once a step, the "
          f"gradients of the 1/tensor of its ~12 hidden^2 weights that a GPU holds. Activations travel in "
          f"{counted['value_bytes']} bytes a value, gradients in {counted['grad_bytes']}; the number of layers cancels.")


def _capacity(factor: float, table=None):
    from .experts import capacity_row, routing_table

    return capacity_row(routing_table() if table is None else table, factor)


def smallest_factor(table=None) -> float:
    """The smallest multiple of ``FACTOR_STEP`` whose capacity drops under ``DROP_LIMIT`` of ``table``'s tokens
    (``capacity_rows``; default: ``routing_table()``)."""
    from .experts import routing_table

    table = routing_table() if table is None else table
    steps = 1
    while _capacity(steps * FACTOR_STEP, table)["dropped_share"] >= DROP_LIMIT:
        steps += 1
    return round(steps * FACTOR_STEP, 2)


def _said(row: dict) -> str:
    return (f"a capacity of {row['block']} tokens for each rank's tokens to each expert, dropping {row['dropped']} "
            f"tokens, {row['dropped_share']:.2%} of the layer's")


@answer_check(smallest_factor, "capacity factor")
def check_capacity_factor(answer):
    """The learner's factor against ``capacity_rows`` on ``routing_table()``: it must drop under 1% of the tokens, and
    the factor one step lower must not."""
    steps = round(answer / FACTOR_STEP)
    if not math.isclose(answer, steps * FACTOR_STEP, abs_tol=1e-6):
        raise AssertionError(f"Exercise 4: {answer!r} is not a multiple of {FACTOR_STEP}: choose among "
                             f"{FACTOR_STEP}, {2 * FACTOR_STEP:.2f}, {3 * FACTOR_STEP:.2f}, ...")
    if steps < 1:
        raise AssertionError(f"Exercise 4: a capacity factor is positive; {answer!r} gives no expert any room.")
    factor = round(steps * FACTOR_STEP, 2)
    mine = _capacity(factor)
    hint = ("\nHint: for each factor, capacity = ceil(factor x tokens / experts); add up max(count - capacity, 0) over "
            "the whole table and divide by all the tokens; step the factor by 0.05 until that is under 1%.")
    if mine["dropped_share"] >= DROP_LIMIT:
        raise AssertionError(f"Exercise 4: factor {factor:g} is too low: {_said(mine)}, not under "
                             f"{DROP_LIMIT:.0%}." + hint)
    lower = round(factor - FACTOR_STEP, 2)
    if lower > 0 and _capacity(lower)["dropped_share"] < DROP_LIMIT:
        raise AssertionError(f"Exercise 4: factor {factor:g} drops under {DROP_LIMIT:.0%}, but it is not the smallest: "
                             f"{lower:g} gives {_said(_capacity(lower))}, under {DROP_LIMIT:.0%} too." + hint)
    below = _capacity(lower) if lower > 0 else None
    print(f"Right: factor {factor:g} gives {_said(mine)}"
          + (f"; {lower:g} would give {below['block']} tokens and drop {below['dropped_share']:.2%}." if below else ".")
          + f" Padding to the largest count instead would take factor {mine['no_drop_factor']:.2f}.")


def hiding_tokens() -> float:
    """The smallest block (tokens) whose compute hides its transfer at ``HIDING_SHAPE`` (``grouped_hiding_block``)."""
    from .balance import grouped_hiding_block

    return grouped_hiding_block(HIDING_SHAPE["heads"], HIDING_SHAPE["kv_heads"], HIDING_SHAPE["link"])


@answer_check(hiding_tokens, "block size in tokens")
def check_hiding_block(answer):
    """The learner's block against ``hiding_tokens()``, within ``HIDING_TOLERANCE``; a wrong one is explained by the
    compute and transfer times of a step at that block."""
    from ...train.attention import hiding_examples

    want, shape = hiding_tokens(), HIDING_SHAPE
    rates = hiding_examples()[shape["link"]]
    if _near(answer, want, HIDING_TOLERANCE):
        print(f"Right: {answer:,.0f} tokens (ringlab's hiding_block: {want:,.1f}). With every query head carrying its "
              f"own K and V it would be {shape['heads'] / shape['kv_heads']:.0f}x that; grouped-query attention "
              "shrinks what travels, not what is computed.")
        return
    per = shape["kv_heads"] * 2 * shape["head_dim"] * shape["value_bytes"]  # K and V bytes a token, every KV head
    transfer = lambda c: c * per / rates["bandwidth"]
    compute = lambda c: transfer(c) * c / want  # the compute grows as c^2, the transfer as c: equal at want
    slips = {"that is the block if every query head had its own K and V; here "
             f"{shape['kv_heads']} key-value heads travel for {shape['heads']} query heads":
             want * shape["heads"] / shape["kv_heads"],
             "twice: no score is masked here, and both products (Q K^T and P V) count, 2 FLOPs a multiply-add":
             2 * want,
             "half: both K and V travel, 2 bytes a value": want / 2}
    slip = "; or ".join(why for why, value in slips.items() if _near(answer, value, HIDING_TOLERANCE)) or None
    if answer <= 0:
        said = "a block holds a positive number of tokens"
    elif answer < want:
        said = (f"too small: at {answer:,.0f} tokens a step computes for {compute(answer) * 1e6:.2f} us and transfers "
                f"for {transfer(answer) * 1e6:.2f} us, so the transfer is not hidden")
    else:
        said = (f"larger than it needs to be: at {answer:,.0f} tokens a step computes for {compute(answer) * 1e6:.2f} "
                f"us and transfers for {transfer(answer) * 1e6:.2f} us, so a smaller block hides it too")
    raise AssertionError(
        f"Exercise 7: {said}" + (f"; {slip}." if slip else ".")
        + "\nHint: at one step, the compute (every query head: 4 c^2 d FLOPs at F) against the transfer (every "
          "key-value head: K and V, 2 c d b bytes at B); set them equal and solve for c.")
