/* lazy_lib.c - a shared library opened on its first use (lazy_lib.h). */
#define _GNU_SOURCE /* dladdr */
#include "lazy_lib.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

/* the library in the folder of the object that holds lib->beside, or NULL */
static void *open_beside(const pp_lazy_lib *lib)
{
    if (!lib->beside) return NULL;
    void *addr;
    void (*fn)(void) = lib->beside;
    memcpy(&addr, &fn, sizeof addr); /* a function's address, as dladdr takes it */
    Dl_info info;
    if (!dladdr(addr, &info) || !info.dli_fname) return NULL;
    const char *slash = strrchr(info.dli_fname, '/');
    if (!slash) return NULL;
    char path[4096];
    int n = snprintf(path, sizeof path, "%.*s/%s", (int)(slash - info.dli_fname), info.dli_fname,
                     lib->soname);
    if (n < 0 || (size_t)n >= sizeof path) return NULL;
    return dlopen(path, RTLD_NOW | RTLD_LOCAL);
}

static bool open_lib(pp_lazy_lib *lib)
{
    void *h = dlopen(lib->soname, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(lib->why, sizeof lib->why, "%s", e ? e : lib->soname);
        h = open_beside(lib);
        if (!h) return false;
    }
    for (int k = 0; lib->names[k]; k++) {
        lib->fns[k] = dlsym(h, lib->names[k]);
        if (!lib->fns[k]) {
            snprintf(lib->why, sizeof lib->why, "%s: no symbol %s", lib->soname, lib->names[k]);
            return false; /* h stays open: a handle closed here could unmap what ran */
        }
    }
    lib->why[0] = '\0';
    return true;
}

bool pp_lazy_lib_ready(pp_lazy_lib *lib)
{
    int state = __atomic_load_n(&lib->state, __ATOMIC_ACQUIRE);
    if (state == 0) {
        pthread_mutex_lock(&g_lock);
        state = __atomic_load_n(&lib->state, __ATOMIC_RELAXED);
        if (state == 0) {
            state = open_lib(lib) ? 1 : 2;
            __atomic_store_n(&lib->state, state, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&g_lock);
    }
    return state == 1;
}
