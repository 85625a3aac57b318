"""The settings table through the faces Python and the CLI give it (the C++ guard is
tests/unit/settings_table_test.cpp): every row as a keyword of settings() and Session(), in
current(), as a `kiln info` option; KILN_VERBOSE; oneDNN's verbose level from ONEDNN_VERBOSE surviving
a scope; --onednn-verbose and --blas-verbose; the allocator and the choice cache from Python; the
docs listing every setting."""
import os
import subprocess
import sys

import numpy as np
import pytest

import kiln_cli
from conftest import REPO

DEMO = REPO / "models" / "demo.onnx"


@pytest.fixture
def kiln(kiln_module):
    return kiln_module


def other_value(row):
    """A valid value of the row other than its default, as Python passes it."""
    if row["type"] == "bool":
        return not row["default"]
    if row["type"] == "int":
        return row["min"] if row["default"] == row["max"] else min(row["max"], row["default"] + 1)
    if row["type"] == "choice":
        return next(choice for choice in row["choices"] if choice != row["default"])
    if row["type"] == "list":  # every choice (a list that leaves a backend out may not run the demo)
        return row["choices"] if row["default"] != row["choices"] else row["choices"][::-1]
    return None


def value_rows(kiln):
    return [row for row in kiln.backends.table() if row["type"] != "sink"]


def test_the_table_is_what_current_reports(kiln):
    rows = kiln.backends.table()
    assert {row["name"] for row in value_rows(kiln)} == set(kiln.backends.current())
    names = [row["name"] for row in rows]
    assert len(names) == len(set(names))
    for backend in kiln.backends.list_backends():
        assert f"{backend._name}_enabled" in names and f"{backend._name}_verbose" in names
    for row in value_rows(kiln):
        if row["env"] and os.environ.get(row["env"]):
            continue  # the environment set it
        assert kiln.backends.current()[row["name"]] == row["default"], row["name"]


def test_every_setting_through_settings_and_session_keywords(kiln):
    demo_shape = [1, 3, 64, 64]
    x = np.zeros(demo_shape, np.float32)
    for row in value_rows(kiln):
        name, value = row["name"], other_value(row)
        if name == "native_enabled":
            with pytest.raises(ValueError, match="native backend cannot be disabled"):
                kiln.backends.settings(native_enabled=False)
            continue
        before = kiln.backends.current()[name]
        with kiln.backends.settings(**{name: value}):
            assert kiln.backends.current()[name] == value, name
        assert kiln.backends.current()[name] == before, name
        # A session takes the same keyword (verbose ones would print: sent to a list).
        session = kiln.Session(DEMO, verbose_sink=[].append, **{name: value})
        assert session.run({"input": x})["logits"].shape == (1, 10), name


def test_every_setting_through_the_cli(kiln, kiln_bin):
    for row in value_rows(kiln):
        value = other_value(row)
        if row["cli"].startswith("--disable"):
            args = row["cli"].split()
            expected = "0"
        elif row["type"] == "bool" and not row["default"]:
            args, expected = [row["cli"]], "1"  # a flag turns it on
        else:
            # On by default: --name 0; a list as the CLI spells it, comma-separated.
            text = str(int(value)) if isinstance(value, bool) else ",".join(value) if isinstance(value, list) else str(value)
            args, expected = [row["cli"], text], text
        result = kiln_cli.run(kiln_bin, "info", "--settings", *args)
        if row["name"] == "native_enabled":
            assert result.returncode != 0 and "native backend cannot be disabled" in result.stderr
            continue
        assert result.returncode == 0, (args, result.stderr)
        assert f"  {row['name']} = {expected}:" in result.stdout, (args, result.stdout)
    bad = kiln_cli.run(kiln_bin, "info", "--autotune-limit", "65")
    assert bad.returncode != 0 and "--autotune-limit: '65' is not an integer from 0 to 64" in bad.stderr


def test_docs_list_every_setting(kiln):
    docs = (REPO / "docs" / "backends.md").read_text()
    for row in kiln.backends.table():
        assert f"`{row['name']}`" in docs, row["name"]


def run_python(kiln_module, code, **env):
    path = os.path.dirname(os.path.dirname(kiln_module.__file__))
    environment = {key: value for key, value in os.environ.items()
                   if key not in ("ONEDNN_VERBOSE", "DNNL_VERBOSE", "KILN_VERBOSE")}
    environment.update(PYTHONPATH=path, **env)
    return subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True, timeout=300)


# Runs the demo before, inside and after a oneDNN verbose scope, with markers between, and counts
# oneDNN's own lines in each part.
SCOPE_SCRIPT = f"""
import sys, numpy as np, kiln
session = kiln.Session({str(DEMO)!r})
x = {{"input": np.zeros((1, 3, 64, 64), np.float32)}}
session.run(x)
sys.stdout.flush(); print("MARK inside", flush=True)
with kiln.backends.onednn.verbose(2):
    session.run(x)
    sys.stdout.flush()
print("MARK after", flush=True)
session.run(x)
sys.stdout.flush()
"""


def onednn_lines_per_part(stdout):
    parts = {"before": 0, "inside": 0, "after": 0}
    part = "before"
    for line in stdout.splitlines():
        if line.startswith("MARK "):
            part = line.split()[1]
        elif line.startswith("onednn_verbose,exec"):
            parts[part] += 1
    return parts


def test_an_environment_set_onednn_level_survives_a_scope(kiln_module):
    with_env = run_python(kiln_module, SCOPE_SCRIPT, ONEDNN_VERBOSE="1")
    assert with_env.returncode == 0, with_env.stderr
    parts = onednn_lines_per_part(with_env.stdout)
    assert parts["before"] > 0 and parts["inside"] > 0 and parts["after"] > 0, parts
    without = run_python(kiln_module, SCOPE_SCRIPT)
    assert without.returncode == 0, without.stderr
    parts = onednn_lines_per_part(without.stdout)
    assert parts["before"] == 0 and parts["inside"] > 0 and parts["after"] == 0, parts


SESSION_SCRIPT = f"""
import numpy as np, kiln
x = {{"input": np.zeros((1, 3, 64, 64), np.float32)}}
kiln.Session({str(DEMO)!r}, onednn_verbose=1, verbose_sink=[].append).run(x)
print("MARK after", flush=True)
kiln.Session({str(DEMO)!r}).run(x)
"""


def test_a_sessions_onednn_verbose_switches_onednn_for_its_runs(kiln_module):
    result = run_python(kiln_module, SESSION_SCRIPT)
    assert result.returncode == 0, result.stderr
    parts = onednn_lines_per_part(result.stdout)
    assert parts["before"] > 0 and parts["after"] == 0, parts


def test_kiln_verbose_environment_variable(kiln_bin):
    env = dict(os.environ, KILN_VERBOSE="1")
    result = subprocess.run([str(kiln_bin), "run", str(DEMO)], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert sum(line.startswith("kiln_verbose,info,") for line in lines) == 1
    assert any(line.startswith("kiln_verbose,exec,") for line in lines)
    env["KILN_VERBOSE"] = "loud"
    bad = subprocess.run([str(kiln_bin), "run", str(DEMO)], env=env, capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0 and "KILN_VERBOSE: 'loud' is not an integer from 0 to 2" in bad.stderr


def test_cli_backend_verbose_options(kiln_bin):
    onednn = kiln_cli.run(kiln_bin, "run", DEMO, "--onednn-verbose", "1")
    assert onednn.returncode == 0, onednn.stderr
    kiln_lines = [line for line in onednn.stdout.splitlines() if line.startswith("kiln_verbose,exec,")]
    assert kiln_lines and all(line.split(",")[2] == "onednn" for line in kiln_lines)
    assert "onednn_verbose,exec" in onednn.stdout
    blas = kiln_cli.run(kiln_bin, "run", DEMO, "--blas-verbose", "1")
    assert blas.returncode == 0, blas.stderr
    calls = [line for line in blas.stdout.splitlines() if line.startswith("kiln_verbose,call,blas,cblas_sgemm,")]
    executed = [line for line in blas.stdout.splitlines() if line.startswith("kiln_verbose,exec,blas,")]
    assert len(calls) == len(executed) == 1, blas.stdout  # the demo's Gemm: one product
    assert "onednn_verbose" not in blas.stdout


def test_allocator_from_python(kiln):
    allocator = kiln.backends.allocator
    assert allocator.name() == "default"
    assert {"default", "counting"} <= set(allocator.registered())
    allocator.use("counting")
    try:
        allocator.reset_counts()
        session = kiln.Session(DEMO)
        session.run({"input": np.zeros((1, 3, 64, 64), np.float32)})
        counts = allocator.counts()
    finally:
        allocator.use("default")
    assert counts["allocations"] > 0 and counts["peak_live_bytes"] >= 3 * 64 * 64 * 4
    with pytest.raises(ValueError, match="unknown allocator 'arena'"):
        allocator.use("arena")


def test_choice_cache_is_the_processs(kiln):
    """Autotune's decisions outlive the session that timed them: another session of the model plans
    without timing, and explains the same decisions."""
    x = {"input": np.zeros((1, 3, 64, 64), np.float32)}
    kiln.backends.clear_choice_cache()
    session = kiln.Session(DEMO, autotune=True, autotune_limit=2)
    first = session.explain(x)
    decided = kiln.backends.choice_cache_size()
    assert decided > 0 and all(step["rule"] == "autotune" and not step["reused"] for step in first
                               if step["timed"])
    second = kiln.Session(DEMO, autotune=True, autotune_limit=2).explain(x)
    assert kiln.backends.choice_cache_size() == decided
    assert [s["kernel"] for s in second] == [s["kernel"] for s in first]
    for was, now in zip(first, second):
        assert now["refusals"] == was["refusals"] and now["timed"] == was["timed"], now["node"]
        assert now["reused"] == bool(was["timed"]), now["node"]
    kiln.backends.clear_choice_cache()
    assert kiln.backends.choice_cache_size() == 0


def test_pytorchs_names_are_one_alias_table_for_python_c_and_the_cli(kiln, kiln_bin):
    rows = {row["name"] for row in kiln.backends.table()}
    aliases = {alias["name"]: alias for alias in kiln.backends.aliases()}
    assert {"mkldnn.enabled", "quantized.engine", "mha.fastpath_enabled", "opt_einsum.strategy"} <= set(aliases)
    assert all(alias["setting"] in rows for alias in aliases.values())

    # kiln.backends' torch-shaped attributes are the aliases, and the aliases are the settings.
    strategy, engine = kiln.backends.opt_einsum.strategy, kiln.backends.get_alias("quantized.engine")
    try:
        kiln.backends.set_alias("opt_einsum.strategy", "greedy")
        assert kiln.backends.opt_einsum.strategy == "greedy" == kiln.backends.current()["einsum_strategy"]
        kiln.backends.quantized.engine = "native"
        assert kiln.backends.get_alias("quantized.engine") == "native"
        assert kiln.backends.preferred("quantized") == ["native"]
        kiln.backends.set_alias("mha.fastpath_enabled", False)
        assert kiln.backends.mha.get_fastpath_enabled() is False and kiln.backends.current()["mha_fastpath"] is False
    finally:
        kiln.backends.opt_einsum.strategy = strategy
        kiln.backends.set_alias("quantized.engine", engine)
        kiln.backends.mha.set_fastpath_enabled(True)
    with pytest.raises(ValueError, match="quantized.engine is one of default, native, onednn, got 'fbgemm'"):
        kiln.backends.set_alias("quantized.engine", "fbgemm")
    with pytest.raises(ValueError, match="unknown alias 'mkldnn.enable'"):
        kiln.backends.get_alias("mkldnn.enable")

    # The CLI takes them with --set and lists them with their values.
    info = kiln_cli.run(kiln_bin, "info", "--settings", "--set", "mkldnn.enabled=0")
    assert info.returncode == 0, info.stderr
    assert "  onednn_enabled = 0:" in info.stdout
    assert "  mkldnn.enabled = 0: onednn_enabled (torch.backends.mkldnn.enabled)" in info.stdout
    bad = kiln_cli.run(kiln_bin, "info", "--set", "mkldnn.enabled=maybe")
    assert bad.returncode != 0 and "--set mkldnn.enabled (onednn_enabled)" in bad.stderr
