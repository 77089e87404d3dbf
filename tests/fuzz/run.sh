#!/bin/sh
# run.sh SECONDS [libFuzzer options...] - builds the plan fuzzer (clang,
# libFuzzer, AddressSanitizer, UndefinedBehaviorSanitizer) in build-fuzz/ and
# runs it for SECONDS (default 60) from the repository root, starting from the
# committed corpus. New inputs go to fuzz-out/corpus, crashing inputs to
# fuzz-out/ (replay one with: build-fuzz/fuzz_plan fuzz-out/crash-...).
# Needs clang with the libFuzzer runtime (Debian: clang, libclang-rt-dev).
set -eu
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
# shellcheck disable=SC2046
clang -std=c11 -g -O1 -I. -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
    tests/fuzz/fuzz_plan.c "$bdir/libpipeline-run.a" \
    $(pkg-config --libs yaml-0.1 openblas jansson) -lpthread -lm -o "$bdir/fuzz_plan"
mkdir -p fuzz-out/corpus
exec "$bdir/fuzz_plan" -max_total_time="$secs" -max_len=8192 -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -dict=tests/fuzz/plan.dict -artifact_prefix=fuzz-out/ "$@" \
    fuzz-out/corpus tests/fuzz/corpus
