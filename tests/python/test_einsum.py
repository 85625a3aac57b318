"""Einsum: ONNX's conformance cases and random equations against numpy.einsum under every path
setting, the path's costs against numpy.einsum_path (greedy and optimal), the path in explain, and
kiln.backends.opt_einsum."""
import glob
import os
import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

CONFORMANCE = "/usr/share/libonnx-testdata/data/node"
LETTERS = "abcdefgh"


@pytest.fixture(scope="module")
def kiln(kiln_module):
    return kiln_module


def einsum_model(path, equation, arrays):
    dtype = TensorProto.DOUBLE if arrays[0].dtype == np.float64 else TensorProto.FLOAT
    names = [f"x{i}" for i in range(len(arrays))]
    expected = np.einsum(equation, *arrays)
    graph = helper.make_graph([helper.make_node("Einsum", names, ["y"], name="einsum", equation=equation)], "g",
                              [helper.make_tensor_value_info(n, dtype, a.shape) for n, a in zip(names, arrays)],
                              [helper.make_tensor_value_info("y", dtype, expected.shape)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)]), path)
    return str(path), dict(zip(names, arrays))


def relative_error(actual, expected):
    return float(np.abs(actual - expected).max(initial=0) / max(np.abs(expected).max(initial=0), 1e-30))


def conformance_cases():
    return sorted(os.path.basename(p) for p in glob.glob(f"{CONFORMANCE}/test_einsum_*"))


def test_the_suite_has_einsum_cases():
    assert len(conformance_cases()) >= 5


@pytest.mark.parametrize("case", conformance_cases())
def test_conformance_cases_against_numpy(kiln, case):
    model = onnx.load(f"{CONFORMANCE}/{case}/model.onnx")
    equation = next(a.s.decode() for a in model.graph.node[0].attribute if a.name == "equation")
    inputs = {}
    for i, graph_input in enumerate(model.graph.input):
        tensor = onnx.TensorProto()
        with open(f"{CONFORMANCE}/{case}/test_data_set_0/input_{i}.pb", "rb") as f:
            tensor.ParseFromString(f.read())
        inputs[graph_input.name] = numpy_helper.to_array(tensor)
    expected = np.einsum(equation, *inputs.values())
    for optimize in (True, False):
        with kiln.backends.settings(einsum_optimize=optimize):
            actual = list(kiln.Session(f"{CONFORMANCE}/{case}/model.onnx").run(inputs).values())[0]
        assert actual.dtype == expected.dtype and actual.shape == expected.shape
        assert relative_error(actual, expected) <= 1e-12, (case, optimize)


def random_equation(rng, operands, with_ellipsis):
    sizes = {c: int(rng.integers(1, 5)) for c in LETTERS}
    terms, shapes = [], []
    ellipsis = [int(rng.integers(2, 4))] if with_ellipsis else []
    for _ in range(operands):
        labels = "".join(rng.choice(list(LETTERS[:6]), size=int(rng.integers(1, 4))))
        if rng.random() < 0.15:
            labels += labels[0]  # a diagonal
        if with_ellipsis:
            terms.append("..." + labels)
            shapes.append(tuple(ellipsis if rng.random() < 0.7 else [1]) + tuple(sizes[c] for c in labels))
        else:
            terms.append(labels)
            shapes.append(tuple(sizes[c] for c in labels))
    used = sorted(set("".join(terms).replace(".", "")))
    if rng.random() < 0.3:
        return ",".join(terms), shapes  # implicit output
    output = "".join(rng.permutation([c for c in used if rng.random() < 0.5]))
    return ",".join(terms) + "->" + ("..." if with_ellipsis else "") + output, shapes


def test_random_equations_against_numpy_under_every_path_setting(kiln, tmp_path):
    rng = np.random.default_rng(7)
    for index in range(40):
        equation, shapes = random_equation(rng, int(rng.integers(1, 6)), with_ellipsis=index % 5 == 4)
        dtype = np.float64 if index % 2 else np.float32
        arrays = [rng.standard_normal(s).astype(dtype) for s in shapes]
        path, inputs = einsum_model(tmp_path / f"e{index}.onnx", equation, arrays)
        expected = np.einsum(equation, *[a.astype(np.float64) for a in arrays])
        for optimize, strategy in [(False, "auto"), (True, "auto"), (True, "greedy"), (True, "optimal")]:
            with kiln.backends.settings(einsum_optimize=optimize, einsum_strategy=strategy):
                actual = kiln.Session(path).run(inputs)["y"]
            assert actual.shape == expected.shape, equation
            tolerance = 1e-5 if dtype == np.float32 else 1e-12
            assert relative_error(actual, expected) <= tolerance, (equation, shapes, optimize, strategy)


def numpy_counts(equation, arrays, strategy):
    path, text = np.einsum_path(equation, *arrays, optimize=strategy)
    flops = float(re.search(r"Optimized FLOP count:\s+(\S+)", text).group(1))
    largest = float(re.search(r"Largest intermediate:\s+(\S+)", text).group(1))
    naive = float(re.search(r"Naive FLOP count:\s+(\S+)", text).group(1))
    return [tuple(step) for step in path[1:]], flops, largest, naive


def test_path_costs_match_numpy_einsum_path(kiln):
    rng = np.random.default_rng(11)
    for _ in range(60):
        operands = int(rng.integers(3, 7))
        sizes = {c: int(rng.integers(2, 9)) for c in LETTERS}
        terms = ["".join(rng.choice(list(LETTERS), size=int(rng.integers(1, 4)), replace=False)) for _ in range(operands)]
        used = sorted(set("".join(terms)))
        equation = ",".join(terms) + "->" + "".join(c for c in used if rng.random() < 0.3)
        arrays = [np.empty([sizes[c] for c in t]) for t in terms]
        for strategy in ("greedy", "optimal"):
            ours = kiln.backends.opt_einsum.contract_path(equation, *arrays, strategy=strategy, optimize=True)
            path, flops, largest, naive = numpy_counts(equation, arrays, strategy)
            # numpy prints 4 significant digits.
            assert ours["optimized_flops"] == pytest.approx(flops, rel=1e-3), (equation, strategy, ours, path)
            assert ours["largest_intermediate"] == pytest.approx(largest, rel=1e-3), (equation, strategy)
            assert ours["naive_flops"] == pytest.approx(naive, rel=1e-3), (equation, strategy)
            if strategy == "greedy":
                assert ours["path"] == path, (equation, ours, path)


def test_explain_shows_the_path_and_optimal_is_refused_above_eight_operands(kiln, tmp_path):
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in [(4, 5), (5, 6), (6, 3)]]
    path, inputs = einsum_model(tmp_path / "chain.onnx", "ij,jk,kl->il", arrays)
    with kiln.backends.settings(einsum_strategy="greedy"):
        step = kiln.Session(path).explain(inputs)[0]
    assert step["op"] == "Einsum" and step["kernel"].startswith("native:einsum")
    assert step["notes"][0].startswith("contraction path ((1, 2), (0, 1)), greedy:"), step["notes"]
    with kiln.backends.settings(einsum_optimize=False):
        assert "left to right" in kiln.Session(path).explain(inputs)[0]["notes"][0]

    chain = [rng.standard_normal((2, 2)).astype(np.float32) for _ in range(9)]
    equation = ",".join(LETTERS[i] + "abcdefghij"[i + 1] for i in range(8)) + ",ij->aj"
    path, inputs = einsum_model(tmp_path / "nine.onnx", equation, chain)
    with kiln.backends.settings(einsum_strategy="optimal"):
        with pytest.raises(ValueError, match="refused above 8 operands; this Einsum has 9"):
            kiln.Session(path).run(inputs)
    with kiln.backends.settings(einsum_strategy="auto"):
        actual = kiln.Session(path).run(inputs)["y"]
    assert relative_error(actual, np.einsum(equation, *[a.astype(np.float64) for a in chain])) <= 1e-5


def test_opt_einsum_controls(kiln):
    controls = kiln.backends.opt_einsum
    assert controls.is_available()
    assert controls.enabled is True and controls.strategy == "auto"
    try:
        controls.enabled = False
        controls.strategy = "optimal"
        assert kiln.backends.current()["einsum_optimize"] is False
        assert kiln.backends.current()["einsum_strategy"] == "optimal"
    finally:
        controls.enabled = True
        controls.strategy = "auto"
    with pytest.raises(ValueError, match="einsum_strategy"):
        controls.strategy = "fastest"
