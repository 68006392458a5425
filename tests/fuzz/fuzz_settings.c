/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/fuzz/fuzz_settings.c -- the HOOP_* settings and the env:// contract
 * (src/core/env.c). The input is lines NAME=VALUE: each NAME that is a HOOP_* setting or
 * one of MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE is set,
 * then every setting is validated and read through its typed reader, the env:// contract
 * is read, and the strict parsers the tools share take each VALUE; then all is unset.
 */
#include "fuzz.h"

#include "core/env.h"

#define MAX_VARS 16

static int wanted(const char *name)
{
    static const char *const dist[] = {"MASTER_ADDR", "MASTER_PORT", "RANK",
                                       "WORLD_SIZE",  "LOCAL_RANK",  "LOCAL_WORLD_SIZE"};
    if (strncmp(name, "HOOP_", 5) == 0 && name[5] != '\0') return 1;
    for (size_t i = 0; i < sizeof(dist) / sizeof(dist[0]); i++)
        if (strcmp(name, dist[i]) == 0) return 1;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = fuzz_str(data, size), *names[MAX_VARS];
    int nset = 0;
    int64_t v;
    const char *str;
    if (s == NULL) return 0;
    fuzz_quiet();
    for (char *line = s, *next; line && nset < MAX_VARS; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        char *eq = strchr(line, '=');
        if (eq == NULL) continue;
        *eq = '\0';
        hoop__parse_int("fuzz", eq + 1, INT64_MIN, INT64_MAX, &v);
        hoop__parse_bytes("fuzz", eq + 1, 0, INT64_MAX, &v);
        hoop__parse_seconds_ms("fuzz", eq + 1, &v);
        if (strcmp(line, "HOOP_DEBUG") == 0 || strcmp(line, "HOOP_DEBUG_FILE") == 0) continue;
        if (wanted(line) && setenv(line, eq + 1, 1) == 0) names[nset++] = line;
    }
    hoop__env_check_all();
    for (const hoop_env_param *p = hoop__env_params; p->name; p++) {
        if (strcmp(p->name, "HOOP_DEBUG_FILE") == 0) continue;
        if (p->type == HOOP_ENV_INT || p->type == HOOP_ENV_BYTES)
            hoop__env_int(p->name, &v);
        else if (p->type == HOOP_ENV_SECONDS)
            hoop__env_ms(p->name, &v);
        else
            hoop__env_str(p->name, &str);
    }
    hoop_dist_env d;
    if (hoop__env_dist_wanted()) hoop__env_dist(&d);
    for (int i = 0; i < nset; i++) unsetenv(names[i]);
    free(s);
    return 0;
}
