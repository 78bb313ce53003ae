// The README's example, kept compiling and running (ctest: examples.readme).
#include <tessel/tessel.hpp>
#include <tessel/kernels/tiled_matmul.cuh>

#include <cstdio>
#include <vector>

__global__ void scale(float* x, int n, float s) {  // plain CUDA C++: runs on GPU and sim
    int i = int(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n) x[i] *= s;
}

int main() {
    if (!tessel::is_available()) return std::printf("SKIPPED: %s\n", tessel::unavailable_reason().c_str()), 77;
    using Tile = tessel::kernels::MatmulTile<64, 64, 16, 4, 4>;
    int m = 300, n = 200, k = 100;
    auto* a = static_cast<float*>(tessel::rt::malloc_device(m * k * 4));
    auto* b = static_cast<float*>(tessel::rt::malloc_device(k * n * 4));
    auto* c = static_cast<float*>(tessel::rt::malloc_device(m * n * 4));
    std::vector<float> ones(std::size_t(m) * k, 1.f);
    tessel::rt::memcpy(a, ones.data(), m * k * 4);
    tessel::rt::memcpy(b, ones.data(), k * n * 4);
    tessel::launch(tessel::kernels::tiled_matmul<float, float, Tile>, Tile::grid(m, n), Tile::block(), 0, nullptr, m, n,
                   k, 1.f, a, k, b, n, 0.f, c, n);
    tessel::launch(scale, tessel::blocks_for(m * n, 256), 256, 0, nullptr, c, m * n, 0.5f);
    tessel::rt::device_synchronize();
    std::vector<float> h(std::size_t(m) * n);
    tessel::rt::memcpy(h.data(), c, m * n * 4);
    int wrong = 0;
    for (float v : h) wrong += v != 0.5f * float(k);
    std::printf("readme example: %d of %d elements wrong\n", wrong, m * n);
    for (float* p : {a, b, c}) tessel::rt::free_device(p);
    return wrong == 0 ? 0 : 1;
}
