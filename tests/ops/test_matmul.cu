// tessel::matmul against a double-precision host product, on both policies (hand-written kernels and
// cuBLAS, the sim's stand-in on the sim) and every dtype: integer-valued inputs that every path
// accumulates exactly (so results equal the reference rounded to the dtype), random reals within a
// stated bound, sizes that are not multiples of any tile, transposed and strided views of each
// operand and of the output, broadcast batches, 1-D operands, K = 0, alpha/beta, outputs poisoned
// first; then the bad input each must refuse with a message naming it.
#include <tessel/ops/matmul.hpp>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <random>
#include <span>

#include "../support/device_array.hpp"
#include "../support/random_tensor.hpp"
#include "matmul_support.hpp"

using tessel::MatmulOptions;
using tessel::MatmulPolicy;
using tessel::Shape;
using tessel::Tensor;
using namespace tessel::testing::matmul;

namespace {

template <class T>
constexpr double output_roundoff() {
    if constexpr (std::is_same_v<T, double>) return 0x1p-53;
    else if constexpr (std::is_same_v<T, float>) return 0x1p-24;
    else if constexpr (std::is_same_v<T, __half>) return 0x1p-11;
    else return 0x1p-8;
}
template <class T>
constexpr double accumulate_roundoff() {  // fp64 accumulates in fp64, everything else in fp32
    return std::is_same_v<T, double> ? 0x1p-53 : 0x1p-24;
}

// Compares out (a device tensor of the reference's shape) with alpha * ref + beta * prior.
template <class T>
void check_result(const Tensor<T>& out, const Reference& ref, bool integers, double alpha, double beta, const std::vector<double>& prior,
                  const std::string& what) {
    REQUIRE(out.shape() == ref.shape);
    const auto got = out.contiguous().to_vector();
    std::vector<double> want(ref.value.size()), tol(ref.value.size());
    for (std::size_t i = 0; i < want.size(); ++i) {
        const double p = beta != 0 ? beta * prior[i] : 0.0;
        const double exact = alpha * ref.value[i] + p;
        if (integers) {
            // Integer products and sums below 2^24 are exact in every accumulator: the only rounding
            // is the final one to T.
            want[i] = tessel::testing::to_double(tessel::testing::from_double<T>(exact));
            tol[i] = 0;
        } else {
            // Accumulation error at most (K + 2) u_acc sum|ab| (first order, Higham's gamma_K with the
            // alpha/beta operations), plus the output's rounding; 16-bit products are exact in fp32.
            want[i] = exact;
            tol[i] = 64 * accumulate_roundoff<T>() * (std::fabs(alpha) * ref.magnitude[i] + std::fabs(p)) +
                     output_roundoff<T>() * std::fabs(exact) + 1e-300;
        }
    }
    tessel::testing::check_close(got, want, tol, what);
}

// a @ b for views made by fa, fb of fresh base operands, through both the new-tensor and the
// out-tensor forms, on policy p; the reference from the views' logical values.
template <class T, class FA, class FB>
void check_views(MatmulPolicy p, const Shape& base_a, FA fa, const Shape& base_b, FB fb, bool integers, std::uint64_t seed,
                 const std::string& what) {
    const auto A = make<T>(base_a, seed, integers), B = make<T>(base_b, seed + 1, integers);
    const Tensor<T> a = fa(A.base), b = fb(B.base);
    const std::string label = name<T>() + " " + tessel::policy_name(p) + " " + what + ": " + a.shape().to_string() + " @ " +
                              b.shape().to_string();
    INFO(label);
    const Reference ref = reference_matmul(logical(a, A.base, A.host), a.shape(), logical(b, B.base, B.host), b.shape());
    tessel::testing::poison_next<T>(ref.shape);
    const Tensor<T> c = tessel::matmul(a, b, MatmulOptions{.policy = p});
    check_result(c, ref, integers, 1, 0, {}, label);
    CHECK(tessel::last_matmul_choice().path == p);
}

}  // namespace

TEMPLATE_TEST_CASE("matmul equals the exact product of integer-valued inputs on both policies", "[ops][matmul]", float, double, __half,
                   __nv_bfloat16) {
    if (tessel::device_count() == 0) return;
    const auto id = [](const Tensor<TestType>& t) { return t; };
    struct Mnk {
        std::int64_t m, n, k;
    };
    // {1, 2, 7, 16, 33, 127, 200} crossed sparsely: each below, at and past a tile, K tails of every kind.
    const Mnk shapes[] = {{1, 1, 1}, {2, 7, 16}, {7, 2, 33}, {16, 16, 16}, {33, 127, 7}, {127, 33, 200}, {200, 200, 127}, {16, 200, 2}, {127, 1, 33}};
    std::uint64_t seed = 100;
    for (MatmulPolicy p : policies)
        for (std::size_t i = 0; i < std::size(shapes); i += tessel::testing::sweep_step())
            check_views<TestType>(p, {shapes[i].m, shapes[i].k}, id, {shapes[i].k, shapes[i].n}, id, true, seed += 2, "2-D");
}

TEMPLATE_TEST_CASE("matmul takes transposed, strided and broadcast operands, batches and vectors", "[ops][matmul]", float, double,
                   __half, __nv_bfloat16) {
    if (tessel::device_count() == 0) return;
    using T = TestType;
    const auto id = [](const Tensor<T>& t) { return t; };
    const auto tr = [](const Tensor<T>& t) { return t.transpose(-1, -2); };
    std::uint64_t seed = 500;
    for (MatmulPolicy p : policies) {
        // Transposed operands: cuBLAS takes them as transa/transb, the kernels after a copy.
        check_views<T>(p, {33, 21}, tr, {33, 17}, id, true, seed += 2, "a transposed");
        check_views<T>(p, {21, 33}, id, {17, 33}, tr, true, seed += 2, "b transposed");
        check_views<T>(p, {33, 21}, tr, {17, 33}, tr, true, seed += 2, "both transposed");
        // Every other column: no unit stride anywhere, a copy on every path.
        check_views<T>(p, {19, 46}, [](const Tensor<T>& t) { return t.slice(1, 0, 46, 2); }, {23, 11}, id, true, seed += 2,
                       "a column-strided");
        // A row stride that is not the width (a column slice): a leading dimension.
        check_views<T>(p, {19, 40}, [](const Tensor<T>& t) { return t.narrow(1, 3, 29); }, {29, 13}, id, true, seed += 2,
                       "a with a leading dimension");
        // Batches: b broadcast over a's batch (stride 0), both broadcast, a batch dim that does not
        // merge with the next (walked on the host), a transposed batch.
        check_views<T>(p, {3, 17, 9}, id, {9, 21}, id, true, seed += 2, "b broadcast over a batch");
        check_views<T>(p, {2, 1, 17, 9}, id, {3, 9, 21}, id, true, seed += 2, "both broadcast");
        check_views<T>(p, {3, 2, 17, 9}, [](const Tensor<T>& t) { return t.transpose(0, 1); }, {2, 3, 9, 5}, id, true, seed += 2,
                       "batch dims that do not merge");
        check_views<T>(p, {4, 9, 17}, tr, {4, 21, 9}, tr, true, seed += 2, "transposed batches");
        // 1-D operands: a row vector, a column vector, a dot product, a batched matrix-vector product.
        check_views<T>(p, {33}, id, {33, 7}, id, true, seed += 2, "vector @ matrix");
        check_views<T>(p, {7, 33}, id, {33}, id, true, seed += 2, "matrix @ vector");
        check_views<T>(p, {33}, id, {33}, id, true, seed += 2, "vector @ vector");
        check_views<T>(p, {3, 7, 33}, id, {33}, id, true, seed += 2, "batched matrix @ vector");
        // Empty: K = 0 gives zeros, M = 0 an empty result.
        check_views<T>(p, {5, 0}, id, {0, 3}, id, true, seed += 2, "K = 0");
        check_views<T>(p, {1, 0}, [](const Tensor<T>& t) { return t.expand({5, 0}); }, {0, 3}, id, true, seed += 2, "K = 0, rows 0 apart");
        check_views<T>(p, {0, 4}, id, {4, 3}, id, true, seed += 2, "M = 0");
    }
}

#ifndef TESSEL_TEST_UNDER_TSAN  // [slow_under_tsan]: not built under ThreadSanitizer (tests/CMakeLists.txt)
TEMPLATE_TEST_CASE("matmul of random reals stays within its accumulation bound", "[ops][matmul][slow_under_tsan]", float, double, __half,
                   __nv_bfloat16) {
    if (tessel::device_count() == 0) return;
    const auto id = [](const Tensor<TestType>& t) { return t; };
    for (MatmulPolicy p : policies) check_views<TestType>(p, {515, 263}, id, {263, 1029}, id, false, 900, "515 x 1029 x 263");
}
#endif  // TESSEL_TEST_UNDER_TSAN

TEMPLATE_TEST_CASE("matmul into an out tensor: alpha, beta, transposed and strided outputs", "[ops][matmul]", float, __nv_bfloat16) {
    if (tessel::device_count() == 0) return;
    using T = TestType;
    for (MatmulPolicy p : policies) {
        INFO(tessel::policy_name(p));
        const auto A = make<T>({37, 29}, 1, true), B = make<T>({29, 45}, 2, true);
        const Reference ref = reference_matmul(A.host, A.base.shape(), B.host, B.base.shape());
        // out = 2 a b - out, on a prior output (integers: exact).
        const auto C = make<T>({37, 45}, 3, true);
        tessel::matmul(A.base, B.base, C.base, MatmulOptions{.alpha = 2, .beta = -1, .policy = p});
        check_result(C.base, ref, true, 2, -1, C.host, "alpha 2 beta -1");
        // beta = 0 never reads out: NaN there must not show.
        const Tensor<T> nan = tessel::full<T>({37, 45}, tessel::testing::from_double<T>(std::nan("")));
        tessel::matmul(A.base, B.base, nan, MatmulOptions{.policy = p});
        check_result(nan, ref, true, 1, 0, {}, "beta 0 over NaN");
        // A transposed output (column layout): cuBLAS writes it directly, the kernels through a copy.
        const Tensor<T> ct = tessel::full<T>({45, 37}, tessel::testing::from_double<T>(std::nan(""))).transpose(0, 1);
        tessel::matmul(A.base, B.base, ct, MatmulOptions{.policy = p});
        check_result(ct, ref, true, 1, 0, {}, "transposed out");
        // An output with no unit stride: through a temporary; the untouched columns keep their values.
        const Tensor<T> wide = tessel::full<T>({37, 90}, T(7));
        tessel::matmul(A.base, B.base, wide.slice(1, 0, 90, 2), MatmulOptions{.policy = p});
        check_result(wide.slice(1, 0, 90, 2), ref, true, 1, 0, {}, "column-strided out");
        const auto rest = wide.slice(1, 1, 90, 2).contiguous().to_vector();
        CHECK(std::all_of(rest.begin(), rest.end(), [](T v) { return tessel::testing::to_double(v) == 7.0; }));
        // out += a b as residual = out, and a residual that is out's transpose (a square product):
        // every path must read the residual's values from before the call.
        const auto R = make<T>({37, 45}, 7, true);
        tessel::matmul(A.base, B.base, R.base, MatmulOptions{.policy = p}, tessel::MatmulEpilogue<T>{.residual = R.base});
        check_result(R.base, ref, true, 1, 1, R.host, "residual = out");
        const auto Q = make<T>({29, 29}, 8, true), Q2 = make<T>({29, 29}, 9, true), S = make<T>({29, 29}, 10, true);
        const Reference qref = reference_matmul(Q.host, Q.base.shape(), Q2.host, Q2.base.shape());
        std::vector<double> s_transposed(S.host.size());
        for (std::size_t i = 0; i < 29; ++i)
            for (std::size_t j = 0; j < 29; ++j) s_transposed[i * 29 + j] = S.host[j * 29 + i];
        tessel::matmul(Q.base, Q2.base, S.base, MatmulOptions{.policy = p}, tessel::MatmulEpilogue<T>{.residual = S.base.transpose(0, 1)});
        check_result(S.base, qref, true, 1, 1, s_transposed, "residual = out transposed");
        // K = 0: out = beta * out.
        const auto Z = make<T>({4, 6}, 4, true);
        tessel::matmul(make<T>({4, 0}, 5, true).base, make<T>({0, 6}, 6, true).base, Z.base, MatmulOptions{.beta = 3, .policy = p});
        const auto z = Z.base.to_vector();
        for (std::size_t i = 0; i < z.size(); ++i) CHECK(tessel::testing::to_double(z[i]) == 3 * Z.host[i]);
    }
}

TEST_CASE("matmul's hand-written kernels and the library agree on random bf16 and fp32 inputs", "[ops][matmul]") {
    if (tessel::device_count() == 0) return;
    const auto a = make<__nv_bfloat16>({3, 150, 70}, 7, false).base, b = make<__nv_bfloat16>({70, 90}, 8, false).base;
    const auto hand = tessel::matmul(a, b, MatmulOptions{.policy = MatmulPolicy::handwritten}).to_vector();
    const auto lib = tessel::matmul(a, b, MatmulOptions{.policy = MatmulPolicy::library}).to_vector();
    // Both round one fp32 sum of 70 exact products to bf16: their difference is at most two bf16
    // ulps of the result plus both accumulations' bound (|ab| <= 1, K = 70: 70 * 70 * 2^-24 each).
    std::size_t bad = 0;
    for (std::size_t i = 0; i < hand.size(); ++i) {
        const double x = tessel::testing::to_double(hand[i]), y = tessel::testing::to_double(lib[i]);
        bad += !(std::fabs(x - y) <= 2 * 0x1p-8 * std::max(std::fabs(x), std::fabs(y)) + 2 * 70 * 70 * 0x1p-24);
    }
    CHECK(bad == 0);
}

TEST_CASE("matmul reports its path, follows the process policy, and uses the pooled cuBLAS handle's workspace", "[ops][matmul]") {
    if (tessel::device_count() == 0) return;
    const auto a = make<float>({8, 8}, 1, true).base, b = make<float>({8, 8}, 2, true).base;
    (void)tessel::matmul(a, b);
    CHECK(tessel::last_matmul_choice().path == MatmulPolicy::library);  // automatic: no GPU dispatch table yet
    CHECK_THAT(std::string(tessel::last_matmul_choice().reason), Catch::Contains("automatic"));
    CHECK(tessel::last_matmul_choice().implementation == "cublasGemmStridedBatchedEx");
    tessel::set_matmul_policy(MatmulPolicy::handwritten);
    (void)tessel::matmul(a, b);
    CHECK(tessel::last_matmul_choice().path == MatmulPolicy::handwritten);
    CHECK(tessel::last_matmul_choice().implementation == "simt_matmul<64x64x16, 16-byte loads>");
    tessel::set_matmul_policy(MatmulPolicy::automatic);
    // A transposed operand on the library path is not copied; a column-strided one is.
    (void)tessel::matmul(a.transpose(0, 1), b, MatmulOptions{.policy = MatmulPolicy::library});
    CHECK(tessel::last_matmul_choice().copied_operands == 0);
    (void)tessel::matmul(make<float>({8, 16}, 3, true).base.slice(1, 0, 16, 2), b, MatmulOptions{.policy = MatmulPolicy::library});
    CHECK(tessel::last_matmul_choice().copied_operands == 1);
    // An unaligned bf16 operand (K = 7: rows of 14 bytes) is packed for the tensor-core kernel.
    (void)tessel::matmul(make<__nv_bfloat16>({9, 7}, 4, true).base, make<__nv_bfloat16>({7, 8}, 5, true).base,
                         MatmulOptions{.policy = MatmulPolicy::handwritten});
    CHECK(tessel::last_matmul_choice().copied_operands == 1);
    CHECK_THAT(std::string(tessel::last_matmul_choice().implementation), Catch::Contains("mma_matmul"));
    // A bf16 matrix times a vector: the vector is one column, read as such (ld free), not copied.
    const auto w16 = make<__nv_bfloat16>({9, 40}, 6, true), v16 = make<__nv_bfloat16>({40}, 7, true);
    const auto mv = tessel::matmul(w16.base, v16.base, MatmulOptions{.policy = MatmulPolicy::handwritten});
    CHECK(tessel::last_matmul_choice().copied_operands == 0);
    CHECK_THAT(std::string(tessel::last_matmul_choice().implementation), Catch::Contains("B by columns"));
    const auto ref = reference_matmul(w16.host, Shape{9, 40}, v16.host, Shape{40});
    const auto got = mv.to_vector();
    REQUIRE(got.size() == ref.value.size());
    for (std::size_t i = 0; i < got.size(); ++i) CHECK(double(__bfloat162float(got[i])) == double(__bfloat162float(__float2bfloat16(float(ref.value[i])))));
#if defined(TESSEL_BACKEND_SIM)
    // The library path reached the stand-in, with the (handle, stream)'s workspace from the cache.
    const auto before = tessel::sim::cublas::gemm_calls();
    (void)tessel::matmul(a, b, MatmulOptions{.policy = MatmulPolicy::library});
    CHECK(tessel::sim::cublas::gemm_calls() == before + 1);
    cublasHandle_t h = tessel::cublas::handle(tessel::current_device(), tessel::current_stream().handle());
    CHECK(tessel::sim::cublas::workspace_bytes(h) == tessel::cublas::workspace_bytes(tessel::current_device()));
    CHECK(!tessel::sim::cublas::uses_own_pool(h));  // the workspace set after the stream, not cuBLAS's pool
#endif
}

TEST_CASE("matmul refuses bad input with a message naming it", "[ops][matmul]") {
    if (tessel::device_count() == 0) return;
    const auto a = make<float>({3, 4}, 1, true).base, b = make<float>({5, 6}, 2, true).base;
    CHECK_THAT(message([&] { (void)tessel::matmul(a, b); }),
               Catch::Contains("[3, 4]") && Catch::Contains("[5, 6]") && Catch::Contains("cannot be multiplied"));
    CHECK_THAT(message([&] { (void)tessel::matmul(make<float>({2, 3, 4}, 3, true).base, make<float>({3, 4, 5}, 4, true).base); }),
               Catch::Contains("do not broadcast") && Catch::Contains("2 and 3"));
    const auto b2 = make<float>({4, 6}, 5, true).base;
    CHECK_THAT(message([&] { tessel::matmul(a, b2, tessel::empty<float>({3, 5})); }),
               Catch::Contains("out has shape [3, 5]") && Catch::Contains("has shape [3, 6]"));
    const auto sq = make<float>({4, 4}, 6, true).base;
    CHECK_THAT(message([&] { tessel::matmul(sq, sq, sq); }), Catch::Contains("shares memory with a"));
    CHECK_THAT(message([&] { (void)tessel::matmul(make<float>({4}, 7, true).base.select(0, 0), b2); }), Catch::Contains("at least one dim"));
    CHECK_THAT(message([&] { (void)tessel::matmul(a.to_host(), b2); }), Catch::Contains("a is in host memory"));
    CHECK_THAT(message([&] { (void)tessel::matmul(a, b2, MatmulOptions{.beta = 1}); }), Catch::Contains("beta = 1"));
    CHECK_THAT(message([&] { (void)tessel::matmul(Tensor<float>(), b2); }), Catch::Contains("a is an undefined"));
    CHECK_THROWS_AS(tessel::ops::detail::parse_matmul_policy("TESSEL_MATMUL_POLICY", "fast"), tessel::InvalidArgument);
    // A cuBLAS status becomes a LibraryError naming it and the call (here: ldc < m, refused by cuBLAS
    // and by the stand-in alike).
    const float one = 1, zero = 0;
    cublasHandle_t h = tessel::cublas::handle(tessel::current_device(), tessel::current_stream().handle());
    try {
        TESSEL_CUBLAS_CHECK(tessel::cublas::api::cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, sq.data(), CUDA_R_32F, 4, 0,
                                                                           sq.data(), CUDA_R_32F, 4, 0, &zero, b.data(), CUDA_R_32F, 2, 0, 1,
                                                                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        FAIL("no error for ldc < m");
    } catch (const tessel::LibraryError& e) {
        CHECK(e.status_name() == "CUBLAS_STATUS_INVALID_VALUE");
        CHECK_THAT(std::string(e.what()), Catch::Contains("cublasGemmStridedBatchedEx"));
    }
}

namespace {

// The reference of a fused epilogue: activation(v + bias) + residual, in double.
double activate(tessel::Activation act, double x) {
    switch (act) {
        case tessel::Activation::none: return x;
        case tessel::Activation::relu: return x < 0 ? 0 : x;
        case tessel::Activation::gelu: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
        case tessel::Activation::gelu_tanh: return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
        case tessel::Activation::silu: return x / (1 + std::exp(-x));
    }
    return x;
}

template <class T, class Out>
void check_epilogue(MatmulPolicy p, tessel::Activation act, bool per_row, bool with_residual, std::uint64_t seed) {
    using tessel::Activation;
    const std::int64_t batch = 2, m = 37, n = 45, k = 29;
    const auto A = make<T>({batch, m, k}, seed, false), B = make<T>({k, n}, seed + 1, false);
    const auto bias = make<Out>({per_row ? m : n}, seed + 2, false);
    const auto res = make<Out>({batch, m, n}, seed + 3, false);
    const Reference ref = reference_matmul(A.host, A.base.shape(), B.host, B.base.shape());
    tessel::MatmulEpilogue<Out> e{.bias = bias.base, .bias_per_row = per_row, .activation = act};
    if (with_residual) e.residual = res.base;
    const Tensor<Out> out = tessel::full<Out>({batch, m, n}, tessel::testing::from_double<Out>(std::nan("")));
    tessel::matmul(A.base, B.base, out, MatmulOptions{.policy = p}, e);
    const auto got = out.to_vector();
    // The library fuses into cublasLtMatmul what cuBLASLt can as tessel defines it (16-bit and fp32
    // inputs; the tanh GELU, a bias along the output's columns, no residual; not relu, whose NaN
    // cuBLASLt makes 0) and runs the rest as a cuBLAS GEMM plus gemm_epilogue_apply.
    const std::string implementation(tessel::last_matmul_choice().implementation);
    const bool lt_fusable = !std::is_same_v<T, double> && !with_residual && !per_row &&
                            (act == Activation::none || act == Activation::gelu_tanh);
    if (p == MatmulPolicy::library) CHECK((implementation.rfind("cublasLtMatmul", 0) == 0) == lt_fusable);
#if defined(TESSEL_BACKEND_CUDA)
    const double math_error = implementation.rfind("cublasLtMatmul", 0) == 0 && act == Activation::gelu_tanh ? 0x1p-10 : 8 * 0x1p-24;
#else
    const double math_error = 8 * 0x1p-24;
#endif
    std::vector<double> want(got.size()), tol(got.size());
    for (std::int64_t z = 0; z < batch; ++z)
        for (std::int64_t i = 0; i < m; ++i)
            for (std::int64_t j = 0; j < n; ++j) {
                const std::size_t o = std::size_t((z * m + i) * n + j);
                const double pre = ref.value[o] + bias.host[std::size_t(per_row ? i : j)];
                want[o] = activate(act, pre) + (with_residual ? res.host[o] : 0.0);
                // The product's accumulation bound (fp32: (K + 2) 2^-24 sum|ab|), carried through the
                // activation (|slope| <= 1.13 for gelu, 1.1 for silu), plus fp32 math-function error
                // (a few ulps of the result; cuBLASLt's GELU on a GPU may use tanh.approx, relative
                // error about 2^-11) and the output's rounding.
                tol[o] = 1.2 * (k + 4) * accumulate_roundoff<T>() * (ref.magnitude[o] + 1) + math_error * (std::fabs(want[o]) + 1) +
                         output_roundoff<Out>() * std::fabs(want[o]) + 1e-30;
            }
    INFO(name<T>() << " -> " << name<Out>() << " " << tessel::policy_name(p) << " activation " << int(act) << (per_row ? " row bias" : " column bias")
                   << (with_residual ? " + residual" : "") << ": " << tessel::last_matmul_choice().implementation);
    tessel::testing::check_close(got, want, tol, "fused epilogue");
}

}  // namespace

TEST_CASE("matmul fuses bias, activation and residual into the product on both policies", "[ops][matmul]") {
    if (tessel::device_count() == 0) return;
    using tessel::Activation;
    std::uint64_t seed = 3000;
    for (MatmulPolicy p : policies)
        for (Activation act : {Activation::none, Activation::relu, Activation::gelu, Activation::gelu_tanh, Activation::silu}) {
            check_epilogue<float, float>(p, act, false, act == Activation::gelu, seed += 4);
            check_epilogue<__nv_bfloat16, __nv_bfloat16>(p, act, act == Activation::relu, act != Activation::none, seed += 4);
        }
    // fp32 output of bf16 and fp16 inputs (the accumulator without rounding), fp64 with a row bias.
    for (MatmulPolicy p : policies) {
        check_epilogue<__nv_bfloat16, float>(p, Activation::silu, false, true, seed += 4);
        check_epilogue<__half, float>(p, Activation::none, true, false, seed += 4);
        check_epilogue<double, double>(p, Activation::gelu_tanh, true, true, seed += 4);
    }
}

TEST_CASE("relu keeps NaN and alpha 0 reads neither operand, on every path", "[ops][matmul]") {
    if (tessel::device_count() == 0) return;
    // torch.relu(NaN) is NaN (cuBLASLt's fused RELU would make it 0, so it is not fused); with alpha 0
    // BLAS reads neither operand, so an Inf in one gives beta * out, not 0 * Inf.
    const std::int64_t m = 5, n = 8, k = 16;
    std::vector<float> a_host(std::size_t(m * k), 1.f);
    a_host[std::size_t(1 * k + 3)] = std::nanf("");
    a_host[std::size_t(2 * k + 5)] = std::numeric_limits<float>::infinity();
    for (MatmulPolicy p : policies) {
        INFO(tessel::policy_name(p));
        const auto run = [&]<class T>(T) {
            const Tensor<T> a = tessel::from_host<float>(a_host, {m, k}).template to<T>();
            const Tensor<T> w = tessel::ones<T>({n, k});
            const Tensor<T> bias = tessel::ones<T>({n});
            const auto y = tessel::linear(a, w, bias, tessel::Activation::relu, MatmulOptions{.policy = p}).template to<float>().to_vector();
            INFO(tessel::last_matmul_choice().implementation);
            for (std::int64_t i = 0; i < m; ++i)
                for (std::int64_t j = 0; j < n; ++j) {
                    const float v = y[std::size_t(i * n + j)];
                    if (i == 1) CHECK(std::isnan(v));
                    else if (i == 2) CHECK(v == std::numeric_limits<float>::infinity());
                    else CHECK(v == float(k + 1));
                }
            const Tensor<T> out = tessel::full<T>({m, n}, T(3.f));
            tessel::matmul(a, w.transpose(0, 1), out, MatmulOptions{.alpha = 0, .beta = 2, .policy = p});
            CHECK(out.template to<float>().to_vector() == std::vector<float>(std::size_t(m * n), 6.f));
        };
        run(float{});
        run(__nv_bfloat16{});
    }
}

TEST_CASE("linear is x @ weight^T + bias with the activation, reading the weight without a copy", "[ops][matmul]") {
    if (tessel::device_count() == 0) return;
    const std::int64_t rows = 19, in = 40, out_features = 24;
    for (MatmulPolicy p : policies) {
        INFO(tessel::policy_name(p));
        const auto x = make<__nv_bfloat16>({rows, in}, 1, true), w = make<__nv_bfloat16>({out_features, in}, 2, true);
        const auto bias = make<__nv_bfloat16>({out_features}, 3, true);
        const Tensor<__nv_bfloat16> y = tessel::linear(x.base, w.base, bias.base, tessel::Activation::relu, MatmulOptions{.policy = p});
        CHECK(tessel::last_matmul_choice().copied_operands == 0);
        CHECK_THAT(std::string(tessel::last_matmul_choice().implementation),
                   Catch::Contains(p == MatmulPolicy::handwritten ? "B by columns" : "gemm_epilogue_apply"));
        REQUIRE(y.shape() == Shape{rows, out_features});
        const auto got = y.to_vector();
        for (std::int64_t i = 0; i < rows; ++i)
            for (std::int64_t o = 0; o < out_features; ++o) {
                double s = bias.host[std::size_t(o)];
                for (std::int64_t c = 0; c < in; ++c) s += x.host[std::size_t(i * in + c)] * w.host[std::size_t(o * in + c)];
                // Integers: exact until the final rounding to bf16.
                const double want = tessel::testing::to_double(tessel::testing::from_double<__nv_bfloat16>(s < 0 ? 0 : s));
                CHECK(tessel::testing::to_double(got[std::size_t(i * out_features + o)]) == want);
            }
    }
    const auto xo = make<float>({3, 5}, 1, true), wo = make<float>({4, 5}, 2, true), w1 = make<float>({5}, 6, true);
    const auto x = xo.base, w = wo.base;
    // torch's other linear shapes: a 0-d bias adds to every output; a 1-d weight is one output
    // feature that the result drops ([3, 5] -> [3]; [5] -> []). Small integers: exact in float.
    const auto dot = [&](std::int64_t i, const std::vector<double>& wv, std::int64_t o) {
        double s = 0;
        for (std::int64_t c = 0; c < 5; ++c) s += xo.host[std::size_t(i * 5 + c)] * wv[std::size_t(o * 5 + c)];
        return s;
    };
    const auto bias0 = tessel::full<float>({}, 2.5f);
    const auto with_scalar_bias = tessel::linear(x, w, bias0).to_vector();
    REQUIRE(with_scalar_bias.size() == 12);
    for (std::int64_t i = 0; i < 3; ++i)
        for (std::int64_t o = 0; o < 4; ++o) CHECK(double(with_scalar_bias[std::size_t(i * 4 + o)]) == dot(i, wo.host, o) + 2.5);
    const Tensor<float> one_feature = tessel::linear(x, w1.base, bias0, tessel::Activation::relu);
    REQUIRE(one_feature.shape() == Shape{3});
    for (std::int64_t i = 0; i < 3; ++i) CHECK(double(one_feature.to_vector()[std::size_t(i)]) == std::max(0.0, dot(i, w1.host, 0) + 2.5));
    const Tensor<float> one_by_one = tessel::linear(x.select(0, 1), w1.base);
    REQUIRE(one_by_one.shape() == Shape{});
    CHECK(double(one_by_one.item()) == dot(1, w1.host, 0));
    CHECK_THAT(message([&] { (void)tessel::linear(x, w1.base, make<float>({1}, 3, true).base); }),
               Catch::Contains("with a 1-d weight (one output feature) the bias must be 0-d, not shape [1]"));
    // A strided bias (every other element of a row), as torch takes it: the same as its contiguous copy.
    const Tensor<float> strided_bias = make<float>({8}, 5, true).base.slice(0, 0, 8, 2);
    CHECK(tessel::linear(x, w, strided_bias).to_vector() == tessel::linear(x, w, strided_bias.contiguous()).to_vector());
    CHECK(tessel::linear(x, w, strided_bias).to_vector() != tessel::linear(x, w, make<float>({8}, 5, true).base.slice(0, 0, 4)).to_vector());
    CHECK_THAT(message([&] { (void)tessel::linear(x, w, make<float>({5}, 3, true).base); }), Catch::Contains("out_features (4) elements or 0-d, not shape [5]"));
    CHECK_THAT(message([&] { (void)tessel::linear(x, make<float>({4, 6}, 4, true).base); }), Catch::Contains("in_features (6)"));
    CHECK_THAT(message([&] {
                   tessel::matmul(x, w.transpose(0, 1), tessel::empty<float>({3, 4}), MatmulOptions{},
                                  tessel::MatmulEpilogue<float>{.residual = tessel::empty<float>({4, 3})});
               }),
               Catch::Contains("the residual has shape [4, 3]"));
}

TEST_CASE("matmul's autotune times the candidates on a problem's first call and keeps the fastest", "[ops][matmul]") {
    if (tessel::device_count() == 0) return;
    const auto before = tessel::matmul_autotune_stats();
    tessel::set_matmul_autotune(true);
    const auto A = make<__nv_bfloat16>({3, 40, 24}, 11, true), B = make<__nv_bfloat16>({24, 56}, 12, true);
    const Reference ref = reference_matmul(A.host, A.base.shape(), B.host, B.base.shape());
    for (int call = 0; call < 3; ++call) {
        tessel::testing::poison_next<__nv_bfloat16>(ref.shape);
        const auto c = tessel::matmul(A.base, B.base);
        check_result(c, ref, true, 1, 0, {}, "autotuned call " + std::to_string(call));
        CHECK_THAT(std::string(tessel::last_matmul_choice().reason), Catch::Contains("autotune"));
    }
    // beta reads the real output once: the timing runs went to a scratch output.
    const auto C = make<__nv_bfloat16>({3, 40, 56}, 13, true);
    tessel::matmul(A.base, B.base, C.base, MatmulOptions{.alpha = 1, .beta = 1});
    check_result(C.base, ref, true, 1, 1, C.host, "autotuned with beta");
    const auto after = tessel::matmul_autotune_stats();
    CHECK(after.keys_tuned == before.keys_tuned + 1);  // one problem: the later calls (and the out call) follow its winner
    CHECK(after.cache_hits == before.cache_hits + 3);
    CHECK(after.handwritten_won + after.library_won == after.keys_tuned);
    // Both tile classes of mma_matmul and at least cuBLASLt's best; on the sim its stand-in's two
    // heuristic results, and the third, which it lacks, ends the library's candidates.
    CHECK(after.candidates_timed - before.candidates_timed >= 3);
#if !defined(TESSEL_BACKEND_CUDA)
    CHECK(after.candidates_timed - before.candidates_timed == 4);
#endif

    // The autotune file: a tuned problem's winner is appended; a later process (here: the winners
    // forgotten, then the file read again) follows it without timing.
    const std::string file = "tessel_autotune_test_" + std::to_string(::getpid()) + ".txt";
    std::remove(file.c_str());
    tessel::set_matmul_autotune_file(file);
    const auto D = make<float>({33, 70}, 14, true), E = make<float>({70, 17}, 15, true);
    const Reference de = reference_matmul(D.host, D.base.shape(), E.host, E.base.shape());
    check_result(tessel::matmul(D.base, E.base), de, true, 1, 0, {}, "tuned, written to the file");
    {
        std::ifstream in(file);
        std::string line;
        REQUIRE(std::getline(in, line));
        CHECK_THAT(line, Catch::StartsWith("tessel-autotune-2 ") && Catch::Contains(" fp32 float32 33 17 70 1 "));
    }
    {
        std::lock_guard lk(tessel::ops::detail::autotune_mutex());
        tessel::ops::detail::autotune_state().winners.clear();
    }
    const auto mid = tessel::matmul_autotune_stats();
    tessel::set_matmul_autotune_file(file);
    check_result(tessel::matmul(D.base, E.base), de, true, 1, 0, {}, "winner read from the file");
    const auto last = tessel::matmul_autotune_stats();
    CHECK(last.loaded_from_file == mid.loaded_from_file + 1);
    CHECK(last.keys_tuned == mid.keys_tuned);
    CHECK(last.cache_hits == mid.cache_hits + 1);

    // A line naming a variant that does not exist (an edited file) is skipped with a warning: the
    // product is tuned again rather than failing on every call.
    {
        std::string line;
        {
            std::ifstream in(file);
            REQUIRE(std::getline(in, line));
        }
        std::ofstream(file, std::ios::trunc) << line.substr(0, line.rfind(' ')) << " 99\n";
        std::lock_guard lk(tessel::ops::detail::autotune_mutex());
        tessel::ops::detail::autotune_state().winners.clear();
    }
    tessel::set_matmul_autotune_file(file);
    check_result(tessel::matmul(D.base, E.base), de, true, 1, 0, {}, "a bad line skipped");
    const auto retuned = tessel::matmul_autotune_stats();
    CHECK(retuned.loaded_from_file == last.loaded_from_file);
    CHECK(retuned.keys_tuned == last.keys_tuned + 1);
    tessel::set_matmul_autotune_file("");
    std::remove(file.c_str());

    // A product's key holds the output's dtype, not its size: an int8 product into int32 (cuBLAS
    // writes it) and into fp32 (an int32 buffer, then the epilogue kernel) take different paths, and
    // a winner timed for one must not be followed for the other.
    const auto keys = tessel::matmul_autotune_stats().keys_tuned;
    const auto P = make<std::int8_t>({9, 32}, 16, true, 127), Q = make<std::int8_t>({40, 32}, 17, true, 127);
    tessel::matmul(P.base, Q.base.transpose(0, 1), tessel::empty<int>({9, 40}), MatmulOptions{}, tessel::MatmulEpilogue<int>{});
    tessel::matmul(P.base, Q.base.transpose(0, 1), tessel::empty<float>({9, 40}), MatmulOptions{}, tessel::MatmulEpilogue<float>{});
    CHECK(tessel::matmul_autotune_stats().keys_tuned == keys + 2);
    // An explicit MatmulPolicy::automatic is the same request as none.
    const auto R = make<float>({7, 13}, 18, true), S = make<float>({13, 9}, 19, true);
    check_result(tessel::matmul(R.base, S.base, MatmulOptions{.policy = MatmulPolicy::automatic}),
                 reference_matmul(R.host, R.base.shape(), S.host, S.base.shape()), true, 1, 0, {}, "explicitly automatic");
    CHECK(tessel::matmul_autotune_stats().keys_tuned == keys + 3);
    CHECK_THAT(std::string(tessel::last_matmul_choice().reason), Catch::Contains("autotune"));

    tessel::set_matmul_autotune(false);
    (void)tessel::matmul(A.base, B.base);
    CHECK_THAT(std::string(tessel::last_matmul_choice().reason), Catch::Contains("dispatch table"));
}

TEST_CASE("a 16-bit product on cuBLASLt may not reduce split-K parts in its output type", "[ops][matmul]") {
    // cuBLASLt's default mask allows INPLACE and OUTPUT_TYPE, which add split-K parts up in bf16:
    // tessel allows only COMPUTE_TYPE (fp32), so the result is rounded once, as on the other paths.
    // Integers of [-8, 8] over K = 4096 sum exactly in fp32 (|sum| <= 2^18) to values of ~11 bits,
    // so every element must be the exact sum rounded once to bf16; parts of a split rounded to bf16
    // first would differ in the last bits of many.
    constexpr int m = 5, k = 4096, n = 7;
    const auto ra = tessel::testing::random_vector<double>(std::size_t(m) * k, 31, -8, 9), rb = tessel::testing::random_vector<double>(std::size_t(k) * n, 32, -8, 9);
    std::vector<__nv_bfloat16> ha(ra.size()), hb(rb.size());
    for (std::size_t i = 0; i < ra.size(); ++i) ha[i] = __float2bfloat16(float(std::floor(ra[i])));
    for (std::size_t i = 0; i < rb.size(); ++i) hb[i] = __float2bfloat16(float(std::floor(rb[i])));
    const auto a = tessel::from_host<__nv_bfloat16>(std::span<const __nv_bfloat16>(ha), Shape{m, k});
    const auto b = tessel::from_host<__nv_bfloat16>(std::span<const __nv_bfloat16>(hb), Shape{k, n});
    tessel::testing::poison_next<__nv_bfloat16>({m, n});
    const auto c = tessel::matmul(a, b, tessel::MatmulOptions{.policy = tessel::MatmulPolicy::library});
    REQUIRE(std::string(tessel::last_matmul_choice().implementation).starts_with("cublasLt"));
    const auto got = c.to_vector();
    std::size_t wrong = 0;
    for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j) {
            double exact = 0;
            for (int q = 0; q < k; ++q)
                exact += double(__bfloat162float(ha[std::size_t(i) * k + q])) * double(__bfloat162float(hb[std::size_t(q) * n + j]));
            const float want = __bfloat162float(__float2bfloat16(float(exact)));  // exact in float, then rounded once
            wrong += __bfloat162float(got[std::size_t(i) * n + j]) != want;
        }
    CHECK(wrong == 0);
#if defined(TESSEL_BACKEND_SIM)
    CHECK(tessel::sim::cublaslt::reduction_scheme_mask(tessel::cublaslt::handle(tessel::Device{0})) == CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE);
#endif
}

namespace {
template <class T>
void check_on_device_one(MatmulPolicy p, tessel::Stream* stream) {
    const std::int64_t m = 33, k = 17, n = 9;
    std::mt19937 rng(61);
    std::vector<T> av(static_cast<std::size_t>(m * k)), bv(static_cast<std::size_t>(k * n));
    std::vector<double> ad(av.size()), bd(bv.size());
    for (std::size_t i = 0; i < av.size(); ++i) av[i] = tessel::testing::from_double<T>(ad[i] = std::uniform_int_distribution<int>(-4, 4)(rng));
    for (std::size_t i = 0; i < bv.size(); ++i) bv[i] = tessel::testing::from_double<T>(bd[i] = std::uniform_int_distribution<int>(-4, 4)(rng));
    const tessel::TensorOptions on_one{.device = tessel::Device{1}};
    const auto a = tessel::from_host<T>(std::span<const T>(av), Shape{m, k}, on_one), b = tessel::from_host<T>(std::span<const T>(bv), Shape{k, n}, on_one);
    MatmulOptions o{.policy = p};
    if (stream) o.stream = *stream;
    const Tensor<T> c = tessel::matmul(a, b, o);
    CHECK(c.device() == tessel::Device{1});
    CHECK(tessel::current_device() == tessel::Device{0});
    const auto got = c.to_vector();
    std::size_t wrong = 0;
    for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t j = 0; j < n; ++j) {
            double s = 0;
            for (std::int64_t q = 0; q < k; ++q) s += ad[std::size_t(i * k + q)] * bd[std::size_t(q * n + j)];
            wrong += tessel::testing::to_double(got[std::size_t(i * n + j)]) != s;  // integer values up to 272: exact in every type
        }
    CHECK(wrong == 0);
}
}  // namespace

TEST_CASE("matmul of another device's tensors runs on that device, on every path", "[.multidevice]") {
    REQUIRE(tessel::device_count() >= 2);
    // cuBLAS, cuBLASLt and the kernels run on the current device (a null stream is its default
    // stream): device-1 operands with device 0 current must switch devices for the call, or the
    // product races device 1's work on device 0's stream (the sim refuses a library launch into
    // another device's stream, as CUDA refuses a kernel launch).
    REQUIRE(tessel::current_device() == tessel::Device{0});
    tessel::Stream s1 = [] {
        tessel::DeviceGuard on(tessel::Device{1});
        return tessel::Stream::create();
    }();
    for (MatmulPolicy p : policies) {
        for (tessel::Stream* s : {static_cast<tessel::Stream*>(nullptr), &s1}) {
            INFO(tessel::policy_name(p) << (s ? ", a stream of device 1" : ", device 1's default stream"));
            check_on_device_one<double>(p, s);         // cuBLAS on the library path
            check_on_device_one<float>(p, s);          // cuBLAS (no TF32)
            check_on_device_one<__nv_bfloat16>(p, s);  // cuBLASLt
        }
    }
    // The other multidevice tests start from devices with nothing cached: the libraries' workspaces
    // for device 1's streams go back, then the cache.
    tessel::cublas::release_workspaces();
    for (int d : {0, 1}) {
        tessel::DeviceGuard on(tessel::Device{d});
        tessel::rt::device_synchronize();
        tessel::memory::empty_cache();
    }
}
