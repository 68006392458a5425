/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/fuzz/replay.c -- the main of a fuzz target outside libFuzzer: runs
 * LLVMFuzzerTestOneInput over every file of the target's corpus (the seeds, and each
 * input a fuzzing run once crashed on), so make check replays them in every build, the
 * ASan one included.
 *
 *   tests/fuzz/replay_NAME [FILE | DIR]...   (default: $top_srcdir/tests/fuzz/corpus/NAME)
 *
 * Exit status: 0 when every input ran (a crash ends the program), 1 when an input cannot
 * be read or the corpus is empty.
 */
#include "fuzz.h"

#include <dirent.h>
#include <sys/stat.h>

#ifndef FUZZ_NAME
#error "FUZZ_NAME: the target's name (its corpus folder)"
#endif

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay %s: cannot open %s\n", FUZZ_NAME, path);
        return -1;
    }
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    for (size_t k; buf && (k = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += k;
        if (n == cap) {
            uint8_t *b = realloc(buf, cap *= 2);
            if (!b) free(buf);
            buf = b;
        }
    }
    fclose(f);
    if (!buf) return -1;
    /* An exact-size copy, so that ASan sees a read one past the input. */
    uint8_t *exact = malloc(n ? n : 1);
    if (!exact) {
        free(buf);
        return -1;
    }
    memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 0;
}

static int run_path(const char *path, long *count)
{
    struct stat sb;
    if (stat(path, &sb) != 0) {
        fprintf(stderr, "replay %s: no such file or folder: %s\n", FUZZ_NAME, path);
        return -1;
    }
    if (!S_ISDIR(sb.st_mode)) return run_file(path) == 0 ? (++*count, 0) : -1;
    struct dirent **names;
    int n = scandir(path, &names, NULL, alphasort), rc = 0;
    if (n < 0) return -1;
    for (int i = 0; i < n; i++) {
        char sub[4096];
        if (names[i]->d_name[0] != '.' && rc == 0) {
            snprintf(sub, sizeof(sub), "%s/%s", path, names[i]->d_name);
            rc = run_path(sub, count);
        }
        free(names[i]);
    }
    free(names);
    return rc;
}

int main(int argc, char **argv)
{
    char def[4096];
    long count = 0;
    const char *top = getenv("top_srcdir");
    snprintf(def, sizeof(def), "%s/tests/fuzz/corpus/%s", top && *top ? top : ".", FUZZ_NAME);
    for (int i = 1; i < argc; i++)
        if (run_path(argv[i], &count) != 0) return 1;
    if (argc == 1 && run_path(def, &count) != 0) return 1;
    printf("replay %s: %ld inputs, no crash\n", FUZZ_NAME, count);
    return count > 0 ? 0 : 1;
}
