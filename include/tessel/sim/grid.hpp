// Runs every block of a simulated launch: blocks are handed out to a pool of worker threads (and the
// launching stream's own thread), each block running whole on one worker. Under the OS-thread
// executor (sim-tsan) grids run one at a time and blocks one after another, because `__shared__`
// then is plain static storage shared by every block; the blocks of a cluster (run_clusters) run at
// the same time in both executors, which is why a cluster kernel must keep its shared memory dynamic.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "block_exec.hpp"
#include "config.hpp"

namespace tessel::sim {

// The block workers of the process (config().workers - 1 threads; the launching thread is the last).
class WorkerPool {
public:
    // Process-wide and never destroyed, so work still queued at exit cannot touch a dead pool.
    static WorkerPool& instance() {
        static WorkerPool* pool = new WorkerPool(config().workers);
        return *pool;
    }

    // Runs all blocks of `launch`; rethrows the first fault (later blocks are skipped after one).
    void run_grid(const LaunchSpec& launch) {
#if defined(TESSEL_SIM_OS_THREADS)
        static std::mutex one_grid_at_a_time;
        std::lock_guard serial(one_grid_at_a_time);
#endif
        if (std::uint64_t(launch.cluster.x) * launch.cluster.y * launch.cluster.z > 1) {
            run_clusters(launch);
            return;
        }
        Job job;
        job.launch = &launch;
        job.total = std::uint64_t(launch.grid.x) * launch.grid.y * launch.grid.z;
        {
            std::lock_guard lk(m_);
            job.participants = 1;
            if (!workers_.empty() && job.total > 1) {
                jobs_.push_back(&job);
                cv_.notify_all();
            }
        }
        work_on(job);
        {
            std::unique_lock lk(m_);
            std::erase(jobs_, &job);
            --job.participants;
            done_cv_.wait(lk, [&] { return job.participants == 0; });
        }
        if (job.fault) std::rethrow_exception(job.fault);
    }

    int workers() const { return int(workers_.size()) + 1; }

    // Thread-block clusters, one after another: the blocks of a cluster run at the same time, each
    // on an OS thread of its own (with its own executor), so cluster.sync() and distributed shared
    // memory behave as on the GPU. Their dynamic shared memory lives until the whole cluster is done.
    static void run_clusters(const LaunchSpec& L) {
        const dim3 c = L.cluster;
        const unsigned size = c.x * c.y * c.z;
        for (unsigned cz = 0; cz < L.grid.z / c.z; ++cz)
            for (unsigned cy = 0; cy < L.grid.y / c.y; ++cy)
                for (unsigned cx = 0; cx < L.grid.x / c.x; ++cx) {
                    std::vector<std::unique_ptr<detail::DynamicSmem>> smem;
                    std::vector<unsigned char*> ptrs;
                    for (unsigned r = 0; r < size; ++r) {
                        smem.push_back(std::make_unique<detail::DynamicSmem>(L.dynamic_smem));
                        ptrs.push_back(smem.back()->p);
                    }
                    ClusterState state(size, ptrs, L.dynamic_smem);
                    std::mutex fault_m;
                    std::exception_ptr fault;
                    auto record = [&](std::exception_ptr e) {
                        {
                            std::lock_guard lk(fault_m);
                            if (!fault) fault = e;
                        }
                        state.abort();
                    };
                    std::vector<std::thread> blocks;
                    try {
                        for (unsigned r = 0; r < size; ++r) {
                            const uint3 idx{cx * c.x + r % c.x, cy * c.y + r / c.x % c.y, cz * c.z + r / (c.x * c.y)};
                            blocks.emplace_back([&, idx, r] {
                                try {
                                    this_worker_executor().run_block(L, idx, &state, r);
                                    state.exited();
                                } catch (const ClusterState::Aborted&) {
                                    state.exited();  // woken because another block faulted: that fault is the one reported
                                } catch (...) {
                                    record(std::current_exception());
                                    state.exited();
                                }
                            });
                        }
                    } catch (...) {  // a thread could not be started: stop the blocks that were
                        record(std::current_exception());
                    }
                    for (auto& b : blocks) b.join();
                    if (fault) std::rethrow_exception(fault);
                    state.check_exit_order();
                }
    }

private:
    struct Job {
        const LaunchSpec* launch = nullptr;
        std::uint64_t total = 0;
        std::atomic<std::uint64_t> next{0};
        std::atomic<bool> aborted{false};
        std::mutex fault_m;
        std::exception_ptr fault;
        int participants = 0;  // guarded by the pool's mutex
    };

    explicit WorkerPool(int n) {
#if !defined(TESSEL_SIM_OS_THREADS)
        for (int i = 1; i < n; ++i) workers_.emplace_back([this] { loop(); });
        for (auto& w : workers_) w.detach();
#else
        (void)n;
#endif
    }

    void work_on(Job& job) {
        const LaunchSpec& L = *job.launch;
        BlockExecutor& exec = this_worker_executor();
        while (!job.aborted.load(std::memory_order_relaxed)) {
            const std::uint64_t b = job.next.fetch_add(1);
            if (b >= job.total) break;
            const uint3 idx{unsigned(b % L.grid.x), unsigned(b / L.grid.x % L.grid.y),
                            unsigned(b / (std::uint64_t(L.grid.x) * L.grid.y))};
            try {
                exec.run_block(L, idx);
            } catch (...) {
                std::lock_guard lk(job.fault_m);
                if (!job.fault) job.fault = std::current_exception();
                job.aborted = true;
            }
        }
    }

    void loop() {
        std::unique_lock lk(m_);
        for (;;) {
            cv_.wait(lk, [&] { return !jobs_.empty(); });
            Job* job = jobs_.front();
            if (job->next.load() >= job->total || job->aborted) {
                jobs_.pop_front();
                continue;
            }
            ++job->participants;
            lk.unlock();
            work_on(*job);
            lk.lock();
            if (--job->participants == 0) done_cv_.notify_all();
        }
    }

    std::mutex m_;
    std::condition_variable cv_, done_cv_;
    std::deque<Job*> jobs_;
    std::vector<std::thread> workers_;
};

}  // namespace tessel::sim
