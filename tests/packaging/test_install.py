"""kiln as a dependency: `cmake --install` into a temporary prefix, then, out of kiln's tree, an
application built with find_package(kiln), one built with pkg-config and the README's C example,
each running the demo model to the hash `kiln run` prints, and the README's C++ example. Also:
libkiln.so exports the C API only, under its versioned SONAME; every installed header compiles
alone; every face reports one version.

Reuses the configured build (KILN_BUILD_DIR): it installs what the default build made."""

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
import readme_examples  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("KILN_BUILD_DIR", REPO / "build"))
KILN = os.environ.get("KILN_BIN", str(BUILD / "kiln"))
VERSION = (REPO / "VERSION").read_text().strip()
MAJOR, MINOR, _ = VERSION.split(".")


def run(command, **kwargs):
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, **kwargs)
    assert result.returncode == 0, f"{command} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    """An install moved after installing: nothing in it may depend on where it was installed."""
    scratch = tmp_path_factory.mktemp("install")
    installed = scratch / "first"
    run(["cmake", "--install", str(BUILD), "--prefix", str(installed)])
    moved = scratch / "moved"
    installed.rename(moved)
    return moved


@pytest.fixture(scope="module")
def expected_line(tmp_path_factory):
    """What `kiln run` prints for the demo model on the examples' input pattern, as they print it."""
    folder = tmp_path_factory.mktemp("pattern")
    pixels = ((np.arange(3 * 64 * 64) % 17).astype(np.float32) / np.float32(17) - np.float32(0.5))
    np.save(folder / "input.npy", pixels.reshape(1, 3, 64, 64))
    out = run([KILN, "run", str(REPO / "models" / "demo.onnx"), "--input", f"input={folder / 'input.npy'}"])
    match = re.search(r"^(\w+): float32 \[1, 10\] sum=\S+ (hash=[0-9a-f]{8})$", out, re.M)
    assert match, out
    return f"kiln {VERSION}: {match.group(1)} {match.group(2)}"


def pkg_config(prefix, *args):
    env = dict(os.environ, PKG_CONFIG_PATH=str(prefix / "lib" / "pkgconfig"))
    return run(["pkg-config", *args, "kiln"], env=env).split()


def test_the_library_exports_the_c_api_and_nothing_else(prefix):
    library = prefix / "lib" / "libkiln.so"
    assert library.is_symlink(), "libkiln.so is the development link to the versioned file"
    soname = run(["readelf", "-d", str(library)])
    assert f"Library soname: [libkiln.so.{MAJOR}.{MINOR}]" in soname, soname
    assert (prefix / "lib" / f"libkiln.so.{MAJOR}.{MINOR}").exists()
    assert (prefix / "lib" / f"libkiln.so.{VERSION}").exists()

    symbols = [line.split()[-1] for line in run(["nm", "-D", "--defined-only", str(library)]).splitlines()]
    declared = set(re.findall(r"KILN_API [^;]*?\b(kiln_\w+)\(", (REPO / "include/kiln/kiln_c.h").read_text()))
    assert len(declared) > 40, declared
    internal = [s for s in symbols if not s.startswith("kiln_")]
    assert internal == [], f"exported beyond the C API: {internal[:20]}"
    assert set(symbols) == declared, {"not exported": declared - set(symbols), "undeclared": set(symbols) - declared}
    # Its dependencies are its own: an application links kiln alone.
    needed = run(["readelf", "-d", str(library)])
    for dependency in ("libdnnl", "libprotobuf", "libonnx"):
        assert dependency in needed, needed


def test_every_installed_header_compiles_alone(prefix, tmp_path):
    headers = sorted((prefix / "include" / "kiln").iterdir())
    assert [h.name for h in headers] == ["kiln.hpp", "kiln_c.h", "version.h"]
    for header in headers:
        source = tmp_path / f"{header.stem}.cpp"
        source.write_text(f"#include <kiln/{header.name}>\nint header_compiled_alone;\n")
        run(["c++", "-std=c++17", "-Wall", "-Wextra", "-Werror", "-fsyntax-only", f"-I{prefix / 'include'}",
             str(source)])
        if header.suffix == ".h":  # the C headers are C too
            run(["cc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-fsyntax-only", "-x", "c",
                 f"-I{prefix / 'include'}", str(source)])


def test_an_application_built_with_find_package(prefix, tmp_path, expected_line):
    build = tmp_path / "build"
    run(["cmake", "-S", str(REPO / "tests" / "install"), "-B", str(build), f"-DCMAKE_PREFIX_PATH={prefix}",
         "-DCMAKE_BUILD_TYPE=Release"])
    run(["cmake", "--build", str(build)])
    out = run([str(build / "consumer"), str(REPO / "models" / "demo.onnx")])
    assert out.strip() == expected_line


def test_an_application_built_with_pkg_config(prefix, tmp_path, expected_line):
    assert pkg_config(prefix, "--modversion") == [VERSION]
    consumer = tmp_path / "consumer"
    libdir = pkg_config(prefix, "--variable=libdir")[0]
    run(["c++", "-std=c++17", "-O1", str(REPO / "tests" / "install" / "consumer.cpp"), "-o", str(consumer),
         *pkg_config(prefix, "--cflags", "--libs"), f"-Wl,-rpath,{libdir}"])
    out = run([str(consumer), str(REPO / "models" / "demo.onnx")])
    assert out.strip() == expected_line


def test_the_readme_c_example(prefix, tmp_path, expected_line):
    source = tmp_path / "demo.c"
    source.write_text(readme_examples.example("C", "c"))
    program = tmp_path / "demo"
    libdir = pkg_config(prefix, "--variable=libdir")[0]
    run(["cc", "-std=c99", "-Wall", "-Wextra", "-Werror", str(source), "-o", str(program),
         *pkg_config(prefix, "--cflags", "--libs"), f"-Wl,-rpath,{libdir}"])
    out = run([str(program)], cwd=REPO)  # no arguments, from the repository root
    assert out.strip() == expected_line


def test_the_readme_cpp_example(prefix, tmp_path):
    source = tmp_path / "app.cpp"
    source.write_text(readme_examples.example("C++", "cpp"))
    program = tmp_path / "app"
    libdir = pkg_config(prefix, "--variable=libdir")[0]
    run(["c++", "-std=c++17", "-Wall", "-Wextra", "-Werror", str(source), "-o", str(program),
         *pkg_config(prefix, "--cflags", "--libs"), f"-Wl,-rpath,{libdir}"])
    out = run([str(program)], cwd=REPO)
    assert readme_examples.printed_logit(out) == readme_examples.first_logit_at_one_half(KILN, tmp_path)


def test_every_face_reports_one_version(prefix):
    assert run([KILN, "--version"]).strip() == f"kiln {VERSION}"
    config_version = (prefix / "lib" / "cmake" / "kiln" / "kilnConfigVersion.cmake").read_text()
    assert f'set(PACKAGE_VERSION "{VERSION}")' in config_version
    assert pkg_config(prefix, "--modversion") == [VERSION]
    version_h = (prefix / "include" / "kiln" / "version.h").read_text()
    assert f'#define KILN_VERSION_STRING "{VERSION}"' in version_h
    assert f'version = {{file = "VERSION"}}' in (REPO / "pyproject.toml").read_text()


def test_a_mismatched_version_request_is_refused(prefix, tmp_path):
    """SameMinorVersion: 0.x promises nothing across minor versions, so find_package(kiln 0.<other>) fails."""
    project = tmp_path / "project"
    project.mkdir()
    other = f"{MAJOR}.{int(MINOR) + 1}"
    (project / "CMakeLists.txt").write_text(
        f"cmake_minimum_required(VERSION 3.16)\nproject(p LANGUAGES CXX)\nfind_package(kiln {other} REQUIRED)\n")
    result = subprocess.run(["cmake", "-S", str(project), "-B", str(tmp_path / "build"),
                             f"-DCMAKE_PREFIX_PATH={prefix}"], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert VERSION in result.stderr, result.stderr
