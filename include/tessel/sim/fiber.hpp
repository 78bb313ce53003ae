// Fiber stacks and context switches for the sim: the threads of one block run as fibers on one
// worker thread (Boost.Context fcontext), annotated so AddressSanitizer follows the stack switches.
#pragma once

#include <boost/context/detail/fcontext.hpp>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <new>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define TESSEL_SIM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TESSEL_SIM_ASAN 1
#endif
#endif

#if defined(TESSEL_SIM_ASAN)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

namespace tessel::sim {

namespace ctx = boost::context::detail;

// One mmap'd fiber stack with a guard page below it, so an overflow faults instead of corrupting.
struct FiberStack {
    void* base = nullptr;  // lowest address of the usable region
    std::size_t size = 0;
    void* top() const { return static_cast<char*>(base) + size; }
};

// Stacks reused across blocks by one worker; memory is committed by the OS only when touched.
class StackPool {
public:
    explicit StackPool(std::size_t stack_bytes) : size_(round_to_page(stack_bytes)) {}
    StackPool(const StackPool&) = delete;
    StackPool& operator=(const StackPool&) = delete;
    ~StackPool() {
        for (auto& s : free_) unmap(s);
    }

    FiberStack acquire() {
        if (!free_.empty()) {
            FiberStack s = free_.back();
            free_.pop_back();
            return s;
        }
        const std::size_t page = std::size_t(::sysconf(_SC_PAGESIZE));
        void* p = ::mmap(nullptr, size_ + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) throw std::bad_alloc();
        ::mprotect(p, page, PROT_NONE);  // guard page
        return FiberStack{static_cast<char*>(p) + page, size_};
    }
    void release(FiberStack s) {
#if defined(TESSEL_SIM_ASAN)
        // A fiber abandoned mid-kernel (after a fault) leaves poisoned frames behind.
        __asan_unpoison_memory_region(s.base, s.size);
#endif
        free_.push_back(s);
    }

private:
    static std::size_t round_to_page(std::size_t n) {
        const std::size_t page = std::size_t(::sysconf(_SC_PAGESIZE));
        return (n + page - 1) / page * page;
    }
    void unmap(FiberStack s) {
        const std::size_t page = std::size_t(::sysconf(_SC_PAGESIZE));
        ::munmap(static_cast<char*>(s.base) - page, s.size + page);
    }
    std::size_t size_;
    std::vector<FiberStack> free_;
};

// The AddressSanitizer bookkeeping of stack switches between a worker and its fibers. Without
// ASan every member is empty and inlines to nothing.
struct SwitchAnnotations {
#if defined(TESSEL_SIM_ASAN)
    const void* worker_bottom = nullptr;
    std::size_t worker_size = 0;
    void* worker_fake = nullptr;
    // On the worker, just before jumping onto fiber stack s.
    void entering(const FiberStack& s) { __sanitizer_start_switch_fiber(&worker_fake, s.base, s.size); }
    // On the worker, just after a fiber jumped back.
    void returned() { __sanitizer_finish_switch_fiber(worker_fake, nullptr, nullptr); }
    // On a fiber, just after it was entered or resumed; fake is the fiber's own fake-stack slot.
    void arrived(void* fake) { __sanitizer_finish_switch_fiber(fake, &worker_bottom, &worker_size); }
    // On a fiber, just before it jumps back to the worker; a finished fiber passes nullptr.
    void leaving(void** fake) { __sanitizer_start_switch_fiber(fake, worker_bottom, worker_size); }
#else
    void entering(const FiberStack&) {}
    void returned() {}
    void arrived(void*) {}
    void leaving(void**) {}
#endif
};

}  // namespace tessel::sim
