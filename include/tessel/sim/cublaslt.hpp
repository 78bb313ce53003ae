// The sim's stand-in for the cuBLASLt entry points tessel calls (lib/cublaslt.hpp), with what the
// cuBLASLt documentation states for them: column-major (CUBLASLT_ORDER_COL) layouts with rows, cols,
// leading dimension, batch count and strided batch offset; transa/transb, compute and scale type,
// host alpha/beta, the epilogues DEFAULT, RELU, BIAS, RELU_BIAS, GELU, GELU_BIAS with the documented
// default bias type, fp8 per-tensor scales (A/B/D_SCALE_POINTER), and the documented type table and
// kernel requirements: fp8 needs sm_89+, "TN" operands (on sm_89, sm_90 and sm_12x) and 16-byte
// multiples; the IMMA int8 kernels need TN, m, k and leading dimensions multiples of 4 and 4-byte
// pointers. Where the library would find no kernel, the heuristic answers CUBLAS_STATUS_NOT_SUPPORTED
// or no result, as the real one does. Its algorithm remembers the MIN_ALIGNMENT_*_BYTES it was asked
// under and the bias pointer's alignment, and cublasLtMatmul refuses (CUBLAS_STATUS_INVALID_VALUE)
// pointers less aligned than that, so that a caller declaring wrong alignments fails in CI, not on
// a GPU. Attributes tessel does not set are refused with CUBLAS_STATUS_NOT_SUPPORTED rather than
// ignored. Work is queued on the stream passed in. The product is sim/cublas.hpp's (fp32 sums for the
// 32F compute types, exact int32 for 32I), the epilogue runs in the scale type, and D is rounded once
// (int8: to nearest even, saturated; fp8: saturated to the largest finite value).
#pragma once

#include <cublasLt.h>  // types, enums and the opaque descriptor sizes only: the sim never links cuBLASLt

#include <cstddef>
#include <cstdint>

#include "../core/linkage.hpp"
#include "cublas.hpp"  // cublasGetStatusName; the operand loading and product the two stand-ins share

// The handle's state (cuBLASLt keeps it opaque behind cublasLtHandle_t).
struct cublasLtContext {
    int device = 0;
    int major = 0, minor = 0;              // the device's compute capability: the fp8 rules depend on it
    std::size_t last_workspace_bytes = 0;  // what the last cublasLtMatmul was given
    std::uint32_t last_reduction_scheme_mask = 0;  // the preference the last heuristic query was given
};

namespace tessel::sim::cublaslt {

// cuBLASLt's entry points that tessel calls, with the library's signatures and status codes.
TESSEL_API cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle);
TESSEL_API cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle);
TESSEL_API const char* cublasLtGetStatusName(cublasStatus_t status);
TESSEL_API cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute, cudaDataType_t scale);
TESSEL_API cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc);
TESSEL_API cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const void* buf,
                                                         std::size_t bytes);
TESSEL_API cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, void* buf,
                                                         std::size_t bytes, std::size_t* written);
TESSEL_API cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, std::uint64_t rows,
                                                     std::uint64_t cols, std::int64_t ld);
TESSEL_API cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout);
TESSEL_API cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr,
                                                           const void* buf, std::size_t bytes);
TESSEL_API cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref);
TESSEL_API cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref);
TESSEL_API cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
                                                               const void* buf, std::size_t bytes);
TESSEL_API cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t Adesc,
                                                         cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc,
                                                         cublasLtMatrixLayout_t Ddesc, cublasLtMatmulPreference_t pref, int requested,
                                                         cublasLtMatmulHeuristicResult_t results[], int* returned);
TESSEL_API cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                                         cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc, const void* beta,
                                         const void* C, cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc,
                                         const cublasLtMatmulAlgo_t* algo, void* workspace, std::size_t workspace_bytes,
                                         cudaStream_t stream);
// Products queued and heuristic queries answered since the program started, and handles created
// (tests check which path a call took, that a cache spared a query, that a pool reused a handle).
TESSEL_API std::uint64_t matmul_calls();
TESSEL_API std::uint64_t heuristic_calls();
TESSEL_API std::uint64_t handles_created();
// The workspace size the handle's last cublasLtMatmul was given (tests check tessel's reached it).
TESSEL_API std::size_t workspace_bytes(cublasLtHandle_t handle);
// The REDUCTION_SCHEME_MASK of the preference the handle's last heuristic query was given.
TESSEL_API std::uint32_t reduction_scheme_mask(cublasLtHandle_t handle);

}  // namespace tessel::sim::cublaslt

#if TESSEL_DEFINE_RUNTIME
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <utility>
#include <vector>

#include "runtime.hpp"

namespace tessel::sim::cublaslt {

namespace detail {
using cublas::detail::load;
using cublas::detail::Operand;
using cublas::detail::type_bytes;

inline std::atomic<std::uint64_t> matmuls{0}, heuristics{0}, handles{0};

// The descriptors' state, placement-constructed into the opaque storage the real header sizes (as
// cuBLASLt's own *Init functions do), typed as the documentation types each attribute.
struct DescState {
    std::uint32_t magic = 0x4c744465;
    std::int32_t compute = CUBLAS_COMPUTE_32F, scale = CUDA_R_32F, pointer_mode = CUBLASLT_POINTER_MODE_HOST;
    std::int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N, transc = CUBLAS_OP_N;
    std::uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    std::int32_t bias_type = -1;  // -1: the documented default for the type combination
    const void* bias = nullptr;
    std::int64_t bias_batch_stride = 0;
    const void* scales[4] = {};  // A, B, C, D
};
struct LayoutState {
    std::uint32_t magic = 0x4c744c61;
    std::uint32_t type = CUDA_R_32F;
    std::int32_t order = CUBLASLT_ORDER_COL;
    std::uint64_t rows = 0, cols = 0;
    std::int64_t ld = 0;
    std::int32_t batch = 1;
    std::int64_t stride = 0;
};
struct PrefState {
    std::uint32_t magic = 0x4c745072;
    std::uint64_t max_workspace = 0;
    std::uint32_t align[4] = {256, 256, 256, 256};  // the documented defaults
    // Which split-K reduction schemes the heuristic may pick. The stand-in always reduces in fp32,
    // which every mask allows; tessel allows only COMPUTE_TYPE for outputs narrower than fp32 so
    // that a GPU does the same.
    std::uint32_t reduction_scheme_mask = CUBLASLT_REDUCTION_SCHEME_MASK;
};
struct AlgoState {
    std::uint32_t magic = 0x4c74416c;
    std::uint32_t align[4] = {};  // A, B, C, D: the preference's MIN_ALIGNMENT_*_BYTES
    std::uint32_t bias_align = 256;
    std::uint32_t index = 0;  // which of the heuristic's results (they compute the same product)
};
static_assert(sizeof(DescState) <= sizeof(cublasLtMatmulDescOpaque_t) && sizeof(LayoutState) <= sizeof(cublasLtMatrixLayoutOpaque_t) &&
              sizeof(PrefState) <= sizeof(cublasLtMatmulPreferenceOpaque_t) && sizeof(AlgoState) <= sizeof(cublasLtMatmulAlgo_t));

template <class State, class Opaque>
Opaque* make(const State& s) {
    auto* o = new Opaque{};
    new (static_cast<void*>(o->data)) State(s);
    return o;
}
// The state in `o`, or null when `o` is null or was not made by this stand-in.
template <class State, class Opaque>
State* state(Opaque* o) {
    if (!o) return nullptr;
    State* s = std::launder(reinterpret_cast<State*>(const_cast<std::uint64_t*>(o->data)));
    return s->magic == State{}.magic ? s : nullptr;
}

// Address and size of the attribute's storage; null for attributes the stand-in does not model.
inline std::pair<void*, std::size_t> field(DescState& d, cublasLtMatmulDescAttributes_t a) {
    switch (a) {
        case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: return {&d.compute, 4};
        case CUBLASLT_MATMUL_DESC_SCALE_TYPE: return {&d.scale, 4};
        case CUBLASLT_MATMUL_DESC_POINTER_MODE: return {&d.pointer_mode, 4};
        case CUBLASLT_MATMUL_DESC_TRANSA: return {&d.transa, 4};
        case CUBLASLT_MATMUL_DESC_TRANSB: return {&d.transb, 4};
        case CUBLASLT_MATMUL_DESC_TRANSC: return {&d.transc, 4};
        case CUBLASLT_MATMUL_DESC_EPILOGUE: return {&d.epilogue, 4};
        case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return {&d.bias, sizeof(void*)};
        case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE: return {&d.bias_batch_stride, 8};
        case CUBLASLT_MATMUL_DESC_A_SCALE_POINTER: return {&d.scales[0], sizeof(void*)};
        case CUBLASLT_MATMUL_DESC_B_SCALE_POINTER: return {&d.scales[1], sizeof(void*)};
        case CUBLASLT_MATMUL_DESC_C_SCALE_POINTER: return {&d.scales[2], sizeof(void*)};
        case CUBLASLT_MATMUL_DESC_D_SCALE_POINTER: return {&d.scales[3], sizeof(void*)};
        case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return {&d.bias_type, 4};
        default: return {nullptr, 0};
    }
}
inline std::pair<void*, std::size_t> field(LayoutState& l, cublasLtMatrixLayoutAttribute_t a) {
    switch (a) {
        case CUBLASLT_MATRIX_LAYOUT_TYPE: return {&l.type, 4};
        case CUBLASLT_MATRIX_LAYOUT_ORDER: return {&l.order, 4};
        case CUBLASLT_MATRIX_LAYOUT_ROWS: return {&l.rows, 8};
        case CUBLASLT_MATRIX_LAYOUT_COLS: return {&l.cols, 8};
        case CUBLASLT_MATRIX_LAYOUT_LD: return {&l.ld, 8};
        case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return {&l.batch, 4};
        case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: return {&l.stride, 8};
        default: return {nullptr, 0};
    }
}
inline std::pair<void*, std::size_t> field(PrefState& p, cublasLtMatmulPreferenceAttributes_t a) {
    switch (a) {
        case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return {&p.max_workspace, 8};
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: return {&p.align[0], 4};
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: return {&p.align[1], 4};
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: return {&p.align[2], 4};
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: return {&p.align[3], 4};
        case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK: return {&p.reduction_scheme_mask, 4};
        default: return {nullptr, 0};
    }
}
// SetAttribute's documented checks: "INVALID_VALUE if buf is NULL or sizeInBytes doesn't match size
// of internal storage for selected attribute".
template <class State, class Attr>
cublasStatus_t set(State* s, Attr a, const void* buf, std::size_t bytes) {
    if (!s) return CUBLAS_STATUS_INVALID_VALUE;
    const auto [p, size] = field(*s, a);
    if (!p) return CUBLAS_STATUS_NOT_SUPPORTED;  // not modelled: refused rather than ignored
    if (!buf || bytes != size) return CUBLAS_STATUS_INVALID_VALUE;
    std::memcpy(p, buf, size);
    return CUBLAS_STATUS_SUCCESS;
}

inline bool is_fp8(std::uint32_t t) { return t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2; }
// The largest power of two up to 256 dividing every batch entry's address (what MIN_ALIGNMENT means).
inline std::uint32_t alignment(const void* p, std::int64_t stride_bytes, int batch) {
    std::uintptr_t bits = reinterpret_cast<std::uintptr_t>(p) | 256;
    if (batch > 1) bits |= std::uintptr_t(stride_bytes) | 256;
    return std::uint32_t(bits & (~bits + 1));
}

// The documented default bias type (CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE): D's type, except the IMMA
// int8 output (the scale type, fp32) and fp8 inputs (bf16 for an fp32 output, C's type for an fp8 one).
inline std::uint32_t default_bias_type(std::uint32_t a, std::uint32_t c, std::uint32_t d) {
    if (a == CUDA_R_8I && d == CUDA_R_8I) return CUDA_R_32F;
    if (is_fp8(a) && d == CUDA_R_32F) return CUDA_R_16BF;
    if (is_fp8(d)) return c;
    return d;
}
// The rows of cublasLtMatmul's tables of supported types (compute, scale, A, B, C, D) the stand-in runs.
inline bool supported_types(std::int32_t compute, std::int32_t scale, std::uint32_t a, std::uint32_t b, std::uint32_t c, std::uint32_t d) {
    switch (compute) {
        case CUBLAS_COMPUTE_32F:
            if (scale != CUDA_R_32F) return false;
            if (is_fp8(a) && is_fp8(b)) {  // the FP8 table: e5m2 x e5m2 is not in it
                if (a == CUDA_R_8F_E5M2 && b == CUDA_R_8F_E5M2) return false;
                if (c == CUDA_R_32F) return d == CUDA_R_32F;
                if (c != CUDA_R_16BF && c != CUDA_R_16F) return false;
                return d == c || d == CUDA_R_8F_E4M3 || (d == CUDA_R_8F_E5M2 && (a == CUDA_R_8F_E5M2 || b == CUDA_R_8F_E5M2));
            }
            if (a != b || c != d) return false;
            return (a == CUDA_R_32F && c == CUDA_R_32F) || ((a == CUDA_R_16F || a == CUDA_R_16BF) && (c == a || c == CUDA_R_32F));
        case CUBLAS_COMPUTE_32F_FAST_TF32: return scale == CUDA_R_32F && a == CUDA_R_32F && b == a && c == a && d == a;
        case CUBLAS_COMPUTE_64F: return scale == CUDA_R_64F && a == CUDA_R_64F && b == a && c == a && d == a;
        case CUBLAS_COMPUTE_32I:
            if (a != CUDA_R_8I || b != a || c != d) return false;
            return (scale == CUDA_R_32I && c == CUDA_R_32I) || (scale == CUDA_R_32F && c == CUDA_R_8I);
        default: return false;
    }
}
inline bool known_epilogue(std::uint32_t e) {
    return e == CUBLASLT_EPILOGUE_DEFAULT || e == CUBLASLT_EPILOGUE_RELU || e == CUBLASLT_EPILOGUE_BIAS ||
           e == CUBLASLT_EPILOGUE_RELU_BIAS || e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_BIAS;
}
inline bool has_bias(std::uint32_t e) { return (e & CUBLASLT_EPILOGUE_BIAS) != 0; }

// One problem as the descriptors state it, with what its kernels need of the pointers.
struct Problem {
    DescState d;
    LayoutState l[4];  // A, B, C, D
    int m = 0, n = 0, k = 0, batch = 1;
    bool ta = false, tb = false;
    std::uint32_t need_align[4] = {};  // the pointer alignment A, B, C, D need: their element, or the kernels' rule
    bool no_kernel = false;            // valid and in the tables, but no kernel meets its requirements
};

// The problem the descriptors describe, checked as cuBLASLt checks it: SUCCESS (see no_kernel), or
// INVALID_VALUE for inconsistent descriptors, NOT_SUPPORTED for what the library does not run.
inline cublasStatus_t describe(const cublasLtContext& h, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t const (&layouts)[4],
                               Problem& p) {
    const DescState* d = state<DescState>(desc);
    if (!d) return CUBLAS_STATUS_INVALID_VALUE;
    p.d = *d;
    for (int i = 0; i < 4; ++i) {
        const LayoutState* l = state<LayoutState>(layouts[i]);
        if (!l) return CUBLAS_STATUS_INVALID_VALUE;
        p.l[i] = *l;
    }
    const auto& [A, B, C, D] = p.l;
    const auto op_ok = [](std::int32_t op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C; };
    if (!op_ok(d->transa) || !op_ok(d->transb)) return CUBLAS_STATUS_INVALID_VALUE;
    p.ta = d->transa != CUBLAS_OP_N, p.tb = d->transb != CUBLAS_OP_N;  // OP_C is OP_T for real types
    for (const LayoutState& l : p.l) {
        if (l.order != CUBLASLT_ORDER_COL) return CUBLAS_STATUS_NOT_SUPPORTED;  // the stand-in models column-major only
        constexpr std::uint64_t int_max = std::uint64_t(std::numeric_limits<int>::max());
        if (l.rows > int_max || l.cols > int_max || std::uint64_t(l.ld) > int_max)
            return CUBLAS_STATUS_NOT_SUPPORTED;  // "usually only values that can be expressed as int32_t are supported"
        if (l.ld < std::max<std::int64_t>(1, std::int64_t(l.rows)) || l.batch < 1 || l.batch != D.batch || l.stride < 0)
            return CUBLAS_STATUS_INVALID_VALUE;  // columns may not overlap; one batch count for all four
    }
    p.m = int(D.rows), p.n = int(D.cols), p.k = int(p.ta ? A.rows : A.cols), p.batch = D.batch;
    if ((p.ta ? A.cols : A.rows) != D.rows || (p.tb ? B.rows : B.cols) != D.cols || (p.tb ? B.cols : B.rows) != std::uint64_t(p.k) ||
        C.rows != D.rows || C.cols != D.cols)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (d->pointer_mode != CUBLASLT_POINTER_MODE_HOST || d->transc != CUBLAS_OP_N) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (!supported_types(d->compute, d->scale, A.type, B.type, C.type, D.type) || !known_epilogue(d->epilogue))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (d->compute == CUBLAS_COMPUTE_32I && D.type == CUDA_R_32I && d->epilogue != CUBLASLT_EPILOGUE_DEFAULT)
        return CUBLAS_STATUS_NOT_SUPPORTED;  // the table: "non-default epilogue not supported"
    if (d->bias_type != -1 && std::uint32_t(d->bias_type) != default_bias_type(A.type, C.type, D.type)) return CUBLAS_STATUS_NOT_SUPPORTED;
    for (int i = 0; i < 4; ++i) p.need_align[i] = std::uint32_t(type_bytes(cudaDataType(p.l[i].type)));
    const auto bytes = [](const LayoutState& l) { return l.ld * std::int64_t(type_bytes(cudaDataType(l.type))); };
    if (is_fp8(A.type)) {
        // FP8: sm_89 or later; "A must be transposed and B non-transposed (the TN format)" on sm_89,
        // sm_90 and sm_12x; dimensions and pointers that "support 16-byte alignment".
        const int cc = h.major * 10 + h.minor;
        if (cc < 89) return CUBLAS_STATUS_NOT_SUPPORTED;
        if ((cc == 89 || cc == 90 || h.major == 12) && !(p.ta && !p.tb)) return CUBLAS_STATUS_NOT_SUPPORTED;
        std::fill(std::begin(p.need_align), std::end(p.need_align), 16u);
        p.no_kernel = p.m % 16 || p.k % 16 || bytes(A) % 16 || bytes(B) % 16 || bytes(C) % 16 || bytes(D) % 16;
    } else if (A.type == CUDA_R_8I) {
        // IMMA with the regular ordering: TN, 4-byte aligned pointers, "leading dimensions of A, B, C
        // multiples of 4", "dimensions m and k multiples of 4".
        if (!(p.ta && !p.tb)) return CUBLAS_STATUS_NOT_SUPPORTED;
        std::fill(std::begin(p.need_align), std::end(p.need_align), 4u);
        p.no_kernel = p.m % 4 || p.k % 4 || A.ld % 4 || B.ld % 4 || C.ld % 4 || D.ld % 4;
    }
    return CUBLAS_STATUS_SUCCESS;
}

// Stores v as an element of type t, rounded once.
template <class R>
void store(std::uint32_t t, void* base, std::int64_t i, R v) {
    switch (t) {
        case CUDA_R_16F: static_cast<__half*>(base)[i] = __float2half_rn(float(v)); break;
        case CUDA_R_16BF: static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(float(v)); break;
        case CUDA_R_32F: static_cast<float*>(base)[i] = float(v); break;
        case CUDA_R_64F: static_cast<double*>(base)[i] = double(v); break;
        case CUDA_R_8F_E4M3: static_cast<__nv_fp8_e4m3*>(base)[i] = __nv_fp8_e4m3(float(v)); break;  // saturating
        case CUDA_R_8F_E5M2: static_cast<__nv_fp8_e5m2*>(base)[i] = __nv_fp8_e5m2(float(v)); break;
        case CUDA_R_8I: {  // cvt.rni.sat: to nearest even, saturated, NaN to 0
            const double r = std::isnan(double(v)) ? 0.0 : std::clamp(std::nearbyint(double(v)), -128.0, 127.0);
            static_cast<std::int8_t*>(base)[i] = std::int8_t(r);
            break;
        }
        default: break;
    }
}

// The epilogue on one value in the scale type R. GELU is the tanh approximation
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): the cuBLASLt documentation names only "GELU",
// and PyTorch, which uses CUBLASLT_EPILOGUE_GELU_BIAS for _addmm_activation(use_gelu=True), applies
// at::gelu_(result, "tanh") on the path where that epilogue is unavailable (aten/src/ATen/native/cuda/
// Blas.cpp, addmm_out_cuda_impl). RELU is x > 0 ? x : 0, which maps NaN to 0, as cuBLASLt is
// reported to (NVIDIA developer forum).
template <class R>
R activate(std::uint32_t epilogue, R x) {
    if (epilogue & CUBLASLT_EPILOGUE_RELU) return x > R(0) ? x : R(0);
    if (epilogue & CUBLASLT_EPILOGUE_GELU) {
        const R c = R(0.7978845608028654), u = c * (x + R(0.044715) * x * x * x);
        return R(0.5) * x * (R(1) + std::tanh(u));
    }
    return x;
}

struct Run {
    Problem p;
    const void* ptr[4];  // A, B, C, D
    double alpha = 1, beta = 0;
};

// Runs the queued product: D = scale_D * epilogue(alpha scale_A scale_B op(A) op(B) + beta C + bias).
template <class R>
void run(const Run& r) {
    const Problem& p = r.p;
    // Batch entry z of operand i; a null operand (C when beta is 0, A and B when k is 0) stays null.
    const auto at = [&](int i, int z) -> const char* {
        if (!r.ptr[i]) return nullptr;
        return static_cast<const char*>(r.ptr[i]) + p.l[i].stride * z * std::int64_t(type_bytes(cudaDataType(p.l[i].type)));
    };
    const auto scale = [&](int i) { return p.d.scales[i] ? R(*static_cast<const float*>(p.d.scales[i])) : R(1); };
    const R alpha = R(r.alpha) * scale(0) * scale(1), beta = R(r.beta), d_scale = scale(3);
    const bool wrap = p.d.compute == CUBLAS_COMPUTE_32I && p.l[3].type == CUDA_R_32I;
    const std::uint32_t bias_type =
        p.d.bias_type != -1 ? std::uint32_t(p.d.bias_type) : default_bias_type(p.l[0].type, p.l[2].type, p.l[3].type);
    for (int z = 0; z < p.batch; ++z) {
        const Operand a{cudaDataType(p.l[0].type), at(0, z), int(p.l[0].ld), p.ta},
            b{cudaDataType(p.l[1].type), at(1, z), int(p.l[1].ld), p.tb};
        const std::vector<double> acc = cublas::detail::product(p.m, p.n, p.k, a, b, cublasComputeType_t(p.d.compute));
        const void* c = at(2, z);
        void* d = const_cast<char*>(at(3, z));
        const char* bias = has_bias(p.d.epilogue) ? static_cast<const char*>(p.d.bias) +
                                                        p.d.bias_batch_stride * z * std::int64_t(type_bytes(cudaDataType(bias_type)))
                                                  : nullptr;
        for (int j = 0; j < p.n; ++j)
            for (int i = 0; i < p.m; ++i) {
                const double sum = acc[std::size_t(i) + std::size_t(j) * std::size_t(p.m)];
                const std::int64_t ci = i + std::int64_t(j) * p.l[2].ld, di = i + std::int64_t(j) * p.l[3].ld;
                if (wrap) {  // int32 scale and output: alpha * sum + beta * C in int32, wrapping
                    const std::int64_t prior = r.beta != 0 ? std::int64_t(load(CUDA_R_32I, c, ci)) : 0;
                    static_cast<std::int32_t*>(d)[di] =
                        std::int32_t(std::uint32_t(std::int64_t(r.alpha) * std::int64_t(sum) + std::int64_t(r.beta) * prior));
                    continue;
                }
                R v = alpha * R(sum);
                if (r.beta != 0) v += beta * R(load(cudaDataType(p.l[2].type), c, ci));  // beta == 0: C is not read
                if (has_bias(p.d.epilogue)) v += R(load(cudaDataType(bias_type), bias, i));
                store(p.l[3].type, d, di, activate(p.d.epilogue, v) * d_scale);
            }
    }
}
}  // namespace detail

TESSEL_API cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
    if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
    int count = 0, device = 0;
    if (api::cudaGetDeviceCount(&count) != cudaSuccess || count == 0 || api::cudaGetDevice(&device) != cudaSuccess)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    auto* h = new cublasLtContext{device};
    if (api::cudaDeviceGetAttribute(&h->major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        api::cudaDeviceGetAttribute(&h->minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
        delete h;
        return CUBLAS_STATUS_NOT_INITIALIZED;
    }
    detail::handles.fetch_add(1, std::memory_order_relaxed);
    *handle = h;
    return CUBLAS_STATUS_SUCCESS;
}
TESSEL_API cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}
TESSEL_API const char* cublasLtGetStatusName(cublasStatus_t status) { return cublas::cublasGetStatusName(status); }

TESSEL_API cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute, cudaDataType_t scale) {
    if (!desc) return CUBLAS_STATUS_INVALID_VALUE;
    detail::DescState s;
    s.compute = compute, s.scale = scale;
    *desc = detail::make<detail::DescState, cublasLtMatmulDescOpaque_t>(s);
    return CUBLAS_STATUS_SUCCESS;
}
TESSEL_API cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
    delete desc;
    return CUBLAS_STATUS_SUCCESS;
}
TESSEL_API cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const void* buf,
                                                         std::size_t bytes) {
    return detail::set(detail::state<detail::DescState>(desc), attr, buf, bytes);
}
TESSEL_API cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, void* buf,
                                                         std::size_t bytes, std::size_t* written) {
    detail::DescState* s = detail::state<detail::DescState>(desc);
    if (!s) return CUBLAS_STATUS_INVALID_VALUE;
    const auto [p, size] = detail::field(*s, attr);
    if (!p) return CUBLAS_STATUS_NOT_SUPPORTED;
    // "INVALID_VALUE if sizeInBytes is 0 and sizeWritten is NULL, or if sizeInBytes is non-zero and
    // buf is NULL or sizeInBytes doesn't match"; with sizeInBytes 0, the size needed is written.
    if (bytes == 0) {
        if (!written) return CUBLAS_STATUS_INVALID_VALUE;
        *written = size;
        return CUBLAS_STATUS_SUCCESS;
    }
    if (!buf || bytes != size) return CUBLAS_STATUS_INVALID_VALUE;
    std::memcpy(buf, p, size);
    if (written) *written = size;
    return CUBLAS_STATUS_SUCCESS;
}

TESSEL_API cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, std::uint64_t rows,
                                                     std::uint64_t cols, std::int64_t ld) {
    if (!layout) return CUBLAS_STATUS_INVALID_VALUE;
    detail::LayoutState s;
    s.type = std::uint32_t(type), s.rows = rows, s.cols = cols, s.ld = ld;
    *layout = detail::make<detail::LayoutState, cublasLtMatrixLayoutOpaque_t>(s);
    return CUBLAS_STATUS_SUCCESS;
}
TESSEL_API cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
    delete layout;
    return CUBLAS_STATUS_SUCCESS;
}
TESSEL_API cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr,
                                                           const void* buf, std::size_t bytes) {
    return detail::set(detail::state<detail::LayoutState>(layout), attr, buf, bytes);
}

TESSEL_API cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
    if (!pref) return CUBLAS_STATUS_INVALID_VALUE;
    *pref = detail::make<detail::PrefState, cublasLtMatmulPreferenceOpaque_t>(detail::PrefState{});
    return CUBLAS_STATUS_SUCCESS;
}
TESSEL_API cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
    delete pref;
    return CUBLAS_STATUS_SUCCESS;
}
TESSEL_API cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
                                                               const void* buf, std::size_t bytes) {
    return detail::set(detail::state<detail::PrefState>(pref), attr, buf, bytes);
}

TESSEL_API cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t Adesc,
                                                         cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc,
                                                         cublasLtMatrixLayout_t Ddesc, cublasLtMatmulPreference_t pref, int requested,
                                                         cublasLtMatmulHeuristicResult_t results[], int* returned) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    const detail::PrefState* prefs = detail::state<detail::PrefState>(pref);
    if (requested <= 0 || !results || !returned || !prefs) return CUBLAS_STATUS_INVALID_VALUE;
    detail::heuristics.fetch_add(1, std::memory_order_relaxed);
    handle->last_reduction_scheme_mask = prefs->reduction_scheme_mask;
    detail::Problem p;
    if (const cublasStatus_t s = detail::describe(*handle, desc, {Adesc, Bdesc, Cdesc, Ddesc}, p); s != CUBLAS_STATUS_SUCCESS) return s;
    *returned = 0;
    // No kernel for these dimensions, or for pointers as little aligned as the preference allows.
    for (int i = 0; i < 4; ++i) p.no_kernel |= prefs->align[i] < p.need_align[i];
    if (p.no_kernel) return CUBLAS_STATUS_SUCCESS;
    detail::AlgoState algo;
    std::copy(std::begin(prefs->align), std::end(prefs->align), algo.align);
    // "Routines that don't dereference this pointer, like cublasLtMatmulAlgoGetHeuristic(), depend
    // on its value to determine expected pointer alignment."
    algo.bias_align = detail::alignment(p.d.bias, 0, 1);
    // Two algorithms, best first, as the library returns several: they compute the same product, so
    // a caller that times the heuristic's results (matmul's autotune) runs its loop here too.
    *returned = std::min(requested, 2);
    for (int i = 0; i < *returned; ++i) {
        algo.index = std::uint32_t(i);
        results[i] = cublasLtMatmulHeuristicResult_t{};
        new (static_cast<void*>(results[i].algo.data)) detail::AlgoState(algo);
        results[i].workspaceSize = 0;
        results[i].state = CUBLAS_STATUS_SUCCESS;
        results[i].wavesCount = 1.f;
    }
    return CUBLAS_STATUS_SUCCESS;
}

TESSEL_API cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                                         cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc, const void* beta,
                                         const void* C, cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc,
                                         const cublasLtMatmulAlgo_t* algo, void* workspace, std::size_t workspace_bytes,
                                         cudaStream_t stream) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    detail::Run r;
    detail::Problem& p = r.p;
    if (const cublasStatus_t s = detail::describe(*handle, desc, {Adesc, Bdesc, Cdesc, Ddesc}, p); s != CUBLAS_STATUS_SUCCESS) return s;
    if (p.no_kernel) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (!alpha || !beta || (workspace_bytes > 0 && !workspace)) return CUBLAS_STATUS_INVALID_VALUE;
    r.ptr[0] = A, r.ptr[1] = B, r.ptr[2] = C, r.ptr[3] = D;
    // alpha and beta in host memory, of the scale type, read now.
    if (p.d.scale == CUDA_R_64F)
        r.alpha = *static_cast<const double*>(alpha), r.beta = *static_cast<const double*>(beta);
    else if (p.d.scale == CUDA_R_32I)
        r.alpha = *static_cast<const std::int32_t*>(alpha), r.beta = *static_cast<const std::int32_t*>(beta);
    else
        r.alpha = *static_cast<const float*>(alpha), r.beta = *static_cast<const float*>(beta);
    const bool work = p.m > 0 && p.n > 0;
    if (work && ((p.k > 0 && (!A || !B)) || !D || (r.beta != 0 && !C) || (detail::has_bias(p.d.epilogue) && !p.d.bias)))
        return CUBLAS_STATUS_INVALID_VALUE;
    // A scale "set for an unsupported matrix data ... combination" is INVALID_VALUE: only fp8
    // matrices take one (CUDA 13 refuses a D scale on a non-fp8 D that CUDA 12 ignored).
    for (int i = 0; i < 4; ++i)
        if (p.d.scales[i] && !detail::is_fp8(p.l[i].type)) return CUBLAS_STATUS_INVALID_VALUE;
    // The algorithm serves pointers at least as aligned as it was chosen for; without one, cuBLASLt
    // chooses for these pointers.
    detail::AlgoState chosen;
    for (int i = 0; i < 4; ++i)
        chosen.align[i] = detail::alignment(r.ptr[i], p.l[i].stride * std::int64_t(detail::type_bytes(cudaDataType(p.l[i].type))), p.batch);
    chosen.bias_align = detail::alignment(p.d.bias, 0, 1);
    if (algo) {
        const detail::AlgoState* a = detail::state<detail::AlgoState>(algo);
        if (!a) return CUBLAS_STATUS_INVALID_VALUE;
        for (int i = 0; i < 4; ++i)
            if (chosen.align[i] < std::max<std::uint32_t>(a->align[i], 1)) return CUBLAS_STATUS_INVALID_VALUE;
        if (chosen.bias_align < a->bias_align) return CUBLAS_STATUS_INVALID_VALUE;
    } else {
        for (int i = 0; i < 4; ++i)
            if (chosen.align[i] < p.need_align[i]) return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    handle->last_workspace_bytes = workspace_bytes;
    if (!work) return CUBLAS_STATUS_SUCCESS;
    detail::matmuls.fetch_add(1, std::memory_order_relaxed);
    const bool wide = p.d.scale == CUDA_R_64F;
    const cudaError_t queued = api::enqueue_host_work(
        stream, [r, wide] { wide ? detail::run<double>(r) : detail::run<float>(r); }, "cublasLtMatmul (sim stand-in)", handle->device);
    return queued == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

TESSEL_API std::uint64_t matmul_calls() { return detail::matmuls.load(std::memory_order_relaxed); }
TESSEL_API std::uint64_t heuristic_calls() { return detail::heuristics.load(std::memory_order_relaxed); }
TESSEL_API std::uint64_t handles_created() { return detail::handles.load(std::memory_order_relaxed); }
TESSEL_API std::size_t workspace_bytes(cublasLtHandle_t handle) { return handle ? handle->last_workspace_bytes : 0; }
TESSEL_API std::uint32_t reduction_scheme_mask(cublasLtHandle_t handle) { return handle ? handle->last_reduction_scheme_mask : 0; }

}  // namespace tessel::sim::cublaslt
#endif  // TESSEL_DEFINE_RUNTIME
