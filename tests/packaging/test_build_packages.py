"""scripts/debian_packages.txt names every Debian package the build uses, and the check that says so
would notice a missing one (ocl-icd-opencl-dev, which a fresh machine once lacked)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import check_build_packages as checker  # noqa: E402

PACKAGES_FILE = checker.REPO / "scripts" / "debian_packages.txt"


@pytest.fixture(scope="module")
def used_files(tmp_path_factory):
    # One configure (a few seconds) serves both package lists.
    return checker.collect_used_files(checker.REPO, tmp_path_factory.mktemp("configure"))


def test_package_list_covers_the_build(used_files, capsys):
    missing = checker.check(used_files, PACKAGES_FILE)
    assert missing == {}, capsys.readouterr().out


def test_a_missing_package_is_named_with_its_files(used_files, tmp_path, capsys):
    lines = PACKAGES_FILE.read_text().splitlines()
    without_opencl = [line for line in lines if line.split("#", 1)[0].strip() != "ocl-icd-opencl-dev"]
    assert len(without_opencl) == len(lines) - 1, "the list should name ocl-icd-opencl-dev once"
    packages_file = tmp_path / "debian_packages.txt"
    packages_file.write_text("\n".join(without_opencl) + "\n")

    missing = checker.check(used_files, packages_file)
    output = capsys.readouterr().out
    assert list(missing) == ["ocl-icd-opencl-dev"], output
    assert any(file.startswith("/usr/lib/x86_64-linux-gnu/libOpenCL.so:")
               for file in missing["ocl-icd-opencl-dev"]), output
    assert "  ocl-icd-opencl-dev\n    /usr/lib/x86_64-linux-gnu/libOpenCL.so:" in output
    assert "hint: add it to scripts/debian_packages.txt" in output
