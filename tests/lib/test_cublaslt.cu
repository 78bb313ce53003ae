// tessel::cublaslt::matmul against a double-precision host reference, on both backends (cuBLASLt on a
// GPU, its stand-in sim/cublaslt.hpp on the sim): every type combination tessel passes, odd sizes,
// transposes, strided batches with a broadcast operand, alpha/beta, C aliasing D, every epilogue,
// fp8 with non-unit scales, outputs poisoned first. Inputs are small integers, so every accumulator
// sums exactly and the only rounding is the final one to D's type (GELU aside, which gets a bound).
// Then the problems cuBLASLt has no algorithm for (false, nothing written), bad input (InvalidArgument
// from tessel, LibraryError naming the status and the call from cuBLASLt), the plan cache, the
// workspace, the handle pool, and on the sim the stand-in's own refusals.
#include <tessel/lib/cublaslt.hpp>
#include <tessel/memory/allocator.hpp>

#include <cuda_fp8.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <thread>

#include "../support/device_array.hpp"

using tessel::cublaslt::LtGemm;
using tessel::testing::DeviceArray;

namespace {

std::size_t bytes_of(cudaDataType t) { return tessel::data_type_bytes(t); }

template <class T>
void put(std::byte* p, T x) {
    std::memcpy(p, &x, sizeof x);
}
template <class T>
T get(const std::byte* p) {
    T x;
    std::memcpy(&x, p, sizeof x);
    return x;
}
// v stored as type t (the CUDA headers' conversions: to nearest even; fp8 saturating; int8 to
// nearest even and saturated, as cuBLASLt's int8 outputs), and the value read back.
void encode(cudaDataType t, std::byte* p, double v) {
    switch (t) {
        case CUDA_R_16F: put(p, __float2half_rn(float(v))); break;
        case CUDA_R_16BF: put(p, __float2bfloat16_rn(float(v))); break;
        case CUDA_R_32F: put(p, float(v)); break;
        case CUDA_R_64F: put(p, v); break;
        case CUDA_R_32I: put(p, std::int32_t(v)); break;
        case CUDA_R_8I: put(p, std::int8_t(std::clamp(std::nearbyint(v), -128.0, 127.0))); break;
        case CUDA_R_8F_E4M3: put(p, __nv_fp8_e4m3(float(v))); break;
        case CUDA_R_8F_E5M2: put(p, __nv_fp8_e5m2(float(v))); break;
        default: FAIL("type " << int(t));
    }
}
double decode(cudaDataType t, const std::byte* p) {
    switch (t) {
        case CUDA_R_16F: return __half2float(get<__half>(p));
        case CUDA_R_16BF: return __bfloat162float(get<__nv_bfloat16>(p));
        case CUDA_R_32F: return get<float>(p);
        case CUDA_R_64F: return get<double>(p);
        case CUDA_R_32I: return get<std::int32_t>(p);
        case CUDA_R_8I: return get<std::int8_t>(p);
        case CUDA_R_8F_E4M3: return float(get<__nv_fp8_e4m3>(p));
        case CUDA_R_8F_E5M2: return float(get<__nv_fp8_e5m2>(p));
        default: return 0;
    }
}
double rounded(cudaDataType t, double v) {
    std::byte b[8];
    encode(t, b, v);
    return decode(t, b);
}

// `count` elements of type t in device memory, `offset` bytes into their allocation (to misalign
// them on purpose), with their values on the host.
struct Buffer {
    cudaDataType type = CUDA_R_32F;
    std::size_t count = 0, offset = 0;
    std::shared_ptr<DeviceArray<std::byte>> mem;
    std::vector<double> host;
    void* data() const { return mem->data() + offset; }
    void upload() const {
        std::vector<std::byte> bytes(mem->size(), std::byte{0});
        for (std::size_t i = 0; i < count; ++i) encode(type, &bytes[offset + i * bytes_of(type)], host[i]);
        mem->upload(bytes);
    }
    std::vector<double> download() const {
        const auto bytes = mem->download();
        std::vector<double> v(count);
        for (std::size_t i = 0; i < count; ++i) v[i] = decode(type, &bytes[offset + i * bytes_of(type)]);
        return v;
    }
};
// Integers in [lo, hi] (exact in every input type used here).
Buffer random_buffer(cudaDataType t, std::size_t count, std::uint64_t seed, int lo = -4, int hi = 4, std::size_t offset = 0) {
    Buffer b{t, count, offset, std::make_shared<DeviceArray<std::byte>>(offset + count * bytes_of(t) + 1), std::vector<double>(count)};
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int> d(lo, hi);
    for (double& v : b.host) v = d(rng);
    b.upload();
    return b;
}
// An output filled with 0xFF (NaN in every floating type, fp8 included) or 0x7F (integers), so an
// element left unwritten shows.
Buffer poisoned(cudaDataType t, std::size_t count) {
    Buffer b{t, count, 0, std::make_shared<DeviceArray<std::byte>>(count * bytes_of(t) + 1), {}};
    const std::byte fill = t == CUDA_R_32I || t == CUDA_R_8I ? std::byte{0x7f} : std::byte{0xff};
    b.mem->upload(std::vector<std::byte>(b.mem->size(), fill));
    return b;
}
DeviceArray<float> scalar(float v) { return DeviceArray<float>(std::vector<float>{v}); }

double gelu_tanh(double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }
double gelu_erf(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }

// One product to run and check: types, shapes (odd ones), transposes, batch, scalars, epilogue.
struct Case {
    cudaDataType a = CUDA_R_32F, b = CUDA_R_32F, d = CUDA_R_32F;
    cudaDataType c = CUDA_R_32F;  // C's type when it is not D (fp8 outputs)
    cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
    cudaDataType scale = CUDA_R_32F;
    cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
    std::int64_t m = 7, n = 33, k = 127;
    int batch = 1;
    bool broadcast_b = false;  // B's batch stride 0
    double alpha = 1, beta = 0;
    bool c_is_d = true;
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    cudaDataType bias = CUDA_R_32F;  // the documented default for the types
    bool bias_per_batch = false;
    float a_scale = 0, b_scale = 0, d_scale = 0;  // 0: none
    std::int64_t pad = 3;                         // ld = stored rows + pad
    bool poison_c = false;                        // C (apart from D) full of NaN: with beta == 0 it must not be read
};

std::string describe(const Case& c) {
    std::ostringstream os;
    os << "A " << int(c.a) << " B " << int(c.b) << " D " << int(c.d) << " compute " << int(c.compute) << (c.ta == CUBLAS_OP_N ? " N" : " T")
       << (c.tb == CUBLAS_OP_N ? "N" : "T") << " m " << c.m << " n " << c.n << " k " << c.k << " batch " << c.batch
       << (c.broadcast_b ? " (B broadcast)" : "") << " alpha " << c.alpha << " beta " << c.beta << (c.c_is_d ? " C=D" : " C apart")
       << " epilogue " << int(c.epilogue) << " scales " << c.a_scale << "/" << c.b_scale << "/" << c.d_scale;
    return os.str();
}

bool has_bias(cublasLtEpilogue_t e) {
    return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_RELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_BIAS;
}
bool has_gelu(cublasLtEpilogue_t e) { return e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_BIAS; }
bool has_relu(cublasLtEpilogue_t e) { return e == CUBLASLT_EPILOGUE_RELU || e == CUBLASLT_EPILOGUE_RELU_BIAS; }

// A case's device buffers and the LtGemm describing them.
struct Prepared {
    Case c;
    Buffer A, B, C, D, bias;
    std::shared_ptr<DeviceArray<float>> scales[3];  // A, B, D
    std::int64_t lda = 0, ldb = 0, ldc = 0, stride_a = 0, stride_b = 0, stride_c = 0;
    std::vector<std::byte> d_before;  // D's bytes before the call: the padding must keep them
    LtGemm g;
};

Prepared prepare(const Case& c, std::uint64_t seed) {
    Prepared p;
    p.c = c;
    const bool ta = c.ta != CUBLAS_OP_N, tb = c.tb != CUBLAS_OP_N;
    const std::int64_t a_rows = ta ? c.k : c.m, a_cols = ta ? c.m : c.k, b_rows = tb ? c.n : c.k, b_cols = tb ? c.k : c.n;
    p.lda = a_rows + c.pad, p.ldb = b_rows + c.pad, p.ldc = c.m + c.pad;
    p.stride_a = p.lda * a_cols, p.stride_b = c.broadcast_b ? 0 : p.ldb * b_cols, p.stride_c = p.ldc * c.n;
    p.A = random_buffer(c.a, std::size_t(p.stride_a * c.batch), seed);
    p.B = random_buffer(c.b, std::size_t(p.ldb * b_cols * (c.broadcast_b ? 1 : c.batch)), seed + 1);
    const auto out = std::size_t(p.stride_c * c.batch);
    if (c.c_is_d) {
        p.D = c.beta != 0 ? random_buffer(c.d, out, seed + 2) : poisoned(c.d, out);
    } else {
        p.C = c.poison_c ? poisoned(c.c, out) : random_buffer(c.c, out, seed + 2);
        p.D = poisoned(c.d, out);
    }
    p.d_before = p.D.mem->download();
    if (has_bias(c.epilogue)) p.bias = random_buffer(c.bias, std::size_t(c.m * (c.bias_per_batch ? c.batch : 1)), seed + 3, -8, 8);
    const float values[3] = {c.a_scale, c.b_scale, c.d_scale};
    for (int i = 0; i < 3; ++i)
        if (values[i] != 0) p.scales[i] = std::make_shared<DeviceArray<float>>(std::vector<float>{values[i]});
    LtGemm& g = p.g;
    g.transa = c.ta, g.transb = c.tb, g.m = c.m, g.n = c.n, g.k = c.k, g.batch = c.batch;
    g.a = {p.A.data(), c.a, p.lda, p.stride_a};
    g.b = {p.B.data(), c.b, p.ldb, p.stride_b};
    if (!c.c_is_d) g.c = {p.C.data(), c.c, p.ldc, p.stride_c};
    g.d = {p.D.data(), c.d, p.ldc, p.stride_c};
    g.compute = c.compute, g.scale_type = c.scale, g.alpha = c.alpha, g.beta = c.beta, g.epilogue = c.epilogue;
    if (has_bias(c.epilogue)) g.bias = p.bias.data(), g.bias_batch_stride = c.bias_per_batch ? c.m : 0;
    g.a_scale = p.scales[0] ? p.scales[0]->data() : nullptr;
    g.b_scale = p.scales[1] ? p.scales[1]->data() : nullptr;
    g.d_scale = p.scales[2] ? p.scales[2]->data() : nullptr;
    return p;
}

// Compares D with the reference computed here in double, and its padding rows with what they held.
void verify(const Prepared& p) {
    const Case& c = p.c;
    INFO(describe(c));
    const bool ta = c.ta != CUBLAS_OP_N, tb = c.tb != CUBLAS_OP_N;
    const bool wrap = c.compute == CUBLAS_COMPUTE_32I && c.d == CUDA_R_32I;  // int32 arithmetic, exact here
    const double scale = (c.a_scale ? c.a_scale : 1.0) * (c.b_scale ? c.b_scale : 1.0), d_scale = c.d_scale ? c.d_scale : 1.0;
    const std::vector<double>& prior = c.c_is_d ? p.D.host : p.C.host;  // D's prior values when C is D
    const auto got_all = p.D.download();
    std::vector<double> got, want, tol;
    std::size_t discriminating = 0;  // GELU elements where the erf form would fall outside the tolerance
    for (int z = 0; z < c.batch; ++z)
        for (std::int64_t j = 0; j < c.n; ++j)
            for (std::int64_t i = 0; i < c.m; ++i) {
                double s = 0;
                for (std::int64_t q = 0; q < c.k; ++q) {
                    const double a = p.A.host[std::size_t(z * p.stride_a + (ta ? q + i * p.lda : i + q * p.lda))];
                    const double b = p.B.host[std::size_t(z * p.stride_b + (tb ? j + q * p.ldb : q + j * p.ldb))];
                    s += a * b;
                }
                const std::size_t o = std::size_t(z * p.stride_c + i + j * p.ldc);
                double v = c.alpha * scale * s + (c.beta != 0 ? c.beta * prior[o] : 0.0);
                if (has_bias(c.epilogue)) v += p.bias.host[std::size_t(i + (c.bias_per_batch ? z * c.m : 0))];
                got.push_back(got_all[o]);
                if (wrap || !has_gelu(c.epilogue)) {
                    if (has_relu(c.epilogue)) v = std::max(v, 0.0);
                    // Integers: every accumulator is exact, so D is the exact value rounded once.
                    want.push_back(wrap ? v : rounded(c.d, v * d_scale));
                    tol.push_back(0);
                    continue;
                }
                // GELU: the documented tanh form. The sim's epilogue runs libm's tanhf in fp32 (a few
                // fp32 ulps); a GPU's may use tanh.approx.f32 (relative error 2^-10.99), hence
                // 2^-10 |x| / 2 there. Plus D's own rounding.
                const double g = gelu_tanh(v) * d_scale, roundoff = c.d == CUDA_R_32F ? 0x1p-24 : c.d == CUDA_R_16F ? 0x1p-11 : 0x1p-8;
                const double math =
                    8 * 0x1p-24 * (std::fabs(v) + 1) + (tessel::backend == tessel::Backend::cuda ? 0x1p-10 * std::fabs(v) / 2 : 0);
                want.push_back(g);
                tol.push_back(math + roundoff * std::fabs(g) + 0x1p-24);
                discriminating += std::fabs(gelu_erf(v) * d_scale - g) > tol.back();
            }
    tessel::testing::check_close(got, want, tol, "D");
    if (has_gelu(c.epilogue) && c.d == CUDA_R_32F && tessel::backend == tessel::Backend::sim)
        CHECK(discriminating > 0);  // the tolerance is tight enough to tell the tanh form from erf's
    // Rows m..ld-1 of every column are not D's: they keep their bytes.
    const auto after = p.D.mem->download();
    std::size_t touched = 0;
    const std::size_t w = bytes_of(c.d);
    for (int z = 0; z < c.batch; ++z)
        for (std::int64_t j = 0; j < c.n; ++j)
            for (std::int64_t i = c.m; i < p.ldc; ++i) {
                const std::size_t o = std::size_t(z * p.stride_c + i + j * p.ldc) * w;
                touched += std::memcmp(&after[o], &p.d_before[o], w) != 0;
            }
    CHECK(touched == 0);
}

void check_case(const Case& c, std::uint64_t seed, tessel::rt::stream_t stream = nullptr) {
    const Prepared p = prepare(c, seed);
    INFO(describe(c));
    REQUIRE(tessel::cublaslt::matmul(tessel::current_device(), stream, p.g));
    tessel::rt::device_synchronize();
    verify(p);
}

// Whether fp8 products run here (sm_89 or later; the sim is sm_90).
bool fp8_device() {
    const auto props = tessel::properties(tessel::current_device());
    return props.major * 10 + props.minor >= 89;
}

using tessel::testing::message;

constexpr cublasOperation_t N = CUBLAS_OP_N, T = CUBLAS_OP_T;

// The IMMA int8 kernels' case: TN, leading dimensions multiples of 4; an int32 output takes an
// int32 scale type, an int8 output fp32.
Case imma(cudaDataType d, std::int64_t m, std::int64_t n, std::int64_t k) {
    const cudaDataType scale = d == CUDA_R_32I ? CUDA_R_32I : CUDA_R_32F;
    return {.a = CUDA_R_8I, .b = CUDA_R_8I, .d = d, .compute = CUBLAS_COMPUTE_32I, .scale = scale, .ta = T, .tb = N, .m = m, .n = n, .k = k,
            .pad = 4};
}
// The fp8 kernels' case: TN, leading dimensions of 16 bytes.
Case fp8(cudaDataType a, cudaDataType b, cudaDataType d, std::int64_t m, std::int64_t n, std::int64_t k) {
    return {.a = a, .b = b, .d = d, .ta = T, .tb = N, .m = m, .n = n, .k = k, .pad = 16};
}
// `c` changed by `f`: a case reads as its base and what differs.
template <class F>
Case with(Case c, F f) {
    f(c);
    return c;
}

}  // namespace

TEST_CASE("cuBLASLt products equal the reference for every type combination tessel passes", "[lib][cublaslt]") {
    if (tessel::device_count() == 0) return;
    std::uint64_t seed = 100;
    struct Mnk {
        std::int64_t m, n, k;
    };
    const Mnk odd[] = {{1, 1, 1}, {7, 33, 127}, {127, 7, 33}, {33, 127, 7}};
    const std::pair<cublasOperation_t, cublasOperation_t> ops[] = {{N, N}, {T, N}, {N, T}, {T, T}};
    // fp32 on every shape and transpose, then each other floating combination on a shape each.
    for (const Mnk& s : odd)
        for (auto [ta, tb] : ops) check_case({.ta = ta, .tb = tb, .m = s.m, .n = s.n, .k = s.k}, seed += 4);
    struct Types {
        cudaDataType ab, d;
        cublasComputeType_t compute;
        cudaDataType scale;
    };
    const Types floating[] = {{CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, CUDA_R_32F},  // integers: exact in tf32
                              {CUDA_R_16F, CUDA_R_16F, CUBLAS_COMPUTE_32F, CUDA_R_32F},
                              {CUDA_R_16F, CUDA_R_32F, CUBLAS_COMPUTE_32F, CUDA_R_32F},
                              {CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F, CUDA_R_32F},
                              {CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F, CUDA_R_32F},
                              {CUDA_R_64F, CUDA_R_64F, CUBLAS_COMPUTE_64F, CUDA_R_64F}};
    for (const Types& t : floating)
        for (int i = 0; i < 4; ++i)
            check_case({.a = t.ab, .b = t.ab, .d = t.d, .compute = t.compute, .scale = t.scale, .ta = ops[i].first, .tb = ops[i].second,
                        .m = odd[i].m, .n = odd[i].n, .k = odd[i].k, .alpha = 2},
                       seed += 4);
    // int8 with int32 output, and with int8 output: alpha 0.5 makes halves that round to even, and
    // sums of up to 128 products of [-4, 4] saturate.
    for (const Mnk& s : {Mnk{4, 7, 32}, Mnk{32, 33, 128}, Mnk{128, 1, 4}}) {
        check_case(with(imma(CUDA_R_32I, s.m, s.n, s.k), [](Case& c) { c.alpha = 3; }), seed += 4);
        check_case(with(imma(CUDA_R_8I, s.m, s.n, s.k), [](Case& c) { c.alpha = 0.5; }), seed += 4);
    }
    if (!fp8_device()) {
        WARN("fp8 products need compute capability 8.9 or later; not tested on this device");
        return;
    }
    // fp8: m and k multiples of 16; per-tensor scales that are not 1 (powers of two: the products
    // stay exact). e4m3 x e4m3, and e4m3 with e5m2 either way round; an e4m3 output beside a bf16 C
    // with D's scale (values under e4m3's 448).
    struct Fp8 {
        cudaDataType a, b, c, d;
        float sa, sb, sd;
    };
    const cudaDataType e4m3 = CUDA_R_8F_E4M3, e5m2 = CUDA_R_8F_E5M2, bf16 = CUDA_R_16BF, fp16 = CUDA_R_16F;
    const Fp8 types[] = {{e4m3, e4m3, bf16, bf16, 0.5f, 2.f, 0},       {e4m3, e4m3, fp16, fp16, 4.f, 0.25f, 0},
                         {e4m3, e4m3, CUDA_R_32F, CUDA_R_32F, 0.5f, 0.5f, 0}, {e4m3, e5m2, bf16, bf16, 2.f, 1.f, 0},
                         {e5m2, e4m3, fp16, fp16, 1.f, 0.5f, 0},       {e4m3, e4m3, bf16, e4m3, 0.5f, 2.f, 0.25f}};
    int i = 0;
    for (const Fp8& f : types)
        for (const Mnk& s : {Mnk{16, 7, 32}, Mnk{32, 33, 16}, Mnk{128, 1, 48}})
            check_case(with(fp8(f.a, f.b, f.d, s.m, s.n, s.k),
                            [&](Case& c) {
                                c.c = f.c, c.c_is_d = f.c == f.d, c.alpha = (i++ % 2) ? 1 : 0.5;
                                c.a_scale = f.sa, c.b_scale = f.sb, c.d_scale = f.sd;
                            }),
                       seed += 4);
}

TEST_CASE("cuBLASLt takes alpha, beta, C apart from or aliasing D, strided batches and a non-default stream", "[lib][cublaslt]") {
    if (tessel::device_count() == 0) return;
    std::uint64_t seed = 900;
    check_case({.m = 33, .n = 7, .k = 17, .alpha = 2, .beta = -1, .c_is_d = false}, seed += 4);
    check_case({.a = CUDA_R_16BF, .b = CUDA_R_16BF, .d = CUDA_R_16BF, .m = 17, .n = 9, .k = 33, .alpha = 0.5, .beta = 1}, seed += 4);
    check_case(with(imma(CUDA_R_32I, 8, 3, 12), [](Case& c) { c.alpha = 2, c.beta = -3; }), seed += 4);
    // beta == 0 never reads C: NaN there (C apart, or C = D poisoned) must not show.
    check_case({.a = CUDA_R_16F, .b = CUDA_R_16F, .d = CUDA_R_32F, .m = 9, .n = 5, .k = 7, .c_is_d = false, .poison_c = true}, seed += 4);
    check_case({.m = 9, .n = 5, .k = 7, .beta = 0}, seed += 4);
    // Strided batches: B broadcast over them (stride 0), transposed operands.
    check_case({.ta = T, .tb = T, .m = 7, .n = 33, .k = 17, .batch = 3, .broadcast_b = true, .alpha = 2, .beta = 1}, seed += 4);
    check_case({.a = CUDA_R_16BF, .b = CUDA_R_16BF, .d = CUDA_R_32F, .m = 19, .n = 4, .k = 9, .batch = 4}, seed += 4);
    check_case(with(imma(CUDA_R_32I, 12, 5, 8), [](Case& c) { c.batch = 2, c.broadcast_b = true; }), seed += 4);
    // A stream of its own: the product is ordered on it.
    const tessel::rt::stream_t s = tessel::rt::stream_create(true);
    check_case({.m = 7, .n = 127, .k = 33, .batch = 2, .alpha = 2, .beta = 1}, seed += 4, s);
    tessel::rt::stream_destroy(s);
}

TEST_CASE("cuBLASLt's epilogues: bias per row, ReLU, GELU (tanh form), with their documented bias types", "[lib][cublaslt]") {
    if (tessel::device_count() == 0) return;
    std::uint64_t seed = 2000;
    for (cublasLtEpilogue_t e : {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_RELU, CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_RELU_BIAS,
                                 CUBLASLT_EPILOGUE_GELU, CUBLASLT_EPILOGUE_GELU_BIAS}) {
        // alpha 1/16 keeps GELU's inputs where its curve bends (and is exact). The bias is D's type.
        check_case({.m = 33, .n = 7, .k = 9, .alpha = 0.0625, .beta = has_gelu(e) ? 0.0 : 1.0, .epilogue = e}, seed += 4);
        check_case({.a = CUDA_R_16BF, .b = CUDA_R_16BF, .d = CUDA_R_16BF, .ta = T, .m = 17, .n = 5, .k = 16, .batch = 2, .alpha = 0.0625,
                    .epilogue = e, .bias = CUDA_R_16BF, .bias_per_batch = true},
                   seed += 4);
        check_case({.a = CUDA_R_16F, .b = CUDA_R_16F, .d = CUDA_R_32F, .m = 9, .n = 3, .k = 7, .alpha = 0.0625, .epilogue = e}, seed += 4);
    }
    // int8 output: the bias is fp32 (the scale type).
    check_case(with(imma(CUDA_R_8I, 8, 5, 16), [](Case& c) { c.alpha = 0.25, c.epilogue = CUBLASLT_EPILOGUE_RELU_BIAS; }), seed += 4);
    if (!fp8_device()) return;
    // fp8: a bf16 bias for bf16 outputs and for fp32 ones.
    check_case(with(fp8(CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUDA_R_16BF, 16, 7, 32),
                    [](Case& c) {
                        c.alpha = 0.0625, c.epilogue = CUBLASLT_EPILOGUE_GELU_BIAS, c.bias = CUDA_R_16BF;
                        c.a_scale = 0.5f, c.b_scale = 2.f;
                    }),
               seed += 4);
    check_case(with(fp8(CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUDA_R_32F, 32, 3, 16),
                    [](Case& c) { c.epilogue = CUBLASLT_EPILOGUE_RELU_BIAS, c.bias = CUDA_R_16BF, c.a_scale = 2.f, c.b_scale = 0.25f; }),
               seed += 4);
}

TEST_CASE("cuBLASLt's missing algorithms come back as false, with nothing written", "[lib][cublaslt]") {
    if (tessel::device_count() == 0) return;
    const tessel::Device dev = tessel::current_device();
    const auto refused = [&](const Case& c, const char* why) {
        INFO(why << ": " << describe(c));
        const Prepared p = prepare(c, 77);
        const auto before = tessel::cublaslt::stats();
        CHECK_FALSE(tessel::cublaslt::matmul(dev, nullptr, p.g));
        CHECK(tessel::cublaslt::stats().no_algorithm == before.no_algorithm + 1);
        CHECK(tessel::cublaslt::stats().products == before.products);
        tessel::rt::device_synchronize();
        CHECK(p.D.mem->download() == p.d_before);  // untouched
    };
    // Not in cuBLASLt's type tables: A and B of different 16-bit types; e5m2 x e5m2.
    refused({.a = CUDA_R_16F, .b = CUDA_R_16BF, .d = CUDA_R_32F, .m = 8, .n = 8, .k = 8}, "fp16 x bf16");
    refused(fp8(CUDA_R_8F_E5M2, CUDA_R_8F_E5M2, CUDA_R_16BF, 16, 16, 16), "e5m2 x e5m2");
    // k == 0: D = epilogue(beta C), which cuBLASLt does not document; the caller's path has it.
    refused({.m = 4, .n = 4, .k = 0}, "k = 0");
    // fp8 is TN only on sm_89, sm_90 and sm_12x, and absent before sm_89 (on sm_100 NN runs).
    const auto props = tessel::properties(dev);
    if (props.major * 10 + props.minor <= 90 || props.major == 12)
        refused(with(fp8(CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUDA_R_16BF, 16, 16, 16), [](Case& c) { c.ta = N; }), "fp8 NN");
    if (tessel::backend == tessel::Backend::sim) {
        // The documented kernel requirements, which the real heuristic may meet with kernels the
        // documentation does not promise: checked on the stand-in only.
        refused(with(imma(CUDA_R_32I, 8, 8, 8), [](Case& c) { c.ta = N; }), "int8 NN");
        refused(imma(CUDA_R_32I, 7, 8, 8), "int8 m = 7");
        refused(fp8(CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUDA_R_16BF, 8, 16, 16), "fp8 m = 8");
        refused(with(fp8(CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUDA_R_16BF, 16, 16, 16), [](Case& c) { c.pad = 3; }),
                "fp8 ld not a multiple of 16");
    }
}

TEST_CASE("cuBLASLt refuses bad input with a message naming it", "[lib][cublaslt]") {
    if (tessel::device_count() == 0) return;
    const tessel::Device dev = tessel::current_device();
    const Prepared p = prepare({.m = 7, .n = 5, .k = 3}, 5);
    const auto with = [&](auto change) {
        LtGemm g = p.g;
        change(g);
        return message([&] { (void)tessel::cublaslt::matmul(dev, nullptr, g); });
    };
    using Catch::Contains;
    CHECK_THAT(with([](LtGemm& g) { g.a.ld = 2; }), Contains("lda 2 is less than A's 7 stored rows"));
    CHECK_THAT(with([](LtGemm& g) { g.d.ld = 6; }), Contains("ldd 6 is less than m = 7"));
    CHECK_THAT(with([](LtGemm& g) { g.k = -1; }), Contains("must not be negative"));
    CHECK_THAT(with([](LtGemm& g) { g.d.data = nullptr; }), Contains("D is null"));
    CHECK_THAT(with([](LtGemm& g) { g.epilogue = CUBLASLT_EPILOGUE_BIAS; }), Contains("adds a bias but bias is null"));
    CHECK_THAT(with([&](LtGemm& g) { g.bias = p.A.data(); }), Contains("a bias was given but the epilogue does not add one"));
    CHECK_THAT(with([](LtGemm& g) { g.epilogue = CUBLASLT_EPILOGUE_GELU_AUX; }), Contains("is not one this layer passes"));
    const auto scale = scalar(2);
    CHECK_THAT(with([&](LtGemm& g) { g.d_scale = scale.data(); }), Contains("d_scale given but D is not fp8"));
    CHECK_THAT(with([&](LtGemm& g) { g.a_scale = scale.data(); }), Contains("a_scale given but A is not fp8"));
    CHECK_THAT(with([](LtGemm& g) { g.scale_type = CUDA_R_32I, g.alpha = 0.5; }), Contains("must be int32 values"));
    // A cuBLASLt status becomes a LibraryError naming it and the call: an attribute of the wrong
    // size, and a heuristic asked for no results (both CUBLAS_STATUS_INVALID_VALUE, documented).
    tessel::cublaslt::MatmulDesc desc(CUBLAS_COMPUTE_32F, CUDA_R_32F);
    try {
        desc.set(CUBLASLT_MATMUL_DESC_TRANSA, std::int16_t(1));
        FAIL("no error for a 2-byte TRANSA");
    } catch (const tessel::LibraryError& e) {
        CHECK(e.library() == "cuBLASLt");
        CHECK(e.status_name() == "CUBLAS_STATUS_INVALID_VALUE");
        CHECK_THAT(std::string(e.what()), Contains("cublasLtMatmulDescSetAttribute(attribute 3)") && Contains("test_cublaslt.cu"));
    }
    tessel::cublaslt::MatrixLayout a(CUDA_R_32F, 4, 4, 4);
    tessel::cublaslt::MatmulPreference pref;
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    CHECK_THROWS_WITH(TESSEL_CUBLASLT_CHECK(tessel::cublaslt::api::cublasLtMatmulAlgoGetHeuristic(
                          tessel::cublaslt::handle(dev), desc.get(), a.get(), a.get(), a.get(), a.get(), pref.get(), 0, &result, &found)),
                      Contains("cuBLASLt error CUBLAS_STATUS_INVALID_VALUE") && Contains("cublasLtMatmulAlgoGetHeuristic"));
}

TEST_CASE("cuBLASLt plans are cached per problem and alignment", "[lib][cublaslt]") {
    if (tessel::device_count() == 0) return;
    const tessel::Device dev = tessel::current_device();
    // A shape no other test uses, so the first call is this test's.
    Case c{.m = 11, .n = 13, .k = 5, .pad = 1};
    Prepared p = prepare(c, 1);
    const auto s0 = tessel::cublaslt::stats();
    REQUIRE(tessel::cublaslt::matmul(dev, nullptr, p.g));
    const auto s1 = tessel::cublaslt::stats();
    CHECK(s1.heuristic_queries == s0.heuristic_queries + 1);
    REQUIRE(tessel::cublaslt::matmul(dev, nullptr, p.g));  // the same problem: descriptors and algorithm reused
    const auto s2 = tessel::cublaslt::stats();
    CHECK(s2.heuristic_queries == s1.heuristic_queries);
    CHECK(s2.cache_hits == s1.cache_hits + 1);
    CHECK(s2.products == s1.products + 1);
    // Other buffers with the same alignment: a hit. A one 4 bytes into its allocation: a miss (the
    // algorithm was chosen for 256-byte A), and again for 8 bytes; each result still right.
    Prepared q = prepare(c, 2);
    REQUIRE(tessel::cublaslt::matmul(dev, nullptr, q.g));
    CHECK(tessel::cublaslt::stats().heuristic_queries == s2.heuristic_queries);
    for (std::size_t offset : {4, 8}) {
        INFO("A at byte " << offset);
        Prepared r = prepare(c, 3);
        r.A = random_buffer(CUDA_R_32F, r.A.count, 4, -4, 4, offset);
        r.g.a.data = r.A.data();
        const auto before = tessel::cublaslt::stats();
        REQUIRE(tessel::cublaslt::matmul(dev, nullptr, r.g));
        CHECK(tessel::cublaslt::stats().heuristic_queries == before.heuristic_queries + 1);
        tessel::rt::device_synchronize();
        verify(r);
    }
    tessel::rt::device_synchronize();
    verify(p);
    verify(q);
    // A cached plan takes each call's bias and scale pointers, not those of the call that made it.
    std::vector<Case> twice = {{.a = CUDA_R_16BF, .b = CUDA_R_16BF, .d = CUDA_R_16BF, .m = 21, .n = 3, .k = 5,
                                .epilogue = CUBLASLT_EPILOGUE_RELU_BIAS, .bias = CUDA_R_16BF, .pad = 0}};
    if (fp8_device())
        twice.push_back(with(fp8(CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, 16, 3, 16), [](Case& c) {
            c.c = CUDA_R_16BF, c.c_is_d = false, c.a_scale = 0.5f, c.b_scale = 2.f, c.d_scale = 0.25f;
        }));
    for (const Case& first : twice) {
        Case second = first;
        if (first.a_scale != 0) second.a_scale = 4.f, second.b_scale = 0.5f, second.d_scale = 0.125f;
        const Prepared one = prepare(first, 30), two = prepare(second, 31);
        REQUIRE(tessel::cublaslt::matmul(dev, nullptr, one.g));
        const auto before = tessel::cublaslt::stats();
        REQUIRE(tessel::cublaslt::matmul(dev, nullptr, two.g));
        CHECK(tessel::cublaslt::stats().cache_hits == before.cache_hits + 1);
        tessel::rt::device_synchronize();
        verify(one);
        verify(two);
    }
#if defined(TESSEL_BACKEND_SIM)
    // The stand-in saw exactly the queries tessel counted.
    const auto h0 = tessel::sim::cublaslt::heuristic_calls();
    const auto t0 = tessel::cublaslt::stats().heuristic_queries;
    Prepared z = prepare({.m = 3, .n = 2, .k = 19, .pad = 2}, 9);
    for (int i = 0; i < 3; ++i) REQUIRE(tessel::cublaslt::matmul(dev, nullptr, z.g));
    CHECK(tessel::sim::cublaslt::heuristic_calls() - h0 == tessel::cublaslt::stats().heuristic_queries - t0);
    CHECK(tessel::cublaslt::stats().heuristic_queries - t0 == 1);
#endif
}

TEST_CASE("cuBLASLt's workspace comes from the caching allocator and goes back with cuBLAS's; handles are pooled", "[lib][cublaslt]") {
    if (tessel::device_count() == 0) return;
    const tessel::Device dev = tessel::current_device();
    const tessel::rt::stream_t s = tessel::rt::stream_create(true);
    tessel::rt::device_synchronize();
    tessel::cublas::release_workspaces();
    const std::int64_t before = tessel::memory::allocated(dev);
    const Prepared p = prepare({.m = 6, .n = 6, .k = 6}, 3);
    REQUIRE(tessel::cublaslt::matmul(dev, s, p.g));
    tessel::rt::stream_synchronize(s);
    CHECK(tessel::memory::allocated(dev) - before == std::int64_t(tessel::cublas::workspace_bytes(dev)));
#if defined(TESSEL_BACKEND_SIM)
    CHECK(tessel::sim::cublaslt::workspace_bytes(tessel::cublaslt::handle(dev)) == tessel::cublas::workspace_bytes(dev));
#endif
    tessel::cublas::release_workspaces();
    CHECK(tessel::memory::allocated(dev) == before);
    verify(p);
    tessel::rt::stream_destroy(s);
    // A thread gets its own handle, given back to the pool when it ends: the next thread takes it.
    const auto on_a_thread = [&](std::uint64_t seed) {
        const Prepared q = prepare({.m = 5, .n = 9, .k = 7}, seed);
        bool ok = false;
        std::string error;
        std::thread t([&] {
            try {
                ok = tessel::cublaslt::matmul(dev, nullptr, q.g);
            } catch (const std::exception& e) {
                error = e.what();
            }
        });
        t.join();
        CHECK(error == "");
        CHECK(ok);
        tessel::rt::device_synchronize();
        verify(q);
    };
    on_a_thread(10);
#if defined(TESSEL_BACKEND_SIM)
    const auto created = tessel::sim::cublaslt::handles_created();
    on_a_thread(11);
    CHECK(tessel::sim::cublaslt::handles_created() == created);
#endif
    tessel::cublas::release_workspaces();  // the threads' workspaces (their handles are their keys)
    CHECK(tessel::memory::allocated(dev) == before);
}

TEST_CASE("cuBLAS handles reduce in the compute type, never in a 16-bit output type", "[lib][cublaslt]") {
    // cuBLAS's default math mode lets split-K keep fp16/bf16 partial sums; tessel's 16-bit products
    // are rounded once from fp32 on every path (docs/matmul.md), so the handles refuse that.
    cublasMath_t mode{};
    const cublasHandle_t h = tessel::cublas::handle(tessel::Device{0}, nullptr);
    REQUIRE(tessel::cublas::api::cublasGetMathMode(h, &mode) == CUBLAS_STATUS_SUCCESS);
    CHECK((unsigned(mode) & CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION) != 0);
    CHECK((unsigned(mode) & CUBLAS_TF32_TENSOR_OP_MATH) == 0);  // TF32 only by a call's compute type (allow_tf32)
}

#if defined(TESSEL_BACKEND_SIM)  // the stand-in's own check
TEST_CASE("the sim's cuBLAS runs only with its handle's device current, as CUDA launches kernels", "[.multidevice]") {
    // cuBLAS works on the device current at cublasCreate and launches into its stream; CUDA refuses a
    // launch into a stream of another device, and a null stream would be the wrong device's default
    // stream. The stand-in refuses both, so a tessel call that does not switch devices fails in CI.
    REQUIRE(tessel::device_count() >= 2);
    REQUIRE(tessel::current_device() == tessel::Device{0});
    std::optional<tessel::cublas::Handle> h;
    void* mem = nullptr;
    {
        tessel::DeviceGuard on(tessel::Device{1});
        h.emplace();
        mem = tessel::rt::malloc_device(3 * sizeof(double));
        const double init[3] = {3, 5, -1};
        tessel::rt::memcpy(mem, init, sizeof init);
    }
    const double alpha = 1, beta = 0;
    const auto gemm = [&] {
        return tessel::cublas::api::cublasGemmStridedBatchedEx(h->get(), CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &alpha, mem, CUDA_R_64F, 1, 0,
                                                               static_cast<char*>(mem) + 8, CUDA_R_64F, 1, 0, &beta,
                                                               static_cast<char*>(mem) + 16, CUDA_R_64F, 1, 0, 1, CUBLAS_COMPUTE_64F,
                                                               CUBLAS_GEMM_DEFAULT);
    };
    CHECK(gemm() == CUBLAS_STATUS_EXECUTION_FAILED);  // device 0 current
    CHECK_THAT(tessel::sim::api::last_error_detail(), Catch::Contains("a handle of device 1") && Catch::Contains("device 0 is current"));
    (void)tessel::rt::api::cudaGetLastError();
    {
        tessel::DeviceGuard on(tessel::Device{1});
        CHECK(gemm() == CUBLAS_STATUS_SUCCESS);
        double out[3] = {};
        tessel::rt::memcpy(out, mem, sizeof out);
        CHECK(out[2] == 15.0);  // written only by the call made on its device
        h.reset();
        tessel::rt::free_device(mem);
    }
}
#endif  // TESSEL_BACKEND_SIM
