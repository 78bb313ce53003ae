// Simulated streams and events. A stream is an in-order queue with a worker thread of its own, so
// work runs asynchronously to the host as on a GPU and a missing synchronisation shows up.
#pragma once

#include "qualifiers.hpp"

#include <driver_types.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

namespace tessel::sim {
// Nanoseconds device `device`'s streams have spent running device work (kernels, copies, fills, the
// library stand-ins' products; not waits or host functions): the sim's NVML reports utilisation
// from it (sim/nvml.hpp). Devices past the array's end are not counted.
inline std::atomic<std::uint64_t>* busy_ns(int device) {
    static std::array<std::atomic<std::uint64_t>, 64> ns{};
    return device >= 0 && device < int(ns.size()) ? &ns[std::size_t(device)] : nullptr;
}
}  // namespace tessel::sim

// The sim's definitions of the CUDA runtime's opaque handle types (driver_types.h only declares them).
struct CUstream_st {
    int device = 0;
    unsigned flags = 0;  // cudaStreamDefault or cudaStreamNonBlocking
    int priority = 0;
    bool is_null = false;  // the device's legacy default stream

    std::mutex m;
    std::condition_variable cv;
    struct Task {
        std::function<void()> run;
        bool busy;  // device work, counted in busy_ns
    };
    std::deque<Task> queue;
    std::uint64_t enqueued = 0;   // tasks ever queued
    std::uint64_t completed = 0;  // tasks finished, in order
    cudaError_t error = cudaSuccess;  // first asynchronous failure, reported by the next synchronisation
    std::string error_detail;
    bool stop = false;
    std::thread worker;

    CUstream_st(int dev, unsigned f, int prio, bool null) : device(dev), flags(f), priority(prio), is_null(null) {
        worker = std::thread([this] { run(); });
    }
    ~CUstream_st() {
        {
            std::lock_guard lk(m);
            stop = true;
        }
        cv.notify_all();
        worker.join();
    }

    // Queues a task; returns its sequence number (the stream has reached it when completed >= it).
    std::uint64_t push(std::function<void()> task, bool busy = false) {
        std::lock_guard lk(m);
        queue.push_back({std::move(task), busy});
        cv.notify_all();
        return ++enqueued;
    }
    std::uint64_t tail() {
        std::lock_guard lk(m);
        return enqueued;
    }
    void wait_for(std::uint64_t seq) {
        std::unique_lock lk(m);
        cv.wait(lk, [&] { return completed >= seq; });
    }
    bool reached(std::uint64_t seq) {
        std::lock_guard lk(m);
        return completed >= seq;
    }
    // Takes the pending asynchronous error, if any (the sim reports each fault once).
    cudaError_t take_error(std::string& detail) {
        std::lock_guard lk(m);
        cudaError_t e = error;
        detail = std::move(error_detail);
        error = cudaSuccess;
        error_detail.clear();
        return e;
    }
    void fail(cudaError_t e, std::string detail) {
        std::lock_guard lk(m);
        if (error == cudaSuccess) {
            error = e;
            error_detail = std::move(detail);
        }
    }

private:
    // The task being run, a member rather than a local of run(): while the task runs a kernel, the
    // worker is on a block's fiber stack, and LeakSanitizer scans that instead of the worker's own,
    // so a process exiting with a kernel running would otherwise report the launch as leaked.
    // Only the worker touches it.
    Task running_{};

    void run() {
        std::unique_lock lk(m);
        for (;;) {
            cv.wait(lk, [&] { return stop || !queue.empty(); });
            if (queue.empty()) return;
            running_ = std::move(queue.front());
            queue.pop_front();
            lk.unlock();
            if (std::atomic<std::uint64_t>* counter = running_.busy ? tessel::sim::busy_ns(device) : nullptr) {
                const auto t0 = std::chrono::steady_clock::now();
                running_.run();
                counter->fetch_add(std::uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count()),
                                   std::memory_order_relaxed);
            } else {
                running_.run();
            }
            running_ = Task{};  // what the task held is released before its completion is seen
            lk.lock();
            ++completed;
            cv.notify_all();
        }
    }
};

struct CUevent_st {
    unsigned flags = 0;
    int device = 0;  // the device current at creation; it records only that device's streams
    std::mutex m;
    std::shared_ptr<CUstream_st> stream;  // where it was last recorded (empty: never); kept alive
    std::uint64_t seq = 0;
    std::uint64_t record_id = 0;
    std::chrono::steady_clock::time_point time{};

    // Where the event was last recorded: the stream and the task it waits for.
    std::pair<std::shared_ptr<CUstream_st>, std::uint64_t> position() {
        std::lock_guard lk(m);
        return {stream, seq};
    }
    // Blocks until the last record has been reached (at once if never recorded).
    void wait() {
        auto [s, at] = position();
        if (s) s->wait_for(at);
    }
};
