/*
 * The placement benchmark's workload (bench/placement): a small hot set and a large cold set of anonymous memory,
 * and a sampler that reports, over time, on which NUMA node each page lives and what the kernel migrated.
 *
 *   workload COLD_MIB HOT_MIB DURATION_S INTERVAL_S [GO_FILE READY_FILE BASE_FILE]
 *
 * It maps COLD and HOT separately (MADV_NOHUGEPAGE: 4 KiB pages, so placement is per page), writes every page of
 * COLD, then every page of HOT, and from then on writes one word of every HOT page in a loop, never touching COLD
 * again. A sampler thread queries the node of every HOT page and of every 4th COLD page with move_pages(2) in query
 * mode (nodes == NULL: it neither accesses nor migrates them) every INTERVAL_S seconds, and reads /proc/vmstat.
 *
 * t = 0 is the moment both sets are written (the placement to judge exists); /proc/vmstat deltas count from the
 * start of the process, so they include what the configuration moved while the sets were written. With GO_FILE
 * (how the benchmark applies a configuration to a node that is already full) the process creates READY_FILE once
 * both sets are written and keeps the hot loop running; vmstat deltas count from the moment BASE_FILE appears
 * (the configuration starts to be applied) and t = 0 is the moment GO_FILE appears (it has been applied). The
 * process stops by itself at t = DURATION_S.
 *
 * Output (stdout, one line each): "PL:TOUCHED t=<s>", "PL:GO", then per sample
 * "PL:SAMPLE <t> hot <pages on node0..7> <absent> cold <node0..7> <absent> vm <key>=<delta pages> ...", "PL:END".
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAXNODE 8
#define PAGE 4096UL
#define COLD_STRIDE 4

static const char *VM_KEYS[] = {"pgmigrate_success", "pgmigrate_fail", "pgpromote_success", "pgpromote_candidate",
                                "pgdemote_kswapd", "pgdemote_direct", "pgdemote_khugepaged", "numa_hint_faults",
                                "numa_pages_migrated", "pageoutrun", "pgsteal_kswapd", "pgsteal_direct",
                                "pgscan_kswapd", "pgscan_direct", NULL};
#define NKEYS 14

static char *cold, *hot;
static long long start_vm[NKEYS];
static size_t cold_pages, hot_pages;
static volatile int stop;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void vmstat(long long *out) {
    char key[64];
    long long val;
    FILE *f = fopen("/proc/vmstat", "r");
    for (int i = 0; i < NKEYS; i++)
        out[i] = 0;
    if (!f)
        return;
    while (fscanf(f, "%63s %lld", key, &val) == 2)
        for (int i = 0; i < NKEYS; i++)
            if (!strcmp(key, VM_KEYS[i]))
                out[i] = val;
    fclose(f);
}

static void query(char *base, size_t npages, size_t stride, long *counts) {
    size_t n = (npages + stride - 1) / stride;
    void **pages = malloc(n * sizeof(void *));
    int *status = malloc(n * sizeof(int));
    for (size_t i = 0; i < n; i++)
        pages[i] = base + i * stride * PAGE;
    for (int i = 0; i <= MAXNODE; i++)
        counts[i] = 0;
    if (syscall(SYS_move_pages, 0, n, pages, NULL, status, 0) != 0) {
        fprintf(stderr, "move_pages: %s\n", strerror(errno));
        exit(3);
    }
    for (size_t i = 0; i < n; i++)
        counts[(status[i] >= 0 && status[i] < MAXNODE) ? status[i] : MAXNODE]++;
    free(pages);
    free(status);
}

struct sampler_args {
    double t0, duration, interval;
    const char *go, *ready, *base;
};

static void wait_for(const char *path) {
    struct stat st;
    while (stat(path, &st) != 0)
        usleep(20000);
}

static void *sampler(void *p) {
    struct sampler_args *a = p;
    long long base[NKEYS], cur[NKEYS];
    long hc[MAXNODE + 1], cc[MAXNODE + 1];
    if (a->go) {
        FILE *r = fopen(a->ready, "w");
        if (r)
            fclose(r);
        wait_for(a->base);
        vmstat(base);
        wait_for(a->go);
        a->t0 = now();
        printf("PL:GO\n");
        fflush(stdout);
    } else {
        memcpy(base, start_vm, sizeof(base));
    }
    for (int k = 1;; k++) {
        double due = a->t0 + k * a->interval;
        while (now() < due)
            usleep(10000);
        query(hot, hot_pages, 1, hc);
        query(cold, cold_pages, COLD_STRIDE, cc);
        vmstat(cur);
        printf("PL:SAMPLE %.2f hot", now() - a->t0);
        for (int i = 0; i <= MAXNODE; i++)
            printf(" %ld", hc[i]);
        printf(" cold");
        for (int i = 0; i <= MAXNODE; i++)
            printf(" %ld", cc[i]);
        printf(" vm");
        for (int i = 0; i < NKEYS; i++)
            printf(" %s=%lld", VM_KEYS[i], cur[i] - base[i]);
        printf("\n");
        fflush(stdout);
        if (due - a->t0 >= a->duration - 1e-6)
            break;
    }
    stop = 1;
    return NULL;
}

static char *map(size_t bytes) {
    char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(2);
    }
    if (madvise(p, bytes, MADV_NOHUGEPAGE) != 0) {
        perror("madvise");
        exit(2);
    }
    return p;
}

int main(int argc, char **argv) {
    if (argc != 5 && argc != 8) {
        fprintf(stderr, "usage: %s COLD_MIB HOT_MIB DURATION_S INTERVAL_S [GO_FILE READY_FILE BASE_FILE]\n",
                argv[0]);
        return 64;
    }
    struct sampler_args a = {now(), atof(argv[3]), atof(argv[4]), argc == 8 ? argv[5] : NULL,
                             argc == 8 ? argv[6] : NULL, argc == 8 ? argv[7] : NULL};
    double started = a.t0;
    vmstat(start_vm);
    cold_pages = strtoul(argv[1], NULL, 10) * (1UL << 20) / PAGE;
    hot_pages = strtoul(argv[2], NULL, 10) * (1UL << 20) / PAGE;
    cold = map(cold_pages * PAGE);
    hot = map(hot_pages * PAGE);
    for (size_t i = 0; i < cold_pages; i++)
        cold[i * PAGE] = (char)(i | 1);
    for (size_t i = 0; i < hot_pages; i++)
        hot[i * PAGE] = (char)(i | 1);
    printf("PL:TOUCHED t=%.2f\n", now() - started);
    fflush(stdout);
    if (!a.go)
        a.t0 = now();
    pthread_t th;
    pthread_create(&th, NULL, sampler, &a);
    uint64_t passes = 0;
    while (!stop) {
        for (size_t i = 0; i < hot_pages; i++)
            ((volatile uint64_t *)(hot + i * PAGE))[(passes + i) & 7] += 1;
        passes++;
    }
    pthread_join(th, NULL);
    printf("PL:END passes=%llu\n", (unsigned long long)passes);
    return 0;
}
