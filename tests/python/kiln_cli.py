"""Runs the kiln CLI from tests and reads its outputs."""
import pathlib
import subprocess

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[2]


def run(kiln_bin, *args, timeout=600):
    """Runs `kiln ARGS...`; returns the CompletedProcess (text mode)."""
    return subprocess.run([str(kiln_bin), *map(str, args)], capture_output=True, text=True, timeout=timeout)


def run_model(kiln_bin, model, inputs, workdir, threads=None, extra_args=()):
    """Runs MODEL with numpy inputs {name: array}; returns {output name: array}. `extra_args` are
    further `kiln run` options (e.g. ("--disable", "onednn"))."""
    workdir = pathlib.Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    args = ["run", model, "--output-dir", workdir / "outputs"]
    for name, array in inputs.items():
        path = workdir / f"input_{name}.npy"
        np.save(path, np.ascontiguousarray(array))
        args += ["--input", f"{name}={path}"]
    if threads is not None:
        args += ["--threads", threads]
    args += list(extra_args)
    result = run(kiln_bin, *args)
    assert result.returncode == 0, f"kiln run failed ({result.returncode}): {result.stderr.strip()}"
    return {path.stem: np.load(path) for path in (workdir / "outputs").glob("*.npy")}
