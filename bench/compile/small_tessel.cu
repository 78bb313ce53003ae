// The compile-time benchmark's program (docs/compile-time.md): ones, a fused a * b + 1, a matmul
// kernel launch and exp(x) * 2, written with tessel. bench/compile/small_matx.cu is the same with MatX.
#include <tessel/tessel.hpp>
#include <tessel/kernels/tiled_matmul.cuh>

int main() {
    using namespace tessel;
    if (!is_available()) return 77;
    const int n = 1000;
    auto a = ones<float>({n, n}), b = ones<float>({n, n}), c = empty<float>({n, n});
    (c = a * b + 1).run();
    using Tile = kernels::MatmulTile<64, 64, 16, 4, 4>;
    launch(kernels::tiled_matmul<float, float, Tile>, Tile::grid(n, n), Tile::block(), 0, nullptr, n, n, n, 1.f, a.data(), n,
           b.data(), n, 0.f, c.data(), n);
    (c = exp(a) * 2).run();
    return c.to_vector().front() > 0 ? 0 : 1;
}
