/*
 * A TCG plugin for the real-kernel tier's CXL layout: it makes QEMU's x86 emulation take its slow, correct path
 * for the instructions that read or write guest memory as one block (the FPU state saves and restores, the x87
 * 80-bit loads and stores), so that such a block crossing from RAM into emulated CXL memory no longer crashes QEMU.
 *
 * The defect (in the 10.0.2 the harness runs, and in upstream's access.c as we read it): target/i386/tcg/access.c
 * prepares a block access by probing both pages it covers. A page of emulated CXL memory is MMIO to QEMU, so its
 * host address is NULL. access_ptr() checks the first page's address for NULL but not the second's, and hands out
 * NULL + offset as a host pointer: QEMU dies of SIGSEGV in access_stq(). The block that did it was 2696 bytes, the
 * size of an XSAVE signal frame with AVX-512, and QEMU died right as a step of the guest's shell script ended:
 * most likely DAMON had demoted the cold top of the waiting shell's stack to the CXL node, and the kernel wrote
 * the frame of its SIGCHLD across that page boundary. It showed as "qemu exit -11", no exit code from the guest,
 * in about half of the runs of tests/realkernel/test_cxl_regions.py.
 *
 * How: while an instruction with a memory callback runs, probe_access() reports every page as MMIO
 * (the plugin API's promise that every access reaches the callback), so both host addresses are NULL, the NULL
 * check that does exist sends every access through cpu_ld*_mmuidx_ra / cpu_st*_mmuidx_ra, and those handle MMIO.
 * The callback itself does nothing. Only the instructions below get one, so the rest of the guest runs as fast
 * as before.
 *
 * Built by tests/realkernel/harness.py (gcc -shared -fPIC) and loaded with `-plugin`. The few declarations of
 * QEMU's plugin API it uses are written here (QEMU's packages ship no header): those of API version 3, whose
 * qemu_plugin_insn_data() copies the bytes into the caller's buffer (QEMU 10.0.2 loads it).
 */

#include <stddef.h>
#include <stdint.h>

typedef uint64_t qemu_plugin_id_t;
typedef uint32_t qemu_plugin_meminfo_t;
struct qemu_plugin_tb;
struct qemu_plugin_insn;
struct qemu_info_t;

enum { CB_NO_REGS = 0 };             /* enum qemu_plugin_cb_flags */
enum { MEM_R = 1, MEM_W = 2, MEM_RW = 3 };  /* enum qemu_plugin_mem_rw */

size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *tb, size_t idx);
size_t qemu_plugin_insn_data(const struct qemu_plugin_insn *insn, void *dest, size_t len);
void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id,
                                           void (*cb)(qemu_plugin_id_t id, struct qemu_plugin_tb *tb));
void qemu_plugin_register_vcpu_mem_cb(struct qemu_plugin_insn *insn,
                                      void (*cb)(unsigned int vcpu, qemu_plugin_meminfo_t info,
                                                 uint64_t vaddr, void *udata),
                                      int flags, int rw, void *udata);

__attribute__((visibility("default"))) int qemu_plugin_version = 3;

static int is_legacy_prefix(uint8_t b)
{
    switch (b) {
    case 0x26: case 0x2e: case 0x36: case 0x3e: case 0x64: case 0x65:  /* segment overrides */
    case 0x66: case 0x67: case 0xf0: case 0xf2: case 0xf3:             /* size, lock, rep */
        return 1;
    default:
        return 0;
    }
}

/* 1 if the instruction in code[0..len) is one that target/i386/tcg prepares as an X86Access block. */
int x86_block_access(const uint8_t *code, size_t len)
{
    size_t i = 0;
    uint8_t op, modrm;
    int reg;

    while (i < len && is_legacy_prefix(code[i]))
        i++;
    if (i < len && (code[i] & 0xf0) == 0x40)  /* REX (64-bit mode) */
        i++;
    if (i + 1 >= len)
        return 0;
    op = code[i];
    if (op == 0x0f) {
        if (i + 2 >= len)
            return 0;
        op = code[i + 1];
        modrm = code[i + 2];
        if ((modrm >> 6) == 3)  /* a register operand: fences, rdrand and the like */
            return 0;
        reg = (modrm >> 3) & 7;
        if (op == 0xae)  /* fxsave, fxrstor, xsave, xrstor, xsaveopt */
            return reg == 0 || reg == 1 || reg == 4 || reg == 5 || reg == 6;
        if (op == 0xc7)  /* xrstors, xsavec, xsaves */
            return reg == 3 || reg == 4 || reg == 5;
        return 0;
    }
    modrm = code[i + 1];
    if ((modrm >> 6) == 3)
        return 0;
    reg = (modrm >> 3) & 7;
    switch (op) {
    case 0xd9:  /* fldenv, fnstenv */
    case 0xdd:  /* frstor, fnsave */
    case 0xdf:  /* fbld, fbstp */
        return reg == 4 || reg == 6;
    case 0xdb:  /* fld m80, fstp m80 */
        return reg == 5 || reg == 7;
    default:
        return 0;
    }
}

static void on_access(unsigned int vcpu, qemu_plugin_meminfo_t info, uint64_t vaddr, void *udata)
{
    (void)vcpu;
    (void)info;
    (void)vaddr;
    (void)udata;
}

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    size_t n = qemu_plugin_tb_n_insns(tb);
    uint8_t code[16];

    (void)id;
    for (size_t k = 0; k < n; k++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, k);
        size_t len = qemu_plugin_insn_data(insn, code, sizeof(code));

        if (x86_block_access(code, len))
            qemu_plugin_register_vcpu_mem_cb(insn, on_access, CB_NO_REGS, MEM_RW, NULL);
    }
}

__attribute__((visibility("default")))
int qemu_plugin_install(qemu_plugin_id_t id, const struct qemu_info_t *info, int argc, char **argv)
{
    (void)info;
    (void)argc;
    (void)argv;
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
    return 0;
}
