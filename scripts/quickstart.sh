#!/usr/bin/env bash
# Quick start: install what is missing, build kiln, and run the bundled demo model.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install_deps.sh
cmake --preset default >/dev/null
cmake --build --preset default
build/kiln info
build/kiln run models/demo.onnx --output-dir build/demo-output
