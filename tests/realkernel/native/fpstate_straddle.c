/*
 * fpstate_straddle NODE — in the real-kernel guest: save and restore the FPU state, and store and load an x87
 * 80-bit value, across the boundary between a page on node 0 (RAM) and a page on NODE (emulated CXL memory),
 * and check that what was saved reads back. It is the shape that crashed QEMU's x86 emulation (see
 * native/x86_block_access.c): a block access whose second page is MMIO to QEMU. The kernel makes that shape
 * itself when DAMON demotes the top of a stack and a signal frame is written across it; this makes it at once.
 *
 * Prints one line of key=value pairs; exit 0 when every check passed, 1 when one failed, 2 when the pages could
 * not be placed (the CXL node is not online, or has no room).
 */
#define _GNU_SOURCE
#include <cpuid.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MPOL_MF_MOVE 2

/* move_pages(2) for one page: to `node`, or (node < 0) only ask where it is; its node or -errno */
static int page_node(void *page, int node)
{
    void *pages[1] = {page};
    int nodes[1] = {node};
    int status = -1;

    if (syscall(SYS_move_pages, 0, 1UL, pages, node < 0 ? NULL : nodes, &status, node < 0 ? 0 : MPOL_MF_MOVE))
        return -errno;
    return status;
}

/* 1 if equal; `out` says "ok", or where the first difference is and how many bytes differ */
static int compare(const uint8_t *want, const uint8_t *got, size_t n, char *out, size_t outlen)
{
    size_t first = n, count = 0;

    for (size_t i = 0; i < n; i++)
        if (want[i] != got[i]) {
            if (first == n)
                first = i;
            count++;
        }
    if (count == 0)
        snprintf(out, outlen, "ok");
    else
        snprintf(out, outlen, "differs-at-%zu(%02x!=%02x)-%zu-bytes", first, want[first], got[first], count);
    return count == 0;
}

static uint64_t xcr0(void)
{
    uint32_t lo, hi;

    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

/* a fault in the guest (not QEMU's crash): say which, and where, instead of dying silently */
static void on_fault(int sig, siginfo_t *si, void *ctx)
{
    (void)ctx;
    printf(" fault=%s code=%d addr=%p\n", sig == SIGSEGV ? "SIGSEGV" : "SIGBUS", si->si_code, si->si_addr);
    _exit(1);
}

int main(int argc, char **argv)
{
    long ps = sysconf(_SC_PAGESIZE);
    int node = argc > 1 ? atoi(argv[1]) : -1;
    int failed = 0;
    uint8_t *buf, *edge;

    struct sigaction sa = {.sa_sigaction = on_fault, .sa_flags = SA_SIGINFO};
    sigaction(SIGSEGV, &sa, NULL);
    sigaction(SIGBUS, &sa, NULL);
    setvbuf(stdout, NULL, _IONBF, 0);
    if (node <= 0) {
        fprintf(stderr, "usage: %s CXL_NODE\n", argv[0]);
        return 2;
    }
    buf = mmap(NULL, 2 * ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) {
        perror("mmap");
        return 2;
    }
    memset(buf, 0, 2 * ps);  /* XRSTOR faults (#GP) unless the XSAVE header's other bytes are 0 */
    edge = buf + ps;
    page_node(buf, 0);
    page_node(edge, node);
    int n0 = page_node(buf, -1), n1 = page_node(edge, -1);
    printf("page0_node=%d page1_node=%d", n0, n1);
    if (n0 != 0 || n1 != node) {
        printf(" placed=no\n");
        return 2;
    }

    /* FXSAVE: 512 bytes, 256 on each page; saved twice in a row, into plain memory and across the edge */
    static uint8_t ref[512] __attribute__((aligned(16)));
    uint8_t *fx = edge - 256;
    __asm__ volatile("fxsave64 (%0)\n\tfxsave64 (%1)" : : "r"(ref), "r"(fx) : "memory");
    char why[64];
    failed |= !compare(ref, fx, sizeof(ref), why, sizeof(why));
    __asm__ volatile("fxrstor64 (%0)" : : "r"(fx) : "memory");
    printf(" fxsave=%s", why);

    /* XSAVE of every component the kernel enabled: the standard-format size, 512 bytes on the first page */
    uint32_t a, b, c, d;
    __cpuid(1, a, b, c, d);
    if (c & (1u << 27)) {  /* OSXSAVE */
        uint64_t mask = xcr0();
        __cpuid_count(0xd, 0, a, b, c, d);
        uint32_t size = b;
        uint8_t *xs = edge - 512;
        uint8_t *xref = aligned_alloc(64, (size + 63) & ~63u);
        if (size > (uint32_t)ps + 512 || xref == NULL) {
            printf(" xsave=size-%u\n", size);
            return 1;
        }
        memset(xref, 0, size);
        memset(xs, 0, size);  /* the FXSAVE above left XMM0 where XSAVE leaves reserved bytes as they are */
        __asm__ volatile("xsave64 (%0)\n\txsave64 (%1)"
                         : : "r"(xref), "r"(xs), "a"((uint32_t)mask), "d"((uint32_t)(mask >> 32)) : "memory");
        failed |= !compare(xref, xs, size, why, sizeof(why));
        __asm__ volatile("xrstor64 (%0)" : : "r"(xs), "a"((uint32_t)mask), "d"((uint32_t)(mask >> 32)) : "memory");
        printf(" xsave_bytes=%u xsave=%s", size, why);
        free(xref);
    } else {
        printf(" xsave=absent");
    }

    /* an 80-bit store and load: 4 bytes on the first page, 6 on the second */
    long double v = 1.0L / 3.0L, w = 0;
    uint8_t *t = edge - 4;
    __asm__ volatile("fldt %1\n\tfstpt (%0)" : : "r"(t), "m"(v) : "memory");
    __asm__ volatile("fldt (%1)\n\tfstpt %0" : "=m"(w) : "r"(t) : "memory");
    failed |= !compare((const uint8_t *)&v, (const uint8_t *)&w, 10, why, sizeof(why));
    printf(" fstpt=%s\n", why);
    return failed;
}
