"""Bad input never crashes kiln: each case exits non-zero with one clear `kiln: error:` line that
names what was wrong. Run against the sanitizer build too (ctest --preset asan -L bad_input).

The malformed models and inputs come from make_bad_models.py, written into pytest's tmp_path."""
import numpy as np
import pytest

import kiln_cli
import make_bad_models as bad


def expect_error(kiln_bin, *args, mentions=()):
    result = kiln_cli.run(kiln_bin, *args)
    # A negative return code is a signal (a crash); sanitizer reports also land on stderr.
    assert result.returncode > 0, f"expected a clean failure, got {result.returncode}: {result.stderr}"
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one error line, got: {result.stderr}"
    assert lines[0].startswith("kiln: error:"), lines[0]
    for text in mentions:
        assert text in lines[0], f"{text!r} not in {lines[0]!r}"
    return lines[0]


def test_missing_model_file(kiln_bin, tmp_path):
    expect_error(kiln_bin, "run", tmp_path / "nope.onnx", mentions=["nope.onnx"])


def test_truncated_model(kiln_bin, demo_model, tmp_path):
    expect_error(kiln_bin, "run", bad.truncated_model(tmp_path, demo_model), mentions=["truncated.onnx"])


def test_random_bytes(kiln_bin, tmp_path):
    expect_error(kiln_bin, "run", bad.random_bytes(tmp_path), mentions=["random.onnx"])


def test_protobuf_that_is_not_a_model(kiln_bin, tmp_path):
    expect_error(kiln_bin, "run", bad.tensor_proto(tmp_path), mentions=["tensor.onnx", "not"])


def test_unknown_op_names_op_node_and_opset(kiln_bin, tmp_path):
    expect_error(kiln_bin, "run", bad.unknown_op(tmp_path),
                 mentions=[bad.UNKNOWN_OP, bad.NODE_NAME, f"opset {bad.OPSET}"])


def test_initializer_shorter_than_its_shape(kiln_bin, tmp_path):
    expect_error(kiln_bin, "run", bad.short_initializer(tmp_path),
                 mentions=[f"'{bad.SHORT_INITIALIZER}'", "8 bytes", "expected 16"])


def test_external_data_escaping_the_model_folder(kiln_bin, tmp_path):
    expect_error(kiln_bin, "run", bad.external_data_escaping(tmp_path),
                 mentions=[f"'{bad.SHORT_INITIALIZER}'", "../outside.bin", "escapes"])


def test_external_data_at_an_absolute_path(kiln_bin, tmp_path):
    expect_error(kiln_bin, "run", bad.external_data_absolute(tmp_path),
                 mentions=[f"'{bad.SHORT_INITIALIZER}'", "absolute.bin"])


def test_external_data_file_missing(kiln_bin, tmp_path):
    expect_error(kiln_bin, "run", bad.external_data_missing(tmp_path),
                 mentions=[f"'{bad.SHORT_INITIALIZER}'", "missing.bin"])



@pytest.mark.parametrize("make,mentions", [(bad.resize_zero_scale, ["scale 0", "dim 2", "positive"]),
                                           (bad.resize_negative_scale, ["scale -2", "dim 2", "positive"]),
                                           (bad.resize_scales_and_sizes, ["scales or sizes, not both"]),
                                           (bad.resize_sizes_wrong_length, ["sizes has 2 entries", "expected 4"]),
                                           (bad.resize_sizes_beyond_memory, ["needs more memory than this machine has"]),
                                           (bad.resize_tables_beyond_memory,
                                            ["interpolation tables", "more than this machine's memory"])],
                         ids=["zero_scale", "negative_scale", "scales_and_sizes", "sizes_length", "beyond_memory",
                              "tables_beyond_memory"])
def test_resize_with_bad_scales_or_sizes(kiln_bin, tmp_path, make, mentions):
    expect_error(kiln_bin, "run", make(tmp_path), mentions=[f"'{bad.NODE_NAME}'", "Resize", *mentions])


def test_nms_center_point_box_not_0_or_1(kiln_bin, tmp_path):
    expect_error(kiln_bin, "run", bad.nms_center_point_box_2(tmp_path),
                 mentions=[f"'{bad.NODE_NAME}'", "NonMaxSuppression", "center_point_box", "got 2"])


def test_topk_k_larger_than_the_axis(kiln_bin, tmp_path):
    expect_error(kiln_bin, "run", bad.topk_k_too_large(tmp_path),
                 mentions=[f"'{bad.NODE_NAME}'", "TopK", f"k = {bad.TOPK_K}", "[1, 4]"])


def test_conv_transpose_output_shape_contradicting_pads(kiln_bin, tmp_path):
    expect_error(kiln_bin, "run", bad.conv_transpose_output_shape_vs_pads(tmp_path),
                 mentions=[f"'{bad.NODE_NAME}'", "ConvTranspose", "output_shape 10", "pads", "give 7"])


def test_conv_transpose_output_padding_not_below_stride(kiln_bin, tmp_path):
    expect_error(kiln_bin, "run", bad.conv_transpose_output_padding(tmp_path),
                 mentions=[f"'{bad.NODE_NAME}'", "ConvTranspose", "output_padding 2", "stride"])


def test_gather_nd_index_out_of_range_at_run_time(kiln_bin, tmp_path):
    model = bad.gather_nd_index_out_of_range(tmp_path)
    assert kiln_cli.run(kiln_bin, "explain", model).returncode == 0  # x is an input: only a run sees the index
    expect_error(kiln_bin, "run", model,
                 mentions=[f"'{bad.NODE_NAME}'", "GatherND", f"index {bad.GATHER_ND_INDEX}", "size 3"])


def test_scatter_elements_reduction_max_before_opset_18(kiln_bin, tmp_path):
    expect_error(kiln_bin, "run", bad.scatter_elements_max_at_opset_16(tmp_path),
                 mentions=[f"'{bad.NODE_NAME}'", "ScatterElements", "'max'", "opset 16"])


def test_nonzero_output_read_by_another_node_runs(kiln_bin, tmp_path):
    # Not bad input any more: the Transpose is planned when the run knows NonZero's size.
    result = kiln_cli.run(kiln_bin, "run", bad.nonzero_feeds_a_node(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "y: int64 [" in result.stdout


def test_loop_body_missing_outputs(kiln_bin, tmp_path):
    expect_error(kiln_bin, "run", bad.loop_body_missing_outputs(tmp_path),
                 mentions=[f"'{bad.NODE_NAME}' (Loop)", "returns the condition and its 1 loop-carried values, got 1"])


def test_if_branch_reads_undefined(kiln_bin, tmp_path):
    expect_error(kiln_bin, "run", bad.if_branch_reads_undefined(tmp_path),
                 mentions=[f"'{bad.NODE_NAME}' (If)", "'nowhere'", "neither it nor an enclosing graph"])


def test_loop_trip_count_absurd(kiln_bin, tmp_path):
    m = tmp_path / "m.npy"
    np.save(m, np.array(2**40, np.int64))
    expect_error(kiln_bin, "run", bad.loop_trip_count_absurd(tmp_path), "--input", f"M={m}",
                 mentions=[f"'{bad.NODE_NAME}' (Loop)", "exceeds kiln's limit of 16777216 iterations"])


def test_unsupported_opset(kiln_bin, tmp_path):
    expect_error(kiln_bin, "run", bad.opset_22(tmp_path),
                 mentions=["opset_22.onnx", f"opset {bad.UNSUPPORTED_OPSET}", "7 to 21"])


def test_grid_sample_on_5d_input(kiln_bin, tmp_path):
    expect_error(kiln_bin, "run", bad.grid_sample_5d(tmp_path),
                 mentions=[f"'{bad.NODE_NAME}'", "GridSample", "not supported", "[1, 1, 2, 2, 2]"])

@pytest.mark.parametrize("make,mentions", [(bad.wrong_rank_input, ["'input'", "rank 4"]),
                                           (bad.wrong_shape_input, ["'input'", "[batch, 3, 64, 64]", "[1, 4, 64, 64]"])],
                         ids=["rank", "shape"])
def test_input_with_wrong_rank_or_shape(kiln_bin, demo_model, tmp_path, make, mentions):
    expect_error(kiln_bin, "run", demo_model, "--input", f"input={make(tmp_path)}", mentions=mentions)


def test_input_with_wrong_dtype(kiln_bin, demo_model, tmp_path):
    expect_error(kiln_bin, "run", demo_model, "--input", f"input={bad.wrong_dtype_input(tmp_path)}",
                 mentions=["'input'", "float32", "float64"])


def test_unknown_input_name(kiln_bin, demo_model, tmp_path):
    expect_error(kiln_bin, "run", demo_model, "--input", f"nosuch={bad.good_input(tmp_path)}",
                 mentions=["'nosuch'", "'input'"])


def test_input_binding_without_equals(kiln_bin, demo_model):
    expect_error(kiln_bin, "run", demo_model, "--input", "input", mentions=["NAME=FILE.npy"])


def test_unknown_option(kiln_bin, demo_model):
    expect_error(kiln_bin, "run", demo_model, "--frobnicate", mentions=["--frobnicate"])


@pytest.mark.parametrize("count", ["-1", "two", "5000"])
def test_bad_thread_count(kiln_bin, demo_model, count):
    expect_error(kiln_bin, "run", demo_model, "--threads", count, mentions=["--threads", count])


def test_malformed_npy(kiln_bin, demo_model, tmp_path):
    expect_error(kiln_bin, "run", demo_model, "--input", f"input={bad.malformed_npy(tmp_path)}",
                 mentions=["malformed.npy"])


def test_demo_model_runs(kiln_bin, demo_model, tmp_path):
    result = kiln_cli.run(kiln_bin, "run", demo_model, "--output-dir", tmp_path)  # input: seeded random data
    assert result.returncode == 0, result.stderr
    assert "logits: float32 [1, 10]" in result.stdout
    assert np.load(tmp_path / "logits.npy").shape == (1, 10)
