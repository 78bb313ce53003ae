// The second device-memory backend (TESSEL_ALLOC_CONF=backend:async): the driver's stream-ordered
// allocator (cudaMallocFromPoolAsync / cudaFreeAsync on the device's default memory pool, named
// explicitly: a program that makes another pool current with cudaDeviceSetMemPool leaves tessel's
// allocations, statistics, trimming and peer access on the one pool). The pool does the
// caching; tessel keeps the same statistics as far as the pool's attributes allow (allocations and
// allocated bytes counted here, reserved bytes from the pool), the same record_stream semantics and
// the same free-then-retry-then-OutOfMemoryError path.
#pragma once

#include <cstddef>
#include <exception>
#include <limits>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "../runtime/device.hpp"
#include "block.hpp"
#include "config.hpp"
#include "stats.hpp"

namespace tessel::memory {

// The cudaMallocAsync backend of one device. Thread-safe.
class AsyncDeviceAllocator {
public:
    explicit AsyncDeviceAllocator(int device) : device_(device) {
        DeviceGuard g(Device{device});
        TESSEL_CUDA_CHECK(rt::api::cudaDeviceGetDefaultMemPool(&pool_, device));
        // Keep freed memory in the pool across synchronisations (the pool is the cache).
        std::uint64_t keep = ~std::uint64_t(0);
        TESSEL_CUDA_CHECK(rt::api::cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keep));
    }

    void* allocate(std::size_t bytes, rt::stream_t stream) {
        if (bytes > std::numeric_limits<std::size_t>::max() / 2) {
            std::lock_guard lk(m_);
            ++stats_.num_ooms;
            throw OutOfMemoryError(oom_message(bytes));
        }
        DeviceGuard g(Device{device_});
        void* p = nullptr;
        cudaError_t e = rt::api::cudaMallocFromPoolAsync(&p, bytes, pool_, stream);
        if (e == cudaErrorMemoryAllocation) {
            (void)rt::api::cudaGetLastError();
            rt::device_synchronize();  // frees queued on streams complete, then the pool gives memory back
            TESSEL_CUDA_CHECK(rt::api::cudaMemPoolTrimTo(pool_, 0));
            std::lock_guard lk(m_);
            ++stats_.num_alloc_retries;
        }
        if (e == cudaErrorMemoryAllocation) e = rt::api::cudaMallocFromPoolAsync(&p, bytes, pool_, stream);
        if (e == cudaErrorMemoryAllocation) {
            (void)rt::api::cudaGetLastError();
            std::lock_guard lk(m_);
            ++stats_.num_ooms;
            throw OutOfMemoryError(oom_message(bytes));
        }
        rt::check(e, "cudaMallocFromPoolAsync");
        std::lock_guard lk(m_);
        live_[p] = Live{bytes, stream, {}};
        count(bytes, true);
        return p;
    }

    // Frees on the allocating stream; streams recorded with record_stream are waited for first. A
    // stream that cannot be waited for by an event (destroyed, or its device failing) is waited for
    // by synchronising its device; if the allocating stream itself is gone, the free is ordered on
    // the device's default stream after a device synchronisation. Either way the memory goes back
    // to the pool, and the first error is rethrown afterwards.
    void deallocate(void* p) {
        Live l;
        {
            std::lock_guard lk(m_);
            auto it = live_.find(p);
            require(it != live_.end(), "deallocate: pointer ", p, " is not a live allocation of the async backend");
            l = std::move(it->second);
            live_.erase(it);
            count(l.bytes, false);
        }
        DeviceGuard g(Device{device_});
        std::exception_ptr first;
        for (const auto& [other, other_device] : l.uses) {  // the free is ordered after their work
            try {
                order_after(l.stream, other, other_device);
            } catch (...) {
                if (!first) first = std::current_exception();
                detail::synchronize_for_free(other_device);
            }
        }
        if (const cudaError_t e = rt::api::cudaFreeAsync(p, l.stream); e != cudaSuccess) {
            std::exception_ptr error = error_of(e, "cudaFreeAsync(p, stream)");  // also clears the last error
            if (!first) first = error;
            // Only a stream that is not live (destroyed under the tensor) means the free was not
            // queued; other codes may be earlier asynchronous errors reported here, with the free
            // queued all the same: freeing again would free twice.
            if (e != cudaErrorInvalidResourceHandle) std::rethrow_exception(first);
            detail::synchronize_for_free(device_);
            if (const cudaError_t e2 = rt::api::cudaFreeAsync(p, nullptr); e2 != cudaSuccess) {
                (void)rt::api::cudaGetLastError();
                // Still the pool's: keep it on the books as live, so the statistics stay true.
                std::lock_guard lk(m_);
                live_[p] = l;
                count(l.bytes, true);
            }
        }
        if (first) std::rethrow_exception(first);
    }

    void record_stream(void* p, rt::stream_t stream, int stream_device) {
        std::lock_guard lk(m_);
        auto it = live_.find(p);
        require(it != live_.end(), "record_stream: pointer ", p, " is not a live allocation of the async backend");
        if (stream != it->second.stream || stream_device != device_) it->second.uses.emplace_back(stream, stream_device);
    }
    bool owns(const void* p) {
        std::lock_guard lk(m_);
        return live_.count(const_cast<void*>(p)) != 0;
    }

    // Returns the pool's unused memory to the device (after queued frees complete).
    void empty_cache() {
        DeviceGuard g(Device{device_});
        rt::device_synchronize();
        TESSEL_CUDA_CHECK(rt::api::cudaMemPoolTrimTo(pool_, 0));
    }

    DeviceStats stats() {
        std::uint64_t reserved = 0, reserved_high = 0;
        TESSEL_CUDA_CHECK(rt::api::cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrReservedMemCurrent, &reserved));
        TESSEL_CUDA_CHECK(rt::api::cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrReservedMemHigh, &reserved_high));
        std::lock_guard lk(m_);
        DeviceStats s = stats_;
        s.reserved_bytes[0].current = std::int64_t(reserved);  // the pool does not split by size class
        s.reserved_bytes[0].peak = std::int64_t(reserved_high);
        return s;
    }
    void reset_peak_stats() {
        std::uint64_t zero = 0;
        TESSEL_CUDA_CHECK(rt::api::cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReservedMemHigh, &zero));
        std::lock_guard lk(m_);
        stats_.reset_peaks();
    }

    std::int64_t open_scope(std::int64_t* peak) {
        std::lock_guard lk(m_);
        return scopes_.open(peak, stats_.allocated_bytes[0].current);
    }
    std::int64_t read_scope(const std::int64_t* peak) {
        std::lock_guard lk(m_);
        return *peak;
    }
    void close_scope(std::int64_t* peak) {
        std::lock_guard lk(m_);
        scopes_.close(peak);
    }

    // Every broken invariant of the books, in words (empty when consistent): each statistic equal to
    // what the live allocations add up to. The pool's own state is the driver's. For tests and fuzzers.
    std::vector<std::string> check_invariants() {
        std::lock_guard lk(m_);
        std::vector<std::string> bad;
        std::int64_t blocks[3] = {}, bytes[3] = {};
        for (const auto& [p, l] : live_) {
            for (int i : {0, is_small(l.bytes) ? 1 : 2}) {
                ++blocks[i];
                bytes[i] += std::int64_t(l.bytes);
            }
        }
        const char* pools[] = {"all", "small", "large"};
        auto compare = [&](const char* name, const StatArray& stat, const std::int64_t* expected) {
            for (int i = 0; i < 3; ++i) {
                const Stat& st = stat[std::size_t(i)];
                if (st.current != expected[i])
                    bad.push_back(detail::concat("device ", device_, " (async): stats.", name, "[", pools[i], "].current is ",
                                                 st.current, " but the live allocations add up to ", expected[i]));
                if (st.peak < st.current || st.allocated - st.freed != st.current)
                    bad.push_back(detail::concat("device ", device_, " (async): stats.", name, "[", pools[i],
                                                 "] is inconsistent: current ", st.current, ", peak ", st.peak, ", allocated ",
                                                 st.allocated, ", freed ", st.freed));
            }
        };
        compare("allocation", stats_.allocation, blocks);
        compare("active", stats_.active, blocks);
        compare("allocated_bytes", stats_.allocated_bytes, bytes);
        compare("requested_bytes", stats_.requested_bytes, bytes);
        compare("active_bytes", stats_.active_bytes, bytes);
        return bad;
    }

private:
    struct Live {
        std::size_t bytes = 0;
        rt::stream_t stream = nullptr;
        std::vector<std::pair<rt::stream_t, int>> uses;  // other streams and their devices
    };

    static bool is_small(std::size_t bytes) { return bytes <= (std::size_t(1) << 20); }

    // Counts an allocation in (`in`) or out of the statistics. Caller holds m_.
    void count(std::size_t bytes, bool in) {
        const bool small = is_small(bytes);
        const std::int64_t n = std::int64_t(bytes);
        for (StatArray* s : {&stats_.allocation, &stats_.active}) in ? stat_increase(*s, small, 1) : stat_decrease(*s, small, 1);
        for (StatArray* s : {&stats_.allocated_bytes, &stats_.requested_bytes, &stats_.active_bytes})
            in ? stat_increase(*s, small, n) : stat_decrease(*s, small, n);
        if (in) scopes_.update(stats_.allocated_bytes[0].current);
    }

    // Makes work queued next on `stream` wait for what is queued now on `other` (of `other_device`).
    static void order_after(rt::stream_t stream, rt::stream_t other, int other_device) {
        rt::event_t e = nullptr;
        {
            DeviceGuard og(Device{other_device});
            e = rt::event_create(false);
        }
        try {
            {
                DeviceGuard og(Device{other_device});
                rt::event_record(e, other);
            }
            rt::stream_wait_event(stream, e);
        } catch (...) {
            (void)rt::api::cudaEventDestroy(e);  // the error being thrown is the one to report
            throw;
        }
        rt::event_destroy(e);
    }

    static std::exception_ptr error_of(cudaError_t e, const char* what) {
        try {
            rt::check(e, what);
        } catch (...) {
            return std::current_exception();
        }
        return nullptr;
    }

    std::string oom_message(std::size_t requested) {
        DeviceGuard g(Device{device_});
        const rt::MemoryInfo info = rt::memory_info();
        std::uint64_t reserved = 0;
        (void)rt::api::cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrReservedMemCurrent, &reserved);
        return detail::concat("out of memory on device ", device_, " (cudaMallocAsync backend): tried to allocate ", requested,
                              " bytes.\n  device: ", info.total_bytes, " bytes total, ", info.free_bytes, " free\n  tessel: ",
                              stats_.allocated_bytes[0].current, " bytes allocated in ", stats_.allocation[0].current,
                              " block(s); the pool holds ", reserved, " bytes, of which ",
                              std::int64_t(reserved) - stats_.allocated_bytes[0].current,
                              " reserved but unallocated (trimmed before this error)\n"
                              "What to try: release tensors you no longer need; use smaller batches or tensors; or "
                              "the native backend (TESSEL_ALLOC_CONF=backend:native), whose cache you can tune.");
    }

    std::mutex m_;
    int device_;
    cudaMemPool_t pool_ = nullptr;
    DeviceStats stats_;
    std::unordered_map<void*, Live> live_;
    ScopePeaks scopes_;  // open MemoryScopes
};

}  // namespace tessel::memory
