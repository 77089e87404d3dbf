/*
 * bpe_tool.c - GPT-2's tokenizer (runtime/io/bpe.h) from the command line,
 * for tests/io/bpe_check.py to compare with another implementation:
 *
 *   bpe_tool VOCAB MERGES encode FILE [THREADS [SPAN]]
 *                                       the file's ids, one a line (on THREADS
 *                                       threads, spans of SPAN bytes or more:
 *                                       pp_bpe_set_threads); the bytes, ids,
 *                                       threads and seconds on stderr
 *   bpe_tool VOCAB MERGES decode        ids on stdin (whitespace between),
 *                                       their bytes on stdout
 *
 * MERGES "-": VOCAB is Hugging Face's tokenizer.json (pp_bpe_open_json).
 *
 * Exit 0, 1 on a failure (the message on stderr), 2 on usage.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/io/bpe.h"
#include "tests/check.h"

int main(int argc, char **argv)
{
    if (argc < 4 || (strcmp(argv[3], "encode") != 0 && strcmp(argv[3], "decode") != 0) ||
        (!strcmp(argv[3], "encode") && (argc < 5 || argc > 7)) ||
        (!strcmp(argv[3], "decode") && argc != 4)) {
        fprintf(stderr, "usage: bpe_tool VOCAB MERGES encode FILE [THREADS [SPAN]] | decode\n");
        return 2;
    }
    pp_bpe *b;
    pp_error err;
    if ((strcmp(argv[2], "-") != 0 ? pp_bpe_open(argv[1], argv[2], &b, &err)
                                   : pp_bpe_open_json(argv[1], &b, &err)) != PP_OK) {
        fprintf(stderr, "bpe_tool: %s\n", err.msg);
        return 1;
    }
    int rc = 0;
    if (!strcmp(argv[3], "encode")) {
        size_t n;
        char *text = (char *)check_read_file(argv[4], &n);
        int32_t *ids = NULL;
        int64_t count = 0;
        const int threads = argc > 5 ? atoi(argv[5]) : 1;
        pp_bpe_set_threads(b, threads, argc > 6 ? (size_t)strtoull(argv[6], NULL, 10) : 0);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        if (!text) {
            fprintf(stderr, "bpe_tool: cannot read %s\n", argv[4]);
            rc = 1;
        } else if (pp_bpe_encode(b, text, n, argv[4], &ids, &count, &err) != PP_OK) {
            fprintf(stderr, "bpe_tool: %s\n", err.msg);
            rc = 1;
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (rc == 0)
            fprintf(stderr, "bpe_tool: %zu bytes, %lld ids in %.3f s on %d thread%s\n", n,
                    (long long)count,
                    (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec),
                    threads, threads == 1 ? "" : "s");
        for (int64_t i = 0; i < count; i++) printf("%d\n", (int)ids[i]);
        free(ids);
        free(text);
    } else {
        long id;
        while (rc == 0 && scanf("%ld", &id) == 1) {
            size_t len;
            const char *p = pp_bpe_token(b, (int32_t)id, &len);
            if (!p) {
                fprintf(stderr, "bpe_tool: %ld is no token\n", id);
                rc = 1;
            } else {
                fwrite(p, 1, len, stdout);
            }
        }
    }
    pp_bpe_close(b);
    return rc;
}
