// Human-readable views of a device allocator: the OutOfMemoryError message, memory_summary()'s
// table, and snapshot()'s list of segments and blocks.
#pragma once

#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <utility>

#include "allocator.hpp"
#include "device_allocator.hpp"

namespace tessel::memory {

// "1.50 MiB": bytes in the largest binary unit that keeps the number >= 1.
inline std::string format_bytes(std::int64_t bytes) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = double(bytes < 0 ? -bytes : bytes);
    int u = 0;
    while (v >= 1024.0 && u < 4) v /= 1024.0, ++u;
    char buf[48];
    if (u == 0) std::snprintf(buf, sizeof buf, "%s%lld B", bytes < 0 ? "-" : "", (long long)(bytes < 0 ? -bytes : bytes));
    else std::snprintf(buf, sizeof buf, "%s%.2f %s", bytes < 0 ? "-" : "", v, units[u]);
    return buf;
}

inline std::string DeviceCachingAllocator::oom_message(std::size_t requested, std::size_t segment) {
    rt::MemoryInfo info{};
    {
        DeviceGuard g(Device{device_});
        info = rt::memory_info();
    }
    const std::int64_t allocated = stats_.allocated_bytes[0].current, reserved = stats_.reserved_bytes[0].current;
    std::ostringstream os;
    const bool capped = reserved_limit_ != std::numeric_limits<std::size_t>::max() && reserved_ + segment > reserved_limit_;
    os << "out of memory on device " << device_ << ": tried to allocate " << format_bytes(std::int64_t(requested));
    if (capped)  // no cudaMalloc was made: the cap refused the segment
        os << ", which needs a new segment of " << format_bytes(std::int64_t(segment)) << "; that would take tessel's reservations ("
           << format_bytes(std::int64_t(reserved_)) << ") past set_memory_fraction's cap of " << format_bytes(std::int64_t(reserved_limit_));
    else if (segment > requested) os << " (cudaMalloc was asked for a segment of " << format_bytes(std::int64_t(segment)) << ")";
    os << ".\n  device: " << format_bytes(std::int64_t(info.total_bytes)) << " total, "
       << format_bytes(std::int64_t(info.free_bytes)) << " free\n  tessel: " << format_bytes(allocated) << " allocated in "
       << stats_.allocation[0].current << " block(s); " << format_bytes(reserved) << " reserved, of which "
       << format_bytes(reserved - allocated) << " reserved but unallocated; largest free cached block "
       << format_bytes(std::int64_t(largest_free_unlocked())) << "\n";
    if (reserved_limit_ != std::numeric_limits<std::size_t>::max())
        os << "  limit: set_memory_fraction caps tessel's reservations at " << format_bytes(std::int64_t(reserved_limit_)) << "\n";
    os << "What to try: release tensors you no longer need; use smaller batches or tensors; if other libraries "
          "need the memory, call tessel::memory::empty_cache(); if much memory is reserved but unallocated, the "
          "cache is fragmented: set TESSEL_ALLOC_CONF=max_split_size_mb:<MiB>";
    if (reserved_limit_ != std::numeric_limits<std::size_t>::max()) os << "; raise set_memory_fraction()";
    os << ".";
    return os.str();
}

inline std::vector<SegmentInfo> DeviceCachingAllocator::snapshot() {
    std::lock_guard lk(m_);
    std::map<std::uintptr_t, const Block*> heads;  // segments in address order
    auto add = [&](const Block* b) {
        while (b->prev) b = b->prev;
        heads.emplace(reinterpret_cast<std::uintptr_t>(b->ptr), b);
    };
    for (const BlockPool* pool : {&small_, &large_})
        for (const Block* b : pool->blocks) add(b);
    for (const Block* b : active_) add(b);
    std::vector<SegmentInfo> out;
    for (const auto& [address, head] : heads) {
        SegmentInfo seg;
        seg.device = device_;
        seg.address = address;
        seg.stream = head->stream;
        seg.small_pool = head->pool->is_small;
        for (const Block* b = head; b; b = b->next) {
            const bool active = b->allocated || b->event_count > 0 || !b->stream_uses.empty() || active_.count(const_cast<Block*>(b));
            seg.blocks.push_back(BlockInfo{b->size, b->requested, b->allocated, active});
            seg.total_size += b->size;
            if (b->allocated) seg.allocated_size += b->size;
            if (active) seg.active_size += b->size;
        }
        out.push_back(std::move(seg));
    }
    return out;
}

// A text table of an allocator's statistics, like torch.cuda.memory_summary(). Every line, rules
// included, is kSummaryWidth characters while each cell fits its 14 columns (sizes up to 9999 TiB,
// counts below 10^14); a wider value widens its own line only.
inline constexpr std::size_t kSummaryWidth = 97;

#if TESSEL_DEFINE_RUNTIME
TESSEL_API std::string memory_summary(int device, const DeviceStats& s, const std::string& note) {
    // "| text ... |" at the table's width (text longer than the box widens only its own line).
    auto boxed = [](const std::string& text) {
        std::string l = "|  " + text;
        if (l.size() + 1 < kSummaryWidth) l.append(kSummaryWidth - 1 - l.size(), ' ');
        return l + "|\n";
    };
    auto cells = [](const char* name, const std::string& a, const std::string& b, const std::string& c, const std::string& d) {
        char line[256];
        std::snprintf(line, sizeof line, "| %-26s| %14s | %14s | %14s | %14s |\n", name, a.c_str(), b.c_str(), c.c_str(), d.c_str());
        return std::string(line);
    };
    const std::string rule = std::string(kSummaryWidth, '=') + "\n", thin = std::string(kSummaryWidth, '-') + "\n";
    std::ostringstream os;
    os << rule << boxed("tessel memory summary, device " + std::to_string(device))
       << boxed("alloc retries: " + std::to_string(s.num_alloc_retries) + "   OOMs: " + std::to_string(s.num_ooms) +
                "   device allocs: " + std::to_string(s.num_device_alloc) + "   device frees: " + std::to_string(s.num_device_free));
    if (!note.empty()) os << boxed(note);
    os << rule << cells("metric", "current", "peak", "total alloc'd", "total freed") << rule;
    bool first = true;
    auto rows = [&](const char* name, const StatArray& a, bool bytes) {
        if (!std::exchange(first, false)) os << thin;
        const char* pools[] = {name, "  from small pool", "  from large pool"};
        auto f = [&](std::int64_t v) { return bytes ? format_bytes(v) : std::to_string(v); };
        for (std::size_t p = 0; p < 3; ++p) os << cells(pools[p], f(a[p].current), f(a[p].peak), f(a[p].allocated), f(a[p].freed));
    };
    rows("allocated memory", s.allocated_bytes, true);
    rows("active memory", s.active_bytes, true);
    rows("requested memory", s.requested_bytes, true);
    rows("reserved memory", s.reserved_bytes, true);
    rows("non-releasable memory", s.inactive_split_bytes, true);
    rows("allocations", s.allocation, false);
    rows("active allocs", s.active, false);
    rows("reserved segments", s.segment, false);
    rows("non-releasable allocs", s.inactive_split, false);
    os << rule;
    return os.str();
}
#endif  // TESSEL_DEFINE_RUNTIME

}  // namespace tessel::memory
