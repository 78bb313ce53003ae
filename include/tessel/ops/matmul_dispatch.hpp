// How tessel::matmul runs a product once its shapes are checked (ops/matmul.hpp): the policy's
// path, the operand layouts each path takes as they lie (else one copy), the batch dims merged into
// one stride (the rest walked on the host), and the launch: a hand-written kernel with the epilogue
// fused into its store, or the library: one cublasLtMatmul for what cuBLASLt takes (16-bit, int8,
// TF32, fp8, and the epilogues it fuses: bias, relu, tanh GELU), else cublasGemmStridedBatchedEx
// (row-major C = A B as column-major C^T = B^T A^T; for fp8 cublasLtMatmul alone) followed by
// gemm_epilogue_apply when there is an epilogue. With autotuning on, the first call of a problem
// times the candidates (matmul_autotune.hpp) and later ones follow the winner.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
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
#include "matmul_autotune.hpp"
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
// A single row (column) has no second one to place, so its ld is free above cols (rows): the
// smallest multiple of 16 elements, which every alignment rule takes (cuBLAS's int8 GEMM refuses an
// ld that is not a multiple of 4; mma_matmul and cuBLASLt's fp8 want 16 bytes).
inline std::int64_t leading_dim(const MatrixArg& m, MatrixLayout l) {
    constexpr auto free_ld = [](std::int64_t n) {
        const std::int64_t up = (std::max<std::int64_t>(n, 1) + 15) / 16 * 16;
        return up > std::numeric_limits<int>::max() ? n : up;  // BLAS's ld is an int
    };
    // An empty dim's stride places nothing either (an expanded [M, 0] has rows 0 apart, which BLAS's
    // ld >= max(1, ...) refuses).
    if (l == MatrixLayout::row) return m.rows <= 1 || m.cols == 0 ? free_ld(m.cols) : m.row_stride;
    return m.cols <= 1 || m.rows == 0 ? free_ld(m.rows) : m.col_stride;
}
// An operand that is one column in column layout is read as such (its ld is then free) rather than
// as rows of one element each (ld = 1, which cuBLAS's int8 GEMM refuses and mma_matmul's 16-byte
// rows cannot take).
inline MatrixLayout blas_operand_layout(const MatrixArg& m) {
    return m.cols <= 1 && m.rows > 1 && col_layout(m) ? MatrixLayout::col : layout_of(m);
}
template <class Tn>
MatrixArg matrix_arg(const Tensor<Tn>& t) {
    const int r = t.dim();
    return {t.data(), t.shape()[r - 2], t.shape()[r - 1], t.strides()[r - 2], t.strides()[r - 1], r > 2 ? t.strides()[r - 3] : 0};
}

template <class T>
constexpr bool tensor_core_type = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;
// fp8 products run on the library path only (cuBLASLt, sm_89+).
template <class T>
constexpr bool fp8_type = std::is_same_v<T, __nv_fp8_e4m3> || std::is_same_v<T, __nv_fp8_e5m2>;

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
                           : sizeof(T) == 2 ? blas_operand_layout(m)
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
    else if constexpr (std::is_same_v<T, __nv_fp8_e4m3>) return CUDA_R_8F_E4M3;
    else if constexpr (std::is_same_v<T, __nv_fp8_e5m2>) return CUDA_R_8F_E5M2;
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
    else if constexpr (std::is_same_v<T, __nv_fp8_e4m3>) return "e4m3";
    else if constexpr (std::is_same_v<T, __nv_fp8_e5m2>) return "e5m2";
    else return "bf16";
}
// The dtype as the dispatch table keys it: fp32 on TF32 tensor cores is "tf32".
template <class T>
const char* dtype_key(const MatmulOptions& o) {
    return std::is_same_v<T, float> && o.allow_tf32 ? "tf32" : dtype_name<T>();
}

// What a library GEMM writes before an epilogue kernel runs: int32 for int8 inputs, else the
// accumulator's fp32 (fp64 for fp64; fp8 products too are fp32).
template <class T>
using product_t = std::conditional_t<std::is_same_v<T, double>, double, std::conditional_t<std::is_same_v<T, std::int8_t>, int, float>>;
// The type the epilogue computes in (kernels::GemmEpilogue's Acc): the product's, except that an
// int8 product bound for anything but int32 is dequantised in fp32.
template <class T, class Out>
using accumulator_t = std::conditional_t<std::is_same_v<product_t<T>, int> && !std::is_same_v<Out, int>, float, product_t<T>>;
// The epilogue T's kernels take: scaled (row and column dequantisation scales) for int8 products
// dequantised in fp32 and for fp8 products.
template <class T, class Out>
using epilogue_t =
    kernels::GemmEpilogue<accumulator_t<T, Out>, Out, (std::is_same_v<T, std::int8_t> && !std::is_same_v<Out, int>) || fp8_type<T>>;

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
    const MatrixLayout la = blas_operand_layout(a), lb = blas_operand_layout(b), lc = layout_of(c);
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
    // Only an int8 product reads these (its alpha and beta were checked to be int32 values): any other
    // alpha, NaN or past 2^31 included, must not go through the conversion (undefined behaviour).
    std::int32_t alpha_i = 0, beta_i = 0;
    if constexpr (std::is_same_v<T, std::int8_t>) alpha_i = std::int32_t(o.alpha), beta_i = std::int32_t(o.beta);
    const void* alpha = compute == CUBLAS_COMPUTE_64F ? static_cast<const void*>(&alpha64)
                        : compute == CUBLAS_COMPUTE_32I ? static_cast<const void*>(&alpha_i) : &alpha32;
    const void* beta = compute == CUBLAS_COMPUTE_64F ? static_cast<const void*>(&beta64)
                       : compute == CUBLAS_COMPUTE_32I ? static_cast<const void*>(&beta_i) : &beta32;
    // cuBLAS runs on the current device (a null stream is its default stream): the operands' device.
    const DeviceGuard on(device);
    cublasHandle_t h = cublas::handle(device, stream);
    cublas::check(cublas::api::cublasGemmStridedBatchedEx(
                      h, p.op_first, p.op_second, p.m, p.n, p.k, alpha, p.first->data, blas_type<T>(), p.ld_first, p.first->batch_stride,
                      p.second->data, blas_type<T>(), p.ld_second, p.second->batch_stride, beta, const_cast<void*>(c.data),
                      blas_type<Out>(), p.ldc, c.batch_stride, checked_int(batches, "batch count"), compute, CUBLAS_GEMM_DEFAULT),
                  "cublasGemmStridedBatchedEx", site);
}

// Which inputs the library path gives cuBLASLt: 16-bit, int8 (into int32), fp8 (only it has them),
// fp32 on TF32, and exact fp32 when cuBLASLt can fuse its epilogue; fp64 and plain fp32 stay with
// cuBLAS.
template <class T, class Out>
bool lt_takes(const MatmulOptions& o, bool fuses) {
    if constexpr (std::is_same_v<T, double>) return false;
    else if constexpr (fp8_type<T>) return true;
    else if constexpr (std::is_same_v<T, std::int8_t>) return std::is_same_v<Out, int> && !fuses;
    else if constexpr (std::is_same_v<T, float>) return o.allow_tf32 || fuses;
    else return true;
}

// cuBLASLt's epilogue for e on a product whose C has row layout or not, or nothing when it cannot
// fuse e as tessel defines it: no residual, no scales, no activation or the tanh GELU (cuBLASLt's
// GELU is the tanh form), a bias along D's rows (C's columns for a row-layout C: torch's linear).
template <class Out>
std::optional<cublasLtEpilogue_t> lt_epilogue(const MatmulEpilogue<Out>& e, bool c_row) {
    if (e.residual || e.row_scale || e.col_scale) return std::nullopt;
    if (e.bias && e.bias_per_row == c_row) return std::nullopt;
    switch (e.activation) {
        case Activation::none: return e.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
        // Not relu: cuBLASLt's is max(x, 0), which makes NaN 0, where torch.relu and every other
        // path keep NaN; it runs as the epilogue kernel after the product instead.
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
// not define) so the caller takes cuBLAS. a_scale and b_scale: fp8 per-tensor scales (device).
template <class T, class Out>
bool lt_gemm(Device device, rt::stream_t stream, const MatrixArg& a, const MatrixArg& b, const MatrixArg& c, std::int64_t batches,
             const MatmulOptions& o, cublasLtEpilogue_t epilogue, const void* bias, std::source_location site,
             const float* a_scale = nullptr, const float* b_scale = nullptr) {
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
    // cuBLASLt's A is whichever operand blas_problem put first.
    g.a_scale = p.first == &a ? a_scale : b_scale;
    g.b_scale = p.first == &a ? b_scale : a_scale;
    g.algorithm = candidate_variant();  // autotuning times the heuristic's first few
    return cublaslt::matmul(device, stream, g, site);
}

// The hand-written kernels, one launch for the batch: mma_matmul (bf16/fp16 in, the input type or
// fp32 out; fp32 on TF32; int8 in, int32 or a requantised output) or simt_matmul (fp32/fp64).
// Problems of fewer than two 128 x 128 tiles per multiprocessor take 64 x 64 tiles, unless the
// candidate variant (autotuning) names the tile class.
template <class T, class Out>
std::string_view handwritten_gemm(Device device, rt::stream_t stream, const MatrixArg& a, const MatrixArg& b, const MatrixArg& c,
                                  std::int64_t batches, const epilogue_t<T, Out>& epilogue, bool mma, std::source_location site) {
    using Epilogue = epilogue_t<T, Out>;
    const int m = checked_int(c.rows, "M"), n = checked_int(c.cols, "N"), k = checked_int(a.cols, "K");
    const bool b_columns = sizeof(T) != 2 ? mma : blas_operand_layout(b) == MatrixLayout::col;  // tf32 and int8 take B by columns
    const int lda = checked_int(leading_dim(a, MatrixLayout::row), "leading dimension");
    const int ldb = checked_int(leading_dim(b, b_columns ? MatrixLayout::col : MatrixLayout::row), "leading dimension");
    const int ldc = checked_int(leading_dim(c, MatrixLayout::row), "leading dimension");
    const int nb = checked_int(batches, "batch count");
    const std::int64_t big_tiles = ((std::int64_t(m) + 127) / 128) * ((std::int64_t(n) + 127) / 128) * batches;
    const int variant = candidate_variant();
    const bool big = variant == 0 ? big_tiles >= 2 * std::int64_t(device_attribute<cudaDevAttrMultiProcessorCount>(device)) : variant == 2;
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

// The candidates autotuning times for T: the hand-written kernel per tile class (fp64 has one), then
// the library per cuBLASLt heuristic result (cut short where cuBLAS runs, which has one).
template <class T>
std::vector<MatmulCandidate> autotune_candidates() {
    std::vector<MatmulCandidate> c;
    if constexpr (std::is_same_v<T, double>) c.push_back({MatmulPolicy::handwritten, 0});
    else c.insert(c.end(), {{MatmulPolicy::handwritten, 1}, {MatmulPolicy::handwritten, 2}});
    static_assert(library_variants <= cublaslt::detail::max_algorithms && handwritten_variants == 3);
    for (int i = 0; i < library_variants; ++i) c.push_back({MatmulPolicy::library, i});
    return c;
}

// out (batch + [M, N]) = epilogue(a (... [M, K]) @ b (... [K, N])), shapes and devices checked.
template <class T, class Out>
void run_matmul(const Tensor<T>& a_in, const Tensor<T>& b_in, const Tensor<Out>& out, const MatmulOptions& o,
                const MatmulEpilogue<Out>& e, rt::stream_t stream, Device device, std::source_location site) {
    using Acc = accumulator_t<T, Out>;
    using Product = product_t<T>;
    const int rank = out.dim();
    const bool asked_automatic = (o.policy ? *o.policy : matmul_policy()) == MatmulPolicy::automatic;
    if (asked_automatic && matmul_autotune()) {
        // The winner for this problem, timed on first sight: each candidate on a scratch output
        // (beta 0, so the real output is written once, below), a warm-up run and an event-timed one.
        const AutotuneKey key{device.index, dtype_key<T>(o), ::tessel::dtype_name(dtype_of<Out>), out.shape()[rank - 2], out.shape()[rank - 1],
                              a_in.shape()[a_in.dim() - 1], ::tessel::detail::element_count(out.shape()) /
                                                                 std::max<std::int64_t>(1, out.shape()[rank - 2] * out.shape()[rank - 1]),
                              int(layout_of(matrix_arg(a_in))), int(layout_of(matrix_arg(b_in))), int(layout_of(matrix_arg(out))),
                              e.fuses_anything()};
        std::optional<MatmulCandidate> winner;
        {
            std::lock_guard lk(autotune_mutex());
            read_autotune_file_from_environment();
            const auto& winners = autotune_state().winners;
            if (auto it = winners.find(key); it != winners.end()) winner = it->second, ++autotune_counters().cache_hits;
        }
        if (!winner) {
            const Tensor<Out> scratch = empty<Out>(out.shape(), TensorOptions{.device = device, .stream = stream, .non_blocking = true});
            float best = 0;
            std::int64_t timed_count = 0;
            for (const MatmulCandidate& c : autotune_candidates<T>()) {
                MatmulOptions timed = o;
                timed.policy = c.path;
                timed.beta = 0;
                const VariantScope variant(c.variant);
                Event start(true, device), stop(true, device);
                try {
                    run_matmul<T, Out>(a_in, b_in, scratch, timed, e, stream, device, site);
                    // A heuristic result past the first that cuBLASLt does not have ran cuBLAS: the
                    // library has no more candidates for this problem.
                    if (c.path == MatmulPolicy::library && c.variant > 0 && !last_choice().implementation.starts_with("cublasLt")) break;
                    start.record(stream);
                    run_matmul<T, Out>(a_in, b_in, scratch, timed, e, stream, device, site);
                    stop.record(stream);
                    stop.synchronize();
                } catch (const Unsupported&) {
                    continue;  // a candidate this device or dtype cannot run (tensor cores below sm_80, fp8 by hand)
                }
                ++timed_count;
                const float ms = start.elapsed_ms(stop);
                if (!winner || ms < best) winner = c, best = ms;
            }
            if (!winner) fail<Unsupported>("matmul: autotuning found no candidate that runs this ", dtype_key<T>(o), " product");
            std::lock_guard lk(autotune_mutex());
            autotune_state().winners[key] = *winner;
            append_autotune_file(key, *winner);
            MatmulAutotuneStats& stats = autotune_counters();
            ++stats.keys_tuned;
            stats.candidates_timed += timed_count;
            ++(winner->path == MatmulPolicy::handwritten ? stats.handwritten_won : stats.library_won);
        }
        MatmulOptions chosen = o;
        chosen.policy = winner->path;
        const VariantScope variant(winner->variant);
        run_matmul<T, Out>(a_in, b_in, out, chosen, e, stream, device, site);
        last_choice().reason = "autotune: the fastest candidate for this problem, timed on its first call (or read from the autotune file)";
        return;
    }
    MatmulChoice& choice = choose_path<T>(o, device, out.shape()[rank - 2], out.shape()[rank - 1], e.fuses_anything());
    const bool hand = choice.path == MatmulPolicy::handwritten;
    const bool mma = hand && mma_kernel<T>(o);
    constexpr bool int8 = std::is_same_v<T, std::int8_t>, fp8 = fp8_type<T>;
    if (fp8 && hand)
        fail<Unsupported>("matmul: ", dtype_name<T>(), " products run on cuBLASLt only (MatmulPolicy::library, which automatic "
                          "takes): tessel has no hand-written fp8 kernel");
    const TensorOptions on{.device = device, .stream = stream, .non_blocking = true};

    Tensor<T> a = a_in, b = b_in;
    auto prepare = [&](Tensor<T>& t, bool is_b) {
        // int8 and fp8 take mma_matmul's layouts on both paths: the libraries' int8 and fp8 kernels
        // want the same "TN" form.
        const bool strict = mma || int8 || fp8;
        const bool usable = hand || strict ? handwritten_takes(t, is_b, strict) : layout_of(matrix_arg(t)) != MatrixLayout::other;
        if (!usable) t = hand || strict ? packed(t, stream, is_b, strict) : t.to(on), ++choice.copied_operands;
    };
    prepare(a, false);
    prepare(b, true);
    // The output: written in place in a row layout, or by cuBLAS in a column layout when the product
    // goes straight to it; otherwise through a contiguous temporary copied back. Without an epilogue,
    // tessel's epilogue kernel (which writes rows) still writes an int8 product into anything but
    // int32 (cuBLAS writes int8 products only as int32) and an fp8 product of K = 0 (zeros, scaled).
    const MatrixLayout lc = layout_of(matrix_arg(out));
    const bool through_epilogue_kernel =
        e.fuses_anything() || (int8 && !std::is_same_v<Out, int>) || (fp8 && a.shape()[a.dim() - 1] == 0);
    // cuBLASLt's fp8 kernels take its m (our N, for a row-layout output) in multiples of 16, and the
    // output's leading dim likewise, 16-byte aligned: any other output goes through the temporary
    // (leading dim N), so M stays free whatever the output's layout.
    bool fp8_output_ok = true;
    if constexpr (fp8)
        fp8_output_ok = lc == MatrixLayout::row && leading_dim(matrix_arg(out), MatrixLayout::row) % 16 == 0 &&
                        reinterpret_cast<std::uintptr_t>(out.data()) % 16 == 0;
    const bool direct = fp8_output_ok && (lc == MatrixLayout::row || (!hand && !through_epilogue_kernel && lc == MatrixLayout::col));
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
                if constexpr (!fp8) choice.implementation = handwritten_gemm<T, Out>(device, stream, ma, mb, mcc, inner, epi, mma, site);
                continue;
            }
            const float* a_scale = e.a_scale ? e.a_scale->data() : nullptr;
            const float* b_scale = e.b_scale ? e.b_scale->data() : nullptr;
            if (lt_takes<T, Out>(o, e.fuses_anything())) {
                // An fp8 product's fused bias is bf16 for an fp32 output (cuBLASLt's type table);
                // tessel's is the output's type, so that one is applied after.
                const bool bias_type_ok = !fp8 || !std::is_same_v<Out, float> || !e.bias;
                if (const auto fused = lt_epilogue(e, layout_of(mcc) == MatrixLayout::row);
                    fused && bias_type_ok && lt_gemm<T, Out>(device, stream, ma, mb, mcc, inner, o, *fused, epi.bias, site, a_scale, b_scale)) {
                    choice.implementation = lt_epilogue_name(*fused);
                    continue;
                }
            }
            // The product alone, by cuBLAS (cuBLASLt for fp8, which cuBLAS lacks), into `target`.
            auto product_gemm = [&]<class Target>(const MatrixArg& target, const MatmulOptions& opts) {
                if constexpr (fp8) {
                    if (!lt_gemm<T, Target>(device, stream, ma, mb, target, inner, opts, CUBLASLT_EPILOGUE_DEFAULT, nullptr, site, a_scale,
                                            b_scale))
                        fail<Unsupported>("matmul: cuBLASLt has no ", dtype_name<T>(), " kernel for ", m, " x ", n, " x ", ma.cols,
                                          " (M x N x K) on device ", device.index, " (sm_",
                                          device_attribute<cudaDevAttrComputeCapabilityMajor>(device), "x): its fp8 kernels need sm_89 "
                                          "or newer, N and K multiples of 16 (M is free), 16-byte aligned operands, and "
                                          "not both operands e5m2; pad the operands, or dequantise and multiply in bf16");
                } else {
                    library_gemm<T, Target>(device, stream, ma, mb, target, inner, opts, site);
                }
            };
            choice.implementation = fp8 ? "cublasLtMatmul" : "cublasGemmStridedBatchedEx";
            // cuBLASLt does not define K = 0: an fp8 product is then zeros, and the epilogue the rest.
            const bool zero_k = fp8 && ma.cols == 0;
            // cuBLAS writes int8 products only as int32: anything else is an epilogue.
            if (!through_epilogue_kernel) {
                product_gemm.template operator()<Out>(mcc, o);
                continue;
            }
            // cuBLAS cannot fuse the rest: it writes alpha A B (and, into an fp32/fp64 output, beta C)
            // and one more launch applies the epilogue, reading a 16-bit output's product from an
            // fp32 buffer (an int8 product's from int32) so the result is rounded once, as on the
            // fused path.
            // In place only where the epilogue leaves the library's beta * C alone: a row or column
            // scale would scale it too (an fp8 product into fp32 with beta), so that one goes
            // through the product buffer.
            bool scales_prior = false;
            if constexpr (epilogue_t<T, Out>::scaled) scales_prior = epi.beta != Acc(0) && (epi.row_scale || epi.col_scale);
            const bool in_place = std::is_same_v<Out, Product> && !zero_k && !scales_prior;
            DeviceGuard guard(device);  // the memset below and the epilogue launch go to `stream` of this device
            Tensor<Product> product;
            MatrixArg mp = mcc;
            if (in_place) {
                product_gemm.template operator()<Out>(mcc, o);
                epi.alpha = Acc(1);
                epi.beta = Acc(0);
            } else {
                product = empty<Product>({inner, m, n}, on);
                mp = {product.data(), m, n, n, 1, m * n};
                MatmulOptions plain = o;  // alpha and beta are the epilogue's (an int8 product's alpha need not be an integer)
                plain.alpha = 1;
                plain.beta = 0;
                if (zero_k) rt::memset_async(product.data(), 0, std::size_t(inner * m * n) * sizeof(Product), stream);
                else product_gemm.template operator()<Product>(mp, plain);
            }
            const std::int64_t total = inner * m * n;
            const auto blocks = unsigned(std::clamp<std::int64_t>((total + 255) / 256, 1, max_blocks(device, 8)));
            launch(kernels::gemm_epilogue_apply<Product, Acc, Out, epilogue_t<T, Out>::scaled>, GridDim(blocks, site), dim3(256), 0, stream, inner, int(m), int(n),
                   static_cast<const Product*>(mp.data), checked_int(leading_dim(mp, MatrixLayout::row), "leading dimension"),
                   mp.batch_stride, static_cast<Out*>(const_cast<void*>(mcc.data)),
                   checked_int(leading_dim(mcc, MatrixLayout::row), "leading dimension"), mcc.batch_stride, epi);
            choice.implementation = fp8        ? "cublasLtMatmul (fp32 product) + gemm_epilogue_apply"
                                  : in_place ? "cublasGemmStridedBatchedEx + gemm_epilogue_apply"
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
