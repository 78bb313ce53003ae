// Memory statistics as plain structs, with PyTorch's meanings: each Stat has the current value, its
// peak since the last reset, and the running totals of increases (allocated) and decreases (freed).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace tessel::memory {

// One counter: current value, peak, and cumulative increases and decreases.
struct Stat {
    std::int64_t current = 0, peak = 0, allocated = 0, freed = 0;
    void increase(std::int64_t n) {
        current += n;
        allocated += n;
        peak = std::max(peak, current);
    }
    void decrease(std::int64_t n) {
        current -= n;
        freed += n;
    }
    void reset_peak() { peak = current; }
};

// Which pool a statistic covers: all of them, the small pool (<= 1 MiB) or the large pool.
enum class StatPool { all = 0, small_pool = 1, large_pool = 2 };
// One Stat per StatPool: stats.allocated_bytes[StatPool::all].current (or [0], [1], [2]).
struct StatArray : std::array<Stat, 3> {
    using std::array<Stat, 3>::operator[];
    Stat& operator[](StatPool p) { return (*this)[std::size_t(p)]; }
    const Stat& operator[](StatPool p) const { return (*this)[std::size_t(p)]; }
};

inline void stat_increase(StatArray& s, bool small, std::int64_t n) {
    s[0].increase(n);
    s[small ? 1 : 2].increase(n);
}
inline void stat_decrease(StatArray& s, bool small, std::int64_t n) {
    s[0].decrease(n);
    s[small ? 1 : 2].decrease(n);
}

// Statistics of one device's allocator.
struct DeviceStats {
    StatArray allocation;             // blocks handed out
    StatArray segment;                // cudaMalloc'd segments
    StatArray active;                 // blocks handed out or waiting for streams that used them
    StatArray inactive_split;         // free pieces of split segments
    StatArray allocated_bytes;        // bytes of blocks handed out (rounded)
    StatArray requested_bytes;        // bytes the callers asked for
    StatArray reserved_bytes;         // bytes of all segments
    StatArray active_bytes;
    StatArray inactive_split_bytes;
    std::int64_t num_alloc_retries = 0;  // times the cache was freed and cudaMalloc retried
    std::int64_t num_ooms = 0;           // OutOfMemoryErrors thrown
    std::int64_t num_device_alloc = 0;   // cudaMalloc calls that succeeded
    std::int64_t num_device_free = 0;    // cudaFree calls
    std::int64_t max_split_size = 0;     // the configured limit (0: unlimited)

    void reset_peaks() {
        for (StatArray* a : {&allocation, &segment, &active, &inactive_split, &allocated_bytes, &requested_bytes,
                             &reserved_bytes, &active_bytes, &inactive_split_bytes})
            for (Stat& s : *a) s.reset_peak();
    }
};

// Statistics of the pinned host cache.
struct HostStats {
    Stat allocation;       // blocks handed out
    Stat allocated_bytes;  // their (rounded) bytes
    Stat reserved_bytes;   // bytes of pinned memory held, in use or cached
    std::int64_t num_host_alloc = 0, num_host_free = 0;
};

// The peaks of open MemoryScopes; the owning allocator calls these under its own lock.
struct ScopePeaks {
    std::vector<std::int64_t*> open_peaks;  // usually empty
    std::int64_t open(std::int64_t* peak, std::int64_t current) {
        *peak = current;
        open_peaks.push_back(peak);
        return current;
    }
    void close(std::int64_t* peak) { std::erase(open_peaks, peak); }
    void update(std::int64_t current) {
        for (std::int64_t* p : open_peaks) *p = std::max(*p, current);
    }
};

}  // namespace tessel::memory
