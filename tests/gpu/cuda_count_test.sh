#!/usr/bin/env bash
# cuda_count_test.sh - checks the cuda_count.c interposer without a GPU: builds
# a stand-in libcudart.so.13 (same soname and symbol version as the real one,
# so the program's references read cudaMalloc@libcudart.so.13), a program
# that calls it from several threads, and checks that under LD_PRELOAD every
# call is counted, forwarded to the stand-in (arguments and return values
# intact) and reported at exit, to PP_CUDA_COUNT_OUT or to stderr.
#
# Usage: tests/gpu/cuda_count_test.sh [LIBCUDA_COUNT.so]
#   without an argument the interposer is built from cuda_count.c next to
#   this script. CC picks the compiler (default cc). Exit 0 on success.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cc=${CC:-cc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [ $# -ge 1 ]; then
    lib=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
else
    lib=$tmp/libcuda_count.so
    "$cc" -std=c11 -O2 -Wall -Wextra -Werror -shared -fPIC -o "$lib" "$here/cuda_count.c" -ldl
fi

cat >"$tmp/fake.c" <<'EOF'
#include <stddef.h>
#include <stdlib.h>
/* Stand-in runtime: allocation returns a recognisable pointer, free(NULL)
 * returns 17 so the caller can see return values pass through. No entry
 * calls another (that call would be counted too, as an outside one). */
static char arena[64];
int fake_calls;
int cudaMalloc(void **p, size_t n) { __atomic_add_fetch(&fake_calls, 1, 0); *p = arena + (n % 8); return 0; }
int cudaFree(void *p) { __atomic_add_fetch(&fake_calls, 1, 0); return p ? 0 : 17; }
int cudaMallocAsync(void **p, size_t n, void *s) { __atomic_add_fetch(&fake_calls, 1, 0); *p = arena; return s ? 0 : 3; }
int cudaMallocAsync_ptsz(void **p, size_t n, void *s) { __atomic_add_fetch(&fake_calls, 1, 0); *p = arena; return s ? 0 : 3; }
int cudaFreeAsync(void *p, void *s) { __atomic_add_fetch(&fake_calls, 1, 0); return p && s ? 0 : 1; }
int cudaMallocFromPoolAsync(void **p, size_t n, void *pool, void *s) { __atomic_add_fetch(&fake_calls, 1, 0); *p = pool; return s ? 0 : 1; }
int cudaMallocHost(void **p, size_t n) { __atomic_add_fetch(&fake_calls, 1, 0); *p = arena; return 0; }
int cudaHostAlloc(void **p, size_t n, unsigned f) { __atomic_add_fetch(&fake_calls, 1, 0); *p = arena; return (int)f; }
int cudaFreeHost(void *p) { __atomic_add_fetch(&fake_calls, 1, 0); return p ? 0 : 1; }
int cudaDeviceSynchronize(void) { __atomic_add_fetch(&fake_calls, 1, 0); return 0; }
int cudaStreamSynchronize(void *s) { __atomic_add_fetch(&fake_calls, 1, 0); return s ? 0 : 1; }
int cudaEventSynchronize(void *e) { __atomic_add_fetch(&fake_calls, 1, 0); return e ? 0 : 1; }
int cudaMemcpy(void *d, const void *s, size_t n, int k) { __atomic_add_fetch(&fake_calls, 1, 0); return d && s && n ? k : 1; }
typedef struct { unsigned x, y, z; } dim3;
int cudaLaunchKernel(const void *f, dim3 g, dim3 b, void **a, size_t shm, void *s) { __atomic_add_fetch(&fake_calls, 1, 0); return f && a && s ? (int)(g.x + g.y + g.z + b.x + b.y + b.z + shm) : 1; }
int cudaGraphLaunch(void *e, void *s) { __atomic_add_fetch(&fake_calls, 1, 0); return e && s ? 0 : 1; }
int cudaStreamBeginCapture(void *s, int mode) { __atomic_add_fetch(&fake_calls, 1, 0); return s ? mode : 1; }
EOF
cat >"$tmp/fake.map" <<'EOF'
libcudart.so.13 { global: *; };
EOF
cat >"$tmp/prog.c" <<'EOF'
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
int cudaMalloc(void **p, size_t n);
int cudaFree(void *p);
int cudaMallocAsync(void **p, size_t n, void *s);
int cudaMallocAsync_ptsz(void **p, size_t n, void *s);
int cudaFreeAsync(void *p, void *s);
int cudaMallocFromPoolAsync(void **p, size_t n, void *pool, void *s);
int cudaMallocHost(void **p, size_t n);
int cudaHostAlloc(void **p, size_t n, unsigned f);
int cudaFreeHost(void *p);
int cudaDeviceSynchronize(void);
int cudaStreamSynchronize(void *s);
int cudaEventSynchronize(void *e);
int cudaMemcpy(void *d, const void *s, size_t n, int k);
typedef struct { unsigned x, y, z; } dim3;
int cudaLaunchKernel(const void *f, dim3 g, dim3 b, void **a, size_t shm, void *s);
int cudaGraphLaunch(void *e, void *s);
int cudaStreamBeginCapture(void *s, int mode);
extern int fake_calls;
#define THREADS 4
#define PER_THREAD 2500
static int stream_obj;
static void *worker(void *arg)
{
    (void)arg;
    for (int i = 0; i < PER_THREAD; i++) {
        void *p = NULL;
        if (cudaMallocAsync(&p, 100, &stream_obj) != 0 || !p) return (void *)1;
        if (cudaFreeAsync(p, &stream_obj) != 0) return (void *)1;
    }
    return NULL;
}
int main(void)
{
    int bad = 0;
    void *p = NULL;
    for (int i = 0; i < 3; i++) bad |= cudaMalloc(&p, 1000) != 0 || !p;
    for (int i = 0; i < 3; i++) bad |= cudaFree(p) != 0;
    bad |= cudaFree(NULL) != 17;                        /* return value passes through */
    bad |= cudaMallocAsync(&p, 1, NULL) != 3;
    bad |= cudaMallocAsync_ptsz(&p, 24, &stream_obj) != 0;
    bad |= cudaMallocFromPoolAsync(&p, 5, &stream_obj, &stream_obj) != 0 || p != &stream_obj;
    bad |= cudaMallocHost(&p, 4096) != 0;
    bad |= cudaHostAlloc(&p, 8, 9) != 9;
    bad |= cudaFreeHost(p) != 0;
    bad |= cudaDeviceSynchronize() != 0;
    bad |= cudaStreamSynchronize(&stream_obj) != 0;
    bad |= cudaEventSynchronize(&stream_obj) != 0;
    bad |= cudaEventSynchronize(&stream_obj) != 0;
    bad |= cudaMemcpy(&stream_obj, &stream_obj, 64, 2) != 2;
    void *args[1] = {&stream_obj};
    for (int i = 0; i < 5; i++) /* dim3 arguments arrive intact */
        bad |= cudaLaunchKernel(&stream_obj, (dim3){1, 2, 3}, (dim3){4, 5, 6}, args, 7,
                                &stream_obj) != 28;
    for (int i = 0; i < 3; i++) bad |= cudaGraphLaunch(&stream_obj, &stream_obj) != 0;
    bad |= cudaStreamBeginCapture(&stream_obj, 2) != 2;
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, worker, NULL);
    for (int i = 0; i < THREADS; i++) {
        void *r;
        pthread_join(t[i], &r);
        bad |= r != NULL;
    }
    printf("fake_calls=%d bad=%d\n", fake_calls, bad);
    return bad;
}
EOF
"$cc" -shared -fPIC -Wl,-soname,libcudart.so.13 -Wl,--version-script="$tmp/fake.map" \
    -o "$tmp/libcudart.so.13" "$tmp/fake.c"
ln -s libcudart.so.13 "$tmp/libcudart.so"
"$cc" -o "$tmp/prog" "$tmp/prog.c" -L"$tmp" -lcudart -Wl,-rpath,"$tmp" -lpthread

fail=0
check() { # what expected actual
    if [ "$2" = "$3" ]; then
        echo "ok   $1 = $3"
    else
        echo "FAIL $1: expected $2, got $3"
        fail=1
    fi
}
check "versioned reference" 1 "$(nm -D --undefined-only "$tmp/prog" | grep -c 'cudaMalloc@libcudart.so.13$' || true)"

# Without the interposer: the stand-in sees every call, nothing is reported.
out=$("$tmp/prog" 2>"$tmp/err0")
calls=$((3 + 4 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 2 + 1 + 5 + 3 + 1 + 4 * 2500 * 2))
check "plain run" "fake_calls=$calls bad=0" "$out"
check "plain run reports nothing" 0 "$(grep -c cuda_count "$tmp/err0" || true)"

# With it, to a file: the program still works and the counts are exact.
out=$(env LD_PRELOAD="$lib" PP_CUDA_COUNT_OUT="$tmp/counts" "$tmp/prog")
check "preloaded run" "fake_calls=$calls bad=0" "$out"
line=$(cat "$tmp/counts")
echo "$line"
field() { echo "$line" | tr ' ' '\n' | awk -F= -v k="$1" '$1 == k { print $2 }'; }
check prog prog "$(field prog)"
check cudaMalloc 3 "$(field cudaMalloc)"
check cudaMalloc.bytes 3000 "$(field cudaMalloc.bytes)"
check cudaFree 4 "$(field cudaFree)"
check cudaMallocAsync $((2 + 4 * 2500)) "$(field cudaMallocAsync)"
check cudaMallocAsync.bytes $((1 + 24 + 4 * 2500 * 100)) "$(field cudaMallocAsync.bytes)"
check cudaFreeAsync $((4 * 2500)) "$(field cudaFreeAsync)"
check cudaMallocFromPoolAsync 1 "$(field cudaMallocFromPoolAsync)"
check cudaMallocHost 1 "$(field cudaMallocHost)"
check cudaHostAlloc 1 "$(field cudaHostAlloc)"
check cudaFreeHost 1 "$(field cudaFreeHost)"
check cudaMallocManaged 0 "$(field cudaMallocManaged)"
check cudaDeviceSynchronize 1 "$(field cudaDeviceSynchronize)"
check cudaStreamSynchronize 1 "$(field cudaStreamSynchronize)"
check cudaEventSynchronize 2 "$(field cudaEventSynchronize)"
check cudaMemcpy 1 "$(field cudaMemcpy)"
check cudaMemcpy.bytes 64 "$(field cudaMemcpy.bytes)"
check cudaLaunchKernel 5 "$(field cudaLaunchKernel)"
check cudaGraphLaunch 3 "$(field cudaGraphLaunch)"
check cudaStreamBeginCapture 1 "$(field cudaStreamBeginCapture)"

# A second process appends its own line.
env LD_PRELOAD="$lib" PP_CUDA_COUNT_OUT="$tmp/counts" "$tmp/prog" >/dev/null
check "lines after two runs" 2 "$(grep -c '^cuda_count prog=prog pid=' "$tmp/counts")"

# Without PP_CUDA_COUNT_OUT the line goes to stderr.
env LD_PRELOAD="$lib" "$tmp/prog" >/dev/null 2>"$tmp/err1"
check "stderr report" 1 "$(grep -c '^cuda_count prog=prog .* cudaMalloc=3 ' "$tmp/err1")"

# A missing symbol in the runtime (cudaMallocManaged here) fails cleanly
# rather than crashing: checked by calling it through the interposer alone.
cat >"$tmp/missing.c" <<'EOF'
#include <stddef.h>
int cudaMallocManaged(void **p, size_t n, unsigned f);
int main(void) { void *p; return cudaMallocManaged(&p, 1, 1) == 999 ? 0 : 1; }
EOF
"$cc" -o "$tmp/missing" "$tmp/missing.c" "$lib" -Wl,-rpath,"$(dirname "$lib")"
if PP_CUDA_COUNT_OUT="$tmp/counts2" "$tmp/missing"; then
    check "missing symbol returns cudaErrorUnknown" ok ok
else
    check "missing symbol returns cudaErrorUnknown" ok "status $?"
fi

if [ $fail -eq 0 ]; then echo "cuda_count_test: all checks passed"; else echo "cuda_count_test: FAILED"; fi
exit $fail
