/* nodeagent's load-to-use latency probe: one dependent pointer chase over a buffer bound to one NUMA node.
 *
 * Built with the host's cc at first use by nodeagent.host.latency (package data, no libnuma needed).
 *
 *   latprobe --cpu C --node N --bytes B --chains K --loads L --budget-ms T [--max-node M]
 *
 * 1. pins itself to CPU C (sched_setaffinity);
 * 2. maps B bytes (2 MiB aligned), madvise(MADV_HUGEPAGE), mbind(MPOL_BIND, MPOL_MF_STRICT) to node N — all
 *    before the first touch, so every page is allocated on N;
 * 3. writes one random cycle through every cache line of the buffer: pages in a random order, and a random
 *    order of the line slots; line s of page p points at line s of the page after p, the last page's line s
 *    at line s' (the next slot) of the first page. Consecutive loads land on different random pages (no
 *    prefetcher or open DRAM row helps), and the cycle is written page by page, sequentially (fast);
 * 4. runs K chains of L dependent loads each, continuing along the cycle (no chain re-reads a line another
 *    just cached), stopping early when the budget T is spent; prints one JSON line:
 *    {"ns":[per chain ns/load...],"lines":..,"bytes":..,"thp_bytes":..,"nodes":[..],"setup_ms":..,"total_ms":..}
 * Exit 2: usage; 3: the kernel refused (mmap, mbind, affinity); 4: the budget ran out while setting up —
 * the message is on stderr.
 * It writes nothing but its own memory and reads nothing but /proc/self/smaps_rollup.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define LINE 64
#define PAGE 4096
#define SLOTS (PAGE / LINE)
#define HUGE (2UL << 20)
#define MPOL_BIND 2
#define MPOL_MF_STRICT 1
#define MPOL_F_NODE 1
#define MPOL_F_ADDR 2
#define MAX_CHAINS 64

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static uint64_t next_rand(void) { /* xorshift64* */
    rng ^= rng >> 12; rng ^= rng << 25; rng ^= rng >> 27;
    return rng * 2685821657736338717ULL;
}

static void shuffle(uint32_t *a, size_t n) {
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = next_rand() % (i + 1);
        uint32_t t = a[i]; a[i] = a[j]; a[j] = t;
    }
}

static int die(const char *what) {
    fprintf(stderr, "latprobe: %s: %s\n", what, strerror(errno));
    return 3;
}

static long thp_bytes(void) {
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    char line[256];
    long kb = -1;
    if (!f) return -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "AnonHugePages: %ld kB", &kb) == 1) break;
    fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    long cpu = -1, node = -1, max_node = -1, chains = 7, loads = 200000, budget = 2000;
    unsigned long long bytes = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--cpu")) cpu = atol(v);
        else if (!strcmp(k, "--node")) node = atol(v);
        else if (!strcmp(k, "--max-node")) max_node = atol(v);
        else if (!strcmp(k, "--bytes")) bytes = strtoull(v, NULL, 10);
        else if (!strcmp(k, "--chains")) chains = atol(v);
        else if (!strcmp(k, "--loads")) loads = atol(v);
        else if (!strcmp(k, "--budget-ms")) budget = atol(v);
        else { fprintf(stderr, "latprobe: unknown option %s\n", k); return 2; }
    }
    if (argc % 2 != 1 || cpu < 0 || node < 0 || bytes < 2 * HUGE || chains < 1 || chains > MAX_CHAINS ||
        loads < 1 || budget < 1) {
        fprintf(stderr, "usage: latprobe --cpu C --node N --bytes B(>=4MiB) [--chains 1-%d] [--loads L] "
                "[--budget-ms T] [--max-node M]\n", MAX_CHAINS);
        return 2;
    }
    if (max_node < node) max_node = node;
    double t0 = now_ms();

    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) return die("sched_setaffinity");

    size_t size = (size_t)(bytes / HUGE * HUGE);
    char *raw = mmap(NULL, size + HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return die("mmap");
    char *buf = (char *)(((uintptr_t)raw + HUGE - 1) & ~(HUGE - 1));
    madvise(buf, size, MADV_HUGEPAGE); /* a kernel with THP "never" still measures, thp_bytes says so */

    unsigned long words = (unsigned long)max_node / (8 * sizeof(unsigned long)) + 1;
    unsigned long *mask = calloc(words, sizeof(unsigned long));
    if (!mask) return die("calloc");
    mask[node / (8 * sizeof(unsigned long))] = 1UL << (node % (8 * sizeof(unsigned long)));
    if (syscall(SYS_mbind, buf, size, MPOL_BIND, mask, words * 8 * sizeof(unsigned long) + 1, MPOL_MF_STRICT))
        return die("mbind");

    size_t pages = size / PAGE;
    uint32_t *order = malloc(pages * sizeof *order), *succ = malloc(pages * sizeof *succ);
    uint32_t slot[SLOTS], slot_next[SLOTS];
    if (!order || !succ) return die("malloc");
    rng ^= (uint64_t)getpid() << 17 ^ (uint64_t)(t0 * 1e3);
    for (size_t i = 0; i < pages; i++) order[i] = (uint32_t)i;
    shuffle(order, pages);
    for (size_t i = 0; i < pages; i++) succ[order[i]] = order[(i + 1) % pages];
    for (uint32_t s = 0; s < SLOTS; s++) slot[s] = s;
    shuffle(slot, SLOTS);
    for (uint32_t s = 0; s < SLOTS; s++) slot_next[slot[s]] = slot[(s + 1) % SLOTS];
    uint32_t last = order[pages - 1];
    for (size_t p = 0; p < pages; p++) { /* page by page: a sequential first touch, on the bound node */
        if (p % 4096 == 0 && now_ms() - t0 > budget * 0.9) {
            fprintf(stderr, "latprobe: budget of %ld ms spent setting up %zu of %zu MiB\n", budget,
                    p * PAGE >> 20, size >> 20);
            return 4;
        }
        for (uint32_t s = 0; s < SLOTS; s++) {
            char *to = p == last ? buf + (size_t)order[0] * PAGE + slot_next[s] * LINE
                                 : buf + (size_t)succ[p] * PAGE + s * LINE;
            *(void **)(buf + p * PAGE + s * LINE) = to;
        }
    }
    long thp = thp_bytes();

    int seen[16], nseen = 0; /* where a spread of the pages landed */
    for (int i = 0; i < 16; i++) {
        int where = -1;
        if (syscall(SYS_get_mempolicy, &where, NULL, 0, buf + (size / 16) * i, MPOL_F_NODE | MPOL_F_ADDR) != 0)
            continue;
        int dup = 0;
        for (int j = 0; j < nseen; j++) dup |= seen[j] == where;
        if (!dup) seen[nseen++] = where;
    }
    double setup = now_ms() - t0;

    void **p = (void **)(buf + (size_t)order[next_rand() % pages] * PAGE + slot[0] * LINE);
    for (long i = 0; i < loads / 10 + 1; i++) p = (void **)*p; /* warm: TLB walk caches, frequency */
    double ns[MAX_CHAINS];
    int done = 0;
    for (; done < chains; done++) {
        if (done > 0 && now_ms() - t0 > budget) break;
        double a = now_ms();
        for (long i = 0; i < loads; i++) p = (void **)*p;
        ns[done] = (now_ms() - a) * 1e6 / loads;
    }
    double total = now_ms() - t0;
    printf("{\"ns\":[");
    for (int i = 0; i < done; i++) printf("%s%.3f", i ? "," : "", ns[i]);
    printf("],\"median_ns\":");
    qsort(ns, done, sizeof ns[0], cmp_double);
    printf("%.3f,\"lines\":%zu,\"bytes\":%zu,\"thp_bytes\":%ld,\"nodes\":[", done % 2 ? ns[done / 2]
           : (ns[done / 2 - 1] + ns[done / 2]) / 2, size / LINE, size, thp);
    for (int i = 0; i < nseen; i++) printf("%s%d", i ? "," : "", seen[i]);
    printf("],\"cpu\":%ld,\"node\":%ld,\"loads\":%ld,\"setup_ms\":%.1f,\"total_ms\":%.1f,\"end\":\"%p\"}\n",
           cpu, node, loads, setup, total, (void *)p); /* p printed: the chase cannot be optimised away */
    return 0;
}
