"""Lab 09's mesh lessons: every verdict follows its numbers. Each lesson function is driven with numbers from both
sides of each of its verdicts, and its words must change with them; then the real predictions say what Megatron's
arithmetic and NCCL's model say (issue 51)."""
import pytest

from ringlab.lessons.lab09_model_parallelism import mesh

MiB = 1 << 20


def _megatron(tensor_bytes, inside_s, across_s, data_inside_s=0.06, data_across_s=0.6):
    row = lambda name, call, data: {"mapping": name, "tensor_algorithm": "a/P", "tensor_call_s": call,
                                    "micro_batch_s": 320 * call, "tensor_step_s": 16 * 320 * call,
                                    "data_algorithm": "b/P", "data_step_s": data}
    return {"model": "M", "hidden": 8192, "layers": 80, "tokens": 4096, "tensor": 8, "data": 8, "micro_batches": 16,
            "weights": 70e9, "activation_bytes": 64 * MiB, "tensor_calls": 320, "tensor_bytes": tensor_bytes,
            "data_bytes": 16 << 30, "grad_bytes": 4, "rows": [row("tensor inside nodes", inside_s, data_across_s),
                                                              row("tensor across nodes", across_s, data_inside_s)]}


def test_the_megatron_lesson_follows_its_numbers():
    real = mesh.megatron_lesson(_megatron(20 << 30, inside_s=3e-4, across_s=3e-3))
    assert real.conclusions == ("of the same order: bytes alone do not say which group needs NVLink",
                                "the tensor group inside the nodes blocks less",
                                "tensor inside the nodes is faster even with nothing overlapped")
    assert "1.25x the data group's step" in real.text and "10.0x, on every micro-batch" in real.text
    assert "So the tensor group belongs on a node's NVLink, and that mapping is the faster one" in real.text
    heavy = mesh.megatron_lesson(_megatron(200 << 30, inside_s=3e-4, across_s=3e-3))
    assert heavy.conclusions[0] == "the tensor group carries most of the bytes"
    light = mesh.megatron_lesson(_megatron(1 << 30, inside_s=3e-4, across_s=3e-3))
    assert light.conclusions[0] == "the data group carries most of the bytes"
    reversed_links = mesh.megatron_lesson(_megatron(20 << 30, inside_s=3e-3, across_s=3e-4))
    assert reversed_links.conclusions[1:] == ("the tensor group across the nodes blocks less",
                                              "with nothing overlapped, tensor across the nodes is faster")
    close = mesh.megatron_lesson(_megatron(20 << 30, inside_s=3.0e-4, across_s=3.2e-4, data_inside_s=0.01,
                                           data_across_s=1.0))
    assert close.conclusions[1:] == ("the tensor group inside the nodes blocks less",
                                     "with nothing overlapped, tensor across the nodes is faster")
    assert "though with nothing overlapped the other mapping would be faster" in close.text


def test_the_mapping_lesson_says_why_its_tensor_group_carries_the_bytes():
    row = lambda name, measured, hidden: {
        "mapping": name, "tensor_gpus": [], "data_gpus": [], "tensor_bytes": 4.0, "data_bytes": 1.0,
        "tensor_calls": 4, "measured_s": measured, "predicted_s": measured, "predicted_tensor_s": measured,
        "predicted_data_s": 0.0, "hidden": hidden, "tokens": 4096, "tensor": 2}
    narrow = mesh.mapping_lesson([row("tensor inside nodes", 1.0, 8), row("tensor across nodes", 3.0, 8)])
    assert "8 x 8^2 / 2 weights, 256x fewer: the activations outweigh the gradients" in narrow.text
    wide = mesh.mapping_lesson([row("tensor inside nodes", 1.0, 8192), row("tensor across nodes", 3.0, 8192)])
    assert "8 x 8192^2 / 2 weights, 4.0x as many: at this width the gradients outweigh" in wide.text


def test_the_mesh_at_llama_size():
    result = mesh.megatron_mesh()
    assert result["tensor_calls"] == 320 and result["activation_bytes"] == 4096 * 8192 * 2
    assert result["weights"] == pytest.approx(70.55e9, rel=1e-3)
    assert result["tensor_bytes"] / result["data_bytes"] == pytest.approx(0.61, abs=0.01)  # fp32 gradients
    assert result["data_bytes"] == result["weights"] // 8 * 4
    finding = mesh.megatron_lesson(result)
    assert finding.conclusions == ("of the same order: bytes alone do not say which group needs NVLink",
                                   "the tensor group inside the nodes blocks less",
                                   "tensor inside the nodes is faster even with nothing overlapped")
