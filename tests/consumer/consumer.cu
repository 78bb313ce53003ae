// A user's program: its own kernel plus one of tessel's, launched through tessel::launch.
#include <tessel/kernels/tiled_matmul.cuh>
#include <tessel/runtime/device.hpp>
#include <tessel/runtime/launch.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

__global__ void scale(float* x, int n, float s) {
    const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n) x[i] *= s;
}

int main() try {
    if (!tessel::is_available()) {
        std::printf("SKIPPED: %s\n", tessel::unavailable_reason().c_str());
        return 77;
    }
    const int m = 37, n = 41, k = 29;
    std::vector<float> a(std::size_t(m) * k), b(std::size_t(k) * n), c(std::size_t(m) * n);
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = float(i % 7) - 3.f;
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = float(i % 5) - 2.f;
    auto* da = static_cast<float*>(tessel::rt::malloc_device(a.size() * sizeof(float)));
    auto* db = static_cast<float*>(tessel::rt::malloc_device(b.size() * sizeof(float)));
    auto* dc = static_cast<float*>(tessel::rt::malloc_device(c.size() * sizeof(float)));
    tessel::rt::memcpy(da, a.data(), a.size() * sizeof(float));
    tessel::rt::memcpy(db, b.data(), b.size() * sizeof(float));
    using Tile = tessel::kernels::MatmulTile<32, 32, 8, 2, 2>;
    tessel::launch(tessel::kernels::tiled_matmul<float, float, Tile>, Tile::grid(m, n), Tile::block(), 0, nullptr, m, n, k,
                   1.f, da, k, db, n, 0.f, dc, n);
    tessel::launch(scale, tessel::blocks_for(c.size(), 128), 128, 0, nullptr, dc, int(c.size()), 2.f);
    tessel::rt::memcpy(c.data(), dc, c.size() * sizeof(float));
    int wrong = 0;  // small integers: the products are exact in float
    for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j) {
            float s = 0;
            for (int q = 0; q < k; ++q) s += a[std::size_t(i) * k + q] * b[std::size_t(q) * n + j];
            wrong += c[std::size_t(i) * n + j] != 2.f * s;
        }
    for (float* p : {da, db, dc}) tessel::rt::free_device(p);
    std::printf("consumer (%s backend, %s): %d wrong of %d\n", tessel::backend_name, tessel::properties().name.c_str(), wrong,
                m * n);
    return wrong == 0 ? 0 : 1;
} catch (const std::exception& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
}
