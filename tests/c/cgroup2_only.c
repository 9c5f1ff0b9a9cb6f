/* An LD_PRELOAD library for the cgroup v2 job-end tests: it shows Slurm's
 * daemons (slurmd, slurmstepd) /proc/PID/cgroup as a pure cgroup v2 node
 * has it, the "0::" line alone. The test machine's kernel still has cgroup
 * v1 hierarchies mounted, so the file lists them too, in every mount
 * namespace, and Slurm's cgroup/v2 plugin refuses that ("Hybrid mode is not
 * supported"). Nothing else is changed: the cgroup2 hierarchy Slurm writes
 * and the chain reads is the kernel's own. Any other program that gets the
 * library (the epilog chain, a job's processes) reads the file as it is: the
 * choice is made once, in a constructor, by the program's executable
 * (slurmstepd rewrites its own name later). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static int active;

__attribute__((constructor)) static void decide(void)
{
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    const char *base;
    if (n <= 0)
        return;
    exe[n] = '\0';
    base = strrchr(exe, '/');
    base = base ? base + 1 : exe;
    /* Debian's are slurmd-wlm and slurmstepd-wlm */
    active = strncmp(base, "slurmd", 6) == 0 || strncmp(base, "slurmstepd", 10) == 0;
}

/* /proc/<one name>/cgroup */
static int is_proc_cgroup(const char *path)
{
    const char *rest;
    if (!path || strncmp(path, "/proc/", 6) != 0)
        return 0;
    rest = strchr(path + 6, '/');
    return rest && rest > path + 6 && strcmp(rest, "/cgroup") == 0;
}

/* A memfd holding FD's "0::" lines, read from its start; FD is closed. */
static int only_v2(int fd)
{
    char buf[65536], out[65536];
    size_t len = 0, kept = 0;
    ssize_t n;
    char *line, *end;
    int mem;
    while (len < sizeof buf - 1 && (n = read(fd, buf + len, sizeof buf - 1 - len)) > 0)
        len += (size_t)n;
    close(fd);
    buf[len] = '\0';
    for (line = buf; line < buf + len; line = end + 1) {
        end = strchr(line, '\n');
        if (!end)
            end = buf + len;
        if (strncmp(line, "0::", 3) == 0) {
            size_t size = (size_t)(end - line);
            memcpy(out + kept, line, size);
            kept += size;
            out[kept++] = '\n';
        }
    }
    mem = memfd_create("cgroup2-only", MFD_CLOEXEC);
    if (mem < 0)
        return -1;
    if (write(mem, out, kept) != (ssize_t)kept || lseek(mem, 0, SEEK_SET) != 0) {
        close(mem);
        return -1;
    }
    return mem;
}

static int opened(const char *path, int fd)
{
    return fd >= 0 && active && is_proc_cgroup(path) ? only_v2(fd) : fd;
}

static mode_t mode_of(int flags, va_list args)
{
    return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? (mode_t)va_arg(args, int) : 0;
}

int open(const char *path, int flags, ...)
{
    static int (*real)(const char *, int, ...);
    va_list args;
    mode_t mode;
    va_start(args, flags);
    mode = mode_of(flags, args);
    va_end(args);
    if (!real)
        real = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, "open");
    return opened(path, real(path, flags, mode));
}

int open64(const char *path, int flags, ...)
{
    static int (*real)(const char *, int, ...);
    va_list args;
    mode_t mode;
    va_start(args, flags);
    mode = mode_of(flags, args);
    va_end(args);
    if (!real)
        real = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, "open64");
    return opened(path, real(path, flags, mode));
}

int openat(int dirfd, const char *path, int flags, ...)
{
    static int (*real)(int, const char *, int, ...);
    va_list args;
    mode_t mode;
    va_start(args, flags);
    mode = mode_of(flags, args);
    va_end(args);
    if (!real)
        real = (int (*)(int, const char *, int, ...))dlsym(RTLD_NEXT, "openat");
    return opened(path, real(dirfd, path, flags, mode));
}

FILE *fopen(const char *path, const char *how)
{
    static FILE *(*real)(const char *, const char *);
    int fd;
    if (!real)
        real = (FILE * (*)(const char *, const char *)) dlsym(RTLD_NEXT, "fopen");
    if (!active || !is_proc_cgroup(path))
        return real(path, how);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    return fd < 0 ? NULL : fdopen(fd, "r");
}
