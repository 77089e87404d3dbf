#!/bin/sh
# run.sh [TARGET] SECONDS [libFuzzer options...] - builds a fuzzer (clang,
# libFuzzer, AddressSanitizer, UndefinedBehaviorSanitizer) in build-fuzz/ and
# runs it for SECONDS (default 60) from the repository root, starting from the
# committed corpus. TARGET is plan (the default: the plan reader, corpus/),
# schedule (schedule files in torch's CSV grammar: schedules/ and torch's own
# files, tests/schedules/torch), checkpoint (safetensors checkpoints:
# checkpoints/), image (the image decoders: images/) or data (token, text,
# CIFAR-10 and IDX files: data/), algo (the convolution algorithm cache's
# files, PP_CUDNN_CACHE: algos/), tokenizer (GPT-2's tokenizer: its two
# files or its tokenizer.json, and texts: tokenizer/) or index (the image
# index's cache files: index/). New inputs go to
# fuzz-out/TARGET/corpus, crashing inputs to fuzz-out/TARGET/ (replay one
# with: build-fuzz/fuzz_TARGET fuzz-out/TARGET/crash-...).
# Needs clang with the libFuzzer runtime (Debian: clang, libclang-rt-dev).
set -eu
target=plan
case ${1:-} in plan|schedule|checkpoint|image|data|algo|tokenizer|index) target=$1; shift ;; esac
secs=${1:-60}
[ $# -gt 0 ] && shift
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
bdir=build-fuzz
if [ ! -f "$bdir/build.ninja" ]; then
    CC=clang meson setup "$bdir" -Dcuda=disabled -Dbuildtype=debugoptimized \
        -Db_sanitize=address,undefined -Db_lundef=false \
        -Dc_args='-fsanitize=fuzzer-no-link -fno-sanitize-recover=all' >/dev/null
fi
ninja -C "$bdir" libpipeline-run.a >/dev/null
case $target in
    plan) seeds="tests/fuzz/corpus" extra="-max_len=8192 -dict=tests/fuzz/plan.dict" ;;
    schedule) seeds="tests/fuzz/schedules tests/schedules/torch" extra="-max_len=16384" ;;
    checkpoint) seeds="tests/fuzz/checkpoints" extra="-max_len=65536" ;;
    image) seeds="tests/fuzz/images" extra="-max_len=65536" ;;
    data) seeds="tests/fuzz/data" extra="-max_len=16384" ;;
    algo) seeds="tests/fuzz/algos" extra="-max_len=8192" ;;
    tokenizer) seeds="tests/fuzz/tokenizer" extra="-max_len=16384" ;;
    index) seeds="tests/fuzz/index" extra="-max_len=4096" ;;
esac
# shellcheck disable=SC2046
clang -std=c11 -g -O1 -I. -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
    "tests/fuzz/fuzz_$target.c" "$bdir/libpipeline-run.a" \
    $(pkg-config --libs yaml-0.1 openblas jansson libxxhash zlib libpcre2-8 libjpeg libpng libwebp \
        libtiff-4 gdlib) -lnetpbm -lpthread -lm -o "$bdir/fuzz_$target"
out=fuzz-out/$target
mkdir -p "$out/corpus"
# shellcheck disable=SC2086
exec "$bdir/fuzz_$target" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 $extra -artifact_prefix="$out/" "$@" "$out/corpus" $seeds
