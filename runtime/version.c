/* version.c - the library's version string (see runtime/version.h). */
#include "runtime/version.h"

const char *pp_version(void)
{
    return PP_VERSION_STRING;
}
