"""The Python module: sessions with numpy in and out (zero-copy), metadata, errors mapped to Python
exceptions, kiln.backends settings as globals and context managers, verbose sinks, and
`python3 -m kiln`."""
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from conftest import REPO

DEMO = REPO / "models" / "demo.onnx"


@pytest.fixture
def kiln(kiln_module):
    """The module; global settings a test changes (the global faces are under test) are put back."""
    saved = kiln_module._kiln.backends.global_values()
    yield kiln_module
    kiln_module.backends.set_settings(verbose_sink=None, **saved)


def demo_input(kiln, seed=0):
    session = kiln.Session(DEMO)
    declared = session.inputs[0]
    shape = [d if isinstance(d, int) else 1 for d in declared["shape"]]
    return declared["name"], np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_session_runs_and_describes_the_model(kiln):
    session = kiln.Session(DEMO)
    assert [i["dtype"] for i in session.inputs] == ["float32"]
    name, x = demo_input(kiln)
    outputs = session.run({name: x})
    assert set(outputs) == {o["name"] for o in session.outputs}
    out = next(iter(outputs.values()))
    assert out.dtype == np.float32 and out.flags["C_CONTIGUOUS"]
    # Same result on the native reference alone (values, not just "it ran").
    with kiln.backends.settings(onednn_enabled=False, blas_enabled=False):
        reference = next(iter(session.run({name: x}).values()))
    np.testing.assert_allclose(out, reference, rtol=1e-4, atol=1e-4 * max(1.0, np.abs(reference).max()))


def test_outputs_own_their_memory_after_the_session_is_gone(kiln):
    name, x = demo_input(kiln)
    session = kiln.Session(DEMO)
    out = next(iter(session.run({name: x}).values()))
    expected = out.copy()
    del session
    np.testing.assert_array_equal(out, expected)


def test_non_contiguous_inputs_are_accepted(kiln):
    name, x = demo_input(kiln)
    session = kiln.Session(DEMO)
    strided = np.asfortranarray(x)
    np.testing.assert_array_equal(next(iter(session.run({name: strided}).values())),
                                  next(iter(session.run({name: x}).values())))


def test_byte_swapped_inputs_are_read_by_value(kiln):
    # '>f4' is named float32 too; its bytes must be converted, not read as they lie.
    name, x = demo_input(kiln)
    session = kiln.Session(DEMO)
    swapped = x.astype(x.dtype.newbyteorder(">" if x.dtype.byteorder != ">" else "<"))
    assert not swapped.dtype.isnative
    np.testing.assert_array_equal(next(iter(session.run({name: swapped}).values())),
                                  next(iter(session.run({name: x}).values())))


def test_errors_map_to_python_exceptions(kiln):
    name, x = demo_input(kiln)
    session = kiln.Session(DEMO)
    with pytest.raises(TypeError, match="float64|must be float32"):
        session.run({name: x.astype(np.float64)})
    with pytest.raises(ValueError, match="unknown input 'nope'"):
        session.run({name: x, "nope": x})
    with pytest.raises(ValueError, match="missing input"):
        session.run({})
    with pytest.raises(ValueError, match=name):
        session.run({name: x[:, :1]})  # the demo's channel dim is fixed
    with pytest.raises(TypeError, match="dict"):
        session.run([x])
    with pytest.raises((ValueError, RuntimeError), match="no_such.onnx"):
        kiln.Session("no_such.onnx")
    with pytest.raises(ValueError, match="unknown setting 'fast' \\(known: onednn_enabled, "):
        kiln.Session(DEMO, fast=True)
    with pytest.raises(ValueError, match="native backend cannot be disabled"):
        kiln.backends.native.enabled = False
    with pytest.raises(ValueError, match="'fp32' or 'bf16'"):
        kiln.backends.settings(precision="fp16")
    with pytest.raises(TypeError, match="'deterministic' expects True or False"):
        kiln.backends.settings(deterministic=1)
    with pytest.raises(ValueError, match="unknown setting 'speed' of backend onednn"):
        kiln.backends.onednn.settings(speed=1)


def test_a_run_control_cancels_or_times_out_runs(kiln):
    name, x = demo_input(kiln)
    session = kiln.Session(DEMO)
    expected = session.run({name: x}, control=kiln.RunControl())
    cancelled = kiln.RunControl()
    cancelled.cancel()
    assert cancelled.cancelled()
    with pytest.raises(kiln.CancelledError, match="cancelled"):
        session.run({name: x}, control=cancelled)
    with pytest.raises(kiln.CancelledError):
        session.run_async({name: x}, control=cancelled).wait()
    assert issubclass(kiln.CancelledError, RuntimeError)
    expired = kiln.RunControl()
    expired.set_timeout(0)
    with pytest.raises(TimeoutError, match="deadline passed"):
        session.run({name: x}, control=expired)
    generous = kiln.RunControl()
    generous.set_timeout(3600)
    out = session.run_async({name: x}, control=generous).wait()
    assert all(np.array_equal(out[k], expected[k]) for k in expected)
    with pytest.raises(ValueError, match="timeout"):
        generous.set_timeout(-1)
    with pytest.raises(TypeError, match="kiln.RunControl"):
        session.run({name: x}, control=True)


def test_backend_information(kiln):
    b = kiln.backends
    assert b.onednn.is_built() and b.onednn.is_available() and b.onednn.version().startswith("2.")
    assert "OpenBLAS" in b.blas.library()
    assert b.native.enabled is True
    assert b.openmp.is_available()
    assert b.cuda.is_built() is False and b.cuda.is_available() is False
    assert isinstance(b.cpu.capability(), list)
    assert kiln.get_num_threads() >= 1
    assert "intra-op threads" in kiln.parallel_info()


def test_globals_and_context_managers_nest_and_restore(kiln):
    b = kiln.backends
    b.onednn.enabled = False
    assert b.onednn.enabled is False
    b.onednn.enabled = True
    with b.settings(onednn_enabled=False, deterministic=True):
        assert b.onednn.enabled is False and b.deterministic is True
        with b.onednn.settings(enabled=True):
            assert b.onednn.enabled is True and b.deterministic is True
        assert b.onednn.enabled is False
    assert b.onednn.enabled is True and b.deterministic is False
    with pytest.raises(KeyError):
        with b.settings(precision="bf16"):
            assert b.conv_precision == "bf16" and b.matmul_precision == "bf16"
            raise KeyError("leave the scope by an exception")
    assert b.conv_precision == "fp32"
    b.autotune_limit = 2
    assert b.autotune_limit == 2 and b.current()["autotune_limit"] == 2


def test_guards_are_per_thread(kiln):
    seen = {}
    with kiln.backends.settings(onednn_enabled=False):
        thread = threading.Thread(target=lambda: seen.update(enabled=kiln.backends.onednn.enabled))
        thread.start()
        thread.join()
        assert kiln.backends.onednn.enabled is False
    assert seen["enabled"] is True


def test_profiling_session_prints_exactly_one_run(kiln):
    name, x = demo_input(kiln)
    session = kiln.Session(DEMO)
    lines = []
    for _ in range(100):
        session.run({name: x})
    with kiln.backends.verbose(1, sink=lines.append):
        session.run({name: x})
    for _ in range(100):
        session.run({name: x})
    executed = [line for line in lines if line.startswith("kiln_verbose,exec,")]
    steps = session.explain({name: x})
    assert 0 < len(executed) <= len(steps)
    for line in executed:
        fields = line.split(",")
        assert len(fields) == 11, line
        assert fields[2] in ("onednn", "blas", "winograd", "native")
        assert fields[6].startswith("in:float32")
        assert float(fields[10]) >= 0


def test_cascaded_models_print_only_the_middle_one(kiln):
    name, x = demo_input(kiln)
    models = [kiln.Session(DEMO) for _ in range(3)]
    lines = []
    y = models[0].run({name: x})
    with kiln.backends.verbose(1, sink=lines.append):
        middle = models[1].run({name: x})
    models[2].run({name: x})
    per_run = [line for line in lines if line.startswith("kiln_verbose,exec,")]
    lines.clear()
    with kiln.backends.verbose(1, sink=lines.append):
        models[1].run({name: x})
    assert len(per_run) == len([line for line in lines if line.startswith("kiln_verbose,exec,")]) > 0
    assert set(y) == set(middle)


def test_disabling_onednn_changes_kernels_in_verbose_and_explain(kiln):
    name, x = demo_input(kiln)
    session = kiln.Session(DEMO)
    fast = session.run({name: x})
    lines = []
    with kiln.backends.settings(onednn_enabled=False, verbose=1, verbose_sink=lines.append):
        native = session.run({name: x})
        assert all(step["backend"] != "onednn" for step in session.explain({name: x}))
    backends_used = {line.split(",")[2] for line in lines if line.startswith("kiln_verbose,exec,")}
    assert "onednn" not in backends_used
    assert any(step["backend"] == "onednn" for step in session.explain({name: x}))
    for key in fast:
        np.testing.assert_allclose(fast[key], native[key], rtol=1e-4, atol=1e-4 * max(1.0, np.abs(native[key]).max()))


def test_verbose_callback_sees_lines_from_runs_on_other_threads(kiln):
    name, x = demo_input(kiln)
    session = kiln.Session(DEMO, verbose=1)
    lines = []
    kiln.backends.set_verbose(0, sink=lines.append)
    thread = threading.Thread(target=lambda: session.run({name: x}))
    thread.start()
    thread.join()
    assert any(line.startswith("kiln_verbose,exec,") for line in lines)


def test_verbose_to_a_file(kiln, tmp_path):
    name, x = demo_input(kiln)
    log = tmp_path / "verbose.log"
    with kiln.backends.verbose(1, sink=log):
        kiln.Session(DEMO).run({name: x})
    assert "kiln_verbose,exec," in log.read_text()


def test_primitive_cache(kiln):
    name, x = demo_input(kiln)
    kiln.Session(DEMO).run({name: x})
    cache = kiln.backends.onednn.primitive_cache
    capacity = cache.capacity
    assert cache.size > 0
    cache.clear()
    assert cache.size == 0 and cache.capacity == capacity
    cache.capacity = 5
    assert cache.capacity == 5
    cache.capacity = capacity


def test_deterministic_demo_is_bitwise_stable(kiln):
    name, x = demo_input(kiln)
    session = kiln.Session(DEMO, deterministic=True)
    with kiln.backends.settings(threads=2):
        first = next(iter(session.run({name: x}).values()))
        for _ in range(20):
            assert np.array_equal(next(iter(session.run({name: x}).values())), first)
    with kiln.backends.settings(threads=1):
        assert np.array_equal(next(iter(session.run({name: x}).values())), first)


def test_python_dash_m_kiln_runs_the_cli(kiln_module):
    env = dict(os.environ, PYTHONPATH=str(os.path.dirname(os.path.dirname(kiln_module.__file__))))
    result = subprocess.run([sys.executable, "-m", "kiln", "info"], env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("kiln ")
    bad = subprocess.run([sys.executable, "-m", "kiln", "frobnicate"], env=env, capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2 and "unknown command 'frobnicate'" in bad.stderr


def test_explain_gives_what_the_cli_prints(kiln_module, kiln):
    # One formatter: the steps Python's explain_text() lists are the lines `kiln explain` prints.
    # conv_algorithm direct: auto's choices are timed per process, and its reasons carry the times.
    name, x = demo_input(kiln)
    session = kiln.Session(DEMO, conv_algorithm="direct")
    text = session.explain_text({name: x})
    env = dict(os.environ, PYTHONPATH=str(os.path.dirname(os.path.dirname(kiln_module.__file__))))
    cli = subprocess.run([sys.executable, "-m", "kiln", "explain", str(DEMO), "--conv-algorithm", "direct"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0, cli.stderr
    assert text.splitlines()[1:] == cli.stdout.splitlines()[1:]  # all but the title line

    steps = session.explain({name: x}, profile=3)
    assert len(steps) == int(text.splitlines()[1].split()[0])
    for step in steps:
        assert len(step["input_shapes"]) == len(step["input_layouts"])
        assert len(step["output_shapes"]) == len(step["output_layouts"])
        assert step["ms"] is not None and step["ms"] >= 0
        assert f"{step['op']}" in text and step["kernel"] in text
    fused = [f for step in steps for f in step["fused"]]
    assert len(fused) == int(text.splitlines()[1].split(";")[1].split()[0])  # "N nodes fused"
    profiled = session.explain_text({name: x}, profile=3)
    assert "time by op (median of 3 runs):" in profiled and "most expensive steps" in profiled


def test_run_async_matches_run_and_raises_through_the_future(kiln):
    session = kiln.Session(DEMO)
    name, x = demo_input(kiln)
    expected = session.run({name: x})
    future = session.run_async({name: x})
    outputs = future.wait()
    assert future.done()
    for key, value in expected.items():
        np.testing.assert_array_equal(outputs[key], value)
    assert future.result().keys() == expected.keys()  # may be waited for again
    bad = session.run_async({"not_an_input": x})
    with pytest.raises(ValueError, match="unknown input 'not_an_input'"):
        bad.wait()
    wrong_dtype = session.run_async({name: x.astype(np.float64)})
    with pytest.raises(TypeError, match="must be float32"):
        wrong_dtype.wait()


def test_run_async_keeps_inputs_and_session_alive(kiln):
    name, x = demo_input(kiln)
    expected = kiln.Session(DEMO).run({name: x})
    futures = []
    for _ in range(16):
        # The future holds the only references to this session and this array.
        futures.append(kiln.Session(DEMO).run_async({name: x.copy()}))
    for future in futures:
        for key, value in future.wait().items():
            np.testing.assert_array_equal(value, expected[key])


def test_waiting_releases_the_gil(kiln):
    # The run calls back into Python for each verbose line: a wait holding the GIL would deadlock.
    session = kiln.Session(DEMO)
    name, x = demo_input(kiln)
    lines = []
    with kiln.backends.verbose(1, sink=lines.append):
        future = session.run_async({name: x})
    future.wait()
    assert any(line.startswith("kiln_verbose,exec,") for line in lines)


def test_interop_threads_are_settable_until_the_pool_starts():
    env = dict(os.environ, PYTHONPATH=os.environ.get("KILN_PYTHONPATH", str(REPO / "build" / "python")))
    env.pop("KILN_NUM_INTEROP_THREADS", None)
    script = """
import kiln, numpy as np
kiln.set_num_interop_threads(3)
assert kiln.get_num_interop_threads() == 3 and kiln.num_interop_threads_source() == "api"
s = kiln.Session(%r)
i = s.inputs[0]
x = np.zeros([d if isinstance(d, int) else 1 for d in i["shape"]], np.float32)
s.run_async({i["name"]: x}).wait()
try:
    kiln.set_num_interop_threads(2)
except RuntimeError as error:
    print("error:", error)
print(kiln.parallel_info())
""" % str(DEMO)
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "error: set_num_interop_threads(2): the inter-op pool already started with 3 threads" in result.stdout
    assert "inter-op threads: 3 (from api; pool started)" in result.stdout
    bad = subprocess.run([sys.executable, "-c", "import kiln; kiln.get_num_interop_threads()"],
                         env=dict(env, KILN_NUM_INTEROP_THREADS="lots"), capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "KILN_NUM_INTEROP_THREADS='lots'" in bad.stderr


def test_parallel_info_names_counts_sources_and_environment(kiln):
    info = kiln.parallel_info()
    for line in ("intra-op threads:", "inter-op threads:", "thread budget:", "cores:", "busy elsewhere:", "OpenMP:",
                 "OpenMP wait policy:", "BLAS:", "environment:", "MKL_NUM_THREADS=", "OPENBLAS_NUM_THREADS="):
        assert line in info, line
    assert f"intra-op threads: {kiln.get_num_threads()} (from {kiln.num_threads_source()})" in info
    saved = kiln.get_thread_budget()
    try:
        kiln.set_thread_budget(0)
        assert "thread budget: off (from api)" in kiln.parallel_info()
        with pytest.raises(ValueError, match="set_thread_budget"):
            kiln.set_thread_budget(-1)
    finally:
        kiln.set_thread_budget(saved)


def test_exiting_with_runs_in_flight_is_clean():
    # Nobody waits for these futures: the interpreter must let the runs drop their arrays first.
    env = dict(os.environ, PYTHONPATH=os.environ.get("KILN_PYTHONPATH", str(REPO / "build" / "python")))
    script = """
import kiln, numpy as np
s = kiln.Session(%r)
i = s.inputs[0]
x = np.ones([d if isinstance(d, int) else 1 for d in i["shape"]], np.float32)
futures = [s.run_async({i["name"]: x.copy()}) for _ in range(8)]
print("started")
""" % str(DEMO)
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "started" and result.stderr == ""
