#!/usr/bin/env bash
# Installs the Debian packages kiln needs to build and test; does nothing when all are present.
# Every package comes from Debian's apt (no pip). Safe to run repeatedly.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config
  libdnnl-dev libopenblas-openmp-dev
  libonnx-dev libprotobuf-dev protobuf-compiler
  pybind11-dev libgtest-dev libgmock-dev libbenchmark-dev
  clang-14 libclang-rt-14-dev
  python3-numpy python3-pytest python3-torch python3-torchvision python3-onnx
  libonnx-testdata
)

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
