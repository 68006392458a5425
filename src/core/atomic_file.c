/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/core/atomic_file.c -- replace a file whole (atomic_file.h): the checkpoint's and
 * the DDP trace's writer.
 *
 * The file to replace is path, or the regular file a symbolic link at path names (so a
 * "latest.ckpt" link stays a link). The new contents go to an unnamed file in its
 * directory (O_TMPFILE, Linux 3.11) so that a process killed while writing leaves
 * nothing; it is fsynced, linked under a temporary name and renamed over the file, and
 * the directory is fsynced (rename(2) is atomic; the fsyncs make the result survive a
 * crash, as in "Files are hard", Pillai et al., OSDI 2014).
 */
#define _GNU_SOURCE /* O_TMPFILE, AT_EMPTY_PATH */
#include "core/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/check.h"
#include "core/fault.h"

/* What a write (or the probe) works on: the file it replaces and its temporary file. */
struct save_file {
    const char *label; /* what path is, for messages: "checkpoint" */
    const char *path;  /* as the caller gave it, for messages */
    char *dest;        /* the file the rename replaces: path, or the file a link there names */
    char *tmp;         /* cap bytes: room for a temporary name beside dest */
    size_t cap;
    int fd, named; /* the file written (open_tmp), and whether it has a name (tmp) yet */
    int existed;   /* dest exists: the new file takes its mode, owner and group (old) */
    struct stat old;
};

/* what: the file written, for the parentheses after path ("temporary file '...'"). */
static hoop_status write_all(const struct save_file *f, const unsigned char *p, size_t n,
                             const char *what)
{
    while (n > 0) {
        ssize_t w = write(f->fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0)
            return HOOP_ERROR(HOOP_ERR_SYSTEM, "%s '%s': write failed (%s): %s", f->label, f->path,
                              what, hoop__strerror(errno));
        p += w;
        n -= (size_t)w;
    }
    return HOOP_OK;
}

/* Writes n bytes of data to f->fd; the test hook (fault) strikes half-way. */
static hoop_status write_data(const struct save_file *f, const unsigned char *data, size_t n,
                              int fault, const char *what)
{
    size_t first = n;
    if (fault != HOOP__FAULT_NONE && hoop__fault_tick((hoop__fault_point)fault, -1)) first = n / 2;
    HOOP_CHECK(write_all(f, data, first, what));
    if (first < n) {
        char where[600];
        snprintf(where, sizeof(where), "a save of %s '%s' (%zu of %zu bytes written)", f->label,
                 f->path, first, n);
        hoop__fault_raise(-1, where);
    }
    return write_all(f, data + first, n - first, what);
}

/* Fsyncs the directory of f->dest, the file the write replaced. */
static hoop_status fsync_dir(const struct save_file *f)
{
    char *copy = strdup(f->dest);
    if (copy == NULL) return HOOP_ERROR(HOOP_ERR_NOMEM, "%s: strdup failed", f->label);
    const char *dir = dirname(copy);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    hoop_status st = HOOP_OK;
    if (fd < 0 || fsync(fd) != 0)
        st = HOOP_ERROR(HOOP_ERR_SYSTEM, "%s '%s': fsync of its directory '%s' failed: %s",
                        f->label, f->path, dir, hoop__strerror(errno));
    if (fd >= 0) close(fd);
    free(copy);
    return st;
}

/* The process's umask, read from /proc/self/status (Linux 4.7 and later) since umask(2)
 * can only be read by setting it, which races with other threads; 022 where unknown. */
static mode_t current_umask(void)
{
    unsigned mask = 022;
    char line[128];
    FILE *f = fopen("/proc/self/status", "re");
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "Umask: %o", &mask) == 1) break;
    if (f) fclose(f);
    return (mode_t)mask;
}

/* The temporary name beside path that ends in suffix (".tmp.XXXXXX", ".tmp.PID.N"), in
 * tmp (cap >= strlen(path) + 32): path's name with suffix appended, or, where that would
 * pass NAME_MAX (a valid name of 246 characters or more), ".hoop-tmp" with suffix in
 * path's directory. */
static void tmp_name(char *tmp, size_t cap, const char *path, const char *suffix)
{
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (strlen(base) + strlen(suffix) <= NAME_MAX)
        snprintf(tmp, cap, "%s%s", path, suffix);
    else
        snprintf(tmp, cap, "%.*s.hoop-tmp%s", (int)(base - path), path, suffix);
}

/* Opens the file a write fills: an unnamed file in f->dest's directory (O_TMPFILE); where
 * the filesystem has none, a named temporary file beside it (f->tmp, removed on failure;
 * a kill while writing leaves it). The file replaced keeps what it had: its mode (a
 * checkpoint made 0600 stays unreadable to others), and its owner and group where this
 * process may give them (root; a group of its own); a new file gets the mode
 * open(O_CREAT, 0666) would give under the umask, as any other file the user writes
 * (teammates on a shared cluster may read a checkpoint when the umask lets them). -1
 * with errno on failure. */
static int open_tmp(struct save_file *f)
{
    char *copy = strdup(f->dest);
    int fd = -1;
    if (copy != NULL) {
        fd = open(dirname(copy), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
        free(copy);
    }
    f->named = fd < 0;
    if (fd < 0) {
        tmp_name(f->tmp, f->cap, f->dest, ".tmp.XXXXXX");
        fd = mkstemp(f->tmp); /* always 0600 */
    }
    if (fd < 0) return fd;
    if (f->existed) {
        /* the owner first: a chown clears set-user/group-ID bits, which fchmod restores */
        if (fchown(fd, f->old.st_uid, f->old.st_gid) != 0)
            (void)fchown(fd, (uid_t)-1, f->old.st_gid); /* not root: the group alone, if ours */
        (void)fchmod(fd, f->old.st_mode & 07777);
    } else {
        (void)fchmod(fd, 0666 & ~current_umask());
    }
    return fd;
}

/* Gives the written unnamed file f->fd a temporary name beside f->dest (f->tmp): through
 * /proc/self/fd, or AT_EMPTY_PATH where /proc is missing (that one needs
 * CAP_DAC_READ_SEARCH). A name taken by someone else is retried with another. */
static hoop_status link_tmp(struct save_file *f)
{
    char proc[64];
    snprintf(proc, sizeof(proc), "/proc/self/fd/%d", f->fd);
    for (int i = 0; i < 100; i++) {
        char suffix[32];
        snprintf(suffix, sizeof(suffix), ".tmp.%d.%d", (int)getpid(), i);
        tmp_name(f->tmp, f->cap, f->dest, suffix);
        if (linkat(AT_FDCWD, proc, AT_FDCWD, f->tmp, AT_SYMLINK_FOLLOW) == 0) break;
        if (errno == ENOENT && linkat(f->fd, "", AT_FDCWD, f->tmp, AT_EMPTY_PATH) == 0) break;
        if (errno != EEXIST || i == 99)
            return HOOP_ERROR(HOOP_ERR_SYSTEM,
                              "%s '%s': cannot link the written file into its directory (as "
                              "'%s'): %s",
                              f->label, f->path, f->tmp, hoop__strerror(errno));
    }
    f->named = 1;
    return HOOP_OK;
}

/* The file a write of path replaces (*dest, for the caller to free): path itself, or
 * where path is a symbolic link to a regular file, that file (realpath), so that the
 * write goes through the link and keeps it. HOOP_ERR_INVALID where path names no file
 * (empty, ending in '/', or too long), for anything there but a regular file, a link to
 * one or nothing (the rename would replace a device, a FIFO or a socket, as root
 * /dev/null; a directory refuses it after all the writing; a link to one of them would
 * be replaced by a file) and for a link that resolves to nothing (dangling, a loop);
 * HOOP_ERR_SYSTEM where the link cannot be resolved; HOOP_ERR_NOMEM. */
static hoop_status save_dest(const char *label, const char *path, char **dest, struct stat *old,
                             int *existed)
{
    /* "dir/x/" names a directory: its dirname() is dir, where the file would be written
     * and then fail to link as "dir/x/.tmp...", a name the user never gave. */
    const size_t len = strlen(path);
    if (len == 0 || path[len - 1] == '/')
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "%s '%s' %s: it is written as a file; give a file's path", label, path,
                          len ? "ends in '/', a directory's path" : "is an empty path");
    struct stat sb;
    const int exists = lstat(path, &sb) == 0, link = exists && S_ISLNK(sb.st_mode);
    if (!exists && errno == ENAMETOOLONG) /* refused now, not at the rename after writing */
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "%s '%s' cannot be a file's path: %s (a name has at most %d characters, "
                          "a path %d)",
                          label, path, hoop__strerror(errno), NAME_MAX, PATH_MAX - 1);
    if (link && stat(path, &sb) != 0)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "%s '%s' is a symbolic link that resolves to no file (%s): writing it "
                          "would replace the link; fix it or give a file's path",
                          label, path, hoop__strerror(errno));
    if (exists && !S_ISREG(sb.st_mode))
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "%s '%s' is not a regular file (%s%s): writing it would replace it; "
                          "give a file's path",
                          label, path, link ? "a symbolic link to " : "",
                          hoop__file_type(sb.st_mode));
    /* The rename needs only the directory's permission, so a file made read-only (0444,
     * to keep it) would be replaced all the same, as open(O_WRONLY) would refuse. */
    if (exists && access(path, W_OK) != 0 && (errno == EACCES || errno == EPERM))
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "%s '%s'%s is not writable by this user (mode %04o): writing it would "
                          "replace it; make it writable or give another path",
                          label, path, link ? " (through the symbolic link)" : "",
                          (unsigned)(sb.st_mode & 07777));
    *existed = exists;
    *old = sb;
    *dest = link ? realpath(path, NULL) : strdup(path);
    if (*dest == NULL && link)
        return HOOP_ERROR(HOOP_ERR_SYSTEM, "%s '%s': cannot resolve the symbolic link: %s", label,
                          path, hoop__strerror(errno));
    if (*dest == NULL) return HOOP_ERROR(HOOP_ERR_NOMEM, "%s: out of memory", label);
    return HOOP_OK;
}

static void end_tmp(struct save_file *f)
{
    free(f->dest);
    free(f->tmp);
}

/* What the probe and a write begin with (*f): the file to replace (save_dest), room for a
 * temporary name beside it, and the file a write fills, opened by open_tmp. On failure
 * nothing is left to free or close: save_dest's errors, HOOP_ERR_NOMEM, or
 * HOOP_ERR_SYSTEM naming the file with errno's reason. */
static hoop_status begin_tmp(const char *label, const char *path, struct save_file *f)
{
    *f = (struct save_file){.label = label, .path = path, .fd = -1};
    HOOP_CHECK(save_dest(label, path, &f->dest, &f->old, &f->existed));
    f->cap = strlen(f->dest) + 32;
    f->tmp = malloc(f->cap);
    hoop_status st = HOOP_OK;
    if (f->tmp == NULL) {
        st = HOOP_ERROR(HOOP_ERR_NOMEM, "%s: out of memory", label);
    } else if ((f->fd = open_tmp(f)) < 0) {
        /* before free(), which may change errno; a link's target named after the link */
        int link = strcmp(path, f->dest) != 0;
        st = HOOP_ERROR(HOOP_ERR_SYSTEM, "%s%s%s%s: cannot create a temporary file beside '%s': %s",
                        label, link ? " '" : "", link ? path : "", link ? "'" : "", f->dest,
                        hoop__strerror(errno));
    }
    if (st != HOOP_OK) end_tmp(f);
    return st;
}

hoop_status hoop__atomic_probe(const char *label, const char *path)
{
    struct save_file f;
    HOOP_CHECK(begin_tmp(label, path, &f));
    hoop_status st = f.named ? HOOP_OK : link_tmp(&f);
    close(f.fd);
    if (f.named) unlink(f.tmp);
    end_tmp(&f);
    return st;
}

hoop_status hoop__atomic_write(const char *label, const char *path, const void *data, size_t n,
                               int fault)
{
    struct save_file f;
    HOOP_CHECK(begin_tmp(label, path, &f));
    /* Messages name path first and the file written in parentheses. */
    char what[600];
    if (f.named)
        snprintf(what, sizeof(what), "temporary file '%s'", f.tmp);
    else
        snprintf(what, sizeof(what), "an unnamed temporary file beside '%s'", f.dest);
    hoop_status st = write_data(&f, data, n, fault, what);
    if (st == HOOP_OK && fsync(f.fd) != 0)
        st = HOOP_ERROR(HOOP_ERR_SYSTEM, "%s '%s': fsync failed (%s): %s", label, path, what,
                        hoop__strerror(errno));
    if (st == HOOP_OK && !f.named) st = link_tmp(&f);
    if (close(f.fd) != 0 && st == HOOP_OK)
        st = HOOP_ERROR(HOOP_ERR_SYSTEM, "%s '%s': close failed (%s): %s", label, path, what,
                        hoop__strerror(errno));
    if (st == HOOP_OK && rename(f.tmp, f.dest) != 0)
        st = HOOP_ERROR(HOOP_ERR_SYSTEM,
                        "%s '%s': cannot move the written file into place (temporary file '%s' "
                        "-> '%s'): %s",
                        label, path, f.tmp, f.dest, hoop__strerror(errno));
    if (st != HOOP_OK && f.named) unlink(f.tmp);
    if (st == HOOP_OK) st = fsync_dir(&f);
    end_tmp(&f);
    return st;
}
