// tessel::matmul's tensor-core dtypes beyond 16-bit, on both policies: int8 products (exact int32;
// requantised to int8 and dequantised to fp32/bf16 through the epilogue's scales and bias) and fp32
// on TF32 tensor cores (allow_tf32), against a double-precision host product, on sizes that are not
// multiples of a tile, with transposed and broadcast operands and poisoned outputs; then the int8
// input each path must refuse. fp8 e4m3 products on the library path (cuBLASLt; the sim's stand-in
// on the sim), with per-tensor scales and every epilogue, and what cuBLASLt cannot run.
#include <tessel/ops/matmul.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

#include "../support/device_array.hpp"
#include "../support/random_tensor.hpp"
#include "matmul_support.hpp"

using tessel::MatmulOptions;
using tessel::MatmulPolicy;
using tessel::Shape;
using tessel::Tensor;
using namespace tessel::testing::matmul;

namespace {

// a @ b of int8 views (made by fa, fb from fresh base operands over int8's range) into a new int32
// tensor on policy p: int32 sums of int8 products are exact, so the result equals the reference.
template <class FA, class FB>
void check_int8_views(MatmulPolicy p, const Shape& base_a, FA fa, const Shape& base_b, FB fb, std::uint64_t seed, const std::string& what) {
    const auto A = make<std::int8_t>(base_a, seed, true, 127), B = make<std::int8_t>(base_b, seed + 1, true, 127);
    const Tensor<std::int8_t> a = fa(A.base), b = fb(B.base);
    const std::string label = std::string("int8 ") + tessel::policy_name(p) + " " + what + ": " + a.shape().to_string() + " @ " +
                              b.shape().to_string();
    INFO(label);
    const Reference ref = reference_matmul(logical(a, A.base, A.host), a.shape(), logical(b, B.base, B.host), b.shape());
    tessel::testing::poison_next<int>(ref.shape);
    const Tensor<int> c = tessel::matmul(a, b, MatmulOptions{.policy = p});
    REQUIRE(c.shape() == ref.shape);
    const auto got = c.contiguous().to_vector();
    tessel::testing::check_close(got, ref.value, std::vector<double>(got.size(), 0.0), label);
    CHECK(tessel::last_matmul_choice().path == p);
}

const auto id = [](const Tensor<std::int8_t>& t) { return t; };
const auto tr = [](const Tensor<std::int8_t>& t) { return t.transpose(-1, -2); };

}  // namespace

TEST_CASE("int8 matmul is the exact int32 product on both policies", "[ops][matmul][int8]") {
    if (tessel::device_count() == 0) return;
    struct Mnk {
        std::int64_t m, n, k;
    };
    const Mnk shapes[] = {{1, 1, 1}, {2, 7, 16}, {7, 2, 33}, {33, 127, 7}, {127, 33, 200}, {200, 200, 127}, {16, 200, 2}, {127, 1, 33}, {1, 37, 45}};
    std::uint64_t seed = 7000;
    for (MatmulPolicy p : policies) {
        for (std::size_t i = 0; i < std::size(shapes); i += tessel::testing::sweep_step()) {
            const Mnk& s = shapes[i];
            // b by columns (a weight [N, K] transposed) is what both paths take as it lies.
            check_int8_views(p, {s.m, s.k}, id, {s.n, s.k}, tr, seed += 2, "b by columns");
            // Rows of whole 16-byte chunks; a single row (column) is one already.
            CHECK(tessel::last_matmul_choice().copied_operands == (s.k % 16 == 0 || s.m == 1 ? 0 : 1) + (s.k % 16 == 0 || s.n == 1 ? 0 : 1));
        }
        check_int8_views(p, {45, 31}, id, {31, 29}, id, seed += 2, "b by rows (packed by columns)");
        check_int8_views(p, {31, 45}, tr, {29, 31}, tr, seed += 2, "a transposed (packed by rows)");
        check_int8_views(p, {3, 17, 64}, id, {21, 64}, tr, seed += 2, "b broadcast over a batch");
        check_int8_views(p, {2, 1, 17, 48}, id, {3, 48, 21}, id, seed += 2, "both broadcast");
        check_int8_views(p, {64}, id, {64, 7}, id, seed += 2, "vector @ matrix");
        check_int8_views(p, {5, 0}, id, {0, 3}, id, seed += 2, "K = 0");
        if (p == MatmulPolicy::library)  // cuBLASLt defines no K = 0
            CHECK(tessel::last_matmul_choice().implementation == std::string_view("cublasGemmStridedBatchedEx"));
        // cuBLASLt's int8 kernels take TN with its m (our N), K and the leading dimensions multiples
        // of 4 (the documented IMMA requirement, which the stand-in enforces; a GPU's heuristic may
        // take more): an odd N falls back to cuBLAS.
        check_int8_views(p, {3, 63, 96}, id, {36, 96}, tr, seed += 2, "N, K multiples of 4");
        CHECK_THAT(std::string(tessel::last_matmul_choice().implementation),
                   Catch::Contains(p == MatmulPolicy::handwritten ? "mma_matmul<int8" : "cublasLtMatmul"));
        check_int8_views(p, {63, 96}, id, {35, 96}, tr, seed += 2, "odd N");
#if !defined(TESSEL_BACKEND_CUDA)
        if (p == MatmulPolicy::library) CHECK(tessel::last_matmul_choice().implementation == std::string_view("cublasGemmStridedBatchedEx"));
#endif
    }
}

namespace {

// out = round(relu(alpha * row_scale[i] * col_scale[j] * (a @ w^T) + bias[j])) into Out: the scales are
// powers of two and the bias multiples of 2^-4, so every step is exact in fp32 (|acc| < 2^20 in practice, 2^-12
// granularity) and the only rounding is the final one to Out (int8: nearest even, saturated).
template <class Out>
void check_requantised(MatmulPolicy p, std::uint64_t seed) {
    const std::int64_t batch = 2, m = 37, n = 45, k = 150;
    const auto A = make<std::int8_t>({batch, m, k}, seed, true, 127), W = make<std::int8_t>({n, k}, seed + 1, true, 127);
    std::mt19937_64 rng(seed + 2);
    std::vector<float> rs(static_cast<std::size_t>(m)), cs(static_cast<std::size_t>(n)), bias(static_cast<std::size_t>(n));
    for (auto& x : rs) x = std::ldexp(1.f, -int(rng() % 2));
    for (auto& x : cs) x = std::ldexp(1.f, -2 - int(rng() % 2));
    for (auto& x : bias) x = float(int(rng() % 257) - 128) / 16;
    const auto dev = []<class U = float>(const std::vector<float>& v) {
        std::vector<U> u(v.size());
        for (std::size_t i = 0; i < v.size(); ++i) u[i] = tessel::testing::from_double<U>(v[i]);  // exact: multiples of 2^-4 below 8
        return tessel::from_host<U>(std::span<const U>(u), Shape{std::int64_t(v.size())});
    };
    const double alpha = 0x1p-8;
    const Reference ref = reference_matmul(A.host, A.base.shape(), logical(W.base.transpose(0, 1), W.base, W.host), Shape{k, n});
    const Tensor<Out> out = tessel::empty<Out>({batch, m, n});
    // 0xFF: NaN for fp32 and bf16, -1 for int8, which relu never leaves: an unwritten element fails.
    tessel::rt::memset_async(out.data(), 0xFF, std::size_t(out.numel()) * sizeof(Out), tessel::current_stream().handle());
    tessel::MatmulEpilogue<Out> e{.bias = dev.template operator()<typename tessel::MatmulEpilogue<Out>::Operand>(bias), .activation = tessel::Activation::relu, .row_scale = dev(rs), .col_scale = dev(cs)};
    tessel::matmul(A.base, W.base.transpose(0, 1), out, MatmulOptions{.alpha = alpha, .policy = p}, e);
    const auto got = out.to_vector();
    std::vector<double> want(got.size());
    std::size_t saturated = 0;
    for (std::int64_t z = 0; z < batch; ++z)
        for (std::int64_t i = 0; i < m; ++i)
            for (std::int64_t j = 0; j < n; ++j) {
                const std::size_t o = std::size_t((z * m + i) * n + j);
                const double v = std::max(0.0, alpha * rs[std::size_t(i)] * cs[std::size_t(j)] * ref.value[o] + bias[std::size_t(j)]);
                if constexpr (std::is_same_v<Out, std::int8_t>) {
                    want[o] = std::min(127.0, std::nearbyint(v));
                    saturated += v > 127.5;
                } else {
                    want[o] = tessel::testing::to_double(tessel::testing::from_double<Out>(v));
                }
            }
    INFO(name<Out>() << " " << tessel::policy_name(p) << ": " << tessel::last_matmul_choice().implementation);
    tessel::testing::check_close(got, want, std::vector<double>(got.size(), 0.0), "requantised int8 product");
    if constexpr (std::is_same_v<Out, std::int8_t>) CHECK(saturated > 0);  // the clamp was exercised
}

}  // namespace

TEST_CASE("int8 matmul requantises to int8 and dequantises to fp32 and bf16 with scales, bias and relu fused", "[ops][matmul][int8]") {
    if (tessel::device_count() == 0) return;
    std::uint64_t seed = 8000;
    for (MatmulPolicy p : policies) {
        check_requantised<std::int8_t>(p, seed += 3);
        check_requantised<float>(p, seed += 3);
        check_requantised<__nv_bfloat16>(p, seed += 3);
        if (p == MatmulPolicy::library)
            CHECK_THAT(std::string(tessel::last_matmul_choice().implementation), Catch::Contains("int32 product) + gemm_epilogue_apply"));
    }
}

TEST_CASE("int8 matmul into int32 takes every int32 alpha on both policies", "[ops][matmul][int8]") {
    if (tessel::device_count() == 0) return;
    // alpha = -2^31 is an int32 value: products of 0 and 1 scaled by it stay in range.
    std::vector<std::int8_t> a(2 * 16, 0), b(16 * 3, 0);
    a[0] = 1;            // row 0 of a picks b's row 0
    b[0] = 1, b[2] = 1;  // b's row 0: 1 0 1
    const auto ta = tessel::from_host<std::int8_t>(a, {2, 16}), tb = tessel::from_host<std::int8_t>(b, {16, 3});
    for (MatmulPolicy p : policies) {
        INFO(tessel::policy_name(p));
        const Tensor<int> out = tessel::full<int>({2, 3}, 7);
        tessel::matmul(ta, tb, out, MatmulOptions{.alpha = -2147483648.0, .policy = p});
        const int lo = std::numeric_limits<int>::min();
        CHECK(out.to_vector() == std::vector<int>{lo, 0, lo, 0, 0, 0});
    }
}

TEST_CASE("fp32 matmul with allow_tf32 runs on TF32 tensor cores within tf32's error bound", "[ops][matmul][tf32]") {
    if (tessel::device_count() == 0) return;
    const std::int64_t m = 133, n = 201, k = 260;  // K: whole 16-byte rows, so only a B by rows is copied
    const auto A = make<float>({m, k}, 9000, false), B = make<float>({k, n}, 9001, false), W = make<float>({n, k}, 9002, false);
    for (MatmulPolicy p : policies) {
        for (bool weight : {false, true}) {
            const Tensor<float> b = weight ? W.base.transpose(0, 1) : B.base;
            const Reference ref = weight ? reference_matmul(A.host, A.base.shape(), logical(b, W.base, W.host), b.shape())
                                         : reference_matmul(A.host, A.base.shape(), B.host, B.base.shape());
            tessel::testing::poison_next<float>(ref.shape);
            const Tensor<float> c = tessel::matmul(A.base, b, MatmulOptions{.policy = p, .allow_tf32 = true});
            const auto choice = tessel::last_matmul_choice();
            INFO(tessel::policy_name(p) << (weight ? " b by columns: " : " b by rows: ") << choice.implementation);
            if (p == MatmulPolicy::handwritten) {
                CHECK_THAT(std::string(choice.implementation), Catch::Contains("mma_matmul<tf32"));
                CHECK(choice.copied_operands == (weight ? 0 : 1));  // the kernel takes B by columns
            }
            // Each input rounded to tf32 (relative error 2^-11), so each product is off by at most
            // 2^-10 relatively; fp32 accumulation adds (K + 2) 2^-24; the output rounds once more.
            std::vector<double> tol(ref.value.size());
            for (std::size_t i = 0; i < tol.size(); ++i)
                tol[i] = (2 * 0x1p-11 + (k + 2) * 0x1p-24) * ref.magnitude[i] + 0x1p-24 * std::fabs(ref.value[i]);
            tessel::testing::check_close(c.to_vector(), ref.value, tol, "tf32 product");
        }
    }
}

TEST_CASE("int8 matmul refuses what an exact or a requantised product cannot take", "[ops][matmul][int8]") {
    if (tessel::device_count() == 0) return;
    const auto a = make<std::int8_t>({3, 32}, 1, true, 127).base, w = make<std::int8_t>({4, 32}, 2, true, 127).base;
    const Tensor<float> four = tessel::zeros<float>({4});
    CHECK_THAT(message([&] {
                   tessel::matmul(a, w.transpose(0, 1), tessel::empty<int>({3, 4}), MatmulOptions{}, tessel::MatmulEpilogue<int>{.col_scale = four});
               }),
               Catch::Contains("int32 output is the exact int8 product"));
    CHECK_THAT(message([&] { tessel::matmul(a, w.transpose(0, 1), tessel::empty<int>({3, 4}), MatmulOptions{.alpha = 0.5}); }),
               Catch::Contains("integer alpha and beta") && Catch::Contains("alpha = 0.5"));
    CHECK_THAT(message([&] {
                   tessel::matmul(a, w.transpose(0, 1), tessel::empty<std::int8_t>({3, 4}), MatmulOptions{},
                                  tessel::MatmulEpilogue<std::int8_t>{.row_scale = four});
               }),
               Catch::Contains("row scale must be a contiguous 1-d fp32 tensor of 3 elements"));
    CHECK_THAT(message([&] {
                   tessel::matmul(a, w.transpose(0, 1), tessel::empty<float>({3, 4}), MatmulOptions{},
                                  tessel::MatmulEpilogue<float>{.col_scale = four.to_host()});
               }),
               Catch::Contains("column scale must be in device memory"));
#if !defined(TESSEL_BACKEND_CUDA)
    // The stand-in refuses what cuBLAS's int8 GEMM refuses (lda, ldb multiples of 4, 4-byte aligned
    // A and B), so the library-path tests above show tessel never asks for it (it packs int8 rows in
    // whole 16-byte chunks).
    const int one = 1, zero = 0;
    const Tensor<int> c = tessel::empty<int>({8, 8});
    cublasHandle_t h = tessel::cublas::handle(tessel::current_device(), tessel::current_stream().handle());
    auto gemm = [&](const std::int8_t* x, int ld, long long stride, int batches) {
        return tessel::cublas::api::cublasGemmStridedBatchedEx(h, CUBLAS_OP_T, CUBLAS_OP_N, 2, 2, 6, &one, x, CUDA_R_8I, ld, stride, w.data(),
                                                              CUDA_R_8I, 32, 0, &zero, c.data(), CUDA_R_32I, 8, 0, batches,
                                                              CUBLAS_COMPUTE_32I, CUBLAS_GEMM_DEFAULT);
    };
    CHECK(gemm(a.data(), 32, 0, 1) == CUBLAS_STATUS_SUCCESS);
    CHECK(gemm(a.data(), 6, 0, 1) == CUBLAS_STATUS_INVALID_VALUE);
    CHECK(gemm(a.data() + 1, 28, 0, 1) == CUBLAS_STATUS_INVALID_VALUE);
    CHECK(gemm(a.data(), 8, 10, 2) == CUBLAS_STATUS_INVALID_VALUE);
    tessel::current_stream().synchronize();
#endif
}

namespace {

using F8 = __nv_fp8_e4m3;

// One-element device tensor.
Tensor<float> scalar(float v) { return tessel::from_host<float>(std::span<const float>(&v, 1), Shape{1}); }
// v (exact in U) as a device tensor of shape s.
template <class U>
Tensor<U> device_values(const std::vector<float>& v, const Shape& s) {
    std::vector<U> u(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) u[i] = tessel::testing::from_double<U>(v[i]);
    return tessel::from_host<U>(std::span<const U>(u), s);
}

// An fp8 e4m3 product through cuBLASLt (the library path; automatic takes it): values are integers
// in [-8, 8], which e4m3 holds exactly, and every scale a power of two, so fp32 accumulation is
// exact and the output is the exact value rounded once to Out. a = fa(A), b = fb(B) for fresh base
// operands; out = act(alpha a_scale b_scale row_scale[i] col_scale[j] (a @ b) + bias[j]) + residual.
struct Fp8Case {
    Shape base_a, base_b;
    bool a_transposed = false, b_transposed = true;  // b a weight [N, K] read through its transpose, by default
    bool bias = false, residual = false, row_col_scales = false;
    tessel::Activation activation = tessel::Activation::none;
};
template <class Out>
void check_fp8(const Fp8Case& t, std::uint64_t seed, const char* implementation, int copies) {
    using Operand = typename tessel::MatmulEpilogue<Out>::Operand;
    const auto A = make<F8>(t.base_a, seed, true, 8), B = make<F8>(t.base_b, seed + 1, true, 8);
    const Tensor<F8> a = t.a_transposed ? A.base.transpose(-1, -2) : A.base, b = t.b_transposed ? B.base.transpose(-1, -2) : B.base;
    const std::string label = "e4m3 -> " + name<Out>() + ": " + a.shape().to_string() + " @ " + b.shape().to_string();
    INFO(label);
    const Reference ref = reference_matmul(logical(a, A.base, A.host), a.shape(), logical(b, B.base, B.host), b.shape());
    const std::int64_t n = ref.shape[ref.shape.size() - 1], m = ref.shape[ref.shape.size() - 2];  // every case is 2-D or batched
    std::mt19937_64 rng(seed + 2);
    std::vector<float> rs(std::size_t(m), 1.f), cs(std::size_t(n), 1.f), bias(std::size_t(n), 0.f), res(ref.value.size(), 0.f);
    if (t.row_col_scales) {
        for (auto& x : rs) x = std::ldexp(1.f, -int(rng() % 3));
        for (auto& x : cs) x = std::ldexp(1.f, 1 - int(rng() % 3));
    }
    if (t.bias) for (auto& x : bias) x = float(int(rng() % 65) - 32) / 4;  // multiples of 1/4 below 8: exact in bf16
    if (t.residual) for (auto& x : res) x = float(int(rng() % 17) - 8);
    const float a_scale = 0.5f, b_scale = 0.25f;
    const double alpha = 2;
    tessel::MatmulEpilogue<Out> e{.activation = t.activation, .a_scale = scalar(a_scale), .b_scale = scalar(b_scale)};
    if (t.bias) e.bias = device_values<Operand>(bias, Shape{n});
    if (t.residual) e.residual = device_values<Operand>(res, ref.shape);
    if (t.row_col_scales) e.row_scale = device_values<float>(rs, Shape{m}), e.col_scale = device_values<float>(cs, Shape{n});
    tessel::testing::poison_next<Out>(ref.shape);
    const Tensor<Out> out = tessel::empty<Out>(ref.shape);
    tessel::matmul(a, b, out, MatmulOptions{.alpha = alpha}, e);  // automatic: fp8 has no table entry, so the library
    const auto choice = tessel::last_matmul_choice();
    INFO(choice.implementation);
    CHECK(choice.path == MatmulPolicy::library);
    CHECK(choice.implementation == std::string_view(implementation));
    if (copies >= 0) CHECK(choice.copied_operands == copies);
    const auto got = out.to_vector();
    std::vector<double> want(got.size());
    for (std::size_t o = 0; o < want.size(); ++o) {
        const std::size_t i = (o / std::size_t(n)) % std::size_t(m), j = o % std::size_t(n);
        double v = alpha * a_scale * b_scale * rs[i] * cs[j] * ref.value[o] + bias[j];
        if (t.activation == tessel::Activation::relu) v = std::max(0.0, v);
        want[o] = tessel::testing::to_double(tessel::testing::from_double<Out>(v + res[o]));
    }
    std::vector<double> got_d(got.size());
    for (std::size_t i = 0; i < got.size(); ++i) got_d[i] = tessel::testing::to_double(got[i]);
    tessel::testing::check_close(got_d, want, std::vector<double>(got.size(), 0.0), label);
}

}  // namespace

TEST_CASE("fp8 e4m3 matmul through cuBLASLt: per-tensor scales, fused or applied epilogues, exact", "[ops][matmul][fp8]") {
    if (tessel::device_count() == 0) return;
    const char* lt = "cublasLtMatmul";
    std::uint64_t seed = 9500;
    // cuBLASLt's fp8 kernels take its m (our N) and K in multiples of 16; M is free.
    check_fp8<float>({{1, 16}, {16, 16}}, seed += 3, lt, 0);
    check_fp8<float>({{33, 80}, {48, 80}}, seed += 3, lt, 0);
    check_fp8<float>({{3, 17, 64}, {32, 64}}, seed += 3, lt, 0);                        // b broadcast over a batch
    check_fp8<__nv_bfloat16>({{130, 272}, {272, 32}, false, false}, seed += 3, lt, 1);  // b by rows: packed by columns
    check_fp8<__half>({{96, 45}, {16, 96}, true}, seed += 3, lt, 1);                    // a transposed: packed by rows
    // What cuBLASLt fuses for 16-bit outputs (its fp8 bias is bf16 or fp16): the bias, in one call.
    check_fp8<__nv_bfloat16>({{37, 64}, {48, 64}, false, true, true}, seed += 3, "cublasLtMatmul (BIAS)", 0);
    // Not relu (cuBLASLt's makes NaN 0, torch.relu keeps it): the fp32 product, then the epilogue kernel.
    check_fp8<__nv_bfloat16>({{37, 64}, {48, 64}, false, true, true, false, false, tessel::Activation::relu}, seed += 3,
                             "cublasLtMatmul (fp32 product) + gemm_epilogue_apply", 0);
    // What it does not: an fp32 bias, a residual, row and column scales: the fp32 product, then one
    // epilogue kernel.
    const char* applied = "cublasLtMatmul (fp32 product) + gemm_epilogue_apply";
    check_fp8<float>({{37, 64}, {48, 64}, false, true, true, false, false, tessel::Activation::relu}, seed += 3, applied, 0);
    check_fp8<__nv_bfloat16>({{2, 19, 32}, {16, 32}, false, true, true, true, true, tessel::Activation::relu}, seed += 3, applied, 0);
    // K = 0, which cuBLASLt does not define: zeros, then the epilogue (the bias).
    check_fp8<float>({{5, 0}, {16, 0}, false, true, true}, seed += 3, applied, -1);
}

// Products that reach the output through tessel's epilogue kernel even without an epilogue (an int8
// product into anything but int32: cuBLAS writes int8 products only as int32; fp8 with K = 0: zeros
// first) into an output cuBLAS could write in place (a transposed one, a single row with a column
// stride): the kernel writes rows, so these go through a temporary.
TEST_CASE("int8 and fp8 products into a transposed or strided out", "[ops][matmul][int8][fp8]") {
    if (tessel::device_count() == 0) return;
    const std::int64_t m = 37, n = 29, k = 48;
    const auto A = make<std::int8_t>({m, k}, 9900, true, 127), W = make<std::int8_t>({n, k}, 9901, true, 127);
    const Reference ref = reference_matmul(A.host, A.base.shape(), logical(W.base.transpose(0, 1), W.base, W.host), Shape{k, n});
    const float nan = std::nanf("");
    for (MatmulPolicy p : policies) {
        INFO(tessel::policy_name(p));
        const Tensor<float> ct = tessel::full<float>({n, m}, nan).transpose(0, 1);  // column layout
        tessel::matmul(A.base, W.base.transpose(0, 1), ct, MatmulOptions{.policy = p});
        INFO(tessel::last_matmul_choice().implementation);
        const auto got = ct.contiguous().to_vector();
        tessel::testing::check_close(std::vector<double>(got.begin(), got.end()), ref.value, std::vector<double>(got.size(), 0.0),
                                     "int8 -> fp32 into a transposed out");
        const Tensor<int> it = tessel::full<int>({n, m}, std::numeric_limits<int>::min()).transpose(0, 1);
        tessel::matmul(A.base, W.base.transpose(0, 1), it, MatmulOptions{.policy = p});
        const auto got_i = it.contiguous().to_vector();
        tessel::testing::check_close(std::vector<double>(got_i.begin(), got_i.end()), ref.value, std::vector<double>(got_i.size(), 0.0),
                                     "int8 -> int32 into a transposed out");
        // One row into every other element of a row: the elements between stay as they were.
        const Tensor<float> row = tessel::full<float>({1, 2 * n}, nan);
        tessel::matmul(A.base.slice(0, 0, 1), W.base.transpose(0, 1), row.slice(1, 0, 2 * n, 2), MatmulOptions{.policy = p});
        const auto got_row = row.to_vector();
        for (std::int64_t j = 0; j < n; ++j) {
            CHECK(got_row[std::size_t(2 * j)] == ref.value[std::size_t(j)]);
            CHECK(std::isnan(got_row[std::size_t(2 * j + 1)]));
        }
    }
    // fp8 with K = 0 (zeros, then the epilogue's scales) into a transposed out.
    const Tensor<F8> a8 = tessel::empty<F8>({5, 0}), w8 = tessel::empty<F8>({16, 0});
    const Tensor<float> c8 = tessel::full<float>({16, 5}, nan).transpose(0, 1);
    tessel::matmul(a8, w8.transpose(0, 1), c8, MatmulOptions{}, tessel::MatmulEpilogue<float>{.a_scale = scalar(1), .b_scale = scalar(1)});
    CHECK(c8.contiguous().to_vector() == std::vector<float>(80, 0.f));
}

TEST_CASE("fp8 matmul into fp32 with beta scales only the product by the row and column scales", "[ops][matmul][fp8]") {
    if (tessel::device_count() == 0) return;
    // out = alpha a_scale b_scale row_scale[i] col_scale[j] (a @ b) + beta out: integers and powers of
    // two, so exact. The fp32 product is the output's type: cuBLASLt's beta * out must not be scaled.
    const std::int64_t m = 21, n = 16, k = 32;
    const auto A = make<F8>({m, k}, 9950, true, 8), W = make<F8>({n, k}, 9951, true, 8);
    const Reference ref = reference_matmul(A.host, A.base.shape(), logical(W.base.transpose(0, 1), W.base, W.host), Shape{k, n});
    std::vector<float> rs(static_cast<std::size_t>(m)), cs(static_cast<std::size_t>(n));
    for (std::size_t i = 0; i < rs.size(); ++i) rs[i] = std::ldexp(1.f, int(i % 3) - 1);
    for (std::size_t j = 0; j < cs.size(); ++j) cs[j] = std::ldexp(1.f, 1 - int(j % 3));
    for (int scales = 1; scales <= 3; ++scales) {  // row, column, both
        INFO("scales " << scales);
        tessel::MatmulEpilogue<float> e{.a_scale = scalar(0.5f), .b_scale = scalar(2.f)};
        if (scales & 1) e.row_scale = device_values<float>(rs, Shape{m});
        if (scales & 2) e.col_scale = device_values<float>(cs, Shape{n});
        const Tensor<float> out = tessel::full<float>({m, n}, 10.f);
        tessel::matmul(A.base, W.base.transpose(0, 1), out, MatmulOptions{.alpha = 2, .beta = 3}, e);
        const auto got = out.to_vector();
        std::vector<double> want(got.size());
        for (std::size_t o = 0; o < want.size(); ++o) {
            const std::size_t i = o / std::size_t(n), j = o % std::size_t(n);
            want[o] = 2 * 0.5 * 2 * ((scales & 1) ? rs[i] : 1) * ((scales & 2) ? cs[j] : 1) * ref.value[o] + 3 * 10.0;
        }
        tessel::testing::check_close(std::vector<double>(got.begin(), got.end()), want, std::vector<double>(got.size(), 0.0),
                                     "fp8 -> fp32 with beta and scales");
    }
}

TEST_CASE("fp8 matmul into a transposed or padded out: M stays free", "[ops][matmul][fp8]") {
    if (tessel::device_count() == 0) return;
    // cuBLASLt's fp8 rule (its m and the output's leading dim multiples of 16) is met through a
    // temporary whatever the output's layout: M = 37 into a column-layout out and into rows 18 apart.
    const std::int64_t m = 37, n = 16, k = 64;
    const auto A = make<F8>({m, k}, 9960, true, 8), W = make<F8>({n, k}, 9961, true, 8);
    const Reference ref = reference_matmul(A.host, A.base.shape(), logical(W.base.transpose(0, 1), W.base, W.host), Shape{k, n});
    const float nan = std::nanf("");
    const tessel::MatmulEpilogue<float> e{.a_scale = scalar(1), .b_scale = scalar(1)};
    const Tensor<float> transposed = tessel::full<float>({n, m}, nan).transpose(0, 1);
    tessel::matmul(A.base, W.base.transpose(0, 1), transposed, MatmulOptions{}, e);
    const auto got_t = transposed.contiguous().to_vector();
    tessel::testing::check_close(std::vector<double>(got_t.begin(), got_t.end()), ref.value, std::vector<double>(got_t.size(), 0.0),
                                 "fp8 into a transposed out");
    const Tensor<float> wide = tessel::full<float>({m, n + 2}, nan);
    tessel::matmul(A.base, W.base.transpose(0, 1), wide.narrow(1, 0, n), MatmulOptions{}, e);
    const auto got_w = wide.to_vector();
    for (std::int64_t i = 0; i < m; ++i) {
        for (std::int64_t j = 0; j < n; ++j) CHECK(got_w[std::size_t(i * (n + 2) + j)] == ref.value[std::size_t(i * n + j)]);
        CHECK(std::isnan(got_w[std::size_t(i * (n + 2) + n)]));  // the padding is not written
    }
}

TEST_CASE("fp8 matmul refuses what cuBLASLt cannot run, naming it", "[ops][matmul][fp8]") {
    if (tessel::device_count() == 0) return;
    const auto a = make<F8>({5, 32}, 1, true, 8).base, w = make<F8>({16, 32}, 2, true, 8).base;
    const auto unsupported = [](auto&& f) { return message<tessel::Unsupported>(f); };
    CHECK_THAT(unsupported([&] { tessel::matmul(a, w.transpose(0, 1), MatmulOptions{.policy = MatmulPolicy::handwritten}); }),
               Catch::Contains("e4m3 products run on cuBLASLt only"));
    const auto odd_k = make<F8>({5, 40}, 3, true, 8).base, odd_kw = make<F8>({16, 40}, 4, true, 8).base;
    CHECK_THAT(unsupported([&] { tessel::matmul(odd_k, odd_kw.transpose(0, 1)); }),
               Catch::Contains("no e4m3 kernel for 5 x 16 x 40") && Catch::Contains("multiples of 16"));
    const auto odd_n = make<F8>({20, 32}, 5, true, 8).base;
    CHECK_THAT(unsupported([&] { tessel::matmul(a, odd_n.transpose(0, 1)); }), Catch::Contains("no e4m3 kernel for 5 x 20 x 32"));
    CHECK_THAT(message([&] { tessel::matmul(a, w.transpose(0, 1), MatmulOptions{}, tessel::MatmulEpilogue<float>{.a_scale = tessel::ones<float>({2})}); }),
               Catch::Contains("a_scale is a per-tensor scale: one fp32 element, not shape [2]"));
    CHECK_THAT(message([&] {
                   tessel::matmul(a, w.transpose(0, 1), MatmulOptions{}, tessel::MatmulEpilogue<float>{.b_scale = scalar(1).to_host()});
               }),
               Catch::Contains("b_scale must be in device memory"));
    const auto h = make<__half>({5, 32}, 6, true).base, hw = make<__half>({16, 32}, 7, true).base;
    CHECK_THAT(message([&] { tessel::matmul(h, hw.transpose(0, 1), MatmulOptions{}, tessel::MatmulEpilogue<__half>{.a_scale = scalar(1)}); }),
               Catch::Contains("a_scale and b_scale are fp8 inputs' per-tensor scales"));
}
