// tiled_matmul against a double-precision host reference, on odd sizes that leave partial tiles in
// every dimension, with the output poisoned first so an unwritten element fails.
#include <tessel/kernels/tiled_matmul.cuh>
#include <tessel/runtime/launch.hpp>

#include "../reference/matmul.hpp"
#include "../support/device_array.hpp"

using tessel::testing::DeviceArray;

namespace {

using Tile64 = tessel::kernels::MatmulTile<64, 64, 16, 4, 4>;
using Tile32 = tessel::kernels::MatmulTile<32, 32, 8, 2, 2>;

// Unit roundoff of the accumulation type, and of the stored output type.
template <class T> constexpr double unit_roundoff() { return 0x1p-24; }
template <> constexpr double unit_roundoff<double>() { return 0x1p-53; }
template <> constexpr double unit_roundoff<__half>() { return 0x1p-11; }

template <class T, class Acc, class Tile>
void run_case(int m, int n, int k, double alpha, double beta, std::uint64_t seed) {
    using tessel::testing::random_vector;
    using tessel::testing::to_double;
    auto a = random_vector<T>(std::size_t(m) * k, seed);
    auto b = random_vector<T>(std::size_t(k) * n, seed + 1);
    auto c0 = random_vector<T>(std::size_t(m) * n, seed + 2);
    std::vector<double> ad(a.size()), bd(b.size()), cd(c0.size());
    for (std::size_t i = 0; i < a.size(); ++i) ad[i] = to_double(a[i]);
    for (std::size_t i = 0; i < b.size(); ++i) bd[i] = to_double(b[i]);
    for (std::size_t i = 0; i < c0.size(); ++i) cd[i] = to_double(c0[i]);
    const auto ref = tessel::reference::matmul(m, n, k, alpha, ad, bd, beta, cd);

    DeviceArray<T> da(a), db(b), dc(c0.size());
    if (beta == 0) dc.poison();  // never read when beta == 0: NaN there must not leak into C
    else dc.upload(c0);
    tessel::launch(tessel::kernels::tiled_matmul<T, Acc, Tile>, Tile::grid(m, n), Tile::block(), 0, nullptr, m, n, k,
                   Acc(alpha), da.data(), k, db.data(), n, Acc(beta), dc.data(), n);

    // Accumulating k products in Acc errs by at most ~k*u_acc*bound (Higham's gamma_k, first order);
    // storing to T adds one rounding of u_T*|c|. Factor 2 covers the alpha/beta multiply-adds.
    std::vector<double> tol(ref.c.size());
    for (std::size_t i = 0; i < tol.size(); ++i)
        tol[i] = 2.0 * (k + 2) * unit_roundoff<Acc>() * ref.bound[i] + unit_roundoff<T>() * std::fabs(ref.c[i]) + 1e-30;
    tessel::testing::check_close(dc.download(), ref.c, tol,
                                 "tiled_matmul " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) +
                                     " alpha " + std::to_string(alpha) + " beta " + std::to_string(beta));
}

struct Shape {
    int m, n, k;
};
const Shape shapes[] = {{1, 1, 1}, {17, 33, 9}, {100, 37, 129}, {65, 64, 63}, {130, 131, 47}};

}  // namespace

TEST_CASE("tiled_matmul<float> matches the double reference on odd shapes", "[kernels][matmul]") {
    std::uint64_t seed = 100;
    for (const Shape& s : shapes) {
        run_case<float, float, Tile64>(s.m, s.n, s.k, 1.0, 0.0, seed++);
        run_case<float, float, Tile32>(s.m, s.n, s.k, -0.5, 1.5, seed++);
    }
}

TEST_CASE("tiled_matmul<double> matches the double reference on odd shapes", "[kernels][matmul]") {
    std::uint64_t seed = 200;
    for (const Shape& s : shapes) {
        run_case<double, double, Tile64>(s.m, s.n, s.k, 1.0, 0.0, seed++);
        run_case<double, double, Tile32>(s.m, s.n, s.k, 2.0, -1.0, seed++);
    }
}

TEST_CASE("tiled_matmul<__half> with float accumulation matches the reference", "[kernels][matmul]") {
    std::uint64_t seed = 300;
    for (const Shape& s : shapes) run_case<__half, float, Tile64>(s.m, s.n, s.k, 1.0, 0.0, seed++);
}

#ifndef TESSEL_TEST_UNDER_TSAN  // [slow_under_tsan]: not built under ThreadSanitizer (tests/CMakeLists.txt)
// More row tiles than grid.y holds (65535): the grid stops at 65535 and each block walks row tiles
// (before, m > 65535 * TileM launched a grid.y the device refuses). One-row tiles keep it small:
// 65535 + 37 rows, so blocks 0..36 take a second tile and the last one is partial in n.
TEST_CASE("tiled_matmul with more row tiles than grid.y holds", "[kernels][matmul][slow_under_tsan]") {
    using TileRow = tessel::kernels::MatmulTile<1, 32, 8, 1, 1>;
    const int m = 65535 + 37;
    CHECK(TileRow::grid(m, 33).y == 65535u);
    CHECK(TileRow::grid(m, 33).x == 2u);
    run_case<float, float, TileRow>(m, 33, 5, 1.0, 0.0, 91);
}
#endif  // TESSEL_TEST_UNDER_TSAN
