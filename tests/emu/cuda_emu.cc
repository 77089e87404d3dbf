/*
 * cuda_emu.cc - the emulator's launches, rendezvous and checks (cuda_emu.h).
 *
 * A block's threads are fibers on the launching thread, run in
 * rounds: each runnable fiber in thread order until it returns or waits at a
 * rendezvous (__syncthreads: the block's; a shuffle, an mma or an ldmatrix:
 * its warp's); a rendezvous opens when every thread of its block or warp that has not
 * returned has arrived (a GPU counts exited threads as arrived). A round in
 * which no fiber can run is a deadlock (a rendezvous in divergent code): it
 * is reported with the waiting threads and aborts. Blocks run one after
 * another in reverse order, so a kernel whose results depend on its blocks'
 * order shows it against a reference. Deterministic: one schedule per launch.
 *
 * A fiber switch on x86-64 is a few instructions of our own (the
 * callee-saved registers pushed, the stack pointer swapped): glibc's
 * swapcontext makes a system call each switch (rt_sigprocmask, for a
 * signal mask no fiber changes), and the tests switch tens of millions of
 * times, which made half their time the kernel's. Elsewhere ucontext
 * switches. Under AddressSanitizer each switch is announced
 * (__sanitizer_start_switch_fiber / _finish_), so that it knows which stack
 * is live.
 */
#include "cuda_emu.h"
#include "emu.h"

#include <ucontext.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <vector>

namespace pp_emu {

thread_local ids here;

namespace {

enum { MAX_THREADS = 1024, WARP = 32, STACK_BYTES = 256 * 1024 };

#if defined(__SANITIZE_ADDRESS__)
#define PP_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PP_EMU_ASAN 1
#endif
#endif

} // namespace
} // namespace pp_emu

#ifdef PP_EMU_ASAN
extern "C" void __sanitizer_start_switch_fiber(void **fake_stack_save, const void *bottom,
                                               size_t size);
extern "C" void __sanitizer_finish_switch_fiber(void *fake_stack_save, const void **bottom_old,
                                                size_t *size_old);
#endif

#if defined(__x86_64__)
/* pp_emu_switch(&from_sp, to_sp): pushes the callee-saved registers (System
 * V), stores the stack pointer at *from_sp, takes to_sp as the stack and
 * pops the registers saved there, returning where that context switched
 * away (or, the first time, into the entry context_make placed). */
extern "C" void pp_emu_switch(void **from_sp, void *to_sp);
__asm__(".text\n"
        ".globl pp_emu_switch\n"
        ".type pp_emu_switch, @function\n"
        "pp_emu_switch:\n"
        "  pushq %rbp\n"
        "  pushq %rbx\n"
        "  pushq %r12\n"
        "  pushq %r13\n"
        "  pushq %r14\n"
        "  pushq %r15\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  popq %r15\n"
        "  popq %r14\n"
        "  popq %r13\n"
        "  popq %r12\n"
        "  popq %rbx\n"
        "  popq %rbp\n"
        "  ret\n"
        ".size pp_emu_switch, .-pp_emu_switch\n");
#define PP_EMU_OWN_SWITCH 1
#endif

namespace pp_emu {
namespace {

/* where a switched-away context resumes */
struct context {
#ifdef PP_EMU_OWN_SWITCH
    void *sp = nullptr;
#else
    ucontext_t uc;
#endif
    void *fake = nullptr; /* AddressSanitizer's fake stack, while switched away */
};

/* to set to run entry on stack (entry never returns: it switches away for
 * good); from: where it will switch back to */
void context_make(context &to, std::vector<char> &stack, void (*entry)(), context &from)
{
#ifdef PP_EMU_OWN_SWITCH
    (void)from;
    /* entry's frame as a call would leave it: its address 16-byte aligned
     * below a zero return address, six registers' zeros below that */
    uintptr_t top = ((uintptr_t)stack.data() + stack.size()) & ~(uintptr_t)15;
    void **sp = (void **)(top - 16);
    sp[1] = nullptr;
    sp[0] = (void *)entry;
    for (int r = 0; r < 6; r++) *--sp = nullptr;
    to.sp = sp;
#else
    getcontext(&to.uc);
    to.uc.uc_stack.ss_sp = stack.data();
    to.uc.uc_stack.ss_size = stack.size();
    to.uc.uc_link = &from.uc;
    makecontext(&to.uc, entry, 0);
#endif
}

/* switches from the running context to `to`, whose stack is [bottom, bottom
 * + size); returns when switched back to. `last`: from never resumes. */
void context_switch(context &from, context &to, const void *bottom, size_t size,
                    bool last = false)
{
#ifdef PP_EMU_ASAN
    __sanitizer_start_switch_fiber(last ? nullptr : &from.fake, bottom, size);
#else
    (void)bottom, (void)size, (void)last;
#endif
#ifdef PP_EMU_OWN_SWITCH
    pp_emu_switch(&from.sp, to.sp);
#else
    swapcontext(&from.uc, &to.uc);
#endif
#ifdef PP_EMU_ASAN
    __sanitizer_finish_switch_fiber(from.fake, nullptr, nullptr);
#endif
}

enum fiber_state { RUNNABLE, AT_BLOCK, AT_WARP, RETURNED };

/* a cp.async the thread has issued and no wait has performed yet */
struct pending_copy {
    void *dst;
    const void *src;
    uint64_t group; /* the thread's committed groups before it */
};

struct fiber {
    context ctx;
    std::vector<char> stack;
    fiber_state state;
    uint64_t gen; /* the rendezvous' generation it waits on */
    std::vector<pending_copy> copies; /* in issue order */
    uint64_t committed;               /* cp.async groups committed */
};

/* threads arriving at one rendezvous; generation gen opens when all live have */
struct rendezvous {
    int live = 0, arrived = 0;
    uint64_t gen = 0;
    void open()
    {
        arrived = 0;
        gen++;
    }
    void leave()
    {
        live--;
        if (arrived > 0 && arrived == live) open();
    }
};

enum warp_op : uint8_t { OP_SHUFFLE = 1, OP_MMA = 2, OP_LDMATRIX = 3, OP_MMA_TF32 = 4 };

/* a lane's operands of an mma (mma_bf16.cuh's and mma_tf32.cuh's fragments) */
struct mma_frag {
    uint32_t a[4], b[2];
    float c[4];
};

struct warp_state {
    rendezvous r;
    /* by the collective's parity: one rendezvous a shuffle or mma */
    uint64_t slot[2][WARP];
    mma_frag frag[2][WARP];
    uint16_t row[2][WARP][8]; /* an ldmatrix's rows, by the lane that gave each */
    uint8_t op[2][WARP];      /* which collective each lane entered */
    uint8_t form[2][WARP];    /* an ldmatrix's: 2 num + trans */
    uint64_t count[WARP]; /* shuffles each lane has entered */
    bool present[WARP];   /* in the block and not returned */
};

struct block_run {
    context sched;
    /* the launching thread's stack, as AddressSanitizer knows it (learned
     * at a fiber's first start) */
    const void *sched_bottom = nullptr;
    size_t sched_size = 0;
    std::vector<fiber> fibers;
    int n = 0, cur = 0;
    const std::function<void()> *body = nullptr;
    rendezvous all;
    warp_state warps[MAX_THREADS / WARP];
};

block_run &the_run()
{
    static block_run b;
    return b;
}

long fault_count;
cudaError_t last = cudaSuccess;

void report_where()
{
    std::fprintf(stderr, "cuda_emu: block (%u,%u,%u) thread (%u,%u,%u): ", here.block.x,
                 here.block.y, here.block.z, here.thread.x, here.thread.y, here.thread.z);
}

void fault(const char *fmt, unsigned a, unsigned b)
{
    if (fault_count++ < 20) {
        report_where();
        std::fprintf(stderr, fmt, a, b);
        std::fputc('\n', stderr);
    }
}

uint3 thread_of(int i, dim3 d)
{
    return make_uint3(i % d.x, i / d.x % d.y, i / (d.x * d.y));
}

/* a fiber's entry: the thread's body, then back to the scheduler for good */
void fiber_main()
{
    block_run &b = the_run();
#ifdef PP_EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &b.sched_bottom, &b.sched_size);
#endif
    const int i = b.cur;
    (*b.body)();
    if (!b.fibers[i].copies.empty())
        fault("cp.async: %u copies still pending when the thread returned, the oldest in its "
              "group %u (a wait_group missing?)",
              (unsigned)b.fibers[i].copies.size(), (unsigned)b.fibers[i].copies[0].group);
    b.fibers[i].copies.clear();
    b.fibers[i].state = RETURNED;
    b.all.leave();
    warp_state &w = b.warps[i / WARP];
    w.present[i % WARP] = false;
    w.r.leave();
    context_switch(b.fibers[i].ctx, b.sched, b.sched_bottom, b.sched_size, true);
    std::abort(); /* never resumed: the next block starts it anew */
}

/* the calling fiber waits at r (of kind st) until it opens */
void arrive(rendezvous &r, fiber_state st)
{
    block_run &b = the_run();
    fiber &f = b.fibers[b.cur];
    const uint64_t g = r.gen;
    if (++r.arrived == r.live) {
        r.open();
        return;
    }
    f.state = st;
    f.gen = g;
    context_switch(f.ctx, b.sched, b.sched_bottom, b.sched_size);
}

bool waiting(const block_run &b, const fiber &f, int i)
{
    if (f.state == AT_BLOCK) return b.all.gen == f.gen;
    if (f.state == AT_WARP) return b.warps[i / WARP].r.gen == f.gen;
    return false;
}

/* f set to run fiber_main on its own stack */
void start_fiber(block_run &b, fiber &f)
{
    context_make(f.ctx, f.stack, fiber_main, b.sched);
    f.state = RUNNABLE;
    f.copies.clear();
    f.committed = 0;
}

void run_block(block_run &b, const ids &id)
{
    b.all = rendezvous();
    b.all.live = b.n;
    for (int w = 0; w * WARP < b.n; w++) {
        warp_state &ws = b.warps[w];
        const int lanes = b.n - w * WARP < WARP ? b.n - w * WARP : WARP;
        ws.r = rendezvous();
        ws.r.live = lanes;
        for (int l = 0; l < WARP; l++) {
            ws.present[l] = l < lanes;
            ws.count[l] = 0;
        }
    }
    for (int i = 0; i < b.n; i++) start_fiber(b, b.fibers[i]);
    for (;;) {
        bool ran = false, live = false;
        for (int i = 0; i < b.n; i++) {
            fiber &f = b.fibers[i];
            if (f.state == RETURNED) continue;
            live = true;
            if (waiting(b, f, i)) continue;
            f.state = RUNNABLE;
            here = id;
            here.thread = thread_of(i, id.block_dim);
            b.cur = i;
            context_switch(b.sched, f.ctx, f.stack.data(), f.stack.size());
            ran = true;
        }
        if (!live) return;
        if (!ran) {
            for (int i = 0, shown = 0; i < b.n && shown < 8; i++) {
                if (b.fibers[i].state == RETURNED) continue;
                here.thread = thread_of(i, id.block_dim);
                report_where();
                std::fprintf(stderr, "waits at %s, which the block's other threads never reach\n",
                             b.fibers[i].state == AT_BLOCK ? "__syncthreads" : "a warp shuffle");
                shown++;
            }
            std::fprintf(stderr, "cuda_emu: deadlock (a rendezvous in divergent code)\n");
            std::abort();
        }
    }
}

bool dims_ok(const config &c)
{
    const dim3 b = c.block, g = c.grid;
    const uint64_t threads = (uint64_t)b.x * b.y * b.z;
    return b.x >= 1 && b.y >= 1 && b.z >= 1 && b.x <= 1024 && b.y <= 1024 && b.z <= 64 &&
           threads <= MAX_THREADS && g.x >= 1 && g.y >= 1 && g.z >= 1 && g.x <= 2147483647u &&
           g.y <= 65535 && g.z <= 65535 && c.smem <= 48 * 1024;
}

} // namespace

void run(const config &c, const std::function<void()> &body)
{
    if (!dims_ok(c)) {
        std::fprintf(stderr,
                     "cuda_emu: launch refused: grid (%u,%u,%u), block (%u,%u,%u), %zu bytes of "
                     "dynamic shared memory\n",
                     c.grid.x, c.grid.y, c.grid.z, c.block.x, c.block.y, c.block.z, c.smem);
        last = cudaErrorInvalidConfiguration;
        return;
    }
    block_run &b = the_run();
    b.n = (int)(c.block.x * c.block.y * c.block.z);
    while ((int)b.fibers.size() < b.n) {
        b.fibers.emplace_back();
        b.fibers.back().stack.resize(STACK_BYTES);
    }
    b.body = &body;
    const uint64_t blocks = (uint64_t)c.grid.x * c.grid.y * c.grid.z;
    for (uint64_t k = blocks; k-- > 0;) {
        ids id{};
        id.block = make_uint3((unsigned)(k % c.grid.x), (unsigned)(k / c.grid.x % c.grid.y),
                              (unsigned)(k / ((uint64_t)c.grid.x * c.grid.y)));
        id.block_dim = c.block;
        id.grid_dim = c.grid;
        run_block(b, id);
    }
    b.body = nullptr;
}

cudaError_t last_error()
{
    const cudaError_t e = last;
    last = cudaSuccess;
    return e;
}

void sync_block()
{
    arrive(the_run().all, AT_BLOCK);
}

namespace {

/* One shuffle: every lane of mask offers bits and receives those of lane
 * src (its own where src is itself). */
uint64_t shuffle_from(unsigned mask, uint64_t bits, int src)
{
    block_run &b = the_run();
    const int t = b.cur, lane = t % WARP;
    warp_state &w = b.warps[t / WARP];
    for (int k = 0; k < WARP; k++)
        if (mask >> k & 1u && !w.present[k])
            fault("shuffle mask 0x%08x names lane %u, which is not in the block or has returned",
                  mask, (unsigned)k);
    if (!(mask >> lane & 1u))
        fault("shuffle mask 0x%08x leaves out its caller, lane %u", mask, (unsigned)lane);
    const uint64_t k = w.count[lane]++;
    w.slot[k & 1][lane] = bits;
    w.op[k & 1][lane] = OP_SHUFFLE;
    arrive(w.r, AT_WARP);
    /* lane src's value of this shuffle, which it offered before the rendezvous opened */
    if (src >= 0 && src < WARP && w.count[src] > k && mask >> src & 1u) {
        if (w.op[k & 1][src] != OP_SHUFFLE)
            fault("shuffle reads lane %u, which is at an mma (mask 0x%08x)", (unsigned)src, mask);
        return w.slot[k & 1][src];
    }
    if (src != lane)
        fault("shuffle reads lane %u, outside mask 0x%08x or not in this shuffle", (unsigned)src,
              mask);
    return bits;
}

int lane_now()
{
    return the_run().cur % WARP;
}

} // namespace

uint64_t shuffle_down(unsigned mask, uint64_t bits, unsigned delta, int width)
{
    const int lane = lane_now();
    const int base = lane - lane % width, up = lane + (int)delta;
    return shuffle_from(mask, bits, up < base + width ? up : lane);
}

uint64_t shuffle_xor(unsigned mask, uint64_t bits, unsigned lane_mask, int width)
{
    const int lane = lane_now();
    const int base = lane - lane % width, other = lane ^ (int)lane_mask;
    /* a lane of a later segment is out of reach: the caller's own value */
    return shuffle_from(mask, bits, other < base + width ? other : lane);
}

namespace {

float bf16_at(uint32_t word, int high)
{
    const uint32_t bits = high ? word & 0xffff0000u : word << 16;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
}

/* whether lane l of w is at its collective k, of kind op (and form, for ldmatrix) */
bool at_same(const warp_state &w, int l, uint64_t k, uint8_t op, uint8_t form)
{
    return w.count[l] > k && w.op[k & 1][l] == op &&
           (op != OP_LDMATRIX || w.form[k & 1][l] == form);
}

/* after collective k (name): each lane of w not at it is a fault, reported
 * once, by the lowest lane there (lane: the caller's) */
void report_absent(const warp_state &w, int lane, uint64_t k, uint8_t op, uint8_t form,
                   const char *name)
{
    for (int l = 0; l < lane; l++)
        if (at_same(w, l, k, op, form)) return;
    char there[128], gone[128];
    std::snprintf(there, sizeof there,
                  "%s: lane %%u of the warp is at another collective (all %%u lanes must be at it)",
                  name);
    std::snprintf(gone, sizeof gone,
                  "%s: lane %%u of the warp has returned or is not in the block (all %%u lanes "
                  "must be at it)",
                  name);
    for (int l = 0; l < WARP; l++)
        if (!at_same(w, l, k, op, form)) fault(w.present[l] ? there : gone, (unsigned)l, WARP);
}

/* A[row][col] of the gathered fragments: the inverse of mma_bf16.cuh's
 * table (lane 4 (row % 8) + (col % 8) / 2, register (row >= 8) + 2 (col >= 8),
 * half col % 2) */
float mma_a(const mma_frag *f, int row, int col)
{
    const int lane = 4 * (row % 8) + col % 8 / 2, reg = (row >= 8) + 2 * (col >= 8);
    return bf16_at(f[lane].a[reg], col % 2);
}

/* B[k][n]: lane 4 n + (k % 8) / 2, register k >= 8, half k % 2 */
float mma_b(const mma_frag *f, int k, int n)
{
    return bf16_at(f[4 * n + k % 8 / 2].b[k >= 8], k % 2);
}

/* a TF32 register's value: its upper 19 bits, as the tensor core reads them */
float tf32_at(uint32_t r)
{
    const uint32_t u = r & 0xffffe000u;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

/* A[row][col] of m16n8k8's gathered TF32 fragments (mma_tf32.cuh's table:
 * lane 4 (row % 8) + col % 4, register (row >= 8) + 2 (col >= 4)) */
float mma_a_tf32(const mma_frag *f, int row, int col)
{
    return tf32_at(f[4 * (row % 8) + col % 4].a[(row >= 8) + 2 * (col >= 4)]);
}

/* B[k][n]: lane 4 n + k % 4, register k >= 4 */
float mma_b_tf32(const mma_frag *f, int k, int n)
{
    return tf32_at(f[4 * n + k % 4].b[k >= 4]);
}

/* The warp's rendezvous at an mma of kind op (K terms a sum, A and B read by
 * at and bt): this lane's D fragment */
void mma_collective(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4],
                    warp_op op, int K, float (*at)(const mma_frag *, int, int),
                    float (*bt)(const mma_frag *, int, int))
{
    block_run &br = the_run();
    const int t = br.cur, lane = t % WARP;
    warp_state &w = br.warps[t / WARP];
    const uint64_t k = w.count[lane]++;
    mma_frag &mine = w.frag[k & 1][lane];
    std::memcpy(mine.a, a, sizeof mine.a);
    std::memcpy(mine.b, b, sizeof mine.b);
    std::memcpy(mine.c, c, sizeof mine.c);
    w.op[k & 1][lane] = op;
    arrive(w.r, AT_WARP);
    /* every lane of the warp at this mma; the others' fragments read as zero
     * (reported once, by the lowest lane that is there) */
    mma_frag all[WARP];
    for (int l = 0; l < WARP; l++)
        all[l] = at_same(w, l, k, op, 0) ? w.frag[k & 1][l] : mma_frag{};
    report_absent(w, lane, k, op, 0, op == OP_MMA ? "mma.sync (bf16)" : "mma.sync (tf32)");
    const int g = lane / 4, q = lane % 4;
    float out[4];
    for (int i = 0; i < 4; i++) {
        const int row = g + 8 * (i / 2), col = 2 * q + i % 2;
        float acc = mine.c[i];
        for (int kk = 0; kk < K; kk++) acc += at(all, row, kk) * bt(all, kk, col);
        out[i] = acc;
    }
    std::memcpy(d, out, sizeof out);
}

} // namespace

void mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4])
{
    mma_collective(d, a, b, c, OP_MMA, 16, mma_a, mma_b);
}

void mma_tf32_1688(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4])
{
    mma_collective(d, a, b, c, OP_MMA_TF32, 8, mma_a_tf32, mma_b_tf32);
}

void ldmatrix(uint32_t *r, int num, bool trans, const void *row)
{
    block_run &br = the_run();
    const int t = br.cur, lane = t % WARP;
    warp_state &w = br.warps[t / WARP];
    const uint64_t k = w.count[lane]++;
    const uint8_t form = (uint8_t)(2 * num + trans);
    uint16_t *mine = w.row[k & 1][lane];
    std::memset(mine, 0, sizeof w.row[0][0]);
    if (lane < 8 * num) {
        const unsigned off = (unsigned)((uintptr_t)row & 15u);
        if (off)
            fault("ldmatrix: lane %u's row address is %u bytes past a 16-byte boundary", lane,
                  off);
        else
            std::memcpy(mine, row, sizeof w.row[0][0]);
    }
    w.op[k & 1][lane] = OP_LDMATRIX;
    w.form[k & 1][lane] = form;
    arrive(w.r, AT_WARP);
    /* rows of lanes absent read as zero (reported once, by the lowest lane there) */
    uint16_t rows[WARP][8];
    for (int l = 0; l < WARP; l++) {
        if (at_same(w, l, k, OP_LDMATRIX, form))
            std::memcpy(rows[l], w.row[k & 1][l], sizeof rows[l]);
        else
            std::memset(rows[l], 0, sizeof rows[l]);
    }
    report_absent(w, lane, k, OP_LDMATRIX, form, "ldmatrix");
    /* matrix j's row i came from lane 8 j + i */
    const int g = lane / 4, q = lane % 4;
    for (int j = 0; j < num; j++) {
        if (trans)
            r[j] = (uint32_t)rows[8 * j + 2 * q][g] | (uint32_t)rows[8 * j + 2 * q + 1][g] << 16;
        else
            r[j] = (uint32_t)rows[8 * j + g][2 * q] | (uint32_t)rows[8 * j + g][2 * q + 1] << 16;
    }
}

void cp_async_16(void *dst, const void *src)
{
    fiber &f = the_run().fibers[the_run().cur];
    const unsigned od = (unsigned)((uintptr_t)dst & 15u), os = (unsigned)((uintptr_t)src & 15u);
    if (od || os) {
        fault("cp.async: destination %u and source %u bytes past a 16-byte boundary (nothing "
              "copied)",
              od, os);
        return;
    }
    f.copies.push_back(pending_copy{dst, src, f.committed});
}

void cp_async_commit()
{
    the_run().fibers[the_run().cur].committed++;
}

void cp_async_wait(int n)
{
    fiber &f = the_run().fibers[the_run().cur];
    /* groups numbered 0.. in commit order; all but the n newest committed */
    const uint64_t done = f.committed > (uint64_t)n ? f.committed - (uint64_t)n : 0;
    size_t kept = 0;
    for (size_t i = 0; i < f.copies.size(); i++) {
        const pending_copy c = f.copies[i];
        if (c.group < done)
            std::memcpy(c.dst, c.src, 16);
        else
            f.copies[kept++] = c;
    }
    f.copies.resize(kept);
}

long faults()
{
    return fault_count;
}

uint64_t now_ns()
{
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

} // namespace pp_emu

extern "C" {

long pp_emu_faults(void)
{
    return pp_emu::faults();
}

/* kernels.cu's switch reader (the kernel files call it, renamed), for tests
 * without kernels.cu (weak: kernels.cu's own, when linked, is the one): the
 * variable is read at every call, so that one test runs both settings */
__attribute__((weak)) bool pp_emu_cuda_env_on(const char *name, int *cache)
{
    const char *e = std::getenv(name);
    *cache = e && *e && std::strcmp(e, "0") != 0;
    return *cache == 1;
}

} // extern "C"
