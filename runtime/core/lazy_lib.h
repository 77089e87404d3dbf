/* lazy_lib.h - a shared library opened on its first use, its symbols resolved at once.
 *
 * Linked normally, a library is mapped and relocated when the process starts
 * whether or not it is used: cuBLASLt alone is 540 MB with 353,000
 * relocations, some 85 ms and 26,000 page faults for every process, a plan
 * validated or a CPU run included. The CUDA backend opens cuBLAS, cuBLASLt and
 * NCCL through this instead (runtime/cuda/libs.c, runtime/comm/nccl_libs.c):
 * the first call of one of their functions, when a CUDA device is set up, opens
 * the library and resolves every symbol it needs; a process that never touches
 * a GPU never maps them.
 *
 * The search: dlopen's own (LD_LIBRARY_PATH, the caller's RUNPATH, the system's
 * cache), then the folder of the library that holds `beside` (a function of a
 * library linked normally, such as the CUDA runtime's, whose folder usually
 * holds the others). Knows nothing of CUDA. */
#ifndef PP_LAZY_LIB_H
#define PP_LAZY_LIB_H

#include <stdbool.h>

typedef struct pp_lazy_lib {
    const char *soname;       /* "libcublasLt.so.13" */
    void (*beside)(void);     /* a function whose library's folder is searched next, or NULL */
    const char *const *names; /* the symbols to resolve, NULL-terminated */
    void **fns;               /* their addresses, in the order of names */
    int state;                /* 0 not tried, 1 open, 2 failed (atomic) */
    char why[320];            /* when it failed: the library, and dlopen's or dlsym's message */
} pp_lazy_lib;

/* Opens lib on the first call (any thread; the others wait) and resolves every
 * name; true when all resolved. False, now and at every later call, when the
 * library or one of its symbols was not found: lib->why says which. */
bool pp_lazy_lib_ready(pp_lazy_lib *lib);

#endif
