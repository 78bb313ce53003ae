// Strided device views into contiguous device memory on the device: Tensor::contiguous(), clone()
// and to() of any permuted, sliced or broadcast view of device or managed memory run one kernel
// (kernels/tessel/kernels/permute.cuh) instead of a round trip through the host; full() and ones()
// of device memory fill it with a kernel (kernels/tessel/kernels/elementwise.cuh). The runtime
// source (core/linkage.hpp) compiles and registers these kernels once per program, also for
// host-compiled callers; in a header-only build, any CUDA (or sim) translation unit including this
// header does. Without them those paths stay correct through the host.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../core/linkage.hpp"
#include "../tensor/tensor.hpp"

#if TESSEL_DEFINE_RUNTIME
#include <algorithm>
#include <cstring>
#include <limits>

#include <tessel/kernels/elementwise.cuh>
#include <tessel/kernels/permute.cuh>

#include "../runtime/launch.hpp"
#include "assign.hpp"  // detail::max_blocks, detail::aligned
#endif

namespace tessel::ops {

// Copies the elements of the view `layout` (offset ignored; `first` is its first element) in row-major
// order into contiguous `dst`, queued on `stream` of `device`.
TESSEL_API void gather_to_contiguous(const void* first, const Layout& layout, void* dst, std::size_t element_size, rt::stream_t stream,
                                     Device device);
// Writes contiguous `src` into the strided view `layout` whose first element is `dst_first` (the view's
// elements distinct), queued on `stream` of `device`.
TESSEL_API void scatter_from_contiguous(const void* src, void* dst_first, const Layout& layout, std::size_t element_size,
                                        rt::stream_t stream, Device device);
// Sets the n elements of element_size bytes at data to `bits` (its low element_size bytes), queued
// on `stream` of `device`.
TESSEL_API void fill_device(void* data, std::size_t n, std::size_t element_size, std::uint64_t bits, rt::stream_t stream, Device device);

// The definitions are compiled once per program where the runtime is compiled separately
// (core/linkage.hpp): instantiating the kernels for every element width and index type in each
// file that includes this header cost ~5 s of compile time per file.
#if TESSEL_DEFINE_RUNTIME
// Calls f(E{}) with E the unsigned integer as wide as an element: the kernels below move bits only.
template <class F>
void with_element_word(const char* what, std::size_t element_size, F&& f) {
    switch (element_size) {
        case 1: f(std::uint8_t{}); break;
        case 2: f(std::uint16_t{}); break;
        case 4: f(std::uint32_t{}); break;
        case 8: f(std::uint64_t{}); break;
        default: fail<Unsupported>(what, ": elements of ", element_size, " bytes");
    }
}

// The view's dims with neighbours it walks as one merged and size-1 dims dropped (row-major order
// kept); at least one dim.
struct MergedDims {
    Shape shape, strides;
};
inline MergedDims merge_dims(const Layout& layout) {
    MergedDims m;
    for (int d = 0; d < layout.rank(); ++d) {
        if (layout.shape[d] == 1) continue;
        const int last = m.shape.size() - 1;
        if (last >= 0 && m.strides[last] == layout.strides[d] * layout.shape[d]) {
            m.shape[last] *= layout.shape[d];
            m.strides[last] = layout.strides[d];
        } else {
            m.shape.push_back(layout.shape[d]);
            m.strides.push_back(layout.strides[d]);
        }
    }
    if (m.shape.empty()) {
        m.shape.push_back(1);
        m.strides.push_back(1);
    }
    return m;
}

// The gather/scatter kernels' description of merged dims m, and their grid for n elements.
template <class I>
kernels::GatherStrided<I> strided_params(const MergedDims& m) {
    kernels::GatherStrided<I> g{m.shape.size(), {}, {}};
    for (int d = 0; d < m.shape.size(); ++d) {
        g.shape[d] = Divisor<I>::of(I(m.shape[d]));
        g.in_stride[d] = m.strides[d];
    }
    return g;
}
inline unsigned strided_blocks(std::int64_t n, Device device) {
    return unsigned(std::clamp<std::int64_t>((n + 255) / 256, 1, detail::max_blocks(device, 32)));
}

TESSEL_API void gather_to_contiguous(const void* first, const Layout& layout, void* dst, std::size_t element_size, rt::stream_t stream,
                                     Device device) {
    const std::int64_t n = layout.numel();
    if (n == 0) return;
    const MergedDims m = merge_dims(layout);  // the output is contiguous
    const Shape &shape = m.shape, &in = m.strides;
    const int r = shape.size();
    Shape out = shape;
    out[r - 1] = 1;
    for (int d = r - 2; d >= 0; --d) out[d] = out[d + 1] * shape[d + 1];
    const int j = r - 1;
    int i = -1;
    for (int d = 0; d < j; ++d)
        if (in[d] == 1) i = d;

    DeviceGuard guard(device);
    const auto extent = layout.extent();
    const bool small = n < std::numeric_limits<std::int32_t>::max() && extent->highest < std::numeric_limits<std::int32_t>::max();
    auto run = [&]<class E, class I>(E, I) {
        const E* src = static_cast<const E*>(first);
        E* to = static_cast<E*>(dst);
        if (r == 1 && in[0] == 1) {
            rt::memcpy_async(dst, first, std::size_t(n) * element_size, stream);
        } else if (in[j] == 1 || i < 0) {
            launch(kernels::gather_strided<E, I>, strided_blocks(n, device), dim3(256), 0, stream, src, to, strided_params<I>(m), I(n));
        } else {
            kernels::PermuteTiles<I> p{I(shape[i]), I(shape[j]), in[j], out[i], 0, 1, {}, {}, {}};
            for (int d = 0; d < r; ++d) {
                if (d == i || d == j) continue;
                p.batch_shape[p.batch_rank] = I(shape[d]);
                p.batch_in[p.batch_rank] = in[d];
                p.batch_out[p.batch_rank] = out[d];
                p.batches = I(p.batches * I(shape[d]));
                ++p.batch_rank;
            }
            constexpr int tile = 32, rows = 8;
            const std::int64_t tiles = (shape[i] + tile - 1) / tile * ((shape[j] + tile - 1) / tile) * std::int64_t(p.batches);
            const auto blocks = unsigned(std::clamp<std::int64_t>(tiles, 1, detail::max_blocks(device, 64)));
            launch(kernels::permute_tiles<E, tile, rows, I>, blocks, dim3(tile, rows), 0, stream, src, to, p);
        }
    };
    auto by_index = [&]<class E>(E e) {
        if (small) run(e, std::uint32_t{});
        else run(e, std::uint64_t{});
    };
    with_element_word("gather_to_contiguous", element_size, by_index);
}

TESSEL_API void scatter_from_contiguous(const void* src, void* dst_first, const Layout& layout, std::size_t element_size,
                                        rt::stream_t stream, Device device) {
    const std::int64_t n = layout.numel();
    if (n == 0) return;
    const MergedDims m = merge_dims(layout);
    DeviceGuard guard(device);
    const auto extent = layout.extent();
    const bool small = n < std::numeric_limits<std::int32_t>::max() && extent->highest - extent->lowest < std::numeric_limits<std::int32_t>::max();
    auto run = [&]<class E, class I>(E, I) {
        if (m.shape.size() == 1 && m.strides[0] == 1) {
            rt::memcpy_async(dst_first, src, std::size_t(n) * element_size, stream);
            return;
        }
        launch(kernels::scatter_strided<E, I>, strided_blocks(n, device), dim3(256), 0, stream, static_cast<const E*>(src),
               static_cast<E*>(dst_first), strided_params<I>(m), I(n));
    };
    with_element_word("scatter_from_contiguous", element_size, [&]<class E>(E e) {
        if (small) run(e, std::uint32_t{});
        else run(e, std::uint64_t{});
    });
}

TESSEL_API void fill_device(void* data, std::size_t n, std::size_t element_size, std::uint64_t bits, rt::stream_t stream, Device device) {
    if (n == 0) return;
    DeviceGuard guard(device);
    const auto blocks = [&](std::size_t work) {
        return unsigned(std::clamp<std::int64_t>(std::int64_t((work + 255) / 256), 1, detail::max_blocks(device, 32)));
    };
    auto run = [&]<class E>(E) {
        E value;
        std::memcpy(&value, &bits, sizeof(E));  // the low bytes on a little-endian machine (all CUDA hosts)
        constexpr int V = int(16 / sizeof(E));
        if (detail::aligned(data, 16))
            launch(kernels::fill<V, E>, blocks(n / V + 1), dim3(256), 0, stream, static_cast<E*>(data), n, value);
        else
            launch(kernels::fill<1, E>, blocks(n), dim3(256), 0, stream, static_cast<E*>(data), n, value);
    };
    with_element_word("fill_device", element_size, run);
}

// Routes Tensor's strided device copies and device fills here (see the top of this file).
inline const bool device_gather_registered = [] {
    tessel::detail::device_gather.store(&gather_to_contiguous);
    tessel::detail::device_scatter.store(&scatter_from_contiguous);
    tessel::detail::device_fill.store(&fill_device);
    return true;
}();
#endif  // TESSEL_DEFINE_RUNTIME

}  // namespace tessel::ops
