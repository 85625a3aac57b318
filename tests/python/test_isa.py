"""The ISA tier in effect through the CLI and the Python module: `kiln info` reports it and its
source, KILN_ISA and set_max_isa cap it (native kernels and oneDNN alike), and bf16 requested where
the tier has no bf16 dot products gives exactly the float32 plan plus a note. Each cap runs in its
own process: the tier is fixed once kernels were chosen, and oneDNN takes a cap only before its first
primitive."""
import os
import re
import subprocess
import sys

import pytest

import kiln_cli

DEMO = kiln_cli.REPO / "models" / "demo.onnx"
TIERS = ["baseline", "avx2", "avx512", "avx512_bf16", "amx"]
# oneDNN's names for the tiers (what a cap sets), and the ISA its float32 conv kernels name
# (`onednn:jit:avx2+relu`, `onednn:brgconv:avx512_core+relu`) under each tier.
ONEDNN_ISA = {"baseline": "sse41", "avx2": "avx2", "avx512": "avx512_core", "avx512_bf16": "avx512_core_bf16",
              "amx": "avx512_core_amx"}
ONEDNN_FP32_CONV = {"baseline": "sse41", "avx2": "avx2", "avx512": "avx512_core", "avx512_bf16": "avx512_core",
                    "amx": "avx512_core"}


def run_kiln(kiln_bin, *args, isa=None):
    env = dict(os.environ)
    env.pop("KILN_ISA", None)
    if isa is not None:
        env["KILN_ISA"] = isa
    return subprocess.run([str(kiln_bin), *map(str, args)], capture_output=True, text=True, env=env, timeout=300)


def info(kiln_bin, isa=None):
    result = run_kiln(kiln_bin, "info", isa=isa)
    assert result.returncode == 0, result.stderr
    return result.stdout


def cpu_best(kiln_bin):
    return re.search(r"^cpu capability: (\w+)", info(kiln_bin), re.M).group(1)


def capped(kiln_bin, tier):
    """The tier in effect when KILN_ISA asks for `tier` on this CPU."""
    return min(tier, cpu_best(kiln_bin), key=TIERS.index)


def plan_steps(kiln_bin, *options, isa=None):
    """(op, kernel, note) per step of `kiln explain` on the demo model."""
    result = run_kiln(kiln_bin, "explain", DEMO, *options, isa=isa)
    assert result.returncode == 0, result.stderr
    steps = []
    for line in result.stdout.splitlines():
        step = re.match(r"^\s*\d+ (\S+)\s+\S+\s+(\S+)", line)
        if step:
            steps.append([step.group(1), step.group(2), ""])
        elif line.strip().startswith("note:") and steps:
            steps[-1][2] = line.strip()
    return steps


def test_info_reports_the_tier_in_effect_and_its_source(kiln_bin):
    text = info(kiln_bin)
    best = cpu_best(kiln_bin)
    assert best in TIERS
    assert re.search(rf"^isa in effect: {best} \(from cpu\); oneDNN dispatches up to \w+$", text, re.M), text
    assert re.search(r"^cpu: .+ \(\w+ family \d+ model \d+\)$", text, re.M), text
    expected = capped(kiln_bin, "avx2")
    assert re.search(rf"^isa in effect: {expected} \(from KILN_ISA.*\); oneDNN dispatches up to "
                     rf"{ONEDNN_ISA[expected]}$", info(kiln_bin, "avx2"), re.M)
    asked_too_much = info(kiln_bin, "amx")
    if best != "amx":
        assert f"isa in effect: {best} (from KILN_ISA, which asked for amx; the cpu's best is {best})" in asked_too_much


def test_an_unknown_tier_is_an_error_naming_kiln_isa(kiln_bin):
    result = run_kiln(kiln_bin, "info", isa="avx512f")
    assert result.returncode != 0
    assert result.stderr.strip() == (
        "kiln: error: KILN_ISA must be one of baseline, avx2, avx512, avx512_bf16, amx; got 'avx512f'")


@pytest.mark.parametrize("tier", ["avx2", "baseline"])
def test_kiln_isa_caps_onednn_and_native_kernels(kiln_bin, tier):
    in_effect = capped(kiln_bin, tier)
    convs = [kernel for op, kernel, _ in plan_steps(kiln_bin, "--conv-algorithm", "direct", isa=tier) if op == "Conv"]
    assert convs and all(f":{ONEDNN_FP32_CONV[in_effect]}" in kernel for kernel in convs), convs
    # Native's and Winograd's vector variants follow the tier too ("winograd:f2x2_3x3:avx2+relu").
    variant = {"baseline": "baseline", "avx2": "avx2"}.get(in_effect, "avx512")
    for args in (("--disable", "onednn"), ("--disable", "onednn", "--conv-algorithm", "winograd")):
        kernels = [kernel for op, kernel, _ in plan_steps(kiln_bin, *args, isa=tier) if op == "Conv"]
        assert kernels and all(re.search(rf":{variant}(\+|$)", kernel) for kernel in kernels), kernels


def test_bf16_without_bf16_dot_products_is_the_fp32_plan_plus_a_note(kiln_bin):
    # The widest tier without bf16 dot products: on a bf16 CPU KILN_ISA=avx512 removes them.
    tier = capped(kiln_bin, "avx512")
    # conv_algorithm direct: under auto each process times its own choice between Winograd and oneDNN.
    fp32 = plan_steps(kiln_bin, "--conv-algorithm", "direct", isa=tier)
    bf16 = plan_steps(kiln_bin, "--precision", "bf16", "--conv-algorithm", "direct", isa=tier)
    assert [(op, kernel) for op, kernel, _ in bf16] == [(op, kernel) for op, kernel, _ in fp32]
    note = (f"note: precision bf16 requested, float32 used: the ISA in effect ({tier}, from KILN_ISA) "
            "has no bf16 dot products (AVX512_BF16 or AMX)")
    for op, kernel, step_note in bf16:
        assert step_note == (note if op in ("Conv", "Gemm") else ""), (op, kernel, step_note)


def test_bf16_runs_in_bf16_where_the_tier_has_it(kiln_bin):
    if TIERS.index(cpu_best(kiln_bin)) < TIERS.index("avx512_bf16"):
        pytest.skip("this CPU has no AVX512_BF16 or AMX: the fallback test covers it")
    for op, kernel, note in plan_steps(kiln_bin, "--precision", "bf16"):
        if op in ("Conv", "Gemm"):
            assert kernel.startswith("onednn:") and ":bf16" in kernel and not note, (op, kernel, note)


SET_MAX_ISA = """
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import kiln
b = kiln.backends
b.cpu.set_max_isa("avx2")
print(b.cpu.isa(), b.cpu.isa_source(), b.onednn.isa())
session = kiln.Session(sys.argv[2])
x = np.zeros([d if isinstance(d, int) else 1 for d in session.inputs[0]["shape"]], np.float32)
print(" ".join(step["kernel"] for step in session.explain({session.inputs[0]["name"]: x}) if step["op"] == "Conv"))
try:
    b.cpu.set_max_isa("baseline")
except ValueError as error:
    print(error)
"""


def test_set_max_isa_caps_before_first_use_and_is_an_error_after(kiln_module):
    package = os.path.dirname(os.path.dirname(kiln_module.__file__))
    env = dict(os.environ)
    env.pop("KILN_ISA", None)
    result = subprocess.run([sys.executable, "-c", SET_MAX_ISA, package, str(DEMO)], capture_output=True,
                            text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    tier_line, kernels_line, error_line = result.stdout.strip().splitlines()
    tier = min("avx2", kiln_module.backends.cpu.best_isa(), key=TIERS.index)
    assert tier_line == f"{tier} api {ONEDNN_ISA[tier]}"
    assert all(f":{ONEDNN_FP32_CONV[tier]}" in kernel for kernel in kernels_line.split()), kernels_line
    assert error_line.startswith(f"set_max_isa(baseline): the ISA is already fixed at {tier} (from api)")
