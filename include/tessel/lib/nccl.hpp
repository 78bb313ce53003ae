// NCCL, one thin layer for both backends: the library on CUDA (when the build found it:
// TESSEL_HAS_NCCL), its stand-in (sim/nccl.hpp: the same names, types and result codes) on the sim,
// so tessel's collectives (dist/communicator.hpp) are written once and run in CI.
//  - nccl::api: the entry points and types;
//  - check: a result other than ncclSuccess throws LibraryError naming it, the call and NCCL's last
//    error message for the communicator;
//  - data_type<T>(): a tensor element type's ncclDataType_t.
#pragma once

#include "../core/backend.hpp"

#if defined(TESSEL_BACKEND_CUDA) && defined(TESSEL_HAS_NCCL)
#include <nccl.h>
#define TESSEL_NCCL_AVAILABLE 1
#elif defined(TESSEL_BACKEND_SIM)
#include "../sim/nccl.hpp"
#define TESSEL_NCCL_AVAILABLE 1
#endif

#include <cstdint>
#include <source_location>
#include <string>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "../core/error.hpp"

#if defined(TESSEL_NCCL_AVAILABLE)
namespace tessel::nccl {

#if defined(TESSEL_BACKEND_CUDA)
namespace api {
using ::ncclAllGather;
using ::ncclAllReduce;
using ::ncclBroadcast;
using ::ncclComm_t;
using ::ncclCommAbort;
using ::ncclCommCount;
using ::ncclCommCuDevice;
using ::ncclCommDestroy;
using ::ncclCommGetAsyncError;
using ::ncclCommInitAll;
using ::ncclCommInitRank;
using ::ncclCommInitRankConfig;
using ::ncclCommSplit;
using ::ncclConfig_t;
using ::ncclGetUniqueId;
using ::ncclUniqueId;
using ::ncclCommUserRank;
using ::ncclDataType_t;
using ::ncclGetErrorString;
using ::ncclGetLastError;
using ::ncclGroupEnd;
using ::ncclGroupStart;
using ::ncclRecv;
using ::ncclRedOp_t;
using ::ncclReduce;
using ::ncclReduceScatter;
using ::ncclResult_t;
using ::ncclSend;
}  // namespace api
#else
namespace api = ::tessel::sim::nccl;
#endif

inline constexpr int in_progress = 7;  // ncclInProgress: a non-blocking communicator's call is still under way
inline constexpr int split_no_color = -1;  // NCCL_SPLIT_NOCOLOR

// A communicator configuration, blocking or not (NCCL's defaults otherwise).
inline api::ncclConfig_t config(bool blocking) {
#if defined(TESSEL_BACKEND_CUDA)
    api::ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
#else
    api::ncclConfig_t c{};
#endif
    c.blocking = blocking ? 1 : 0;
    return c;
}

// Throws LibraryError naming the result, the call and what NCCL last said about `comm`.
inline void check(api::ncclResult_t r, const char* call, api::ncclComm_t comm = nullptr,
                  std::source_location where = std::source_location::current()) {
    if (r == api::ncclResult_t(0)) return;
    std::string what = call;
    if (comm) {
        const char* last = api::ncclGetLastError(comm);
        if (last && *last) what += std::string(" (") + last + ")";
    }
    throw LibraryError("NCCL", int(r), api::ncclGetErrorString(r), what.c_str(), where);
}

// The NCCL type of a tensor element.
template <class T>
constexpr api::ncclDataType_t data_type() {
    if constexpr (std::is_same_v<T, std::int8_t> || std::is_same_v<T, bool>) return api::ncclDataType_t(0);  // ncclInt8
    else if constexpr (std::is_same_v<T, std::uint8_t>) return api::ncclDataType_t(1);
    else if constexpr (std::is_same_v<T, std::int32_t>) return api::ncclDataType_t(2);
    else if constexpr (std::is_same_v<T, std::uint32_t>) return api::ncclDataType_t(3);
    else if constexpr (std::is_same_v<T, std::int64_t>) return api::ncclDataType_t(4);
    else if constexpr (std::is_same_v<T, std::uint64_t>) return api::ncclDataType_t(5);
    else if constexpr (std::is_same_v<T, __half>) return api::ncclDataType_t(6);
    else if constexpr (std::is_same_v<T, float>) return api::ncclDataType_t(7);
    else if constexpr (std::is_same_v<T, double>) return api::ncclDataType_t(8);
    else if constexpr (std::is_same_v<T, __nv_bfloat16>) return api::ncclDataType_t(9);
    else if constexpr (std::is_same_v<T, __nv_fp8_e4m3>) return api::ncclDataType_t(10);
    else if constexpr (std::is_same_v<T, __nv_fp8_e5m2>) return api::ncclDataType_t(11);
    else static_assert(sizeof(T) == 0, "NCCL has no type for this element");
}

}  // namespace tessel::nccl
#endif
