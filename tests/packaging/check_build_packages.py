#!/usr/bin/python3
"""Checks that scripts/debian_packages.txt names every Debian package the build and tests use.

scripts/install_deps.sh installs that list with --no-install-recommends, so on a fresh machine only
the listed packages and their Depends/Pre-Depends are present. A package the build uses that comes
in only as a Recommends (ocl-icd-opencl-dev, for libdnnl-dev's CMake config) breaks the fresh machine
while every machine that has it installed for another reason passes. This check catches that on any
machine: it configures a scratch build, collects the files the configure step and the test suite
use, maps them to the packages that own them (dpkg -S), and fails naming each owner that is neither
listed nor pulled in by the Depends closure of the list.

Usage: /usr/bin/python3 tests/packaging/check_build_packages.py [--packages FILE] [--source DIR]
"""

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PYTHON = "/usr/bin/python3"
# The programs the README's commands, scripts/test.sh and the packaging tests run (clang++-14: the fuzz preset).
TOOLS = ("cmake", "ninja", "ccache", "ctest", PYTHON, "clang++-14", "pkg-config", "nm", "readelf")
# What the Python tests import.
PYTHON_MODULES = ("numpy", "pytest", "torch", "torchvision", "onnx", "ensurepip", "pip", "setuptools", "wheel", "build")
CONFORMANCE_DATA = "/usr/share/libonnx-testdata/data/node"
# Cache entries that hold paths configure does not read: where `cmake --install` writes.
UNREAD_CACHE_ENTRIES = {"CMAKE_INSTALL_PREFIX"}
# The build.ninja variables that carry compiler flags and link lines.
NINJA_FLAG_VARIABLES = {"FLAGS", "INCLUDES", "LINK_FLAGS", "LINK_LIBRARIES", "LINK_PATH"}
CACHE_ENTRY = re.compile(r"^(?P<name>[^#/][^=]*?):(?P<type>FILEPATH|PATH|STRING)=(?P<value>.*)$")
# A package name in a Depends/Provides alternative, without its version constraint "(>= 1.2)" or
# architecture qualifier ":any".
PACKAGE_NAME = re.compile(r"\s*([a-z0-9][a-z0-9+.-]*)")
# Merged /usr (Debian 12): /lib is a link to /usr/lib, but dpkg still records some packages' files
# under /lib, so dpkg -S finds /usr/lib/x86_64-linux-gnu/libc.so.6 only as /lib/x86_64-linux-gnu/libc.so.6.
MERGED_USR_DIRS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")


class CheckError(Exception):
    """Something the check needs is missing (the first thing a fresh machine without a package hits)."""


def configure(source, scratch):
    """Configures a scratch build of `source` with a JSON trace; returns (build dir, trace file)."""
    cmake = shutil.which("cmake")
    if cmake is None:
        raise CheckError("cmake is not on PATH")
    build, trace = scratch / "build", scratch / "trace.json"
    result = subprocess.run(
        [cmake, "-S", str(source), "-B", str(build), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
         "--trace-expand", "--trace-format=json-v1", f"--trace-redirect={trace}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        raise CheckError("configuring a scratch build failed (on a fresh machine this is what a "
                         f"missing package looks like):\n{result.stdout}")
    return build, trace


def trace_script_files(trace):
    """The CMake script files whose commands the json-v1 trace shows running."""
    with open(trace) as lines:
        return {event["file"] for event in map(json.loads, lines) if "file" in event}


def cache_paths(cache):
    """(path, entry name) for every FILEPATH/PATH/STRING cache entry naming existing absolute paths."""
    for line in cache.read_text().splitlines():
        entry = CACHE_ENTRY.match(line)
        if entry is None or entry["name"] in UNREAD_CACHE_ENTRIES:
            continue
        for value in entry["value"].split(";"):
            if value.startswith("/") and os.path.exists(value):
                yield value, entry["name"]


def ninja_paths(build_ninja):
    """Absolute paths in build.ninja's flags and link lines: libraries and -I/-isystem/-L folders."""
    for line in build_ninja.read_text().splitlines():
        name, equals, value = line.strip().partition(" = ")
        if not equals or name not in NINJA_FLAG_VARIABLES or not line.startswith(" "):
            continue
        value = value.replace("$:", ":").replace("$ ", " ").replace("$$", "$")  # ninja's escapes
        for token in shlex.split(value):
            for prefix in ("-isystem", "-I", "-L", ""):
                if token.startswith(prefix + "/"):
                    path = token[len(prefix):]
                    if os.path.exists(path):
                        yield path
                    break


def python_module_files():
    """{module: file} for the modules the tests import, as /usr/bin/python3 finds them."""
    # find_spec locates a module without running it (importing torch takes seconds); its origin is
    # the module's __file__.
    program = ("import importlib.util, sys\n"
               "for name in sys.argv[1:]:\n"
               "    spec = importlib.util.find_spec(name)\n"
               "    print(name, spec.origin if spec else '')\n")
    output = subprocess.run([PYTHON, "-c", program, *PYTHON_MODULES], check=True,
                            stdout=subprocess.PIPE, text=True).stdout
    files = dict(line.split(" ", 1) for line in output.splitlines())
    missing = [name for name, file in files.items() if not file]
    if missing:
        raise CheckError(f"{PYTHON} cannot import {', '.join(missing)}")
    return files


def collect_used_files(source, scratch):
    """Configures `source` in `scratch`; returns {path: set of where it came from} for the files the
    configure step, the build and the tests use (outside the repo and the scratch folder)."""
    build, trace = configure(source, scratch)
    used = defaultdict(set)
    for file in trace_script_files(trace):
        used[file].add("CMake script")
    for path, entry_name in cache_paths(build / "CMakeCache.txt"):
        used[path].add(f"CMakeCache.txt {entry_name}")
    for path in ninja_paths(build / "build.ninja"):
        used[path].add("build.ninja")
    for tool in TOOLS:
        path = shutil.which(tool)
        if path is None:
            raise CheckError(f"{tool} is not on PATH")
        used[path].add(f"tool {tool}")
    for module, file in python_module_files().items():
        used[file].add(f"{PYTHON} module {module}")
    if not os.path.isdir(CONFORMANCE_DATA):
        raise CheckError(f"{CONFORMANCE_DATA} (ONNX's conformance data) does not exist")
    used[CONFORMANCE_DATA].add("conformance data")

    inside = (Path(source).resolve(), Path(scratch).resolve())
    return {path: origins for path, origins in used.items()
            if not any(Path(path).resolve().is_relative_to(folder) for folder in inside)}


def read_package_list(packages_file):
    """The package names in a list file: one a line, `#` starting a comment (as install_deps.sh reads it)."""
    return {name for line in Path(packages_file).read_text().splitlines()
            for name in line.split("#", 1)[0].split()}


def merged_usr_alias(path):
    """The other name of `path` under merged /usr (/usr/lib/x <-> /lib/x), or None."""
    parts = Path(path).parts
    if len(parts) > 2 and parts[1] == "usr" and parts[2] in MERGED_USR_DIRS:
        return str(Path("/", *parts[2:]))
    if len(parts) > 1 and parts[1] in MERGED_USR_DIRS:
        return str(Path("/usr", *parts[1:]))
    return None


def package_owners(paths):
    """{path: set of packages owning it} for `paths`, from one dpkg -S call; paths no package owns
    map to an empty set."""
    aliases = {path: merged_usr_alias(path) for path in paths}
    queries = sorted(set(paths) | {alias for alias in aliases.values() if alias})
    # dpkg -S takes glob patterns; the backslashes make each path match only itself. It exits 1 when
    # some path has no owner, which is an answer here, not an error.
    patterns = [re.sub(r"([*?\[\]\\])", r"\\\1", query) for query in queries]
    output = subprocess.run(["dpkg-query", "--search", *patterns], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True).stdout
    owners_of = defaultdict(set)
    for line in output.splitlines():
        if line.startswith(("diversion by ", "local diversion ")):
            continue
        packages, _, path = line.partition(": ")
        # "libc6:amd64, base-files" -> {"libc6", "base-files"}
        owners_of[path].update(package.strip().split(":")[0] for package in packages.split(","))
    return {path: owners_of[path] | owners_of[aliases[path]] for path in paths}


def relation_names(field):
    """Every package name a Depends/Pre-Depends/Provides field mentions, alternatives included."""
    return {PACKAGE_NAME.match(alternative)[1]
            for alternative in re.split(r"[,|]", field) if alternative.strip()}


def allowed_packages(listed):
    """The packages a fresh machine has after installing `listed` without recommends: the listed
    packages, the Essential and priority-required ones (always installed), and the closure of their
    Depends and Pre-Depends over the installed packages.

    dpkg's database answers this rather than `apt-cache depends --recurse --no-recommends
    --no-suggests`: it needs no apt lists (no `apt-get update`, no network), and it is exact for what
    is installed here, which is all the used files can come from.

    Every installed alternative of `a | b` counts (apt would install only `a` on a fresh machine, so
    a file from `b` passes here when `b` is installed for another reason), and a virtual package
    counts as every installed package that Provides it."""
    depends, providers, always_present = defaultdict(set), defaultdict(set), set()
    fields = ("${db:Status-Status}\t${Package}\t${Essential}\t${Priority}\t${Depends}\t${Pre-Depends}\t"
              "${Provides}\n")
    output = subprocess.run(["dpkg-query", "-W", "-f", fields], check=True, stdout=subprocess.PIPE,
                            text=True).stdout
    for line in output.splitlines():
        status, package, essential, priority, depends_field, pre_depends, provides = line.split("\t")
        if status != "installed":  # e.g. removed packages whose config files remain
            continue
        # Multi-arch packages (libc6:amd64, libc6:i386) merge into one name, as the list names them.
        depends[package] |= relation_names(depends_field) | relation_names(pre_depends)
        for virtual in relation_names(provides):
            providers[virtual].add(package)
        if essential == "yes" or priority == "required":
            always_present.add(package)

    installed = set(depends)

    def installed_meanings(name):
        return ({name} & installed) | providers.get(name, set())

    allowed, pending = set(), list(listed | always_present)
    while pending:
        package = pending.pop()
        if package not in allowed:
            allowed.add(package)
            pending.extend(meaning for name in depends.get(package, ())
                           for meaning in installed_meanings(name))
    not_installed = sorted(listed - installed)
    return allowed, not_installed


def check(files, packages_file):
    """Prints what `files` ({path: origins}) need beyond `packages_file`; returns {package: [files]}
    for each package that owns a used file but is not allowed (empty when the list is complete)."""
    allowed, not_installed = allowed_packages(read_package_list(packages_file))
    for name in not_installed:
        print(f"warning: {name} (listed in {packages_file}) is not installed; run scripts/install_deps.sh")

    # A symlink and its target can belong to different packages (libOpenCL.so is ocl-icd-opencl-dev's,
    # libOpenCL.so.1.0.0 is ocl-icd-libopencl1's), so both are checked; alternatives links such as
    # /usr/bin/c++ belong to no package, only their target does.
    resolved = {path: os.path.realpath(path) for path in files}
    owners = package_owners(sorted(set(files) | set(resolved.values())))
    # For the summary: a folder such as /usr/include belongs to dozens of packages, so only files count.
    file_owners, folder_count = set(), 0
    missing = defaultdict(list)
    for path, origins in sorted(files.items()):
        checked = {path, resolved[path]}
        if not any(owners[name] for name in checked):
            print(f"warning: no Debian package owns {path} ({'; '.join(sorted(origins))})")
        if os.path.isdir(path):
            folder_count += 1
        for name in sorted(checked):
            if not os.path.isdir(name):
                file_owners |= owners[name]
            # A folder such as /usr/include belongs to many packages; any allowed one provides it.
            if owners[name] and not owners[name] & allowed:
                described = name if name == path else f"{name} (target of {path})"
                for package in owners[name]:
                    missing[package].append(f"{described}: {'; '.join(sorted(origins))}")

    if missing:
        print(f"The build uses files from packages that {packages_file} neither names nor pulls in "
              "through Depends (a fresh machine installs no Recommends):")
        for package, used_files in sorted(missing.items()):
            print(f"  {package}")
            for used_file in used_files:
                print(f"    {used_file}")
        print(f"hint: add {'it' if len(missing) == 1 else 'them'} to scripts/debian_packages.txt")
    else:
        print(f"check_build_packages: OK: {len(files)} paths used by the build and tests "
              f"({folder_count} folders, files from {len(file_owners)} packages), all from packages named "
              f"in {packages_file} or in its Depends closure ({len(allowed)} packages)")
    return dict(missing)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, default=REPO, help="the kiln repo (default: %(default)s)")
    parser.add_argument("--packages", type=Path,
                        help="the package list (default: SOURCE/scripts/debian_packages.txt)")
    args = parser.parse_args()
    packages_file = args.packages or args.source / "scripts" / "debian_packages.txt"
    with tempfile.TemporaryDirectory(prefix="kiln-packages-") as scratch:
        try:
            files = collect_used_files(args.source, Path(scratch))
        except CheckError as error:
            print(f"check_build_packages: {error}")
            return 1
    return 1 if check(files, packages_file) else 0


if __name__ == "__main__":
    sys.exit(main())
