// A child process for the sim-tsan race check. Each racy mode runs one kernel in which a thread
// reads a shared slot that another thread writes with nothing CUDA guarantees to order them;
// `clean` runs kernels in which the right barrier or warp collective orders every such read.
// Under sim-tsan the block's threads are OS threads and only a group's own synchronisation orders
// its members (include/tessel/sim/tsan_order.hpp), so ThreadSanitizer must report each racy mode,
// in every schedule, and stay silent on `clean`:
//   race          no barrier between a write and another thread's read
//   across-warps  warp 0 reads warp 1's slots after a warp shuffle, no __syncthreads
//   warp-halves   each half of a warp meets at its own __syncwarp, then reads the other half's slots
//   across-blocks a block of a cluster reads its neighbour's shared memory before a cluster.sync()
#include <tessel/runtime/launch.hpp>

#include <cstdio>
#include <cstring>
#include <vector>

namespace {
constexpr int threads = 64;  // two warps

// Block barrier or none: out[t] = in[(t + 1) % 64].
template <bool WithBarrier>
__global__ void rotate(const int* in, int* out) {
    __shared__ int s[threads];
    const int t = int(threadIdx.x);
    s[t] = in[t];
    if (WithBarrier) __syncthreads();
    out[t] = s[(t + 1) % threads];
}

// A warp collective orders the warp's own lanes only: out[t] = in[(t + 32) % 64] needs the
// block barrier.
template <bool WithBarrier>
__global__ void other_warp_after_shuffle(const int* in, int* out) {
    __shared__ int s[threads];
    const int t = int(threadIdx.x);
    s[t] = in[t];
    const int neighbour = __shfl_xor_sync(0xffffffffu, t, 1);
    if (WithBarrier) __syncthreads();
    out[t] = s[(t + 32) % threads] + (neighbour ^ 1) - t;
}

// __syncwarp(mask) orders the lanes of its mask: out[t] = in[t ^ 16] needs the whole warp's mask.
template <bool WholeWarp>
__global__ void other_half_after_syncwarp(const int* in, int* out) {
    __shared__ int s[threads];
    const int t = int(threadIdx.x);
    s[t] = in[t];
    const unsigned half = (t & 16) ? 0xffff0000u : 0x0000ffffu;
    __syncwarp(WholeWarp ? 0xffffffffu : half);
    out[t] = s[t ^ 16];
}

// Distributed shared memory orders nothing by itself: out[t] = in[(t + 64) % 128] (block 0 reads
// block 1's copy and back) needs the cluster barrier between the write and the read. The last
// cluster.sync() keeps each block's shared memory alive until its neighbour has read it.
template <bool WithBarrier>
__global__ void neighbour_block(const int* in, int* out) {
    const cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    TESSEL_DYNAMIC_SHARED(int, s);
    const int t = int(threadIdx.x);
    s[t] = in[blockIdx.x * threads + unsigned(t)];
    if (WithBarrier) cluster.sync();
    out[blockIdx.x * threads + unsigned(t)] = cluster.map_shared_rank(s, int(cluster.block_rank() ^ 1u))[t];
    cluster.sync();
}

using Kernel = void (*)(const int*, int*);
struct Case {
    const char* mode;
    Kernel kernel;
    int (*expected)(int t);  // the race-free result at thread t
    bool cluster = false;    // two blocks in one cluster, 128 values
};
const Case racy[] = {
    {"race", rotate<false>, nullptr},
    {"across-warps", other_warp_after_shuffle<false>, nullptr},
    {"warp-halves", other_half_after_syncwarp<false>, nullptr},
    {"across-blocks", neighbour_block<false>, nullptr, true},
};
const Case clean[] = {
    {"clean", rotate<true>, [](int t) { return (t + 1) % threads; }},
    {"clean", other_warp_after_shuffle<true>, [](int t) { return (t + 32) % threads; }},
    {"clean", other_half_after_syncwarp<true>, [](int t) { return t ^ 16; }},
    {"clean", neighbour_block<true>, [](int t) { return (t + threads) % (2 * threads); }, true},
};

// Runs the case on in[t] = t * 5; returns how many outputs differ from expected(t) * 5.
int run(const Case& c) {
    const int n = c.cluster ? 2 * threads : threads;
    std::vector<int> h(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) h[std::size_t(i)] = i * 5;
    int* in = static_cast<int*>(tessel::rt::malloc_device(std::size_t(n) * sizeof(int)));
    int* out = static_cast<int*>(tessel::rt::malloc_device(std::size_t(n) * sizeof(int)));
    tessel::rt::memcpy(in, h.data(), std::size_t(n) * sizeof(int));
    if (c.cluster) tessel::launch_cluster(c.kernel, 2, threads, dim3(2), threads * sizeof(int), nullptr, in, out);
    else tessel::launch(c.kernel, 1, threads, 0, nullptr, in, out);
    tessel::rt::memcpy(h.data(), out, std::size_t(n) * sizeof(int));
    tessel::rt::free_device(in);
    tessel::rt::free_device(out);
    int wrong = 0;
    for (int i = 0; i < n && c.expected; ++i) wrong += h[std::size_t(i)] != c.expected(i) * 5;
    return wrong;
}
}  // namespace

int main(int argc, char** argv) {
    const char* mode = argc > 1 ? argv[1] : "";
    if (std::strcmp(mode, "clean") == 0) {
        int wrong = 0;
        for (const Case& c : clean) wrong += run(c);
        std::printf("clean kernels: %d outputs differ from the race-free result\n", wrong);
        return wrong == 0 ? 0 : 1;
    }
    for (const Case& c : racy)
        if (std::strcmp(mode, c.mode) == 0) {
            run(c);
            std::printf("racy kernel %s ran\n", c.mode);
            return 0;
        }
    std::fprintf(stderr, "usage: tsan_race race|across-warps|warp-halves|across-blocks|clean\n");
    return 2;
}
