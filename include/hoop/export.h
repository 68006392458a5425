/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * hoop/export.h -- the export macro shared by every public header.
 *
 * libhoop is built with -fvisibility=hidden; only declarations marked HOOP_API are
 * visible to programs that link against the shared library.
 */
#ifndef HOOP_EXPORT_H
#define HOOP_EXPORT_H

#if defined(__GNUC__) || defined(__clang__)
#define HOOP_API __attribute__((visibility("default")))
#else
#define HOOP_API
#endif

#ifdef __cplusplus
#define HOOP_EXTERN_C_BEGIN extern "C" {
#define HOOP_EXTERN_C_END }
#else
#define HOOP_EXTERN_C_BEGIN
#define HOOP_EXTERN_C_END
#endif

#endif /* HOOP_EXPORT_H */
