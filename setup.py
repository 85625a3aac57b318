"""Builds the Python package from kiln's one CMake build: the extension module `kiln._kiln` comes
from the CMake build directory (`build/`, the README's; KILN_BUILD_DIR names another), configured
with the default preset when it is not configured yet, so `pip install` after a build compiles
nothing again. The metadata lives in pyproject.toml; this file only adds the CMake step.
"""
import os
import pathlib
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

ROOT = pathlib.Path(__file__).resolve().parent


class BuildWithCMake(build_py):
    """Copies the package's .py files (build_py), then builds `_kiln` with CMake and adds it."""

    def run(self):
        super().run()
        build_dir = pathlib.Path(os.environ.get("KILN_BUILD_DIR", ROOT / "build")).resolve()
        if not (build_dir / "CMakeCache.txt").exists():
            if build_dir == ROOT / "build":
                subprocess.run(["cmake", "--preset", "default"], cwd=ROOT, check=True)
            else:
                subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build_dir), "-G", "Ninja",
                                "-DCMAKE_BUILD_TYPE=Release"], check=True)
        subprocess.run(["cmake", "--build", str(build_dir), "--target", "kiln_python",
                        "-j", str(os.cpu_count() or 1)], check=True)
        modules = sorted((build_dir / "python" / "kiln").glob("_kiln*.so"))
        if len(modules) != 1:
            raise RuntimeError(f"expected one built _kiln module in {build_dir / 'python' / 'kiln'}, "
                               f"found {[m.name for m in modules]} (is KILN_PYTHON_MODULE off?)")
        target = pathlib.Path(self.build_lib) / "kiln"
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy2(modules[0], target / modules[0].name)


class BinaryDistribution(Distribution):
    """The wheel carries a compiled module: tag it for this Python and platform, not `any`."""

    def has_ext_modules(self):
        return True


# setuptools' own build folder would default to build/, the CMake build's: keep it in a subfolder.
setup(cmdclass={"build_py": BuildWithCMake}, distclass=BinaryDistribution,
      options={"build": {"build_base": str(ROOT / "build" / "setuptools")}})
