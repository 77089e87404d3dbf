/*
 * data.c - IDX, CIFAR-10 and synthetic data sources (see io/data.h).
 *
 * IDX and CIFAR files are read whole into host memory at open and validated
 * there; a batch is then a gather of u8 samples through a per-channel lookup
 * table (u8 -> (u8/255 - mean) / std, computed in float as PyTorch's
 * ToTensor + Normalize do). Synthetic samples are generated from counter-based
 * hashes, so any sample can be produced without producing the others.
 *
 * Concurrent reads: after pp_data_open everything a read uses is read-only
 * (files, lookup table, shape, seed) except the cache of shuffle
 * permutations. That cache has PERM_SLOTS slots under a mutex; a read holds
 * the slot of the epoch it is in (counted in `users`) while it gathers, and
 * a slot is rebuilt for another epoch only when no read holds it (a read that
 * finds every slot held waits for one). A read holds one slot at a time, so
 * waiting cannot deadlock. Without shuffling no lock is taken.
 */
#include "runtime/io/data.h"
#include "runtime/io/data_internal.h"

#include "runtime/io/idx.h"
#include "runtime/io/imagefolder.h"
#include "runtime/io/tokens.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#if defined(__AVX__)
#include <immintrin.h>
#endif

#define CIFAR_SIDE 32
#define CIFAR_IMAGE (3 * CIFAR_SIDE * CIFAR_SIDE)
#define CIFAR_RECORD (1 + CIFAR_IMAGE)
#define CIFAR_CLASSES 10
#define MAX_SAMPLE_BYTES ((int64_t)1 << 28)
#define PERM_SLOTS 2        /* epochs whose permutation is kept (a batch spans two) */
#define SYNTH_CHUNK 4096    /* synthetic bytes generated per pass (a multiple of 8) */

/* One cached shuffle permutation (under pp_data.perm_mu). */
typedef struct perm_slot {
    int64_t epoch;          /* -1: empty */
    uint32_t *perm;         /* n entries, allocated on first use */
    int users;              /* reads gathering through it now */
    uint64_t last_use;      /* perm_clock at its last acquisition */
} perm_slot;

struct pp_data {
    pp_data_format format;
    int c, h, w, classes;
    int64_t n;              /* samples */
    int64_t sample_bytes;   /* c * h * w */
    uint8_t *pixels;        /* n * sample_bytes (idx, cifar10) */
    uint8_t *labels;        /* n (idx, cifar10) */
    pp_tokens *tokens;      /* tokens, text: the stream (w is its block_size) */
    bool tokenized;         /* a text through the tokenizer: how, in tokenizing */
    pp_data_tokenizing tokenizing;
    void *raw[2];           /* buffers that pixels/labels point into */
    pp_images *images;      /* imagefolder */
    float *lut;             /* c * 256: pixel value per channel and byte */
    bool shuffle;
    uint64_t seed;
    pthread_mutex_t perm_mu;
    pthread_cond_t perm_free; /* some slot's users dropped to 0 */
    perm_slot perms[PERM_SLOTS];
    uint64_t perm_clock;
};

/* ---- hashing (splitmix64 finaliser, chained) ---------------------------------- */

static uint64_t mix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

enum { TAG_LABEL = 1, TAG_PATTERN = 2, TAG_NOISE = 3, TAG_PERM = 4 };

/* hash4(seed, tag, a, b) = mix64(hash_key(seed, tag, a) ^ b): a key can be
 * computed once for many b. */
static uint64_t hash_key(uint64_t seed, uint64_t tag, uint64_t a)
{
    return mix64(mix64(mix64(seed) ^ tag) ^ a);
}

static uint64_t hash4(uint64_t seed, uint64_t tag, uint64_t a, uint64_t b)
{
    return mix64(hash_key(seed, tag, a) ^ b);
}

/* ---- files ------------------------------------------------------------------ */

static pp_status open_idx(pp_data *d, const pp_data_config *cfg, pp_error *err)
{
    pp_idx images, labels;
    PP_TRY(pp_idx_read(cfg->images, 3, 4, "image", &images, err));
    d->raw[0] = images.buf; /* freed by pp_data_close */
    PP_TRY(pp_idx_read(cfg->labels, 1, 1, "label", &labels, err));
    d->raw[1] = labels.buf;
    const int64_t *idims = images.dims, *ldims = labels.dims;
    const int ind = images.nd;
    if (ldims[0] != idims[0])
        return pp_error_set(err, PP_ERR_INPUT, "%s: %lld labels for the %lld images of %s",
                            cfg->labels, (long long)ldims[0], (long long)idims[0], cfg->images);
    d->n = idims[0];
    d->c = ind == 4 ? (int)idims[1] : 1;
    d->h = (int)idims[ind - 2];
    d->w = (int)idims[ind - 1];
    d->pixels = (uint8_t *)images.data;
    d->labels = (uint8_t *)labels.data;
    int max_label = 0;
    for (int64_t i = 0; i < d->n; i++)
        if (d->labels[i] > max_label) max_label = d->labels[i];
    d->classes = cfg->classes > 0 ? cfg->classes : max_label + 1;
    if (max_label >= d->classes) {
        int64_t i = 0;
        while (d->labels[i] < d->classes) i++;
        return pp_error_set(err, PP_ERR_INPUT, "%s: label %d of sample %lld is not below the %d "
                            "classes", cfg->labels, d->labels[i], (long long)i, d->classes);
    }
    return PP_OK;
}

static pp_status open_cifar(pp_data *d, const pp_data_config *cfg, pp_error *err)
{
    if (cfg->n_files < 1 || cfg->n_files > PP_DATA_MAX_FILES)
        return pp_error_set(err, PP_ERR_INPUT, "data: cifar10 needs 1 to %d batch files, got %d",
                            PP_DATA_MAX_FILES, cfg->n_files);
    if (cfg->classes != 0 && cfg->classes != CIFAR_CLASSES)
        return pp_error_set(err, PP_ERR_INPUT, "data: cifar10 has %d classes, not %d",
                            CIFAR_CLASSES, cfg->classes);
    uint8_t *bufs[PP_DATA_MAX_FILES] = {0};
    int64_t sizes[PP_DATA_MAX_FILES] = {0};
    pp_status s = PP_OK;
    int64_t n = 0;
    for (int f = 0; f < cfg->n_files && s == PP_OK; f++) {
        s = pp_file_read_all(cfg->files[f], &bufs[f], &sizes[f], err);
        if (s == PP_OK && (sizes[f] == 0 || sizes[f] % CIFAR_RECORD != 0))
            s = pp_error_set(err, PP_ERR_INPUT,
                             "%s: size %lld is not a positive multiple of the %d-byte CIFAR-10 "
                             "record (1 label byte + 3x32x32 image)",
                             cfg->files[f], (long long)sizes[f], CIFAR_RECORD);
        for (int64_t r = 0; s == PP_OK && r < sizes[f] / CIFAR_RECORD; r++) {
            uint8_t label = bufs[f][r * CIFAR_RECORD];
            if (label >= CIFAR_CLASSES)
                s = pp_error_set(err, PP_ERR_INPUT,
                                 "%s: record %lld has label %d, not below %d (not a CIFAR-10 "
                                 "batch? CIFAR-100 is not supported)",
                                 cfg->files[f], (long long)r, label, CIFAR_CLASSES);
        }
        n += sizes[f] / CIFAR_RECORD;
    }
    if (s == PP_OK) {
        d->raw[0] = malloc((size_t)n * CIFAR_IMAGE);
        d->raw[1] = malloc((size_t)n);
        if (!d->raw[0] || !d->raw[1])
            s = pp_error_set(err, PP_ERR_OOM, "data: out of host memory for %lld CIFAR images",
                             (long long)n);
    }
    if (s == PP_OK) {
        d->pixels = d->raw[0];
        d->labels = d->raw[1];
        int64_t k = 0;
        for (int f = 0; f < cfg->n_files; f++) {
            for (int64_t r = 0; r < sizes[f] / CIFAR_RECORD; r++, k++) {
                const uint8_t *rec = bufs[f] + r * CIFAR_RECORD;
                d->labels[k] = rec[0];
                memcpy(d->pixels + k * CIFAR_IMAGE, rec + 1, CIFAR_IMAGE);
            }
        }
        d->n = n;
        d->c = 3;
        d->h = d->w = CIFAR_SIDE;
        d->classes = CIFAR_CLASSES;
    }
    for (int f = 0; f < cfg->n_files; f++) free(bufs[f]);
    return s;
}

static pp_status open_synthetic(pp_data *d, const pp_data_config *cfg, pp_error *err)
{
    if (cfg->channels <= 0 || cfg->height <= 0 || cfg->width <= 0 ||
        (int64_t)cfg->channels * cfg->height * cfg->width > MAX_SAMPLE_BYTES)
        return pp_error_set(err, PP_ERR_INPUT, "data: synthetic image shape %dx%dx%d is invalid",
                            cfg->channels, cfg->height, cfg->width);
    if (cfg->classes < 1 || cfg->classes > 1000000)
        return pp_error_set(err, PP_ERR_INPUT, "data: synthetic classes %d not in [1, 1000000]",
                            cfg->classes);
    if (cfg->samples < 0 || cfg->samples > (int64_t)UINT32_MAX)
        return pp_error_set(err, PP_ERR_INPUT, "data: synthetic samples %lld not in [0, %u]",
                            (long long)cfg->samples, UINT32_MAX);
    d->c = cfg->channels;
    d->h = cfg->height;
    d->w = cfg->width;
    d->classes = cfg->classes;
    d->n = cfg->samples ? cfg->samples : PP_DATA_SYNTHETIC_SAMPLES;
    return PP_OK;
}

static pp_status open_imagefolder(pp_data *d, const pp_data_config *cfg, pp_error *err)
{
    pp_images_config ic = {.root = cfg->root,
                           .cache = {.dir = cfg->index_cache,
                                     .min_files = cfg->index_cache_min,
                                     .max_bytes = cfg->index_cache_max},
                           .channels = cfg->channels,
                           .n_transforms = cfg->n_transforms,
                           .transforms = cfg->transforms,
                           .skip_bad = cfg->skip_bad_images,
                           .seed = cfg->seed};
    PP_TRY(pp_images_open(&ic, &d->images, err));
    pp_images_shape(d->images, &d->c, &d->h, &d->w);
    const pp_image_index *ix = pp_images_index(d->images);
    d->n = pp_image_index_size(ix);
    d->classes = pp_image_index_classes(ix);
    if (cfg->classes > 0 && d->classes > cfg->classes)
        return pp_error_set(err, PP_ERR_INPUT, "%s: %d class folders, more than the %d classes",
                            cfg->root, d->classes, cfg->classes);
    return PP_OK;
}

/* A token stream: samples of 1 x 1 x block_size ids, the vocabulary as classes. */
static pp_status open_tokens(pp_data *d, const pp_data_config *cfg, pp_error *err)
{
    const bool text = cfg->format == PP_DATA_TEXT;
    const int vocab = cfg->classes > 0 ? cfg->classes : PP_TOKENS_TEXT_VOCAB;
    pp_bpe *bpe = NULL;
    if (text && cfg->vocab[0]) {
        PP_TRY(pp_bpe_open_files(cfg->vocab, cfg->merges, &bpe, err));
        if (cfg->special && pp_bpe_use_special(bpe) < 0) {
            pp_bpe_close(bpe);
            return pp_error_set(err, PP_ERR_OOM, "out of host memory (tokenizer)");
        }
        pp_bpe_set_threads(bpe, cfg->workers, 0);
    }
    pp_tokens_cache cache = {.dir = cfg->token_cache, .min_bytes = PP_TOKENS_CACHE_MIN_BYTES,
                             .max_bytes = cfg->token_cache_max};
    const pp_status s = pp_tokens_open(cfg->file, text, bpe, vocab, cfg->block_size, &cache,
                                       &d->tokens, err);
    pp_bpe_close(bpe);
    PP_TRY(s);
    if (bpe) {
        d->tokenized = true;
        d->tokenizing = (pp_data_tokenizing){.tokens = pp_tokens_count(d->tokens),
                                             .from_cache = cache.from_cache,
                                             .cached = cache.written, .seconds = cache.seconds,
                                             .evicted = cache.evicted,
                                             .evicted_bytes = cache.evicted_bytes};
        snprintf(d->tokenizing.cache_path, sizeof d->tokenizing.cache_path, "%s", cache.path);
    }
    d->c = d->h = 1;
    d->w = cfg->block_size;
    d->classes = vocab;
    d->n = pp_tokens_windows(d->tokens);
    return PP_OK;
}

/* Builds the lookup table from the normalisation settings once C is known. */
static pp_status build_lut(pp_data *d, const pp_data_config *cfg, pp_error *err)
{
    if (cfg->n_mean < 0 || cfg->n_mean > PP_DATA_MAX_CHANNELS ||
        (cfg->n_mean > 1 && cfg->n_mean != d->c))
        return pp_error_set(err, PP_ERR_INPUT, "data: %d mean values for %d-channel images "
                            "(give 1 or %d)", cfg->n_mean, d->c, d->c);
    if (cfg->n_std < 0 || cfg->n_std > PP_DATA_MAX_CHANNELS ||
        (cfg->n_std > 1 && cfg->n_std != d->c))
        return pp_error_set(err, PP_ERR_INPUT, "data: %d std values for %d-channel images "
                            "(give 1 or %d)", cfg->n_std, d->c, d->c);
    for (int i = 0; i < cfg->n_mean; i++)
        if (!isfinite(cfg->mean[i]))
            return pp_error_set(err, PP_ERR_INPUT, "data: mean[%d] is not finite", i);
    for (int i = 0; i < cfg->n_std; i++)
        if (!(cfg->std[i] > 0) || !isfinite(cfg->std[i]))
            return pp_error_set(err, PP_ERR_INPUT, "data: std[%d] = %g must be positive", i,
                                (double)cfg->std[i]);
    d->lut = malloc((size_t)d->c * 256 * sizeof *d->lut);
    if (!d->lut) return pp_error_set(err, PP_ERR_OOM, "data: out of host memory");
    for (int c = 0; c < d->c; c++) {
        float mean = cfg->n_mean == 0 ? 0.0f : cfg->mean[cfg->n_mean == 1 ? 0 : c];
        float std = cfg->n_std == 0 ? 1.0f : cfg->std[cfg->n_std == 1 ? 0 : c];
        for (int v = 0; v < 256; v++) d->lut[c * 256 + v] = ((float)v / 255.0f - mean) / std;
    }
    return PP_OK;
}

void pp_data_config_init(pp_data_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->format = PP_DATA_SYNTHETIC;
    cfg->channels = 3;
    cfg->height = 32;
    cfg->width = 32;
    cfg->classes = 10;
    cfg->seed = 1;
    cfg->token_cache_max = PP_TOKENS_CACHE_MAX_BYTES;
    cfg->index_cache_max = PP_IMAGE_INDEX_CACHE_MAX_BYTES;
}

pp_status pp_data_open(const pp_data_config *cfg, pp_data **out, pp_error *err)
{
    if (!out) return pp_error_set(err, PP_ERR_INVALID, "data: NULL output");
    *out = NULL;
    if (!cfg) return pp_error_set(err, PP_ERR_INVALID, "data: NULL configuration");
    pp_data *d = calloc(1, sizeof *d);
    if (!d) return pp_error_set(err, PP_ERR_OOM, "data: out of host memory");
    d->format = cfg->format;
    d->shuffle = cfg->shuffle;
    d->seed = cfg->seed;
    pthread_mutex_init(&d->perm_mu, NULL);
    pthread_cond_init(&d->perm_free, NULL);
    for (int i = 0; i < PERM_SLOTS; i++) d->perms[i].epoch = -1;
    pp_status s;
    switch (cfg->format) {
    case PP_DATA_IDX: s = open_idx(d, cfg, err); break;
    case PP_DATA_CIFAR10: s = open_cifar(d, cfg, err); break;
    case PP_DATA_SYNTHETIC: s = open_synthetic(d, cfg, err); break;
    case PP_DATA_IMAGEFOLDER: s = open_imagefolder(d, cfg, err); break;
    case PP_DATA_TOKENS:
    case PP_DATA_TEXT: s = open_tokens(d, cfg, err); break;
    default: s = pp_error_set(err, PP_ERR_INPUT, "data: unknown format %d", (int)cfg->format);
    }
    if (s == PP_OK) {
        d->sample_bytes = (int64_t)d->c * d->h * d->w;
        if (d->sample_bytes > MAX_SAMPLE_BYTES)
            s = pp_error_set(err, PP_ERR_INPUT, "data: images of %dx%dx%d are too large", d->c,
                             d->h, d->w);
        else if (d->n > (int64_t)UINT32_MAX)
            s = pp_error_set(err, PP_ERR_INPUT, "data: %lld samples exceed the limit",
                             (long long)d->n);
    }
    if (s == PP_OK) s = build_lut(d, cfg, err);
    if (s != PP_OK) {
        pp_data_close(d);
        return s;
    }
    *out = d;
    return PP_OK;
}

void pp_data_close(pp_data *src)
{
    if (!src) return;
    free(src->raw[0]);
    free(src->raw[1]);
    pp_tokens_close(src->tokens);
    free(src->lut);
    pp_images_free(src->images);
    for (int i = 0; i < PERM_SLOTS; i++) free(src->perms[i].perm);
    pthread_cond_destroy(&src->perm_free);
    pthread_mutex_destroy(&src->perm_mu);
    free(src);
}

void pp_data_shape(const pp_data *src, int *c, int *h, int *w, int *classes)
{
    if (c) *c = src->c;
    if (h) *h = src->h;
    if (w) *w = src->w;
    if (classes) *classes = src->classes;
}

int64_t pp_data_size(const pp_data *src) { return src->n; }

int pp_data_targets_per_sample(const pp_data *src) { return src->tokens ? src->w : 1; }

bool pp_data_is_tokens(const pp_data *src) { return src->tokens != NULL; }

const char *pp_data_sample_name(const pp_data *src, int64_t idx, char *buf, size_t n)
{
    static const char *const names[] = {"synthetic", "idx", "cifar10", "imagefolder", "tokens",
                                        "text"};
    if (src->images)
        snprintf(buf, n, "%s", pp_image_index_relpath(pp_images_index(src->images), idx));
    else
        snprintf(buf, n, "%s sample %lld", names[src->format], (long long)idx);
    return buf;
}

const char *pp_data_class_name(const pp_data *src, int c, char *buf, size_t n)
{
    if (src->images)
        snprintf(buf, n, "%s", pp_image_index_class(pp_images_index(src->images), c));
    else
        snprintf(buf, n, "%d", c);
    return buf;
}

bool pp_data_tokenizing_of(const pp_data *src, pp_data_tokenizing *out)
{
    if (!src->tokenized) return false;
    *out = src->tokenizing;
    return true;
}

int64_t pp_data_bad_images(pp_data *src, char *first, size_t n)
{
    if (first && n) first[0] = '\0';
    return src->images ? pp_images_skipped(src->images, first, n) : 0;
}


/* ---- shuffling -------------------------------------------------------------- */

/* Fisher-Yates with a counter-based generator seeded by (seed, epoch), into
 * slot s (held under perm_mu, no users). */
static pp_status make_perm(pp_data *d, perm_slot *s, int64_t epoch, pp_error *err)
{
    s->epoch = -1;
    if (!s->perm) {
        s->perm = malloc((size_t)d->n * sizeof *s->perm);
        if (!s->perm) return pp_error_set(err, PP_ERR_OOM, "data: out of host memory (shuffle)");
    }
    uint32_t *perm = s->perm;
    for (int64_t i = 0; i < d->n; i++) perm[i] = (uint32_t)i;
    for (int64_t i = d->n - 1; i > 0; i--) {
        uint64_t r = hash4(d->seed, TAG_PERM, (uint64_t)epoch, (uint64_t)i);
        int64_t j = (int64_t)(((unsigned __int128)r * (uint64_t)(i + 1)) >> 64);
        uint32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    s->epoch = epoch;
    return PP_OK;
}

/* The permutation of epoch, held in *slot until release_perm: the cached
 * one, or one built into the least recently used slot no read holds. */
static pp_status acquire_perm(pp_data *d, int64_t epoch, perm_slot **slot, pp_error *err)
{
    pp_status st = PP_OK;
    pthread_mutex_lock(&d->perm_mu);
    perm_slot *s = NULL;
    for (;;) {
        perm_slot *idle = NULL;
        for (int i = 0; i < PERM_SLOTS && !s; i++) {
            perm_slot *t = &d->perms[i];
            if (t->epoch == epoch)
                s = t;
            else if (t->users == 0 && (!idle || t->last_use < idle->last_use))
                idle = t;
        }
        if (s) break;
        if (idle) {
            st = make_perm(d, idle, epoch, err);
            if (st == PP_OK) s = idle;
            break;
        }
        pthread_cond_wait(&d->perm_free, &d->perm_mu);
    }
    if (s) {
        s->users++;
        s->last_use = ++d->perm_clock;
    }
    pthread_mutex_unlock(&d->perm_mu);
    *slot = s;
    return st;
}

static void release_perm(pp_data *d, perm_slot *s)
{
    pthread_mutex_lock(&d->perm_mu);
    if (--s->users == 0) pthread_cond_broadcast(&d->perm_free);
    pthread_mutex_unlock(&d->perm_mu);
}

int64_t pp_data_sample_index(pp_data *src, int64_t pos)
{
    if (!src || pos < 0) return -1;
    const int64_t r = pos % src->n;
    if (!src->shuffle) return r;
    perm_slot *s;
    if (acquire_perm(src, pos / src->n, &s, NULL) != PP_OK) return -1;
    const int64_t idx = s->perm[r];
    release_perm(src, s);
    return idx;
}

/* ---- samples ---------------------------------------------------------------- */

/* Maps count bytes px (sample bytes q0 .. q0 + count - 1) through the lookup
 * table of the channel of each byte into out. */
static void normalise(const pp_data *d, const uint8_t *px, int64_t q0, int64_t count, float *out)
{
    const int64_t hw = (int64_t)d->h * d->w;
    int64_t c = q0 / hw, left = (c + 1) * hw - q0; /* bytes left in channel c */
    for (int64_t k = 0; k < count;) {
        const int64_t run = count - k < left ? count - k : left;
        const float *lut = d->lut + c * 256;
        for (int64_t t = 0; t < run; t++) out[k + t] = lut[px[k + t]];
        k += run;
        c++;
        left = hw;
    }
}

/* Writes synthetic sample i, normalised, to out (sample_bytes floats) and
 * returns its label. Byte q is the floor average of byte q % 8 (from the
 * least significant) of hash4(seed, PATTERN, label, q / 8) and of
 * hash4(seed, NOISE, i, q / 8), computed 8 bytes at a time. */
static int synthetic_sample(const pp_data *d, int64_t i, float *out)
{
    const int label = (int)(hash4(d->seed, TAG_LABEL, (uint64_t)i, 0) % (uint64_t)d->classes);
    const uint64_t pat_key = hash_key(d->seed, TAG_PATTERN, (uint64_t)label);
    const uint64_t noise_key = hash_key(d->seed, TAG_NOISE, (uint64_t)i);
    uint8_t px[SYNTH_CHUNK];
    for (int64_t q0 = 0; q0 < d->sample_bytes; q0 += SYNTH_CHUNK) {
        const int64_t n = d->sample_bytes - q0 < SYNTH_CHUNK ? d->sample_bytes - q0 : SYNTH_CHUNK;
        for (int64_t g = 0; g < n; g += 8) {
            const uint64_t word = (uint64_t)(q0 + g) >> 3;
            const uint64_t pat = mix64(pat_key ^ word), noise = mix64(noise_key ^ word);
            /* per byte: (p + q) / 2 = (p & q) + (p ^ q) / 2, with no carry
             * between bytes once each byte's low bit is cleared */
            const uint64_t avg = (pat & noise) + (((pat ^ noise) & 0xFEFEFEFEFEFEFEFEull) >> 1);
            for (int b = 0; b < 8; b++) px[g + b] = (uint8_t)(avg >> (8 * b));
        }
        normalise(d, px, q0, n, out + q0);
    }
    return label;
}

/* w values of a channel's table at a row's bytes (read right to left when
 * mirror) into out, a row of the batch. The batch is read next by a copy to
 * a device or by a stage, long after: where the CPU has streaming stores
 * (AVX), its rows go past the caches, which keep the decoding's data, and
 * memory is written without being read first. */
static void table_row(const float *lut, const uint8_t *row, int w, bool mirror, float *out)
{
    int x = 0;
#if defined(__AVX__)
    for (; x < w && ((uintptr_t)(out + x) & 31) != 0; x++)
        out[x] = lut[row[mirror ? w - 1 - x : x]]; /* to the first 32-byte boundary */
    for (; x + 8 <= w; x += 8) {
        const uint8_t *p = mirror ? row + w - 8 - x : row + x;
        const __m256 v = mirror ? _mm256_setr_ps(lut[p[7]], lut[p[6]], lut[p[5]], lut[p[4]],
                                                 lut[p[3]], lut[p[2]], lut[p[1]], lut[p[0]])
                                : _mm256_setr_ps(lut[p[0]], lut[p[1]], lut[p[2]], lut[p[3]],
                                                 lut[p[4]], lut[p[5]], lut[p[6]], lut[p[7]]);
        _mm256_stream_ps(out + x, v);
    }
#endif
    for (; x < w; x++) out[x] = lut[row[mirror ? w - 1 - x : x]];
}

/* Image-folder sample idx as drawn in epoch, normalised, to out (NULL: only
 * decoded, for its label), through the planes the transforms leave in work:
 * each channel's table, read mirrored when the last flips say so. */
static pp_status image_sample(const pp_data *d, pp_image_work *work, int64_t idx, int64_t epoch,
                              float *out, int32_t *label, int64_t *used, pp_error *err)
{
    const uint8_t *px;
    bool mirror;
    PP_TRY(pp_images_sample(d->images, idx, epoch, work, &px, &mirror, label, used, err));
    if (!out) return PP_OK;
    const int64_t plane = (int64_t)d->h * d->w;
    for (int c = 0; c < d->c; c++)
        for (int y = 0; y < d->h; y++)
            table_row(d->lut + c * 256, px + c * plane + (int64_t)y * d->w, d->w, mirror,
                      out + c * plane + (int64_t)y * d->w);
#if defined(__AVX__)
    _mm_sfence(); /* the streamed rows are seen by whoever reads the batch next */
#endif
    return PP_OK;
}

/* The labels of samples pos .. pos + count - 1 (pp_data_read without images);
 * index as pp_data_read_indexed says, when not NULL. */
static pp_status read_labels(pp_data *src, pp_image_work *work, int64_t pos, int count,
                             int32_t *labels, int64_t *index, pp_error *err)
{
    if (src->tokens) { /* a window's targets: read with its inputs, which are dropped */
        int32_t *ids = malloc((size_t)src->w * sizeof *ids);
        if (!ids) return pp_error_set(err, PP_ERR_OOM, "data: out of host memory");
        for (int j = 0; j < count; j++) {
            const int64_t p = pos + j;
            pp_tokens_read(src->tokens, src->shuffle, src->seed, p / src->n, p % src->n, ids,
                           labels + (int64_t)j * src->w);
            if (index) index[j] = p;
        }
        free(ids);
        return PP_OK;
    }
    /* an image folder that skips bad images decodes them */
    const bool decode = src->images && pp_images_skips(src->images);
    pp_status s = PP_OK;
    for (int j = 0; j < count && s == PP_OK; j++) {
        const int64_t idx = pp_data_sample_index(src, pos + j), epoch = (pos + j) / src->n;
        if (index) index[j] = idx;
        if (idx < 0) {
            s = pp_error_set(err, PP_ERR_OOM, "data: out of host memory (shuffle)");
        } else if (decode) {
            s = image_sample(src, work, idx, epoch, NULL, &labels[j], index ? &index[j] : NULL,
                             err);
        } else if (src->images) {
            labels[j] = pp_image_index_label(pp_images_index(src->images), idx);
        } else if (src->format == PP_DATA_SYNTHETIC) {
            labels[j] = (int)(hash4(src->seed, TAG_LABEL, (uint64_t)idx, 0) %
                              (uint64_t)src->classes);
        } else {
            labels[j] = src->labels[idx];
        }
    }
    return s;
}

/* ---- batches ---------------------------------------------------------------- */

pp_status pp_data_batch(pp_data *src, int64_t step, int batch, void *images, int32_t *labels,
                        pp_error *err)
{
    if (step < 0 || batch <= 0 || step > (INT64_MAX - batch) / batch)
        return pp_error_set(err, PP_ERR_INVALID, "data: bad step %lld or batch %d",
                            (long long)step, batch);
    return pp_data_read(src, step * batch, batch, images, labels, err);
}

/* pp_data_read_work, and each sample's index as pp_data_read_indexed says
 * (index may be NULL). */
static pp_status read_work(pp_data *src, pp_image_work *work, int64_t pos, int count,
                           void *images, int32_t *labels, int64_t *index, pp_error *err)
{
    if (!src || !labels)
        return pp_error_set(err, PP_ERR_INVALID, "data: NULL source or output buffer");
    if (pos < 0 || count <= 0 || pos > INT64_MAX - count)
        return pp_error_set(err, PP_ERR_INVALID, "data: bad position %lld or count %d",
                            (long long)pos, count);
    if (!images) return read_labels(src, work, pos, count, labels, index, err);
    /* one segment per epoch the range touches */
    for (int j = 0; j < count;) {
        const int64_t epoch = (pos + j) / src->n, r = (pos + j) % src->n;
        const int seg = count - j < src->n - r ? count - j : (int)(src->n - r);
        perm_slot *slot = NULL;
        if (src->shuffle && !src->tokens) PP_TRY(acquire_perm(src, epoch, &slot, err));
        for (int k = 0; k < seg; k++, j++) {
            const int64_t idx = slot ? slot->perm[r + k] : r + k;
            float *dst = (float *)images + (int64_t)j * src->sample_bytes;
            if (index) index[j] = src->tokens ? pos + j : idx;
            if (src->tokens) {
                pp_tokens_read(src->tokens, src->shuffle, src->seed, epoch, r + k,
                               (int32_t *)images + (int64_t)j * src->w,
                               labels + (int64_t)j * src->w);
            } else if (src->format == PP_DATA_SYNTHETIC) {
                labels[j] = synthetic_sample(src, idx, dst);
            } else if (src->images) {
                pp_status s = image_sample(src, work, idx, epoch, dst, &labels[j],
                                           index ? &index[j] : NULL, err);
                if (s != PP_OK) {
                    if (slot) release_perm(src, slot);
                    return s;
                }
            } else {
                labels[j] = src->labels[idx];
                normalise(src, src->pixels + idx * src->sample_bytes, 0, src->sample_bytes, dst);
            }
        }
        if (slot) release_perm(src, slot);
    }
    return PP_OK;
}

pp_status pp_data_read_work(pp_data *src, pp_image_work *work, int64_t pos, int count,
                            void *images, int32_t *labels, pp_error *err)
{
    if (src && src->images && !work) return pp_data_read(src, pos, count, images, labels, err);
    return read_work(src, work, pos, count, images, labels, NULL, err);
}

pp_status pp_data_read_indexed(pp_data *src, int64_t pos, int count, void *images,
                               int32_t *labels, int64_t *index, pp_error *err)
{
    if (!src || !src->images) return read_work(src, NULL, pos, count, images, labels, index, err);
    pp_image_work *work; /* this call's: the data reader keeps one per thread instead */
    PP_TRY(pp_image_work_new(&work, err));
    pp_status s = read_work(src, work, pos, count, images, labels, index, err);
    pp_image_work_free(work);
    return s;
}

pp_status pp_data_read(pp_data *src, int64_t pos, int count, void *images, int32_t *labels,
                       pp_error *err)
{
    return pp_data_read_indexed(src, pos, count, images, labels, NULL, err);
}
