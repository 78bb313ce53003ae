// AddressSanitizer's view of the memory tessel's caches hold. A cache hands its callers pieces of
// larger allocations (segments, rounded blocks), so ASan alone sees a cached block, the rest of a
// segment and the slack between a request and its rounded size as addressable, and an overrun of a
// tensor into them goes unreported. In the sim built with -fsanitize=address these helpers poison
// what no caller owns with ASan's manual interface; everywhere else they are no-ops (on the CUDA
// backend device pointers are not host memory and must never be touched).
//
// Device memory is used by streams after the host frees it (a free is ordered on its stream, and the
// next owner's work comes after it there), so the device cache changes the shadow of a block in its
// stream's order, through ShadowQueue: poisoning at free time on the host would report the freed
// tensor's own queued kernels and copies.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>

#include "../runtime/rt.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define TESSEL_ASAN_ACTIVE 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TESSEL_ASAN_ACTIVE 1
#endif
#endif

// TESSEL_NO_ALLOCATOR_POISONING opts a sanitizer build out (for code that legitimately reads the
// rounding slack of its blocks, or to measure the cost).
#if defined(TESSEL_ASAN_ACTIVE) && defined(TESSEL_BACKEND_SIM) && !defined(TESSEL_NO_ALLOCATOR_POISONING)
#define TESSEL_ASAN_POISONING 1
#include <sanitizer/asan_interface.h>

#include "../sim/runtime_state.hpp"  // the shadow queue orders its changes on the sim's streams
#endif

namespace tessel::memory::asan {

// True when this build poisons cached memory: the sim under AddressSanitizer.
#if defined(TESSEL_ASAN_POISONING)
inline constexpr bool enabled = true;
#else
inline constexpr bool enabled = false;
#endif

#if defined(TESSEL_ASAN_POISONING)
// ASan's manual interface reads and rewrites a granule's shadow byte without synchronisation (an
// unpoison within one granule reads it twice and CHECK-fails if another thread changed it in
// between), and the cache changes shadow both on the calling thread and, queued, on the sim's
// stream threads: every change takes this lock.
inline std::mutex& shadow_mutex() {
    static std::mutex m;
    return m;
}
#endif

// Makes [p, p+n) unaddressable. ASan tracks 8-byte granules and a granule can only be poisoned from
// an offset to its end, so callers pass ranges that end on a granule boundary (block ends do).
inline void poison([[maybe_unused]] const void* p, [[maybe_unused]] std::size_t n) {
#if defined(TESSEL_ASAN_POISONING)
    std::lock_guard lock(shadow_mutex());
    ASAN_POISON_MEMORY_REGION(p, n);
#endif
}
// Makes [p, p+n) addressable (ASan may include the rest of the last granule).
inline void unpoison([[maybe_unused]] const void* p, [[maybe_unused]] std::size_t n) {
#if defined(TESSEL_ASAN_POISONING)
    std::lock_guard lock(shadow_mutex());
    ASAN_UNPOISON_MEMORY_REGION(p, n);
#endif
}
// Gives a block of `size` bytes at `p` (8-byte aligned, as is p + size) to a caller that asked for
// `owned` of them: exactly those become addressable, the rest is poisoned, whatever the shadow was.
// Poisoning first matters: unpoisoning alone leaves a fully addressable last granule as it was.
inline void set_owned([[maybe_unused]] const void* p, [[maybe_unused]] std::size_t size, [[maybe_unused]] std::size_t owned) {
#if defined(TESSEL_ASAN_POISONING)
    std::lock_guard lock(shadow_mutex());
    ASAN_POISON_MEMORY_REGION(static_cast<const char*>(p) + owned, size - owned);
    ASAN_UNPOISON_MEMORY_REGION(p, owned);
#endif
}

// True if the byte at `p` is poisoned (tests and the invariant checker use it; false when disabled).
inline bool is_poisoned([[maybe_unused]] const void* p) {
#if defined(TESSEL_ASAN_POISONING)
    return __asan_address_is_poisoned(p) != 0;
#else
    return false;
#endif
}

// Shadow changes a device cache makes in stream order: each runs once the work queued so far on
// the block's stream (with the legacy default stream's implicit ordering) has run, so a freed
// block is poisoned only after the kernels and copies its owner queued, and a reused block's new
// shape is set before its new owner's work. drain() waits for all of them (before a segment goes
// back to the runtime, which may reuse or scribble on it). Without poisoning every call is a no-op.
class ShadowQueue {
public:
    // Poisons [p, p+n) in `stream`'s order (`device`: the device whose default stream a null handle means).
    void poison_after(rt::stream_t stream, int device, const void* p, std::size_t n) {
        if constexpr (enabled) after(stream, device, [p, n] { poison(p, n); });
    }
    // set_owned(p, size, owned) in `stream`'s order.
    void set_owned_after(rt::stream_t stream, int device, const void* p, std::size_t size, std::size_t owned) {
        if constexpr (enabled) after(stream, device, [p, size, owned] { set_owned(p, size, owned); });
    }
    // Waits until every change queued so far has been made.
    void drain() {
        if constexpr (enabled) {
            std::unique_lock lk(state_->m);
            state_->cv.wait(lk, [&] { return state_->outstanding == 0; });
        }
    }

    // True when no queued change is pending: the shadow then matches the cache's books.
    bool idle() {
        if constexpr (!enabled) return true;
        std::lock_guard lk(state_->m);
        return state_->outstanding == 0;
    }

private:
    // Shared with the queued changes, which may outlive the cache that queued them.
    struct State {
        std::mutex m;
        std::condition_variable cv;
        std::size_t outstanding = 0;
    };

    void after([[maybe_unused]] rt::stream_t stream, [[maybe_unused]] int device, std::function<void()> change) {
#if defined(TESSEL_ASAN_POISONING)
        namespace sim = ::tessel::sim::api::detail;
        // A destroyed stream has run everything queued on it (the sim's cudaStreamDestroy waits).
        if (!sim::valid_stream(stream)) {
            change();
            return;
        }
        // The sim resolves the default-stream handles against the thread's current device.
        const int saved = sim::current_device;
        sim::current_device = device;
        CUstream_st* st = sim::resolve(stream);
        sim::current_device = saved;
        {
            std::lock_guard lk(state_->m);
            ++state_->outstanding;
        }
        auto done = [state = state_] {
            std::lock_guard lk(state->m);
            if (--state->outstanding == 0) state->cv.notify_all();
        };
        try {
            sim::enqueue(st, [change, done] {
                change();
                done();
            });
        } catch (...) {  // could not queue (out of memory): wait for the stream and change it now
            st->wait_for(st->tail());
            change();
            done();
        }
#else
        (void)change;
#endif
    }

    std::shared_ptr<State> state_ = std::make_shared<State>();
};

}  // namespace tessel::memory::asan
