"""Shared fixtures: the kiln binary, the exported-model cache, and the slow tier switch."""
import os
import pathlib
import tempfile

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true", help="also run tests marked slow")


def pytest_configure(config):
    # Also registered in pytest.ini; repeated here so the marker is known under any rootdir/inifile.
    config.addinivalue_line("markers", "slow: slow tier; runs only with --run-slow or KILN_SLOW=1")
    # The roofline kiln measures for profiles stays out of the user's home (ctest sets its own).
    os.environ.setdefault("KILN_CACHE_DIR", str(pathlib.Path(tempfile.gettempdir()) / "kiln-test-cache"))


def pytest_collection_modifyitems(config, items):
    if config.getoption("--run-slow") or os.environ.get("KILN_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow tier: use --run-slow or KILN_SLOW=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def kiln_bin():
    path = pathlib.Path(os.environ.get("KILN_BIN", REPO / "build" / "kiln"))
    if not path.exists():
        pytest.fail(f"kiln binary not found at {path}; build it or set KILN_BIN")
    return path


@pytest.fixture(scope="session")
def model_cache():
    path = pathlib.Path(os.environ.get("KILN_MODEL_CACHE", "/tmp/kiln-models"))
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def demo_model():
    return REPO / "models" / "demo.onnx"


@pytest.fixture(scope="session")
def kiln_module():
    """The kiln Python package from the build tree ($KILN_PYTHONPATH, else build/python)."""
    import sys
    path = pathlib.Path(os.environ.get("KILN_PYTHONPATH", REPO / "build" / "python"))
    if not (path / "kiln" / "__init__.py").exists():
        pytest.fail(f"kiln Python package not found under {path}; build it or set KILN_PYTHONPATH")
    sys.path.insert(0, str(path))
    import kiln
    return kiln
