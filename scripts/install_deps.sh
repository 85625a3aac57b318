#!/usr/bin/env bash
# Installs the Debian packages kiln needs to build and test (listed in scripts/debian_packages.txt;
# with --slow also those only the slow tier needs, scripts/debian_packages_slow.txt); does nothing
# when all are present. Every package comes from Debian's apt (no pip). Safe to run repeatedly.
#
#   scripts/install_deps.sh [--slow]
set -euo pipefail

lists=("$(dirname "${BASH_SOURCE[0]}")/debian_packages.txt")
if [ "${1:-}" = "--slow" ]; then
  lists+=("$(dirname "${BASH_SOURCE[0]}")/debian_packages_slow.txt")
elif [ $# -gt 0 ]; then
  echo "usage: scripts/install_deps.sh [--slow]" >&2
  exit 2
fi

# One package per line, `#` starting a comment (tests/packaging/check_build_packages.py reads the list
# the same way). The assignment stops the script if a list cannot be read.
package_names=$(sed 's/#.*//' "${lists[@]}")
read -r -d '' -a packages <<<"$package_names" || true  # read returns 1 at the end of its input

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "kiln: installing missing packages: ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  sudo_cmd=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
