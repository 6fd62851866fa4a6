#!/usr/bin/env bash
# The test command: installs what the build needs, builds everything, runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-deps.sh
build=${Q38_BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$build" -j "$(nproc)"
ctest --test-dir "$build" -j "$(nproc)" --output-on-failure
# Each libFuzzer harness (tests/fuzz) for 30 s in its own clang build; a crash fails the run (docs/fuzz.md).
Q38_FUZZ_SECONDS=30 Q38_FUZZ_JOBS="$(nproc)" bash scripts/fuzz.sh
