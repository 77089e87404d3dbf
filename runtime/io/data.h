/*
 * data.h - data sets that produce training batches on the host.
 *
 * A pp_data source serves images as f32 NCHW and labels as int32 from one of:
 *   - IDX files (the MNIST/Fashion-MNIST format): images uint8 with dims
 *     (N, H, W) (one channel) or (N, C, H, W); labels uint8 with dims (N).
 *   - CIFAR-10 binary batches: records of 1 label byte + 3072 bytes of a
 *     3x32x32 CHW image; one or several files, concatenated in the order given.
 *   - a synthetic, learnable task: sample i of seed s has label
 *     hash(s, i) mod classes and pixels (pattern[label] + noise(s, i)) / 2,
 *     where pattern[c] is a fixed random u8 image per class and noise a fresh
 *     random u8 image per sample. Deterministic for (seed, sample index).
 *   - an image folder (torchvision's ImageFolder: io/imagefolder.h): files
 *     decoded and transformed when read, nothing loaded whole; a sample's
 *     random transforms are drawn from (seed, epoch, its index).
 * Pixels are u8 / 255, then (x - mean[c]) / std[c] per channel.
 * Token sources (tokens: llm.c's or nanoGPT's .bin; text: a file's bytes, or its GPT-2 tokens)
 * serve windows of block_size + 1 tokens instead (io/tokens.h): a sample's
 * "image" is its block_size input ids as int32 (shape 1 x 1 x block_size),
 * and it has block_size labels, the ids that follow each input
 * (pp_data_targets_per_sample); classes is the vocabulary.
 *
 * Batches: with shuffle off, step k holds samples (k*B + j) mod N for
 * j = 0..B-1 (wrapping around at the end of the data set). With shuffle on,
 * position p = k*B + j is sample perm_e[p mod N] of epoch e = p / N, where
 * perm_e is a permutation seeded by (seed, e). A batch depends only on
 * (config, step, batch size), never on earlier calls.
 *
 * Errors: unreadable or malformed files are PP_ERR_INPUT with a message that
 * starts with the file's path; a bad configuration is PP_ERR_INPUT; bad
 * arguments PP_ERR_INVALID.
 * Ownership: pp_data_open loads IDX and CIFAR files into host memory, owned
 * by the source until pp_data_close. Thread safety: pp_data_read,
 * pp_data_batch and pp_data_sample_index may be called on one source from
 * several threads at once (the shuffle permutations they share are cached
 * under a lock); a batch read as several disjoint ranges on several threads
 * is bit for bit the batch read by one call. Open and close are not
 * concurrent with anything.
 */
#ifndef PP_DATA_H
#define PP_DATA_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifndef PATH_MAX
#define PATH_MAX 4096
#endif

#define PP_DATA_MAX_FILES 8      /* CIFAR-10 batch files */
#define PP_DATA_MAX_CHANNELS 16  /* mean/std entries */
#define PP_DATA_SYNTHETIC_SAMPLES 50000 /* synthetic data set size when samples is 0 */

/* One transform of an image folder's list (see io/transform.h for what each
 * does, as torchvision's). */
#define PP_TRANSFORMS_MAX 8 /* transforms of a list */

typedef enum pp_transform_kind {
    PP_TF_RANDOM_RESIZED_CROP = 0,
    PP_TF_HORIZONTAL_FLIP,
    PP_TF_RANDOM_CROP,
    PP_TF_RESIZE,
    PP_TF_CENTER_CROP,
} pp_transform_kind;

/* One transform of a plan's list. Sizes are height h, width w; resize with
 * w == 0 sets the shorter side to h. */
typedef struct pp_transform {
    pp_transform_kind kind;
    int h, w;
    double scale[2];  /* random_resized_crop */
    double ratio[2];  /* random_resized_crop */
    double p;         /* horizontal_flip */
    int pad[4];       /* random_crop: left, top, right, bottom */
} pp_transform;

typedef enum pp_data_format {
    PP_DATA_SYNTHETIC = 0,
    PP_DATA_IDX = 1,
    PP_DATA_CIFAR10 = 2,
    PP_DATA_IMAGEFOLDER = 3,
    PP_DATA_TOKENS = 4,
    PP_DATA_TEXT = 5,
} pp_data_format;

/* Plain data, filled by the plan parser; paths are used as given (the parser
 * resolves them relative to the plan). Start from pp_data_config_init. */
typedef struct pp_data_config {
    pp_data_format format;
    /* idx */
    char images[PATH_MAX];                  /* IDX image file */
    char labels[PATH_MAX];                  /* IDX label file */
    /* cifar10 */
    int n_files;                            /* 1..PP_DATA_MAX_FILES */
    char files[PP_DATA_MAX_FILES][PATH_MAX];
    /* tokens, text (io/tokens.h) */
    char file[PATH_MAX];
    int block_size;                         /* T: inputs per sample */
    char vocab[PATH_MAX], merges[PATH_MAX]; /* text: GPT-2's tokenizer (io/bpe.h); vocab ""
                                             * bytes; merges "": vocab is tokenizer.json */
    bool special;                           /* its <|...|> tokens read as themselves */
    int workers;                            /* text: threads that tokenize it (0 or 1:
                                               the caller alone; the CLI gives data.workers,
                                               else PP_READ_THREADS, else the CPUs, <= 8) */
    char token_cache[PATH_MAX];             /* text through the tokenizer: the folder of the
                                               cache of texts tokenized; "" for none */
    int64_t token_cache_max;                /* its size, least recently used files evicted
                                               after a write (PP_TOKENS_CACHE_MAX_BYTES by
                                               default); 0: no limit */
    /* synthetic */
    int channels, height, width;            /* image shape (default 3 x 32 x 32) */
    int64_t samples;                        /* data set size N; 0 = PP_DATA_SYNTHETIC_SAMPLES */
    /* imagefolder (channels: 1 or 3, as the model wants) */
    char root[PATH_MAX];                    /* the folder of class folders */
    int n_transforms;
    pp_transform transforms[PP_TRANSFORMS_MAX];
    bool skip_bad_images;                   /* on_bad_image: skip */
    char index_cache[PATH_MAX];             /* the index cache folder; "" for none */
    int64_t index_cache_min;                /* the smallest folder whose index is cached */
    int64_t index_cache_max;                /* the folder's size, as token_cache_max
                                               (PP_IMAGE_INDEX_CACHE_MAX_BYTES by default) */
    /* all formats */
    int classes;   /* synthetic: number of classes (default 10); idx: 0 = max label + 1,
                      otherwise every label must be < classes; cifar10: 0 or 10 */
    int n_mean;    /* 0 (mean 0), 1 (same for every channel) or C entries */
    float mean[PP_DATA_MAX_CHANNELS];
    int n_std;     /* 0 (std 1), 1 or C entries; each > 0 */
    float std[PP_DATA_MAX_CHANNELS];
    bool shuffle;
    uint64_t seed;
} pp_data_config;

typedef struct pp_data pp_data;

/* Defaults: synthetic, 3 x 32 x 32, 10 classes, no normalisation, no
 * shuffle, seed 1. */
void pp_data_config_init(pp_data_config *cfg);

/* Validates cfg, opens and validates the files (magic, dims, sizes, labels
 * in range). The source does not keep a pointer to cfg. */
pp_status pp_data_open(const pp_data_config *cfg, pp_data **out, pp_error *err);
void pp_data_close(pp_data *src);

/* Sample shape and number of classes. Any output pointer may be NULL. */
void pp_data_shape(const pp_data *src, int *c, int *h, int *w, int *classes);
/* Number of samples N (the epoch length). */
int64_t pp_data_size(const pp_data *src);
/* Labels per sample: 1, or a token source's block_size. */
int pp_data_targets_per_sample(const pp_data *src);
/* Whether the source gives token windows (formats tokens and text), whose
 * block_size may be 1. */
bool pp_data_is_tokens(const pp_data *src);

/* Fills images (batch * C * H * W floats, NCHW; int32 token ids for a token
 * source) and labels (batch * pp_data_targets_per_sample int32s) with the
 * batch of step (see the top of this file). step >= 0, batch > 0. */
pp_status pp_data_batch(pp_data *src, int64_t step, int batch, void *images, int32_t *labels,
                        pp_error *err);

/* Fills images and labels with the count samples at positions pos ..
 * pos + count - 1 of the stream of samples (pos = epoch * N + i reads the
 * i-th sample of that epoch's order): how epochs with a partial last batch
 * and evaluation passes read. pos >= 0, count > 0. Each sample's values
 * depend only on its position, so threads may fill disjoint parts of one
 * batch: samples [pos + a, pos + b) go to images + a * C * H * W values and
 * labels + a * pp_data_targets_per_sample. images may be NULL: labels only,
 * what a process without the first stage needs (an image folder that skips
 * bad images still decodes them: a replacement brings its own label). */
pp_status pp_data_read(pp_data *src, int64_t pos, int count, void *images, int32_t *labels,
                       pp_error *err);

/* pp_data_read, and index[j] the data set index of the sample read at
 * position pos + j: pp_data_sample_index's, or, for an image folder that
 * skips bad images, that of the good sample that replaced a bad one (the
 * sample whose pixels and label were read); a token source's: the window's
 * position pos + j. */
pp_status pp_data_read_indexed(pp_data *src, int64_t pos, int count, void *images,
                               int32_t *labels, int64_t *index, pp_error *err);

/* Sample idx's name for people: its file relative to the image folder, or
 * "FORMAT sample IDX" for the other formats; into buf (n bytes). */
const char *pp_data_sample_name(const pp_data *src, int64_t idx, char *buf, size_t n);
/* Class c's name: the image folder's class folder, else its number. */
const char *pp_data_class_name(const pp_data *src, int c, char *buf, size_t n);
/* Bad images skipped so far (imagefolder with on_bad_image: skip; else 0)
 * and the first one's message (empty when none). */
int64_t pp_data_bad_images(pp_data *src, char *first, size_t n);

/* A text read through GPT-2's tokenizer: its tokens, and how its ids came:
 * from the cache of texts tokenized, or tokenized (and then cached), and
 * in how long. */
typedef struct pp_data_tokenizing {
    int64_t tokens;
    bool from_cache;           /* mapped from the cache file */
    bool cached;               /* tokenized, and the cache file written */
    double seconds;            /* tokenizing, or checking and mapping the cache file */
    char cache_path[PATH_MAX]; /* the cache file read or written; "" neither */
    int evicted;               /* cached: the files evicted to keep the cache's size */
    int64_t evicted_bytes;     /* their sizes */
} pp_data_tokenizing;
/* That of src into *out; false (out untouched) where src is no text read
 * through the tokenizer. */
bool pp_data_tokenizing_of(const pp_data *src, pp_data_tokenizing *out);

/* The data set index of the sample at position pos (>= 0) of the stream of
 * samples (pos = step * batch + j): for tests and tracing. */
int64_t pp_data_sample_index(pp_data *src, int64_t pos);

#ifdef __cplusplus
}
#endif

#endif
