// What ThreadSanitizer is told about the order a block's synchronisation gives (the sim-tsan build,
// where a block's threads are OS threads). CUDA orders memory between the threads of one barrier or
// warp collective and no others; the executor's own lock, taken by every collective of the block,
// would order them all (a warp that shuffles would be ordered after every thread that synchronised
// anything earlier, so a missing __syncthreads between warps showed only in some schedules). So the
// executor's bookkeeping runs with TSan's sync and memory tracking off, and each completed group is
// ordered explicitly: at a block barrier every thread releases into the barrier's token as it
// arrives and acquires it as it leaves; in a warp collective each member releases into a token of
// its own, the thread that completes the group acquires the members' tokens and releases into each
// member's wake token, and each member acquires its wake token as it leaves. Everything is a no-op
// outside ThreadSanitizer builds.
#pragma once

#if defined(__SANITIZE_THREAD__) || defined(TESSEL_SANITIZE_THREAD)
#define TESSEL_SIM_TSAN_ORDER 1
#include <sanitizer/tsan_interface.h>
extern "C" {
// ThreadSanitizer's dynamic annotations (tsan_interface_ann.cpp): while the sync count is
// positive, the thread's locks, waits and atomics neither acquire nor release; while the reads
// (and writes) count is positive, its memory accesses are not checked or recorded.
void AnnotateIgnoreSyncBegin(const char* file, int line);
void AnnotateIgnoreSyncEnd(const char* file, int line);
void AnnotateIgnoreReadsBegin(const char* file, int line);
void AnnotateIgnoreReadsEnd(const char* file, int line);
void AnnotateIgnoreWritesBegin(const char* file, int line);
void AnnotateIgnoreWritesEnd(const char* file, int line);
}
#endif

namespace tessel::sim::tsan {

// A synchronisation object for ThreadSanitizer: only its address matters (TSan keys its clocks by
// address, at 8-byte granularity).
struct alignas(8) Token {
    unsigned long long unused = 0;
};

#if defined(TESSEL_SIM_TSAN_ORDER)
namespace detail {
inline thread_local int sync_ignored = 0;      // depth of IgnoreSync scopes on this thread
inline thread_local int accesses_ignored = 0;  // depth of IgnoreAccesses scopes
}
inline void release(const Token& t) { __tsan_release(const_cast<Token*>(&t)); }
inline void acquire(const Token& t) { __tsan_acquire(const_cast<Token*>(&t)); }

// The executor's bookkeeping: accesses neither checked nor recorded (they are ordered by the
// executor's lock, which TSan is told to ignore under IgnoreSync).
class IgnoreAccesses {
public:
    IgnoreAccesses() {
        AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
        AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
        ++detail::accesses_ignored;
    }
    ~IgnoreAccesses() {
        --detail::accesses_ignored;
        AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
        AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
    }
    IgnoreAccesses(const IgnoreAccesses&) = delete;
    IgnoreAccesses& operator=(const IgnoreAccesses&) = delete;
};

// Locks and waits that order nothing for the kernel's memory.
class IgnoreSync {
public:
    IgnoreSync() {
        AnnotateIgnoreSyncBegin(__FILE__, __LINE__);
        ++detail::sync_ignored;
    }
    ~IgnoreSync() {
        --detail::sync_ignored;
        AnnotateIgnoreSyncEnd(__FILE__, __LINE__);
    }
    IgnoreSync(const IgnoreSync&) = delete;
    IgnoreSync& operator=(const IgnoreSync&) = delete;
};

// Inside IgnoreSync: lets release/acquire through (TSan drops them while sync is ignored).
class SyncVisible {
public:
    SyncVisible() : was_(detail::sync_ignored) {
        for (int i = 0; i < was_; ++i) AnnotateIgnoreSyncEnd(__FILE__, __LINE__);
        detail::sync_ignored = 0;
    }
    ~SyncVisible() {
        for (int i = 0; i < was_; ++i) AnnotateIgnoreSyncBegin(__FILE__, __LINE__);
        detail::sync_ignored = was_;
    }
    SyncVisible(const SyncVisible&) = delete;
    SyncVisible& operator=(const SyncVisible&) = delete;

private:
    int was_;
};

// Inside IgnoreAccesses: the accesses a collective makes for its lanes (ldmatrix reading shared
// memory) are checked as the kernel's own.
class AccessesVisible {
public:
    AccessesVisible() : was_(detail::accesses_ignored) {
        for (int i = 0; i < was_; ++i) {
            AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
            AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
        }
        detail::accesses_ignored = 0;
    }
    ~AccessesVisible() {
        for (int i = 0; i < was_; ++i) {
            AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
            AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
        }
        detail::accesses_ignored = was_;
    }
    AccessesVisible(const AccessesVisible&) = delete;
    AccessesVisible& operator=(const AccessesVisible&) = delete;

private:
    int was_;
};
#else
// User-provided constructors: a scope guard is not an unused variable.
inline void release(const Token&) {}
inline void acquire(const Token&) {}
struct IgnoreAccesses {
    IgnoreAccesses() {}
};
struct IgnoreSync {
    IgnoreSync() {}
};
struct SyncVisible {
    SyncVisible() {}
};
struct AccessesVisible {
    AccessesVisible() {}
};
#endif

}  // namespace tessel::sim::tsan
