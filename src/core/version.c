/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/core/version.c -- hoop_version(): the version the library was built as.
 *
 * The numbers come from hoop/version.h as it was when the library was compiled, so a
 * program built against other headers sees the difference. Owns nothing. Thread-safe.
 */
#include "hoop/version.h"

_Static_assert(HOOP_VERSION_MINOR < 100 && HOOP_VERSION_PATCH < 100,
               "HOOP_VERSION_CODE needs MINOR and PATCH below 100");

HOOP_API int hoop_version(void)
{
    return HOOP_VERSION_CODE;
}

HOOP_API const char *hoop_version_string(void)
{
    return HOOP_VERSION_STRING;
}
