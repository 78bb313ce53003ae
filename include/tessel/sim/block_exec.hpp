// Runs one block of a simulated launch. Two executors share the rules in sync.hpp:
//  - FiberExecutor (default): the block's threads run on one worker thread. They start as a plain
//    loop on a single fiber; the first thread that reaches a barrier or warp collective promotes the
//    block, and every thread not yet finished then gets a fiber of its own that switches only at
//    synchronisation points. A block that never synchronises costs one fiber switch in all.
//  - ThreadExecutor (TESSEL_SIM_OS_THREADS, the sim-tsan build): the block's threads are OS threads
//    with real blocking barriers, so ThreadSanitizer sees shared-memory races between CUDA threads.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "config.hpp"
#include "fiber.hpp"
#include "sync.hpp"

namespace tessel::sim {

// One kernel launch as the executors see it: the configuration and a type-erased call.
struct LaunchSpec {
    dim3 grid, block;
    dim3 cluster{1, 1, 1};  // thread-block cluster dims (sm_90): these blocks run at the same time
    std::size_t dynamic_smem = 0;
    const std::string* kernel_name = nullptr;  // demangled, in kernel_name()'s cache (never freed)
    const char* launch_file = nullptr;  // where tessel::launch was called; formatted only if the kernel fails
    unsigned launch_line = 0;
    void (*invoke)(const void* args) = nullptr;  // calls the kernel with a copy of the arguments
    const void* args = nullptr;
    // The kernel's non-null pointer arguments, and the non-zero pointer-aligned words of its
    // structure arguments: before the grid runs, the sim checks that the launching device may reach
    // the memory each points into (peer or pool access), as the GPU's page tables do.
    struct PointerArg {
        int position;     // the parameter's index
        int offset;       // bytes into a structure parameter; -1 for a pointer parameter
        const void* p;
    };
    std::vector<PointerArg> pointer_args;
};

class BlockExecutor;

// The blocks of one thread-block cluster, run at the same time on their own OS threads: each
// block's dynamic shared memory (by rank, readable by the others as distributed shared memory)
// and the barrier of cluster.sync(). A barrier that a block can no longer reach (it has exited, or
// faulted) is reported instead of hanging.
class ClusterState {
public:
    ClusterState(unsigned size, std::vector<unsigned char*> smem, std::size_t smem_bytes)
        : size_(size), smem_(std::move(smem)), smem_bytes_(smem_bytes) {}
    unsigned size() const { return size_; }
    unsigned char* smem(unsigned rank) const { return smem_[rank]; }
    std::size_t smem_bytes() const { return smem_bytes_; }
    // One arrival per block (its thread 0); returns when every block of the cluster has arrived.
    void arrive_and_wait(const std::string& where) {
        std::unique_lock lk(m_);
        const std::uint64_t gen = generation_;
        if (++arrived_ == size_) {
            arrived_ = 0;
            ++generation_;
            cv_.notify_all();
            return;
        }
        cv_.notify_all();  // a block may have exited already: let the check below run
        cv_.wait(lk, [&] { return generation_ != gen || aborted_ || (exited_ > 0 && arrived_ + exited_ >= size_); });
        if (generation_ != gen) return;
        if (aborted_) throw Aborted{};
        throw KernelFault(where + ": cluster.sync() can never complete: " + std::to_string(exited_) + " of the cluster's " +
                          std::to_string(size_) + " blocks exited without reaching it (a cluster barrier must be reached "
                          "by every block of the cluster)");
    }
    // A block read or wrote another block's shared memory (map_shared_rank) between barriers
    // `generation` and the next; `where` is the kernel's source line.
    void remote_access(const std::string& where) {
        const tsan::IgnoreAccesses bookkeeping;  // orders no kernel memory between the blocks (tsan_order.hpp)
        const tsan::IgnoreSync unordered;
        std::lock_guard lk(m_);
        if (!remote_accessed_ || generation_ > last_remote_generation_) last_remote_where_ = where;
        remote_accessed_ = true;
        last_remote_generation_ = generation_;
    }
    // After every block has exited: an access to another block's shared memory after the cluster's
    // last barrier is not ordered before that block's exit, when its shared memory goes away (CUDA:
    // "ensure that all distributed shared memory operations happen before a block exits", by a
    // cluster.sync() before exit). The sim's memory outlives the blocks, so it reports this instead.
    void check_exit_order() const {
        if (remote_accessed_ && last_remote_generation_ == generation_)
            throw KernelFault(last_remote_where_ + ": map_shared_rank() used after the cluster's last cluster.sync(): the other "
                              "block may already have exited and its shared memory be gone (end the kernel with cluster.sync())");
    }
    // A block has finished; blocks waiting for it at a barrier are told.
    void exited() {
        std::lock_guard lk(m_);
        ++exited_;
        cv_.notify_all();
    }
    // A block of the cluster faulted (its fault is recorded first): the others stop waiting.
    void abort() {
        std::lock_guard lk(m_);
        aborted_ = true;
        cv_.notify_all();
    }
    // Thrown into the blocks that were waiting when another block faulted (whose fault is the one
    // reported: it is recorded before the others are woken).
    struct Aborted : KernelFault {
        Aborted() : KernelFault("cluster.sync(): another block of the cluster faulted") {}
    };

private:
    unsigned size_;
    std::vector<unsigned char*> smem_;
    std::size_t smem_bytes_;
    std::mutex m_;
    std::condition_variable cv_;
    unsigned arrived_ = 0, exited_ = 0;
    std::uint64_t generation_ = 0, last_remote_generation_ = 0;
    bool aborted_ = false, remote_accessed_ = false;
    std::string last_remote_where_;
};

// What the built-in variables and intrinsics of the running CUDA thread read.
struct BlockContext {
    uint3 block_idx{};
    dim3 block_dim, grid_dim;
    unsigned char* dynamic_smem = nullptr;
    BlockExecutor* exec = nullptr;
    ClusterState* cluster = nullptr;  // null: a launch without clusters (a cluster of one block)
    dim3 cluster_dim{1, 1, 1};
    std::size_t dynamic_smem_bytes = 0;  // what the launch asked for (the warp-level instructions check addresses against it)
};

namespace detail {
inline thread_local SimThread* tl_thread = nullptr;
inline thread_local BlockContext* tl_block = nullptr;

// Thrown into the OS threads of a block that another thread faulted, to unwind them quietly.
struct BlockAborted {};

// The exception in flight as a KernelFault: the sim's own faults pass through; anything else a
// kernel threw is wrapped with the kernel, block and thread it came from.
inline std::exception_ptr as_fault(const BlockSync& sync, const SimThread& t) {
    const std::string who = sync.where() + ", thread (" + std::to_string(t.idx.x) + "," + std::to_string(t.idx.y) + "," +
                            std::to_string(t.idx.z) + ")";
    try {
        throw;
    } catch (const KernelFault&) {
        return std::current_exception();
    } catch (const std::exception& e) {
        return std::make_exception_ptr(KernelFault(who + " threw: " + e.what()));
    } catch (...) {
        return std::make_exception_ptr(KernelFault(who + " threw an exception not derived from std::exception"));
    }
}

// The schedule-shaking generator (SplitMix64), a UniformRandomBitGenerator for std::shuffle: it keeps
// <random> (a quarter of a second of every translation unit's compile time) out of the sim's headers.
struct ScheduleRng {
    using result_type = std::uint64_t;
    std::uint64_t state = 0;
    explicit ScheduleRng(std::uint64_t seed = 0) : state(seed) {}
    void seed(std::uint64_t s) { state = s; }
    static constexpr result_type min() { return 0; }
    static constexpr result_type max() { return ~result_type(0); }
    result_type operator()() {
        std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
};

inline std::vector<unsigned> thread_order(unsigned n, std::uint64_t seed) {
    std::vector<unsigned> order(n);
    for (unsigned i = 0; i < n; ++i) order[i] = i;
    if (seed) {
        ScheduleRng rng(seed);
        std::shuffle(order.begin(), order.end(), rng);
    }
    return order;
}

inline std::uint64_t block_seed(uint3 b) {
    if (!config().shuffle_seed) return 0;
    std::uint64_t s = *config().shuffle_seed * 0x9E3779B97F4A7C15ull;
    s ^= (std::uint64_t(b.x) << 1) ^ (std::uint64_t(b.y) << 22) ^ (std::uint64_t(b.z) << 43);
    return s | 1;  // never 0: 0 means "no shuffling"
}

// Threads of a block in x-fastest order, as CUDA numbers them (tid = x + y*Dx + z*Dx*Dy). Only the
// fields a run reads are reset: this runs once per block and shows in the plain-loop cost.
inline void init_threads(std::vector<SimThread>& t, dim3 bd) {
    t.resize(std::size_t(bd.x) * bd.y * bd.z);
    unsigned i = 0;
    for (unsigned z = 0; z < bd.z; ++z)
        for (unsigned y = 0; y < bd.y; ++y)
            for (unsigned x = 0; x < bd.x; ++x, ++i) {
                SimThread& s = t[i];
                s.idx = uint3{x, y, z};
                s.tid = i;
                s.lane = i & 31u;
                s.warp = i >> 5;
                s.state = ThreadState::not_started;
                s.fctx = nullptr;
                s.stack = {};
                s.asan_fake = nullptr;
                s.async_copies.clear();
                s.async_groups.clear();
            }
}

// Dynamic shared memory of one block, sized exactly (so ASan sees overruns) and poisoned with 0xFF
// bytes (NaN as float, -1 as int) so a read of something never written shows.
struct DynamicSmem {
    unsigned char* p = nullptr;
    std::size_t rounded = 0;
    explicit DynamicSmem(std::size_t n) : rounded((n + 127) / 128 * 128) {
        if (n) {
            p = static_cast<unsigned char*>(std::aligned_alloc(128, rounded));
            if (!p) throw std::bad_alloc();
            std::memset(p, 0xFF, n);
#if defined(TESSEL_SIM_ASAN)
            __asan_poison_memory_region(p + n, rounded - n);  // the alignment padding is out of bounds too
#endif
        }
    }
    ~DynamicSmem() {
#if defined(TESSEL_SIM_ASAN)
        if (p) __asan_unpoison_memory_region(p, rounded);
#endif
        std::free(p);
    }
    DynamicSmem(const DynamicSmem&) = delete;
    DynamicSmem& operator=(const DynamicSmem&) = delete;
};
}  // namespace detail

// Runs blocks; `synchronize` is what every barrier and warp collective calls.
class BlockExecutor {
public:
    virtual ~BlockExecutor() = default;
    // `cluster`: the block's cluster, whose state owns the block's dynamic shared memory; null
    // for a launch without clusters (the block allocates its own).
    virtual void run_block(const LaunchSpec& launch, uint3 block_idx, ClusterState* cluster = nullptr, unsigned rank = 0) = 0;
    // The calling CUDA thread (its pending-sync fields filled in) waits for its group; returns its result.
    virtual std::uint64_t synchronize(SimThread& self) = 0;
};

// The default executor: fibers on the calling worker thread (see the top of this file).
class FiberExecutor final : public BlockExecutor {
public:
    FiberExecutor() : stacks_(config().fiber_stack_bytes) {}

    void run_block(const LaunchSpec& launch, uint3 block_idx, ClusterState* cluster = nullptr, unsigned rank = 0) override {
        launch_ = &launch;
        detail::init_threads(threads_, launch.block);
        const unsigned n = unsigned(threads_.size());
        sync_.reset(threads_, launch.kernel_name, block_idx);
        order_ = detail::thread_order(n, detail::block_seed(block_idx));
        seed_ = detail::block_seed(block_idx);
        if (seed_) rng_.seed(seed_ + 1);
        // With a seed, a block also takes one of three warp schedules: threads interleaved as
        // released (a GPU-like round robin), one warp run ahead of the others after each block
        // barrier, or one warp held back until nothing else can run (see lead_warp_).
        warp_mode_ = seed_ ? WarpMode((seed_ >> 17) % 3) : WarpMode::interleaved;
        warps_ = (n + 31) / 32;
        lead_warp_ = -1;
        held_.clear();
        plain_ = true;
        plain_pos_ = 0;
        fault_ = nullptr;
        ready_.clear();
        // A member, as the stream's running task is (CUstream_st::running_), so that LeakSanitizer
        // finds it while this worker is on a fiber stack.
        smem_ = std::make_unique<detail::DynamicSmem>(cluster ? 0 : launch.dynamic_smem);
        BlockContext bc{block_idx, launch.block, launch.grid, cluster ? cluster->smem(rank) : smem_->p, this, cluster, launch.cluster,
                        launch.dynamic_smem};
        BlockContext* const saved_block = detail::tl_block;
        detail::tl_block = &bc;

        // The plain loop, on one fiber so the first synchronising thread can be suspended.
        FiberStack s = stacks_.acquire();
        SimThread* first = &threads_[order_[0]];
        first->stack = s;
        first->fctx = boost::context::detail::make_fcontext(s.top(), s.size, &FiberExecutor::plain_entry);
        resume(*first);
        while (!fault_) {
            if (ready_.empty() && !held_.empty()) {  // the held-back warp runs once nothing else can
                ready_.swap(held_);
                lead_warp_ = -1;
            }
            if (ready_.empty()) {
                if (sync_.exited() == n) break;
                try {
                    sync_.deadlock();
                } catch (...) {
                    fault_ = std::current_exception();
                }
                break;
            }
            SimThread& t = threads_[ready_.front()];
            ready_.pop_front();
            if (t.state == ThreadState::not_started) {
                t.stack = stacks_.acquire();
                t.fctx = boost::context::detail::make_fcontext(t.stack.top(), t.stack.size, &FiberExecutor::thread_entry);
            }
            resume(t);
        }
        // Fibers left suspended by a fault are abandoned; their stacks go back to the pool.
        for (auto& t : threads_)
            if (t.stack.base && t.state != ThreadState::exited) stacks_.release(t.stack), t.stack = {};
        detail::tl_block = saved_block;
        detail::tl_thread = nullptr;
        smem_.reset();
        if (fault_) std::rethrow_exception(fault_);
    }

    std::uint64_t synchronize(SimThread& self) override {
        if (plain_) promote();
        released_.clear();
        sync_.arrive(self, released_);  // throws KernelFault on a detected error
        enqueue_released();
        yield(self);
        return self.result;
    }

private:
    // The first synchronising thread ends the plain loop: every thread not yet started will run on
    // a fiber of its own, in the (possibly shuffled) order the loop would have used.
    void promote() {
        plain_ = false;
        choose_lead_warp();
        released_.assign(order_.begin() + plain_pos_, order_.end());
        queue(released_);
    }

    void enqueue_released() {
        if (seed_) std::shuffle(released_.begin(), released_.end(), rng_);
        // A release of more than one warp's threads is a block barrier (or the block's start):
        // the next lead warp is chosen there.
        bool several_warps = false;
        for (unsigned i : released_) several_warps = several_warps || threads_[i].warp != threads_[released_.front()].warp;
        if (several_warps) choose_lead_warp();
        queue(released_);
    }

    // A GPU lets one warp run far ahead of the others between block barriers; the sim's FIFO of
    // released threads alone makes warps advance together from one collective to the next, so a
    // barrier that only protects shared memory reused by the next iteration could be deleted unseen.
    void choose_lead_warp() {
        if (warp_mode_ != WarpMode::interleaved && warps_ > 1) lead_warp_ = int(rng_() % warps_);
    }

    // Queues threads to run: the lead warp's first (ahead) or after everything else (held back).
    void queue(const std::vector<unsigned>& ids) {
        if (lead_warp_ < 0) {
            for (unsigned i : ids) ready_.push_back(i);
            return;
        }
        for (auto it = ids.rbegin(); it != ids.rend(); ++it) {  // front insertions in reverse keep the order
            if (int(threads_[*it].warp) != lead_warp_) continue;
            if (warp_mode_ == WarpMode::ahead) ready_.push_front(*it);
        }
        for (unsigned i : ids) {
            if (int(threads_[i].warp) != lead_warp_) ready_.push_back(i);
            else if (warp_mode_ == WarpMode::held_back) held_.push_back(i);
        }
    }

    void run_thread(SimThread& t) {
        t.state = ThreadState::running;
        detail::tl_thread = &t;
        try {
            launch_->invoke(launch_->args);
            released_.clear();
            sync_.exit(t, released_);
            enqueue_released();
        } catch (...) {
            if (!fault_) fault_ = detail::as_fault(sync_, t);
            t.state = ThreadState::exited;
        }
    }

    static void plain_entry(boost::context::detail::transfer_t from) {
        FiberExecutor* self = tl_exec();
        self->worker_ctx_ = from.fctx;
        self->asan_.arrived(nullptr);
        SimThread* last = nullptr;
        while (self->plain_ && !self->fault_ && self->plain_pos_ < self->order_.size()) {
            SimThread& t = self->threads_[self->order_[self->plain_pos_++]];
            t.stack = self->threads_[self->order_[0]].stack;
            last = &t;
            self->run_thread(t);
        }
        self->finish(last);
    }

    static void thread_entry(boost::context::detail::transfer_t from) {
        FiberExecutor* self = tl_exec();
        self->worker_ctx_ = from.fctx;
        auto* t = static_cast<SimThread*>(from.data);
        self->asan_.arrived(nullptr);
        self->run_thread(*t);
        self->finish(t);
    }

    // Ends the running fiber: hands its stack back and never returns.
    [[noreturn]] void finish(SimThread* t) {
        finished_ = t;
        asan_.leaving(nullptr);
        boost::context::detail::jump_fcontext(worker_ctx_, nullptr);
        std::abort();  // unreachable: a finished fiber is never resumed
    }

    void yield(SimThread& self) {
        asan_.leaving(&self.asan_fake);
        auto from = boost::context::detail::jump_fcontext(worker_ctx_, &self);
        worker_ctx_ = from.fctx;
        asan_.arrived(self.asan_fake);
        detail::tl_thread = &self;
        self.state = ThreadState::running;
    }

    void resume(SimThread& t) {
        finished_ = nullptr;
        tl_exec() = this;
        asan_.entering(t.stack);
        auto back = boost::context::detail::jump_fcontext(t.fctx, &t);
        asan_.returned();
        if (finished_) {
            stacks_.release(finished_->stack);
            for (auto& o : threads_)  // threads of the plain loop shared that stack
                if (o.stack.base == finished_->stack.base) o.stack = {};
        } else {
            static_cast<SimThread*>(back.data)->fctx = back.fctx;
        }
    }

    static FiberExecutor*& tl_exec() {
        static thread_local FiberExecutor* e = nullptr;
        return e;
    }

    StackPool stacks_;
    SwitchAnnotations asan_;
    std::unique_ptr<detail::DynamicSmem> smem_;  // the running block's
    std::vector<SimThread> threads_;
    BlockSync sync_;
    std::vector<unsigned> order_, released_;
    std::deque<unsigned> ready_;
    const LaunchSpec* launch_ = nullptr;
    boost::context::detail::fcontext_t worker_ctx_ = nullptr;
    SimThread* finished_ = nullptr;
    std::exception_ptr fault_;
    detail::ScheduleRng rng_;
    std::uint64_t seed_ = 0;
    bool plain_ = true;
    unsigned plain_pos_ = 0;
    enum class WarpMode { interleaved, ahead, held_back };
    WarpMode warp_mode_ = WarpMode::interleaved;
    unsigned warps_ = 1;
    int lead_warp_ = -1;          // the warp run ahead or held back; -1: none
    std::deque<unsigned> held_;   // the held-back warp's threads, run when nothing else can
};

// The sim-tsan executor: each CUDA thread of the block is an OS thread of a reusable team.
// A waiting thread sleeps on its own condition variable and is woken only when its group is
// released: with one variable for the block, each warp collective of a 256-thread block woke all
// 255 others to find 31 of them released (ThreadSanitizer pays for every wake-up and context switch).
class ThreadExecutor final : public BlockExecutor, private GroupObserver {
public:
    ThreadExecutor() { sync_.observe(this); }
    ~ThreadExecutor() override {
        {
            std::lock_guard lk(m_);
            stop_ = true;
        }
        start_cv_.notify_all();
        for (auto& th : team_) th.join();
    }

    void run_block(const LaunchSpec& launch, uint3 block_idx, ClusterState* cluster = nullptr, unsigned rank = 0) override {
        std::unique_lock lk(m_);
        launch_ = &launch;
        detail::init_threads(threads_, launch.block);
        const unsigned n = unsigned(threads_.size());
        sync_.reset(threads_, launch.kernel_name, block_idx);
        smem_ = std::make_unique<detail::DynamicSmem>(cluster ? 0 : launch.dynamic_smem);
        block_ = BlockContext{block_idx, launch.block, launch.grid, cluster ? cluster->smem(rank) : smem_->p, this, cluster,
                              launch.cluster, launch.dynamic_smem};
        fault_ = nullptr;
        active_ = n;
        done_ = 0;
        while (wake_.size() < n) wake_.emplace_back();
        while (arrived_.size() < n) arrived_.emplace_back(), woken_.emplace_back();
        block_barriers_.assign(n, 0u);
        while (team_.size() < n) team_.emplace_back([this, i = unsigned(team_.size())] { member(i); });
        ++generation_;
        start_cv_.notify_all();
        done_cv_.wait(lk, [&] { return done_ == n; });
        smem_.reset();
        if (fault_) std::rethrow_exception(fault_);
    }

    // The lock orders the bookkeeping only; what the kernel's memory sees ordered is the group's
    // (tsan_order.hpp). A block barrier: every thread releases into and acquires from one token
    // (of two, by the barrier's parity: a thread may arrive at the next barrier before another has
    // left this one, but not at the one after). A warp collective: released by this thread at
    // arrival, relayed by the thread completing the group, acquired through this thread's wake token.
    std::uint64_t synchronize(SimThread& self) override {
        const bool block_barrier = is_block_barrier(self.kind);
        const tsan::Token& own = block_barrier ? block_token_[block_barriers_[self.tid]++ & 1u] : arrived_[self.tid];
        tsan::release(own);
        std::uint64_t result = 0;
        {
            const tsan::IgnoreAccesses bookkeeping;
            const tsan::IgnoreSync unordered;
            std::unique_lock lk(m_);
            if (fault_) throw detail::BlockAborted{};
            if (!advance([&] { sync_.arrive(self, released_); })) throw detail::BlockAborted{};
            wake_[self.tid].wait(lk, [&] { return self.state != ThreadState::waiting || fault_; });
            if (fault_) throw detail::BlockAborted{};
            self.state = ThreadState::running;
            result = self.result;
        }
        tsan::acquire(block_barrier ? own : woken_[self.tid]);
        return result;
    }

private:
    void member(unsigned i) {
        std::uint64_t seen = 0;
        std::unique_lock lk(m_);
        for (;;) {
            start_cv_.wait(lk, [&] { return stop_ || generation_ != seen; });
            if (stop_) return;
            seen = generation_;
            if (i >= threads_.size()) continue;
            SimThread& t = threads_[i];
            t.state = ThreadState::running;
            detail::tl_thread = &t;
            detail::tl_block = &block_;
            lk.unlock();
            std::exception_ptr err;
            bool aborted = false;
            try {
                launch_->invoke(launch_->args);
            } catch (detail::BlockAborted&) {
                aborted = true;
            } catch (...) {
                err = detail::as_fault(sync_, t);
            }
            // Not under IgnoreSync: the lock orders this thread's whole run before the block's end
            // (run_block's caller, and the host after it).
            lk.lock();
            if (err) abort_block(err);
            if (!aborted && !err && !fault_) {
                const tsan::IgnoreAccesses bookkeeping;
                advance([&] { sync_.exit(t, released_); });
            }
            t.state = ThreadState::exited;
            if (++done_ == threads_.size()) done_cv_.notify_all();
        }
    }

    // Called with the lock held: this thread's arrival or exit (`move`, which fills released_), then
    // the threads it released are woken. False if it faulted (the block is aborted).
    template <class Move>
    bool advance(Move&& move) {
        released_.clear();
        synced_.clear();
        try {
            move();
        } catch (...) {
            abort_block(std::current_exception());
            return false;
        }
        --active_;
        active_ += unsigned(released_.size());
        wake_released();
        check_progress();
        return true;
    }

    // Called with the lock held: if no thread can move, the block is deadlocked.
    void check_progress() {
        if (fault_ || active_ > 0 || sync_.exited() == sync_.size()) return;
        try {
            sync_.deadlock();
        } catch (...) {
            abort_block(std::current_exception());
        }
    }

    // GroupObserver, with the lock held, before the group's results are computed: this thread takes
    // every member's clock at arrival (a member cannot move on before it is woken). A block barrier
    // is not relayed this way (every thread acquires the barrier's token itself, outside the lock: a
    // relay by one thread took 2 x 256 TSan operations under the lock, and the race check's
    // reductions 25% longer).
    void warp_group_complete(unsigned first_tid, unsigned lanes) override {
        const tsan::SyncVisible ordering;
        for (unsigned l = 0; l < 32; ++l)
            if (lanes >> l & 1u) tsan::acquire(arrived_[first_tid + l]), synced_.push_back(first_tid + l);
    }

    // Called with the lock held. The members of completed groups get the completing thread's clock
    // (which holds all of theirs); lanes released by __activemask alone get none, as in CUDA.
    void wake_released() {
        {
            const tsan::SyncVisible ordering;
            for (unsigned i : synced_) tsan::release(woken_[i]);
        }
        for (unsigned i : released_) wake_[i].notify_one();
    }

    void abort_block(std::exception_ptr e) {
        if (!fault_) fault_ = e;
        for (auto& w : wake_) w.notify_one();
    }

    std::mutex m_;
    std::condition_variable start_cv_, done_cv_;
    std::deque<std::condition_variable> wake_;  // per thread of the block, by tid (a deque: they never move)
    std::deque<tsan::Token> arrived_, woken_;    // per thread: its clock at arrival; its group's at release
    tsan::Token block_token_[2];                 // block barriers, by parity
    std::vector<unsigned> block_barriers_;       // per thread: block barriers arrived at in this block
    std::vector<unsigned> synced_;               // members of the groups the current arrival or exit completed
    std::vector<std::thread> team_;
    std::vector<SimThread> threads_;
    std::vector<unsigned> released_;
    BlockSync sync_;
    BlockContext block_{};
    std::unique_ptr<detail::DynamicSmem> smem_;
    const LaunchSpec* launch_ = nullptr;
    std::exception_ptr fault_;
    std::uint64_t generation_ = 0;
    unsigned active_ = 0, done_ = 0;
    bool stop_ = false;
};

// The executor of the calling worker thread, made on first use.
inline BlockExecutor& this_worker_executor() {
#if defined(TESSEL_SIM_OS_THREADS)
    static thread_local ThreadExecutor e;
#else
    static thread_local FiberExecutor e;
#endif
    return e;
}

}  // namespace tessel::sim
