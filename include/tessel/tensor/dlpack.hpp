// Zero-copy exchange with other frameworks through DLPack (the Debian libdlpack-dev header, DLPack
// 0.6): to_dlpack() hands out a DLManagedTensor that keeps the tensor's memory alive until its
// deleter runs; from_dlpack() wraps one and calls its deleter when the last view goes away.
// bool and float8 travel with the codes later DLPack versions fixed in the same ABI (bool 6,
// float8_e4m3fn 10, float8_e5m2 12: PyTorch's), which 0.6's header does not name.
// Device memory is kDLCUDA (on the sim too, where it is host-addressable), pinned memory
// kDLCUDAHost, managed memory kDLCUDAManaged, ordinary host memory kDLCPU.
#pragma once

#include <dlpack/dlpack.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>

#include "tensor.hpp"

namespace tessel {

namespace detail {
// Type codes of DLPack 1.x (the DLTensor layout is 0.6's): bool, and the float8 formats tessel has
// (e4m3fn: no infinities, as CUDA's __nv_fp8_e4m3).
inline constexpr std::uint8_t dl_code_bool = 6, dl_code_float8_e4m3fn = 10, dl_code_float8_e5m2 = 12;

template <Element T>
DLDataType dl_dtype() {
    switch (dtype_of<T>) {
        case DType::boolean: return {dl_code_bool, 8, 1};
        case DType::f8_e4m3: return {dl_code_float8_e4m3fn, 8, 1};
        case DType::f8_e5m2: return {dl_code_float8_e5m2, 8, 1};
        case DType::f64: return {kDLFloat, 64, 1};
        case DType::f32: return {kDLFloat, 32, 1};
        case DType::f16: return {kDLFloat, 16, 1};
        case DType::bf16: return {kDLBfloat, 16, 1};
        case DType::i8: return {kDLInt, 8, 1};
        case DType::u8: return {kDLUInt, 8, 1};
        case DType::i32: return {kDLInt, 32, 1};
        case DType::i64: return {kDLInt, 64, 1};
        default: break;
    }
    fail<Unsupported>("DLPack ", DLPACK_VERSION / 100, ".", DLPACK_VERSION % 100 / 10, " cannot express dtype ", dtype_traits<T>::name);
}

// A DLPack dtype in a message ("float32", "int8x4"), printed only when the message is built.
struct DlDtypeText {
    DLDataType t;
    friend std::ostream& operator<<(std::ostream& os, const DlDtypeText& d) {
        const DLDataType t = d.t;
        // Codes after 0.6 as DLPack 1.x names them (bool 6, float8 7-14, float6 15-16, float4 17).
        // (tessel's float8_e4m3 is DLPack's float8_e4m3fn; DLPack's float8_e4m3 has infinities.)
        static constexpr const char* later[] = {"bool",          "float8_e3m4",     "float8_e4m3 (with infinities, not e4m3fn)", "float8_e4m3b11fnuz",
                                                "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2",    "float8_e5m2fnuz",
                                                "float8_e8m0fnu", "float6_e2m3fn",  "float6_e3m2fn",  "float4_e2m1fn"};
        if (t.code == kDLInt || t.code == kDLUInt || t.code == kDLFloat || t.code == kDLBfloat || t.code == kDLComplex)
            os << (t.code == kDLInt ? "int" : t.code == kDLUInt ? "uint" : t.code == kDLFloat ? "float" : t.code == kDLBfloat ? "bfloat" : "complex")
               << int(t.bits);
        else if (t.code >= 6 && t.code <= 17)
            os << later[t.code - 6] << (t.bits != 8 ? " of " + std::to_string(int(t.bits)) + " bits" : std::string());
        else
            os << "type code " << int(t.code) << " (" << int(t.bits) << " bits)";
        if (t.lanes != 1) os << 'x' << int(t.lanes);
        return os;
    }
};
inline DlDtypeText dl_dtype_text(DLDataType t) { return {t}; }

// What a DLManagedTensor we hand out owns: a view of the tensor (keeping its storage) and the arrays.
template <Element T>
struct DLContext {
    Tensor<T> tensor;
    std::int64_t shape[max_rank];
    std::int64_t strides[max_rank];
    DLManagedTensor managed;
};
}  // namespace detail

// A DLPack view of `t`. The caller (or the framework it is given to) must call its deleter once.
template <Element T>
DLManagedTensor* to_dlpack(const Tensor<T>& t) {
    require(t.defined(), "to_dlpack: the tensor is undefined (default-constructed)");
    const DLDataType dt = detail::dl_dtype<T>();
    auto* ctx = new detail::DLContext<T>{t, {}, {}, {}};
    for (int d = 0; d < t.dim(); ++d) {
        ctx->shape[d] = t.shape()[d];
        ctx->strides[d] = t.strides()[d];
    }
    DLTensor& dl = ctx->managed.dl_tensor;
    dl.data = t.numel() ? static_cast<void*>(t.data()) : t.storage()->data();
    dl.byte_offset = 0;
    dl.ndim = t.dim();
    dl.dtype = dt;
    dl.shape = ctx->shape;
    dl.strides = ctx->strides;
    switch (t.space()) {
        case MemorySpace::device: dl.device = {kDLCUDA, t.device().index}; break;
        case MemorySpace::pinned: dl.device = {kDLCUDAHost, 0}; break;
        case MemorySpace::host: dl.device = {kDLCPU, 0}; break;
        case MemorySpace::managed: dl.device = {kDLCUDAManaged, t.device().index}; break;
    }
    ctx->managed.manager_ctx = ctx;
    ctx->managed.deleter = [](DLManagedTensor* self) { delete static_cast<detail::DLContext<T>*>(self->manager_ctx); };
    return &ctx->managed;
}

// Wraps a DLPack tensor of element type T without copying; its deleter runs when the last view of
// the result goes away (at once if this throws).
template <Element T>
Tensor<T> from_dlpack(DLManagedTensor* m) {
    require(m != nullptr, "from_dlpack: null DLManagedTensor");
    struct Release {  // runs the producer's deleter if wrapping fails
        DLManagedTensor* m;
        ~Release() {
            if (m && m->deleter) m->deleter(m);
        }
    } guard{m};
    const DLTensor& dl = m->dl_tensor;
    const DLDataType want = detail::dl_dtype<T>();
    require(dl.dtype.code == want.code && dl.dtype.bits == want.bits && dl.dtype.lanes == want.lanes, "from_dlpack: the tensor holds ",
            detail::dl_dtype_text(dl.dtype), ", not ", dtype_traits<T>::name, " (", detail::dl_dtype_text(want), ")");
    require(dl.ndim >= 0 && dl.ndim <= max_rank, "from_dlpack: rank ", dl.ndim, " is not between 0 and ", max_rank);
    require(dl.byte_offset % sizeof(T) == 0, "from_dlpack: byte_offset ", dl.byte_offset, " is not a multiple of the element size ",
            sizeof(T));
    require(dl.ndim == 0 || dl.shape != nullptr, "from_dlpack: rank ", dl.ndim, " but the shape array is null");
    MemorySpace space = MemorySpace::host;
    Device device{dl.device.device_id};
    // Read as an integer: a later DLPack's device type (kDLMAIA, 17) is outside 0.6's enum, and
    // loading it as that enum would be undefined.
    std::int32_t device_type = 0;
    static_assert(sizeof(device_type) == sizeof(dl.device.device_type));
    std::memcpy(&device_type, &dl.device.device_type, sizeof device_type);
    switch (device_type) {
        case kDLCUDA: space = MemorySpace::device; break;
        case kDLCUDAManaged: space = MemorySpace::managed; break;
        case kDLCUDAHost: space = MemorySpace::pinned; break;
        case kDLCPU: space = MemorySpace::host; break;
        default:
            fail<Unsupported>("from_dlpack: device type ", device_type,
                              " is not CPU (1), CUDA (2), CUDA host (3) or CUDA managed (13) memory");
    }
    if (space == MemorySpace::device || space == MemorySpace::managed) {
        require(device.index >= 0 && device.index < device_count(), "from_dlpack: ",
                space == MemorySpace::device ? "CUDA" : "CUDA managed", " device ", device.index, " does not exist (",
                device_count(), " visible)");
    } else {  // host memory has one device, 0
        require(device.index == 0, "from_dlpack: ", space == MemorySpace::host ? "CPU" : "CUDA host", " memory with device_id ",
                device.index, " (DLPack expects 0)");
        device = Device{0};
    }
    require(dl.data != nullptr || (dl.ndim > 0 && std::find(dl.shape, dl.shape + dl.ndim, 0) != dl.shape + dl.ndim),
            "from_dlpack: null data pointer for a tensor with elements");
    Shape shape, strides;
    for (int d = 0; d < dl.ndim; ++d) shape.push_back(dl.shape[d]);
    if (dl.strides) {
        for (int d = 0; d < dl.ndim; ++d) {
            // NumPy's and CuPy's reversed views (x[::-1]) have them; tessel's views never do.
            require(dl.strides[d] >= 0 || dl.shape[d] <= 1, "from_dlpack: dim ", d, " has the negative stride ", dl.strides[d],
                    " (a reversed view); tessel's strides are not negative: pass a copy (numpy.ascontiguousarray, cupy.ascontiguousarray)");
            strides.push_back(dl.strides[d]);
        }
    } else {
        strides = Layout::contiguous(shape).strides;
    }
    T* base = dl.data ? reinterpret_cast<T*>(static_cast<char*>(dl.data) + dl.byte_offset) : nullptr;
    Tensor<T> t = from_blob<T>(base, shape, space, device, [m](void*) { m->deleter ? m->deleter(m) : void(); }, strides);
    guard.m = nullptr;  // the storage's deleter owns it now
    return t;
}

}  // namespace tessel
