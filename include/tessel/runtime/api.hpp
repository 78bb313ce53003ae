// tessel::rt::api names the CUDA runtime of this build: the real one (tessel::cuda) or the sim's
// (tessel::sim), with identical spellings, so every call above this layer is written once.
// Everything that talks to either goes through rt/ and the TESSEL_CUDA_CHECK macro below.
#pragma once

#include "../core/backend.hpp"
#include "../core/error.hpp"

#if defined(TESSEL_BACKEND_CUDA)
#include <cuda_runtime.h>
#else
#include "../sim/runtime.hpp"
#endif

#include <source_location>
#include <string>

namespace tessel::rt {

namespace api {
#if defined(TESSEL_BACKEND_CUDA)
using ::cudaDeviceCanAccessPeer;
using ::cudaDeviceDisablePeerAccess;
using ::cudaDeviceEnablePeerAccess;
using ::cudaDeviceGetAttribute;
using ::cudaDeviceGetDefaultMemPool;
using ::cudaDeviceGetPCIBusId;
using ::cudaDeviceGetStreamPriorityRange;
using ::cudaDeviceSynchronize;
using ::cudaDriverGetVersion;
using ::cudaEventCreateWithFlags;
using ::cudaEventDestroy;
using ::cudaEventElapsedTime;
using ::cudaEventQuery;
using ::cudaEventRecord;
using ::cudaEventSynchronize;
using ::cudaFree;
using ::cudaFreeAsync;
using ::cudaFreeHost;
using ::cudaFuncSetAttribute;
using ::cudaGetDevice;
using ::cudaGetDeviceCount;
using ::cudaGetDeviceProperties;
using ::cudaGetErrorName;
using ::cudaGetErrorString;
using ::cudaGetLastError;
using ::cudaHostAlloc;
using ::cudaMalloc;
using ::cudaMallocAsync;
using ::cudaMallocFromPoolAsync;
using ::cudaMallocHost;
using ::cudaMallocManaged;
using ::cudaMemAdvise;
using ::cudaMemPrefetchAsync;
using ::cudaMemcpy;
using ::cudaMemcpyAsync;
using ::cudaMemcpyPeerAsync;
using ::cudaMemGetInfo;
using ::cudaMemPoolGetAccess;
using ::cudaMemPoolGetAttribute;
using ::cudaMemPoolSetAccess;
using ::cudaMemPoolSetAttribute;
using ::cudaMemPoolTrimTo;
using ::cudaMemset;
using ::cudaMemsetAsync;
using ::cudaPeekAtLastError;
using ::cudaPointerGetAttributes;
using ::cudaRuntimeGetVersion;
using ::cudaSetDevice;
using ::cudaStreamCreateWithPriority;
using ::cudaStreamDestroy;
using ::cudaStreamGetDevice;
using ::cudaStreamGetPriority;
using ::cudaStreamQuery;
using ::cudaStreamSynchronize;
using ::cudaStreamWaitEvent;
// The real runtime explains an error by its code alone.
inline std::string last_error_detail() { return {}; }
#else
using namespace ::tessel::sim::api;
#endif
}  // namespace api

// The handle types, shared by both backends (the sim defines CUstream_st and CUevent_st).
using stream_t = cudaStream_t;
using event_t = cudaEvent_t;

// Throws the matching tessel exception for a failed runtime call; clears the runtime's last error.
inline void check(cudaError_t status, const char* expression,
                  std::source_location where = std::source_location::current()) {
    if (status == cudaSuccess) return;
    (void)api::cudaGetLastError();
    std::string message = api::cudaGetErrorString(status);
    if (std::string detail = api::last_error_detail(); !detail.empty()) message += ": " + detail;
    throw CudaError(int(status), api::cudaGetErrorName(status), message, expression, where);
}

}  // namespace tessel::rt

// Checks a CUDA runtime call (real or simulated) and throws tessel::CudaError naming it on failure.
#define TESSEL_CUDA_CHECK(expr) ::tessel::rt::check((expr), #expr)
