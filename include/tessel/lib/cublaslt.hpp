// cuBLASLt, one thin layer for both backends: the library on CUDA, its stand-in (sim/cublaslt.hpp,
// the same names and status codes) on the sim, so tessel's calls are written once and run in CI.
//  - check / TESSEL_CUBLASLT_CHECK: a non-success status throws LibraryError naming it and the call;
//  - MatmulDesc, MatrixLayout, MatmulPreference: owners of cuBLASLt's descriptors;
//  - handle(device): the calling thread's pooled handle for the device;
//  - workspace(device, stream): the workspace its products on `stream` get, from the caching
//    allocator, sized like cuBLAS's (cublas::workspace_bytes) and given back by
//    cublas::release_workspaces();
//  - matmul(device, stream, LtGemm): one (strided-batched) column-major product with cuBLASLt's
//    epilogues and fp8 scales, its descriptors and algorithm cached per problem and thread; false
//    when cuBLASLt has no algorithm for it, so that the caller takes another path.
#pragma once

#include "../core/backend.hpp"

#if defined(TESSEL_BACKEND_CUDA)
#include <cublasLt.h>
#else
#include "../sim/cublaslt.hpp"
#endif

#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <source_location>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "../runtime/device.hpp"
#include "../runtime/rt.hpp"
#include "data_type.hpp"
#include "cublas.hpp"  // workspace_bytes and the workspace table both libraries share

namespace tessel::cublaslt {

// The entry points tessel calls: the library's on CUDA, the stand-in's (same names) on the sim.
#if defined(TESSEL_BACKEND_CUDA)
namespace api {
using ::cublasLtCreate;
using ::cublasLtDestroy;
using ::cublasLtGetStatusName;
using ::cublasLtMatmul;
using ::cublasLtMatmulAlgoGetHeuristic;
using ::cublasLtMatmulDescCreate;
using ::cublasLtMatmulDescDestroy;
using ::cublasLtMatmulDescGetAttribute;
using ::cublasLtMatmulDescSetAttribute;
using ::cublasLtMatmulPreferenceCreate;
using ::cublasLtMatmulPreferenceDestroy;
using ::cublasLtMatmulPreferenceSetAttribute;
using ::cublasLtMatrixLayoutCreate;
using ::cublasLtMatrixLayoutDestroy;
using ::cublasLtMatrixLayoutSetAttribute;
}  // namespace api
#else
namespace api = ::tessel::sim::cublaslt;
#endif

// Throws LibraryError naming the status and the call unless `status` is success.
inline void check(cublasStatus_t status, const char* expression, std::source_location where = std::source_location::current()) {
    if (status != CUBLAS_STATUS_SUCCESS) throw LibraryError("cuBLASLt", int(status), api::cublasLtGetStatusName(status), expression, where);
}

namespace detail {
// check() for a SetAttribute call: the message also names the attribute (its enum value), built
// only on failure so that the hot path formats nothing.
inline void check_attribute(cublasStatus_t status, const char* call, int attribute, std::source_location where) {
    if (status != CUBLAS_STATUS_SUCCESS)
        check(status, (std::string(call) + "(attribute " + std::to_string(attribute) + ")").c_str(), where);
}
}  // namespace detail

// Owns a cublasLtMatmulDesc_t: the operation (compute and scale type, transposes, epilogue, scales).
class MatmulDesc {
public:
    MatmulDesc(cublasComputeType_t compute, cudaDataType_t scale, std::source_location where = std::source_location::current()) {
        check(api::cublasLtMatmulDescCreate(&d_, compute, scale), "cublasLtMatmulDescCreate", where);
    }
    ~MatmulDesc() {
        if (d_) (void)api::cublasLtMatmulDescDestroy(d_);
    }
    MatmulDesc(MatmulDesc&& o) noexcept : d_(std::exchange(o.d_, nullptr)) {}
    MatmulDesc& operator=(MatmulDesc&& o) noexcept {
        std::swap(d_, o.d_);
        return *this;
    }
    cublasLtMatmulDesc_t get() const { return d_; }
    // Sets `attr` from `value`, which must have the attribute's documented type: cuBLASLt checks its size.
    template <class T>
    void set(cublasLtMatmulDescAttributes_t attr, const T& value, std::source_location where = std::source_location::current()) {
        detail::check_attribute(api::cublasLtMatmulDescSetAttribute(d_, attr, &value, sizeof(T)), "cublasLtMatmulDescSetAttribute",
                                int(attr), where);
    }

private:
    cublasLtMatmulDesc_t d_ = nullptr;
};

// Owns a cublasLtMatrixLayout_t: one operand's type, shape, leading dimension and batch.
class MatrixLayout {
public:
    MatrixLayout(cudaDataType type, std::uint64_t rows, std::uint64_t cols, std::int64_t ld,
                 std::source_location where = std::source_location::current()) {
        check(api::cublasLtMatrixLayoutCreate(&l_, type, rows, cols, ld), "cublasLtMatrixLayoutCreate", where);
    }
    ~MatrixLayout() {
        if (l_) (void)api::cublasLtMatrixLayoutDestroy(l_);
    }
    MatrixLayout(MatrixLayout&& o) noexcept : l_(std::exchange(o.l_, nullptr)) {}
    MatrixLayout& operator=(MatrixLayout&& o) noexcept {
        std::swap(l_, o.l_);
        return *this;
    }
    cublasLtMatrixLayout_t get() const { return l_; }
    // Sets `attr` from `value`, which must have the attribute's documented type.
    template <class T>
    void set(cublasLtMatrixLayoutAttribute_t attr, const T& value, std::source_location where = std::source_location::current()) {
        detail::check_attribute(api::cublasLtMatrixLayoutSetAttribute(l_, attr, &value, sizeof(T)), "cublasLtMatrixLayoutSetAttribute",
                                int(attr), where);
    }

private:
    cublasLtMatrixLayout_t l_ = nullptr;
};

// Owns a cublasLtMatmulPreference_t: what the heuristic may assume (workspace, pointer alignments).
class MatmulPreference {
public:
    explicit MatmulPreference(std::source_location where = std::source_location::current()) {
        check(api::cublasLtMatmulPreferenceCreate(&p_), "cublasLtMatmulPreferenceCreate", where);
    }
    ~MatmulPreference() {
        if (p_) (void)api::cublasLtMatmulPreferenceDestroy(p_);
    }
    MatmulPreference(MatmulPreference&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
    MatmulPreference& operator=(MatmulPreference&& o) noexcept {
        std::swap(p_, o.p_);
        return *this;
    }
    cublasLtMatmulPreference_t get() const { return p_; }
    // Sets `attr` from `value`, which must have the attribute's documented type.
    template <class T>
    void set(cublasLtMatmulPreferenceAttributes_t attr, const T& value, std::source_location where = std::source_location::current()) {
        detail::check_attribute(api::cublasLtMatmulPreferenceSetAttribute(p_, attr, &value, sizeof(T)),
                                "cublasLtMatmulPreferenceSetAttribute", int(attr), where);
    }

private:
    cublasLtMatmulPreference_t p_ = nullptr;
};

namespace detail {
// Handles no thread holds, per device. Never destroyed: handles released at thread exit return
// here, and destroying handles during static destruction can outlive the CUDA context.
struct HandlePool {
    std::mutex m;
    std::map<int, std::vector<cublasLtHandle_t>> free;
    static HandlePool& get() {
        static HandlePool* p = new HandlePool();
        return *p;
    }
};
// The calling thread's handles by device, given back to the pool when the thread exits.
struct ThreadHandles {
    std::map<int, cublasLtHandle_t> by_device;
    ~ThreadHandles() {
        HandlePool& p = HandlePool::get();
        std::lock_guard lk(p.m);
        for (auto& [d, h] : by_device) p.free[d].push_back(h);
    }
};
}  // namespace detail

// The calling thread's cuBLASLt handle for `device` (cuBLASLt takes the stream with each call).
inline cublasLtHandle_t handle(Device device) {
    static thread_local detail::ThreadHandles mine;
    if (auto it = mine.by_device.find(device.index); it != mine.by_device.end()) return it->second;
    cublasLtHandle_t h = nullptr;
    {
        detail::HandlePool& p = detail::HandlePool::get();
        std::lock_guard lk(p.m);
        auto& free = p.free[device.index];
        if (!free.empty()) h = free.back(), free.pop_back();
    }
    if (!h) {
        DeviceGuard guard(device);  // a handle belongs to the device current at its creation
        check(api::cublasLtCreate(&h), "cublasLtCreate");
    }
    mine.by_device[device.index] = h;
    return h;
}

// The workspace the calling thread's products on `stream` get: cublas::workspace_bytes(device) of
// the caching allocator (PyTorch gives cuBLASLt the size it gives cuBLAS), kept per (handle,
// stream) in the table cuBLAS's workspaces live in, so that cublas::release_workspaces() gives
// both back.
inline cublas::detail::HandlePool::Workspace workspace(Device device, rt::stream_t stream) {
    DeviceGuard guard(device);  // taken from the device's cache
    return cublas::detail::workspace(handle(device), device, stream);
}

// One operand as it lies in device memory: column-major, `ld` elements between columns,
// `batch_stride` elements between a batch's matrices (0: every batch entry reads the same one).
struct LtOperand {
    const void* data = nullptr;
    cudaDataType type = CUDA_R_32F;
    std::int64_t ld = 0;
    std::int64_t batch_stride = 0;
};
// The output, laid out as an LtOperand.
struct LtOutput {
    void* data = nullptr;
    cudaDataType type = CUDA_R_32F;
    std::int64_t ld = 0;
    std::int64_t batch_stride = 0;
};

// One product D = epilogue(alpha op(A) op(B) + beta C) over `batch` strided entries, column-major,
// as tessel's matmul dispatch hands it to cuBLASLt: op(A) is m x k, op(B) k x n, C and D m x n.
struct LtGemm {
    cublasOperation_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
    std::int64_t m = 0, n = 0, k = 0;
    LtOperand a, b;
    LtOperand c;  // c.data null: C is D (its pointer, type and layout); read only when beta != 0
    LtOutput d;   // may be C itself
    int batch = 1;
    cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
    cudaDataType scale_type = CUDA_R_32F;                     // alpha and beta's type, per cuBLASLt's type table
    double alpha = 1, beta = 0;                               // host values, converted to the scale type
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;  // DEFAULT, RELU, BIAS, RELU_BIAS, GELU or GELU_BIAS
    const void* bias = nullptr;                               // m elements (one per row of D), for the *BIAS epilogues
    std::optional<cudaDataType> bias_type;                    // unset: cuBLASLt's documented default for the types
    std::int64_t bias_batch_stride = 0;                       // elements between batch entries' biases (0: one for all)
    const float* a_scale = nullptr;  // fp8 per-tensor scales in device memory (null: 1); only fp8 matrices take one
    const float* b_scale = nullptr;
    const float* d_scale = nullptr;
    int algorithm = 0;  // which of the heuristic's results to run, best first (autotuning times several)
};

// What matmul() has done in this process: tests check the plan cache spares the heuristic.
struct LtStats {
    std::uint64_t heuristic_queries = 0;  // cublasLtMatmulAlgoGetHeuristic calls
    std::uint64_t cache_hits = 0;         // calls whose problem had a cached plan (or a cached "no algorithm")
    std::uint64_t no_algorithm = 0;       // calls answered false
    std::uint64_t products = 0;           // cublasLtMatmul calls
};

namespace detail {
struct Counters {
    std::atomic<std::uint64_t> heuristic_queries{0}, cache_hits{0}, no_algorithm{0}, products{0};
};
inline Counters& counters() {
    static Counters c;
    return c;
}

// The largest power of two up to 256 dividing the address of every batch entry: what cuBLASLt's
// MIN_ALIGNMENT_*_BYTES preferences and its choice of vectorised kernels go by.
inline std::uint32_t alignment(const void* p, std::int64_t stride_bytes, int batch) {
    std::uintptr_t bits = reinterpret_cast<std::uintptr_t>(p) | 256;
    if (batch > 1) bits |= std::uintptr_t(stride_bytes);
    return std::uint32_t(bits & (~bits + 1));
}
inline std::int64_t element_bytes(cudaDataType t) {
    const std::size_t bytes = data_type_bytes(t);
    if (bytes == 0) fail<InvalidArgument>("cublaslt::matmul: data type ", int(t), " is not one tessel passes to cuBLASLt");
    return std::int64_t(bytes);
}
inline bool is_fp8(cudaDataType t) { return t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2; }
inline bool uses_bias(cublasLtEpilogue_t e) {
    return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_RELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_BIAS;
}

// The most heuristic results LtGemm::algorithm may pick among.
constexpr int max_algorithms = 8;

// The bad input tessel can name better than a library status can.
inline void validate(const LtGemm& g) {
    const char* w = "cublaslt::matmul: ";
    require(g.algorithm >= 0 && g.algorithm < max_algorithms, w, "algorithm ", g.algorithm, " is not an index into the heuristic's first ",
            max_algorithms, " results");
    require(g.m >= 0 && g.n >= 0 && g.k >= 0 && g.batch >= 0, w, "m, n, k and batch must not be negative (m ", g.m, ", n ", g.n, ", k ",
            g.k, ", batch ", g.batch, ")");
    const auto op_ok = [](cublasOperation_t op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C; };
    require(op_ok(g.transa) && op_ok(g.transb), w, "transa/transb must be CUBLAS_OP_N, _T or _C (got ", int(g.transa), ", ", int(g.transb),
            ")");
    const std::int64_t a_rows = g.transa == CUBLAS_OP_N ? g.m : g.k, b_rows = g.transb == CUBLAS_OP_N ? g.k : g.n;
    require(g.a.ld >= std::max<std::int64_t>(1, a_rows), w, "lda ", g.a.ld, " is less than A's ", a_rows, " stored rows");
    require(g.b.ld >= std::max<std::int64_t>(1, b_rows), w, "ldb ", g.b.ld, " is less than B's ", b_rows, " stored rows");
    require(!g.c.data || g.c.ld >= std::max<std::int64_t>(1, g.m), w, "ldc ", g.c.ld, " is less than m = ", g.m);
    require(g.d.ld >= std::max<std::int64_t>(1, g.m), w, "ldd ", g.d.ld, " is less than m = ", g.m);
    require(g.a.batch_stride >= 0 && g.b.batch_stride >= 0 && g.c.batch_stride >= 0 && g.d.batch_stride >= 0 && g.bias_batch_stride >= 0, w,
            "batch strides must not be negative");
    const bool work = g.m > 0 && g.n > 0 && g.batch > 0;
    require(!work || g.d.data, w, "D is null");
    require(!work || g.k == 0 || (g.a.data && g.b.data), w, "A or B is null");
    const bool known = g.epilogue == CUBLASLT_EPILOGUE_DEFAULT || g.epilogue == CUBLASLT_EPILOGUE_RELU ||
                       g.epilogue == CUBLASLT_EPILOGUE_GELU || uses_bias(g.epilogue);
    require(known, w, "epilogue ", int(g.epilogue),
            " is not one this layer passes (DEFAULT, RELU, BIAS, RELU_BIAS, GELU, GELU_BIAS: the others need auxiliary outputs)");
    require(uses_bias(g.epilogue) == (g.bias != nullptr), w,
            uses_bias(g.epilogue) ? "the epilogue adds a bias but bias is null" : "a bias was given but the epilogue does not add one");
    // cuBLASLt scales fp8 matrices only: a scale on another is CUBLAS_STATUS_INVALID_VALUE (CUDA 13),
    // so it is refused here with the operand's name.
    require(!g.a_scale || is_fp8(g.a.type), w, "a_scale given but A is not fp8");
    require(!g.b_scale || is_fp8(g.b.type), w, "b_scale given but B is not fp8");
    require(!g.d_scale || is_fp8(g.d.type), w, "d_scale given but D is not fp8 (cuBLASLt scales only fp8 outputs)");
    if (g.scale_type == CUDA_R_32I)
        require(g.alpha == std::nearbyint(g.alpha) && g.beta == std::nearbyint(g.beta) && g.alpha >= -2147483648.0 && g.alpha <= 2147483647.0 &&
                    g.beta >= -2147483648.0 && g.beta <= 2147483647.0,
                w, "alpha ", g.alpha, " and beta ", g.beta, " must be int32 values for an int32 scale type");
}

// Everything about a call except its pointers' values (their alignments included), as numbers.
using Key = std::array<std::int64_t, 35>;
struct KeyHash {
    std::size_t operator()(const Key& k) const noexcept {
        std::uint64_t h = 1469598103934665603ull;
        for (std::int64_t v : k) h = (h ^ std::uint64_t(v)) * 1099511628211ull;
        return std::size_t(h ^ (h >> 29));
    }
};
// A problem's descriptors and chosen algorithm, or the heuristic's "none".
struct Plan {
    bool supported = false;
    MatmulDesc desc;
    MatrixLayout a, b, c, d;
    cublasLtMatmulAlgo_t algo{};
};
// Plans are per thread (descriptors are not shared) and dropped wholesale past this many, so that a
// stream of distinct shapes cannot grow the cache without bound.
constexpr std::size_t plan_cache_capacity = 1024;

inline std::unique_ptr<Plan> make_plan(cublasLtHandle_t h, const LtGemm& g, const LtOperand& c, const std::array<std::uint32_t, 4>& align,
                                       std::size_t workspace_bytes, std::source_location where) {
    const auto layout = [&](cudaDataType t, std::int64_t rows, std::int64_t cols, std::int64_t ld, std::int64_t stride) {
        MatrixLayout l(t, std::uint64_t(rows), std::uint64_t(cols), ld, where);
        if (g.batch > 1) {
            l.set(CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, std::int32_t(g.batch), where);
            l.set(CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, stride, where);
        }
        return l;
    };
    const bool ta = g.transa != CUBLAS_OP_N, tb = g.transb != CUBLAS_OP_N;
    auto plan = std::unique_ptr<Plan>(new Plan{
        false, MatmulDesc(g.compute, g.scale_type, where), layout(g.a.type, ta ? g.k : g.m, ta ? g.m : g.k, g.a.ld, g.a.batch_stride),
        layout(g.b.type, tb ? g.n : g.k, tb ? g.k : g.n, g.b.ld, g.b.batch_stride), layout(c.type, g.m, g.n, c.ld, c.batch_stride),
        layout(g.d.type, g.m, g.n, g.d.ld, g.d.batch_stride)});
    MatmulDesc& desc = plan->desc;
    desc.set(CUBLASLT_MATMUL_DESC_TRANSA, std::int32_t(g.transa), where);
    desc.set(CUBLASLT_MATMUL_DESC_TRANSB, std::int32_t(g.transb), where);
    desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE, std::uint32_t(g.epilogue), where);
    if (g.bias) {
        desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias, where);  // its alignment guides the heuristic
        if (g.bias_type) desc.set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, std::int32_t(*g.bias_type), where);
        if (g.bias_batch_stride) desc.set(CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, g.bias_batch_stride, where);
    }
    MatmulPreference pref(where);
    pref.set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, std::uint64_t(workspace_bytes), where);
    pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align[0], where);
    pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align[1], where);
    pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align[2], where);
    pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align[3], where);
    // No split-K partial sums kept in an output type narrower than fp32 (OUTPUT_TYPE, and INPLACE,
    // which adds the parts up in D): such a result is rounded once from fp32, as the hand-written
    // kernels and the sim do (torch's allow_*_reduced_precision_reduction = False). Algorithms
    // without split-K are never masked out.
    if (data_type_bytes(g.d.type) < 4)
        pref.set(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, std::uint32_t(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE), where);
    std::array<cublasLtMatmulHeuristicResult_t, max_algorithms> results{};
    int found = 0;
    counters().heuristic_queries.fetch_add(1, std::memory_order_relaxed);
    const cublasStatus_t s = api::cublasLtMatmulAlgoGetHeuristic(h, desc.get(), plan->a.get(), plan->b.get(), plan->c.get(), plan->d.get(),
                                                                 pref.get(), g.algorithm + 1, results.data(), &found);
    if (s == CUBLAS_STATUS_NOT_SUPPORTED) return plan;  // no heuristic for this configuration: the caller's fallback
    check(s, "cublasLtMatmulAlgoGetHeuristic", where);
    const cublasLtMatmulHeuristicResult_t& result = results[std::size_t(g.algorithm)];
    plan->supported = found > g.algorithm && result.state == CUBLAS_STATUS_SUCCESS;
    plan->algo = result.algo;
    return plan;
}
}  // namespace detail

// The counters of matmul() since the program started.
inline LtStats stats() {
    const detail::Counters& c = detail::counters();
    return {c.heuristic_queries.load(), c.cache_hits.load(), c.no_algorithm.load(), c.products.load()};
}

// Queues `g` on `stream` of `device` through cuBLASLt (bad input: InvalidArgument; a library error:
// LibraryError). Returns false, having queued nothing, when cuBLASLt has no algorithm for the
// problem (CUBLAS_STATUS_NOT_SUPPORTED, or fewer heuristic results than g.algorithm + 1), and for k == 0, whose
// D = epilogue(beta C) cuBLASLt does not document: the caller takes another path. The first call
// of a problem on a thread builds its descriptors and asks the heuristic, with the pointers' real
// alignments; later calls with the same types, shapes, strides and alignments reuse them.
inline bool matmul(Device device, rt::stream_t stream, const LtGemm& g, std::source_location where = std::source_location::current()) {
    detail::validate(g);
    if (g.m == 0 || g.n == 0 || g.batch == 0) return true;  // nothing to compute
    detail::Counters& n = detail::counters();
    if (g.k == 0) {
        n.no_algorithm.fetch_add(1, std::memory_order_relaxed);
        return false;
    }
    const LtOperand c = g.c.data ? g.c : LtOperand{g.d.data, g.d.type, g.d.ld, g.d.batch_stride};
    const std::array<std::uint32_t, 4> align = {detail::alignment(g.a.data, g.a.batch_stride * detail::element_bytes(g.a.type), g.batch),
                                                detail::alignment(g.b.data, g.b.batch_stride * detail::element_bytes(g.b.type), g.batch),
                                                detail::alignment(c.data, c.batch_stride * detail::element_bytes(c.type), g.batch),
                                                detail::alignment(g.d.data, g.d.batch_stride * detail::element_bytes(g.d.type), g.batch)};
    // The heuristic reads the bias pointer's own alignment (its batch entries follow from the stride).
    const std::int64_t bias_align = g.bias ? detail::alignment(g.bias, 0, 1) : 0;
    const detail::Key key = {device.index, g.transa, g.transb, g.m, g.n, g.k, g.batch,
                             g.a.type, g.b.type, c.type, g.d.type, g.a.ld, g.b.ld, c.ld, g.d.ld,
                             g.a.batch_stride, g.b.batch_stride, c.batch_stride, g.d.batch_stride,
                             g.compute, g.scale_type, g.epilogue, g.bias_type ? std::int64_t(*g.bias_type) : -1,
                             g.bias != nullptr, g.bias_batch_stride, bias_align,
                             g.a_scale != nullptr, g.b_scale != nullptr, g.d_scale != nullptr,
                             align[0], align[1], align[2], align[3], std::int64_t(cublas::workspace_bytes(device)), g.algorithm};
    DeviceGuard guard(device);
    const cublasLtHandle_t h = handle(device);
    const auto ws = cublas::detail::workspace(h, device, stream);
    static thread_local std::unordered_map<detail::Key, std::unique_ptr<detail::Plan>, detail::KeyHash> plans;
    auto it = plans.find(key);
    if (it != plans.end()) {
        n.cache_hits.fetch_add(1, std::memory_order_relaxed);
    } else {
        if (plans.size() >= detail::plan_cache_capacity) plans.clear();
        it = plans.emplace(key, detail::make_plan(h, g, c, align, ws.bytes, where)).first;
    }
    detail::Plan& plan = *it->second;
    if (!plan.supported) {
        n.no_algorithm.fetch_add(1, std::memory_order_relaxed);
        return false;
    }
    // This call's pointers (the cached descriptor holds the last call's).
    if (g.bias) plan.desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias, where);
    if (g.a_scale) plan.desc.set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(g.a_scale), where);
    if (g.b_scale) plan.desc.set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(g.b_scale), where);
    if (g.d_scale) plan.desc.set(CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, static_cast<const void*>(g.d_scale), where);
    // alpha and beta in host memory, in the scale type.
    union Scalar {
        float f;
        double d;
        std::int32_t i;
    } alpha{}, beta{};
    if (g.scale_type == CUDA_R_64F)
        alpha.d = g.alpha, beta.d = g.beta;
    else if (g.scale_type == CUDA_R_32I)
        alpha.i = std::int32_t(g.alpha), beta.i = std::int32_t(g.beta);
    else
        alpha.f = float(g.alpha), beta.f = float(g.beta);
    check(api::cublasLtMatmul(h, plan.desc.get(), &alpha, g.a.data, plan.a.get(), g.b.data, plan.b.get(), &beta, c.data, plan.c.get(),
                              g.d.data, plan.d.get(), &plan.algo, ws.data, ws.bytes, stream),
          "cublasLtMatmul", where);
    n.products.fetch_add(1, std::memory_order_relaxed);
    return true;
}

}  // namespace tessel::cublaslt

// Checks a cuBLASLt call and throws tessel::LibraryError naming the status and the call.
#define TESSEL_CUBLASLT_CHECK(expr) ::tessel::cublaslt::check((expr), #expr)
