// A child process for the sim-asan checks. `asan_child global` writes one element past a device
// allocation and `asan_child shared` one past the block's dynamic shared memory: AddressSanitizer
// must report each as a heap-buffer-overflow in the kernel's source line. `asan_child exit-in-flight`
// returns from main while a kernel is running, as programs may: LeakSanitizer, which then runs with
// the stream's worker on a block's fiber stack (and scans that, not the worker's own), must report no
// leak of the launch it is running.
#include <tessel/runtime/launch.hpp>
#include <tessel/sim/stream.hpp>  // CUstream_st::Task, for the queue-block check below

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

namespace {
__global__ void write_past_global(float* x, int n) {
    const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
    if (i <= n) x[i] = 1.f;  // off by one
}
__global__ void write_past_shared(float* x, int n) {
    TESSEL_DYNAMIC_SHARED(float, s);
    s[threadIdx.x + 1] = float(threadIdx.x);  // the last thread writes one past the end
    __syncthreads();
    if (int(threadIdx.x) < n) x[threadIdx.x] = s[threadIdx.x];
}

__global__ void nothing() {}

#if defined(__GLIBCXX__)
// libstdc++'s deque holds 512 bytes of tasks per block: one of the 16 streams below frees a block
// with the long kernel's task only if a block holds at most 16.
static_assert(512 / sizeof(CUstream_st::Task) <= 16, "the exit-in-flight case no longer frees a queue block");
#endif

std::atomic<int> kernels_started{0};
// Sim only (it calls the host): signals that it runs, then outlasts the process by far.
__global__ void outlive_main() {
    if (threadIdx.x == 0) ++kernels_started;
    for (int i = 0; i < 6000; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
}
}  // namespace

int main(int argc, char** argv) {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "exit-in-flight") {
        // A stream's queue frees a block of tasks once its last one is taken, so only the running
        // task keeps the launch reachable; the long kernel comes after 0 to 15 short ones, one
        // stream each, so that it is the last of its block in one of them.
        constexpr int streams = 16;
        for (int before = 0; before < streams; ++before) {
            tessel::rt::stream_t s = tessel::rt::stream_create(true);
            for (int i = 0; i < before; ++i) tessel::launch(nothing, 1, 1, 0, s);
            tessel::launch(outlive_main, 1, 32, 0, s);
        }
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        while (kernels_started < streams) {
            if (std::chrono::steady_clock::now() > deadline) {
                std::fprintf(stderr, "asan_child: %d of %d kernels started within 30 s\n", kernels_started.load(), streams);
                return 2;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        return 0;  // no synchronisation: the kernel is still running
    }
    const bool shared = mode == "shared";
    float* x = static_cast<float*>(tessel::rt::malloc_device(100 * sizeof(float)));
    if (shared) tessel::launch(write_past_shared, 1, 64, 64 * sizeof(float), nullptr, x, 64);
    else tessel::launch(write_past_global, 1, 128, 0, nullptr, x, 100);
    tessel::rt::device_synchronize();
    tessel::rt::free_device(x);
    return 0;
}
