/*
 * check.h - the minimal assertion helpers every test executable uses.
 * A failed CHECK prints file:line and the condition and counts a failure;
 * the test keeps going so one run shows every failure. check_summary()
 * prints the totals and returns the exit code (0 pass, 1 fail).
 * Also the file helpers several tests share: a scratch directory,
 * whole-file reads and token files.
 */
#ifndef PP_TESTS_CHECK_H
#define PP_TESTS_CHECK_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "runtime/core/status.h"

/* atomic: tests that check from several threads count every check. A test
 * built from several files counts in one pair: the file with main defines
 * PP_CHECK_COUNTERS before including this, the others PP_CHECK_SHARED. */
#if defined(PP_CHECK_COUNTERS)
_Atomic int check_failures_;
_Atomic int check_total_;
#elif defined(PP_CHECK_SHARED)
extern _Atomic int check_failures_;
extern _Atomic int check_total_;
#else
static _Atomic int check_failures_;
static _Atomic int check_total_;
#endif

#define CHECK(cond) CHECK_MSG(cond, "%s", #cond)

#define CHECK_MSG(cond, ...)                                                     \
    do {                                                                         \
        check_total_++;                                                          \
        if (!(cond)) {                                                           \
            check_failures_++;                                                   \
            fprintf(stderr, "%s:%d: check failed: ", __FILE__, __LINE__);        \
            fprintf(stderr, __VA_ARGS__);                                        \
            fputc('\n', stderr);                                                 \
        }                                                                        \
    } while (0)

/* Checks that a pp_status is PP_OK, printing the error message otherwise. */
#define CHECK_OK(expr, errp)                                                     \
    do {                                                                         \
        pp_status check_s_ = (expr);                                             \
        CHECK_MSG(check_s_ == PP_OK, "%s -> %s: %s", #expr,                      \
                  pp_status_name(check_s_), (errp)->msg);                        \
    } while (0)

static inline int check_summary(const char *name)
{
    int failed = check_failures_;
    fprintf(stderr, "%s: %d checks, %d failed\n", name, (int)check_total_, failed);
    return failed ? 1 : 0;
}

/* Makes a fresh directory $TMPDIR/NAME.XXXXXX (/tmp when TMPDIR is unset) into
 * buf; returns buf, or NULL (with a message) when it cannot. */
static inline char *check_mkdtemp(char *buf, size_t n, const char *name)
{
    const char *base = getenv("TMPDIR");
    snprintf(buf, n, "%s/%s.XXXXXX", base && *base ? base : "/tmp", name);
    if (mkdtemp(buf)) return buf;
    perror("mkdtemp");
    return NULL;
}

/* Removes dir and everything in it (a test's scratch directory), saying so
 * on stderr when it cannot. */
static inline void check_rmtree(const char *dir)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

/* The whole file, malloc'ed (NULL if absent), followed by a 0 byte, so that
 * a text can be read as a string (strtok, strstr); *n its size. */
static inline unsigned char *check_read_file(const char *path, size_t *n)
{
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc(size > 0 ? (size_t)size + 1 : 1);
    if (buf) {
        *n = fread(buf, 1, size > 0 ? (size_t)size : 0, f);
        buf[*n] = 0;
    }
    fclose(f);
    return buf;
}

/* Writes n bytes of data to path, created or truncated; a failed check
 * names the path when it cannot. */
static inline void check_write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    CHECK_MSG(f != NULL, "cannot create %s", path);
    if (!f) return;
    int ok = fwrite(data, 1, n, f) == n;
    ok = fclose(f) == 0 && ok;
    CHECK_MSG(ok, "cannot write %s", path);
}

/* Writes an IDX file of unsigned bytes: its magic (two zero bytes, type 0x08,
 * nd), the nd dims big-endian, then the n bytes of data. Returns 0, or 1 when
 * it cannot. */
static inline int check_write_idx(const char *path, int nd, const uint32_t *dims,
                                  const uint8_t *data, size_t n)
{
    uint8_t hdr[4 + 4 * 8] = {0, 0, 0x08, (uint8_t)nd};
    if (nd < 0 || nd > 8) return 1;
    for (int i = 0; i < nd; i++)
        for (int b = 0; b < 4; b++) hdr[4 + 4 * i + b] = (uint8_t)(dims[i] >> (24 - 8 * b));
    FILE *f = fopen(path, "wb");
    const size_t hl = 4 + 4 * (size_t)nd;
    int ok = f && fwrite(hdr, 1, hl, f) == hl && fwrite(data, 1, n, f) == n;
    if (f && fclose(f) != 0) ok = 0;
    return ok ? 0 : 1;
}

/* Writes an llm.c token file (256 int32 of header: magic 20240520, version
 * 1, the count; then the ids as uint16) of n pseudo-random ids below vocab,
 * the same for every call. Returns 0, or 1 when it cannot. */
static inline int check_write_tokens(const char *path, uint32_t n, uint32_t vocab)
{
    FILE *f = fopen(path, "wb");
    int32_t header[256] = {20240520, 1, (int32_t)n};
    int ok = f && fwrite(header, sizeof header, 1, f) == 1;
    for (uint32_t i = 0, x = 12345; ok && i < n; i++) {
        x = x * 1664525u + 1013904223u;
        uint16_t id = (uint16_t)((x >> 8) % vocab);
        ok = fwrite(&id, sizeof id, 1, f) == 1;
    }
    if (f && fclose(f) != 0) ok = 0;
    return ok ? 0 : 1;
}

#endif
