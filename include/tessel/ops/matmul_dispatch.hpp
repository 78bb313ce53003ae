// How tessel::matmul runs a product once its shapes are checked (ops/matmul.hpp): the policy's
// path, the operand layouts each path takes as they lie (else one copy), the batch dims merged into
// one stride (the rest walked on the host), and the launch: a hand-written kernel with the epilogue
// fused into its store, or the library: one cublasLtMatmul for what cuBLASLt takes (16-bit, int8,
// TF32, and the epilogues it fuses: bias, relu, tanh GELU), else cublasGemmStridedBatchedEx
// (row-major C = A B as column-major C^T = B^T A^T) followed by gemm_epilogue_apply when there is an
// epilogue.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <source_location>
#include <string>
#include <vector>

#include <tessel/kernels/gemm_epilogue.cuh>
#include <tessel/kernels/mma_matmul.cuh>
#include <tessel/kernels/simt_matmul.cuh>

#include "../lib/cublas.hpp"
#include "../lib/cublaslt.hpp"
#include "../runtime/launch.hpp"
#include "../stream/stream.hpp"
#include "assign.hpp"  // device_attribute, allow_dynamic_smem, max_blocks
#include "copy.hpp"
#include "matmul_options.hpp"

namespace tessel::ops::detail {

// A matrix operand of a batched product: its [rows, cols] strides and the batch stride.
struct MatrixArg {
    const void* data;
    std::int64_t rows, cols, row_stride, col_stride, batch_stride;
};

// Row layout: a row's elements adjacent, rows ld >= cols apart; column layout the transpose. A
// size-1 dim's stride does not matter. ld is what BLAS calls the leading dimension.
// A matrix with one row or column has both layouts; layout_of prefers row.
enum class MatrixLayout { row, col, other };
inline bool row_layout(const MatrixArg& m) { return (m.cols <= 1 || m.col_stride == 1) && (m.rows <= 1 || m.row_stride >= m.cols); }
inline bool col_layout(const MatrixArg& m) { return (m.rows <= 1 || m.row_stride == 1) && (m.cols <= 1 || m.col_stride >= m.rows); }
inline MatrixLayout layout_of(const MatrixArg& m) {
    return row_layout(m) ? MatrixLayout::row : col_layout(m) ? MatrixLayout::col : MatrixLayout::other;
}
inline std::int64_t leading_dim(const MatrixArg& m, MatrixLayout l) {
    if (l == MatrixLayout::row) return m.rows <= 1 ? std::max<std::int64_t>(m.cols, 1) : m.row_stride;
    return m.cols <= 1 ? std::max<std::int64_t>(m.rows, 1) : m.col_stride;
}
template <class Tn>
MatrixArg matrix_arg(const Tensor<Tn>& t) {
    const int r = t.dim();
    return {t.data(), t.shape()[r - 2], t.shape()[r - 1], t.strides()[r - 2], t.strides()[r - 1], r > 2 ? t.strides()[r - 3] : 0};
}

template <class T>
constexpr bool tensor_core_type = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

// Whether T's hand-written product is mma_matmul (tensor cores: 16-bit inputs, int8, and fp32 when
// TF32 is allowed) rather than simt_matmul (exact fp32, fp64).
template <class T>
bool mma_kernel(const MatmulOptions& o) {
    return tensor_core_type<T> || std::is_same_v<T, std::int8_t> || (std::is_same_v<T, float> && o.allow_tf32);
}

// What a path takes as it lies. simt_matmul: row layout. mma_matmul (and int8 on either path): A in
// row layout, B in column layout (a linear layer's transposed weight) or, for 16-bit inputs only, row
// layout (ldmatrix.trans moves 16-bit elements); rows of whole 16-byte chunks (ld and batch strides
// multiples of 16 bytes, a 16-byte aligned start).
template <class T>
bool handwritten_takes(const Tensor<T>& t, bool is_b, bool mma) {
    const MatrixArg m = matrix_arg(t);
    if (!mma) return row_layout(m);
    const MatrixLayout l = !is_b           ? (row_layout(m) ? MatrixLayout::row : MatrixLayout::other)
                           : sizeof(T) == 2 ? layout_of(m)
                                            : (col_layout(m) ? MatrixLayout::col : MatrixLayout::other);
    if (l == MatrixLayout::other) return false;
    constexpr std::int64_t V = 16 / sizeof(T);
    if (leading_dim(m, l) % V != 0 || reinterpret_cast<std::uintptr_t>(t.data()) % 16 != 0) return false;
    for (int d = 0; d + 2 < t.dim(); ++d)
        if (t.shape()[d] > 1 && t.strides()[d] % V != 0) return false;
    return true;
}

// A copy of t that handwritten_takes: contiguous rows (columns, for mma_matmul's B of a type that
// needs them), for mma_matmul padded to whole 16-byte chunks (the padding is never read: the kernel
// zero-fills past K and N).
template <class T>
Tensor<T> packed(const Tensor<T>& t, rt::stream_t stream, bool is_b, bool mma) {
    const TensorOptions on{.device = t.device(), .stream = stream, .non_blocking = true};
    if (!mma) return t.to(on);
    const int r = t.dim();
    const bool columns = is_b && sizeof(T) != 2;
    const Tensor<T> src = columns ? t.transpose(r - 2, r - 1) : t;
    Shape padded = src.shape();
    constexpr std::int64_t V = 16 / sizeof(T);
    const std::int64_t cols = padded[r - 1];
    padded[r - 1] = (cols + V - 1) / V * V;
    Tensor<T> view = empty<T>(padded, on).narrow(r - 1, 0, cols);
    view.copy_(src, stream);
    return columns ? view.transpose(r - 2, r - 1) : view;
}

template <class T>
cudaDataType blas_type() {
    if constexpr (std::is_same_v<T, float>) return CUDA_R_32F;
    else if constexpr (std::is_same_v<T, double>) return CUDA_R_64F;
    else if constexpr (std::is_same_v<T, __half>) return CUDA_R_16F;
    else if constexpr (std::is_same_v<T, std::int8_t>) return CUDA_R_8I;
    else if constexpr (std::is_same_v<T, int>) return CUDA_R_32I;
    else return CUDA_R_16BF;
}

inline int checked_int(std::int64_t v, const char* what) {
    if (v > std::numeric_limits<int>::max())
        fail<Unsupported>("matmul: ", what, " ", v, " does not fit the 32-bit arguments of the kernels and of cuBLAS; split the product");
    return int(v);
}

template <class T>
constexpr const char* dtype_name() {
    if constexpr (std::is_same_v<T, float>) return "fp32";
    else if constexpr (std::is_same_v<T, double>) return "fp64";
    else if constexpr (std::is_same_v<T, __half>) return "fp16";
    else if constexpr (std::is_same_v<T, std::int8_t>) return "int8";
    else return "bf16";
}
// The dtype as the dispatch table keys it: fp32 on TF32 tensor cores is "tf32".
template <class T>
const char* dtype_key(const MatmulOptions& o) {
    return std::is_same_v<T, float> && o.allow_tf32 ? "tf32" : dtype_name<T>();
}

// What a library GEMM writes before an epilogue kernel runs: int32 for int8 inputs, else the
// accumulator's fp32 (fp64 for fp64).
template <class T>
using product_t = std::conditional_t<std::is_same_v<T, double>, double, std::conditional_t<std::is_same_v<T, std::int8_t>, int, float>>;
// The type the epilogue computes in (kernels::GemmEpilogue's Acc): the product's, except that an
// int8 product bound for anything but int32 is dequantised in fp32.
template <class T, class Out>
using accumulator_t = std::conditional_t<std::is_same_v<product_t<T>, int> && !std::is_same_v<Out, int>, float, product_t<T>>;
// The epilogue T's kernels take: scaled (row and column dequantisation scales) for int8 products
// dequantised in fp32.
template <class T, class Out>
using epilogue_t = kernels::GemmEpilogue<accumulator_t<T, Out>, Out, std::is_same_v<T, std::int8_t> && !std::is_same_v<Out, int>>;

// A row-major product C = A B as the column-major product BLAS computes: row-major C is
// column-major C^T = B^T A^T, so B goes first; a column-layout C takes A first. A row-layout operand
// read column-major is its transpose, which is what C^T = B^T A^T wants; with C in column layout
// the roles swap.
struct BlasProblem {
    bool c_row;
    const MatrixArg* first;
    const MatrixArg* second;
    cublasOperation_t op_first, op_second;
    int m, n, k, ld_first, ld_second, ldc;
};
inline BlasProblem blas_problem(const MatrixArg& a, const MatrixArg& b, const MatrixArg& c) {
    const MatrixLayout la = layout_of(a), lb = layout_of(b), lc = layout_of(c);
    BlasProblem p;
    p.c_row = lc == MatrixLayout::row;
    p.first = p.c_row ? &b : &a;
    p.second = p.c_row ? &a : &b;
    const MatrixLayout lf = p.c_row ? lb : la, ls = p.c_row ? la : lb;
    p.op_first = (lf == MatrixLayout::row) == p.c_row ? CUBLAS_OP_N : CUBLAS_OP_T;
    p.op_second = (ls == MatrixLayout::row) == p.c_row ? CUBLAS_OP_N : CUBLAS_OP_T;
    p.m = checked_int(p.c_row ? c.cols : c.rows, "N");
    p.n = checked_int(p.c_row ? c.rows : c.cols, "M");
    p.k = checked_int(a.cols, "K");
    p.ld_first = checked_int(leading_dim(*p.first, lf), "leading dimension");
    p.ld_second = checked_int(leading_dim(*p.second, ls), "leading dimension");
    p.ldc = checked_int(leading_dim(c, lc), "leading dimension");
    return p;
}

// One cublasGemmStridedBatchedEx for `batches` products C = alpha A B + beta C, row-major meaning.
template <class T, class Out>
void library_gemm(Device device, rt::stream_t stream, const MatrixArg& a, const MatrixArg& b, const MatrixArg& c, std::int64_t batches,
                  const MatmulOptions& o, std::source_location site) {
    const BlasProblem p = blas_problem(a, b, c);
    cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
    if constexpr (std::is_same_v<T, double>) compute = CUBLAS_COMPUTE_64F;
    if constexpr (std::is_same_v<T, std::int8_t>) compute = CUBLAS_COMPUTE_32I;  // alpha and beta are int32 (integers, checked)
    if (std::is_same_v<T, float> && o.allow_tf32) compute = CUBLAS_COMPUTE_32F_FAST_TF32;
    const float alpha32 = float(o.alpha), beta32 = float(o.beta);
    const double alpha64 = o.alpha, beta64 = o.beta;
    const std::int32_t alpha_i = std::int32_t(o.alpha), beta_i = std::int32_t(o.beta);
    const void* alpha = compute == CUBLAS_COMPUTE_64F ? static_cast<const void*>(&alpha64)
                        : compute == CUBLAS_COMPUTE_32I ? static_cast<const void*>(&alpha_i) : &alpha32;
    const void* beta = compute == CUBLAS_COMPUTE_64F ? static_cast<const void*>(&beta64)
                       : compute == CUBLAS_COMPUTE_32I ? static_cast<const void*>(&beta_i) : &beta32;
    cublasHandle_t h = cublas::handle(device, stream);
    cublas::check(cublas::api::cublasGemmStridedBatchedEx(
                      h, p.op_first, p.op_second, p.m, p.n, p.k, alpha, p.first->data, blas_type<T>(), p.ld_first, p.first->batch_stride,
                      p.second->data, blas_type<T>(), p.ld_second, p.second->batch_stride, beta, const_cast<void*>(c.data),
                      blas_type<Out>(), p.ldc, c.batch_stride, checked_int(batches, "batch count"), compute, CUBLAS_GEMM_DEFAULT),
                  "cublasGemmStridedBatchedEx", site);
}

// Which inputs the library path gives cuBLASLt: 16-bit, int8 (into int32), fp32 on TF32, and exact
// fp32 when cuBLASLt can fuse its epilogue; fp64 and plain fp32 stay with cuBLAS.
template <class T, class Out>
bool lt_takes(const MatmulOptions& o, bool fuses) {
    if constexpr (std::is_same_v<T, double>) return false;
    else if constexpr (std::is_same_v<T, std::int8_t>) return std::is_same_v<Out, int> && !fuses;
    else if constexpr (std::is_same_v<T, float>) return o.allow_tf32 || fuses;
    else return true;
}

// cuBLASLt's epilogue for e on a product whose C has row layout or not, or nothing when it cannot
// fuse e: no residual, no scales, relu or the tanh GELU (cuBLASLt's GELU is the tanh form), a bias
// along D's rows (C's columns for a row-layout C: torch's linear).
template <class Out>
std::optional<cublasLtEpilogue_t> lt_epilogue(const MatmulEpilogue<Out>& e, bool c_row) {
    if (e.residual || e.row_scale || e.col_scale) return std::nullopt;
    if (e.bias && e.bias_per_row == c_row) return std::nullopt;
    switch (e.activation) {
        case Activation::none: return e.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
        case Activation::relu: return e.bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
        case Activation::gelu_tanh: return e.bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
        default: return std::nullopt;
    }
}
inline const char* lt_epilogue_name(cublasLtEpilogue_t e) {
    switch (e) {
        case CUBLASLT_EPILOGUE_BIAS: return "cublasLtMatmul (BIAS)";
        case CUBLASLT_EPILOGUE_RELU: return "cublasLtMatmul (RELU)";
        case CUBLASLT_EPILOGUE_RELU_BIAS: return "cublasLtMatmul (RELU_BIAS)";
        case CUBLASLT_EPILOGUE_GELU: return "cublasLtMatmul (GELU)";
        case CUBLASLT_EPILOGUE_GELU_BIAS: return "cublasLtMatmul (GELU_BIAS)";
        default: return "cublasLtMatmul";
    }
}

// The product (and epilogue) as one cublasLtMatmul, the heuristic given the pointers' alignments;
// false, with nothing queued, when cuBLASLt has no algorithm for it (or K = 0, which cuBLASLt does
// not define) so the caller takes cuBLAS.
template <class T, class Out>
bool lt_gemm(Device device, rt::stream_t stream, const MatrixArg& a, const MatrixArg& b, const MatrixArg& c, std::int64_t batches,
             const MatmulOptions& o, cublasLtEpilogue_t epilogue, const void* bias, std::source_location site) {
    if (a.cols == 0) return false;
    const BlasProblem p = blas_problem(a, b, c);
    cublaslt::LtGemm g;
    g.transa = p.op_first;
    g.transb = p.op_second;
    g.m = p.m, g.n = p.n, g.k = p.k;
    g.a = {p.first->data, blas_type<T>(), p.ld_first, p.first->batch_stride};
    g.b = {p.second->data, blas_type<T>(), p.ld_second, p.second->batch_stride};
    g.d = {const_cast<void*>(c.data), blas_type<Out>(), p.ldc, c.batch_stride};
    g.batch = checked_int(batches, "batch count");
    if constexpr (std::is_same_v<T, std::int8_t>) g.compute = CUBLAS_COMPUTE_32I, g.scale_type = CUDA_R_32I;
    else if (std::is_same_v<T, float> && o.allow_tf32) g.compute = CUBLAS_COMPUTE_32F_FAST_TF32;
    g.alpha = o.alpha;
    g.beta = o.beta;
    g.epilogue = epilogue;
    g.bias = bias;
    return cublaslt::matmul(device, stream, g, site);
}

// The hand-written kernels, one launch for the batch: mma_matmul (bf16/fp16 in, the input type or
// fp32 out; fp32 on TF32; int8 in, int32 or a requantised output) or simt_matmul (fp32/fp64).
// Problems of fewer than two 128 x 128 tiles per multiprocessor take 64 x 64 tiles.
template <class T, class Out>
std::string_view handwritten_gemm(Device device, rt::stream_t stream, const MatrixArg& a, const MatrixArg& b, const MatrixArg& c,
                                  std::int64_t batches, const epilogue_t<T, Out>& epilogue, bool mma, std::source_location site) {
    using Epilogue = epilogue_t<T, Out>;
    const int m = checked_int(c.rows, "M"), n = checked_int(c.cols, "N"), k = checked_int(a.cols, "K");
    const bool b_columns = sizeof(T) != 2 ? mma : layout_of(b) == MatrixLayout::col;  // tf32 and int8 take B by columns
    const int lda = checked_int(leading_dim(a, MatrixLayout::row), "leading dimension");
    const int ldb = checked_int(leading_dim(b, b_columns ? MatrixLayout::col : MatrixLayout::row), "leading dimension");
    const int ldc = checked_int(leading_dim(c, MatrixLayout::row), "leading dimension");
    const int nb = checked_int(batches, "batch count");
    const std::int64_t big_tiles = ((std::int64_t(m) + 127) / 128) * ((std::int64_t(n) + 127) / 128) * batches;
    const bool big = big_tiles >= 2 * std::int64_t(device_attribute<cudaDevAttrMultiProcessorCount>(device));
    DeviceGuard guard(device);
    if constexpr (!std::is_same_v<T, double>) {
        if (mma) {
            const int major = device_attribute<cudaDevAttrComputeCapabilityMajor>(device);
            if (major < 8)
                fail<Unsupported>("matmul: the hand-written ", std::is_same_v<T, float> ? "tf32" : dtype_name<T>(), " kernel runs on tensor "
                                  "cores with mma.sync, which needs sm_80 or newer; device ", device.index, " is sm_", major,
                                  "x: use MatmulPolicy::library (automatic does)");
            auto run = [&]<class Tile, bool BColumns>() {
                constexpr auto kernel = kernels::mma_matmul<T, Out, Tile, BColumns, Epilogue>;
                allow_dynamic_smem<kernel>(device, int(Tile::smem_bytes()));
                launch(kernel, GridDim(Tile::grid(m, n, nb), site), Tile::block(), Tile::smem_bytes(), stream, m, n, k,
                       static_cast<const T*>(a.data), lda, a.batch_stride, static_cast<const T*>(b.data), ldb, b.batch_stride,
                       static_cast<Out*>(const_cast<void*>(c.data)), ldc, c.batch_stride, nb, epilogue);
                static const std::string name = std::string("mma_matmul<") + (std::is_same_v<T, float> ? "tf32" : dtype_name<T>()) + ", " +
                                                std::to_string(Tile::bm) + "x" + std::to_string(Tile::bn) + ", " +
                                                std::to_string(Tile::stages) + " stages" + (BColumns ? ", B by columns>" : ">");
                return std::string_view(name);
            };
            auto pick = [&]<class Tile>() -> std::string_view {
                if constexpr (sizeof(T) == 2)
                    if (!b_columns) return run.template operator()<Tile, false>();
                return run.template operator()<Tile, true>();  // tf32 and int8: packed by columns beforehand
            };
            return big ? pick.template operator()<kernels::MmaTile<128, 128, 2, 2, 4>>()
                       : pick.template operator()<kernels::MmaTile<64, 64, 2, 2, 3>>();
        }
    }
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        static_assert(std::is_same_v<T, Out>, "the SIMT kernel writes its input type");
        // 16-byte global loads need every row (and batch) of A and B to start 16-byte aligned.
        constexpr int V = int(16 / sizeof(T));
        const bool aligned = lda % V == 0 && ldb % V == 0 && a.batch_stride % V == 0 && b.batch_stride % V == 0 &&
                             reinterpret_cast<std::uintptr_t>(a.data) % 16 == 0 && reinterpret_cast<std::uintptr_t>(b.data) % 16 == 0;
        auto run = [&]<class Tile, bool Aligned>() {
            launch(kernels::simt_matmul<T, Tile, Aligned>, GridDim(Tile::grid(m, n, nb), site), Tile::block(), 0, stream, m, n, k,
                   static_cast<const T*>(a.data), lda, a.batch_stride, static_cast<const T*>(b.data), ldb, b.batch_stride,
                   static_cast<T*>(const_cast<void*>(c.data)), ldc, c.batch_stride, nb, epilogue);
        };
        auto pick = [&]<class Tile>() -> std::string_view {
            static const std::string prefix = std::string("simt_matmul<") + std::to_string(Tile::bm) + "x" + std::to_string(Tile::bn) + "x" +
                                              std::to_string(Tile::bk);
            static const std::string vector = prefix + ", 16-byte loads>", scalar = prefix + ", scalar loads>";
            if (aligned) run.template operator()<Tile, true>();
            else run.template operator()<Tile, false>();
            return aligned ? vector : scalar;
        };
        if constexpr (std::is_same_v<T, double>) return pick.template operator()<kernels::SimtTile<double, 64, 64, 8, 4, 4>>();
        else if (big) return pick.template operator()<kernels::SimtTile<float, 128, 128, 8, 8, 8>>();
        else return pick.template operator()<kernels::SimtTile<float, 64, 64, 16, 4, 4>>();
    } else {
        return {};  // not reached: every other type runs on the tensor cores
    }
}

// Batch dims (all but the last two) of three same-rank views merged where every operand allows
// (stride[i] == stride[i+1] * size[i+1]), size-1 dims dropped: what is left beyond one dim is
// walked on the host. Merging keeps the batch entries in row-major order.
struct BatchDims {
    std::vector<std::int64_t> size, sa, sb, sc;
};
template <class T, class Out>
BatchDims merged_batch_dims(const Tensor<T>& a, const Tensor<T>& b, const Tensor<Out>& c) {
    BatchDims d;
    for (int i = 0; i + 2 < c.dim(); ++i) {
        const std::int64_t n = c.shape()[i];
        if (n == 1) continue;
        const std::int64_t x = a.strides()[i], y = b.strides()[i], z = c.strides()[i];
        if (!d.size.empty() && d.sa.back() == x * n && d.sb.back() == y * n && d.sc.back() == z * n) {
            d.size.back() *= n;
            d.sa.back() = x, d.sb.back() = y, d.sc.back() = z;
        } else {
            d.size.push_back(n), d.sa.push_back(x), d.sb.push_back(y), d.sc.push_back(z);
        }
    }
    return d;
}

// The policy's path for this call, recorded in the thread's MatmulChoice: automatic follows the
// dispatch table (matmul_policy.hpp) for the device's architecture, the dtype, whether an epilogue
// is fused and the shape class.
template <class T>
MatmulChoice& choose_path(const MatmulOptions& o, Device device, std::int64_t m, std::int64_t n, bool fused) {
    MatmulChoice& choice = last_choice();
    const MatmulPolicy asked = o.policy ? *o.policy : matmul_policy();
    if (asked == MatmulPolicy::automatic) {
        choice = automatic_choice(device_attribute<cudaDevAttrComputeCapabilityMajor>(device), dtype_key<T>(o), fused, m, n);
        return choice;
    }
    choice = {};
    choice.path = asked;
    choice.reason = asked == MatmulPolicy::library ? "policy library" : "policy handwritten";
    return choice;
}

// A problem as autotuning keys it.
struct AutotuneKey {
    int device;
    const char* in_dtype;
    std::size_t out_bytes;
    std::int64_t m, n, k, batches;
    int layout_a, layout_b, layout_c;
    bool fused;
    auto operator<=>(const AutotuneKey&) const = default;
};
inline std::map<AutotuneKey, MatmulPolicy>& autotune_cache() {
    static auto* cache = new std::map<AutotuneKey, MatmulPolicy>();  // never destroyed, as the allocators
    return *cache;
}

// out (batch + [M, N]) = epilogue(a (... [M, K]) @ b (... [K, N])), shapes and devices checked.
template <class T, class Out>
void run_matmul(const Tensor<T>& a_in, const Tensor<T>& b_in, const Tensor<Out>& out, const MatmulOptions& o,
                const MatmulEpilogue<Out>& e, rt::stream_t stream, Device device, std::source_location site) {
    using Acc = accumulator_t<T, Out>;
    using Product = product_t<T>;
    const int rank = out.dim();
    const bool asked_automatic = !o.policy && matmul_policy() == MatmulPolicy::automatic;
    if (asked_automatic && matmul_autotune()) {
        // The winner for this problem, timed on first sight: both paths on a scratch output (beta 0,
        // so the real output is written once, below), a warm-up run and an event-timed one each.
        const AutotuneKey key{device.index, dtype_key<T>(o), sizeof(Out), out.shape()[rank - 2], out.shape()[rank - 1],
                              a_in.shape()[a_in.dim() - 1], ::tessel::detail::element_count(out.shape()) /
                                                                 std::max<std::int64_t>(1, out.shape()[rank - 2] * out.shape()[rank - 1]),
                              int(layout_of(matrix_arg(a_in))), int(layout_of(matrix_arg(b_in))), int(layout_of(matrix_arg(out))),
                              e.fuses_anything()};
        std::optional<MatmulPolicy> winner;
        {
            std::lock_guard lk(autotune_mutex());
            if (auto it = autotune_cache().find(key); it != autotune_cache().end()) winner = it->second, ++autotune_counters().cache_hits;
        }
        const char* reason = "autotune: the faster path for this problem, timed on its first call";
        if (!winner) {
            const Tensor<Out> scratch = empty<Out>(out.shape(), TensorOptions{.device = device, .stream = stream, .non_blocking = true});
            float best = 0;
            for (MatmulPolicy p : {MatmulPolicy::library, MatmulPolicy::handwritten}) {
                MatmulOptions timed = o;
                timed.policy = p;
                timed.beta = 0;
                Event start(true, device), stop(true, device);
                try {
                    run_matmul<T, Out>(a_in, b_in, scratch, timed, e, stream, device, site);
                    start.record(stream);
                    run_matmul<T, Out>(a_in, b_in, scratch, timed, e, stream, device, site);
                    stop.record(stream);
                    stop.synchronize();
                } catch (const Unsupported&) {
                    continue;  // a path this device cannot run (the tensor-core kernel below sm_80)
                }
                const float ms = start.elapsed_ms(stop);
                if (!winner || ms < best) winner = p, best = ms;
            }
            std::lock_guard lk(autotune_mutex());
            autotune_cache()[key] = *winner;
            ++autotune_counters().keys_tuned;
            ++(*winner == MatmulPolicy::handwritten ? autotune_counters().handwritten_won : autotune_counters().library_won);
        }
        MatmulOptions chosen = o;
        chosen.policy = *winner;
        run_matmul<T, Out>(a_in, b_in, out, chosen, e, stream, device, site);
        last_choice().reason = reason;
        return;
    }
    MatmulChoice& choice = choose_path<T>(o, device, out.shape()[rank - 2], out.shape()[rank - 1], e.fuses_anything());
    const bool hand = choice.path == MatmulPolicy::handwritten;
    const bool mma = hand && mma_kernel<T>(o);
    constexpr bool int8 = std::is_same_v<T, std::int8_t>;
    const TensorOptions on{.device = device, .stream = stream, .non_blocking = true};

    Tensor<T> a = a_in, b = b_in;
    auto prepare = [&](Tensor<T>& t, bool is_b) {
        // int8 takes mma_matmul's layouts on both paths: cuBLAS's int8 kernels want the same "TN" form.
        const bool strict = mma || int8;
        const bool usable = hand || int8 ? handwritten_takes(t, is_b, strict) : layout_of(matrix_arg(t)) != MatrixLayout::other;
        if (!usable) t = hand || int8 ? packed(t, stream, is_b, strict) : t.to(on), ++choice.copied_operands;
    };
    prepare(a, false);
    prepare(b, true);
    // The output: written in place in a row layout, or by cuBLAS in a column layout when nothing is
    // applied after it; otherwise through a contiguous temporary copied back.
    const MatrixLayout lc = layout_of(matrix_arg(out));
    const bool direct = lc == MatrixLayout::row || (!hand && !e.fuses_anything() && lc == MatrixLayout::col);
    const Tensor<Out> c = direct ? out : (o.beta != 0 ? out.to(on) : empty<Out>(out.shape(), on));
    const Shape full = c.shape();
    const int r = full.size();
    const Tensor<T> A = a.expand([&] { Shape s = full; s[r - 1] = a.shape()[a.dim() - 1]; return s; }());
    const Tensor<T> B = b.expand([&] { Shape s = full; s[r - 2] = b.shape()[b.dim() - 2]; return s; }());
    // The residual as contiguous batch + [M, N] (its flat batch index is the walk's).
    Tensor<typename MatmulEpilogue<Out>::Operand> residual;  // undefined: none
    if (e.residual) residual = e.residual->expand(full).contiguous(stream);
    const std::int64_t m = full[r - 2], n = full[r - 1];

    if (::tessel::detail::element_count(full) > 0) {
        const BatchDims bd = merged_batch_dims(A, B, c);
        const std::int64_t inner = bd.size.empty() ? 1 : bd.size.back();
        std::int64_t outer = 1;
        for (std::size_t i = 0; i + 1 < bd.size.size(); ++i) outer *= bd.size[i];
        for (std::int64_t idx = 0; idx < outer; ++idx) {
            std::int64_t rest = idx, oa = 0, ob = 0, oc = 0;
            for (std::size_t i = bd.size.empty() ? 0 : bd.size.size() - 1; i-- > 0;) {
                const std::int64_t j = rest % bd.size[i];
                rest /= bd.size[i];
                oa += j * bd.sa[i], ob += j * bd.sb[i], oc += j * bd.sc[i];
            }
            MatrixArg ma = matrix_arg(A), mb = matrix_arg(B), mcc = matrix_arg(c);
            ma.data = A.data() + oa, mb.data = B.data() + ob, mcc.data = c.data() + oc;
            ma.batch_stride = bd.size.empty() ? 0 : bd.sa.back();
            mb.batch_stride = bd.size.empty() ? 0 : bd.sb.back();
            mcc.batch_stride = bd.size.empty() ? 0 : bd.sc.back();
            epilogue_t<T, Out> epi;
            epi.alpha = Acc(o.alpha);
            epi.beta = Acc(o.beta);
            epi.bias = e.bias ? e.bias->data() : nullptr;
            epi.bias_per_row = e.bias_per_row;
            epi.activation = e.activation;
            epi.row_scale = e.row_scale ? e.row_scale->data() : nullptr;
            epi.col_scale = e.col_scale ? e.col_scale->data() : nullptr;
            if (residual.defined()) {
                epi.residual = residual.data() + idx * inner * m * n;
                epi.residual_ld = n;
                epi.residual_batch_stride = m * n;
            }
            if (hand) {
                choice.implementation = handwritten_gemm<T, Out>(device, stream, ma, mb, mcc, inner, epi, mma, site);
                continue;
            }
            if (lt_takes<T, Out>(o, e.fuses_anything())) {
                if (const auto fused = lt_epilogue(e, layout_of(mcc) == MatrixLayout::row);
                    fused && lt_gemm<T, Out>(device, stream, ma, mb, mcc, inner, o, *fused, epi.bias, site)) {
                    choice.implementation = lt_epilogue_name(*fused);
                    continue;
                }
            }
            choice.implementation = "cublasGemmStridedBatchedEx";
            // cuBLAS writes int8 products only as int32: anything else is an epilogue.
            if (!e.fuses_anything() && (!int8 || std::is_same_v<Out, int>)) {
                library_gemm<T, Out>(device, stream, ma, mb, mcc, inner, o, site);
                continue;
            }
            // cuBLAS cannot fuse the rest: it writes alpha A B (and, into an fp32/fp64 output, beta C)
            // and one more launch applies the epilogue, reading a 16-bit output's product from an
            // fp32 buffer (an int8 product's from int32) so the result is rounded once, as on the
            // fused path.
            const bool in_place = std::is_same_v<Out, Product>;
            Tensor<Product> product;
            MatrixArg mp = mcc;
            if (in_place) {
                library_gemm<T, Out>(device, stream, ma, mb, mcc, inner, o, site);
                epi.alpha = Acc(1);
                epi.beta = Acc(0);
            } else {
                product = empty<Product>({inner, m, n}, on);
                mp = {product.data(), m, n, n, 1, m * n};
                MatmulOptions plain = o;  // alpha and beta are the epilogue's (an int8 product's alpha need not be an integer)
                plain.alpha = 1;
                plain.beta = 0;
                library_gemm<T, Product>(device, stream, ma, mb, mp, inner, plain, site);
            }
            DeviceGuard guard(device);
            const std::int64_t total = inner * m * n;
            const auto blocks = unsigned(std::clamp<std::int64_t>((total + 255) / 256, 1, max_blocks(device, 8)));
            launch(kernels::gemm_epilogue_apply<Product, Acc, Out, epilogue_t<T, Out>::scaled>, GridDim(blocks, site), dim3(256), 0, stream, inner, int(m), int(n),
                   static_cast<const Product*>(mp.data), checked_int(leading_dim(mp, MatrixLayout::row), "leading dimension"),
                   mp.batch_stride, static_cast<Out*>(const_cast<void*>(mcc.data)),
                   checked_int(leading_dim(mcc, MatrixLayout::row), "leading dimension"), mcc.batch_stride, epi);
            choice.implementation = in_place ? "cublasGemmStridedBatchedEx + gemm_epilogue_apply"
                                  : int8     ? "cublasGemmStridedBatchedEx (int32 product) + gemm_epilogue_apply"
                                             : "cublasGemmStridedBatchedEx (fp32 product) + gemm_epilogue_apply";
        }
    } else {
        choice.implementation = "(empty result: nothing to compute)";
    }
    c.storage()->note_write(stream, device);
    if (!direct) out.copy_(c, stream);
}

}  // namespace tessel::ops::detail
