// Matrix products with torch.matmul's rules: matmul(a, b) into a new tensor, matmul(a, b, out, options)
// into an existing one (out = alpha * a @ b + beta * out). 2-D, batched with NumPy-broadcast batch
// dims, 1-D operands as PyTorch treats them. Each batched product is one launch: a hand-written kernel
// (kernels/tessel/kernels/mma_matmul.cuh for bf16/fp16 on tensor cores, simt_matmul for fp32/fp64)
// or cuBLAS (cublasGemmStridedBatchedEx; the sim's stand-in on the sim), chosen by MatmulPolicy.
// Transposed and other strided views go to cuBLAS as transa/transb and leading dimensions, without
// a copy; docs/matmul.md lists when an operand is copied first.
#pragma once

#include <atomic>
#include <cstdlib>
#include <limits>
#include <optional>
#include <source_location>
#include <string>

#include <tessel/kernels/mma_matmul.cuh>
#include <tessel/kernels/simt_matmul.cuh>

#include "../lib/cublas.hpp"
#include "../runtime/launch.hpp"
#include "assign.hpp"  // detail::byte_range, device_attribute
#include "copy.hpp"

namespace tessel {

// How a matrix product is computed. automatic: by the dispatch table (docs/matmul.md; until a GPU
// run has measured the hand-written kernels, the library); handwritten: tessel's own kernels;
// library: cuBLAS.
enum class MatmulPolicy { automatic, handwritten, library };

inline const char* policy_name(MatmulPolicy p) {
    switch (p) {
        case MatmulPolicy::automatic: return "automatic";
        case MatmulPolicy::handwritten: return "handwritten";
        case MatmulPolicy::library: return "library";
    }
    return "?";
}

// The knobs of one matmul call.
struct MatmulOptions {
    double alpha = 1, beta = 0;          // out = alpha * a @ b + beta * out (beta only with an out tensor)
    std::optional<MatmulPolicy> policy = std::nullopt;  // unset: matmul_policy(), the process default
    bool allow_tf32 = false;             // fp32 may run on TF32 tensor cores (library), as torch.backends.cuda.matmul.allow_tf32
    std::optional<rt::stream_t> stream = std::nullopt;  // unset: the current stream of the operands' device
};

// What a matmul call ran, and why (last_matmul_choice(); tests and tessel-info read it).
struct MatmulChoice {
    MatmulPolicy path = MatmulPolicy::library;  // handwritten or library: what automatic resolved to
    std::string implementation;                 // e.g. "mma_matmul<128x128, 4 stages>" or "cublasGemmStridedBatchedEx"
    std::string reason;
    int copied_operands = 0;                    // operands copied first (layout or alignment the path cannot take)
};

namespace ops::detail {

inline MatmulPolicy parse_matmul_policy(const char* variable, const std::string& text) {
    if (text == "automatic") return MatmulPolicy::automatic;
    if (text == "handwritten") return MatmulPolicy::handwritten;
    if (text == "library") return MatmulPolicy::library;
    fail<InvalidArgument>(variable, "='", text, "' is not a matmul policy (automatic, handwritten or library)");
}

inline std::atomic<int>& policy_override() {
    static std::atomic<int> p{-1};
    return p;
}

inline MatmulChoice& last_choice() {
    static thread_local MatmulChoice c;
    return c;
}

inline MatmulPolicy env_policy() {
    static const MatmulPolicy p = [] {
        const char* v = std::getenv("TESSEL_MATMUL_POLICY");
        return v ? parse_matmul_policy("TESSEL_MATMUL_POLICY", v) : MatmulPolicy::automatic;
    }();
    return p;
}

}  // namespace ops::detail

// The process default: set_matmul_policy's, else TESSEL_MATMUL_POLICY (automatic, handwritten,
// library), else automatic.
inline MatmulPolicy matmul_policy() {
    const int p = ops::detail::policy_override().load(std::memory_order_relaxed);
    return p >= 0 ? MatmulPolicy(p) : ops::detail::env_policy();
}
inline void set_matmul_policy(MatmulPolicy p) { ops::detail::policy_override().store(int(p), std::memory_order_relaxed); }

// What the calling thread's last matmul ran, and why.
inline MatmulChoice last_matmul_choice() { return ops::detail::last_choice(); }


namespace ops::detail {

// A matrix operand of a batched product: its [rows, cols] strides and the batch stride.
struct MatrixArg {
    const void* data;
    std::int64_t rows, cols, row_stride, col_stride, batch_stride;
};

// Row layout: a row's elements adjacent, rows ld >= cols apart; column layout the transpose. A
// size-1 dim's stride does not matter. ld is what BLAS calls the leading dimension.
enum class MatrixLayout { row, col, other };
inline MatrixLayout layout_of(std::int64_t rows, std::int64_t cols, std::int64_t rs, std::int64_t cs) {
    if ((cols <= 1 || cs == 1) && (rows <= 1 || rs >= cols)) return MatrixLayout::row;
    if ((rows <= 1 || rs == 1) && (cols <= 1 || cs >= rows)) return MatrixLayout::col;
    return MatrixLayout::other;
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

// What the hand-written path needs of an operand: row layout; for the tensor-core kernel also
// 16-byte rows (ld and batch stride multiples of 8 elements, a 16-byte aligned start).
template <class T>
bool handwritten_takes(const Tensor<T>& t) {
    const MatrixArg m = matrix_arg(t);
    if (layout_of(m.rows, m.cols, m.row_stride, m.col_stride) != MatrixLayout::row) return false;
    if constexpr (tensor_core_type<T>) {
        if (leading_dim(m, MatrixLayout::row) % 8 != 0 || reinterpret_cast<std::uintptr_t>(t.data()) % 16 != 0) return false;
        for (int d = 0; d + 2 < t.dim(); ++d)
            if (t.shape()[d] > 1 && t.strides()[d] % 8 != 0) return false;
    }
    return true;
}

// A copy of t the hand-written path takes: contiguous rows, for 16-bit types padded to a multiple
// of 8 elements (the padding is never read: the kernel zero-fills past K and N).
template <class T>
Tensor<T> packed(const Tensor<T>& t, rt::stream_t stream) {
    const TensorOptions on{.device = t.device(), .stream = stream, .non_blocking = true};
    if constexpr (!tensor_core_type<T>) {
        return t.to(on);
    } else {
        Shape padded = t.shape();
        const int last = padded.size() - 1;
        const std::int64_t cols = padded[last];
        padded[last] = (cols + 7) / 8 * 8;
        Tensor<T> buffer = empty<T>(padded, on);
        Tensor<T> view = buffer.narrow(last, 0, cols);
        view.copy_(t, stream);
        return view;
    }
}

template <class T>
cudaDataType blas_type() {
    if constexpr (std::is_same_v<T, float>) return CUDA_R_32F;
    else if constexpr (std::is_same_v<T, double>) return CUDA_R_64F;
    else if constexpr (std::is_same_v<T, __half>) return CUDA_R_16F;
    else return CUDA_R_16BF;
}

inline int checked_int(std::int64_t v, const char* what) {
    if (v > std::numeric_limits<int>::max())
        fail<Unsupported>("matmul: ", what, " ", v, " does not fit the 32-bit arguments of the kernels and of cuBLAS; split the product");
    return int(v);
}

// One cublasGemmStridedBatchedEx for `batches` products C = alpha A B + beta C, row-major meaning.
// Row-major C is column-major C^T = B^T A^T, so B goes first; a column-layout C takes A first.
template <class T>
void library_gemm(Device device, rt::stream_t stream, const MatrixArg& a, const MatrixArg& b, const MatrixArg& c, std::int64_t batches,
                  const MatmulOptions& o, std::source_location site) {
    const MatrixLayout la = layout_of(a.rows, a.cols, a.row_stride, a.col_stride);
    const MatrixLayout lb = layout_of(b.rows, b.cols, b.row_stride, b.col_stride);
    const MatrixLayout lc = layout_of(c.rows, c.cols, c.row_stride, c.col_stride);
    const bool c_row = lc == MatrixLayout::row;
    const MatrixArg& first = c_row ? b : a;
    const MatrixArg& second = c_row ? a : b;
    const MatrixLayout lf = c_row ? lb : la, ls = c_row ? la : lb;
    // Column-major first operand wanted as stored: a row-layout matrix read column-major is its
    // transpose, which is what C^T = B^T A^T wants; with C in column layout the roles swap.
    const cublasOperation_t op_first = (lf == MatrixLayout::row) == c_row ? CUBLAS_OP_N : CUBLAS_OP_T;
    const cublasOperation_t op_second = (ls == MatrixLayout::row) == c_row ? CUBLAS_OP_N : CUBLAS_OP_T;
    const int m = checked_int(c_row ? c.cols : c.rows, "N"), n = checked_int(c_row ? c.rows : c.cols, "M");
    const int k = checked_int(a.cols, "K");
    const cudaDataType type = blas_type<T>();
    cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
    if constexpr (std::is_same_v<T, double>) compute = CUBLAS_COMPUTE_64F;
    if (std::is_same_v<T, float> && o.allow_tf32) compute = CUBLAS_COMPUTE_32F_FAST_TF32;
    const float alpha32 = float(o.alpha), beta32 = float(o.beta);
    const double alpha64 = o.alpha, beta64 = o.beta;
    const void* alpha = compute == CUBLAS_COMPUTE_64F ? static_cast<const void*>(&alpha64) : &alpha32;
    const void* beta = compute == CUBLAS_COMPUTE_64F ? static_cast<const void*>(&beta64) : &beta32;
    cublasHandle_t h = cublas::handle(device, stream);
    cublas::check(cublas::api::cublasGemmStridedBatchedEx(
                      h, op_first, op_second, m, n, k, alpha, first.data, type, checked_int(leading_dim(first, lf), "leading dimension"),
                      first.batch_stride, second.data, type, checked_int(leading_dim(second, ls), "leading dimension"), second.batch_stride,
                      beta, const_cast<void*>(c.data), type, checked_int(leading_dim(c, lc), "leading dimension"), c.batch_stride,
                      checked_int(batches, "batch count"), compute, CUBLAS_GEMM_DEFAULT),
                  "cublasGemmStridedBatchedEx", site);
}

// The hand-written kernels, one launch for the batch: mma_matmul (bf16/fp16) or simt_matmul
// (fp32/fp64). Problems of fewer than two 128 x 128 tiles per multiprocessor take 64 x 64 tiles.
template <class T>
std::string handwritten_gemm(Device device, rt::stream_t stream, const MatrixArg& a, const MatrixArg& b, const MatrixArg& c,
                             std::int64_t batches, const MatmulOptions& o, std::source_location site) {
    const int m = checked_int(c.rows, "M"), n = checked_int(c.cols, "N"), k = checked_int(a.cols, "K");
    const int lda = checked_int(leading_dim(a, MatrixLayout::row), "leading dimension");
    const int ldb = checked_int(leading_dim(b, MatrixLayout::row), "leading dimension");
    const int ldc = checked_int(leading_dim(c, MatrixLayout::row), "leading dimension");
    DeviceGuard guard(device);
    if constexpr (tensor_core_type<T>) {
        // Small problems fill more of the GPU with 64 x 64 tiles.
        auto run = [&]<class Tile>() {
            constexpr auto kernel = kernels::mma_matmul<T, T, Tile>;
            allow_dynamic_smem<kernel>(device, int(Tile::smem_bytes()));
            launch(kernel, GridDim(Tile::grid(m, n, checked_int(batches, "batch count")), site), Tile::block(), Tile::smem_bytes(), stream, m, n,
                   k, static_cast<const T*>(a.data), lda, a.batch_stride, static_cast<const T*>(b.data), ldb, b.batch_stride,
                   static_cast<T*>(const_cast<void*>(c.data)), ldc, c.batch_stride, int(batches),
                   kernels::LinearCombination{float(o.alpha), float(o.beta)});
        };
        const std::int64_t big_tiles = ((std::int64_t(m) + 127) / 128) * ((std::int64_t(n) + 127) / 128) * batches;
        if (big_tiles >= 2 * std::int64_t(device_attribute<cudaDevAttrMultiProcessorCount>(device))) {
            run.template operator()<kernels::MmaTile<128, 128, 2, 2, 4>>();
            return "mma_matmul<128x128, 4 stages>";
        }
        run.template operator()<kernels::MmaTile<64, 64, 2, 2, 3>>();
        return "mma_matmul<64x64, 3 stages>";
    } else {
        // 16-byte global loads need every row (and batch) of A and B to start 16-byte aligned.
        constexpr int V = int(16 / sizeof(T));
        const bool aligned = lda % V == 0 && ldb % V == 0 && a.batch_stride % V == 0 && b.batch_stride % V == 0 &&
                             reinterpret_cast<std::uintptr_t>(a.data) % 16 == 0 && reinterpret_cast<std::uintptr_t>(b.data) % 16 == 0;
        auto run = [&]<class Tile, bool Aligned>() {
            launch(kernels::simt_matmul<T, Tile, Aligned>, GridDim(Tile::grid(m, n, checked_int(batches, "batch count")), site), Tile::block(),
                   0, stream, m, n, k, T(o.alpha), static_cast<const T*>(a.data), lda, a.batch_stride, static_cast<const T*>(b.data), ldb,
                   b.batch_stride, T(o.beta), static_cast<T*>(const_cast<void*>(c.data)), ldc, c.batch_stride, int(batches));
        };
        auto pick = [&]<class Tile>() {
            if (aligned) run.template operator()<Tile, true>();
            else run.template operator()<Tile, false>();
            return std::string("simt_matmul<") + std::to_string(Tile::bm) + "x" + std::to_string(Tile::bn) + "x" + std::to_string(Tile::bk) +
                   (aligned ? ", 16-byte loads>" : ", scalar loads>");
        };
        if constexpr (std::is_same_v<T, double>) {
            return pick.template operator()<kernels::SimtTile<double, 64, 64, 8, 4, 4>>();
        } else {
            const std::int64_t big_tiles = ((std::int64_t(m) + 127) / 128) * ((std::int64_t(n) + 127) / 128) * batches;
            if (big_tiles >= 2 * std::int64_t(device_attribute<cudaDevAttrMultiProcessorCount>(device)))
                return pick.template operator()<kernels::SimtTile<float, 128, 128, 8, 8, 8>>();
            return pick.template operator()<kernels::SimtTile<float, 64, 64, 16, 4, 4>>();
        }
    }
}

// Batch dims (all but the last two) of three same-rank views merged where every operand allows
// (stride[i] == stride[i+1] * size[i+1]), size-1 dims dropped: what is left beyond one dim is
// walked on the host.
struct BatchDims {
    std::vector<std::int64_t> size, sa, sb, sc;
};
template <class T>
BatchDims merged_batch_dims(const Tensor<T>& a, const Tensor<T>& b, const Tensor<T>& c) {
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

template <class T>
void run_matmul(const char* name, const Tensor<T>& a_in, const Tensor<T>& b_in, const Tensor<T>& out, const MatmulOptions& o,
                rt::stream_t stream, Device device, std::source_location site) {
    MatmulChoice& choice = last_choice();
    choice = {};
    const MatmulPolicy asked = o.policy ? *o.policy : matmul_policy();
    choice.path = asked == MatmulPolicy::automatic ? MatmulPolicy::library : asked;
    choice.reason = asked == MatmulPolicy::automatic
                        ? "automatic: no GPU-measured dispatch table yet, so the library (docs/matmul.md)"
                        : std::string("policy ") + policy_name(asked);
    if (std::is_same_v<T, float> && o.allow_tf32 && choice.path == MatmulPolicy::handwritten)
        choice.reason += "; allow_tf32 has no hand-written kernel yet: exact fp32 SIMT";

    Tensor<T> a = a_in, b = b_in;
    const bool hand = choice.path == MatmulPolicy::handwritten;
    auto prepare = [&](Tensor<T>& t) {
        const MatrixArg m = matrix_arg(t);
        const bool usable = hand ? handwritten_takes(t) : layout_of(m.rows, m.cols, m.row_stride, m.col_stride) != MatrixLayout::other;
        if (!usable) t = hand ? packed(t, stream) : t.to(TensorOptions{.device = device, .stream = stream, .non_blocking = true}), ++choice.copied_operands;
    };
    prepare(a);
    prepare(b);
    // The output: written in place when the path can (row layout for the kernels; row or column for
    // cuBLAS); otherwise through a contiguous temporary copied back.
    const MatrixArg mc = matrix_arg(out);
    const MatrixLayout lc = layout_of(mc.rows, mc.cols, mc.row_stride, mc.col_stride);
    const bool direct = hand ? lc == MatrixLayout::row : lc != MatrixLayout::other;
    Tensor<T> c = out;
    if (!direct) {
        const TensorOptions on{.device = device, .stream = stream, .non_blocking = true};
        c = o.beta != 0 ? out.to(on) : empty<T>(out.shape(), on);
    }
    const Shape full = c.shape();
    const int r = full.size();
    const Tensor<T> A = a.expand([&] { Shape s = full; s[r - 1] = a.shape()[a.dim() - 1]; return s; }());
    const Tensor<T> B = b.expand([&] { Shape s = full; s[r - 2] = b.shape()[b.dim() - 2]; return s; }());

    if (::tessel::detail::element_count(full) > 0) {
        const BatchDims bd = merged_batch_dims(A, B, c);
        // The innermost merged dim is the launch's batch; the others are walked here.
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
            if (hand) choice.implementation = handwritten_gemm<T>(device, stream, ma, mb, mcc, inner, o, site);
            else {
                library_gemm<T>(device, stream, ma, mb, mcc, inner, o, site);
                choice.implementation = "cublasGemmStridedBatchedEx";
            }
        }
    } else {
        choice.implementation = "(empty result: nothing to compute)";
    }
    c.storage()->note_write(stream, device);
    if (!direct) out.copy_(c, stream);
    (void)name;
}

}  // namespace ops::detail


namespace ops::detail {

// The shapes of a product by torch.matmul's rules: a 1-D a is a row [1, K] and b a column [K, 1]
// whose added dim the result drops; batch dims broadcast.
struct MatmulShapes {
    Shape result;      // what the caller sees
    Shape full;        // batch + [M, N]
    bool a_vector = false, b_vector = false;
};

template <class T>
MatmulShapes matmul_shapes(const Tensor<T>& a, const Tensor<T>& b) {
    require(a.defined() && b.defined(), "matmul: ", a.defined() ? "b" : "a", " is an undefined (default-constructed) tensor");
    require(a.dim() >= 1 && b.dim() >= 1, "matmul: both arguments need at least one dim; got shapes ", a.shape().to_string(),
            " and ", b.shape().to_string());
    for (const Tensor<T>* t : {&a, &b})
        require(t->space() == MemorySpace::device || t->space() == MemorySpace::managed, "matmul: ", t == &a ? "a" : "b", " is in ",
                space_name(t->space()), " memory; move it to the device first (.to(MemorySpace::device))");
    require(a.device() == b.device(), "matmul: a is on device ", a.device().index, " and b on device ", b.device().index,
            "; move one of them (.to(TensorOptions{.device = ...}))");
    MatmulShapes s;
    s.a_vector = a.dim() == 1;
    s.b_vector = b.dim() == 1;
    const std::int64_t k_a = a.shape()[a.dim() - 1], k_b = b.shape()[s.b_vector ? 0 : b.dim() - 2];
    require(k_a == k_b, "matmul: shapes ", a.shape().to_string(), " and ", b.shape().to_string(), " cannot be multiplied: a's last dim (",
            k_a, ") differs from b's ", s.b_vector ? "only dim" : "second-to-last dim", " (", k_b, ")");
    const std::int64_t m = s.a_vector ? 1 : a.shape()[a.dim() - 2], n = s.b_vector ? 1 : b.shape()[b.dim() - 1];
    Shape batch_a, batch_b;
    for (int i = 0; i + 2 < a.dim(); ++i) batch_a.push_back(a.shape()[i]);
    for (int i = 0; i + 2 < b.dim(); ++i) batch_b.push_back(b.shape()[i]);
    const int rank = std::max(batch_a.size(), batch_b.size());
    for (int i = 0; i < rank; ++i) {
        const int ia = i - (rank - batch_a.size()), ib = i - (rank - batch_b.size());
        const std::int64_t x = ia >= 0 ? batch_a[ia] : 1, y = ib >= 0 ? batch_b[ib] : 1;
        require(x == y || x == 1 || y == 1, "matmul: the batch dims of ", a.shape().to_string(), " and ", b.shape().to_string(),
                " do not broadcast: ", x, " and ", y, " at batch dim ", i, " differ and neither is 1");
        s.full.push_back(x == 1 ? y : x);
    }
    // Dims beyond 32 bits are refused before anything is copied or allocated.
    checked_int(m, "M");
    checked_int(n, "N");
    checked_int(k_a, "K");
    s.result = s.full;
    s.full.push_back(m);
    s.full.push_back(n);
    if (!s.a_vector) s.result.push_back(m);
    if (!s.b_vector) s.result.push_back(n);
    return s;
}

template <class T>
void matmul_into(const Tensor<T>& a, const Tensor<T>& b, const Tensor<T>& out, const MatmulShapes& s, const MatmulOptions& o,
                 std::source_location site) {
    const Device device = a.device();
    const rt::stream_t stream = o.stream ? *o.stream : current_stream(device).handle();
    {
        DeviceGuard guard(device);  // a null stream is this device's default stream
        const int stream_device = rt::stream_device(stream);
        require(stream_device == device.index, "matmul: stream ", static_cast<const void*>(stream), " belongs to device ", stream_device,
                ", the operands are on device ", device.index);
    }
    // The operands as [..., M, K] and [..., K, N], the output as batch + [M, N].
    const Tensor<T> a2 = s.a_vector ? a.unsqueeze(0) : a;
    const Tensor<T> b2 = s.b_vector ? b.unsqueeze(1) : b;
    Tensor<T> c = out;
    if (s.a_vector) c = c.unsqueeze(c.dim() - (s.b_vector ? 0 : 1));
    if (s.b_vector) c = c.unsqueeze(c.dim());
    for (const Tensor<T>* t : {&a, &b}) ::tessel::detail::order_after_last_write(*t->storage(), stream, device);
    ::tessel::detail::order_after_last_write(*out.storage(), stream, device);
    run_matmul("matmul", a2, b2, c, o, stream, device, site);
}

}  // namespace ops::detail

// out = alpha * (a @ b) + beta * out, with torch.matmul's shape rules; out must have the product's
// shape, be on the operands' device and share no memory with them. beta == 0 never reads out.
template <Element T>
void matmul(const Tensor<T>& a, const Tensor<T>& b, const Tensor<T>& out, const MatmulOptions& options = {},
            std::source_location site = std::source_location::current()) {
    static_assert(ops::detail::tensor_core_type<T> || std::is_same_v<T, float> || std::is_same_v<T, double>,
                  "matmul takes float, double, __half and __nv_bfloat16 tensors (int8 and fp8 products are not implemented yet)");
    const ops::detail::MatmulShapes s = ops::detail::matmul_shapes(a, b);
    require(out.defined(), "matmul: out is an undefined (default-constructed) tensor");
    require(out.space() == MemorySpace::device || out.space() == MemorySpace::managed, "matmul: out is in ", space_name(out.space()),
            " memory; it must be device memory");
    require(out.device() == a.device(), "matmul: out is on device ", out.device().index, ", the operands on device ", a.device().index);
    require(out.shape() == s.result, "matmul: out has shape ", out.shape().to_string(), " but the product of ", a.shape().to_string(),
            " and ", b.shape().to_string(), " has shape ", s.result.to_string());
    require(::tessel::detail::distinct_elements(out.layout()), "matmul: out (shape ", out.shape().to_string(), ", strides ",
            out.strides().to_string(), ") repeats elements (a broadcast or overlapping view); write into a tensor whose elements are distinct");
    if (out.numel() > 0) {
        const auto ro = ops::detail::byte_range(out.data(), out.layout(), sizeof(T));
        for (const Tensor<T>* t : {&a, &b}) {
            if (t->numel() == 0) continue;
            const auto r = ops::detail::byte_range(t->data(), t->layout(), sizeof(T));
            require(r.second < ro.first || ro.second < r.first, "matmul: out (shape ", out.shape().to_string(), ", strides ",
                    out.strides().to_string(), ") shares memory with ", t == &a ? "a" : "b",
                    "; a product cannot be written over its own input: use another output tensor");
        }
    }
    ops::detail::matmul_into(a, b, out, s, options, site);
}

// a @ b as a new contiguous tensor, with torch.matmul's shape rules (beta must be 0: there is no
// prior output to scale).
template <Element T>
Tensor<T> matmul(const Tensor<T>& a, const Tensor<T>& b, const MatmulOptions& options = {},
                 std::source_location site = std::source_location::current()) {
    static_assert(ops::detail::tensor_core_type<T> || std::is_same_v<T, float> || std::is_same_v<T, double>,
                  "matmul takes float, double, __half and __nv_bfloat16 tensors (int8 and fp8 products are not implemented yet)");
    const ops::detail::MatmulShapes s = ops::detail::matmul_shapes(a, b);
    require(options.beta == 0, "matmul: beta = ", options.beta, " scales an existing output; pass one (matmul(a, b, out, options))");
    const rt::stream_t stream = options.stream ? *options.stream : current_stream(a.device()).handle();
    Tensor<T> out = empty<T>(s.result, TensorOptions{.device = a.device(), .stream = stream, .non_blocking = true});
    ops::detail::matmul_into(a, b, out, s, options, site);
    return out;
}

}  // namespace tessel
