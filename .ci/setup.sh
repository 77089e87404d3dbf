#!/usr/bin/env bash
# Sets up a machine to build pipeline-run and builds it.
#
#   bash .ci/setup.sh [--tests] [BUILD_DIR]      (default BUILD_DIR: build)
#
# 1. Installs the Debian packages the build needs when any is missing
#    (compiler, meson, ninja, pkg-config, libyaml, OpenBLAS, jansson, xxHash, zlib,
#    Open MPI for jobs of several processes and their tests, the image decoders
#    libjpeg-turbo, libpng, libwebp, libtiff, libgd, libnetpbm); with
#    --tests also what the test suite checks against (PyTorch and torchvision
#    for the cross-checks, Debian's Fashion-MNIST for the training tests, the
#    fortunes package's texts for the byte-level GPT-2 training check).
# 2. Configures BUILD_DIR with meson (once) and builds it with ninja.
# The CUDA backend is built when nvcc, cuDNN and cuBLAS are found
# (-Dcuda=auto); pass MESON_ARGS="-Dcuda=disabled" to skip it. MPI likewise
# (-Dmpi=auto; -Dmpi=disabled builds jobs of one process only).
# With CI=true, compiler warnings are errors.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
tests=0
if [ "${1:-}" = --tests ]; then tests=1; shift; fi
build=${1:-build}

packages=(gcc g++ pkg-config meson ninja-build libyaml-dev libopenblas-dev libjansson-dev libxxhash-dev zlib1g-dev
  openmpi-bin libopenmpi-dev
  libjpeg62-turbo-dev libpng-dev libwebp-dev libtiff-dev libgd-dev libnetpbm-dev)
if [ $tests = 1 ]; then
  packages+=(python3-torch python3-torchvision python3-numpy python3-pil dataset-fashion-mnist
    fortunes)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq >&2 || true
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

# nvcc usually lives outside PATH.
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi

args=(${MESON_ARGS:-})
if [ "${CI:-}" = "true" ]; then args+=(-Dwerror=true); fi
if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" "${args[@]}" >&2
fi
ninja -C "$build" >&2
