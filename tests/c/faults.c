/*
 * Programs that do to their descriptors, signals and processes what real programs do, for the
 * recorder's fault matrix (tests/faults.rs). Linked with -lcuda against the fake driver. Every
 * allocation prints "WHO A ADDRESS SIZE" and every free "WHO F ADDRESS" once the call returned,
 * WHO being the process's place in its fork tree ("0", "0.1", ...), so a test can check that
 * the trace holds every event the program reports. Scenario argv[1]:
 *   fds           - opens three files after the first call and prints their descriptor numbers
 *   closefrom     - closes every descriptor from 3 up (a daemon's loop), then writes its own
 *                   file on the lowest number
 *   dup2          - puts its own file on every descriptor number it finds open in
 *                   /proc/self/fd from 3 up (fd passing, a shell's "exec 3>"), writes it
 *   reexec        - three calls, then execs itself ("reexec again"), which makes four more
 *   segv          - installs a SIGSEGV handler before its first call, then survives five faults
 *                   (the handler makes the page writable), calling the driver between them
 *   segv_fatal    - its SIGSEGV handler restores the default and returns: the fault kills it
 *   threads T N   - T threads, N alloc/free pairs each
 *   forktree      - a parent, two children, four grandchildren, each calling the driver
 *   lowfd         - lowers RLIMIT_NOFILE to 16 before its first call, then opens five files
 *   wait FILE     - three calls, prints "ready", waits until FILE exists, three more calls
 *   waves W T N   - W waves of T short threads (each started after the last wave ended), N
 *                   alloc/free pairs each; then prints its peak resident memory on stderr
 *                   ("faults: peak rss KB")
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

typedef unsigned long long CUdeviceptr;
typedef int CUresult;
CUresult cuInit(unsigned flags);
CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev);
CUresult cuCtxSetCurrent(void *ctx);
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n);
CUresult cuMemFree_v2(CUdeviceptr p);

static char who[32] = "0";

static void die(const char *what) { fprintf(stderr, "faults: %s\n", what); exit(3); }

static void start(void) {
    void *ctx;
    if (cuInit(0) || cuDevicePrimaryCtxRetain(&ctx, 0) || cuCtxSetCurrent(ctx)) die("context");
}

static void pairs(int n, size_t size) {
    for (int i = 0; i < n; i++) {
        CUdeviceptr p;
        if (cuMemAlloc_v2(&p, size)) die("alloc");
        printf("%s A %llu %zu\n", who, p, size);
        if (cuMemFree_v2(p)) die("free");
        printf("%s F %llu\n", who, p);
    }
}

static int own_file(const char *name) {
    int fd = open(name, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (fd < 0) die("open");
    return fd;
}

static void write_all(int fd, const char *s) {
    if (write(fd, s, strlen(s)) != (ssize_t)strlen(s)) die("write");
}

static void *page;

static void recover(int sig, siginfo_t *info, void *ctx) {
    (void)sig; (void)info; (void)ctx;
    mprotect(page, 4096, PROT_READ | PROT_WRITE);
}

static void give_up(int sig) { signal(sig, SIG_DFL); }

struct worker { int index, n; };

static void *worker(void *arg) {
    struct worker *w = arg;
    for (int i = 0; i < w->n; i++) {
        CUdeviceptr p;
        size_t size = 256 + w->index;
        if (cuMemAlloc_v2(&p, size)) die("alloc");
        printf("%s A %llu %zu\n", who, p, size);
        if (cuMemFree_v2(p)) die("free");
        printf("%s F %llu\n", who, p);
    }
    return NULL;
}

/* Forks `n` children that each run `body` as WHO.i; waits for them all. */
static void children(int n, void (*body)(void)) {
    fflush(stdout);
    pid_t pids[8];
    for (int i = 0; i < n; i++) {
        pids[i] = fork();
        if (pids[i] < 0) die("fork");
        if (pids[i] == 0) {
            size_t len = strlen(who);
            snprintf(who + len, sizeof who - len, ".%d", i);
            body();
            fflush(stdout);
            exit(0);
        }
    }
    for (int i = 0; i < n; i++) {
        int st;
        if (waitpid(pids[i], &st, 0) != pids[i] || !WIFEXITED(st) || WEXITSTATUS(st)) die("child");
    }
}

static void grandchild(void) { pairs(2, 300); }
static void child(void) { pairs(2, 200); children(2, grandchild); pairs(1, 250); }

int main(int argc, char **argv) {
    if (argc < 2) die("usage: faults SCENARIO ...");
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *s = argv[1];
    if (!strcmp(s, "lowfd")) {
        struct rlimit lim = { 16, 16 };
        if (setrlimit(RLIMIT_NOFILE, &lim)) die("setrlimit");
    }
    if (!strcmp(s, "segv") || !strcmp(s, "segv_fatal")) {
        struct sigaction a;
        memset(&a, 0, sizeof a);
        if (!strcmp(s, "segv")) {
            a.sa_sigaction = recover;
            a.sa_flags = SA_SIGINFO;
        } else {
            a.sa_handler = give_up;
        }
        sigemptyset(&a.sa_mask);
        if (sigaction(SIGSEGV, &a, NULL)) die("sigaction");
    }
    start();
    if (!strcmp(s, "fds") || !strcmp(s, "lowfd")) {
        pairs(1, 100);
        int n = !strcmp(s, "fds") ? 3 : 5;
        for (int i = 0; i < n; i++) {
            char name[16];
            snprintf(name, sizeof name, "f%d.txt", i);
            int fd = own_file(name);
            write_all(fd, name);
            printf("fd %d\n", fd);
        }
        pairs(3, 200);
    } else if (!strcmp(s, "closefrom")) {
        pairs(3, 100);
        for (int fd = 3; fd < 1024; fd++) close(fd);
        int fd = own_file("data.txt");
        printf("fd %d\n", fd);
        write_all(fd, "program data\n");
        pairs(5, 200);
        write_all(fd, "more program data\n");
        close(fd);
    } else if (!strcmp(s, "dup2")) {
        pairs(3, 100);
        int fd = own_file("data.txt");
        printf("fd %d\n", fd);
        int open_fds[1024], n = 0;
        DIR *d = opendir("/proc/self/fd");
        if (!d) die("opendir");
        for (struct dirent *e; (e = readdir(d)) && n < 1024;) {
            int x = atoi(e->d_name);
            if (x > 2 && x != fd && x != dirfd(d)) open_fds[n++] = x;
        }
        closedir(d);
        for (int i = 0; i < n; i++) {
            if (dup2(fd, open_fds[i]) != open_fds[i]) die("dup2");
        }
        write_all(fd, "program data\n");
        pairs(5, 200);
        write_all(fd, "more program data\n");
        for (int i = 0; i < n; i++) close(open_fds[i]);
        close(fd);
    } else if (!strcmp(s, "reexec")) {
        if (argc < 3) {
            pairs(3, 100);
            fflush(stdout);
            execl("/proc/self/exe", argv[0], "reexec", "again", (char *)NULL);
            die("exec");
        }
        pairs(4, 200);
    } else if (!strcmp(s, "segv")) {
        pairs(3, 100);
        for (int i = 0; i < 5; i++) {
            page = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (page == MAP_FAILED) die("mmap");
            *(volatile int *)page = i;
            pairs(1, 200 + i);
            munmap(page, 4096);
        }
        printf("recovered 5\n");
    } else if (!strcmp(s, "segv_fatal")) {
        pairs(3, 100);
        fflush(stdout);
        *(volatile int *)(uintptr_t)8 = 1;
        die("survived");
    } else if (!strcmp(s, "threads") && argc >= 4) {
        int t = atoi(argv[2]);
        pthread_t th[64];
        struct worker w[64];
        if (t < 1 || t > 64) die("1 to 64 threads");
        for (int i = 0; i < t; i++) {
            w[i] = (struct worker){ i, atoi(argv[3]) };
            if (pthread_create(&th[i], NULL, worker, &w[i])) die("pthread_create");
        }
        for (int i = 0; i < t; i++) pthread_join(th[i], NULL);
    } else if (!strcmp(s, "waves") && argc >= 5) {
        int t = atoi(argv[3]);
        pthread_t th[64];
        struct worker w[64];
        if (t < 1 || t > 64) die("1 to 64 threads");
        for (int wave = atoi(argv[2]); wave > 0; wave--) {
            for (int i = 0; i < t; i++) {
                w[i] = (struct worker){ i, atoi(argv[4]) };
                if (pthread_create(&th[i], NULL, worker, &w[i])) die("pthread_create");
            }
            for (int i = 0; i < t; i++) pthread_join(th[i], NULL);
        }
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        fprintf(stderr, "faults: peak rss %ld\n", ru.ru_maxrss);
    } else if (!strcmp(s, "forktree")) {
        pairs(1, 100);
        children(2, child);
        pairs(1, 150);
    } else if (!strcmp(s, "wait") && argc >= 3) {
        pairs(3, 100);
        printf("ready\n");
        while (access(argv[2], F_OK)) usleep(1000);
        pairs(3, 200);
    } else {
        die("unknown scenario");
    }
    return 0;
}
