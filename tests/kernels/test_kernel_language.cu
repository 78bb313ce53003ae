// The CUDA kernel language as tessel's kernels use it: built-in variables, barriers, warp
// collectives, atomics, dynamic shared memory and launch limits. The same file runs on the GPU
// (where it checks the tests' expectations) and on the sim (where it checks the sim).
#include <tessel/runtime/device.hpp>
#include <tessel/runtime/launch.hpp>

#include <algorithm>
#include <numeric>

#include "../support/device_array.hpp"

using tessel::testing::DeviceArray;

namespace {

// ---- built-in variables -------------------------------------------------------------------------
__global__ void write_indices(unsigned* out) {
    const unsigned tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const unsigned bid = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    const unsigned per_block = blockDim.x * blockDim.y * blockDim.z;
    unsigned* o = out + 8 * (bid * per_block + tid);
    o[0] = threadIdx.x; o[1] = threadIdx.y; o[2] = threadIdx.z;
    o[3] = blockIdx.x; o[4] = blockIdx.y; o[5] = blockIdx.z;
    o[6] = blockDim.x * 1000000 + blockDim.y * 1000 + blockDim.z;
    o[7] = gridDim.x * 1000000 + gridDim.y * 1000 + gridDim.z;
}

// ---- thread-block clusters (sm_90) ----------------------------------------------------------------
// Each block stores its slice in dynamic shared memory; after cluster.sync() it reads the slice of
// the next block of its cluster (rank + 1, wrapping) through distributed shared memory, reversed so
// every value crosses threads too. The second sync keeps a block's shared memory alive until its
// neighbour has read it.
__global__ void rotate_across_cluster(const int* in, int* out, unsigned* ranks, int n) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
    (void)in, (void)out, (void)ranks, (void)n;  // no clusters before sm_90 (the test skips itself there)
    __trap();
#else
    const cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    TESSEL_DYNAMIC_SHARED(int, s);
    const int t = int(threadIdx.x);
    s[t] = in[blockIdx.x * n + t];
    cluster.sync();
    const unsigned next = (cluster.block_rank() + 1) % cluster.num_blocks();
    out[blockIdx.x * n + t] = cluster.map_shared_rank(s, int(next))[n - 1 - t];
    if (t == 0) ranks[blockIdx.x] = cluster.block_rank() * 100 + cluster.num_blocks();
    cluster.sync();
#endif
}

// ---- barriers -----------------------------------------------------------------------------------
template <int N>
__global__ void reverse_static(const int* in, int* out) {
    __shared__ int s[N];
    const int t = int(threadIdx.x);
    s[t] = in[blockIdx.x * N + t];
    __syncthreads();
    out[blockIdx.x * N + t] = s[N - 1 - t];
}

__global__ void reverse_dynamic(const int* in, int* out, int n) {
    TESSEL_DYNAMIC_SHARED(int, s);
    const int t = int(threadIdx.x);
    s[t] = in[blockIdx.x * n + t];
    __syncthreads();
    out[blockIdx.x * n + t] = s[n - 1 - t];
}

__global__ void barrier_reductions(const int* pred, int* out) {
    const int t = int(threadIdx.x);
    const int p = pred[blockIdx.x * blockDim.x + t];
    const int count = __syncthreads_count(p);
    const int all = __syncthreads_and(p);
    const int any = __syncthreads_or(p);
    int* o = out + 3 * (blockIdx.x * blockDim.x + t);
    o[0] = count; o[1] = all; o[2] = any;
}

// ---- warp collectives ---------------------------------------------------------------------------
enum ShuffleOp { op_idx, op_up, op_down, op_xor };

__global__ void shuffles(const int* in, const int* args, int* out, int op, int width) {
    const int t = int(threadIdx.x);
    const int v = in[t];
    int r = 0;
    switch (op) {
        case op_idx: r = __shfl_sync(0xffffffffu, v, args[t], width); break;
        case op_up: r = __shfl_up_sync(0xffffffffu, v, unsigned(args[0]), width); break;
        case op_down: r = __shfl_down_sync(0xffffffffu, v, unsigned(args[0]), width); break;
        default: r = __shfl_xor_sync(0xffffffffu, v, args[0], width); break;
    }
    out[t] = r;
}

__global__ void shuffle_double(const double* in, double* out) {
    const int t = int(threadIdx.x);
    out[t] = __shfl_xor_sync(0xffffffffu, in[t], 1);
}

__global__ void votes(const int* pred, unsigned* out) {
    const int t = int(threadIdx.x), lane = t % 32;
    const int p = pred[t];
    unsigned* o = out + 4 * t;
    o[0] = __ballot_sync(0xffffffffu, p);
    o[1] = unsigned(__all_sync(0xffffffffu, p));
    o[2] = unsigned(__any_sync(0xffffffffu, p));
    // Only the upper half-warp takes part; the mask says so.
    if (lane >= 16) {
        __syncwarp(0xffff0000u);
        o[3] = __ballot_sync(0xffff0000u, p);
    } else {
        o[3] = 0;
    }
}

__global__ void block_sum(const float* in, float* out, int n) {
    __shared__ float partial[32];
    const int t = int(threadIdx.x), lane = t % 32, warp = t / 32;
    float v = 0;
    for (int i = int(blockIdx.x) * int(blockDim.x) + t; i < n; i += int(gridDim.x * blockDim.x)) v += in[i];
    for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, unsigned(o));
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < int(blockDim.x / 32) ? partial[lane] : 0.f;
        for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, unsigned(o));
        if (lane == 0) out[blockIdx.x] = v;
    }
}

// ---- atomics ------------------------------------------------------------------------------------
struct AtomicTargets {
    int* histogram;  // 17 bins
    float* fsum;
    double* dsum;
    int* imin;
    int* imax;
    unsigned long long* usum;
    unsigned* bits_or;
    unsigned* bits_and;
    unsigned* bits_xor;
    unsigned* ring;      // atomicInc wraps at 9
    int* cas_counter;    // incremented through a CAS loop
    int* exch;
};

__global__ void atomics(const int* keys, const float* vals, int n, AtomicTargets t) {
    const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
    if (i >= n) return;
    const int k = keys[i];
    atomicAdd(&t.histogram[k % 17], 1);
    atomicAdd(t.fsum, vals[i]);
    atomicAdd(t.dsum, double(vals[i]));
    atomicMin(t.imin, k);
    atomicMax(t.imax, k);
    atomicAdd(t.usum, (unsigned long long)k);
    atomicOr(t.bits_or, 1u << (k % 32));
    atomicAnd(t.bits_and, ~(1u << (k % 32)));
    atomicXor(t.bits_xor, unsigned(k));
    atomicInc(t.ring, 9u);
    int old = atomicAdd(t.cas_counter, 0), assumed;  // an atomic read: a plain one races with the CAS
    do {
        assumed = old;
        old = atomicCAS(t.cas_counter, assumed, assumed + 1);
    } while (old != assumed);
    atomicExch(t.exch, k);
}

__global__ void fill_dynamic(int* out, int n) {
    TESSEL_DYNAMIC_SHARED(int, s);
    for (int i = int(threadIdx.x); i < n; i += int(blockDim.x)) s[i] = i * 3;
    __syncthreads();
    for (int i = int(threadIdx.x); i < n; i += int(blockDim.x)) out[i] = s[n - 1 - i];
}

__global__ void noop(int*) {}

}  // namespace

TEST_CASE("built-in variables cover odd 3-D grids and blocks", "[kernel-language]") {
    const dim3 grid(3, 2, 2), block(5, 3, 2);
    const unsigned per_block = 30, blocks = 12;
    DeviceArray<unsigned> out(8 * per_block * blocks);
    out.poison();
    tessel::launch(write_indices, grid, block, 0, nullptr, out.data());
    auto h = out.download();
    std::size_t bad = 0;
    for (unsigned bz = 0; bz < 2; ++bz)
        for (unsigned by = 0; by < 2; ++by)
            for (unsigned bx = 0; bx < 3; ++bx)
                for (unsigned tz = 0; tz < 2; ++tz)
                    for (unsigned ty = 0; ty < 3; ++ty)
                        for (unsigned tx = 0; tx < 5; ++tx) {
                            const unsigned bid = bx + 3 * (by + 2 * bz), tid = tx + 5 * (ty + 3 * tz);
                            const unsigned* o = &h[8 * (bid * per_block + tid)];
                            const unsigned want[8] = {tx, ty, tz, bx, by, bz, 5003002u, 3002002u};
                            bad += !std::equal(want, want + 8, o);
                        }
    CHECK(bad == 0);
}

TEST_CASE("__syncthreads orders shared memory writes before reads", "[kernel-language][barrier]") {
    const int blocks = 7;
    auto in = tessel::testing::random_vector<float>(std::size_t(blocks) * 97, 11, -1000, 1000);
    std::vector<int> hin(in.begin(), in.end());
    DeviceArray<int> din(hin), dout(hin.size());
    std::vector<int> want(hin.size());
    for (int b = 0; b < blocks; ++b)
        for (int t = 0; t < 97; ++t) want[std::size_t(b) * 97 + t] = hin[std::size_t(b) * 97 + 96 - t];

    SECTION("static __shared__") {
        dout.poison();
        tessel::launch(reverse_static<97>, blocks, 97, 0, nullptr, din.data(), dout.data());
        tessel::testing::check_equal(dout.download(), want, "reverse_static<97>");
    }
    SECTION("dynamic shared memory") {
        dout.poison();
        tessel::launch(reverse_dynamic, blocks, 97, 97 * sizeof(int), nullptr, din.data(), dout.data(), 97);
        tessel::testing::check_equal(dout.download(), want, "reverse_dynamic");
    }
}

TEST_CASE("__syncthreads_count, _and and _or reduce the predicate over the block", "[kernel-language][barrier]") {
    for (int threads : {1, 33, 257, 1024}) {
        const int blocks = 3;
        std::vector<int> pred(std::size_t(threads) * blocks);
        for (std::size_t i = 0; i < pred.size(); ++i) pred[i] = (i * 7919 % 5) == 0 ? 1 : 0;
        for (int t = 0; t < threads; ++t) pred[std::size_t(threads) + t] = 1;        // block 1: all true
        for (int t = 0; t < threads; ++t) pred[std::size_t(2 * threads) + t] = 0;    // block 2: all false
        DeviceArray<int> dp(pred), dout(pred.size() * 3);
        dout.poison();
        tessel::launch(barrier_reductions, blocks, threads, 0, nullptr, dp.data(), dout.data());
        auto h = dout.download();
        std::vector<int> want(h.size());
        for (int b = 0; b < blocks; ++b) {
            int c = 0;
            for (int t = 0; t < threads; ++t) c += pred[std::size_t(b) * threads + t];
            for (int t = 0; t < threads; ++t) {
                int* w = &want[3 * (std::size_t(b) * threads + t)];
                w[0] = c; w[1] = c == threads; w[2] = c > 0;
            }
        }
        tessel::testing::check_equal(h, want, "barrier reductions, " + std::to_string(threads) + " threads");
    }
}

TEST_CASE("warp shuffles follow CUDA's lane arithmetic for every width", "[kernel-language][warp]") {
    const int n = 64;  // two warps
    std::vector<int> in(n);
    for (int i = 0; i < n; ++i) in[i] = 1000 + i * 7;
    DeviceArray<int> din(in), dout(n);
    std::mt19937 rng(5);
    for (int width : {32, 16, 8, 4, 2, 1}) {
        for (int op : {op_idx, op_up, op_down, op_xor}) {
            for (int arg : {0, 1, 3, 5, 13}) {
                std::vector<int> args(n, arg);
                if (op == op_idx)
                    for (auto& a : args) a = int(rng() % 40) - 4;  // includes out-of-range and negative lanes
                DeviceArray<int> dargs(args);
                dout.poison();
                tessel::launch(shuffles, 1, n, 0, nullptr, din.data(), dargs.data(), dout.data(), op, width);
                // Reference: the lane arithmetic of the CUDA programming guide.
                std::vector<int> want(n);
                for (int t = 0; t < n; ++t) {
                    const int lane = t % 32, base = t - lane, seg = lane & ~(width - 1), pos = lane & (width - 1);
                    int src = lane;
                    if (op == op_idx) src = seg + (args[t] & (width - 1));
                    if (op == op_up) src = pos >= arg ? lane - arg : lane;
                    if (op == op_down) src = pos + arg < width ? lane + arg : lane;
                    if (op == op_xor) src = ((lane ^ arg) & ~(width - 1)) > seg ? lane : (lane ^ arg);
                    want[t] = in[base + src];
                }
                tessel::testing::check_equal(dout.download(), want,
                                             "shuffle op " + std::to_string(op) + " width " + std::to_string(width) +
                                                 " arg " + std::to_string(arg));
            }
        }
    }
    SECTION("8-byte values") {
        auto v = tessel::testing::random_vector<double>(32, 3);
        DeviceArray<double> dv(v), dr(32);
        dr.poison();
        tessel::launch(shuffle_double, 1, 32, 0, nullptr, dv.data(), dr.data());
        std::vector<double> want(32);
        for (int t = 0; t < 32; ++t) want[t] = v[t ^ 1];
        tessel::testing::check_equal(dr.download(), want, "__shfl_xor_sync<double>");
    }
}

TEST_CASE("ballot, all, any and partial-mask collectives", "[kernel-language][warp]") {
    const int n = 96;
    for (int pattern = 0; pattern < 4; ++pattern) {
        std::vector<int> pred(n);
        for (int t = 0; t < n; ++t)
            pred[t] = pattern == 0 ? 0 : pattern == 1 ? 1 : pattern == 2 ? (t * 37 % 11 < 5) : (t % 32 != 17);
        DeviceArray<int> dp(pred);
        DeviceArray<unsigned> dout(4 * n);
        dout.poison();
        tessel::launch(votes, 1, n, 0, nullptr, dp.data(), dout.data());
        std::vector<unsigned> want(4 * n);
        for (int t = 0; t < n; ++t) {
            const int w = t / 32, lane = t % 32;
            unsigned bits = 0, upper = 0;
            for (int l = 0; l < 32; ++l)
                if (pred[w * 32 + l]) {
                    bits |= 1u << l;
                    if (l >= 16) upper |= 1u << l;
                }
            want[4 * t] = bits;
            want[4 * t + 1] = bits == 0xffffffffu;
            want[4 * t + 2] = bits != 0;
            want[4 * t + 3] = lane >= 16 ? upper : 0;
        }
        tessel::testing::check_equal(dout.download(), want, "votes pattern " + std::to_string(pattern));
    }
}

TEST_CASE("a warp-shuffle block reduction matches a double-precision sum", "[kernel-language][warp]") {
    const int n = 100003, blocks = 37, threads = 256;
    auto v = tessel::testing::random_vector<float>(n, 17);
    DeviceArray<float> dv(v), dpart(blocks);
    dpart.poison();
    tessel::launch(block_sum, blocks, threads, 0, nullptr, dv.data(), dpart.data(), n);
    auto part = dpart.download();
    double got = 0, want = 0, mag = 0;
    for (float p : part) got += p;
    for (float x : v) want += x, mag += std::fabs(x);
    // Each float partial sum is a chain of at most n/(blocks*threads)+1 serial additions plus 10
    // shuffle levels; a chain of L float additions errs by at most L * 2^-24 * sum|x|.
    const double chain = double(n) / (blocks * threads) + 1 + 10;
    CHECK(std::isfinite(got));
    CHECK(std::fabs(got - want) <= chain * 0x1p-24 * mag);
}

TEST_CASE("atomics are exact under contention from many blocks", "[kernel-language][atomics]") {
    const int n = 20011, threads = 128;
    std::vector<int> keys(n);
    std::mt19937 rng(9);
    for (auto& k : keys) k = int(rng() % 100000);
    std::vector<float> vals(n);
    for (int i = 0; i < n; ++i) vals[i] = float(i % 13) * 0.25f;  // exact in float: sums stay exact

    DeviceArray<int> dkeys(keys), hist(std::vector<int>(17, 0)), imin(std::vector<int>{1 << 30}),
        imax(std::vector<int>{-1}), cas(std::vector<int>{0}), exch(std::vector<int>{-5});
    DeviceArray<float> dvals(vals), fsum(std::vector<float>{0.f});
    DeviceArray<double> dsum(std::vector<double>{0.0});
    DeviceArray<unsigned long long> usum(std::vector<unsigned long long>{0});
    DeviceArray<unsigned> bor(std::vector<unsigned>{0u}), band(std::vector<unsigned>{0xffffffffu}),
        bxor(std::vector<unsigned>{0u}), ring(std::vector<unsigned>{0u});
    AtomicTargets t{hist.data(), fsum.data(), dsum.data(), imin.data(), imax.data(), usum.data(),
                    bor.data(), band.data(), bxor.data(), ring.data(), cas.data(), exch.data()};
    tessel::launch(atomics, tessel::blocks_for(n, threads), threads, 0, nullptr, dkeys.data(), dvals.data(), n, t);

    std::vector<int> want_hist(17, 0);
    double want_sum = 0;
    unsigned long long want_usum = 0;
    unsigned want_or = 0, want_xor = 0;
    for (int i = 0; i < n; ++i) {
        want_hist[keys[i] % 17]++;
        want_sum += vals[i];
        want_usum += unsigned(keys[i]);
        want_or |= 1u << (keys[i] % 32);
        want_xor ^= unsigned(keys[i]);
    }
    tessel::testing::check_equal(hist.download(), want_hist, "atomicAdd histogram");
    CHECK(double(fsum.download()[0]) == want_sum);
    CHECK(dsum.download()[0] == want_sum);
    CHECK(imin.download()[0] == *std::min_element(keys.begin(), keys.end()));
    CHECK(imax.download()[0] == *std::max_element(keys.begin(), keys.end()));
    CHECK(usum.download()[0] == want_usum);
    CHECK(bor.download()[0] == want_or);
    CHECK(band.download()[0] == ~want_or);
    CHECK(bxor.download()[0] == want_xor);
    CHECK(ring.download()[0] == unsigned(n % 10));
    CHECK(cas.download()[0] == n);
    const int last = exch.download()[0];
    CHECK(std::find(keys.begin(), keys.end(), last) != keys.end());
}

TEST_CASE("thread-block clusters share shared memory and a barrier", "[kernel-language][cluster]") {
    if (tessel::properties().major < 9) {
        WARN("thread-block clusters need compute capability 9.0 or later; not tested on this device");
        return;
    }
    const int n = 64, blocks = 12;
    std::vector<int> in(blocks * n);
    std::iota(in.begin(), in.end(), 7);
    DeviceArray<int> x(in), out(blocks * n);
    DeviceArray<unsigned> ranks(blocks);
    for (const unsigned size : {1u, 2u, 4u}) {
        INFO("clusters of " << size);
        out.poison();
        ranks.poison();
        tessel::launch_cluster(rotate_across_cluster, unsigned(blocks), dim3(n), dim3(size), n * sizeof(int), nullptr, x.data(), out.data(),
                               ranks.data(), n);
        std::vector<int> want(blocks * n);
        std::vector<unsigned> want_ranks(blocks);
        for (int b = 0; b < blocks; ++b) {
            const int rank = b % int(size), next = b - rank + (rank + 1) % int(size);
            for (int t = 0; t < n; ++t) want[b * n + t] = in[next * n + n - 1 - t];
            want_ranks[b] = unsigned(rank) * 100 + size;
        }
        tessel::testing::check_equal(out.download(), want, "values read from the next block of the cluster");
        tessel::testing::check_equal(ranks.download(), want_ranks, "block_rank * 100 + num_blocks");
    }
    // A plain launch is a cluster of one block: its own shared memory is rank 0.
    out.poison();
    tessel::launch(rotate_across_cluster, unsigned(blocks), dim3(n), n * sizeof(int), nullptr, x.data(), out.data(), ranks.data(), n);
    std::vector<int> own(blocks * n);
    for (int b = 0; b < blocks; ++b)
        for (int t = 0; t < n; ++t) own[b * n + t] = in[b * n + n - 1 - t];
    tessel::testing::check_equal(out.download(), own, "a launch without clusters");
}

TEST_CASE("dynamic shared memory beyond 48 KiB needs the function attribute", "[kernel-language][launch]") {
    const int n = 20000;  // 80000 bytes
    DeviceArray<int> out(n);
    out.poison();
    CHECK_THROWS_AS(tessel::launch(fill_dynamic, 1, 256, n * sizeof(int), nullptr, out.data(), n), tessel::CudaError);
    tessel::rt::set_max_dynamic_smem(fill_dynamic, int(n * sizeof(int)));
    tessel::launch(fill_dynamic, 1, 256, n * sizeof(int), nullptr, out.data(), n);
    std::vector<int> want(n);
    for (int i = 0; i < n; ++i) want[i] = (n - 1 - i) * 3;
    tessel::testing::check_equal(out.download(), want, "fill_dynamic with 80000 bytes");
    CHECK_THROWS_AS(tessel::rt::set_max_dynamic_smem(fill_dynamic, 1 << 20), tessel::CudaError);
}

TEST_CASE("invalid launch configurations throw CudaError at the launch", "[kernel-language][launch]") {
    DeviceArray<int> x(1);
    auto expect_config_error = [&](dim3 grid, dim3 block) {
        try {
            tessel::launch(noop, grid, block, 0, nullptr, x.data());
            FAIL("launch with grid (" << grid.x << "," << grid.y << "," << grid.z << ") block (" << block.x << ","
                                      << block.y << "," << block.z << ") did not throw");
        } catch (const tessel::CudaError& e) {
            CHECK(e.name() == "cudaErrorInvalidConfiguration");
            CHECK(std::string(e.file()).find("test_kernel_language") != std::string::npos);
        }
    };
    expect_config_error(1, 1025);
    expect_config_error(1, dim3(32, 32, 2));
    expect_config_error(1, dim3(1, 1, 65));
    expect_config_error(dim3(0, 1, 1), 32);
    expect_config_error(dim3(1, 65536, 1), 32);
    tessel::launch(noop, 1, 1024, 0, nullptr, x.data());  // the limit itself is fine
    tessel::rt::device_synchronize();
}
