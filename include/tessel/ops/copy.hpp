// Strided device views into contiguous device memory on the device: Tensor::contiguous(), clone()
// and to() of any permuted, sliced or broadcast view of device or managed memory run one kernel
// (kernels/tessel/kernels/permute.cuh) instead of a round trip through the host; full(), ones(),
// arange() and to<U>() (a dtype conversion; of a strided view, after the gather) of device memory
// run one kernel each (kernels/tessel/kernels/elementwise.cuh). The runtime
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
// Converts the n contiguous elements at src (dtype `from`) into dst (dtype `to`) with ops::cast's
// rules, queued on `stream` of `device`: one kernel.
TESSEL_API void convert_device(const void* src, DType from, void* dst, DType to, std::size_t n, rt::stream_t stream, Device device);
// Writes start + i * step, converted to `dtype`, to the n contiguous elements at data, queued on
// `stream` of `device`: one kernel.
TESSEL_API void arange_device(void* data, DType dtype, std::size_t n, double start, double step, rt::stream_t stream, Device device);

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

// 16 bytes moved as one: the word of gathers whose fastest dim is regrouped (widen_fastest_dim).
struct alignas(16) Word16 {
    std::uint64_t lo, hi;
};
// with_element_word, and 16-byte words.
template <class F>
void with_word(const char* what, std::size_t bytes, F&& f) {
    if (bytes == 16) f(Word16{});
    else with_element_word(what, bytes, f);
}

// Where the fastest dim of m has stride 1 and its size, the other strides and both first elements
// allow it, regroups that dim into words of up to 16 bytes, so the gather moves a word per access
// (a [.., 64] bf16 permute keeping its last dim: 8 elements). Returns the word's size in bytes.
inline std::size_t widen_fastest_dim(MergedDims& m, std::size_t element_size, const void* a, const void* b) {
    const int last = m.shape.size() - 1;
    if (m.strides[last] != 1) return element_size;
    for (std::size_t word = 16; word > element_size; word /= 2) {
        const auto group = std::int64_t(word / element_size);
        bool fits = m.shape[last] % group == 0 && detail::aligned(a, word) && detail::aligned(b, word);
        for (int d = 0; fits && d < last; ++d) fits = m.strides[d] % group == 0;
        if (!fits) continue;
        m.shape[last] /= group;
        for (int d = 0; d < last; ++d) m.strides[d] /= group;
        return word;
    }
    return element_size;
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

// The tiled transpose of merged dims m into contiguous `to`: i is the input's stride-1 dim, j (the
// last) the output's. Chunks of 16 bytes where every row on both sides starts 16-byte aligned,
// else of 4 bytes for 1- and 2-byte elements where rows allow that, else single elements.
template <class E, class I>
void permute_by_tiles(const E* from, E* to, const MergedDims& m, int i, rt::stream_t stream, Device device) {
    // 1-byte tiles in 16-byte chunks are 128 wide (16 KB, as 4-byte ones): a thread moves 64 elements.
    constexpr int tile = 64, byte_tile = sizeof(E) == 1 ? 128 : 64;
    const Shape &shape = m.shape, &in = m.strides;
    const int r = shape.size(), j = r - 1;
    Shape out = shape;  // the contiguous output's strides
    out[r - 1] = 1;
    for (int d = r - 2; d >= 0; --d) out[d] = out[d + 1] * shape[d + 1];
    kernels::PermuteTiles<I> p{I(shape[i]), I(shape[j]), in[j], out[i], {}, {}, 0, 0, {}, {}, {}};
    std::int64_t batches = 1;
    for (int d = 0; d < r; ++d) {
        if (d == i || d == j) continue;
        p.batch_shape[p.batch_rank] = Divisor<I>::of(I(shape[d]));
        p.batch_in[p.batch_rank] = in[d];
        p.batch_out[p.batch_rank] = out[d];
        batches *= shape[d];
        ++p.batch_rank;
    }
    auto go = [&]<int Tile, int V>() {
        const std::int64_t tiles_i = (shape[i] + Tile - 1) / Tile, tiles_j = (shape[j] + Tile - 1) / Tile;
        p.tiles_i = Divisor<I>::of(I(tiles_i));
        p.tiles_per_batch = Divisor<I>::of(I(tiles_i * tiles_j));
        p.tiles = I(tiles_i * tiles_j * batches);
        const auto blocks = unsigned(std::clamp<std::int64_t>(std::int64_t(p.tiles), 1, detail::max_blocks(device, 8)));
        launch(kernels::permute_tiles<E, Tile, V, I>, blocks, dim3(256), 0, stream, from, to, p);
    };
    auto rows_aligned = [&](int v) {
        bool fits = detail::aligned(from, v * sizeof(E)) && detail::aligned(to, v * sizeof(E)) && in[j] % v == 0 && out[i] % v == 0;
        for (int b = 0; fits && b < p.batch_rank; ++b) fits = p.batch_in[b] % v == 0 && p.batch_out[b] % v == 0;
        return fits;
    };
    constexpr int wide = int(16 / sizeof(E)), word = int(4 / sizeof(E));
    if (rows_aligned(wide)) {
        go.template operator()<byte_tile, wide>();
    } else if constexpr (word > 1) {
        if (rows_aligned(word)) go.template operator()<tile, word>();
        else go.template operator()<tile, 1>();
    } else {
        go.template operator()<tile, 1>();
    }
}

// n elements between the merged dims m and contiguous memory, in words of up to 16 bytes where the
// fastest dim allows (widen_fastest_dim): gather_strided reads m's layout in row-major order,
// scatter_strided writes it. Small: offsets and indices fit 32 bits.
template <bool Gather>
void move_strided(const char* name, const void* src, void* dst, MergedDims& m, std::int64_t n, std::size_t element_size, bool small,
                  rt::stream_t stream, Device device) {
    const std::size_t word = widen_fastest_dim(m, element_size, src, dst);
    const std::int64_t words = n * std::int64_t(element_size) / std::int64_t(word);
    with_word(name, word, [&]<class E>(E) {
        auto run = [&]<class I>(I) {
            auto* kernel = Gather ? kernels::gather_strided<E, I> : kernels::scatter_strided<E, I>;
            launch(kernel, strided_blocks(words, device), dim3(256), 0, stream, static_cast<const E*>(src), static_cast<E*>(dst),
                   strided_params<I>(m), I(words));
        };
        if (small) run(std::uint32_t{});
        else run(std::uint64_t{});
    });
}

TESSEL_API void gather_to_contiguous(const void* first, const Layout& layout, void* dst, std::size_t element_size, rt::stream_t stream,
                                     Device device) {
    const std::int64_t n = layout.numel();
    if (n == 0) return;
    MergedDims m = merge_dims(layout);  // the output is contiguous
    const int r = m.shape.size(), j = r - 1;
    int i = -1;
    for (int d = 0; d < j; ++d)
        if (m.strides[d] == 1) i = d;
    if (r == 1 && m.strides[0] == 1) {
        rt::memcpy_async(dst, first, std::size_t(n) * element_size, stream);
        return;
    }
    DeviceGuard guard(device);
    const auto extent = layout.extent();
    const bool small = n < std::numeric_limits<std::int32_t>::max() && extent->highest < std::numeric_limits<std::int32_t>::max();
    if (m.strides[j] == 1 || i < 0) {
        move_strided<true>("gather_to_contiguous", first, dst, m, n, element_size, small, stream, device);
        return;
    }
    with_element_word("gather_to_contiguous", element_size, [&]<class E>(E) {
        if (small) permute_by_tiles<E, std::uint32_t>(static_cast<const E*>(first), static_cast<E*>(dst), m, i, stream, device);
        else permute_by_tiles<E, std::uint64_t>(static_cast<const E*>(first), static_cast<E*>(dst), m, i, stream, device);
    });
}

TESSEL_API void scatter_from_contiguous(const void* src, void* dst_first, const Layout& layout, std::size_t element_size,
                                        rt::stream_t stream, Device device) {
    const std::int64_t n = layout.numel();
    if (n == 0) return;
    MergedDims m = merge_dims(layout);
    if (m.shape.size() == 1 && m.strides[0] == 1) {
        rt::memcpy_async(dst_first, src, std::size_t(n) * element_size, stream);
        return;
    }
    DeviceGuard guard(device);
    const auto extent = layout.extent();
    const bool small = n < std::numeric_limits<std::int32_t>::max() && extent->highest - extent->lowest < std::numeric_limits<std::int32_t>::max();
    move_strided<false>("scatter_from_contiguous", src, dst_first, m, n, element_size, small, stream, device);
}

TESSEL_API void fill_device(void* data, std::size_t n, std::size_t element_size, std::uint64_t bits, rt::stream_t stream, Device device) {
    if (n == 0) return;
    DeviceGuard guard(device);
    auto run = [&]<class E>(E) {
        E value;
        std::memcpy(&value, &bits, sizeof(E));  // the low bytes on a little-endian machine (all CUDA hosts)
        constexpr int V = int(16 / sizeof(E));
        if (detail::aligned(data, 16))
            launch(kernels::fill<V, E>, strided_blocks(std::int64_t(n / V + 1), device), dim3(256), 0, stream, static_cast<E*>(data), n, value);
        else
            launch(kernels::fill<1, E>, strided_blocks(std::int64_t(n), device), dim3(256), 0, stream, static_cast<E*>(data), n, value);
    };
    with_element_word("fill_device", element_size, run);
}

TESSEL_API void convert_device(const void* src, DType from, void* dst, DType to, std::size_t n, rt::stream_t stream, Device device) {
    if (n == 0) return;
    DeviceGuard guard(device);
    // Every pair of the 11 dtypes has its kernels (110 pairs, 2 vector widths each, compiled once
    // with the runtime): a conversion is one load, a few instructions and one store per element,
    // which a runtime switch on either dtype inside the loop would outweigh.
    visit_dtype(from, [&]<class From>(From) {
        visit_dtype(to, [&]<class To>(To) {
            if constexpr (std::is_same_v<From, To>) {
                rt::memcpy_async(dst, src, n * sizeof(From), stream);
            } else {
                constexpr int V = int(16 / std::min(sizeof(From), sizeof(To)));
                const auto* s = static_cast<const From*>(src);
                auto* d = static_cast<To*>(dst);
                constexpr bool truncating = std::is_integral_v<From> && std::is_integral_v<To> && !std::is_same_v<To, bool> &&
                                            sizeof(To) < sizeof(From);
                auto go = [&]<int W>() {
                    const unsigned blocks = strided_blocks(std::int64_t(n / W + 1), device);
                    if constexpr (truncating) launch(kernels::convert_truncating<W, From, To>, blocks, dim3(256), 0, stream, s, d, n);
                    else launch(kernels::convert<W, From, To>, blocks, dim3(256), 0, stream, s, d, n);
                };
                if (detail::aligned(src, V * sizeof(From)) && detail::aligned(dst, V * sizeof(To))) go.template operator()<V>();
                else go.template operator()<1>();
            }
        });
    });
}

TESSEL_API void arange_device(void* data, DType dtype, std::size_t n, double start, double step, rt::stream_t stream, Device device) {
    if (n == 0) return;
    DeviceGuard guard(device);
    visit_dtype(dtype, [&]<class T>(T) {
        constexpr int V = int(16 / sizeof(T));
        auto* out = static_cast<T*>(data);
        if (detail::aligned(data, 16))
            launch(kernels::arange<V, T>, strided_blocks(std::int64_t(n / V + 1), device), dim3(256), 0, stream, out, n, start, step);
        else
            launch(kernels::arange<1, T>, strided_blocks(std::int64_t(n), device), dim3(256), 0, stream, out, n, start, step);
    });
}

// Routes Tensor's strided device copies, fills, conversions and arange here (see the top of this file).
inline const bool device_gather_registered = [] {
    tessel::detail::device_gather.store(&gather_to_contiguous);
    tessel::detail::device_scatter.store(&scatter_from_contiguous);
    tessel::detail::device_fill.store(&fill_device);
    tessel::detail::device_convert.store(&convert_device);
    tessel::detail::device_arange.store(&arange_device);
    return true;
}();
#endif  // TESSEL_DEFINE_RUNTIME

}  // namespace tessel::ops
