"""`kiln explain` and `kiln bench --json` on the bundled demo model: the plan names the kernels,
layouts, fused nodes and the reasons other backends refused, and the reasons follow the settings."""
import json

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import kiln_cli

DEMO = kiln_cli.REPO / "models" / "demo.onnx"


def explain(kiln_bin, *options):
    result = kiln_cli.run(kiln_bin, "explain", DEMO, *options)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_plan_shows_kernels_layouts_fusion_and_reorders(kiln_bin):
    plan = explain(kiln_bin, "--conv-algorithm", "direct")  # oneDNN's plan (Winograd: test_winograd.py)
    # Every conv on a oneDNN JIT kernel; which one depends on the CPU (brgconv:avx512_core on AVX-512,
    # jit:avx2 on AVX2): test_isa.py checks that per ISA tier.
    convs = [line.split()[3] for line in plan.splitlines() if line.split()[1:2] == ["Conv"]]
    assert len(convs) == 4 and all(k.startswith("onednn:") and not k.startswith("onednn:ref") for k in convs), convs
    assert "+sum+relu" in plan  # the residual block's second conv
    assert "fused: Add '/Add'" in plan and "fused: Relu '/Relu'" in plan
    assert ":nhwc" in plan
    assert "Reorder    input:to_nhwc" in plan
    assert "blas:sgemm" in plan  # a 1x10x32 Gemm is below the BLAS threshold


def test_disabled_backends_are_named_as_the_reason(kiln_bin):
    plan = explain(kiln_bin, "--disable", "onednn", "--conv-algorithm", "direct")
    step_lines = [line for line in plan.splitlines() if line[:4].strip().isdigit()]
    assert step_lines and not any("onednn:" in line for line in step_lines)
    assert "not onednn: backend disabled" in plan
    assert "native:conv" in plan
    plan = explain(kiln_bin, "--disable", "blas")
    assert "not blas: backend disabled" in plan


def test_blas_refuses_products_above_its_threshold(kiln_bin, tmp_path):
    weights = numpy_helper.from_array(np.ones((64, 64), np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="big")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 64])], [weights])
    path = tmp_path / "matmul.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    result = kiln_cli.run(kiln_bin, "explain", path)
    assert result.returncode == 0, result.stderr
    assert "not blas: M x N x K = 64 x 64 x 64 is above blas_threshold 32768" in result.stdout


def test_steps_sized_at_run_time_are_marked(kiln_bin, tmp_path):
    graph = helper.make_graph([helper.make_node("NonZero", ["x"], ["y"], name="where_nonzero")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.INT64, None)])
    path = tmp_path / "nonzero.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    result = kiln_cli.run(kiln_bin, "explain", path)
    assert result.returncode == 0, result.stderr
    assert "where_nonzero" in result.stdout
    assert "note: output sized at run time" in result.stdout
    # The planned shape is the bound: one column per element.
    assert "[2, 3] -> [2, 6]" in result.stdout


def test_profile_times_every_step(kiln_bin):
    plan = explain(kiln_bin, "--profile", "3")
    assert "time by op" in plan and "most expensive steps" in plan
    assert " ms" in plan


def test_bench_json(kiln_bin):
    result = kiln_cli.run(kiln_bin, "bench", DEMO, "--json", "--iters", "3", "--warmup", "1", "--threads", "1")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["runtime"] == "kiln" and report["threads"] == 1 and report["iters"] == 3
    assert 0 < report["p10_ms"] <= report["median_ms"] <= report["p90_ms"]
    assert report["flops_per_run"] > 0 and report["gflops"] > 0
    assert report["weights_mb"] > 0 and report["arena_mb"] > 0


def test_the_schema_doc_is_the_field_table(kiln_bin):
    """docs/record_schema.md ends with the table `kiln explain --schema` prints, row for row."""
    result = kiln_cli.run(kiln_bin, "explain", "--schema")
    assert result.returncode == 0, result.stderr
    table = result.stdout
    assert table.startswith("| field |") and "| `refusals` | step, reorder |" in table
    doc = (kiln_cli.REPO / "docs" / "record_schema.md").read_text()
    assert doc.endswith(table), "regenerate the table at the end of docs/record_schema.md: kiln explain --schema"


def test_each_step_lists_the_settings_its_selection_consulted(kiln_bin):
    """A Conv step consulted its precision and, where the Winograd backend is built and was asked,
    conv_algorithm (its option, with the value the plan read)."""
    for algorithm in ("auto", "direct"):
        plan = json.loads(explain(kiln_bin, "--json", "--conv-algorithm", algorithm))
        for step in (s for s in plan["steps"] if s["op"] == "Conv"):
            winograd_asked = any(r["backend"] == "winograd" and r["kind"] != "not_built" for r in step["refusals"])
            winograd_asked = winograd_asked or step["backend"] == "winograd"
            expected = ["conv_precision=fp32"] + ([f"conv_algorithm={algorithm}"] if winograd_asked else [])
            assert step["settings"] == expected, step
    pools = [s for s in json.loads(explain(kiln_bin, "--json"))["steps"] if s["op"] == "MaxPool"]
    assert pools and all(step["settings"] == [] for step in pools)
