/* A hostile user's processes, at C speed, for the attack tests.
 *
 *   fighter snipe [N] watch /proc/sys/kernel/ns_last_pid and SIGKILL every
 *                     new pid near it: whatever the epilog forks next, if it
 *                     runs as this user (the old part 40's kill -1 did), dies
 *                     before it can act. With N, N snipers (forked first;
 *                     none kills another of its process group).
 *   fighter forkloop  fork in a tight loop; each child carries on and the
 *                     parent exits, so the pid keeps moving.
 *   fighter setsidloop  as forkloop, but each generation first leaves its
 *                     parent's session and group (setsid; setpgid where that
 *                     fails), so no group or session of it lives long.
 *   fighter rename N  keep renaming itself (comm) to N and to random names,
 *                     forking a renamed child now and then.
 *   fighter flock F   open F read-only, hold an exclusive flock on it, and
 *                     print "locked" once it has (or "denied ERRNO").
 *   fighter threads   let the main thread exit while another runs on: /proc
 *                     then shows the process as a zombie (State Z) that is
 *                     alive all the same.
 *   fighter fill      fork children that wait for ever until a fork is
 *                     refused (the node's pids, or its pids cgroup's, are
 *                     used up), then take each pid that frees, as it frees.
 *   fighter becomeuser  run as her setuid copy by another account (real
 *                     uid another's, effective and saved hers): once
 *                     continued (SIGCONT), it takes her uid as its real one
 *                     too (setresuid) and forks a child that waits for ever.
 *   fighter spawnuser as becomeuser, but it stays as it is: at every SIGCONT
 *                     it forks a child that takes her uid (setresuid) and
 *                     waits for ever.
 *   fighter reap CMD  run CMD as a child, as a subreaper that reaps every
 *                     orphan of it, as a node's init would (this machine's
 *                     PID 1 never reaps: a fork loop's dead parents would
 *                     pile up as zombies and use up the pids); exits when no
 *                     descendant is left.
 *
 * Every mode prints "ready" on stdout once it runs, then never exits on its
 * own. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

static void ready(void)
{
    printf("ready\n");
    fflush(stdout);
}

static int snipe(int snipers)
{
    char buf[32];
    int fd = open("/proc/sys/kernel/ns_last_pid", O_RDONLY);
    if (fd < 0)
        return 1;
    int first = 1;
    for (int i = 1; i < snipers && first; i++)
        if (fork() == 0)
            first = 0;
    if (first)
        ready();
    for (;;) {
        ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
        if (n <= 0)
            continue;
        buf[n] = '\0';
        int last = atoi(buf);
        /* never a fellow sniper (the same process group): one that killed
         * the first before it printed "ready" would leave the reader of its
         * pipe waiting for ever */
        for (int pid = last - 2; pid <= last + 8; pid++)
            if (pid > 1 && pid != getpid() && getpgid(pid) != getpgrp())
                kill(pid, SIGKILL);
    }
}

static int forkloop(void)
{
    ready();
    fclose(stdout);
    for (;;) {
        pid_t child = fork();
        if (child > 0)
            _exit(0);
        if (child < 0)
            usleep(1000);
    }
}

static int setsid_loop(void)
{
    ready();
    fclose(stdout);
    for (;;) {
        if (setsid() < 0)
            setpgid(0, 0);
        pid_t child = fork();
        if (child > 0)
            _exit(0);
        if (child < 0)
            usleep(1000);
    }
}

static int rename_loop(const char *name)
{
    char buf[16];
    unsigned n = 0;
    ready();
    fclose(stdout);
    for (;;) {
        if (n % 2)
            snprintf(buf, sizeof buf, "%s", name);
        else
            snprintf(buf, sizeof buf, "x%08x", (unsigned)rand());
        prctl(PR_SET_NAME, buf);
        if (++n % 1000 == 0 && fork() == 0)
            continue;
        usleep(100);
    }
    return 0;
}

static int hold_lock(const char *path)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0 || flock(fd, LOCK_EX) != 0) {
        printf("denied %d\n", errno);
        fflush(stdout);
        pause();
        return 1;
    }
    printf("locked\n");
    fflush(stdout);
    for (;;)
        pause();
}

static int fill(void)
{
    for (;;) {
        pid_t child = fork();
        if (child == 0)
            for (;;)
                pause();
        if (child < 0)
            break;
    }
    ready();
    fclose(stdout);
    for (;;) {
        if (fork() == 0)
            for (;;)
                pause();
        usleep(1000);
    }
    return 0;
}

static int reap(char **argv)
{
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    pid_t child = fork();
    if (child == 0) {
        execvp(argv[0], argv);
        _exit(127);
    }
    while (waitpid(-1, NULL, 0) > 0 || errno == EINTR)
        ;
    return 0;
}

static volatile sig_atomic_t continued;

static void on_cont(int sig)
{
    (void)sig;
    continued = 1;
}

static void wait_forever(void)
{
    for (;;)
        pause();
}

static int as_user_on_cont(int stay)
{
    uid_t her = geteuid();
    sigset_t cont, old;
    signal(SIGCONT, on_cont);
    sigemptyset(&cont);
    sigaddset(&cont, SIGCONT);
    sigprocmask(SIG_BLOCK, &cont, &old);
    ready();
    fclose(stdout);
    for (;;) {
        while (!continued)
            sigsuspend(&old);
        continued = 0;
        while (waitpid(-1, NULL, WNOHANG) > 0)
            ;
        if (!stay && setresuid(her, her, her) != 0)
            return 1;
        pid_t child = fork();
        if (child == 0) {
            sigprocmask(SIG_SETMASK, &old, NULL);
            if (stay && setresuid(her, her, her) != 0)
                _exit(1);
            wait_forever();
        }
        if (!stay) {
            sigprocmask(SIG_SETMASK, &old, NULL);
            wait_forever();
        }
    }
}

static void *worker(void *arg)
{
    (void)arg;
    for (;;)
        pause();
    return NULL;
}

static int threads(void)
{
    pthread_t thread;
    if (pthread_create(&thread, NULL, worker, NULL) != 0)
        return 1;
    ready();
    pthread_exit(NULL);
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "snipe") == 0)
        return snipe(argc >= 3 ? atoi(argv[2]) : 1);
    if (argc >= 3 && strcmp(argv[1], "reap") == 0)
        return reap(argv + 2);
    if (argc >= 2 && strcmp(argv[1], "fill") == 0)
        return fill();
    if (argc >= 2 && strcmp(argv[1], "forkloop") == 0)
        return forkloop();
    if (argc >= 2 && strcmp(argv[1], "setsidloop") == 0)
        return setsid_loop();
    if (argc >= 3 && strcmp(argv[1], "rename") == 0)
        return rename_loop(argv[2]);
    if (argc >= 3 && strcmp(argv[1], "flock") == 0)
        return hold_lock(argv[2]);
    if (argc >= 2 && strcmp(argv[1], "threads") == 0)
        return threads();
    if (argc >= 2 && strcmp(argv[1], "becomeuser") == 0)
        return as_user_on_cont(0);
    if (argc >= 2 && strcmp(argv[1], "spawnuser") == 0)
        return as_user_on_cont(1);
    fprintf(stderr, "usage: fighter snipe [N]|forkloop|fill|rename NAME|flock FILE|threads|becomeuser|spawnuser|reap CMD...\n");
    return 2;
}
