// The device kernels Tensor's own methods and factories use: strided copies, fills, dtype
// conversions and arange. tensor.hpp cannot include the kernels (host-compiled files include it
// too), so they are function pointers that tessel/ops/copy.hpp sets at start-up where the runtime is
// compiled (its runtime source, or any translation unit including it in a header-only build). Where
// one is unset, the method takes its host path (compute on the host, then copy), which is correct
// but not fast.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "../runtime/device.hpp"
#include "dtype.hpp"
#include "layout.hpp"

namespace tessel::detail {

// Gathers a strided device view into contiguous device memory (first element, layout, destination,
// element size, stream, device): contiguous(), clone() and to() of views.
using DeviceGatherFn = void (*)(const void*, const Layout&, void*, std::size_t, rt::stream_t, Device);
inline std::atomic<DeviceGatherFn> device_gather{nullptr};

// Writes contiguous device memory into a strided device view (source, destination's first element,
// its layout, element size, stream, device): copy_ into views.
using DeviceScatterFn = void (*)(const void*, void*, const Layout&, std::size_t, rt::stream_t, Device);
inline std::atomic<DeviceScatterFn> device_scatter{nullptr};

// Sets n elements of element_size bytes to the same bits (data, n, element size, bits, stream,
// device): full() and ones().
using DeviceFillFn = void (*)(void*, std::size_t, std::size_t, std::uint64_t, rt::stream_t, Device);
inline std::atomic<DeviceFillFn> device_fill{nullptr};

// Converts n contiguous elements from one dtype to another with tessel's conversion rules (source,
// its dtype, destination, its dtype, n, stream, device): to<U>().
using DeviceConvertFn = void (*)(const void*, DType, void*, DType, std::size_t, rt::stream_t, Device);
inline std::atomic<DeviceConvertFn> device_convert{nullptr};

// Writes start + i * step (one fused multiply-add in double, then converted) to the n contiguous
// elements of a dtype (data, dtype, n, start, step, stream, device): arange().
using DeviceArangeFn = void (*)(void*, DType, std::size_t, double, double, rt::stream_t, Device);
inline std::atomic<DeviceArangeFn> device_arange{nullptr};

}  // namespace tessel::detail
