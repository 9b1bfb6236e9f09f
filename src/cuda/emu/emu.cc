// The emulation's runtime (see emu.h): streams as worker threads with task
// queues, a block's threads as fibers, barriers in the scheduler.
#include "cuda/emu/emu.h"
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>
#include <execinfo.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define MT_EMU_ASAN 1
#endif

namespace mt_emu {
namespace {

using clock_type = std::chrono::steady_clock;

// ---- fiber contexts. On x86-64 a switch saves the callee-saved registers,
// MXCSR and the x87 control word on the current stack and swaps stack
// pointers (a few ns; swapcontext's signal-mask system calls made a switch
// about 1 us, and a block barrier costs one switch per thread); elsewhere
// ucontext.
#if defined(__x86_64__)
extern "C" void mt_emu_switch(void **save_sp, void *to_sp);
asm(R"(
    .text
    .p2align 4
    .type mt_emu_switch, @function
mt_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size mt_emu_switch, .-mt_emu_switch
)");
struct fiber_ctx {
    void *sp = nullptr;
};
void ctx_switch(fiber_ctx *save, fiber_ctx *to) { mt_emu_switch(&save->sp, to->sp); }
// A new context that starts in entry() on [stack, stack + size): the frame
// mt_emu_switch pops, returning into entry with the stack aligned as a call's.
void ctx_make(fiber_ctx *c, char *stack, size_t size, void (*entry)()) {
    uintptr_t top = ((uintptr_t)stack + size) & ~(uintptr_t)15;
    uint64_t *sp = (uint64_t *)top;
    *--sp = 0;                  // entry's return address: it never returns
    *--sp = (uint64_t)entry;    // popped by ret
    for (int i = 0; i < 6; i++) *--sp = 0; // rbp rbx r12 r13 r14 r15
    *--sp = 0x037F00001F80ull;  // MXCSR default (low), x87 control word default (high)
    c->sp = sp;
}
#else
struct fiber_ctx {
    ucontext_t uc;
};
void ctx_switch(fiber_ctx *save, fiber_ctx *to) { swapcontext(&save->uc, &to->uc); }
void ctx_make(fiber_ctx *c, char *stack, size_t size, void (*entry)()) {
    getcontext(&c->uc);
    c->uc.uc_stack.ss_sp = stack;
    c->uc.uc_stack.ss_size = size;
    c->uc.uc_link = nullptr;
    makecontext(&c->uc, entry, 0);
}
#endif

// ---- errors: the last error per host thread, as the runtime keeps it
thread_local cudaError_t last_error = cudaSuccess;
cudaError_t fail(cudaError_t e) {
    if (e != cudaSuccess) last_error = e;
    return e;
}

// ---- device memory: host memory in an address-ordered table
std::mutex mem_mu;
std::map<uintptr_t, size_t> allocations; // start -> bytes
size_t allocated_bytes = 0;
// the emulated device's memory: MT_EMU_GPU_BYTES (default 64 GiB), what cudaMemGetInfo reports and
// cudaMalloc refuses beyond (so an allocation larger than a GPU fails here as it would there)
static size_t emu_total() {
    static const size_t total = [] {
        const char *v = getenv("MT_EMU_GPU_BYTES");
        unsigned long long b = v && *v ? strtoull(v, nullptr, 10) : 0;
        return b ? (size_t)b : (size_t)64 << 30;
    }();
    return total;
}
#define emu_total_bytes emu_total()

// ---- MT_EMU_GUARD_HOST=1: device memory the host cannot touch. A GPU's device memory (cudaMalloc) is
// not host memory: a host read or write of it crashes there, or, under managed memory, pages silently.
// In this mode device allocations come from one reserved region that is inaccessible (PROT_NONE) except
// while a stream task (kernel, copy, memset) runs, and every task runs on the calling thread at once
// (a legal schedule), so any host access outside the CUDA calls stops the run with a backtrace. Not in
// the ASan build (its own handling of faults).
struct guard_region {
    char *base = nullptr;
    size_t size = 0, used = 0;
    int open_depth = 0;
};
guard_region *guard() {
    static guard_region *g = []() -> guard_region * {
#ifdef MT_EMU_ASAN
        return nullptr;
#else
        const char *v = getenv("MT_EMU_GUARD_HOST");
        if (!v || !*v || !strcmp(v, "0")) return nullptr;
        guard_region *r = new guard_region();
        r->size = (size_t)256 << 30; // address space only (freed ranges are not reused)
        void *p = mmap(nullptr, r->size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) {
            fprintf(stderr, "mt_emu: MT_EMU_GUARD_HOST: cannot reserve %zu bytes of address space\n", r->size);
            exit(2);
        }
        r->base = (char *)p;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_flags = SA_SIGINFO;
        sa.sa_sigaction = [](int, siginfo_t *si, void *) {
            guard_region *g = guard();
            char *a = (char *)si->si_addr;
            if (g && a >= g->base && a < g->base + g->size) {
                static const char msg[] = "mt_emu: the host read or wrote device memory outside a CUDA copy "
                                          "(MT_EMU_GUARD_HOST); the host side of this backtrace must stage it "
                                          "through cudaMemcpy:\n";
                if (write(2, msg, sizeof msg - 1) < 0) {}
                void *frames[64];
                backtrace_symbols_fd(frames, backtrace(frames, 64), 2);
                _exit(97);
            }
            signal(SIGSEGV, SIG_DFL); // another fault: the default action when the access repeats
        };
        sigaction(SIGSEGV, &sa, nullptr);
        return r;
#endif
    }();
    return g;
}
size_t page_up(size_t n) {
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    return (n + pg - 1) / pg * pg;
}
// the region readable and writable (nested), then closed again
void guard_open(guard_region *g) {
    if (g->open_depth++ == 0 && g->used) mprotect(g->base, page_up(g->used), PROT_READ | PROT_WRITE);
}
void guard_close(guard_region *g) {
    if (--g->open_depth == 0 && g->used) mprotect(g->base, page_up(g->used), PROT_NONE);
}

// ---- streams
struct stream;
struct task {
    std::function<void()> fn;
    std::vector<std::pair<stream *, uint64_t>> after; // run only once these streams completed that many tasks
};

struct stream {
    bool legacy = false, blocking = true;
    std::mutex mu;
    std::condition_variable cv;
    std::deque<task> queue;
    uint64_t enqueued = 0, completed = 0;
    bool stop = false;
    std::thread worker;

    void run() {
        for (;;) {
            task t;
            {
                std::unique_lock<std::mutex> lk(mu);
                cv.wait(lk, [&] { return stop || !queue.empty(); });
                if (queue.empty()) return;
                t = std::move(queue.front());
            }
            for (auto &w : t.after) w.first->wait_for(w.second);
            t.fn();
            std::lock_guard<std::mutex> lk(mu);
            queue.pop_front();
            completed++;
            cv.notify_all();
        }
    }
    uint64_t push(task t) {
        std::lock_guard<std::mutex> lk(mu);
        queue.push_back(std::move(t));
        cv.notify_all();
        return ++enqueued;
    }
    void wait_for(uint64_t n) {
        std::unique_lock<std::mutex> lk(mu);
        cv.wait(lk, [&] { return completed >= n; });
    }
    uint64_t tail() {
        std::lock_guard<std::mutex> lk(mu);
        return enqueued;
    }
    bool done_up_to(uint64_t n) {
        std::lock_guard<std::mutex> lk(mu);
        return completed >= n;
    }
    void start() { worker = std::thread([this] { run(); }); }
    void finish() {
        {
            std::lock_guard<std::mutex> lk(mu);
            stop = true;
            cv.notify_all();
        }
        worker.join();
    }
};

struct registry {
    std::mutex mu;
    stream legacy_stream;
    std::vector<stream *> streams; // created ones, alive
    registry() {
        legacy_stream.legacy = true;
        legacy_stream.start();
    }
    ~registry() {
        for (stream *s : streams) {
            s->finish();
            delete s;
        }
        legacy_stream.finish();
    }
};
registry &reg() {
    static registry r;
    return r;
}

stream *stream_of(cudaStream_t s) { return s ? reinterpret_cast<stream *>(s) : &reg().legacy_stream; }

// The legacy default stream's implicit synchronisation: its work waits for
// all blocking streams' earlier work, and theirs waits for its earlier work.
cudaError_t enqueue(cudaStream_t hs, std::function<void()> fn) {
    stream *s = stream_of(hs);
    if (guard_region *g = guard()) { // every task at once, on this thread, the region open meanwhile
        guard_open(g);
        fn();
        guard_close(g);
        std::lock_guard<std::mutex> lk(s->mu);
        s->enqueued++, s->completed++;
        s->cv.notify_all();
        return cudaSuccess;
    }
    task t;
    t.fn = std::move(fn);
    registry &r = reg();
    {
        std::lock_guard<std::mutex> lk(r.mu);
        if (s->legacy) {
            for (stream *o : r.streams)
                if (o->blocking) t.after.push_back({o, o->tail()});
        } else if (s->blocking) {
            t.after.push_back({&r.legacy_stream, r.legacy_stream.tail()});
        }
    }
    s->push(std::move(t));
    return cudaSuccess;
}

void sync_all() {
    registry &r = reg();
    std::vector<std::pair<stream *, uint64_t>> marks;
    {
        std::lock_guard<std::mutex> lk(r.mu);
        marks.push_back({&r.legacy_stream, r.legacy_stream.tail()});
        for (stream *o : r.streams) marks.push_back({o, o->tail()});
    }
    for (auto &m : marks) m.first->wait_for(m.second);
}

// ---- events: a position in a stream's queue plus the time it was reached
struct event {
    stream *s = nullptr;
    uint64_t seq = 0;
    std::shared_ptr<clock_type::time_point> when = std::make_shared<clock_type::time_point>();
};

// ---- fibers and the block scheduler
enum fiber_state { RUNNABLE, AT_BLOCK_BARRIER, AT_WARP_BARRIER, DONE };
enum schedule_kind { SCHED_FORWARD, SCHED_REVERSE };

const size_t fiber_stack_bytes = 256 * 1024;

struct warp_state {
    int arrived = 0;
    unsigned gen = 0;
    uint64_t slots[2][32];
    uint64_t blobs[2][32][4]; // warp_gather's deposits
    unsigned stamp[2][32]; // the generation each slot was written in
};

// a cp.async copy issued and not yet waited for (async_copy): performed at the async_wait that covers it
struct async_op {
    void *dst;
    const void *src;
    size_t bytes;
};

struct fiber {
    fiber_ctx ctx;
    std::vector<async_op> async_ops;   // issued, in order
    std::vector<size_t> async_groups; // committed groups: the end of each in async_ops
    fiber_state state = RUNNABLE;
    uint3 tid;
    int linear = 0;
    unsigned warp_gen = 0; // generation of the warp barrier it waits at
    const char *bar_file = nullptr; // the __syncthreads it waits at
    int bar_line = 0;
};

struct block_runner {
    // per worker thread: reused stacks, the running block
    std::vector<char *> stacks;
    std::vector<fiber> fibers;
    std::vector<warp_state> warps;
    std::vector<char> shared_mem;
    fiber_ctx main_ctx;
    const std::function<void()> *body = nullptr;
    uint3 bid;
    dim3 bdim, gdim;
    int current = -1, nthreads = 0, ndone = 0, at_block = 0;
    schedule_kind sched = SCHED_FORWARD;
#ifdef MT_EMU_ASAN
    void *main_fake_stack = nullptr;
    const void *main_stack_bottom = nullptr;
    size_t main_stack_size = 0;
#endif
    ~block_runner() {
        for (char *s : stacks) free(s);
    }
};
thread_local block_runner *runner = nullptr;

schedule_kind schedule_from_env() {
    const char *e = getenv("MT_EMU_SCHEDULE");
    if (!e || !*e || !strcmp(e, "forward")) return SCHED_FORWARD;
    if (!strcmp(e, "reverse")) return SCHED_REVERSE;
    fprintf(stderr, "mt_emu: MT_EMU_SCHEDULE=%s is not a schedule; use forward or reverse\n", e);
    exit(2);
}

[[noreturn]] void die_in_kernel(const char *what) {
    block_runner *r = runner;
    fprintf(stderr, "mt_emu: %s (block %u,%u,%u thread %u,%u,%u)\n", what, r->bid.x, r->bid.y, r->bid.z,
            r->fibers[r->current].tid.x, r->fibers[r->current].tid.y, r->fibers[r->current].tid.z);
    abort();
}

void switch_to_main() {
    block_runner *r = runner;
    fiber &f = r->fibers[r->current];
#ifdef MT_EMU_ASAN
    void *fake = nullptr;
    __sanitizer_start_switch_fiber(f.state == DONE ? nullptr : &fake, r->main_stack_bottom, r->main_stack_size);
    ctx_switch(&f.ctx, &r->main_ctx);
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
    ctx_switch(&f.ctx, &r->main_ctx);
#endif
}

void fiber_entry() {
#ifdef MT_EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &runner->main_stack_bottom, &runner->main_stack_size);
#endif
    (*runner->body)();
    runner->fibers[runner->current].state = DONE;
    switch_to_main();
    abort(); // a finished fiber is never resumed
}

void resume(block_runner *r, int k) {
    r->current = k;
#ifdef MT_EMU_ASAN
    __sanitizer_start_switch_fiber(&r->main_fake_stack, r->stacks[k], fiber_stack_bytes);
    ctx_switch(&r->main_ctx, &r->fibers[k].ctx);
    __sanitizer_finish_switch_fiber(r->main_fake_stack, nullptr, nullptr);
#else
    ctx_switch(&r->main_ctx, &r->fibers[k].ctx);
#endif
    r->current = -1;
}

// A warp's barrier is complete when every lane that has not returned arrived.
void maybe_release_warp(block_runner *r, int w) {
    int lo = w * 32, hi = std::min(lo + 32, r->nthreads), live = 0, waiting = 0;
    for (int k = lo; k < hi; k++) {
        if (r->fibers[k].state != DONE) live++;
        if (r->fibers[k].state == AT_WARP_BARRIER) waiting++;
    }
    if (waiting == 0 || waiting < live) return;
    for (int k = lo; k < hi; k++)
        if (r->fibers[k].state == AT_WARP_BARRIER) r->fibers[k].state = RUNNABLE;
    r->warps[w].arrived = 0;
    r->warps[w].gen++;
}

void maybe_release_block(block_runner *r) {
    if (r->at_block == 0 || r->at_block < r->nthreads - r->ndone) return;
    const fiber *first = nullptr;
    for (auto &f : r->fibers) {
        if (f.state != AT_BLOCK_BARRIER) continue;
        if (!first) first = &f;
        else if (f.bar_line != first->bar_line || strcmp(f.bar_file, first->bar_file)) {
            fprintf(stderr,
                    "mt_emu: divergent __syncthreads in block %u,%u,%u: thread %d waits at %s:%d, thread %d at "
                    "%s:%d\n",
                    r->bid.x, r->bid.y, r->bid.z, first->linear, first->bar_file, first->bar_line, f.linear,
                    f.bar_file, f.bar_line);
            abort();
        }
    }
    for (auto &f : r->fibers)
        if (f.state == AT_BLOCK_BARRIER) f.state = RUNNABLE;
    r->at_block = 0;
}

void run_block(block_runner *r) {
    int n = r->nthreads;
    if ((int)r->stacks.size() < n) {
        while ((int)r->stacks.size() < n) {
            char *st = (char *)malloc(fiber_stack_bytes);
            if (!st) {
                fprintf(stderr, "mt_emu: out of memory for fiber stacks\n");
                abort();
            }
            r->stacks.push_back(st);
        }
    }
    r->fibers.assign(n, fiber());
    r->warps.assign((n + 31) / 32, warp_state());
    r->ndone = 0;
    r->at_block = 0;
    for (int k = 0; k < n; k++) {
        fiber &f = r->fibers[k];
        f.linear = k;
        f.tid = {(unsigned)(k % r->bdim.x), (unsigned)(k / r->bdim.x % r->bdim.y),
                 (unsigned)(k / (r->bdim.x * r->bdim.y))};
        ctx_make(&f.ctx, r->stacks[k], fiber_stack_bytes, fiber_entry);
    }
    while (r->ndone < n) {
        bool ran = false;
        for (int i = 0; i < n; i++) {
            int k = r->sched == SCHED_FORWARD ? i : n - 1 - i;
            fiber &f = r->fibers[k];
            if (f.state != RUNNABLE) continue;
            ran = true;
            resume(r, k);
            if (f.state == DONE) {
                if (!f.async_ops.empty()) { // (checked here: fiber_entry's frame stays as small as it was)
                    fprintf(stderr, "mt_emu: a thread returned with cp.async copies it never waited for (block %u,%u,%u "
                            "thread %u,%u,%u)\n", r->bid.x, r->bid.y, r->bid.z, f.tid.x, f.tid.y, f.tid.z);
                    abort();
                }
                r->ndone++;
                maybe_release_warp(r, k / 32);
                maybe_release_block(r);
            } else if (f.state == AT_BLOCK_BARRIER) {
                maybe_release_block(r);
            } else if (f.state == AT_WARP_BARRIER) {
                maybe_release_warp(r, k / 32);
            }
        }
        if (!ran && r->ndone < n) {
            fprintf(stderr,
                    "mt_emu: deadlock in block %u,%u,%u: threads wait at different barriers "
                    "(a __syncthreads or warp shuffle not reached by every thread)\n",
                    r->bid.x, r->bid.y, r->bid.z);
            abort();
        }
    }
}

void run_grid(dim3 grid, dim3 block, size_t shmem, const std::function<void()> &body, schedule_kind sched) {
    thread_local std::unique_ptr<block_runner> mine;
    if (!mine) mine.reset(new block_runner());
    block_runner *r = mine.get();
    runner = r;
    r->body = &body;
    r->bdim = block;
    r->gdim = grid;
    r->nthreads = (int)(block.x * block.y * block.z);
    r->sched = sched;
    r->shared_mem.assign(shmem ? shmem : 1, (char)0xFF);
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                r->bid = {x, y, z};
                run_block(r);
            }
    runner = nullptr;
}

cudaError_t copy_check(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
    if (bytes == 0) return cudaSuccess;
    if (!dst || !src) return cudaErrorInvalidValue;
    bool dd = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    bool sd = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if ((int)kind < 0 || (int)kind > 4) return cudaErrorInvalidMemcpyDirection;
    if (dd && !is_device_range(dst, bytes)) return cudaErrorInvalidValue;
    if (sd && !is_device_range(src, bytes)) return cudaErrorInvalidValue;
    return cudaSuccess;
}

} // namespace

bool is_device_range(const void *p, size_t bytes) {
    std::lock_guard<std::mutex> lk(mem_mu);
    uintptr_t a = (uintptr_t)p;
    auto it = allocations.upper_bound(a);
    if (it == allocations.begin()) return false;
    --it;
    return a >= it->first && a + bytes <= it->first + it->second;
}

const uint3 &thread_idx() { return runner->fibers[runner->current].tid; }
const uint3 &block_idx() { return runner->bid; }
const dim3 &block_dim() { return runner->bdim; }
const dim3 &grid_dim() { return runner->gdim; }
void *dynamic_shared() { return runner->shared_mem.data(); }
int lane_id() { return runner->fibers[runner->current].linear % 32; }

void sync_block(const char *file, int line) {
    block_runner *r = runner;
    r->fibers[r->current].state = AT_BLOCK_BARRIER;
    r->fibers[r->current].bar_file = file;
    r->fibers[r->current].bar_line = line;
    r->at_block++;
    switch_to_main();
}

void sync_warp() {
    block_runner *r = runner;
    fiber &f = r->fibers[r->current];
    f.state = AT_WARP_BARRIER;
    f.warp_gen = r->warps[f.linear / 32].gen;
    switch_to_main();
}

uint64_t warp_exchange(uint64_t v, int src) {
    block_runner *r = runner;
    int me = r->current, w = me / 32;
    // two slot sets by barrier generation: a lane that runs ahead into the
    // next exchange writes the other set, not one a slower lane still reads
    unsigned gen = r->warps[w].gen;
    r->warps[w].slots[gen & 1][me % 32] = v;
    r->warps[w].stamp[gen & 1][me % 32] = gen + 1;
    sync_warp();
    int s = w * 32 + src;
    if (src < 0 || src >= 32 || s >= r->nthreads) return v;
    if (r->warps[w].stamp[gen & 1][src] != gen + 1)
        die_in_kernel("warp shuffle reads a lane that did not take part (it returned or diverged)");
    return r->warps[w].slots[gen & 1][src];
}

void warp_gather(const void *mine, size_t bytes, void *all) {
    block_runner *r = runner;
    int me = r->current, w = me / 32;
    if (bytes > sizeof r->warps[w].blobs[0][0]) die_in_kernel("warp_gather of more than 32 bytes a lane");
    unsigned gen = r->warps[w].gen; // two deposit sets by generation, as warp_exchange
    std::memcpy(r->warps[w].blobs[gen & 1][me % 32], mine, bytes);
    r->warps[w].stamp[gen & 1][me % 32] = gen + 1;
    sync_warp();
    for (int l = 0; l < 32; l++) {
        if (w * 32 + l >= r->nthreads || r->warps[w].stamp[gen & 1][l] != gen + 1)
            die_in_kernel("a warp-wide tensor-core operation without every lane of the warp (one returned or diverged)");
        std::memcpy((char *)all + (size_t)l * bytes, r->warps[w].blobs[gen & 1][l], bytes);
    }
}

void async_copy(void *dst, const void *src, size_t bytes) {
    block_runner *r = runner;
    const char *d = (const char *)dst, *sh = r->shared_mem.data();
    if (d < sh || d + bytes > sh + r->shared_mem.size())
        die_in_kernel("cp.async to an address outside the block's dynamic shared memory");
    if (!is_device_range(src, bytes)) die_in_kernel("cp.async from an address outside every device allocation");
    if ((uintptr_t)dst % bytes || (uintptr_t)src % bytes) die_in_kernel("cp.async of a misaligned address");
    r->fibers[r->current].async_ops.push_back(async_op{dst, src, bytes});
}
void async_commit() {
    fiber &f = runner->fibers[runner->current];
    f.async_groups.push_back(f.async_ops.size());
}
void async_wait(int pending) {
    fiber &f = runner->fibers[runner->current];
    if ((int)f.async_groups.size() <= pending) return;
    size_t k = f.async_groups.size() - (size_t)pending, end = f.async_groups[k - 1];
    for (size_t i = 0; i < end; i++) std::memcpy(f.async_ops[i].dst, f.async_ops[i].src, f.async_ops[i].bytes);
    f.async_ops.erase(f.async_ops.begin(), f.async_ops.begin() + (long)end);
    f.async_groups.erase(f.async_groups.begin(), f.async_groups.begin() + (long)k);
    for (size_t &g : f.async_groups) g -= end;
}

// cudaFuncSetAttribute's dynamic shared memory limits, per kernel
static std::mutex shared_limits_mu;
static std::map<const void *, size_t> shared_limits;
static size_t shared_limit(const void *kernel) {
    std::lock_guard<std::mutex> g(shared_limits_mu);
    auto it = shared_limits.find(kernel);
    return it == shared_limits.end() ? 48 * 1024 : it->second;
}
void set_shared_limit(const void *kernel, size_t bytes) {
    std::lock_guard<std::mutex> g(shared_limits_mu);
    shared_limits[kernel] = bytes;
}

void launch(dim3 grid, dim3 block, size_t shmem, cudaStream_t s, const void *kernel, std::function<void()> body) {
    size_t threads = (size_t)block.x * block.y * block.z;
    if (threads == 0 || threads > 1024 || block.z > 64 || grid.x == 0 || grid.y == 0 || grid.z == 0 ||
        grid.y > 65535 || grid.z > 65535) {
        fail(cudaErrorInvalidConfiguration);
        return;
    }
    if (shmem > 227 * 1024 || (shmem > 48 * 1024 && shmem > shared_limit(kernel))) {
        fail(cudaErrorInvalidValue); // beyond 48 KiB only up to what cudaFuncSetAttribute allowed
        return;
    }
    schedule_kind sched = schedule_from_env();
    enqueue(s, [grid, block, shmem, body = std::move(body), sched] { run_grid(grid, block, shmem, body, sched); });
}

cudaError_t enqueue_host(cudaStream_t s, std::function<void()> fn) { return enqueue(s, std::move(fn)); }

} // namespace mt_emu

using namespace mt_emu;

cudaError_t cudaMalloc(void **ptr, size_t bytes) {
    if (!ptr) return fail(cudaErrorInvalidValue);
    // exactly `bytes` (256-byte aligned, as the runtime's): under ASan a
    // kernel's access one past the end is reported
    size_t n = bytes ? bytes : 1;
    void *p = nullptr;
    {
        std::lock_guard<std::mutex> lk(mem_mu);
        if (n > emu_total_bytes - std::min(allocated_bytes, emu_total_bytes)) return fail(cudaErrorMemoryAllocation);
    }
    if (guard_region *g = guard()) {
        std::lock_guard<std::mutex> lk(mem_mu);
        size_t at = (g->used + 255) / 256 * 256;
        if (at + n > g->size) return fail(cudaErrorMemoryAllocation);
        p = g->base + at;
        g->used = at + n;
        guard_open(g);
        memset(p, 0xFF, n);
        guard_close(g);
        allocations[(uintptr_t)p] = n;
        allocated_bytes += n;
        *ptr = p;
        return cudaSuccess;
    }
    if (posix_memalign(&p, 256, n)) return fail(cudaErrorMemoryAllocation);
    memset(p, 0xFF, n); // NaN as floats: unwritten reads show
    {
        std::lock_guard<std::mutex> lk(mem_mu);
        allocations[(uintptr_t)p] = n;
        allocated_bytes += n;
    }
    *ptr = p;
    return cudaSuccess;
}

cudaError_t cudaFree(void *ptr) {
    if (!ptr) return cudaSuccess;
    sync_all(); // as the runtime, cudaFree waits for the device
    std::lock_guard<std::mutex> lk(mem_mu);
    auto it = allocations.find((uintptr_t)ptr);
    if (it == allocations.end()) return fail(cudaErrorInvalidDevicePointer);
    allocated_bytes -= it->second;
    size_t n = it->second;
    allocations.erase(it);
    if (guard_region *g = guard()) { // the whole pages inside it back to the system; the range is not reused
        size_t pg = (size_t)sysconf(_SC_PAGESIZE), a = page_up((size_t)((char *)ptr - g->base));
        size_t b = (size_t)((char *)ptr + n - g->base) / pg * pg;
        if (b > a) madvise(g->base + a, b - a, MADV_DONTNEED);
        return cudaSuccess;
    }
    free(ptr);
    return cudaSuccess;
}

cudaError_t cudaMallocHost(void **ptr, size_t bytes) {
    if (!ptr) return fail(cudaErrorInvalidValue);
    *ptr = aligned_alloc(256, (bytes + 255) / 256 * 256 + 256);
    return *ptr ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}

cudaError_t cudaFreeHost(void *ptr) {
    free(ptr);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s) {
    cudaError_t e = copy_check(dst, src, bytes, kind);
    if (e != cudaSuccess) return fail(e);
    if (bytes == 0) return cudaSuccess;
    return enqueue(s, [dst, src, bytes] { memmove(dst, src, bytes); });
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, 0);
    if (e != cudaSuccess) return e;
    return cudaStreamSynchronize(0);
}

cudaError_t cudaMemsetAsync(void *dst, int value, size_t bytes, cudaStream_t s) {
    if (bytes == 0) return cudaSuccess;
    if (!is_device_range(dst, bytes)) return fail(cudaErrorInvalidValue);
    return enqueue(s, [dst, value, bytes] { memset(dst, value, bytes); });
}

cudaError_t cudaMemset(void *dst, int value, size_t bytes) { return cudaMemsetAsync(dst, value, bytes, 0); }

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
    std::lock_guard<std::mutex> lk(mem_mu);
    if (total_bytes) *total_bytes = emu_total_bytes;
    if (free_bytes) *free_bytes = emu_total_bytes - std::min(allocated_bytes, emu_total_bytes);
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *hs, unsigned flags) {
    if (!hs) return fail(cudaErrorInvalidValue);
    stream *s = new stream();
    s->blocking = !(flags & cudaStreamNonBlocking);
    s->start();
    registry &r = reg();
    std::lock_guard<std::mutex> lk(r.mu);
    r.streams.push_back(s);
    *hs = reinterpret_cast<cudaStream_t>(s);
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *hs) { return cudaStreamCreateWithFlags(hs, cudaStreamDefault); }

cudaError_t cudaStreamDestroy(cudaStream_t hs) {
    if (!hs) return fail(cudaErrorInvalidResourceHandle);
    stream *s = reinterpret_cast<stream *>(hs);
    registry &r = reg();
    {
        std::lock_guard<std::mutex> lk(r.mu);
        auto it = std::find(r.streams.begin(), r.streams.end(), s);
        if (it == r.streams.end()) return fail(cudaErrorInvalidResourceHandle);
        r.streams.erase(it);
    }
    s->finish(); // its queued work completes first, as the runtime's does
    delete s;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t hs) {
    stream *s = stream_of(hs);
    s->wait_for(s->tail());
    return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void *userData) {
    if (!fn) return fail(cudaErrorInvalidValue);
    return enqueue(s, [fn, userData] { fn(userData); });
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *he, unsigned flags) {
    (void)flags;
    if (!he) return fail(cudaErrorInvalidValue);
    *he = reinterpret_cast<cudaEvent_t>(new event());
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *he) { return cudaEventCreateWithFlags(he, cudaEventDefault); }

cudaError_t cudaEventDestroy(cudaEvent_t he) {
    delete reinterpret_cast<event *>(he);
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t he, cudaStream_t hs) {
    if (!he) return fail(cudaErrorInvalidResourceHandle);
    event *e = reinterpret_cast<event *>(he);
    auto when = std::make_shared<clock_type::time_point>();
    enqueue(hs, [when] { *when = clock_type::now(); });
    e->s = stream_of(hs);
    e->seq = e->s->tail();
    e->when = when;
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t he) {
    event *e = reinterpret_cast<event *>(he);
    if (!e) return fail(cudaErrorInvalidResourceHandle);
    if (e->s) e->s->wait_for(e->seq);
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t he) {
    event *e = reinterpret_cast<event *>(he);
    if (!e) return fail(cudaErrorInvalidResourceHandle);
    return !e->s || e->s->done_up_to(e->seq) ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    event *ea = reinterpret_cast<event *>(a), *eb = reinterpret_cast<event *>(b);
    if (!ms || !ea || !eb || !ea->s || !eb->s) return fail(cudaErrorInvalidValue);
    if (!ea->s->done_up_to(ea->seq) || !eb->s->done_up_to(eb->seq)) return fail(cudaErrorNotReady);
    *ms = std::chrono::duration<float, std::milli>(*eb->when - *ea->when).count();
    return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t hs, cudaEvent_t he, unsigned flags) {
    (void)flags;
    event *e = reinterpret_cast<event *>(he);
    if (!e) return fail(cudaErrorInvalidResourceHandle);
    if (!e->s) return cudaSuccess;
    stream *es = e->s;
    uint64_t seq = e->seq;
    return enqueue(hs, [es, seq] { es->wait_for(seq); });
}

cudaError_t cudaDeviceSynchronize(void) {
    sync_all();
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void) { return last_error; }

const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    }
    return "cudaErrorUnknown";
}

const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    }
    return "unrecognized error code";
}

// MT_EMU_DEVICES (default 1) emulated devices per process, to exercise the
// rank-to-device mapping; they share the one host memory.
static int emu_device_count() {
    const char *v = getenv("MT_EMU_DEVICES");
    int n = v && *v ? atoi(v) : 1;
    return n >= 0 ? n : 0;
}
static thread_local int current_device = 0;

cudaError_t cudaGetDeviceCount(int *n) {
    if (!n) return fail(cudaErrorInvalidValue);
    *n = emu_device_count();
    return *n ? cudaSuccess : fail(cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int dev) {
    if (dev < 0 || dev >= emu_device_count()) return fail(cudaErrorInvalidDevice);
    current_device = dev;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *dev) {
    if (!dev) return fail(cudaErrorInvalidValue);
    *dev = current_device;
    return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void *func, cudaFuncAttribute attr, int value) {
    if (!func || attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 || value > 227 * 1024)
        return fail(cudaErrorInvalidValue);
    mt_emu::set_shared_limit(func, (size_t)value);
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int dev) {
    if (!p || dev < 0 || dev >= emu_device_count()) return fail(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    const char *sched = getenv("MT_EMU_SCHEDULE");
    snprintf(p->name, sizeof p->name, "meshtrain CPU emulation (schedule %s)", sched && *sched ? sched : "forward");
    p->totalGlobalMem = emu_total_bytes;
    p->sharedMemPerBlock = 48 * 1024;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->multiProcessorCount = 1;
    p->major = 9;
    p->minor = 0;
    return cudaSuccess;
}
