// cuBLAS for the CUDA backend: status checking that throws LibraryError with the status name, and an
// owning handle bound to a stream. (The sim has no cuBLAS: code using this is CUDA-only.)
#pragma once

#include "../core/backend.hpp"

#if defined(TESSEL_BACKEND_CUDA)
#include <cublas_v2.h>

#include <source_location>

#include "../core/error.hpp"
#include "../runtime/rt.hpp"

namespace tessel::cublas {

inline void check(cublasStatus_t status, const char* expression, std::source_location where = std::source_location::current()) {
    if (status != CUBLAS_STATUS_SUCCESS) throw LibraryError("cuBLAS", int(status), cublasGetStatusName(status), expression, where);
}

// An owning cuBLAS handle whose work goes to one stream.
class Handle {
public:
    explicit Handle(rt::stream_t stream = nullptr) {
        check(cublasCreate(&h_), "cublasCreate");
        check(cublasSetStream(h_, stream), "cublasSetStream");
    }
    ~Handle() { (void)cublasDestroy(h_); }
    Handle(const Handle&) = delete;
    Handle& operator=(const Handle&) = delete;
    cublasHandle_t get() const { return h_; }

private:
    cublasHandle_t h_ = nullptr;
};

}  // namespace tessel::cublas

// Checks a cuBLAS call and throws tessel::LibraryError naming the status and the call.
#define TESSEL_CUBLAS_CHECK(expr) ::tessel::cublas::check((expr), #expr)
#endif
