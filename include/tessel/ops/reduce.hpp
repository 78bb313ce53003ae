// Reductions over all elements or any set of axes: sum, mean, prod, amax, amin, argmax, argmin,
// all, any, norm (L1, L2, inf), var and std (Welford; correction 1 = unbiased by default), with
// keepdim. Deterministic always: every combination order is fixed by the shape (never by timing or
// the device), and no atomics are used, so a result is bitwise reproducible.
//
// How: the reduced dims and the kept dims are each merged where contiguous; a warp (short rows)
// or a 256-thread block (long rows) reduces each output, with 16-byte loads when rows are contiguous
// and aligned; few outputs over many elements split each row across blocks, and a second kernel
// combines the partial results in order (kernels/tessel/kernels/reduce.cuh).
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <source_location>
#include <vector>

#include <tessel/kernels/reduce.cuh>

#include "../memory/allocator.hpp"
#include "../runtime/launch.hpp"
#include "assign.hpp"
#include "reducers.hpp"

namespace tessel {

// The dims a reduction reduces (negative counts from the end); empty means all of them.
struct Axes {
    std::vector<int> dims;
    Axes() = default;
    Axes(std::initializer_list<int> d) : dims(d) {}
    Axes(std::vector<int> d) : dims(std::move(d)) {}
    Axes(int d) : dims{d} {}
};

namespace ops::detail {

// Drops size-1 dims of the given ones and merges neighbours with stride[d] == stride[d+1] * size[d+1].
inline void merge_dims(const Shape& shape, const Shape& strides, const std::vector<int>& dims, Shape& out_shape, Shape& out_strides) {
    for (int d : dims) {
        if (shape[d] == 1) continue;
        const int last = out_shape.size() - 1;
        if (last >= 0 && out_strides[last] == strides[d] * shape[d]) {
            out_shape[last] *= shape[d];
            out_strides[last] = strides[d];
        } else {
            out_shape.push_back(shape[d]);
            out_strides.push_back(strides[d]);
        }
    }
    if (out_shape.empty()) {
        out_shape.push_back(1);
        out_strides.push_back(0);
    }
}

template <class Op, Element T>
Tensor<typename Op::out_t> reduce(const char* name, const Tensor<T>& x, Op op, const Axes& axes, bool keepdim,
                                  std::optional<rt::stream_t> stream_opt, std::source_location site) {
    using Out = typename Op::out_t;
    using A = typename Op::acc_t;
    require(x.defined(), name, ": an undefined (default-constructed) tensor");
    require(x.space() == MemorySpace::device || x.space() == MemorySpace::managed, name, ": the input is in ",
            space_name(x.space()), " memory; reductions run on a device: move it there first");
    const int rank = x.dim();
    std::array<bool, max_rank> reduced{};
    if (axes.dims.empty()) reduced.fill(true);
    for (int d : axes.dims) {
        require(d >= -rank && d < std::max(rank, 1), name, ": axis ", d, " out of range for a tensor of rank ", rank,
                " (shape ", x.shape().to_string(), ")");
        const int w = d < 0 ? d + rank : d;
        require(rank == 0 || !reduced[std::size_t(w)], name, ": axis ", d, " given twice");
        if (rank > 0) reduced[std::size_t(w)] = true;
    }
    Shape out_shape;
    std::vector<int> kept, red;
    std::int64_t K = 1;
    for (int d = 0; d < rank; ++d) {
        if (reduced[std::size_t(d)]) {
            red.push_back(d);
            K *= x.shape()[d];
            if (keepdim) out_shape.push_back(1);
        } else {
            kept.push_back(d);
            out_shape.push_back(x.shape()[d]);
        }
    }
    const Device device = x.device();
    const rt::stream_t stream = stream_opt ? *stream_opt : current_stream(device).handle();
    Tensor<Out> out = empty<Out>(out_shape, TensorOptions{.device = device, .stream = stream});
    const std::int64_t M = out.numel();
    if (M == 0) return out;
    if constexpr (std::is_same_v<Op, ExtremumReducer<T, true>> || std::is_same_v<Op, ExtremumReducer<T, false>> ||
                  std::is_same_v<Op, ArgExtremumReducer<T, true>> || std::is_same_v<Op, ArgExtremumReducer<T, false>>)
        require(K > 0, name, ": the reduced dims of shape ", x.shape().to_string(), " are empty, and ", name,
                " of no elements is undefined");

    Shape outer_shape, outer_strides, inner_shape, inner_strides;
    merge_dims(x.shape(), x.strides(), kept, outer_shape, outer_strides);
    merge_dims(x.shape(), x.strides(), red, inner_shape, inner_strides);

    // Splits depend on the shape only, so the combination order (and the result) never depends on the device.
    constexpr std::int64_t per_split = 16384;
    std::int64_t splits = M < 512 ? std::clamp<std::int64_t>((K + per_split - 1) / per_split, 1, 1024) : 1;
    constexpr int V = int(16 / sizeof(T)) > 1 ? int(16 / sizeof(T)) : 1;
    bool vector = V > 1 && inner_shape.size() == 1 && inner_strides[0] == 1 && K % V == 0 &&
                  reinterpret_cast<std::uintptr_t>(x.data()) % 16 == 0;
    for (int d = 0; vector && d < outer_strides.size(); ++d) vector = outer_strides[d] % V == 0;
    std::int64_t chunk = (K + splits - 1) / splits;
    if (vector) chunk = (chunk + V - 1) / V * V;
    if (chunk > 0) splits = std::max<std::int64_t>(1, (K + chunk - 1) / chunk);
    const int threads_per_output = K >= 1024 ? 256 : 32;

    DeviceGuard guard(device);
    A* partial = nullptr;
    if (splits > 1) partial = static_cast<A*>(memory::allocate(std::size_t(M * splits) * sizeof(A), stream));
    auto go = [&]<class I>(I) {
        kernels::ReduceIndexer<I> ix{outer_shape.size(), inner_shape.size(), {}, {}, {}, {}};
        for (int d = 0; d < outer_shape.size(); ++d) {
            ix.outer_shape[d] = I(outer_shape[d]);
            ix.outer_stride[d] = outer_strides[d];
        }
        for (int d = 0; d < inner_shape.size(); ++d) {
            ix.inner_shape[d] = I(inner_shape[d]);
            ix.inner_stride[d] = inner_strides[d];
        }
        const std::int64_t items = M * splits, groups = 256 / threads_per_output;
        const GridDim grid(unsigned(std::clamp<std::int64_t>((items + groups - 1) / groups, 1, max_blocks(device, 32))), site);
        auto launch_with = [&]<int Threads, int W>() {
            launch(kernels::reduce<Threads, W, Op, T, I>, grid, dim3(256), 0, stream, x.data(), ix, op, I(M), I(K), I(splits),
                   I(chunk), partial, out.data());
        };
        if (threads_per_output == 256) {
            if (vector) launch_with.template operator()<256, V>();
            else launch_with.template operator()<256, 1>();
        } else {
            if (vector) launch_with.template operator()<32, V>();
            else launch_with.template operator()<32, 1>();
        }
        if (splits > 1)
            launch(kernels::reduce_partials<Op, I>, GridDim(blocks_for(std::size_t(M), 256), site), dim3(256), 0, stream, partial, op,
                   I(M), I(splits), I(K), out.data());
    };
    const auto span = x.layout().extent();
    const bool small = x.numel() < std::numeric_limits<std::int32_t>::max() && M * splits < std::numeric_limits<std::int32_t>::max() &&
                       (!span || span->highest < std::numeric_limits<std::int32_t>::max());
    try {
        if (small) go(std::uint32_t{});
        else go(std::uint64_t{});
    } catch (...) {
        if (partial) memory::deallocate(partial);
        throw;
    }
    if (partial) memory::deallocate(partial);  // reused only by work queued after ours on this stream
    return out;
}

}  // namespace ops::detail

// sum and prod (integers and bool give int64), mean (integers give float32; no elements give NaN),
// amax and amin (NaN if any), argmax and argmin (flat index within the reduced dims, first on ties),
// all and any (values taken as bool).
#define TESSEL_REDUCTION(fn, ...)                                                                                    \
    template <Element T>                                                                                            \
    auto fn(const Tensor<T>& x, const Axes& axes = {}, bool keepdim = false, std::optional<rt::stream_t> stream = {}, \
            std::source_location site = std::source_location::current()) {                                         \
        return ops::detail::reduce(#fn, x, __VA_ARGS__{}, axes, keepdim, stream, site);                                 \
    }
TESSEL_REDUCTION(sum, ops::SumReducer<T>)
TESSEL_REDUCTION(mean, ops::MeanReducer<T>)
TESSEL_REDUCTION(prod, ops::ProdReducer<T>)
TESSEL_REDUCTION(amax, ops::ExtremumReducer<T, true>)
TESSEL_REDUCTION(amin, ops::ExtremumReducer<T, false>)
TESSEL_REDUCTION(argmax, ops::ArgExtremumReducer<T, true>)
TESSEL_REDUCTION(argmin, ops::ArgExtremumReducer<T, false>)
TESSEL_REDUCTION(all, ops::LogicalReducer<T, true>)
TESSEL_REDUCTION(any, ops::LogicalReducer<T, false>)
#undef TESSEL_REDUCTION

// L1, L2 or inf norm over the axes (all by default).
template <Element T>
auto norm(const Tensor<T>& x, ops::NormOrder p = ops::NormOrder::l2, const Axes& axes = {}, bool keepdim = false,
          std::optional<rt::stream_t> stream = {}, std::source_location site = std::source_location::current()) {
    switch (p) {
        case ops::NormOrder::l1: return ops::detail::reduce("norm", x, ops::NormReducer<T, ops::NormOrder::l1>{}, axes, keepdim, stream, site);
        case ops::NormOrder::inf: return ops::detail::reduce("norm", x, ops::NormReducer<T, ops::NormOrder::inf>{}, axes, keepdim, stream, site);
        default: return ops::detail::reduce("norm", x, ops::NormReducer<T, ops::NormOrder::l2>{}, axes, keepdim, stream, site);
    }
}
// Variance over the axes with Welford's algorithm; correction 1 divides by n - 1 (unbiased), 0 by n.
template <Element T>
auto var(const Tensor<T>& x, const Axes& axes = {}, std::int64_t correction = 1, bool keepdim = false,
         std::optional<rt::stream_t> stream = {}, std::source_location site = std::source_location::current()) {
    return ops::detail::reduce("var", x, ops::VarianceReducer<T, false>{correction}, axes, keepdim, stream, site);
}
// Standard deviation: the square root of var.
template <Element T>
auto stddev(const Tensor<T>& x, const Axes& axes = {}, std::int64_t correction = 1, bool keepdim = false,
         std::optional<rt::stream_t> stream = {}, std::source_location site = std::source_location::current()) {
    return ops::detail::reduce("stddev", x, ops::VarianceReducer<T, true>{correction}, axes, keepdim, stream, site);
}

}  // namespace tessel
