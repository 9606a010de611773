/*
 * ratchet's instruction meter: a QEMU TCG plugin (plugin API v4, QEMU >= 9.2)
 * that counts every instruction each vCPU executes, user and kernel, and
 * snapshots all the counts whenever the guest executes the marker
 *
 *     nopl 0x4d54XXXX(%rax)  =  0F 1F 80 XX XX 54 4D   (XXXX: the marker's id)
 *
 * a 7-byte NOP that does nothing on real hardware. Each snapshot is one line
 * of the file given by out=PATH:
 *
 *     MARK <seq> <id> vcpu=<executing vCPU> c0=<n> c1=<n> ...
 *
 * <seq> numbers the markers in the order they executed, so the guest can
 * name a window by the markers it executed without the marker carrying a
 * run-time value. The last line, "END ...", is written at exit: a file
 * without it was cut short.
 *
 * With sut=N, markers executed on vCPU N (the server's) take no snapshot:
 * a server under test cannot shift the sequence or open a window.
 *
 * Each snapshot also carries every vCPU's count of executed `syscall`
 * instructions (s0=, s1=, ...): system calls per connection, counted
 * without a tracepoint that would run, and be counted, in the guest.
 *
 * With profile=PATH, the instructions each vCPU executes while profiling
 * is on (between markers 3 and 4) are also counted by translated block,
 * keyed by the block's first guest address, with how often it ran; at
 * each closing marker the table is written to PATH and cleared:
 *
 *     PROFILE <seq of the closing marker>
 *     <address hex> <vCPU> <instructions> <executions>
 *     ...
 *
 * Counting is per translated block (one helper call adds the block's
 * length), split at every marker so that a snapshot holds exactly the
 * instructions before it, the marker included, and none after it.
 *
 * No QEMU header ships in Debian, so the few functions used are declared
 * here from the documented plugin API.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef uint64_t qemu_plugin_id_t;
typedef struct {
    const char *target_name;
    struct {
        int min;
        int cur;
    } version;
    bool system_emulation;
    union {
        struct {
            int smp_vcpus;
            int max_vcpus;
        } system;
    };
} qemu_info_t;
struct qemu_plugin_tb;
struct qemu_plugin_insn;
enum qemu_plugin_cb_flags { QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_CB_R_REGS, QEMU_PLUGIN_CB_RW_REGS };
typedef void (*tb_trans_cb)(qemu_plugin_id_t, struct qemu_plugin_tb *);
typedef void (*udata_cb)(unsigned int vcpu_index, void *userdata);
typedef void (*exit_cb)(qemu_plugin_id_t id, void *userdata);
void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t, tb_trans_cb);
void qemu_plugin_register_vcpu_tb_exec_cb(struct qemu_plugin_tb *, udata_cb, enum qemu_plugin_cb_flags,
                                          void *);
void qemu_plugin_register_vcpu_insn_exec_cb(struct qemu_plugin_insn *, udata_cb, enum qemu_plugin_cb_flags,
                                            void *);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t, exit_cb, void *);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *);
struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *, size_t);
size_t qemu_plugin_insn_size(const struct qemu_plugin_insn *);
size_t qemu_plugin_insn_data(const struct qemu_plugin_insn *, void *dest, size_t len);
uint64_t qemu_plugin_tb_vaddr(const struct qemu_plugin_tb *);

#define EXPORT __attribute__((visibility("default")))
EXPORT int qemu_plugin_version = 4;

#define MAX_VCPUS 64
/* One cache line per vCPU: with icount the vCPUs share one host thread, but
   the layout costs nothing and stays right without icount. */
static struct {
    uint64_t n;
    char pad[56];
} count[MAX_VCPUS];
static struct {
    uint64_t n;
    char pad[56];
} syscalls[MAX_VCPUS];
static int vcpus = 1;
static long sut_vcpu = -1;
static uint64_t seq;
static FILE *out;

/* The profile: one record per translated block's guest address, found by
   open addressing; a block translated again (another vCPU's address
   space, a flushed cache) finds its record by address. */
#define PROFILE_SLOTS (1u << 18)
#define PROFILE_VCPUS 8
struct block {
    uint64_t pc;
    uint64_t insns;
    uint64_t n[PROFILE_VCPUS];
    uint64_t runs[PROFILE_VCPUS];
};
static struct block *profile;
/* Multi-threaded TCG translates on every vCPU's thread at once. */
static pthread_mutex_t profile_lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *profile_out;
static bool profiling;

enum { MARK_PROFILE_BEGIN = 3, MARK_PROFILE_END = 4 };

static void add(unsigned int vcpu, void *n)
{
    count[vcpu].n += (uintptr_t)n;
}

static void add_syscall(unsigned int vcpu, void *unused)
{
    (void)unused;
    syscalls[vcpu].n++;
}

static void add_block(unsigned int vcpu, void *b)
{
    if (!profiling || vcpu >= PROFILE_VCPUS)
        return;
    struct block *blk = b;
    blk->n[vcpu] += blk->insns;
    blk->runs[vcpu]++;
}

static struct block *block_at(uint64_t pc, uint64_t insns)
{
    uint64_t h = pc * 0x9e3779b97f4a7c15ull;
    for (uint32_t i = 0; i < PROFILE_SLOTS; i++) {
        struct block *b = &profile[(h + i) & (PROFILE_SLOTS - 1)];
        if (b->insns == 0) {
            b->pc = pc;
            b->insns = insns;
            return b;
        }
        if (b->pc == pc && b->insns == insns)
            return b;
    }
    return NULL;
}

static void snapshot(const char *tag, unsigned int id, unsigned int vcpu)
{
    fprintf(out, "%s %llu %u vcpu=%u", tag, (unsigned long long)++seq, id, vcpu);
    for (int i = 0; i < vcpus; i++)
        fprintf(out, " c%d=%llu", i, (unsigned long long)count[i].n);
    for (int i = 0; i < vcpus; i++)
        fprintf(out, " s%d=%llu", i, (unsigned long long)syscalls[i].n);
    fputc('\n', out);
    fflush(out);
}

/* Writes the profile taken since the opening marker, and clears it. */
static void dump_profile(void)
{
    fprintf(profile_out, "PROFILE %llu\n", (unsigned long long)seq);
    for (uint32_t i = 0; i < PROFILE_SLOTS; i++) {
        struct block *b = &profile[i];
        for (int v = 0; v < vcpus && v < PROFILE_VCPUS; v++) {
            if (!b->runs[v])
                continue;
            fprintf(profile_out, "%llx %d %llu %llu\n", (unsigned long long)b->pc, v,
                    (unsigned long long)b->n[v], (unsigned long long)b->runs[v]);
            b->n[v] = b->runs[v] = 0;
        }
    }
    fflush(profile_out);
}

static void mark(unsigned int vcpu, void *id)
{
    if ((long)vcpu == sut_vcpu)
        return;
    unsigned int which = (unsigned int)(uintptr_t)id;
    if (which == MARK_PROFILE_BEGIN)
        profiling = profile != NULL;
    snapshot("MARK", which, vcpu);
    if (which == MARK_PROFILE_END && profiling) {
        profiling = false;
        dump_profile();
    }
}

/* Whether `insn` is `syscall` (0F 05). */
static bool is_syscall(const struct qemu_plugin_insn *insn)
{
    uint8_t d[2] = {0};
    if (qemu_plugin_insn_size(insn) != 2)
        return false;
    qemu_plugin_insn_data(insn, d, sizeof d);
    return d[0] == 0x0f && d[1] == 0x05;
}

/* The marker's id, or -1 when `insn` is no marker. */
static long marker_id(const struct qemu_plugin_insn *insn)
{
    uint8_t d[8] = {0};
    if (qemu_plugin_insn_size(insn) != 7)
        return -1;
    qemu_plugin_insn_data(insn, d, sizeof d);
    if (d[0] != 0x0f || d[1] != 0x1f || d[2] != 0x80 || d[5] != 0x54 || d[6] != 0x4d)
        return -1;
    return d[3] | (d[4] << 8);
}

static void translate(qemu_plugin_id_t plugin, struct qemu_plugin_tb *tb)
{
    (void)plugin;
    size_t n = qemu_plugin_tb_n_insns(tb);
    size_t start = 0; /* first instruction of the segment being counted */
    struct qemu_plugin_insn *head = NULL;
    if (profile) {
        pthread_mutex_lock(&profile_lock);
        struct block *b = block_at(qemu_plugin_tb_vaddr(tb), n);
        pthread_mutex_unlock(&profile_lock);
        if (b)
            qemu_plugin_register_vcpu_tb_exec_cb(tb, add_block, QEMU_PLUGIN_CB_NO_REGS, b);
    }
    for (size_t i = 0; i < n; i++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        if (is_syscall(insn))
            qemu_plugin_register_vcpu_insn_exec_cb(insn, add_syscall, QEMU_PLUGIN_CB_NO_REGS, NULL);
        long id = marker_id(insn);
        if (id < 0)
            continue;
        /* The segment up to and including the marker is counted before the
           marker's snapshot: callbacks run in the order registered. */
        void *len = (void *)(uintptr_t)(i + 1 - start);
        if (start == 0)
            qemu_plugin_register_vcpu_tb_exec_cb(tb, add, QEMU_PLUGIN_CB_NO_REGS, len);
        else
            qemu_plugin_register_vcpu_insn_exec_cb(head, add, QEMU_PLUGIN_CB_NO_REGS, len);
        qemu_plugin_register_vcpu_insn_exec_cb(insn, mark, QEMU_PLUGIN_CB_NO_REGS, (void *)(uintptr_t)id);
        start = i + 1;
        head = start < n ? qemu_plugin_tb_get_insn(tb, start) : NULL;
    }
    if (start == 0)
        qemu_plugin_register_vcpu_tb_exec_cb(tb, add, QEMU_PLUGIN_CB_NO_REGS, (void *)(uintptr_t)n);
    else if (head)
        qemu_plugin_register_vcpu_insn_exec_cb(head, add, QEMU_PLUGIN_CB_NO_REGS, (void *)(uintptr_t)(n - start));
}

static void at_exit(qemu_plugin_id_t plugin, void *unused)
{
    (void)plugin;
    (void)unused;
    snapshot("END", 0, 0);
    fclose(out);
    if (profile_out)
        fclose(profile_out);
}

EXPORT int qemu_plugin_install(qemu_plugin_id_t plugin, const qemu_info_t *info, int argc, char **argv)
{
    if (!info->system_emulation)
        return -1;
    vcpus = info->system.max_vcpus;
    if (vcpus > MAX_VCPUS)
        return -1;
    for (int i = 0; i < argc; i++) {
        if (!strncmp(argv[i], "out=", 4)) {
            out = fopen(argv[i] + 4, "w");
            if (!out)
                return -1;
        } else if (!strncmp(argv[i], "profile=", 8)) {
            profile_out = fopen(argv[i] + 8, "w");
            profile = calloc(PROFILE_SLOTS, sizeof *profile);
            if (!profile_out || !profile)
                return -1;
        } else if (!strncmp(argv[i], "sut=", 4)) {
            sut_vcpu = strtol(argv[i] + 4, NULL, 10);
        } else {
            fprintf(stderr, "ratchet meter plugin: unknown argument %s\n", argv[i]);
            return -1;
        }
    }
    if (!out)
        return -1;
    qemu_plugin_register_vcpu_tb_trans_cb(plugin, translate);
    qemu_plugin_register_atexit_cb(plugin, at_exit, NULL);
    return 0;
}
