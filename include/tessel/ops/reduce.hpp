// Reductions over all elements or any set of axes: sum, mean, prod, amax, amin, argmax, argmin,
// all, any, norm (L1, L2, inf), var and std (groups merged by Chan's formula; correction 1 = unbiased by default), with
// keepdim. Deterministic always: every combination order is fixed by the input's shape, strides and
// alignment (never by timing, grid size or the device), and no atomics are used, so a result is
// bitwise reproducible.
//
// How: the reduced dims and the kept dims are each merged where contiguous; a warp (short rows)
// or a 256-thread block (long rows) reduces each output, with 16-byte loads when rows are contiguous
// and aligned; when the outputs are the contiguous side (columns), a block reduces 32 neighbouring
// outputs with coalesced reads; few outputs over many elements split across blocks, and a second
// kernel combines each output's partial results on a fixed tree, a block per output
// (kernels/tessel/kernels/reduce.cuh).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <source_location>
#include <vector>

#include <tessel/kernels/reduce.cuh>

#include "../memory/allocator.hpp"
#include "../runtime/launch.hpp"
#include "assign.hpp"
#include "pieces.hpp"
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

// Which dims a reduction reduces, the result's shape, and the elements each output combines.
struct ReductionPlan {
    std::vector<int> kept, reduced;
    Shape out_shape;
    std::int64_t K = 1;
};
inline ReductionPlan plan_reduction(const char* name, const Shape& shape, const Axes& axes, bool keepdim) {
    const int rank = shape.size();
    std::array<bool, max_rank> reduced{};
    if (axes.dims.empty()) reduced.fill(true);
    for (int d : axes.dims) {
        // A 0-d tensor takes axis 0 and -1, as torch (its dims wrap as if it had one).
        require(d >= -std::max(rank, 1) && d < std::max(rank, 1), name, ": axis ", d, " out of range for a tensor of rank ", rank,
                " (shape ", shape, ")");
        const int w = rank == 0 ? 0 : d < 0 ? d + rank : d;  // a 0-d tensor's one wrapped axis
        require(!reduced[std::size_t(w)], name, ": axis ", d, " given twice");
        reduced[std::size_t(w)] = true;
    }
    ReductionPlan p;
    for (int d = 0; d < rank; ++d) {
        if (reduced[std::size_t(d)]) {
            p.reduced.push_back(d);
            p.K *= shape[d];
            if (keepdim) p.out_shape.push_back(1);
        } else {
            p.kept.push_back(d);
            p.out_shape.push_back(shape[d]);
        }
    }
    return p;
}

// max, min, their arguments and the inf-norm have no value over no elements (torch refuses them).
template <class Op, class T>
inline constexpr bool needs_elements = std::is_same_v<Op, ExtremumReducer<T, true>> || std::is_same_v<Op, ExtremumReducer<T, false>> ||
                                       std::is_same_v<Op, ArgExtremumReducer<T, true>> || std::is_same_v<Op, ArgExtremumReducer<T, false>> ||
                                       std::is_same_v<Op, NormReducer<T, NormOrder::inf>>;

// How each output's K elements are cut into `splits` pieces of `chunk` (a multiple of V). It
// depends on the shape (and V) only, so the combination order never depends on the device. Rows
// (fewer than 512 outputs) split into pieces of at least 2048 elements, up to about 1024 work items
// in all: an H200 holds 132 x 8 = 1056 blocks of 256 threads, so a 1M-element sum runs on 512
// blocks, not the 64 that 16384-element pieces gave. Few columns over many rows split likewise.
struct Splitting {
    std::int64_t splits, chunk;
};
// The outputs one block of the column kernel takes: 32, or 16 or 4 for narrower columns.
inline int column_width(std::int64_t M) { return M <= 4 ? 4 : M <= 16 ? 16 : 32; }

inline Splitting split_for(std::int64_t M, std::int64_t K, bool columns, int V) {
    constexpr std::int64_t per_split = 2048, items = 1024;
    const std::int64_t column_tiles = (M + column_width(M) - 1) / column_width(M);
    std::int64_t splits = columns ? std::clamp<std::int64_t>(std::min((K + 127) / 128, (items + column_tiles - 1) / column_tiles), 1, 1024)
                          : M < 512 ? std::clamp<std::int64_t>(std::min((K + per_split - 1) / per_split, (items + M - 1) / M), 1, 1024)
                                    : 1;
    std::int64_t chunk = (K + splits - 1) / splits;
    chunk = (chunk + V - 1) / V * V;
    if (chunk > 0) splits = std::max<std::int64_t>(1, (K + chunk - 1) / chunk);
    return {splits, chunk};
}

// Scratch from the caching allocator, returned when the reduction has been queued (reused only by
// work queued after it on the same stream).
struct Partials {
    void* p = nullptr;
    Partials(std::size_t bytes, rt::stream_t stream) : p(bytes ? memory::allocate(bytes, stream) : nullptr) {}
    Partials(const Partials&) = delete;
    Partials& operator=(const Partials&) = delete;
    ~Partials() {
        if (p) memory::deallocate(p);
    }
};

// Launches the reduction of `src` into M outputs: the column kernel, or the row kernel (a warp per
// output for short rows, the block for long ones; V-wide loads if V > 1), then the ordered
// combination of the partials when rows are split.
template <int V, class Op, class Src, class I>
void launch_reduction(const Src& src, const Op& op, bool columns, std::int64_t M, std::int64_t K, Splitting sp, Device device,
                      rt::stream_t stream, std::source_location site, typename Op::out_t* out) {
    using A = typename Op::acc_t;
    const Partials partial(sp.splits > 1 ? std::size_t(M * sp.splits) * sizeof(A) : 0, stream);
    A* scratch = static_cast<A*>(partial.p);
    if (columns) {
        const int width = column_width(M);
        const GridDim grid(unsigned(std::clamp<std::int64_t>((M + width - 1) / width * sp.splits, 1, max_blocks(device, 8))), site);
        auto kernel = width == 32 ? kernels::reduce_columns<32, Op, Src, I>
                      : width == 16 ? kernels::reduce_columns<16, Op, Src, I>
                                    : kernels::reduce_columns<4, Op, Src, I>;
        launch(kernel, grid, dim3(256), 0, stream, src, op, I(M), I(K), I(sp.splits), I(sp.chunk), scratch, out);
    } else {
        // A block per output for long rows, a warp for shorter ones, a thread for rows shorter than a
        // warp: the choice depends on K only, so the order of combination on the shape only.
        const int threads_per_output = K >= 1024 ? 256 : K >= 32 ? 32 : 1;
        const std::int64_t items = M * sp.splits, groups = 256 / threads_per_output;
        const GridDim grid(unsigned(std::clamp<std::int64_t>((items + groups - 1) / groups, 1, max_blocks(device, 32))), site);
        auto kernel = threads_per_output == 256 ? kernels::reduce<256, V, Op, Src, I>
                      : threads_per_output == 32 ? kernels::reduce<32, V, Op, Src, I>
                                                 : kernels::reduce<1, V, Op, Src, I>;
        launch(kernel, grid, dim3(256), 0, stream, src, op, I(M), I(K), I(sp.splits), I(sp.chunk), scratch, out);
    }
    if (sp.splits > 1)
        launch(kernels::reduce_partials<Op, I>, GridDim(unsigned(std::clamp<std::int64_t>(M, 1, max_blocks(device, 8))), site), dim3(256), 0,
               stream, scratch, op, I(M), I(sp.splits), K, out);
}

// The launches of a reduction over its iteration ordered kept dims first, [kept..., reduced...]:
// one up to the piece limit (2^31 - 16 elements); else pieces (ops/pieces.hpp) of whole outputs
// while one output's K elements fit in a piece, or pieces inside one output when they do not.
// Each piece of whole outputs is split for its own outputs (split_for), so a piece of few long
// outputs still fills the GPU; one piece is split exactly as the whole reduction was.
struct ReductionPiece {
    Piece box;                  // in the ordered iteration
    std::int64_t first_output;  // flat index of the box's first output
    std::int64_t outputs;       // whole outputs in the box (1 for a piece inside an output)
    std::int64_t first_k;       // position of the box's first element within its output
    std::int64_t k;             // elements per output in the box
};
struct ReductionPieces {
    std::vector<ReductionPiece> pieces;
    bool whole_outputs = true;
};
inline ReductionPieces reduction_pieces(const Shape& kept, const Shape& reduced, std::int64_t K, std::int64_t limit) {
    ReductionPieces r;
    r.whole_outputs = K <= limit;
    Shape ordered = kept;
    for (auto s : reduced) ordered.push_back(s);
    const Shape kept_strides = Layout::contiguous(kept).strides, reduced_strides = Layout::contiguous(reduced).strides;
    const int nk = kept.size();
    auto place = [&](Piece box) {
        std::int64_t outputs = 1;
        Shape kept_origin, reduced_origin;
        for (int d = 0; d < box.shape.size(); ++d) {
            if (d < nk) {
                outputs *= box.shape[d];
                kept_origin.push_back(box.origin[d]);
            } else {
                reduced_origin.push_back(box.origin[d]);
            }
        }
        const std::int64_t k = r.whole_outputs ? K : box.numel;
        r.pieces.push_back({box, offset_of(kept_origin, kept_strides), outputs, offset_of(reduced_origin, reduced_strides), k});
    };
    if (K == 0) {  // outputs of no elements: pieces of the kept dims, each box spanning the (empty) reduced ones
        for_each_piece(kept, limit, [&](const Piece& p) {
            Piece box = p;
            for (auto s : reduced) {
                box.origin.push_back(0);
                box.shape.push_back(s);
            }
            place(box);
        });
    } else {
        for_each_piece(ordered, limit, place);
    }
    return r;
}

// Outputs of K > the piece limit elements: each piece (inside one output) reduces on the block-wide
// row kernel into partial accumulators of its output, every output cut alike (so numbered alike),
// then reduce_partials combines each output's partials in order. Argmax and argmin count positions
// from the piece's first element and move them by index_base as the partials are written.
// with_source(piece, f) calls f with the piece's source.
template <int V, class Op, class I, class WithSource>
void reduce_long_outputs(const ReductionPieces& r, const Op& op, std::int64_t M, std::int64_t K, Device device, rt::stream_t stream,
                         std::source_location site, typename Op::out_t* out, WithSource&& with_source) {
    using A = typename Op::acc_t;
    std::int64_t per_output = 0;
    for (const ReductionPiece& p : r.pieces)
        if (p.first_output == 0) per_output += split_for(1, p.k, false, V).splits;
    const Partials partial(std::size_t(M * per_output) * sizeof(A), stream);
    A* const scratch = static_cast<A*>(partial.p);
    std::int64_t next = 0;
    for (std::size_t i = 0; i < r.pieces.size(); ++i) {
        const ReductionPiece& p = r.pieces[i];
        if (i > 0 && p.first_output != r.pieces[i - 1].first_output) next = 0;
        const Splitting sp = split_for(1, p.k, false, V);
        Op piece_op = op;
        if constexpr (requires { piece_op.index_base; }) piece_op.index_base = p.first_k;
        with_source(p, [&](const auto& src) {
            using Src = std::remove_cvref_t<decltype(src)>;
            launch(kernels::reduce<256, V, Op, Src, I>, GridDim(unsigned(std::clamp<std::int64_t>(sp.splits, 1, max_blocks(device, 32))), site),
                   dim3(256), 0, stream, src, piece_op, I(1), I(p.k), I(sp.splits), I(sp.chunk), scratch + p.first_output * per_output + next,
                   out);
        });
        next += sp.splits;
    }
    launch(kernels::reduce_partials<Op, I>, GridDim(unsigned(std::clamp<std::int64_t>(M, 1, max_blocks(device, 8))), site), dim3(256), 0,
           stream, scratch, op, I(M), I(per_output), K, out);
}

template <class Op, Element T>
Tensor<typename Op::out_t> reduce(const char* name, const Tensor<T>& x, Op op, const Axes& axes, bool keepdim,
                                  std::optional<StreamArg> stream_opt, std::source_location site) {
    using Out = typename Op::out_t;
    require(x.defined(), name, ": an undefined (default-constructed) tensor");
    require(x.space() == MemorySpace::device || x.space() == MemorySpace::managed, name, ": the input is in ",
            space_name(x.space()), " memory; reductions run on a device: move it there first");
    const ReductionPlan plan = plan_reduction(name, x.shape(), axes, keepdim);
    const std::int64_t K = plan.K;
    const Device device = x.device();
    const rt::stream_t stream = stream_for(name, stream_opt, device);
    Tensor<Out> out = empty<Out>(plan.out_shape, TensorOptions{.device = device, .stream = stream});
    const std::int64_t M = out.numel();
    // Before the empty output's return: torch refuses amax over dim 1 of [0, 0] too.
    if constexpr (needs_elements<Op, T>)
        require(K > 0, name, ": the reduced dims of shape ", x.shape(), " are empty, and ", name,
                " of no elements is undefined");
    if (M == 0) return out;

    Shape outer_shape, outer_strides, inner_shape, inner_strides;
    merge_dims(x.shape(), x.strides(), plan.kept, outer_shape, outer_strides);
    merge_dims(x.shape(), x.strides(), plan.reduced, inner_shape, inner_strides);
    // Columns: neighbouring outputs are neighbours in memory and the reduced elements are not.
    const bool columns = outer_strides[outer_strides.size() - 1] == 1 && inner_strides[inner_strides.size() - 1] != 1;
    constexpr int V = int(16 / sizeof(T)) > 1 ? int(16 / sizeof(T)) : 1;
    bool vector = !columns && V > 1 && inner_shape.size() == 1 && inner_strides[0] == 1 && K % V == 0 && aligned(x.data(), 16);
    for (int d = 0; vector && d < outer_strides.size(); ++d) vector = outer_strides[d] % V == 0;

    // The pieces' iteration: the merged kept dims, then the merged reduced dims, each without the
    // [1] that merge_dims gives a side with no dims (a full reduction of a rank-8 tensor would
    // otherwise have 9); a piece's source starts at its box's first element.
    auto dims_of = [](const Shape& merged) { return merged.size() == 1 && merged[0] == 1 ? Shape{} : merged; };
    const Shape kept = dims_of(outer_shape), reduced = dims_of(inner_shape);
    Shape ordered_strides;
    for (int d = 0; d < kept.size(); ++d) ordered_strides.push_back(outer_strides[d]);
    for (int d = 0; d < reduced.size(); ++d) ordered_strides.push_back(inner_strides[d]);
    const ReductionPieces r = reduction_pieces(kept, reduced, K, piece_limit.load(std::memory_order_relaxed));
    using I = std::uint32_t;
    auto with_source = [&](const ReductionPiece& p, auto&& f) {
        kernels::TensorSource<T, I> src{x.data() + offset_of(p.box.origin, ordered_strides),
                                        {outer_shape.size(), inner_shape.size(), {}, {}, {}, {}}};
        for (int d = 0; d < outer_shape.size(); ++d) {
            src.ix.outer_shape[d] = Divisor<I>::of(I(kept.empty() ? 1 : p.box.shape[d]));
            src.ix.outer_stride[d] = outer_strides[d];
        }
        for (int d = 0; d < inner_shape.size(); ++d) {
            src.ix.inner_shape[d] = Divisor<I>::of(I(reduced.empty() ? 1 : p.box.shape[kept.size() + d]));
            src.ix.inner_stride[d] = inner_strides[d];
        }
        f(src);
    };
    DeviceGuard guard(device);
    auto go = [&]<int W>() {
        if (!r.whole_outputs) return reduce_long_outputs<W, Op, I>(r, op, M, K, device, stream, site, out.data(), with_source);
        for (const ReductionPiece& p : r.pieces)
            with_source(p, [&](const auto& src) {
                launch_reduction<W, Op, kernels::TensorSource<T, I>, I>(src, op, columns, p.outputs, K, split_for(p.outputs, K, columns, W),
                                                                     device, stream, site, out.data() + p.first_output);
            });
    };
    if (vector) go.template operator()<V>();
    else go.template operator()<1>();
    return out;
}

// A reduction of an element-wise expression in one pass: each element is computed where the
// reduction reads it (the same values, rounded to the expression's type, as reducing evaluate(expr)).
template <class Op, class E>
Tensor<typename Op::out_t> reduce_expression(const char* name, const E& expr, Op op, const Axes& axes, bool keepdim,
                                             std::optional<StreamArg> stream_opt, std::source_location site) {
    using Out = typename Op::out_t;
    using D = typename E::dtype;
    const Shape shape = expr.shape();
    const ReductionPlan plan = plan_reduction(name, shape, axes, keepdim);
    const std::int64_t K = plan.K;
    std::optional<Device> first;
    expr.visit_leaves([&](const auto& t) {
        if (!first) first = t.device();
    });
    const Device device = *first;
    std::vector<LeafPlan> leaves = leaf_plans(expr, shape, device, "operand 0");
    const rt::stream_t stream = stream_for(name, stream_opt, device);
    Tensor<Out> out = empty<Out>(plan.out_shape, TensorOptions{.device = device, .stream = stream});
    const std::int64_t M = out.numel();
    if constexpr (needs_elements<Op, D>)
        require(K > 0, name, ": the reduced dims of shape ", shape, " are empty, and ", name, " of no elements is undefined");
    if (M == 0) return out;

    // Kept dims first, reduced dims last: element k of output o is then flat element o * K + k.
    std::vector<int> order = plan.kept;
    order.insert(order.end(), plan.reduced.begin(), plan.reduced.end());
    for (LeafPlan& l : leaves) {
        Shape s;
        for (int d : order) s.push_back(l.strides[d]);
        l.strides = s;
    }
    using I = std::uint32_t;
    using Lowered = std::remove_cvref_t<decltype(expr.lower(std::declval<const LeafPlan*&>()))>;
    // The kernel's parameters: the source (expression, K, rank, shape), the op, 4 indices, 2 pointers.
    static_assert(sizeof(kernels::ExpressionSource<D, Lowered, I, false>) + sizeof(Op) + 4 * 8 + 2 * 8 <= kernel_parameter_limit,
                  "tessel: this expression has too many operands for one kernel's parameters (32764 bytes); evaluate "
                  "part of it into a tensor first");
    Shape kept_shape, reduced_shape;
    for (int d : plan.kept) kept_shape.push_back(shape[d]);
    for (int d : plan.reduced) reduced_shape.push_back(shape[d]);
    const ReductionPieces r = reduction_pieces(kept_shape, reduced_shape, K, piece_limit.load(std::memory_order_relaxed));
    // A piece's source: the operands moved to its box's first element and the box's dims coalesced;
    // element j of its output o is flat element o * p.k + j of that iteration.
    auto with_source = [&](const ReductionPiece& p, auto&& f) {
        // One piece (below the limit): the plans themselves, coalesced in place; no copy on this path.
        std::vector<LeafPlan> copy;
        if (r.pieces.size() > 1) copy = leaves;
        std::vector<LeafPlan>& moved = r.pieces.size() > 1 ? copy : leaves;
        for (LeafPlan& l : moved) l.data = static_cast<const char*>(l.data) + offset_of(p.box.origin, l.strides) * std::int64_t(l.element_size);
        const Iteration it = coalesce(p.box.shape, Layout::contiguous(p.box.shape).strides, moved);
        const LeafPlan* next = moved.data();
        const Lowered lowered = expr.lower(next);
        const bool linear = it.shape.size() == 1 &&
                            std::all_of(moved.begin(), moved.end(), [](const LeafPlan& l) { return l.strides[0] == 0 || l.strides[0] == 1; });
        auto make = [&]<bool Linear>() {
            kernels::ExpressionSource<D, Lowered, I, Linear> src{lowered, I(p.k), it.shape.size(), {}};
            for (int d = 0; d < it.shape.size(); ++d) src.shape[d] = Divisor<I>::of(I(it.shape[d]));
            f(src);
        };
        if (linear) make.template operator()<true>();
        else make.template operator()<false>();
    };
    DeviceGuard guard(device);
    if (!r.whole_outputs) {
        reduce_long_outputs<1, Op, I>(r, op, M, K, device, stream, site, out.data(), with_source);
    } else {
        for (const ReductionPiece& p : r.pieces)
            with_source(p, [&](const auto& src) {
                using Src = std::remove_cvref_t<decltype(src)>;
                launch_reduction<1, Op, Src, I>(src, op, false, p.outputs, K, split_for(p.outputs, K, false, 1), device, stream, site,
                                                out.data() + p.first_output);
            });
    }
    return out;
}

// Either kind of input: a tensor, or an expression reduced without materialising it.
template <class Op, class X>
auto reduce_any(const char* name, const X& x, Op op, const Axes& axes, bool keepdim, std::optional<StreamArg> stream,
                std::source_location site) {
    if constexpr (is_tensor<X>) return reduce(name, x, op, axes, keepdim, stream, site);
    else return reduce_expression(name, x, op, axes, keepdim, stream, site);
}

}  // namespace ops::detail

namespace ops {
// What a reduction takes: a tensor, or an element-wise expression (reduced in the same kernel that
// computes it: sum(a * b), amax(abs(x)), mean((a - b) * (a - b)) read a and b once and write nothing else).
template <class X>
concept reducible = is_tensor<X> || node<X>;
template <class X>
using element_of = typename operand_dtype<X>::type;
}  // namespace ops

// sum and prod (integers and bool give int64), mean (integers give float32; no elements give NaN),
// amax and amin (NaN if any), argmax and argmin (flat index within the reduced dims, first on ties),
// all and any (values taken as bool).
#define TESSEL_REDUCTION(fn, ...)                                                                                     \
    template <ops::reducible X>                                                                                      \
    auto fn(const X& x, const Axes& axes = {}, bool keepdim = false, std::optional<StreamArg> stream = {},          \
            std::source_location site = std::source_location::current()) {                                          \
        using T = ops::element_of<X>;                                                                                \
        return ops::detail::reduce_any(#fn, x, __VA_ARGS__{}, axes, keepdim, stream, site);                          \
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
template <ops::reducible X>
auto norm(const X& x, ops::NormOrder p = ops::NormOrder::l2, const Axes& axes = {}, bool keepdim = false,
          std::optional<StreamArg> stream = {}, std::source_location site = std::source_location::current()) {
    using T = ops::element_of<X>;
    switch (p) {
        case ops::NormOrder::l1: return ops::detail::reduce_any("norm", x, ops::NormReducer<T, ops::NormOrder::l1>{}, axes, keepdim, stream, site);
        case ops::NormOrder::inf: return ops::detail::reduce_any("norm", x, ops::NormReducer<T, ops::NormOrder::inf>{}, axes, keepdim, stream, site);
        default: return ops::detail::reduce_any("norm", x, ops::NormReducer<T, ops::NormOrder::l2>{}, axes, keepdim, stream, site);
    }
}
// Variance over the axes: each small group's own mean and squared deviations, merged by Chan's
// pairwise formula (Welford's algorithm); correction 1 divides by n - 1 (unbiased), 0 by n, any
// other c by max(0, n - c) (torch's float correction).
template <ops::reducible X>
auto var(const X& x, const Axes& axes = {}, double correction = 1, bool keepdim = false,
         std::optional<StreamArg> stream = {}, std::source_location site = std::source_location::current()) {
    require(std::isfinite(correction) && correction >= 0, "var: correction ", correction, " must be finite and not negative (1: unbiased, 0: population)");
    return ops::detail::reduce_any("var", x, ops::VarianceReducer<ops::element_of<X>, false>{correction}, axes, keepdim, stream, site);
}
// Standard deviation: the square root of var.
template <ops::reducible X>
auto stddev(const X& x, const Axes& axes = {}, double correction = 1, bool keepdim = false,
            std::optional<StreamArg> stream = {}, std::source_location site = std::source_location::current()) {
    require(std::isfinite(correction) && correction >= 0, "stddev: correction ", correction, " must be finite and not negative (1: unbiased, 0: population)");
    return ops::detail::reduce_any("stddev", x, ops::VarianceReducer<ops::element_of<X>, true>{correction}, axes, keepdim, stream, site);
}

}  // namespace tessel
