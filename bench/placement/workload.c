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
 * TLB reach (PL_TLB_REACH, default 1536; 0 = off): x86 Linux clears a page's accessed bit without flushing the
 * TLB, relying on the TLB's small reach (a core's second-level TLB holds 1536-2048 4 KiB translations) to make
 * the next access walk the page table and set the bit again. QEMU's TCG software TLB grows to hold a whole
 * 128 MiB hot set, so under TCG hot pages could stay "not accessed" for as long as nothing flushed that vCPU's TLB:
 * DAMON and the young filters then see idle pages where the hardware would see hot ones, and the workload's speed
 * varied 45-fold between runs. So the hot loop flushes its CPU's TLB after every PL_TLB_REACH pages it touches
 * (an mprotect of a 64-page scratch mapping: above the kernel's 33-page ceiling for single-page flushes, the
 * kernel flushes the whole local TLB by rewriting CR3, which QEMU honours by emptying its TLB): what a hardware
 * TLB of that reach does to a loop over 32,768 pages.
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

#define SCRATCH_PAGES 64

/* Flush this CPU's TLB: take write permission from (or give it back to) 64 present pages. */
static void flush_tlb(char *scratch, uint64_t n) {
    if (mprotect(scratch, SCRATCH_PAGES * PAGE, (n & 1) ? PROT_READ | PROT_WRITE : PROT_READ) != 0) {
        perror("mprotect");
        exit(2);
    }
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
    const char *reach_env = getenv("PL_TLB_REACH");
    size_t reach = reach_env ? strtoul(reach_env, NULL, 10) : 1536;
    char *scratch = map(SCRATCH_PAGES * PAGE);
    for (size_t i = 0; i < SCRATCH_PAGES; i++)
        scratch[i * PAGE] = 1;
    printf("PL:TLB reach=%zu\n", reach);
    fflush(stdout);
    pthread_t th;
    pthread_create(&th, NULL, sampler, &a);
    uint64_t passes = 0, flushes = 0;
    size_t since_flush = 0;
    while (!stop) {
        for (size_t i = 0; i < hot_pages; i++) {
            ((volatile uint64_t *)(hot + i * PAGE))[(passes + i) & 7] += 1;
            if (reach && ++since_flush >= reach) {
                flush_tlb(scratch, flushes++);
                since_flush = 0;
            }
        }
        passes++;
    }
    pthread_join(th, NULL);
    printf("PL:END passes=%llu tlb_flushes=%llu\n", (unsigned long long)passes, (unsigned long long)flushes);
    return 0;
}
