/*
 * The placement benchmark's moving-window workload (bench/placement): the access pattern of a KV cache kept in
 * pageable host memory, and a sampler that reports, page by page, where the current hot set lives.
 *
 *   kvwindow seqs=N append=MIBS window=MIB prompt=MIB burst=MIB lifetime=S duration=S interval=S full=K
 *            [go=FILE ready=FILE base=FILE]
 *
 * N sequences (the batch of an inference server) each own an anonymous mapping (MADV_NOHUGEPAGE: 4 KiB pages).
 * Decode: together they append APPEND MiB/s (each APPEND/N), a page being written when it is appended; the last
 * WINDOW MiB of every sequence are its hot window, written in a loop (one word per page per pass, the "recent
 * tokens"), everything older is never touched again (old tokens). A sequence lives LIFETIME s: then its pages
 * are freed and a new sequence starts in its slot with a PROMPT MiB prompt written at once (prefill: a second
 * thread writes queued prompts one after the other as fast as it can, while decode goes on). At setup the
 * N sequences are given ages spread evenly over [0, LIFETIME) — the steady state of a server that has been
 * running, its history written in the order it was (oldest tokens first, every window last) — so ends and
 * starts come at a steady rate, and live memory is about
 * N x PROMPT + APPEND x LIFETIME / 2. At t = DURATION/2 the phase changes: the older half of the sequences end
 * and as many start, each with a BURST MiB prompt (queued at once). Under TCG writing a burst can take half a
 * minute: when its prompts are written later than 3/4 of DURATION, the run goes on until DURATION/4 after that.
 *
 * t = 0 is the moment the setup is written (at boot: the configuration was applied before). With go= (a
 * configuration applied to a running node) the process creates READY once the setup is written and keeps the
 * server running; vmstat deltas count from the moment BASE appears, t = 0 is the moment GO appears. The process
 * stops by itself at t = DURATION.
 *
 * Every INTERVAL s the sampler asks the kernel (move_pages(2) with nodes == NULL: no access, no migration) on
 * which node each page of every current hot window is; every K x INTERVAL s a second sampler asks for every live
 * page and keeps,
 * per page, the tier it was last seen on, so that it counts the pages seen moving down (DRAM node 0 -> any
 * other node), up, and the pages that came back to a tier they had been moved from (page-level ping-pong;
 * moves and returns between two full samples are not seen). It reads /proc/vmstat and node 0's vmstat.
 *
 * TLB reach (PL_TLB_REACH, default 1536; 0 = off): as in workload.c, the hot loop flushes its CPU's TLB every
 * PL_TLB_REACH pages it touches, because QEMU's software TLB would otherwise hide accesses from DAMON.
 *
 * Output (stdout): "PL:KVCONF ...", "PL:TOUCHED t=", "PL:GO", "PL:T0 mono=<CLOCK_MONOTONIC at t = 0>", per
 * sample "PL:KV <t> q=<query s> win <pages on node0..7> <absent> seqs=<live sequences> appended=<pages> vm
 * <key>=<delta> ... n0 <key>=<delta> ...", per full sample "PL:KVLIVE <t> q=<s> live <node0..7> <absent>
 * pp_up=<pages> pp_down= up= down=" (cumulative), events "PL:SEQ start|end t= slot= pages=",
 * "PL:PHASE begin t=" and "PL:PHASE written t= write_s=", "PL:PASS slow t= took=" (a pass of the hot loop
 * over 1 s), "PL:END passes= tlb_flushes= max_pass_s= slow_passes=".
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
#define MAXSEQ 256
#define PAGE 4096UL
#define MIB (1UL << 20)
#define SCRATCH_PAGES 64

static const char *VM_KEYS[] = {"pgmigrate_success", "pgmigrate_fail", "pgpromote_success", "pgdemote_kswapd",
                                "pgdemote_direct", "pgdemote_khugepaged", "numa_hint_faults", "pgsteal_kswapd",
                                "pgsteal_direct", "numa_pte_updates", "pgpromote_candidate", NULL};
#define NKEYS 11
static const char *N0_KEYS[] = {"pgpromote_success", "pgdemote_kswapd", "pgdemote_direct", "pgdemote_khugepaged",
                                NULL};
#define N0KEYS 4

/* Page states kept for the full samples: the tier last seen (low 2 bits) and which ways the page has moved. */
enum { T_NONE = 0, T_FAST = 1, T_SLOW = 2, T_OTHER = 3, WENT_DOWN = 4, WENT_UP = 8 };

struct seq {
    char *base;
    uint8_t *state;
    size_t cap;               /* pages reserved */
    volatile size_t len;      /* pages written */
    volatile int prefilling;  /* its prompt is being written by the prefill thread */
    double born, owed;
    pthread_mutex_t lock;     /* held by the sampler while it queries the slot, by restart() while it remaps it */
};

static struct seq seqs[MAXSEQ];
static int nseq;
static size_t win_pages;
static double per_seq_rate; /* pages/s */
static volatile int stop;
static volatile double t0 = -1;
static unsigned long long appended; /* pages written since t = 0 (both writing threads: atomic) */
static long long pp_up, pp_down, up, down;

/* The prefill thread's queue: prompts to write (slot, pages), in order; the phase change's are counted. */
static pthread_mutex_t qlock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t qcond = PTHREAD_COND_INITIALIZER;
static struct { int slot; size_t pages; int phase; } jobs[4 * MAXSEQ];
static int qhead, qtail, phase_left;
static double phase_t, phase_written_t = -1;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void read_keys(const char *path, const char **keys, int nkeys, long long *out) {
    char key[64];
    long long val;
    FILE *f = fopen(path, "r");
    for (int i = 0; i < nkeys; i++)
        out[i] = 0;
    if (!f)
        return;
    while (fscanf(f, "%63s %lld", key, &val) == 2)
        for (int i = 0; i < nkeys; i++)
            if (!strcmp(key, keys[i]))
                out[i] = val;
    fclose(f);
}

static void *xmap(size_t bytes) {
    char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
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

static int tier(int status) {
    if (status == 0)
        return T_FAST;
    if (status >= 0 && status < MAXNODE)
        return status == 1 ? T_OTHER : T_SLOW; /* node 1 is the other DRAM node of the benchmark's guest */
    return T_NONE;
}

/* Query pages [from, to) of s; count them per node; with track, update the per-page states. */
static void query(struct seq *s, size_t from, size_t to, long *counts, int track, void **pages, int *status) {
    size_t n = to - from;
    if (!n)
        return;
    for (size_t i = 0; i < n; i++)
        pages[i] = s->base + (from + i) * PAGE;
    if (syscall(SYS_move_pages, 0, n, pages, NULL, status, 0) != 0) {
        fprintf(stderr, "move_pages: %s\n", strerror(errno));
        exit(3);
    }
    for (size_t i = 0; i < n; i++) {
        counts[(status[i] >= 0 && status[i] < MAXNODE) ? status[i] : MAXNODE]++;
        if (!track)
            continue;
        uint8_t *st = &s->state[from + i];
        int was = *st & 3, is = tier(status[i]);
        if (is == T_NONE || is == was)
            continue;
        if (was == T_FAST && is != T_FAST) {
            down++;
            if (*st & WENT_UP)
                pp_down++;
            *st |= WENT_DOWN;
        } else if (was != T_NONE && is == T_FAST) {
            up++;
            if (*st & WENT_DOWN)
                pp_up++;
            *st |= WENT_UP;
        }
        *st = (*st & ~3) | is;
    }
}

struct sampler_args {
    double duration, interval;
    int full;
    const char *go, *ready, *base;
};

static void wait_for(const char *path) {
    struct stat st;
    while (stat(path, &st) != 0)
        usleep(20000);
}

static void print_counts(const char *name, long *c) {
    printf(" %s", name);
    for (int i = 0; i <= MAXNODE; i++)
        printf(" %ld", c[i]);
}

static void *sampler(void *p) {
    struct sampler_args *a = p;
    long long base[NKEYS], cur[NKEYS], nbase[N0KEYS], ncur[N0KEYS];
    size_t maxq = 0;
    for (int i = 0; i < nseq; i++)
        maxq = seqs[i].cap > maxq ? seqs[i].cap : maxq;
    void **pages = malloc(maxq * sizeof(void *));
    int *status = malloc(maxq * sizeof(int));
    if (a->go) {
        FILE *r = fopen(a->ready, "w");
        if (r)
            fclose(r);
        wait_for(a->base);
    }
    read_keys("/proc/vmstat", VM_KEYS, NKEYS, base);
    read_keys("/sys/devices/system/node/node0/vmstat", N0_KEYS, N0KEYS, nbase);
    if (a->go) {
        wait_for(a->go);
        appended = 0;
        t0 = now();
        printf("PL:GO\n");
        printf("PL:T0 mono=%.2f\n", t0);
        fflush(stdout);
    }
    while (t0 < 0)
        usleep(10000);
    if (!a->go) {
        printf("PL:T0 mono=%.2f\n", t0);
        fflush(stdout);
    }
    for (int k = 1;; k++) {
        double due = t0 + k * a->interval;
        while (now() < due)
            usleep(5000);
        long win[MAXNODE + 1] = {0};
        double q0 = now();
        int live_seqs = 0;
        for (int i = 0; i < nseq; i++) {
            struct seq *s = &seqs[i];
            pthread_mutex_lock(&s->lock);
            size_t len = s->len;
            if (s->base) {
                live_seqs++;
                query(s, len > win_pages ? len - win_pages : 0, len, win, 0, pages, status);
            }
            pthread_mutex_unlock(&s->lock);
        }
        double q = now() - q0;
        read_keys("/proc/vmstat", VM_KEYS, NKEYS, cur);
        read_keys("/sys/devices/system/node/node0/vmstat", N0_KEYS, N0KEYS, ncur);
        /* one line from several printf() calls: stdout stays locked so that another thread's line (PL:SEQ, from the
           prefill thread) cannot land inside it */
        flockfile(stdout);
        printf("PL:KV %.2f q=%.3f", now() - t0, q);
        print_counts("win", win);
        printf(" seqs=%d appended=%llu vm", live_seqs, appended);
        for (int i = 0; i < NKEYS; i++)
            printf(" %s=%lld", VM_KEYS[i], cur[i] - base[i]);
        printf(" n0");
        for (int i = 0; i < N0KEYS; i++)
            printf(" %s=%lld", N0_KEYS[i], ncur[i] - nbase[i]);
        printf("\n");
        fflush(stdout);
        funlockfile(stdout);
        /* the run lasts DURATION; if the phase's prompts are written later than 3/4 of it (TCG), until DURATION/4
           after they are (but no longer than 2 x DURATION) */
        double end = a->duration;
        if (phase_written_t < 0)
            end = 2 * a->duration;
        else if (phase_written_t > a->duration * 3 / 4)
            end = phase_written_t + a->duration / 4;
        if (due - t0 >= end - 1e-6)
            break;
        while (t0 + (k + 1) * a->interval < now()) /* a sample that came late: skip the due times it overran */
            k++;
    }
    stop = 1;
    return NULL;
}

/* The full samples, in a thread of their own (placing 300,000 pages takes seconds under TCG): every live page,
   every K x INTERVAL s, and the page-level moves seen since the last one. */
static void *liver(void *p) {
    struct sampler_args *a = p;
    size_t maxq = 0;
    for (int i = 0; i < nseq; i++)
        maxq = seqs[i].cap > maxq ? seqs[i].cap : maxq;
    void **pages = malloc(maxq * sizeof(void *));
    int *status = malloc(maxq * sizeof(int));
    while (t0 < 0 && !stop)
        usleep(10000);
    for (int k = 1; !stop; k++) {
        double due = t0 + k * a->interval * a->full;
        while (now() < due && !stop)
            usleep(5000);
        if (stop)
            break;
        long live[MAXNODE + 1] = {0};
        double q0 = now();
        for (int i = 0; i < nseq; i++) {
            struct seq *s = &seqs[i];
            pthread_mutex_lock(&s->lock);
            if (s->base)
                query(s, 0, s->len, live, 1, pages, status);
            pthread_mutex_unlock(&s->lock);
        }
        flockfile(stdout);
        printf("PL:KVLIVE %.2f q=%.3f", now() - t0, now() - q0);
        print_counts("live", live);
        printf(" pp_up=%lld pp_down=%lld up=%lld down=%lld\n", pp_up, pp_down, up, down);
        fflush(stdout);
        funlockfile(stdout);
        while (t0 + (k + 1) * a->interval * a->full < now())
            k++;
    }
    return NULL;
}

static void flush_tlb(char *scratch, uint64_t n) {
    if (mprotect(scratch, SCRATCH_PAGES * PAGE, (n & 1) ? PROT_READ | PROT_WRITE : PROT_READ) != 0) {
        perror("mprotect");
        exit(2);
    }
}

static double since_t0(void) { return t0 < 0 ? -1 : now() - t0; }

static void write_pages(struct seq *s, size_t n) {
    for (size_t i = 0; i < n && s->len < s->cap; i++) {
        ((volatile uint64_t *)(s->base + s->len * PAGE))[0] = s->len | 1;
        s->len = s->len + 1;
        __atomic_add_fetch(&appended, 1, __ATOMIC_RELAXED);
    }
}

/* The prefill thread: writes each queued prompt at once, as fast as it can, while decode goes on. */
static void *prefiller(void *unused) {
    (void)unused;
    for (;;) {
        pthread_mutex_lock(&qlock);
        while (qhead == qtail && !stop)
            pthread_cond_wait(&qcond, &qlock);
        if (qhead == qtail) {
            pthread_mutex_unlock(&qlock);
            return NULL;
        }
        int slot = jobs[qhead % (4 * MAXSEQ)].slot, phase = jobs[qhead % (4 * MAXSEQ)].phase;
        size_t n = jobs[qhead % (4 * MAXSEQ)].pages;
        qhead++;
        pthread_mutex_unlock(&qlock);
        struct seq *s = &seqs[slot];
        write_pages(s, n);
        s->prefilling = 0;
        printf("PL:SEQ start t=%.2f slot=%d pages=%zu\n", t0 < 0 ? -1 : now() - t0, slot, n);
        if (phase && --phase_left == 0) {
            phase_written_t = now() - t0;
            printf("PL:PHASE written t=%.2f write_s=%.2f\n", phase_written_t, phase_written_t - phase_t);
        }
        fflush(stdout);
    }
}

static void enqueue(int slot, size_t pages, int phase) {
    pthread_mutex_lock(&qlock);
    jobs[qtail % (4 * MAXSEQ)].slot = slot;
    jobs[qtail % (4 * MAXSEQ)].pages = pages;
    jobs[qtail % (4 * MAXSEQ)].phase = phase;
    qtail++;
    pthread_cond_signal(&qcond);
    pthread_mutex_unlock(&qlock);
}

/* Free slot i's sequence (its pages go back to the kernel) and start a new one of age 0 whose prompt the
   prefill thread writes (synchronously with quiet: the setup). */
static void restart(int i, size_t prompt_pages, int quiet, int phase) {
    struct seq *s = &seqs[i];
    pthread_mutex_lock(&s->lock);
    char *old = s->base;
    uint8_t *old_state = s->state;
    size_t old_len = s->len;
    s->base = xmap(s->cap * PAGE);
    s->state = calloc(s->cap, 1);
    s->len = 0;
    s->owed = 0;
    if (old) {
        munmap(old, s->cap * PAGE);
        free(old_state);
    }
    pthread_mutex_unlock(&s->lock);
    if (old && !quiet)
        printf("PL:SEQ end t=%.2f slot=%d pages=%zu\n", since_t0(), i, old_len);
    s->born = now();
    if (quiet) {
        write_pages(s, prompt_pages);
        return;
    }
    s->prefilling = 1;
    enqueue(i, prompt_pages, phase);
}

static double arg(int argc, char **argv, const char *key, double dflt) {
    size_t k = strlen(key);
    for (int i = 1; i < argc; i++)
        if (!strncmp(argv[i], key, k) && argv[i][k] == '=')
            return atof(argv[i] + k + 1);
    return dflt;
}

static const char *sarg(int argc, char **argv, const char *key) {
    size_t k = strlen(key);
    for (int i = 1; i < argc; i++)
        if (!strncmp(argv[i], key, k) && argv[i][k] == '=')
            return argv[i] + k + 1;
    return NULL;
}

int main(int argc, char **argv) {
    nseq = (int)arg(argc, argv, "seqs", 16);
    double append = arg(argc, argv, "append", 8), window = arg(argc, argv, "window", 4);
    double prompt = arg(argc, argv, "prompt", 16), burst = arg(argc, argv, "burst", 32);
    double lifetime = arg(argc, argv, "lifetime", 120);
    struct sampler_args a = {arg(argc, argv, "duration", 90), arg(argc, argv, "interval", 1),
                             (int)arg(argc, argv, "full", 3), sarg(argc, argv, "go"), sarg(argc, argv, "ready"),
                             sarg(argc, argv, "base")};
    if (nseq < 1 || nseq > MAXSEQ || append <= 0 || window <= 0 || prompt <= 0 || burst <= 0 || lifetime <= 0 ||
        a.duration <= 0 || a.interval <= 0 || (a.go && (!a.ready || !a.base))) {
        fprintf(stderr, "usage: %s seqs=N append=MIBS window=MIB prompt=MIB burst=MIB lifetime=S duration=S "
                        "interval=S full=K [go=FILE ready=FILE base=FILE]\n", argv[0]);
        return 64;
    }
    win_pages = (size_t)(window * MIB / PAGE);
    per_seq_rate = append * MIB / PAGE / nseq;
    size_t prompt_pages = (size_t)(prompt * MIB / PAGE), burst_pages = (size_t)(burst * MIB / PAGE);
    size_t biggest = prompt_pages > burst_pages ? prompt_pages : burst_pages;
    size_t cap = biggest + (size_t)(per_seq_rate * (lifetime + a.duration)) + 256;
    double live = nseq * prompt + append * lifetime / 2;
    printf("PL:KVCONF seqs=%d append=%g window=%g prompt=%g burst=%g lifetime=%g duration=%g interval=%g full=%d "
           "live_mib=%.0f hot_mib=%.0f\n", nseq, append, window, prompt, burst, lifetime, a.duration, a.interval,
           a.full, live, nseq * window);
    fflush(stdout);
    double started = now();
    /* The history, written in the order a running server wrote it: from the oldest sequence's prompt to now, one
       second of its time at a time, each sequence born at -age with its prompt and appending since. So the oldest
       tokens are the first pages allocated and every window the last: what first-touch placement gives a server
       that has been running (slot 0 is the oldest). */
    double ages[MAXSEQ];
    for (int i = 0; i < nseq; i++) {
        seqs[i].cap = cap;
        pthread_mutex_init(&seqs[i].lock, NULL);
        ages[i] = (nseq - i - 0.5) * lifetime / nseq;
    }
    for (double h = -ages[0];; h = h + 1 < 0 ? h + 1 : 0) {
        for (int i = 0; i < nseq; i++) {
            if (h < -ages[i])
                continue;
            if (!seqs[i].base)
                restart(i, prompt_pages, 1, 0);
            size_t want = prompt_pages + (size_t)((h + ages[i]) * per_seq_rate);
            if (want > seqs[i].len)
                write_pages(&seqs[i], want - seqs[i].len);
        }
        if (h >= 0)
            break;
    }
    for (int i = 0; i < nseq; i++)
        seqs[i].born = now() - ages[i];
    printf("PL:TOUCHED t=%.2f\n", now() - started);
    fflush(stdout);
    if (!a.go) {
        appended = 0;
        t0 = now();
    }
    const char *reach_env = getenv("PL_TLB_REACH");
    size_t reach = reach_env ? strtoul(reach_env, NULL, 10) : 1536;
    /* The TLB-flush scratch area is shared anonymous memory: a private one can merge with the private mapping next
       to it, and every mprotect() (about 1,000 a second) then splits and re-merges that VMA under mmap_lock.
       With it shared, the longest pass at the wide point went from 5-12 s to 0.74 s in one run. The stalls of
       seconds left in other runs went away once guest.sh stopped spawning processes to sample (bench/placement
       README). */
    char *scratch = mmap(NULL, SCRATCH_PAGES * PAGE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (scratch == MAP_FAILED) {
        perror("mmap");
        exit(2);
    }
    for (size_t i = 0; i < SCRATCH_PAGES; i++)
        scratch[i * PAGE] = 1;
    printf("PL:TLB reach=%zu\n", reach);
    fflush(stdout);
    pthread_t th, pf, lv;
    pthread_create(&th, NULL, sampler, &a);
    if (a.full > 0)
        pthread_create(&lv, NULL, liver, &a);
    pthread_create(&pf, NULL, prefiller, NULL);
    uint64_t passes = 0, flushes = 0, slow_passes = 0;
    size_t since_flush = 0;
    int phased = 0;
    double last = now(), pass_start = last, max_pass = 0;
    while (!stop) {
        double t = now(), dt = t - last;
        last = t;
        if (!phased && t0 >= 0 && t - t0 >= a.duration / 2) {
            /* the phase change: the older half ends, as many start with a large prompt, one after the other */
            phased = 1;
            phase_t = t - t0;
            printf("PL:PHASE begin t=%.2f\n", phase_t);
            fflush(stdout);
            int order[MAXSEQ];
            for (int i = 0; i < nseq; i++)
                order[i] = i;
            for (int i = 0; i < nseq; i++) /* oldest first */
                for (int j = i + 1; j < nseq; j++)
                    if (seqs[order[j]].born < seqs[order[i]].born) {
                        int x = order[i];
                        order[i] = order[j];
                        order[j] = x;
                    }
            int ending = 0;
            for (int i = 0; i < nseq / 2; i++)
                ending += !seqs[order[i]].prefilling;
            phase_left = ending;
            if (!ending) {
                phase_written_t = phase_t;
                printf("PL:PHASE written t=%.2f write_s=0\n", phase_t);
            }
            for (int i = 0; i < nseq / 2; i++)
                if (!seqs[order[i]].prefilling)
                    restart(order[i], burst_pages, 0, 1);
            continue;
        }
        for (int i = 0; i < nseq; i++) {
            struct seq *s = &seqs[i];
            if (s->prefilling)
                continue;
            if (t - s->born >= lifetime) {
                restart(i, prompt_pages, 0, 0);
                continue;
            }
            s->owed += per_seq_rate * dt;
            size_t n = (size_t)s->owed;
            s->owed -= n;
            write_pages(s, n);
        }
        /* one pass over every hot window: one word of each page. The phase change is due at DURATION/2 whatever
           the pass: under TCG a pass over 512 MiB of windows can take seconds, so the clock is read every 1024
           pages and a pass the phase change interrupts ends there (the next one starts with it). */
        int due = 0;
        for (int i = 0; i < nseq && !due; i++) {
            struct seq *s = &seqs[i];
            size_t len = s->len, from = len > win_pages ? len - win_pages : 0;
            for (size_t j = from; j < len; j++) {
                ((volatile uint64_t *)(s->base + j * PAGE))[1 + ((passes + j) & 6)] += 1;
                if (reach && ++since_flush >= reach) {
                    flush_tlb(scratch, flushes++);
                    since_flush = 0;
                }
                if ((j & 1023) == 1023 && !phased && t0 >= 0 && now() - t0 >= a.duration / 2) {
                    due = 1;
                    break;
                }
            }
        }
        passes++;
        /* how long a pass took: a window page is touched once per pass, so a pass longer than DAMON's idle age
           makes hot pages look cold (reported, not judged: the emulator's speed, not the configuration's) */
        double end_pass = now(), took = end_pass - pass_start;
        pass_start = end_pass;
        if (t0 >= 0 && !stop) { /* not the pass the end of the run cut short */
            max_pass = took > max_pass ? took : max_pass;
            if (took > 1.0) {
                slow_passes++;
                printf("PL:PASS slow t=%.2f took=%.2f\n", end_pass - t0, took);
                fflush(stdout);
            }
        }
    }
    pthread_join(th, NULL);
    if (a.full > 0)
        pthread_join(lv, NULL);
    pthread_mutex_lock(&qlock);
    qhead = qtail; /* prompts not yet written are dropped */
    pthread_cond_signal(&qcond);
    pthread_mutex_unlock(&qlock);
    pthread_join(pf, NULL);
    printf("PL:END passes=%llu tlb_flushes=%llu max_pass_s=%.2f slow_passes=%llu\n", (unsigned long long)passes,
           (unsigned long long)flushes, max_pass, (unsigned long long)slow_passes);
    return 0;
}
