/*
 * algo_cache.h - the convolution algorithms a CUDA device has chosen, shared
 * by all its execs, and the optional file that keeps them across runs.
 *
 * Plain C without CUDA headers (algorithms and cuDNN math types are kept as
 * the integers of their enums), built with or without the CUDA backend, so
 * that the file format is tested on machines without a GPU.
 *
 * An entry maps a key (GPU name, cuDNN version, the device's math mode, the
 * workspace cap the choice was measured under, the direction and the
 * convolution's geometry) to a choice (algorithm, cuDNN math type, measured
 * milliseconds, how many algorithms were left out of the measurement for
 * asking more workspace than the cap, with the most one of them asked, and
 * which of cuDNN's two APIs runs it: the algorithm of the legacy API, or the
 * fastest execution plan of the graph API, with that plan's time).
 * Choices made under different caps never mix: each cap has its own keys. The first choice stored for a key wins:
 * an exec that measured the same shape at the same time as another adopts
 * the stored one, so every exec of a device runs one algorithm per shape.
 *
 * The file is plain text, one entry per line, fields separated by one tab:
 *
 *   # pipeline-run cudnn algorithms 3
 *   GPU  CUDNN  MATH  WS_MB  DIRECTION  N C H W K R S STRIDE_H STRIDE_W PAD_H PAD_W  ALGO
 *   MATH_TYPE  MS  OVER  OVER_MB  API  GRAPH_MS
 *
 * (one line), for example "NVIDIA H100 80GB HBM3<TAB>91900<TAB>fp32<TAB>512
 * <TAB>fwd<TAB>32 64 56 56 64 1 1 1 1 0 0<TAB>1<TAB>3<TAB>0.0412<TAB>1<TAB>
 * 1830<TAB>graph<TAB>0.0371". MATH is fp32 or tf32; WS_MB is the workspace
 * cap in MiB (PP_CUDA_CONV_WS_MB); DIRECTION is fwd, bwd_data or
 * bwd_filter; ALGO and MATH_TYPE are the values of cudnnConvolution*Algo_t
 * and cudnnMathType_t; MS is what the measurement took, OVER the number of
 * algorithms left out of it for asking more than WS_MB and OVER_MB the most
 * one of them asked (MiB, rounded up; 0 when OVER is 0): information only.
 * API is legacy (ALGO runs) or graph (the graph API's fastest execution
 * plan runs, chosen again at each run's first use: plans are not kept);
 * GRAPH_MS that plan's time when the choice was made, 0 when the graph API
 * was not timed (PP_CUDA_CONV_API=legacy, or it offered no plan). The first
 * line must be the header above; further lines starting with '#', and
 * empty lines, are ignored. A file of version 2 (lines without API and
 * GRAPH_MS) is read as legacy choices with the graph API not timed; one of
 * version 1 (the header ending in 1, lines without WS_MB, OVER, OVER_MB,
 * API and GRAPH_MS) likewise, chosen under the 512 MiB cap of its time with
 * OVER unknown (read as 0). Either is written back as version 3.
 *
 * Reading happens once, at the first lookup. A missing or empty file is an
 * empty cache. A file that cannot be read, is larger than PP_ALGO_FILE_MAX or does
 * not start with the header is foreign: it is neither used nor ever
 * replaced. Entry lines that do not parse are skipped and counted; the rest
 * are used (the CUDA backend still checks every stored choice with cuDNN
 * before running it, and measures again when cuDNN refuses it).
 * Writing happens after each new entry: the file's current entries are merged
 * in first (another process or device may have added some), then the whole
 * cache replaces the file atomically (runtime/core/path.h). Write failures are
 * counted, never fatal: the file only saves measurements.
 *
 * Thread safety: every function taking a pp_algo_cache locks its mutex
 * (execs of one device run on different threads); the file is read and
 * written under it. No function reports through pp_error except init.
 */
#ifndef PP_ALGO_CACHE_H
#define PP_ALGO_CACHE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "runtime/core/ops.h"

#define PP_ALGO_FILE_HEADER "# pipeline-run cudnn algorithms 3"
#define PP_ALGO_FILE_HEADER_V2 "# pipeline-run cudnn algorithms 2"
#define PP_ALGO_FILE_HEADER_V1 "# pipeline-run cudnn algorithms 1"
#define PP_ALGO_WS_MB_DEFAULT 512 /* the workspace cap without PP_CUDA_CONV_WS_MB; version 1's */
#define PP_ALGO_WS_MB_MAX 65536
#define PP_ALGO_PLANS_DEFAULT 4 /* graph API plans timed per convolution without PP_CUDA_CONV_PLANS */
#define PP_ALGO_PLANS_MAX 16
#define PP_ALGO_FILE_MAX ((size_t)16 << 20) /* bytes */
#define PP_ALGO_GPU_MAX 64                  /* bytes of a GPU name with its terminator */
#define PP_ALGO_GEOM 11                     /* n c h w k r s stride_h stride_w pad_h pad_w */

typedef enum pp_algo_dir {
    PP_ALGO_FWD = 0,
    PP_ALGO_BWD_DATA = 1,
    PP_ALGO_BWD_FILTER = 2,
} pp_algo_dir;

/* Compared as bytes: made by pp_algo_key_make or the parser only. */
/* Which of cuDNN's APIs runs a convolution (pp_algo_choice.api), and
 * which the device may choose from (PP_CUDA_CONV_API). */
typedef enum pp_algo_api {
    PP_ALGO_API_LEGACY = 0, /* cudnnConvolution*(): the chosen algorithm */
    PP_ALGO_API_GRAPH = 1,  /* the graph API's fastest execution plan (gconv.c) */
    PP_ALGO_API_AUTO = 2,   /* the device setting only: whichever timed faster */
} pp_algo_api;

/* A graph API's plan replaces the legacy algorithm only when its timed call
 * is faster by more than this fraction of the algorithm's measured time: the
 * two are timed by different code (cudnnFind*, one timed call of each of up
 * to PP_CUDA_CONV_PLANS plans), and a near tie is not worth a second API. */
#define PP_ALGO_GRAPH_MARGIN 0.03f

typedef struct pp_algo_key {
    char gpu[PP_ALGO_GPU_MAX]; /* printable, no tab; zero-padded */
    int cudnn;                 /* cudnnGetVersion() */
    int math;                  /* pp_math_mode */
    int ws_mb;                 /* the workspace cap measured under, MiB */
    int dir;                   /* pp_algo_dir */
    int geom[PP_ALGO_GEOM];
} pp_algo_key;

typedef struct pp_algo_choice {
    int algo;      /* cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t */
    int math_type; /* cudnnMathType_t */
    float ms;      /* measured time of one call */
    int over;      /* algorithms left out of the measurement: more workspace than the cap */
    int over_mb;   /* the most one of those asked, MiB rounded up (0: none) */
    int api;       /* pp_algo_api: PP_ALGO_API_LEGACY (algo runs) or PP_ALGO_API_GRAPH */
    float graph_ms; /* the graph API's fastest plan's time of one call; 0: not timed */
} pp_algo_choice;

typedef struct pp_algo_stats {
    int file_entries;  /* entries read from the file */
    int bad_lines;     /* lines of the file skipped because they did not parse */
    bool foreign;      /* the file is not a cache file: not used, not replaced */
    int inserted;      /* new entries stored (measured here) */
    int updated;       /* entries whose choice was replaced (pp_algo_cache_update) */
    int over;          /* their algorithms left out for asking more than the cap */
    int over_mb;       /* the most one of those asked, MiB (0: none) */
    int hits;          /* lookups answered */
    int saves;         /* successful writes of the file */
    int save_failures; /* failed writes; save_error holds the last message */
    char save_error[256]; /* (cut to fit) */
} pp_algo_stats;

typedef struct pp_algo_entry pp_algo_entry;

typedef struct pp_algo_cache {
    pthread_mutex_t lock;
    char *path;              /* NULL: no file */
    bool loaded;             /* the file has been read (or there is none) */
    pp_algo_entry *entries;  /* n of cap, in insertion order */
    int n, cap;
    pp_algo_stats stats;
} pp_algo_cache;

/* The key of convolution d in direction dir on a GPU named gpu, measured
 * with at most ws_mb MiB of workspace. The name is
 * cleaned for the file: tabs and control characters become '_', it is cut
 * to PP_ALGO_GPU_MAX - 1 bytes, and an empty name becomes "unknown". */
void pp_algo_key_make(pp_algo_key *key, const char *gpu, int cudnn, pp_math_mode math,
                      int ws_mb, pp_algo_dir dir, const pp_conv2d_desc *d);

/* An empty cache that reads and writes path (copied; NULL or "" for none).
 * PP_ERR_OOM when out of host memory. */
pp_status pp_algo_cache_init(pp_algo_cache *c, const char *path, pp_error *err);
void pp_algo_cache_destroy(pp_algo_cache *c);

/* The stored choice for key, reading the file first if it has not been
 * read yet; false when there is none. */
bool pp_algo_cache_find(pp_algo_cache *c, const pp_algo_key *key, pp_algo_choice *out);
/* Stores *choice for key unless a choice is stored already; either way
 * *choice becomes the stored one. A new entry is written to the file and
 * its over-cap figures are added to the statistics. */
void pp_algo_cache_insert(pp_algo_cache *c, const pp_algo_key *key, pp_algo_choice *choice);
/* Replaces the stored choice for key by *choice (stores it when there is
 * none) and writes the file: the graph API's plan first timed for a choice
 * read from a file that had not timed it. */
void pp_algo_cache_update(pp_algo_cache *c, const pp_algo_key *key, const pp_algo_choice *choice);
/* Forgets the choice for key (one cuDNN refused), so that a new one can be
 * stored. */
void pp_algo_cache_remove(pp_algo_cache *c, const pp_algo_key *key);

pp_algo_stats pp_algo_cache_stats(pp_algo_cache *c);
/* Entry i of those held (0 <= i < c->n, in the order stored) into *key and
 * *choice; false when there is no such entry. */
bool pp_algo_cache_entry(pp_algo_cache *c, int i, pp_algo_key *key, pp_algo_choice *choice);

/* PP_CUDNN_FIND: unset or "1" measures algorithms (*on = true), "0" uses
 * cuDNN's heuristics only (and no cache); anything else is PP_ERR_INPUT. */
pp_status pp_algo_find_from_env(bool *on, pp_error *err);
/* PP_CUDA_CONV_WS_MB: unset gives PP_ALGO_WS_MB_DEFAULT; a decimal number
 * of MiB in 1..PP_ALGO_WS_MB_MAX is *mb; anything else is PP_ERR_INPUT
 * naming the variable and the value. */
pp_status pp_algo_ws_from_env(int *mb, pp_error *err);
/* PP_CUDA_CONV_API: unset or "auto" gives PP_ALGO_API_AUTO (fp32 and tf32
 * convolutions time the graph API's plans beside the legacy algorithms and
 * run the faster), "legacy" the legacy algorithms only, "graph" the graph
 * API's plans wherever it has one (the legacy algorithms elsewhere); anything
 * else is PP_ERR_INPUT naming the variable and the value. */
pp_status pp_algo_api_from_env(pp_algo_api *api, pp_error *err);
/* PP_CUDA_CONV_PLANS: how many of the graph API's execution plans a
 * convolution times at its first use (bf16, and fp32 and tf32 beside the
 * algorithms): unset gives PP_ALGO_PLANS_DEFAULT; a decimal number in
 * 1..PP_ALGO_PLANS_MAX is *n; anything else is PP_ERR_INPUT naming the
 * variable and the value. */
pp_status pp_algo_plans_from_env(int *n, pp_error *err);

#endif
