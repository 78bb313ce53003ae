// The sim's stand-in for the cuBLAS entry points tessel calls, with cuBLAS's documented semantics:
// column-major operands, transa/transb, m/n/k, leading dimensions, strided batches, host-side
// alpha/beta, the same status codes for the same bad arguments, and work queued on the handle's
// stream (so it is ordered with kernels and events like the real library's). fp32 and fp64 products
// run through OpenBLAS when the build found it (TESSEL_SIM_HAS_OPENBLAS), 16-bit inputs are widened
// to fp32 and the result rounded once, int8 accumulates in int32 as cuBLAS's IMMA path does. It
// exists so that tessel's own side of a library call (argument mapping, dispatch, errors) runs in
// CI: the numbers it produces are the reference's, not cuBLAS's algorithms.
#pragma once

#include <cublas_api.h>  // types and status codes only: the sim never links cuBLAS

#include <cstddef>
#include <cstdint>

#include "../core/linkage.hpp"

// The handle's state (cuBLAS keeps it opaque behind cublasHandle_t).
struct cublasContext {
    int device = 0;
    cudaStream_t stream = nullptr;
    void* workspace = nullptr;
    std::size_t workspace_bytes = 0;
    bool own_pool = true;  // cuBLAS's own workspace (its cudaMalloc), until cublasSetWorkspace
    cublasMath_t math = CUBLAS_DEFAULT_MATH;
};

namespace tessel::sim::cublas {

TESSEL_API cublasStatus_t cublasCreate_v2(cublasHandle_t* handle);
TESSEL_API cublasStatus_t cublasDestroy_v2(cublasHandle_t handle);
TESSEL_API cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream);
TESSEL_API cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t* stream);
TESSEL_API cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace, std::size_t bytes);
TESSEL_API cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode);
TESSEL_API cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t* mode);
TESSEL_API const char* cublasGetStatusName(cublasStatus_t status);
TESSEL_API cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                                     int m, int n, int k, const void* alpha, const void* A, cudaDataType Atype,
                                                     int lda, long long strideA, const void* B, cudaDataType Btype, int ldb,
                                                     long long strideB, const void* beta, void* C, cudaDataType Ctype, int ldc,
                                                     long long strideC, int batchCount, cublasComputeType_t computeType,
                                                     cublasGemmAlgo_t algo);
// Products the stand-in has queued since the program started (tests check which path a call took).
TESSEL_API std::uint64_t gemm_calls();
// The workspace the handle last ran with (tests check the per-stream workspace reached the library).
TESSEL_API std::size_t workspace_bytes(cublasHandle_t handle);
// Whether the handle would run with cuBLAS's own pool (memory outside the caching allocator): after
// cublasSetStream, until cublasSetWorkspace.
TESSEL_API bool uses_own_pool(cublasHandle_t handle);

}  // namespace tessel::sim::cublas

#if TESSEL_DEFINE_RUNTIME
#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "../lib/data_type.hpp"
#include "runtime.hpp"
#include "warp_matrix.hpp"  // f16/bf16 widening, cvt.rna.tf32

#if defined(TESSEL_SIM_HAS_OPENBLAS)
#include <cblas.h>
extern "C" void openblas_set_num_threads(int);
#endif

namespace tessel::sim::cublas {

namespace detail {
inline std::atomic<std::uint64_t>& gemm_count() {
    static std::atomic<std::uint64_t> n{0};
    return n;
}

// One stored element of a supported type, widened.
inline double load(cudaDataType t, const void* base, std::int64_t i) {
    switch (t) {
        case CUDA_R_16F: return warp::f16_bits_to_float(static_cast<const std::uint16_t*>(base)[i]);
        case CUDA_R_16BF: return warp::bf16_bits_to_float(static_cast<const std::uint16_t*>(base)[i]);
        case CUDA_R_32F: return static_cast<const float*>(base)[i];
        case CUDA_R_64F: return static_cast<const double*>(base)[i];
        case CUDA_R_8I: return static_cast<const std::int8_t*>(base)[i];
        case CUDA_R_32I: return static_cast<const std::int32_t*>(base)[i];
        case CUDA_R_8F_E4M3: return float(static_cast<const __nv_fp8_e4m3*>(base)[i]);  // cuBLASLt's fp8 inputs
        case CUDA_R_8F_E5M2: return float(static_cast<const __nv_fp8_e5m2*>(base)[i]);
        default: return 0;
    }
}
inline void store(cudaDataType t, void* base, std::int64_t i, double v) {
    switch (t) {
        case CUDA_R_16F: static_cast<__half*>(base)[i] = __float2half(float(v)); break;
        case CUDA_R_16BF: static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16(float(v)); break;
        case CUDA_R_32F: static_cast<float*>(base)[i] = float(v); break;
        case CUDA_R_64F: static_cast<double*>(base)[i] = v; break;
        case CUDA_R_32I: static_cast<std::int32_t*>(base)[i] = std::int32_t(std::int64_t(v)); break;
        default: break;
    }
}
inline std::size_t type_bytes(cudaDataType t) { return data_type_bytes(t); }

// The type combinations of cublasGemmEx's table that tessel uses (compute type, A/B type, C type).
inline bool supported(cublasComputeType_t compute, cudaDataType ab, cudaDataType c) {
    switch (compute) {
        case CUBLAS_COMPUTE_32F:
            return (ab == CUDA_R_32F && c == CUDA_R_32F) || ((ab == CUDA_R_16F || ab == CUDA_R_16BF) && (c == ab || c == CUDA_R_32F));
        case CUBLAS_COMPUTE_32F_FAST_TF32: return ab == CUDA_R_32F && c == CUDA_R_32F;
        case CUBLAS_COMPUTE_64F: return ab == CUDA_R_64F && c == CUDA_R_64F;
        case CUBLAS_COMPUTE_32I: return ab == CUDA_R_8I && c == CUDA_R_32I;
        default: return false;
    }
}

// op(X) of a column-major stored matrix as a packed column-major double-free copy of `rows` x `cols`.
struct Operand {
    cudaDataType type;
    const void* base;
    int ld;
    bool trans;
    std::int64_t at(std::int64_t r, std::int64_t c) const { return trans ? c + r * ld : r + c * std::int64_t(ld); }
};

// C = alpha * op(A) op(B) + beta * C for one batch entry, column-major, all in double (int8: exact
// in int64, wrapped to int32). The fallback without OpenBLAS and the path for every type it lacks.
inline void gemm_loops(int m, int n, int k, double alpha, const Operand& a, const Operand& b, double beta, cudaDataType ct,
                       void* c, int ldc, bool integer) {
    for (int j = 0; j < n; ++j)
        for (int i = 0; i < m; ++i) {
            const std::int64_t ci = i + std::int64_t(j) * ldc;
            if (integer) {
                std::int64_t s = 0;
                for (int p = 0; p < k; ++p) s += std::int64_t(load(a.type, a.base, a.at(i, p))) * std::int64_t(load(b.type, b.base, b.at(p, j)));
                const std::int64_t prior = beta != 0 ? std::int64_t(load(ct, c, ci)) : 0;
                store(ct, c, ci, double(std::int32_t(std::uint32_t(std::int64_t(alpha) * s + std::int64_t(beta) * prior))));
                continue;
            }
            double s = 0;
            for (int p = 0; p < k; ++p) s += load(a.type, a.base, a.at(i, p)) * load(b.type, b.base, b.at(p, j));
            store(ct, c, ci, beta != 0 ? alpha * s + beta * load(ct, c, ci) : alpha * s);
        }
}

#if defined(TESSEL_SIM_HAS_OPENBLAS)
// op(X) widened to a packed fp32 matrix (rows x cols of op(X), column-major), tf32-rounded on request.
inline std::vector<float> widen(const Operand& x, int rows, int cols, bool tf32) {
    std::vector<float> out(std::size_t(rows) * std::size_t(cols));
    for (int c = 0; c < cols; ++c)
        for (int r = 0; r < rows; ++r) {
            float v = float(load(x.type, x.base, x.at(r, c)));
            if (tf32) v = std::bit_cast<float>(warp::cvt_rna_tf32(v));
            out[std::size_t(r) + std::size_t(c) * rows] = v;
        }
    return out;
}
#endif

inline void gemm_one(int m, int n, int k, double alpha, const Operand& a, const Operand& b, double beta, cudaDataType ct, void* c,
                     int ldc, cublasComputeType_t compute) {
    if (beta == 0)  // cuBLAS: with beta == 0, C need not hold valid values (NaN there must not show)
        for (int j = 0; j < n; ++j)
            for (int i = 0; i < m; ++i) store(ct, c, i + std::int64_t(j) * ldc, 0.0);
    if (k == 0 || alpha == 0) {  // C = beta * C
        if (beta != 0 && beta != 1)
            for (int j = 0; j < n; ++j)
                for (int i = 0; i < m; ++i) store(ct, c, i + std::int64_t(j) * ldc, beta * load(ct, c, i + std::int64_t(j) * ldc));
        return;
    }
#if defined(TESSEL_SIM_HAS_OPENBLAS)
    static const bool one_thread = [] {
        openblas_set_num_threads(1);  // the sim's stream and block workers are the parallelism
        return true;
    }();
    (void)one_thread;
    const auto ta = a.trans ? CblasTrans : CblasNoTrans, tb = b.trans ? CblasTrans : CblasNoTrans;
    if (compute == CUBLAS_COMPUTE_64F) {
        cblas_dgemm(CblasColMajor, ta, tb, m, n, k, alpha, static_cast<const double*>(a.base), a.ld, static_cast<const double*>(b.base),
                    b.ld, beta, static_cast<double*>(c), ldc);
        return;
    }
    if (compute == CUBLAS_COMPUTE_32F && a.type == CUDA_R_32F && ct == CUDA_R_32F) {
        cblas_sgemm(CblasColMajor, ta, tb, m, n, k, float(alpha), static_cast<const float*>(a.base), a.ld,
                    static_cast<const float*>(b.base), b.ld, float(beta), static_cast<float*>(c), ldc);
        return;
    }
    if (compute == CUBLAS_COMPUTE_32F || compute == CUBLAS_COMPUTE_32F_FAST_TF32) {
        // 16-bit inputs (or tf32-rounded fp32) widened to fp32, multiplied in fp32, C rounded once.
        const bool tf32 = compute == CUBLAS_COMPUTE_32F_FAST_TF32;
        const auto fa = widen(a, m, k, tf32), fb = widen(b, k, n, tf32);
        std::vector<float> fc(std::size_t(m) * std::size_t(n));
        if (beta != 0)
            for (int j = 0; j < n; ++j)
                for (int i = 0; i < m; ++i) fc[std::size_t(i) + std::size_t(j) * m] = float(load(ct, c, i + std::int64_t(j) * ldc));
        cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, m, n, k, float(alpha), fa.data(), m, fb.data(), k, float(beta),
                    fc.data(), m);
        for (int j = 0; j < n; ++j)
            for (int i = 0; i < m; ++i) store(ct, c, i + std::int64_t(j) * ldc, fc[std::size_t(i) + std::size_t(j) * m]);
        return;
    }
#endif
    gemm_loops(m, n, k, alpha, a, b, beta, ct, c, ldc, compute == CUBLAS_COMPUTE_32I);
}

// op(A) op(B) alone, for one batch entry, as a packed column-major m x n matrix: the accumulator
// before any scaling (sim/cublaslt.hpp applies alpha, beta and its epilogue to it). The 32F compute
// types sum in fp32 (through OpenBLAS where present, 16-bit and fp8 inputs widened exactly, tf32
// rounded for FAST_TF32), 64F in fp64, 32I exactly and wrapped to int32 as the IMMA kernels do.
inline std::vector<double> product(int m, int n, int k, const Operand& a, const Operand& b, cublasComputeType_t compute) {
    std::vector<double> out(std::size_t(m) * std::size_t(n), 0.0);
    if (k == 0) return out;
#if defined(TESSEL_SIM_HAS_OPENBLAS)
    if (compute == CUBLAS_COMPUTE_32F || compute == CUBLAS_COMPUTE_32F_FAST_TF32) {
        static const bool one_thread = [] {
            openblas_set_num_threads(1);  // the sim's stream and block workers are the parallelism
            return true;
        }();
        (void)one_thread;
        const bool tf32 = compute == CUBLAS_COMPUTE_32F_FAST_TF32;
        const auto fa = widen(a, m, k, tf32), fb = widen(b, k, n, tf32);
        std::vector<float> fc(out.size());
        cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.f, fa.data(), m, fb.data(), k, 0.f, fc.data(), m);
        std::copy(fc.begin(), fc.end(), out.begin());
        return out;
    }
#endif
    const bool integer = compute == CUBLAS_COMPUTE_32I, single = compute != CUBLAS_COMPUTE_64F && !integer;
    const bool tf32 = compute == CUBLAS_COMPUTE_32F_FAST_TF32;
    const auto in = [&](const Operand& x, std::int64_t r, std::int64_t c) {
        const double v = load(x.type, x.base, x.at(r, c));
        return tf32 ? double(std::bit_cast<float>(warp::cvt_rna_tf32(float(v)))) : v;
    };
    for (int j = 0; j < n; ++j)
        for (int i = 0; i < m; ++i) {
            double s = 0;
            float f = 0;
            std::int64_t z = 0;
            for (int p = 0; p < k; ++p) {
                if (integer) z += std::int64_t(in(a, i, p)) * std::int64_t(in(b, p, j));
                else if (single) f = std::fma(float(in(a, i, p)), float(in(b, p, j)), f);
                else s += in(a, i, p) * in(b, p, j);
            }
            const double sum = integer ? double(std::int32_t(std::uint32_t(z))) : single ? double(f) : s;
            out[std::size_t(i) + std::size_t(j) * std::size_t(m)] = sum;
        }
    return out;
}

inline bool valid(cublasHandle_t h) { return h != nullptr; }
}  // namespace detail

TESSEL_API cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
    if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
    int count = 0, device = 0;
    if (api::cudaGetDeviceCount(&count) != cudaSuccess || count == 0 || api::cudaGetDevice(&device) != cudaSuccess)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    *handle = new cublasContext{device};
    return CUBLAS_STATUS_SUCCESS;
}
TESSEL_API cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}
TESSEL_API cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->stream = stream;
    // cuBLAS drops a workspace set by cublasSetWorkspace when the stream changes (it goes back to
    // its own pool until the next cublasSetWorkspace).
    handle->workspace = nullptr;
    handle->workspace_bytes = 0;
    handle->own_pool = true;
    return CUBLAS_STATUS_SUCCESS;
}
TESSEL_API cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t* stream) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!stream) return CUBLAS_STATUS_INVALID_VALUE;
    *stream = handle->stream;
    return CUBLAS_STATUS_SUCCESS;
}
TESSEL_API cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace, std::size_t bytes) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (bytes > 0 && !workspace) return CUBLAS_STATUS_INVALID_VALUE;
    if (reinterpret_cast<std::uintptr_t>(workspace) % 256 != 0) return CUBLAS_STATUS_INVALID_VALUE;  // documented alignment
    handle->workspace = workspace;
    handle->workspace_bytes = bytes;
    handle->own_pool = false;  // (nullptr, 0) too: no workspace at all
    return CUBLAS_STATUS_SUCCESS;
}
TESSEL_API cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->math = mode;
    return CUBLAS_STATUS_SUCCESS;
}
TESSEL_API cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t* mode) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
    *mode = handle->math;
    return CUBLAS_STATUS_SUCCESS;
}
TESSEL_API const char* cublasGetStatusName(cublasStatus_t status) {
    switch (status) {
        case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
        case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
        case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
        case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
        case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
        case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
        case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
        case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
        case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
        case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}

TESSEL_API cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                                     int m, int n, int k, const void* alpha, const void* A, cudaDataType Atype,
                                                     int lda, long long strideA, const void* B, cudaDataType Btype, int ldb,
                                                     long long strideB, const void* beta, void* C, cudaDataType Ctype, int ldc,
                                                     long long strideC, int batchCount, cublasComputeType_t computeType,
                                                     cublasGemmAlgo_t /*algo*/) {
    if (!detail::valid(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    const bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
    // cuBLAS's argument checks (cublas<t>gemm: "the parameters m, n, k < 0", "lda < max(1, m) if
    // transa == CUBLAS_OP_N and lda < max(1, k) otherwise", ..., "ldc < max(1, m)").
    if (m < 0 || n < 0 || k < 0 || batchCount < 0) return CUBLAS_STATUS_INVALID_VALUE;
    if ((transa != CUBLAS_OP_N && transa != CUBLAS_OP_T && transa != CUBLAS_OP_C) ||
        (transb != CUBLAS_OP_N && transb != CUBLAS_OP_T && transb != CUBLAS_OP_C))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (lda < std::max(1, ta ? k : m) || ldb < std::max(1, tb ? n : k) || ldc < std::max(1, m)) return CUBLAS_STATUS_INVALID_VALUE;
    if (Atype != Btype || !detail::supported(computeType, Atype, Ctype)) return CUBLAS_STATUS_NOT_SUPPORTED;
    // cublasGemmEx's int8 path: "A, B being 32-bit aligned; and lda, ldb being multiples of 4"
    // (every batch's A and B, so the batch strides too); cuBLAS reports the leading dimension as an
    // illegal value. tessel packs int8 operands in rows of whole 16-byte chunks.
    if (computeType == CUBLAS_COMPUTE_32I &&
        (lda % 4 != 0 || ldb % 4 != 0 || reinterpret_cast<std::uintptr_t>(A) % 4 != 0 || reinterpret_cast<std::uintptr_t>(B) % 4 != 0 ||
         (batchCount > 1 && (strideA % 4 != 0 || strideB % 4 != 0))))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (!alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
    if (m == 0 || n == 0 || batchCount == 0) return CUBLAS_STATUS_SUCCESS;
    // Host pointer mode: alpha and beta are read now, in the compute type's scale type.
    double al = 0, be = 0;
    if (computeType == CUBLAS_COMPUTE_64F) al = *static_cast<const double*>(alpha), be = *static_cast<const double*>(beta);
    else if (computeType == CUBLAS_COMPUTE_32I) al = *static_cast<const std::int32_t*>(alpha), be = *static_cast<const std::int32_t*>(beta);
    else al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
    const std::size_t ab = detail::type_bytes(Atype), cb = detail::type_bytes(Ctype);
    detail::gemm_count().fetch_add(1, std::memory_order_relaxed);
    cudaStream_t stream = handle->stream;
    const cudaError_t queued = api::enqueue_host_work(stream, [=] {
        for (int i = 0; i < batchCount; ++i) {
            const detail::Operand a{Atype, static_cast<const char*>(A) + std::ptrdiff_t(strideA) * std::ptrdiff_t(i) * std::ptrdiff_t(ab), lda, ta};
            const detail::Operand b{Btype, static_cast<const char*>(B) + std::ptrdiff_t(strideB) * std::ptrdiff_t(i) * std::ptrdiff_t(ab), ldb, tb};
            void* c = static_cast<char*>(C) + std::ptrdiff_t(strideC) * std::ptrdiff_t(i) * std::ptrdiff_t(cb);
            detail::gemm_one(m, n, k, al, a, b, be, Ctype, c, ldc, computeType);
        }
    }, "cublasGemmStridedBatchedEx (sim stand-in)", handle->device);
    return queued == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

TESSEL_API std::uint64_t gemm_calls() { return detail::gemm_count().load(std::memory_order_relaxed); }
TESSEL_API std::size_t workspace_bytes(cublasHandle_t handle) { return handle ? handle->workspace_bytes : 0; }
TESSEL_API bool uses_own_pool(cublasHandle_t handle) { return handle && handle->own_pool; }

}  // namespace tessel::sim::cublas
#endif  // TESSEL_DEFINE_RUNTIME
