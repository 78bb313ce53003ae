// mma_matmul (ldmatrix + mma.sync + cp.async pipeline) against a double-precision host reference,
// for each input type (bf16, fp16, fp32 on TF32 tensor cores, int8): integer-valued inputs that the
// accumulator (fp32 or int32) sums exactly, so the result must equal the reference rounded once to
// the output type (an int8 output: scaled by powers of two, rounded to nearest even, saturated);
// random reals within a stated bound; M, N, K not multiples of the tile, leading dimensions padded
// with values that must never be read (NaN, or 127 for int8), and C poisoned (and its padding
// checked untouched) so an unwritten or stray element fails.
#include <tessel/kernels/mma_matmul.cuh>
#include <tessel/runtime/device.hpp>
#include <tessel/runtime/launch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "../reference/matmul.hpp"
#include "../support/device_array.hpp"

using tessel::testing::DeviceArray;

namespace {

using Small = tessel::kernels::MmaTile<64, 64, 2, 2, 3>;     // 4 warps of 32 x 32, 3 stages
using Large = tessel::kernels::MmaTile<128, 128, 2, 2, 4>;   // 4 warps of 64 x 64, 4 stages
using Wide = tessel::kernels::MmaTile<64, 128, 1, 4, 2>;     // 4 warps of 64 x 32, 2 stages

template <class T> constexpr double unit_roundoff() { return 0x1p-24; }
template <> constexpr double unit_roundoff<__half>() { return 0x1p-11; }
template <> constexpr double unit_roundoff<__nv_bfloat16>() { return 0x1p-8; }

template <class T>
const char* type_name() {
    if constexpr (std::is_same_v<T, float>) return "fp32";
    else if constexpr (std::is_same_v<T, __half>) return "fp16";
    else if constexpr (std::is_same_v<T, std::int8_t>) return "int8";
    else if constexpr (std::is_same_v<T, int>) return "int32";
    else return "bf16";
}

// The value written where nothing may be read or written: NaN, or for integers a value the checks
// look for.
template <class T>
T poison() {
    if constexpr (std::is_same_v<T, std::int8_t>) return std::int8_t(127);
    else if constexpr (std::is_same_v<T, int>) return 0x5a5a5a5a;
    else return tessel::testing::from_double<T>(std::numeric_limits<double>::quiet_NaN());
}
template <class T>
bool is_poison(T x) {
    if constexpr (std::is_integral_v<T>) return x == poison<T>();
    else return std::isnan(tessel::testing::to_double(x));
}

// The output's value of an exact product: rounded once; int8 rounds to nearest even and saturates.
template <class OutT>
double rounded(double v) {
    if constexpr (std::is_same_v<OutT, std::int8_t>) return std::clamp(std::nearbyint(v), -128.0, 127.0);
    else if constexpr (std::is_same_v<OutT, int>) return v;
    else return tessel::testing::to_double(tessel::testing::from_double<OutT>(v));
}

enum class Values { integers, reals };

struct Case {
    int m, n, k;
    int pad_a = 0, pad_b = 0, pad_c = 0;  // extra columns beyond K, N, N (kept to whole 16-byte chunks for A, B)
    float alpha = 1.f, beta = 0.f;
    bool col_scale = false;               // a per-column scale (powers of two) in the epilogue
    int grid_rows = 0;                    // > 0: only this many block rows, each looping over row tiles (as past 65535 tiles)
};

// BColumns: B stored by columns (B^T row-major [N][ldb], a linear layer's weight).
template <class T, class OutT, class Tile, bool BColumns = false>
void run_case(const Case& c, Values values, std::uint64_t seed) {
    using tessel::testing::from_double;
    using tessel::testing::to_double;
    constexpr int V = int(16 / sizeof(T));  // elements per 16-byte chunk
    constexpr bool int8 = std::is_same_v<T, std::int8_t>, tf32 = std::is_same_v<T, float>;
    using EpAcc = std::conditional_t<std::is_same_v<OutT, int>, int, float>;
    const int lda = (c.k + V - 1) / V * V + c.pad_a, ldc = c.n + c.pad_c;
    const int ldb = BColumns ? (c.k + V - 1) / V * V + c.pad_b : (c.n + V - 1) / V * V + c.pad_b;
    const std::string what = std::string(type_name<T>()) + " -> " + type_name<OutT>() + " " + std::to_string(c.m) + "x" +
                             std::to_string(c.n) + "x" + std::to_string(c.k) + " lda " + std::to_string(lda) + " ldb " +
                             std::to_string(ldb) + " ldc " + std::to_string(ldc) + " alpha " + std::to_string(c.alpha) +
                             " beta " + std::to_string(c.beta) + " tile " + std::to_string(Tile::bm) + "x" +
                             std::to_string(Tile::bn) + "/" + std::to_string(Tile::stages) + (BColumns ? ", B by columns" : "") +
                             (c.col_scale ? ", column scales" : "") +
                             (c.grid_rows ? ", " + std::to_string(c.grid_rows) + " block rows" : "");
    INFO(what);
    std::mt19937_64 rng(seed);
    // int8 takes its whole range: int32 sums of K <= 2^17 such products are exact.
    std::uniform_int_distribution<int> ints(int8 ? -128 : -4, int8 ? 127 : 4);
    std::uniform_real_distribution<double> reals(-1.0, 1.0);
    auto draw = [&] { return values == Values::integers ? double(ints(rng)) : reals(rng); };
    const T nan = poison<T>();

    // Operands with NaN in the padding columns: a kernel that reads past K or N poisons C.
    std::vector<T> a(std::size_t(c.m) * lda, nan), b(std::size_t(BColumns ? c.n : c.k) * ldb, nan);
    std::vector<double> ad(std::size_t(c.m) * c.k), bd(std::size_t(c.k) * c.n), cd(std::size_t(c.m) * c.n);
    // tf32 with integer values: A = +-(1 + f 2^-12), f in 0..3, which tf32 (10 mantissa bits) must
    // round to nearest, ties away from zero (cvt.rna): to a multiple of 2^-10 the reference computes
    // here. Truncating (what the tensor cores do to unrounded fp32 bits) fails for f = 2, 3. The
    // rounded products with B's integers (|x| <= 8, multiples of 2^-10) sum exactly in fp32.
    const bool off_grid = tf32 && values == Values::integers;
    std::uniform_int_distribution<int> quarter(0, 3), sign(0, 1);
    for (int i = 0; i < c.m; ++i)
        for (int p = 0; p < c.k; ++p) {
            const double x = off_grid ? (sign(rng) ? -1 : 1) * (1 + quarter(rng) * 0x1p-12) : draw();
            a[std::size_t(i) * lda + p] = from_double<T>(x);
            ad[std::size_t(i) * c.k + p] = off_grid ? std::copysign(std::floor(std::fabs(x) * 1024 + 0.5) / 1024, x)
                                                    : to_double(a[std::size_t(i) * lda + p]);
        }
    for (int p = 0; p < c.k; ++p)
        for (int j = 0; j < c.n; ++j) {
            T& x = BColumns ? b[std::size_t(j) * ldb + p] : b[std::size_t(p) * ldb + j];
            x = from_double<T>(draw());
            bd[std::size_t(p) * c.n + j] = to_double(x);
        }
    // C: the prior values where beta reads them, NaN everywhere else (padding always).
    std::vector<OutT> c0(std::size_t(c.m) * ldc, poison<OutT>());
    std::uniform_int_distribution<int> small(-4, 4);
    if (c.beta != 0)
        for (int i = 0; i < c.m; ++i)
            for (int j = 0; j < c.n; ++j) {
                c0[std::size_t(i) * ldc + j] = from_double<OutT>(double(small(rng)));
                cd[std::size_t(i) * c.n + j] = to_double(c0[std::size_t(i) * ldc + j]);
            }
    // Column scales 2^-9 .. 2^-4: exact in fp32, so scaled integer sums stay exact until the rounding to OutT.
    std::vector<float> scale(std::size_t(c.n), 1.f);
    if (c.col_scale)
        for (auto& x : scale) x = std::ldexp(1.f, -4 - int(rng() % 6));
    auto ref = tessel::reference::matmul(c.m, c.n, c.k, c.alpha, ad, bd, c.beta, cd);
    if (c.col_scale)  // alpha * scale * sum (+ beta prior): the reference with the scale folded into alpha's part
        for (int i = 0; i < c.m; ++i)
            for (int j = 0; j < c.n; ++j) {
                const std::size_t o = std::size_t(i) * c.n + j;
                const double prior = c.beta == 0 ? 0.0 : double(c.beta) * cd[o];
                ref.c[o] = (ref.c[o] - prior) * scale[j] + prior;
                ref.bound[o] = (ref.bound[o] - std::fabs(prior)) * scale[j] + std::fabs(prior);
            }

    DeviceArray<T> da(a), db(b);
    DeviceArray<OutT> dc(c0);
    DeviceArray<float> dscale(scale);
    using Epilogue = tessel::kernels::GemmEpilogue<EpAcc, OutT, int8 && !std::is_same_v<OutT, int>>;  // scaled: int8 dequantised
    auto kernel = tessel::kernels::mma_matmul<T, OutT, Tile, BColumns, Epilogue>;
    tessel::rt::set_max_dynamic_smem(kernel, int(Tile::smem_bytes()));
    Epilogue epilogue;
    epilogue.alpha = EpAcc(c.alpha);
    epilogue.beta = EpAcc(c.beta);
    if (c.col_scale) epilogue.col_scale = dscale.data();
    dim3 grid = Tile::grid(c.m, c.n);
    if (c.grid_rows) grid.y = unsigned(c.grid_rows);
    tessel::launch(kernel, grid, Tile::block(), Tile::smem_bytes(), nullptr, c.m, c.n, c.k, da.data(), lda,
                   std::int64_t(0), db.data(), ldb, std::int64_t(0), dc.data(), ldc, std::int64_t(0), 1, epilogue);
    const auto out = dc.download();

    std::vector<OutT> got(std::size_t(c.m) * c.n);
    std::vector<double> want(got.size()), tol(got.size());
    std::size_t pad_written = 0;
    for (int i = 0; i < c.m; ++i) {
        for (int j = 0; j < c.n; ++j) {
            const std::size_t o = std::size_t(i) * c.n + j;
            got[o] = out[std::size_t(i) * ldc + j];
            if (values == Values::integers) {
                // Integer products and sums below 2^24 are exact in fp32 (and in int32 below 2^31)
                // whatever the order, and alpha, beta and the scales are powers of two, so the only
                // rounding is the final one to OutT: the result equals the rounded reference.
                want[o] = rounded<OutT>(ref.c[o]);
                tol[o] = 0;
            } else if (tf32) {
                // Each input rounded to tf32 (10 mantissa bits, nearest: relative error 2^-11), so each
                // product is off by at most 2 * 2^-11 relatively, plus fp32 accumulation as below.
                want[o] = ref.c[o];
                tol[o] = (2 * 0x1p-11 + (c.k + 2) * 0x1p-24) * ref.bound[o] + unit_roundoff<OutT>() * std::fabs(ref.c[o]) + 1e-30;
            } else {
                // fp32 accumulation of k exact products (16-bit inputs multiply exactly in fp32):
                // at most k * 2^-24 * sum|a b| (first order), plus alpha/beta's two roundings and
                // the final rounding to OutT.
                want[o] = ref.c[o];
                tol[o] = (c.k + 2) * 0x1p-24 * ref.bound[o] + unit_roundoff<OutT>() * std::fabs(ref.c[o]) + 1e-30;
            }
        }
        for (int j = c.n; j < ldc; ++j) pad_written += !is_poison(out[std::size_t(i) * ldc + j]);
    }
    tessel::testing::check_close(got, want, tol, "mma_matmul " + what);
    CHECK(pad_written == 0);
}

struct Shape {
    int m, n, k;
};
// {1, 2, 7, 16, 33, 127, 200} crossed sparsely: every dimension below, at and past one tile, with
// K tails inside a 16-byte chunk, inside a k16 step and inside a 32-deep slab.
const Shape shapes[] = {{1, 1, 1},   {2, 7, 16},    {7, 2, 33},    {16, 16, 16},  {33, 127, 7},  {127, 33, 200},
                        {200, 200, 127}, {16, 200, 2}, {127, 1, 33}, {65, 129, 100}, {130, 70, 64}};

}  // namespace

// Under ThreadSanitizer fp16 only: bf16 takes the same loads, barriers and pipeline stages (2-byte
// elements, the same tiles), so a race would show in either; the instruction differs, which the
// other presets check.
#ifdef TESSEL_TEST_UNDER_TSAN
#define MMA_16BIT_TYPES __half
#else
#define MMA_16BIT_TYPES __nv_bfloat16, __half
#endif
TEMPLATE_TEST_CASE("mma_matmul equals the exact product of integer-valued bf16/fp16 inputs", "[kernels][matmul][mma]",
                   MMA_16BIT_TYPES) {
    if (tessel::device_count() == 0) return;
    std::uint64_t seed = 1;
    for (std::size_t i = 0; i < std::size(shapes); i += tessel::testing::sweep_step()) {
        const Shape& s = shapes[i];
        run_case<TestType, float, Small>({s.m, s.n, s.k}, Values::integers, seed++);
        run_case<TestType, TestType, Large>({s.m, s.n, s.k, 8, 0, 3, 2.f, -1.f}, Values::integers, seed++);
        run_case<TestType, float, Small, true>({s.m, s.n, s.k, 0, 8, 1, 1.f, 0.5f}, Values::integers, seed++);
    }
    run_case<TestType, float, Wide>({129, 257, 95, 0, 8, 1, 1.f, 1.f}, Values::integers, seed++);
    run_case<TestType, TestType, Large, true>({300, 70, 40, 0, 8, 1, 1.f, 1.f, false, 1}, Values::integers, seed++);
    // 11 row tiles: a whole group of 8 (grouped_tile) and a last group of 3, over 3 column tiles.
    run_case<TestType, TestType, Small, true>({699, 150, 40}, Values::integers, seed++);
}

#ifndef TESSEL_TEST_UNDER_TSAN  // [slow_under_tsan]: not built under ThreadSanitizer (tests/CMakeLists.txt)
TEMPLATE_TEST_CASE("mma_matmul of random reals stays within fp32 accumulation's bound", "[kernels][matmul][mma][slow_under_tsan]",
                   __nv_bfloat16, __half) {
    if (tessel::device_count() == 0) return;
    run_case<TestType, float, Large>({515, 1029, 263}, Values::reals, 11);
    run_case<TestType, TestType, Small>({77, 45, 300, 0, 16, 5, 0.5f, 0.25f}, Values::reals, 12);
    run_case<TestType, float, Wide>({3, 130, 1000}, Values::reals, 13);
    run_case<TestType, TestType, Large, true>({300, 259, 77}, Values::reals, 14);
}
#endif  // TESSEL_TEST_UNDER_TSAN

TEST_CASE("mma_matmul on int8 tensor cores equals the exact int32 product, and requantises to int8", "[kernels][matmul][mma]") {
    if (tessel::device_count() == 0) return;
    std::uint64_t seed = 100;
    for (std::size_t i = 0; i < std::size(shapes); i += tessel::testing::sweep_step()) {
        const Shape& s = shapes[i];
        run_case<std::int8_t, int, Small, true>({s.m, s.n, s.k}, Values::integers, seed++);
        run_case<std::int8_t, int, Large, true>({s.m, s.n, s.k, 16, 32, 3, 1.f, 1.f}, Values::integers, seed++);
        // acc * 2^-7 * 2^-4..-9, rounded to nearest even and saturated: ties and clamps both occur.
        run_case<std::int8_t, std::int8_t, Small, true>({s.m, s.n, s.k, 0, 16, 5, 0x1p-7f, 0.f, true}, Values::integers, seed++);
        run_case<std::int8_t, float, Small, true>({s.m, s.n, s.k, 0, 0, 1, 0.5f, 2.f, true}, Values::integers, seed++);
    }
    run_case<std::int8_t, __nv_bfloat16, Wide, true>({129, 257, 300, 0, 16, 1, 0x1p-10f, 0.f, true}, Values::integers, seed++);
    run_case<std::int8_t, int, Small, true>({200, 33, 70, 0, 0, 5, 1.f, 1.f, false, 1}, Values::integers, seed++);
    run_case<std::int8_t, int, Small, true>({699, 150, 64}, Values::integers, seed++);  // 8 + 3 row tiles (grouped_tile)
}

#if defined(TESSEL_BACKEND_SIM)
// The XOR swizzle of A, B^T and k-major B (mma_detail::a_offset, b_offset) under the sim's bank
// model: every 8x8 matrix ldmatrix reads takes one wavefront, for each tile the dispatch or the
// tests use, each input type and both B layouts.
TEST_CASE("mma_matmul reads its shared-memory tiles with ldmatrix without bank conflicts", "[kernels][matmul][mma][sim]") {
    std::uint64_t seed = 400;
    auto conflict_free = [&](auto run) {
        const tessel::sim::LdmatrixTraffic before = tessel::sim::ldmatrix_traffic();
        run();
        const tessel::sim::LdmatrixTraffic after = tessel::sim::ldmatrix_traffic();
        CHECK(after.matrices > before.matrices);
        CHECK(after.wavefronts - before.wavefronts == after.matrices - before.matrices);
    };
    const Case c{65, 129, 100};
    conflict_free([&] { run_case<__nv_bfloat16, float, Small>(c, Values::integers, seed++); });
    conflict_free([&] { run_case<__nv_bfloat16, float, Large>(c, Values::integers, seed++); });
    conflict_free([&] { run_case<__half, float, Wide>(c, Values::integers, seed++); });
    conflict_free([&] { run_case<__nv_bfloat16, float, Small, true>(c, Values::integers, seed++); });
    conflict_free([&] { run_case<__half, float, Large, true>(c, Values::integers, seed++); });
    conflict_free([&] { run_case<std::int8_t, int, Small, true>(c, Values::integers, seed++); });
    conflict_free([&] { run_case<std::int8_t, int, Wide, true>(c, Values::integers, seed++); });
    conflict_free([&] { run_case<float, float, Large, true>(c, Values::integers, seed++); });
}
#endif

TEST_CASE("grouped_tile gives every grid position one tile, walking a group's rows first", "[kernels][matmul]") {
    for (unsigned group : {1u, 3u, 8u})
        for (unsigned gx : {1u, 2u, 5u, 64u})
            for (unsigned gy : {1u, 7u, 8u, 9u, 17u}) {
                INFO("grid " << gx << " x " << gy << ", groups of " << group << " rows");
                std::vector<int> taken(std::size_t(gx) * gy, 0);
                for (unsigned y = 0; y < gy; ++y)
                    for (unsigned x = 0; x < gx; ++x) {
                        const tessel::GridTile t = tessel::grouped_tile(x, y, gx, gy, group);
                        REQUIRE((t.col >= 0 && unsigned(t.col) < gx && t.row >= 0 && unsigned(t.row) < gy));
                        ++taken[std::size_t(t.row) * gx + t.col];
                    }
                CHECK(std::count(taken.begin(), taken.end(), 1) == std::ptrdiff_t(taken.size()));
                // The first blocks of the launch order (x fastest) take column 0's first rows.
                const unsigned first_group = std::min(group, gy);
                for (unsigned i = 0; i < first_group; ++i) {
                    const tessel::GridTile t = tessel::grouped_tile(i % gx, i / gx, gx, gy, group);
                    CHECK(t.col == 0);
                    CHECK(t.row == int(i));
                }
            }
}

TEST_CASE("mma_matmul on TF32 tensor cores: exact for tf32-representable inputs, within tf32's bound for reals",
          "[kernels][matmul][mma]") {
    if (tessel::device_count() == 0) return;
    std::uint64_t seed = 200;
    for (std::size_t i = 0; i < std::size(shapes); i += tessel::testing::sweep_step()) {
        const Shape& s = shapes[i];
        run_case<float, float, Small, true>({s.m, s.n, s.k}, Values::integers, seed++);
        run_case<float, float, Large, true>({s.m, s.n, s.k, 4, 8, 3, 2.f, -1.f}, Values::integers, seed++);
    }
    run_case<float, float, Wide, true>({33, 200, 777, 0, 4, 1, 0.5f, 0.25f}, Values::reals, seed++);
    run_case<float, float, Small, true>({130, 40, 50, 0, 0, 1, 1.f, 1.f, false, 1}, Values::integers, seed++);
}

#ifndef TESSEL_TEST_UNDER_TSAN  // [slow_under_tsan]: not built under ThreadSanitizer (tests/CMakeLists.txt)
// 136M multiply-adds: about 6 minutes under ThreadSanitizer, where the small real case above runs.
TEST_CASE("mma_matmul on TF32 tensor cores: random reals over many tiles", "[kernels][matmul][mma][slow_under_tsan]") {
    if (tessel::device_count() == 0) return;
    run_case<float, float, Large, true>({515, 1029, 263}, Values::reals, 300);
}
#endif  // TESSEL_TEST_UNDER_TSAN
