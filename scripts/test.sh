#!/usr/bin/env bash
# The default test suite (what CI runs): unit tests, ONNX's operator conformance suite, model parity
# against PyTorch, bad-input tests, and a sanitizer subset (ASan+UBSan build running the unit tests
# and the bad-input tests). Installs what it needs first.
#
#   scripts/test.sh          default tier (about 31 minutes from a cold clone on 2 cores without
#                            ccache; 23 when ccache holds the Release objects)
#   scripts/test.sh --slow   slow tier: sanitizers over the whole suite, vgg16/inception_v3 at batch 4
#                            (fcn_resnet50 at batch 2 and on the native reference),
#                            a bounded libFuzzer run over model loading and planning, and a build
#                            with only the native backend (oneDNN and BLAS configured out) running
#                            the unit tests; kiln tidy's HTML report rendered in headless chromium
#                            (installed for this tier)
set -euo pipefail
cd "$(dirname "$0")/.."

tier=default
if [ "${1:-}" = "--slow" ]; then
  tier=slow
elif [ $# -gt 0 ]; then
  echo "usage: scripts/test.sh [--slow]" >&2
  exit 2
fi

if [ "$tier" = slow ]; then
  scripts/install_deps.sh --slow
else
  scripts/install_deps.sh
fi
jobs=$(nproc)

if [ "$tier" = default ]; then
  cmake --preset default >/dev/null
  cmake --build --preset default -j "$jobs"
  cmake --preset asan >/dev/null
  cmake --build --preset asan -j "$jobs" --target kiln_cli kiln_unit_tests
  # The sanitizer subset first (its summary is not the last line), then the whole default suite.
  ctest --preset asan -L 'unit|bad_input' -j "$jobs"
  ctest --preset default -j "$jobs"
else
  cmake --preset asan >/dev/null
  cmake --build --preset asan -j "$jobs"
  cmake --preset fuzz >/dev/null
  cmake --build --preset fuzz -j "$jobs"
  scripts/fuzz.sh "${KILN_FUZZ_SECONDS:-600}" "${KILN_TRACE_FUZZ_SECONDS:-300}" "${KILN_SERVE_FUZZ_SECONDS:-120}" \
    "${KILN_GRPC_FUZZ_SECONDS:-120}"
  cmake --preset native-only >/dev/null
  cmake --build --preset native-only -j "$jobs"
  ctest --preset native-only -L unit -j "$jobs"
  cmake --preset default >/dev/null
  cmake --build --preset default -j "$jobs"
  KILN_SLOW=1 ctest --preset asan -j "$jobs"
  # 1000 load/unload/reload cycles of kiln serve under traffic, in the Release build only (~10 min).
  KILN_SLOW=1 KILN_RELOAD_CYCLES=1000 ctest --preset default -j "$jobs"
fi
