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
