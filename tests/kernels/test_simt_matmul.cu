// simt_matmul (fp32/fp64, double-buffered shared memory, register tiles) against a double-precision
// host reference: integer-valued inputs whose products and sums are exact, so the result must equal
// the reference exactly; random reals within fp32's accumulation bound; M, N, K off every tile,
// leading dimensions padded with NaN that must never be read, outputs poisoned (their padding
// checked untouched), the vector and the scalar load paths, broadcast batches.
#include <tessel/kernels/simt_matmul.cuh>
#include <tessel/runtime/device.hpp>
#include <tessel/runtime/launch.hpp>

#include <limits>

#include "../support/device_array.hpp"

using tessel::testing::DeviceArray;

namespace {

using F32Large = tessel::kernels::SimtTile<float, 128, 128, 8, 8, 8>;
using F32Small = tessel::kernels::SimtTile<float, 64, 64, 16, 4, 4>;
using F64 = tessel::kernels::SimtTile<double, 64, 64, 8, 4, 4>;

struct Case {
    int m, n, k;
    int pad_a = 0, pad_b = 0, pad_c = 0;
    double alpha = 1, beta = 0;
    int batches = 1;
    bool broadcast_b = false;  // B's batch stride 0
};

template <class T, class Tile, bool Aligned>
void run_case(const Case& c, bool integers, std::uint64_t seed) {
    // Aligned kernels need ld multiples of the vector width; the scalar kernel takes any.
    constexpr int V = Tile::v;
    const int lda = Aligned ? (c.k + V - 1) / V * V + c.pad_a : c.k + c.pad_a;
    const int ldb = Aligned ? (c.n + V - 1) / V * V + c.pad_b : c.n + c.pad_b;
    const int ldc = c.n + c.pad_c;
    INFO((sizeof(T) == 4 ? "fp32 " : "fp64 ") << c.m << "x" << c.n << "x" << c.k << " lda " << lda << " ldb " << ldb << " ldc " << ldc
                                          << " alpha " << c.alpha << " beta " << c.beta << " batches " << c.batches
                                          << (c.broadcast_b ? " (b broadcast)" : "") << " tile " << Tile::bm << "x" << Tile::bn << "x"
                                          << Tile::bk << (Aligned ? " vector" : " scalar"));
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int> ints(-8, 8);
    std::uniform_real_distribution<double> reals(-1, 1);
    auto draw = [&] { return integers ? double(ints(rng)) : reals(rng); };
    const T nan = std::numeric_limits<T>::quiet_NaN();
    const std::int64_t sa = std::int64_t(c.m) * lda, sb = c.broadcast_b ? 0 : std::int64_t(c.k) * ldb, sc = std::int64_t(c.m) * ldc;
    const int b_copies = c.broadcast_b ? 1 : c.batches;
    std::vector<T> a(std::size_t(sa) * c.batches, nan), b(std::size_t(c.k) * ldb * b_copies, nan), c0(std::size_t(sc) * c.batches, nan);
    for (std::size_t z = 0; z < std::size_t(c.batches); ++z)
        for (int i = 0; i < c.m; ++i)
            for (int p = 0; p < c.k; ++p) a[z * sa + std::size_t(i) * lda + p] = T(draw());
    for (std::size_t z = 0; z < std::size_t(b_copies); ++z)
        for (int p = 0; p < c.k; ++p)
            for (int j = 0; j < c.n; ++j) b[z * std::size_t(c.k) * ldb + std::size_t(p) * ldb + j] = T(draw());
    if (c.beta != 0)
        for (std::size_t z = 0; z < std::size_t(c.batches); ++z)
            for (int i = 0; i < c.m; ++i)
                for (int j = 0; j < c.n; ++j) c0[z * sc + std::size_t(i) * ldc + j] = T(ints(rng));

    DeviceArray<T> da(a), db(b), dc(c0);
    auto kernel = tessel::kernels::simt_matmul<T, Tile, Aligned>;
    tessel::kernels::GemmEpilogue<T, T> epilogue;
    epilogue.alpha = T(c.alpha);
    epilogue.beta = T(c.beta);
    tessel::launch(kernel, Tile::grid(c.m, c.n, c.batches), Tile::block(), 0, nullptr, c.m, c.n, c.k, da.data(), lda, sa, db.data(),
                   ldb, sb, dc.data(), ldc, sc, c.batches, epilogue);
    const auto out = dc.download();

    std::vector<T> got;
    std::vector<double> want, tol;
    std::size_t pad_written = 0;
    for (std::size_t z = 0; z < std::size_t(c.batches); ++z) {
        const std::size_t zb = c.broadcast_b ? 0 : z;
        for (int i = 0; i < c.m; ++i) {
            for (int j = 0; j < c.n; ++j) {
                double s = 0, mag = 0;
                for (int p = 0; p < c.k; ++p) {
                    const double x = double(a[z * sa + std::size_t(i) * lda + p]) * double(b[zb * std::size_t(c.k) * ldb + std::size_t(p) * ldb + j]);
                    s += x;
                    mag += std::fabs(x);
                }
                const double prior = c.beta != 0 ? c.beta * double(c0[z * sc + std::size_t(i) * ldc + j]) : 0.0;
                got.push_back(out[z * sc + std::size_t(i) * ldc + j]);
                want.push_back(c.alpha * s + prior);
                // Integers: every product and partial sum is an integer below 2^24, exact in fp32 and
                // fp64. Reals: k fmas in T err by at most (k + 2) u sum|ab| (first order) plus the
                // alpha/beta operations.
                const double u = sizeof(T) == 4 ? 0x1p-24 : 0x1p-53;
                tol.push_back(integers ? 0.0 : (c.k + 2) * u * (std::fabs(c.alpha) * mag + std::fabs(prior)) + 1e-300);
            }
            for (int j = c.n; j < ldc; ++j) pad_written += !std::isnan(double(out[z * sc + std::size_t(i) * ldc + j]));
        }
    }
    tessel::testing::check_close(got, want, tol, "simt_matmul");
    CHECK(pad_written == 0);
}

struct Shape {
    int m, n, k;
};
const Shape shapes[] = {{1, 1, 1}, {2, 7, 16}, {7, 2, 33}, {16, 16, 16}, {33, 127, 7}, {127, 33, 200}, {200, 200, 127}, {16, 200, 2},
                        {127, 1, 33}, {130, 129, 9}};

}  // namespace

TEST_CASE("simt_matmul equals the exact product of integer-valued fp32 and fp64 inputs", "[kernels][matmul][simt]") {
    if (tessel::device_count() == 0) return;
    std::uint64_t seed = 1;
    for (const Shape& s : shapes) {
        run_case<float, F32Large, true>({s.m, s.n, s.k, 4, 0, 3}, true, seed++);
        run_case<float, F32Small, false>({s.m, s.n, s.k, 1, 2, 0, 2, -1}, true, seed++);
        run_case<double, F64, true>({s.m, s.n, s.k, 0, 2, 1, 1, 0.5}, true, seed++);
        run_case<double, F64, false>({s.m, s.n, s.k}, true, seed++);
    }
    // Batches: separate operands, B broadcast, with a prior C.
    run_case<float, F32Small, true>({37, 45, 29, 0, 0, 0, 1, 1, 5}, true, seed++);
    run_case<float, F32Large, true>({37, 45, 29, 4, 4, 1, 1, 0, 3, true}, true, seed++);
    run_case<double, F64, false>({9, 70, 13, 0, 0, 0, 1, 0, 4, true}, true, seed++);
    run_case<float, F32Small, true>({699, 150, 29}, true, seed++);  // 11 row tiles by 3 column tiles
}

#ifndef TESSEL_TEST_UNDER_TSAN  // [slow_under_tsan]: not built under ThreadSanitizer (tests/CMakeLists.txt)
TEST_CASE("simt_matmul of random reals stays within fp32 and fp64 accumulation bounds", "[kernels][matmul][simt][slow_under_tsan]") {
    if (tessel::device_count() == 0) return;
    run_case<float, F32Large, true>({515, 1029, 263}, false, 11);
    run_case<float, F32Small, false>({77, 45, 300, 3, 1, 5, 0.5, 0.25}, false, 12);
    run_case<double, F64, true>({201, 133, 257}, false, 13);
}
#endif  // TESSEL_TEST_UNDER_TSAN
