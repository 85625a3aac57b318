"""`pip install --no-build-isolation .` into a venv made with --system-site-packages: the venv, not a
system install, then holds the `kiln` package and the `kiln` command, which run the demo model from
outside the repository. The build reuses the configured CMake build (KILN_BUILD_DIR), as setup.py
does for any user who built first, so the test compiles nothing; `python3 -m build` makes a wheel
the same way."""

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import readme_examples  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("KILN_BUILD_DIR", REPO / "build"))
KILN = os.environ.get("KILN_BIN", str(BUILD / "kiln"))
VERSION = (REPO / "VERSION").read_text().strip()
PYTHON = "/usr/bin/python3"


def run(command, **kwargs):
    env = dict(os.environ, KILN_BUILD_DIR=str(BUILD), PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("PYTHONPATH", None)
    result = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env, **kwargs)
    assert result.returncode == 0, f"{command} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    folder = tmp_path_factory.mktemp("venv") / "env"
    run([PYTHON, "-m", "venv", "--system-site-packages", str(folder)])
    run([str(folder / "bin" / "python"), "-m", "pip", "install", "--no-build-isolation", str(REPO)], cwd=REPO)
    return folder


def kiln_run_line():
    out = run([KILN, "run", str(REPO / "models" / "demo.onnx")])
    return re.search(r"^logits: .*$", out, re.M).group(0)


def test_the_venv_imports_its_own_kiln(venv, tmp_path):
    script = (
        "import kiln, numpy as np\n"
        "print(kiln.__file__)\n"
        "print(kiln.__version__)\n"
        "s = kiln.Session(%r)\n"
        "c = kiln.RunControl(); c.cancel()\n"
        "try:\n"
        "    s.run({'input': np.zeros((1, 3, 64, 64), np.float32)}, control=c)\n"
        "except kiln.CancelledError as e:\n"
        "    print('cancelled:', 'cancelled' in str(e))\n"
    ) % str(REPO / "models" / "demo.onnx")
    lines = run([str(venv / "bin" / "python"), "-c", script], cwd=tmp_path).splitlines()
    assert Path(lines[0]).resolve().is_relative_to(venv.resolve()), lines[0]
    assert lines[1] == VERSION
    assert lines[2] == "cancelled: True"


def test_the_kiln_command_runs_the_demo(venv, tmp_path):
    command = venv / "bin" / "kiln"
    assert run([str(command), "--version"], cwd=tmp_path).strip() == f"kiln {VERSION}"
    out = run([str(command), "run", str(REPO / "models" / "demo.onnx")], cwd=tmp_path)
    assert re.search(r"^logits: .*$", out, re.M).group(0) == kiln_run_line()


def test_the_readme_python_example(venv, tmp_path):
    script = tmp_path / "example.py"
    script.write_text(readme_examples.example("Python", "python"))
    out = run([str(venv / "bin" / "python"), str(script)], cwd=REPO)
    assert "Conv" in out, out  # the profile's table
    assert readme_examples.printed_logit(out) == readme_examples.first_logit_at_one_half(KILN, tmp_path)


def test_a_wheel_is_built_without_isolation(tmp_path):
    run([PYTHON, "-m", "build", "--no-isolation", "--wheel", "--outdir", str(tmp_path), str(REPO)], cwd=REPO)
    wheels = list(tmp_path.glob("*.whl"))
    assert [w.name for w in wheels] == [f"kiln-{VERSION}-cp3{sys.version_info.minor}-cp3{sys.version_info.minor}-linux_x86_64.whl"]
    names = zipfile.ZipFile(wheels[0]).namelist()
    assert "kiln/__init__.py" in names
    assert any(re.fullmatch(r"kiln/_kiln\.cpython-.*\.so", name) for name in names), names
    assert any(name.endswith("entry_points.txt") for name in names), names
