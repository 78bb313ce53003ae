// A tour of tessel: the device, a fused element-wise expression, a tiled shared-memory kernel, and
// the memory figures, on the GPU (tessel::cuda) or on the CPU simulation (tessel::sim).
#include <tessel/kernels/elementwise.cuh>
#include <tessel/kernels/tiled_matmul.cuh>
#include <tessel/runtime/device.hpp>
#include <tessel/runtime/launch.hpp>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

namespace {

// Device memory for n values of T, freed on scope exit (tessel::Tensor will take this role).
template <class T>
struct DeviceBuffer {
    std::size_t n;
    T* p = static_cast<T*>(tessel::rt::malloc_device(n * sizeof(T)));
    explicit DeviceBuffer(std::size_t count) : n(count) {}
    explicit DeviceBuffer(const std::vector<T>& h) : n(h.size()) { tessel::rt::memcpy(p, h.data(), n * sizeof(T)); }
    ~DeviceBuffer() { tessel::rt::free_device(p); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    std::vector<T> to_host() const {
        std::vector<T> h(n);
        tessel::rt::memcpy(h.data(), p, n * sizeof(T));
        return h;
    }
};

// relu(alpha * a + b), fused: one read of a and b, one write, no temporaries.
struct ScaleAddRelu {
    float alpha;
    __host__ __device__ float operator()(float a, float b) const {
        const float v = alpha * a + b;
        return v > 0.f ? v : 0.f;
    }
};

std::vector<float> random_floats(std::size_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(-1.f, 1.f);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

}  // namespace

int main() try {
    std::printf("tessel tour (backend: %s)\n\n", tessel::backend_name);
    if (!tessel::is_available()) {
        std::printf("%s\n", tessel::unavailable_reason().c_str());
        return 1;
    }

    // 1. The device.
    const auto p = tessel::properties();
    const auto v = tessel::versions();
    std::printf("1. device %d: %s\n", p.index, p.name.c_str());
    std::printf("   compute capability %s, %d SMs, %.1f GiB memory (%.1f GiB free), L2 %d KiB\n",
                p.compute_capability().c_str(), p.sm_count, double(p.total_memory) / (1 << 30),
                double(p.free_memory) / (1 << 30), p.l2_cache_bytes / 1024);
    std::printf("   shared memory per block %zu KiB (%zu KiB opt-in), memory bandwidth %.0f GB/s (theoretical%s)\n",
                p.shared_memory_per_block / 1024, p.shared_memory_per_block_optin / 1024, p.theoretical_bandwidth_gbs(),
                p.simulated ? ", nominal for the sim" : "");
    std::printf("   runtime %s, driver %s: %s\n\n", tessel::version_string(v.runtime).c_str(),
                tessel::version_string(v.driver).c_str(), v.verdict.c_str());

    tessel::rt::stream_t stream = tessel::rt::stream_create(true);
    tessel::rt::event_t start = tessel::rt::event_create(), stop = tessel::rt::event_create();

    // 2. A fused expression: y = relu(2a + b) over 1M elements.
    {
        const std::size_t n = 1 << 20;
        const auto ha = random_floats(n, 1), hb = random_floats(n, 2);
        DeviceBuffer<float> a(ha), b(hb), y(n);
        const ScaleAddRelu f{2.f};
        tessel::rt::event_record(start, stream);
        tessel::launch(tessel::kernels::map<ScaleAddRelu, float, float, float>, 2 * p.sm_count, 256, 0, stream, n, f,
                       y.p, a.p, b.p);
        tessel::rt::event_record(stop, stream);
        tessel::rt::stream_synchronize(stream);
        const auto hy = y.to_host();
        std::size_t wrong = 0;
        // The GPU may contract 2a + b into one fused multiply-add: allow one rounding of slack.
        for (std::size_t i = 0; i < n; ++i)
            wrong += !(std::fabs(hy[i] - f(ha[i], hb[i])) <= 0x1p-23f * (2.f * std::fabs(ha[i]) + std::fabs(hb[i])));
        const float ms = tessel::rt::event_elapsed_ms(start, stop);
        std::printf("2. fused expression y = relu(2a + b), %zu floats: %.3f ms, %.1f GB/s, %zu mismatches\n\n", n, ms,
                    3.0 * n * sizeof(float) / (ms * 1e6), wrong);
    }

    // 3. A tiled shared-memory kernel: C = A * B, 255 x 257 x 259 (partial tiles everywhere).
    {
        const int m = 255, n = 257, k = 259;
        using Tile = tessel::kernels::MatmulTile<64, 64, 16, 4, 4>;
        const auto ha = random_floats(std::size_t(m) * k, 3), hb = random_floats(std::size_t(k) * n, 4);
        DeviceBuffer<float> a(ha), b(hb), c(std::size_t(m) * n);
        tessel::rt::event_record(start, stream);
        tessel::launch(tessel::kernels::tiled_matmul<float, float, Tile>, Tile::grid(m, n), Tile::block(), 0, stream, m,
                       n, k, 1.f, a.p, k, b.p, n, 0.f, c.p, n);
        tessel::rt::event_record(stop, stream);
        tessel::rt::stream_synchronize(stream);
        const auto hc = c.to_host();
        double max_err = 0;
        for (int i = 0; i < m; ++i)
            for (int j = 0; j < n; ++j) {
                double s = 0;
                for (int q = 0; q < k; ++q) s += double(ha[std::size_t(i) * k + q]) * hb[std::size_t(q) * n + j];
                max_err = std::fmax(max_err, std::fabs(s - hc[std::size_t(i) * n + j]));
            }
        const float ms = tessel::rt::event_elapsed_ms(start, stop);
        std::printf("3. tiled matmul %dx%dx%d (64x64x16 tiles, 4x4 per thread): %.3f ms, %.2f GFLOP/s, "
                    "max |error| vs double %.2e\n\n", m, n, k, ms, 2.0 * m * n * k / (ms * 1e6), max_err);
    }

    // 4. Memory.
    const auto mem = tessel::rt::memory_info();
    std::printf("4. device memory: %.1f MiB in use of %.1f MiB (runtime figures; the caching allocator's summary\n"
                "   arrives with tessel::Tensor)\n", double(mem.total_bytes - mem.free_bytes) / (1 << 20),
                double(mem.total_bytes) / (1 << 20));

    tessel::rt::event_destroy(start);
    tessel::rt::event_destroy(stop);
    tessel::rt::stream_destroy(stream);
    return 0;
} catch (const std::exception& e) {
    std::fprintf(stderr, "tour failed: %s\n", e.what());
    return 1;
}
