// What only the sim does: report barriers and warp collectives that part of a block never reaches,
// shake the thread schedule to expose a missing __syncthreads, poison shared memory, run streams
// asynchronously, and fail allocations at its configured capacity.
#include <tessel/memory/allocator.hpp>
#include <tessel/runtime/device.hpp>
#include <tessel/runtime/launch.hpp>

#include "../support/device_array.hpp"
#include "../support/gate.hpp"
#include "../support/slow_kernels.hpp"

#if defined(TESSEL_BACKEND_SIM)

#include <atomic>
#include <thread>

using tessel::testing::DeviceArray;

namespace {

__global__ void early_exit_then_barrier(int* out) {
    if (threadIdx.x < 5) return;  // the classic bug: these threads never reach the barrier
    __syncthreads();
    out[threadIdx.x] = 1;
}

// CUDA leaves exited lanes out of a warp collective: the rest of the warp proceeds.
template <int Source>
__global__ void shuffle_after_lane_exit(int* out) {
    if (threadIdx.x % 32 == 3) return;
    out[threadIdx.x] = __shfl_sync(0xffffffffu, int(threadIdx.x), Source);
}

__global__ void lanes_at_different_collectives(int* out) {
    if (threadIdx.x % 32 == 3) __syncwarp(0xffffffffu);  // lane 3 never joins the shuffle below
    else out[threadIdx.x] = __shfl_sync(0xffffffffu, int(threadIdx.x), 0);
}

__global__ void warp_aggregated_count(int* counter, unsigned* masks) {
    const unsigned lane = threadIdx.x % 32;
    if (threadIdx.x % 2) masks[threadIdx.x] = __activemask();  // odd lanes only
    const unsigned m = __activemask();
    if (lane == unsigned(__ffs(int(m)) - 1)) atomicAdd(counter, __popc(m));
}

// __activemask right after a barrier and other warp collectives: a lane released from one must not
// still count as waiting when the next group forms (the sim tracks waiting lanes per warp).
__global__ void activemask_after_collectives(unsigned* masks, int* shuffled) {
    unsigned* mine = masks + 4 * threadIdx.x;
    __syncthreads();
    mine[0] = __activemask();
    shuffled[threadIdx.x] = __shfl_xor_sync(0xffffffffu, int(threadIdx.x), 1);
    mine[1] = __activemask();
    mine[2] = __activemask();
    __syncwarp();
    mine[3] = __activemask();
}

__global__ void mask_without_caller(int* out) {
    out[threadIdx.x] = int(__ballot_sync(0x1u, 1));  // lanes 1..31 are not in their own mask
}

__global__ void full_mask_in_partial_warp(int* out) {
    out[threadIdx.x] = int(__ballot_sync(0xffffffffu, 1));  // 40 threads: warp 1 has only 8 lanes
}

__global__ void two_different_barriers(int* out) {
    if (threadIdx.x % 2) {
        __syncthreads();
    } else {
        __syncthreads();
    }
    out[threadIdx.x] = 1;
}

__global__ void warp_and_block_deadlock(int* out) {
    if (threadIdx.x < 16) __syncwarp(0xffffffffu);  // waits for lanes 16..31 ...
    else __syncthreads();                           // ... which wait for the whole block
    out[threadIdx.x] = 1;
}

// Reads its left neighbour's shared slot. With the barrier it is correct in every schedule;
// without it, it is correct only when threads happen to run in index order.
template <bool WithBarrier>
__global__ void left_neighbour(const int* in, int* out, int n) {
    __shared__ int s[128];
    const int t = int(threadIdx.x);
    s[t] = in[blockIdx.x * n + t];
    if (WithBarrier) __syncthreads();
    out[blockIdx.x * n + t] = t > 0 ? s[t - 1] : -1;
}

// Sums each item's 256 values: shuffles within warps, then warp 0 combines the 8 warp sums through
// shared memory that the next item overwrites. Without the second barrier, a warp that runs ahead
// into the next item overwrites a sum warp 0 has not read yet (the pattern of kernels::reduce).
template <bool SecondBarrier>
__global__ void items_through_shared(const int* in, int* out, int items) {
    __shared__ int across[8];
    const int t = int(threadIdx.x), lane = t % 32, w = t / 32;
    for (int item = int(blockIdx.x); item < items; item += int(gridDim.x)) {
        int v = in[item * 256 + t];
        for (int d = 16; d >= 1; d /= 2) v += __shfl_down_sync(0xffffffffu, v, d);
        if (lane == 0) across[w] = v;
        __syncthreads();
        if (t < 32) {
            int sum = lane < 8 ? across[lane] : 0;
            for (int d = 4; d >= 1; d /= 2) sum += __shfl_down_sync(0xffffffffu, sum, d);
            if (t == 0) out[item] = sum;
        }
        if (SecondBarrier) __syncthreads();
    }
}

__global__ void read_dynamic_before_write(unsigned* out, int n) {
    TESSEL_DYNAMIC_SHARED(unsigned, s);
    for (int i = int(threadIdx.x); i < n; i += int(blockDim.x)) out[i] = s[i];
}

__global__ void spin_until(int* flag, int* done) {
    while (atomicAdd(flag, 0) == 0) {  // the host sets the flag; an atomic read keeps TSan exact
    }
    *done = 1;
}

__global__ void cluster_sync_skipped_by_rank_one(unsigned* out) {
    const cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    if (cluster.block_rank() == 1) return;
    cluster.sync();
    out[blockIdx.x] = 1;
}

// Reads the next block's shared memory after the only cluster.sync(): that block may have exited.
// With `wait_before_exit`, a second cluster.sync() orders the read before every block's exit.
__global__ void read_neighbour_after_last_sync(unsigned* out, bool wait_before_exit) {
    const cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    TESSEL_DYNAMIC_SHARED(unsigned, s);
    if (threadIdx.x == 0) s[0] = blockIdx.x;
    cluster.sync();
    if (threadIdx.x == 0) out[blockIdx.x] = *cluster.map_shared_rank(s, int((cluster.block_rank() + 1) % cluster.num_blocks()));
    if (wait_before_exit) cluster.sync();
}

std::string fault_of(auto&& launch) {
    try {
        launch();
        tessel::rt::device_synchronize();
    } catch (const tessel::CudaError& e) {
        CHECK(e.name() == "cudaErrorLaunchFailure");
        return e.what();
    }
    return "(no error)";
}

}  // namespace

TEST_CASE("a __syncthreads that part of the block never reaches is reported, not a hang", "[sim][diagnostics]") {
    DeviceArray<int> out(64);
    // clang-format off
    const int launch_line = __LINE__; const std::string msg = fault_of([&] { tessel::launch(early_exit_then_barrier, 2, 64, 0, nullptr, out.data()); });
    // clang-format on
    INFO(msg);
    CHECK(msg.find("test_sim.cu:" + std::to_string(launch_line) + ")") != std::string::npos);  // "(launched at FILE:LINE)"
    CHECK(msg.find("divergent __syncthreads") != std::string::npos);
    CHECK(msg.find("early_exit_then_barrier") != std::string::npos);
    CHECK(msg.find("block (") != std::string::npos);
    CHECK(msg.find("59 of 64 threads") != std::string::npos);
    CHECK(msg.find("test_sim.cu") != std::string::npos);
    // The sim reports each fault once; the device is usable afterwards.
    tessel::rt::device_synchronize();
}

TEST_CASE("warp collectives leave exited lanes out and report lanes that never arrive", "[sim][diagnostics]") {
    DeviceArray<int> out(64);
    out.poison();
    tessel::launch(shuffle_after_lane_exit<0>, 1, 64, 0, nullptr, out.data());
    auto h = out.download();
    for (int t = 0; t < 64; ++t) CHECK(h[t] == (t % 32 == 3 ? -1 : t - t % 32));  // -1: never written

    // Reading from the exited lane is undefined in CUDA; the sim hands back all-one bits.
    tessel::launch(shuffle_after_lane_exit<3>, 1, 64, 0, nullptr, out.data());
    h = out.download();
    CHECK(std::count(h.begin(), h.end(), -1) == 64);

    tessel::launch(full_mask_in_partial_warp, 1, 40, 0, nullptr, out.data());
    h = out.download();
    CHECK(h[0] == -1);   // warp 0: all 32 lanes
    CHECK(h[39] == 0xff);  // warp 1: the 8 lanes that exist

    std::string msg = fault_of([&] { tessel::launch(lanes_at_different_collectives, 1, 64, 0, nullptr, out.data()); });
    INFO(msg);
    CHECK(msg.find("no thread can proceed") != std::string::npos);
    CHECK(msg.find("__shfl_sync(mask 0xffffffff)") != std::string::npos);
    CHECK(msg.find("__syncwarp") != std::string::npos);

    msg = fault_of([&] { tessel::launch(mask_without_caller, 1, 32, 0, nullptr, out.data()); });
    CHECK(msg.find("does not include the calling lane") != std::string::npos);
}

TEST_CASE("__activemask returns the lanes that arrive together", "[sim][warp]") {
    const int n = 96;
    DeviceArray<int> counter(std::vector<int>{0});
    DeviceArray<unsigned> masks(n);
    masks.poison();
    tessel::launch(warp_aggregated_count, 1, n, 0, nullptr, counter.data(), masks.data());
    CHECK(counter.download()[0] == n);  // one atomic per warp, adding the whole warp
    auto h = masks.download();
    for (int t = 1; t < n; t += 2) CHECK(h[t] == 0xAAAAAAAAu);
}

TEST_CASE("__activemask after __syncthreads, a shuffle, another __activemask and __syncwarp is the whole warp", "[sim][warp]") {
    const int n = 80;  // the last warp has 16 lanes
    DeviceArray<unsigned> masks(4 * n);
    DeviceArray<int> shuffled(n);
    masks.poison();
    shuffled.poison();
    tessel::launch(activemask_after_collectives, 1, n, 0, nullptr, masks.data(), shuffled.data());
    const auto m = masks.download();
    const auto s = shuffled.download();
    for (int t = 0; t < n; ++t) {
        INFO("thread " << t);
        const unsigned warp_lanes = t < 64 ? 0xffffffffu : 0x0000ffffu;
        CHECK(s[std::size_t(t)] == (t ^ 1));
        for (int k = 0; k < 4; ++k) CHECK(m[std::size_t(4 * t + k)] == warp_lanes);
    }
}

TEST_CASE("threads waiting at different barriers, or deadlocked, are reported", "[sim][diagnostics]") {
    DeviceArray<int> out(64);
    std::string msg = fault_of([&] { tessel::launch(two_different_barriers, 1, 64, 0, nullptr, out.data()); });
    INFO(msg);
    CHECK(msg.find("different barriers") != std::string::npos);

    msg = fault_of([&] { tessel::launch(warp_and_block_deadlock, 1, 32, 0, nullptr, out.data()); });
    CHECK(msg.find("no thread can proceed") != std::string::npos);
    CHECK(msg.find("__syncwarp") != std::string::npos);
}

#if !defined(TESSEL_SIM_OS_THREADS)
TEST_CASE("the schedule shaker exposes a missing __syncthreads that in-order execution hides", "[sim][shuffle]") {
    const int n = 128, blocks = 6;
    std::vector<int> in(std::size_t(n) * blocks);
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = int(i * 31 + 7);
    std::vector<int> want(in.size());
    for (int b = 0; b < blocks; ++b)
        for (int t = 0; t < n; ++t) want[std::size_t(b) * n + t] = t > 0 ? in[std::size_t(b) * n + t - 1] : -1;
    DeviceArray<int> din(in), dout(in.size());
    auto run = [&](auto kernel) {
        dout.poison();
        tessel::launch(kernel, blocks, n, 0, nullptr, din.data(), dout.data(), n);
        return dout.download() == want;
    };
    auto& seed = tessel::sim::config().shuffle_seed;
    const auto saved = seed;

    seed.reset();
    CHECK(run(left_neighbour<false>));  // in index order the bug hides

    int exposed = 0;
    for (std::uint64_t s : {1, 2, 3, 4, 5, 6, 7, 8}) {
        seed = s;
        exposed += !run(left_neighbour<false>);
        CHECK(run(left_neighbour<true>));  // the correct kernel is right in every schedule
    }
    seed = saved;
    CHECK(exposed > 0);
}
#endif

#if !defined(TESSEL_SIM_OS_THREADS)
// Threads interleaved as released move warps forward together from one collective to the next, so
// a barrier that only protects shared memory reused by the next item survives its deletion; the
// shaker's warp schedules (one warp run ahead after a barrier, or one held back) expose it.
TEST_CASE("the shaker's warp schedules expose a barrier missing before shared memory is reused", "[sim][shuffle]") {
    const int items = 40, blocks = 4;
    std::vector<int> in(std::size_t(items) * 256);
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = int((i * 2654435761u) % 1000);
    std::vector<int> want(items, 0);
    for (int i = 0; i < items; ++i)
        for (int t = 0; t < 256; ++t) want[std::size_t(i)] += in[std::size_t(i) * 256 + std::size_t(t)];
    DeviceArray<int> din(in), dout{std::size_t(items)};
    auto run = [&](auto kernel) {
        dout.poison();
        tessel::launch(kernel, blocks, 256, 0, nullptr, din.data(), dout.data(), items);
        return dout.download() == want;
    };
    auto& seed = tessel::sim::config().shuffle_seed;
    const auto saved = seed;
    seed.reset();
    CHECK(run(items_through_shared<false>));  // the plain order hides the missing barrier
    int exposed = 0;
    for (std::uint64_t s = 1; s <= 8; ++s) {
        seed = s;
        exposed += !run(items_through_shared<false>);
        CHECK(run(items_through_shared<true>));  // with the barrier, right in every schedule
    }
    seed = saved;
    CHECK(exposed > 0);
}
#endif

TEST_CASE("cluster launches are checked like the CUDA runtime checks them", "[sim][cluster]") {
    DeviceArray<unsigned> out(64);
    auto config_error = [&](unsigned grid, unsigned cluster) {
        try {
            tessel::launch_cluster(read_dynamic_before_write, grid, 32, dim3(cluster), 4, nullptr, out.data(), 1);
        } catch (const tessel::CudaError& e) {
            return std::string(e.what());
        }
        return std::string("(no error)");
    };
    CHECK_THAT(config_error(10, 4), Catch::Contains("not a whole number of clusters"));
    CHECK_THAT(config_error(16, 16), Catch::Contains("at most 8 are portable"));
    CHECK_THAT(config_error(8, 0), Catch::Contains("contain a zero"));

    // A block that exits without reaching cluster.sync() is reported, not a hang.
    const std::string msg = fault_of([&] { tessel::launch_cluster(cluster_sync_skipped_by_rank_one, 4, 32, dim3(2), 0, nullptr, out.data()); });
    INFO(msg);
    CHECK(msg.find("exited without reaching it") != std::string::npos);

    // Distributed shared memory read after the last cluster barrier: the other block may be gone.
    const std::string late = fault_of([&] {
        tessel::launch_cluster(read_neighbour_after_last_sync, 4, 32, dim3(2), sizeof(unsigned), nullptr, out.data(), false);
    });
    INFO(late);
    CHECK(late.find("after the cluster's last cluster.sync()") != std::string::npos);
    CHECK(late.find("test_sim.cu") != std::string::npos);
    tessel::launch_cluster(read_neighbour_after_last_sync, 4, 32, dim3(2), sizeof(unsigned), nullptr, out.data(), true);
    const auto h = out.download();
    CHECK(h[0] == 1);
    CHECK(h[1] == 0);
    CHECK(h[2] == 3);
    CHECK(h[3] == 2);
}

TEST_CASE("dynamic shared memory starts poisoned", "[sim][poison]") {
    const int n = 1000;
    DeviceArray<unsigned> out(n);
    tessel::rt::memset_async(out.data(), 0, n * sizeof(unsigned), nullptr);
    tessel::launch(read_dynamic_before_write, 1, 128, n * sizeof(unsigned), nullptr, out.data(), n);
    auto h = out.download();
    CHECK(std::count(h.begin(), h.end(), 0xFFFFFFFFu) == n);
}

TEST_CASE("sim streams run asynchronously to the host and in order", "[sim][stream]") {
    int* flag = static_cast<int*>(tessel::rt::malloc_pinned(sizeof(int)));
    *flag = 0;
    DeviceArray<int> done(std::vector<int>{0});
    tessel::rt::stream_t s = tessel::rt::stream_create(true);
    tessel::launch(spin_until, 1, 1, 0, s, flag, done.data());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    CHECK_FALSE(tessel::rt::stream_query(s));  // still spinning: the launch did not block the host
    std::atomic_ref<int>(*flag).store(1);
    tessel::rt::stream_synchronize(s);
    CHECK(done.download()[0] == 1);
    tessel::rt::stream_destroy(s);
    tessel::rt::free_pinned(flag);
}

TEST_CASE("stream_wait_event orders work across streams", "[sim][stream]") {
    const int n = 1 << 16;
    DeviceArray<int> x(n), y(n);
    x.poison();
    auto a = tessel::rt::stream_create(true), b = tessel::rt::stream_create(true);
    auto e = tessel::rt::event_create();
    const tessel::testing::Gate gate;  // holds a until b's copy is queued: without the wait it copies the poison
    gate.hold(a);
    tessel::launch(tessel::testing::slow_fill<int>, 4, 256, 0, a, x.data(), n, 42, 2);
    tessel::rt::event_record(e, a);
    tessel::rt::stream_wait_event(b, e);
    tessel::rt::memcpy_async(y.data(), x.data(), n * sizeof(int), b);
    {
        const std::jthread opener = gate.open_later();
        tessel::rt::stream_synchronize(b);
    }
    auto h = y.download();
    CHECK(std::count(h.begin(), h.end(), 42) == n);
    tessel::rt::event_destroy(e);
    tessel::rt::stream_destroy(a);
    tessel::rt::stream_destroy(b);
}

TEST_CASE("allocation fails at the sim's capacity and recovers after a free", "[.oom]") {
    // Run with TESSEL_SIM_MEMORY=64MiB (ctest does).
    const auto p = tessel::properties();
    REQUIRE(p.total_memory == (std::size_t(64) << 20));
    void* a = tessel::rt::malloc_device(std::size_t(40) << 20);
    try {
        (void)tessel::rt::malloc_device(std::size_t(40) << 20);
        FAIL("second 40 MiB allocation did not fail");
    } catch (const tessel::OutOfMemoryError& e) {
        const std::string msg = e.what();
        INFO(msg);
        CHECK(msg.find("41943040 bytes") != std::string::npos);
        CHECK(msg.find("of 67108864 total") != std::string::npos);
    }
    tessel::rt::free_device(a);
    void* b = tessel::rt::malloc_device(std::size_t(60) << 20);
    CHECK(b != nullptr);
    tessel::rt::free_device(b);
}

TEST_CASE("several simulated devices keep separate memory", "[.multidevice]") {
    // Run with TESSEL_SIM_DEVICES=3 (ctest does).
    REQUIRE(tessel::device_count() == 3);
    tessel::set_device(tessel::Device{2});
    CHECK(tessel::current_device() == tessel::Device{2});
    const auto before = tessel::properties(tessel::Device{2}).free_memory;
    void* p = tessel::rt::malloc_device(1 << 20);
    CHECK(tessel::properties(tessel::Device{2}).free_memory == before - (1 << 20));
    CHECK(tessel::properties(tessel::Device{0}).free_memory == tessel::properties(tessel::Device{0}).total_memory);
    tessel::rt::free_device(p);
    CHECK_THROWS_AS(tessel::set_device(tessel::Device{3}), tessel::InvalidArgument);
    tessel::set_device(tessel::Device{0});

    // An event records only streams of its own device (as in CUDA) ...
    tessel::set_device(tessel::Device{1});
    auto s1 = tessel::rt::stream_create(true);
    tessel::set_device(tessel::Device{0});
    auto e0 = tessel::rt::event_create(false);
    CHECK_THROWS_AS(tessel::rt::event_record(e0, s1), tessel::CudaError);
    tessel::rt::event_destroy(e0);
    // ... so a block of device 0 used on a stream of device 1 is released through device 1's events.
    for (int round = 0; round < 2; ++round) {
        void* q = tessel::memory::allocate(4096);
        tessel::memory::record_stream(q, s1, tessel::Device{1});
        tessel::memory::deallocate(q);  // must neither throw nor lose the block
    }
    tessel::memory::empty_cache();  // waits for the recorded events, then returns the blocks
    CHECK(tessel::memory::stats(tessel::Device{0}).active[0].current == 0);
    tessel::rt::stream_destroy(s1);
}

#endif  // TESSEL_BACKEND_SIM
