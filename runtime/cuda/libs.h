/* libs.h - cuBLAS and cuBLASLt opened on their first use (libs.c). */
#ifndef PP_CUDA_LIBS_H
#define PP_CUDA_LIBS_H

#include <stdbool.h>

/* Opens both libraries now if not yet done; true when every function the
 * backend calls was found. Else *why (when why is not NULL) says what was
 * missing: the library's name and dlopen's message, or the symbol. */
bool pp_cuda_libs_ready(const char **why);

#endif
