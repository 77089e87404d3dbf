#!/bin/sh
# install_test.sh BUILD_DIR EXAMPLES_DIR PLAN.yaml [SANITIZE] - builds the examples
# against an installed tree, the way an application outside the source tree
# would: installs the build into a temporary root (meson install --destdir),
# then compiles each example with nothing but the flags pkg-config gives for
# `pipeline-run` (its Libs carry the -lm the examples need). toy_two_stage
# is linked against the shared library (run with LD_LIBRARY_PATH) and against
# the static one; plan_loop (on PLAN.yaml, one step) and split_compare against
# the shared one. Every program must exit 0. SANITIZE is the build's
# b_sanitize option (an instrumented library needs instrumented programs).
# Exits 77 (skipped) when pkg-config, cc or readelf is missing.
set -eu
build=$1
examples=$2
plan=$3
sanitize=${4:-none}
for tool in pkg-config cc readelf; do
    command -v "$tool" >/dev/null 2>&1 || { echo "install_test: no $tool" >&2; exit 77; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
root="$tmp/root"

meson install -C "$build" --destdir "$root" --no-rebuild --quiet
pc=$(find "$root" -name pipeline-run.pc | head -n 1)
test -n "$pc" || { echo "install_test: no pipeline-run.pc installed" >&2; exit 1; }

# The .pc file names the final prefix; point a copy of it at the staged tree.
prefix=$(PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --variable=prefix pipeline-run)
mkdir "$tmp/pc"
sed "s|^prefix=.*|prefix=$root$prefix|" "$pc" > "$tmp/pc/pipeline-run.pc"
export PKG_CONFIG_PATH="$tmp/pc"
libdir=$(pkg-config --variable=libdir pipeline-run)
echo "installed pipeline-run $(pkg-config --modversion pipeline-run) in $root$prefix"
echo "cflags: $(pkg-config --cflags pipeline-run)"
echo "libs:   $(pkg-config --libs pipeline-run)"

# Sources are copied out of the tree so that only the installed headers can be found.
for ex in toy_two_stage plan_loop split_compare; do cp "$examples/$ex.c" "$tmp/"; done
cd "$tmp"
cflags="-std=c11 -Wall -Wextra -Werror"
if [ "$sanitize" != none ]; then cflags="$cflags -fsanitize=$sanitize"; fi
for ex in toy_two_stage plan_loop split_compare; do
    cc $cflags -o "$ex" "$ex.c" $(pkg-config --cflags --libs pipeline-run)
    readelf -d "$ex" | grep -q 'NEEDED.*libpipeline-run' ||
        { echo "install_test: $ex does not use the shared library" >&2; exit 1; }
done
cc $cflags -o toy_static toy_two_stage.c $(pkg-config --cflags pipeline-run) \
    $(pkg-config --libs --static pipeline-run | sed 's/-lpipeline-run/-l:libpipeline-run.a/')
if readelf -d toy_static | grep -q 'NEEDED.*libpipeline-run'; then
    echo "install_test: toy_static needs the shared library" >&2
    exit 1
fi

export LD_LIBRARY_PATH="$libdir"
./toy_two_stage 10 > toy_shared.out
./toy_static 10 > toy_static.out
# Same program, same arithmetic: the losses must match (timings may not).
awk '/^step/ {print $2, $4}' toy_shared.out > toy_shared.loss
awk '/^step/ {print $2, $4}' toy_static.out > toy_static.loss
test -s toy_shared.loss && cmp -s toy_shared.loss toy_static.loss ||
    { echo "install_test: shared and static builds disagree" >&2; exit 1; }
tail -n 1 toy_shared.out
./split_compare | tail -n 1
./plan_loop "$plan" 1 | tail -n 1
echo "install_test: all examples built against the installed tree and ran"
