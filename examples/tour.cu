// A tour of tessel: the device, tensors and fused expressions, reductions, softmax and layer_norm,
// a device transpose, random numbers and sorting, the tiled shared-memory matmul, and the caching
// allocator's figures, on the GPU (tessel::cuda) or on the CPU simulation (tessel::sim), where the
// times are CPU times. Every result is checked against a host computation ("0 mismatches").
#include <tessel/tessel.hpp>
#include <tessel/ops/sort.hpp>
#include <tessel/kernels/tiled_matmul.cuh>

#include <cmath>
#include <cstdio>

using namespace tessel;

namespace {
// Times `work` (queued on s) with events, in milliseconds.
template <class F>
float time_ms(const Stream& s, F&& work) {
    Event start, stop;
    start.record(s);
    work();
    stop.record(s);
    stop.synchronize();
    return start.elapsed_ms(stop);
}
}  // namespace

int main() try {
    std::printf("tessel tour (backend: %s)\n\n", backend_name);
    if (!is_available()) {
        std::printf("%s\n", unavailable_reason().c_str());
        return 1;
    }
    const auto p = properties();
    const auto v = versions();
    std::printf("1. device %d: %s, compute capability %s, %d SMs, %.1f GiB, L2 %d KiB, %.0f GB/s theoretical%s\n",
                p.index, p.name.c_str(), p.compute_capability().c_str(), p.sm_count, double(p.total_memory) / (1 << 30),
                p.l2_cache_bytes / 1024, p.theoretical_bandwidth_gbs(), p.simulated ? " (nominal for the sim)" : "");
    std::printf("   runtime %s, driver %s: %s\n\n", version_string(v.runtime).c_str(), version_string(v.driver).c_str(),
                v.verdict.c_str());
    const Stream s = Stream::create();
    const StreamGuard on_s(s);  // s is the current stream: every op below and every copy back is ordered on it
    std::size_t mismatches = 0;

    // 2. Tensors and one fused kernel for a whole expression.
    const std::int64_t n = 1 << 20;
    Philox rng(2026);
    auto a = rng.uniform<float>({n}, -1, 1), b = rng.uniform<float>({n}, -1, 1);
    auto y = empty<float>({n});
    const float ms = time_ms(s, [&] { (y = relu(2 * a + b) - 0.5f * sigmoid(a)).run(s); });
    {
        const auto ha = a.to_vector(), hb = b.to_vector(), hy = y.to_vector();
        for (std::size_t i = 0; i < ha.size(); ++i) {
            const double want = std::max(2.0 * ha[i] + hb[i], 0.0) - 0.5 / (1 + std::exp(-double(ha[i])));
            mismatches += !(std::fabs(hy[i] - want) <= 1e-6 * (1 + std::fabs(want)));
        }
    }
    std::printf("2. (y = relu(2a + b) - 0.5 sigmoid(a)).run(s): one kernel, %lld floats, %.3f ms, %.1f GB/s\n",
                (long long)n, ms, 3.0 * double(n) * 4 / (ms * 1e6));

    // 3. Reductions over axes, softmax and layer_norm over rows, a transpose on the device.
    auto m = rng.normal<float>({257, 1031}, 0, 1);
    const auto row_sums = sum(m, {1}, false), col_max = amax(m, {0}, true);
    const auto probs = softmax(m, -1), normed = layer_norm(m, std::nullopt, std::nullopt, 1e-5);
    const auto mt = m.transpose(0, 1).contiguous(s.handle());
    {
        const auto hm = m.to_vector(), hs = row_sums.to_vector(), hx = col_max.to_vector(), hp = probs.to_vector();
        const auto hn = normed.to_vector(), ht = mt.to_vector();
        for (int r = 0; r < 257; ++r) {
            double total = 0, mx = -1e300, mean = 0, var = 0, z = 0;
            for (int c = 0; c < 1031; ++c) total += hm[std::size_t(r * 1031 + c)], mx = std::max(mx, double(hm[std::size_t(r * 1031 + c)]));
            mean = total / 1031;
            for (int c = 0; c < 1031; ++c) {
                const double x = hm[std::size_t(r * 1031 + c)];
                var += (x - mean) * (x - mean) / 1031, z += std::exp(x - mx);
            }
            mismatches += std::fabs(hs[std::size_t(r)] - total) > 1e-3;
            for (int c = 0; c < 1031; c += 7) {
                const double x = hm[std::size_t(r * 1031 + c)];
                mismatches += std::fabs(hp[std::size_t(r * 1031 + c)] - std::exp(x - mx) / z) > 1e-6;
                mismatches += std::fabs(hn[std::size_t(r * 1031 + c)] - (x - mean) / std::sqrt(var + 1e-5)) > 1e-4;
                mismatches += ht[std::size_t(c * 257 + r)] != hm[std::size_t(r * 1031 + c)];
                mismatches += hx[std::size_t(c)] < hm[std::size_t(r * 1031 + c)];
            }
        }
    }
    std::printf("3. sum over axis 1, amax over axis 0, softmax and layer_norm of 257 rows of 1031, transpose: done\n");

    // 4. Random numbers and sorting.
    const auto z = rng.normal<double>({100001}, 0, 1);
    const double avg = mean(z, {}, false).item(), sd = stddev(z, {}, 0, false).item();
    const auto sorted = sort(z, -1, false);
    const auto hz = sorted.values.to_vector();
    for (std::size_t i = 1; i < hz.size(); ++i) mismatches += hz[i - 1] > hz[i];
    mismatches += !(std::fabs(avg) <= 0.02 && std::fabs(sd - 1) <= 0.02);
    std::printf("4. Philox normal draws: mean %+.4f, std %.4f (100001 values), sorted by %s\n", avg, sd,
                backend == Backend::sim ? "the C++ library (the sim's path)" : "CUB's radix sort");

    // 5. A tiled shared-memory kernel through tessel::launch: C = A * B, 255 x 257 x 259.
    {
        const int mm = 255, nn = 257, kk = 259;
        using Tile = kernels::MatmulTile<64, 64, 16, 4, 4>;
        auto A = rng.uniform<float>({mm, kk}, -1, 1), B = rng.uniform<float>({kk, nn}, -1, 1);
        auto C = empty<float>({mm, nn});
        const float t = time_ms(s, [&] {
            launch(kernels::tiled_matmul<float, float, Tile>, Tile::grid(mm, nn), Tile::block(), 0, s.handle(), mm, nn, kk, 1.f,
                   A.data(), kk, B.data(), nn, 0.f, C.data(), nn);
        });
        const auto ha = A.to_vector(), hb = B.to_vector(), hc = C.to_vector();
        double err = 0;
        for (int i = 0; i < mm; ++i)
            for (int j = 0; j < nn; ++j) {
                double acc = 0;
                for (int q = 0; q < kk; ++q) acc += double(ha[std::size_t(i * kk + q)]) * hb[std::size_t(q * nn + j)];
                err = std::max(err, std::fabs(acc - hc[std::size_t(i * nn + j)]));
            }
        mismatches += err > 1e-4;
        std::printf("5. tiled matmul %dx%dx%d: %.3f ms, %.2f GFLOP/s, max |error| vs double %.1e\n", mm, nn, kk, t,
                    2.0 * mm * nn * kk / (t * 1e6), err);
    }

    // 6. The caching allocator.
    const auto st = memory::stats();
    std::printf("6. caching allocator: %.1f MiB allocated now, peak %.1f MiB, %.1f MiB reserved, %lld device allocations\n",
                double(st.allocated_bytes[0].current) / (1 << 20), double(st.allocated_bytes[0].peak) / (1 << 20),
                double(st.reserved_bytes[0].current) / (1 << 20), (long long)st.num_device_alloc);
    std::printf("\nmismatches: %zu\n", mismatches);
    return mismatches == 0 ? 0 : 1;
} catch (const std::exception& e) {
    std::fprintf(stderr, "tour failed: %s\n", e.what());
    return 1;
}
