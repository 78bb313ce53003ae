// Evaluating an expression: `(c = expr).run(stream)` checks shapes, devices and aliasing, merges
// dims that every operand walks contiguously, lowers the host tree to a device tree and launches ONE
// kernel (kernels/tessel/kernels/expression.cuh): the vectorised contiguous kernel when every
// operand is contiguous (or a broadcast scalar) and aligned, the row kernel for row broadcasts,
// else the strided kernel. Iterations of 2^31 elements or more run as a few launches of the same
// 32-bit-indexed kernels (ops/pieces.hpp).
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <limits>
#include <source_location>
#include <string>
#include <utility>
#include <vector>

#include <tessel/kernels/expression.cuh>

#include "../runtime/launch.hpp"
#include "expression.hpp"
#include "pieces.hpp"

namespace tessel::ops {

// The most bytes of kernel parameters a launch may pass (CUDA 12.1+ on Volta and newer).
inline constexpr std::size_t kernel_parameter_limit = 32764;

namespace detail {

// The iteration an evaluation launches: shape over the coalesced dims and the output's strides;
// each leaf's strides are in its LeafPlan.
struct Iteration {
    Shape shape;
    Shape out_strides;
};

// Strides of `l` read as a tensor of shape `to` (right-aligned broadcasting: stride 0 where l has
// size 1 or lacks the dim).
inline Shape broadcast_strides(const Layout& l, const Shape& to) {
    Shape s;
    for (int d = 0; d < to.size(); ++d) {
        const int k = l.rank() - to.size() + d;
        s.push_back(k >= 0 && l.shape[k] != 1 ? l.strides[k] : 0);
    }
    return s;
}

// Drops size-1 dims and merges neighbours that every operand walks as one (outer stride equals
// inner stride times inner size). Rank 0 becomes one dim of size 1.
inline Iteration coalesce(const Shape& shape, const Shape& out_strides, std::vector<LeafPlan>& leaves) {
    Iteration it;
    std::vector<Shape> leaf_strides(leaves.size());
    for (int d = 0; d < shape.size(); ++d) {
        if (shape[d] == 1) continue;
        const int last = it.shape.size() - 1;
        bool merge = last >= 0 && it.out_strides[last] == out_strides[d] * shape[d];
        for (std::size_t k = 0; merge && k < leaves.size(); ++k)
            merge = leaf_strides[k][last] == leaves[k].strides[d] * shape[d];
        if (merge) {
            it.shape[last] *= shape[d];
            it.out_strides[last] = out_strides[d];
            for (std::size_t k = 0; k < leaves.size(); ++k) leaf_strides[k][last] = leaves[k].strides[d];
        } else {
            it.shape.push_back(shape[d]);
            it.out_strides.push_back(out_strides[d]);
            for (std::size_t k = 0; k < leaves.size(); ++k) leaf_strides[k].push_back(leaves[k].strides[d]);
        }
    }
    if (it.shape.empty()) {
        it.shape.push_back(1);
        it.out_strides.push_back(1);
        for (auto& s : leaf_strides) s.push_back(0);
    }
    for (std::size_t k = 0; k < leaves.size(); ++k) leaves[k].strides = leaf_strides[k];
    return it;
}

// A device attribute, asked once per device.
template <cudaDeviceAttr Attribute>
int device_attribute(Device d) {
    static std::array<std::atomic<int>, 64> cache{};
    auto& slot = cache[std::size_t(d.index) % cache.size()];
    int v = slot.load(std::memory_order_relaxed);
    if (v == 0 || d.index >= int(cache.size())) {
        TESSEL_CUDA_CHECK(rt::api::cudaDeviceGetAttribute(&v, Attribute, d.index));
        if (d.index < int(cache.size())) slot.store(v, std::memory_order_relaxed);
    }
    return v;
}

// Raises Kernel's dynamic shared memory limit to `bytes` on device d the first time only: the
// attribute lives in the device's context, and a driver call on every launch costs more than the
// launch of a short row batch.
template <auto Kernel>
void allow_dynamic_smem(Device d, int bytes) {
    static std::array<std::atomic<int>, 64> raised{};
    if (d.index >= int(raised.size())) return rt::set_max_dynamic_smem(Kernel, bytes);
    auto& slot = raised[std::size_t(d.index)];
    if (slot.load(std::memory_order_acquire) >= bytes) return;
    rt::set_max_dynamic_smem(Kernel, bytes);
    slot.store(bytes, std::memory_order_release);
}
inline int multiprocessors(Device d) { return device_attribute<cudaDevAttrMultiProcessorCount>(d); }

// The most blocks a grid-stride kernel gets: `per_sm` per multiprocessor on a GPU; on the sim, whose
// blocks run on a few worker threads, 2 per simulated SM (more blocks only add per-block cost, which
// ThreadSanitizer builds pay heavily).
inline std::int64_t max_blocks(Device d, int per_sm) {
    return std::int64_t(multiprocessors(d)) * (backend == Backend::sim ? 2 : per_sm);
}

// The tensor operands of `expr`, read as tensors of `shape`; each must be in device (or managed)
// memory on `device` (`device_of` names what decided the device, for the message).
template <class E>
std::vector<LeafPlan> leaf_plans(const E& expr, const Shape& shape, Device device, const char* device_of) {
    std::vector<LeafPlan> leaves;
    leaves.reserve(std::size_t(E::leaf_count));
    int operand = 0;
    expr.visit_leaves([&](const auto& t) {
        using T = typename std::remove_cvref_t<decltype(t)>::value_type;
        require(t.space() == MemorySpace::device || t.space() == MemorySpace::managed, "expression operand ", operand, " (",
                dtype_traits<T>::name, ", shape ", t.shape(), ") is in ", space_name(t.space()),
                " memory; move it to the device first (.to(MemorySpace::device))");
        require(t.device() == device, "expression operand ", operand, " is on ", backend_name, ":", t.device().index, " but ",
                device_of, " is on ", backend_name, ":", device.index, "; copy it with .to({.device = ...}) first");
        leaves.push_back(LeafPlan{t.storage().get(), t.layout(), broadcast_strides(t.layout(), shape), t.data(), sizeof(T),
                                  dtype_traits<T>::name});
        ++operand;
    });
    return leaves;
}

inline bool aligned(const void* p, std::size_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }

// The checks of an assignment's output, the same for every element and expression type, so they
// are compiled once rather than once per expression: memory space, stream, broadcasting, distinct
// elements. Returns the stream to launch on.
inline rt::stream_t check_assignment_output(const Layout& out, Device device, MemorySpace space, const Shape& expr_shape,
                                            StreamArg chosen) {
    const Shape& shape = out.shape;
    require(space == MemorySpace::device || space == MemorySpace::managed, "expression assignment: the output is in ",
            space_name(space), " memory; expressions run on a device: write into a device or managed tensor");
    const rt::stream_t stream = stream_for("expression assignment", chosen, device);
    {
        const int extra = shape.size() - expr_shape.size();
        bool ok = extra >= 0;
        for (int d = 0; ok && d < expr_shape.size(); ++d) ok = expr_shape[d] == 1 || expr_shape[d] == shape[d + extra];
        require(ok, "expression assignment: an expression of shape ", expr_shape,
                " does not broadcast to the output's shape ", shape);
    }
    for (int d = 0; d < shape.size(); ++d)
        require(shape[d] <= 1 || out.strides[d] != 0, "expression assignment: the output (shape ", shape,
                ", strides ", out.strides, ") repeats elements along dim ", d,
                " (a broadcast view); write into a tensor whose elements are distinct");
    require(::tessel::detail::distinct_elements(out), "expression assignment: the output (shape ", shape, ", strides ",
            out.strides, ") ", ::tessel::detail::repeated_elements_text(out), " (an overlapping view), so threads "
            "would race to write them; write into a tensor whose elements are distinct");
    return stream;
}

// How an evaluation runs: the coalesced iteration, which kernel, the grid's cap, and the piece limit.
struct EvaluationPlan {
    Iteration it;
    std::int64_t cap = 1;    // most blocks per launch
    std::int64_t limit = 0;  // most elements per launch (ops/pieces.hpp)
    bool contiguous = false, rows = false, vector = false;
    std::vector<const void*> first;  // the operands' first elements, where there is more than one piece
};

// Plans the evaluation of operands `leaves` into `out` (first element `out_data`, elements of
// `out_size` bytes) with `V`-wide vectors, after refusing an operand that overlaps the output other
// than element for element; coalesces the leaves' strides. Independent of the types, as above.
inline EvaluationPlan plan_evaluation(const void* out_data, const Layout& out, std::size_t out_size, int V,
                                      std::vector<LeafPlan>& leaves, Device device) {
    const Shape& shape = out.shape;
    // An operand in the output's memory is safe only when each element is read where it is written.
    for (std::size_t k = 0; k < leaves.size(); ++k) {
        const LeafPlan& l = leaves[k];
        if (l.layout.numel() == 0) continue;  // other storages too: two tensors may wrap the same memory (from_blob)
        // Reading exactly the elements being written (the operand's strides broadcast to the output's shape).
        if (l.element_size == out_size && ::tessel::detail::same_elements(out_data, out.strides, l.data, l.strides, shape)) continue;
        const auto sharing = ::tessel::detail::memory_sharing(out_data, out, out_size, l.data, l.layout, l.element_size);
        require(sharing == ::tessel::detail::Sharing::none, "expression assignment: operand ", k, " (", l.dtype, ", shape ",
                l.layout.shape, ", strides ", l.layout.strides, ") ", ::tessel::detail::overlap_verb(sharing, true),
                " the output at other positions (shape ", shape, ", strides ",
                out.strides, "), so elements would be read after being overwritten; pass a copy of it (.clone())");
    }
    EvaluationPlan plan;
    plan.it = coalesce(shape, out.strides, leaves);
    const Iteration& it = plan.it;
    plan.cap = max_blocks(device, 32);
    plan.limit = piece_limit.load(std::memory_order_relaxed);
    plan.contiguous = it.shape.size() == 1 && it.out_strides[0] == 1 &&
                      std::all_of(leaves.begin(), leaves.end(), [](const LeafPlan& l) { return l.strides[0] == 0 || l.strides[0] == 1; });
    // Rank 2 with every column stride 0 or 1 and every row start aligned to V: the row kernel.
    plan.rows = V > 1 && !plan.contiguous && it.shape.size() == 2 && it.shape[1] >= V && it.shape[1] <= plan.limit &&
                it.out_strides[1] == 1 && it.out_strides[0] % V == 0 && aligned(out_data, std::size_t(V) * out_size);
    for (const LeafPlan& l : leaves)
        plan.rows = plan.rows && (l.strides[1] == 0 || (l.strides[1] == 1 && l.strides[0] % V == 0 &&
                                                        aligned(l.data, std::size_t(V) * l.element_size)));
    plan.vector = plan.contiguous && V > 1 && aligned(out_data, std::size_t(V) * out_size);
    for (const LeafPlan& l : leaves) plan.vector = plan.vector && (l.strides[0] == 0 || aligned(l.data, std::size_t(V) * l.element_size));
    // One launch per piece (one in all up to 2^31 - 16 elements): the operands' pointers moved to the
    // piece's first element; a piece of a flat iteration starts on a multiple of 16 elements, so the
    // alignment found above holds for every piece.
    // (The first pointers are kept only when there is more than one piece: no allocation otherwise.)
    if (out.numel() > plan.limit)
        for (const LeafPlan& l : leaves) plan.first.push_back(l.data);
    return plan;
}

// Points the leaves at the first elements of piece `p` (a no-op with one piece: `first` is empty).
inline void move_to_piece(std::vector<LeafPlan>& leaves, const std::vector<const void*>& first, const Piece& p) {
    for (std::size_t k = 0; k < first.size(); ++k)
        leaves[k].data = static_cast<const char*>(first[k]) + offset_of(p.origin, leaves[k].strides) * std::int64_t(leaves[k].element_size);
}

// Blocks of `threads` for `work` items, at least one and at most `cap` (max_blocks: at least one).
inline unsigned blocks_for_work(std::int64_t work, unsigned threads, std::int64_t cap) {
    return unsigned(std::clamp<std::int64_t>((work + threads - 1) / threads, 1, cap));
}

}  // namespace detail

// `out = expr`, not yet computed: run() evaluates it. Returned by Tensor's `=` and the compound
// assignments for an expression; discarding it without run() computes nothing (hence nodiscard).
template <Element Out, class E>
class [[nodiscard("an expression assignment computes nothing until .run(stream) is called")]] Assignment {
    using D = typename E::dtype;
    static_assert(!(is_float_type<D> && !is_float_type<Out>),
                  "tessel: assigning a floating-point expression to an integer or bool tensor; wrap it in "
                  "tessel::cast_to<T>(...) to convert explicitly");
    static_assert(!(is_bool_type<Out> && !is_bool_type<D>),
                  "tessel: assigning a non-bool expression to a bool tensor; compare it (x != 0) or use cast_to<bool>(...)");

public:
    Assignment(Tensor<Out> out, E expr) : out_(std::move(out)), expr_(std::move(expr)) {}

    // Queues the evaluation on `stream` (one kernel) and returns. Reading the output on another
    // stream, or freeing inputs used on a stream other than the one they were allocated on, needs the
    // usual ordering (events, record_stream), as with any kernel.
    // A Stream must be of the output's device (its default stream included).
    void run(StreamArg stream, std::source_location site = std::source_location::current()) const;
    // On the current stream of the output's device.
    void run(std::source_location site = std::source_location::current()) const { run(StreamArg(current_stream(out_.device())), site); }

private:
    Tensor<Out> out_;
    E expr_;
};

template <Element Out, class E>
void Assignment<Out, E>::run(StreamArg chosen, std::source_location site) const {
    require(out_.defined(), "expression assignment: the output is an undefined (default-constructed) tensor");
    const Device device = out_.device();
    const rt::stream_t stream = detail::check_assignment_output(out_.layout(), device, out_.space(), expr_.shape(), chosen);
    std::vector<LeafPlan> leaves = detail::leaf_plans(expr_, out_.shape(), device, "the output");
    if (out_.numel() == 0) return;

    using Lowered = std::remove_cvref_t<decltype(expr_.lower(std::declval<const LeafPlan*&>()))>;
    static_assert(sizeof(Lowered) + sizeof(kernels::StridedOutput<Out, std::uint32_t>) + 8 <= kernel_parameter_limit,
                  "tessel: this expression has too many operands for one kernel's parameters (32764 bytes); evaluate "
                  "part of it into a tensor first");
    constexpr int V = int(16 / std::max(sizeof(Out), E::widest)) > 0 ? int(16 / std::max(sizeof(Out), E::widest)) : 1;
    const detail::EvaluationPlan plan = detail::plan_evaluation(out_.data(), out_.layout(), sizeof(Out), V, leaves, device);
    const detail::Iteration& it = plan.it;
    constexpr unsigned threads = 256;
    using I = std::uint32_t;
    DeviceGuard guard(device);
    detail::for_each_piece(it.shape, plan.limit, [&](const detail::Piece& p) {
        detail::move_to_piece(leaves, plan.first, p);
        Out* const o = out_.data() + detail::offset_of(p.origin, it.out_strides);
        const LeafPlan* next = leaves.data();
        const Lowered lowered = expr_.lower(next);
        const std::int64_t count = p.numel;
        if (plan.rows) {
            const std::int64_t chunks_per_row = (p.shape[1] + V - 1) / V, chunks = p.shape[0] * chunks_per_row;
            launch(kernels::evaluate_rows<V, Out, Lowered, I>, GridDim(detail::blocks_for_work(chunks, threads, plan.cap), site),
                   dim3(threads), 0, stream, o, it.out_strides[0], lowered, I(p.shape[1]), Divisor<I>::of(I(chunks_per_row)), I(chunks));
        } else if (plan.vector) {
            launch(kernels::evaluate_contiguous<V, Out, Lowered, I>, GridDim(detail::blocks_for_work(count / V + 1, threads, plan.cap), site),
                   dim3(threads), 0, stream, o, lowered, I(count));
        } else if (plan.contiguous) {
            launch(kernels::evaluate_contiguous<1, Out, Lowered, I>, GridDim(detail::blocks_for_work(count, threads, plan.cap), site),
                   dim3(threads), 0, stream, o, lowered, I(count));
        } else {
            kernels::StridedOutput<Out, I> so{o, p.shape.size(), {}, {}};
            for (int d = 0; d < p.shape.size(); ++d) {
                so.shape[d] = Divisor<I>::of(I(p.shape[d]));
                so.stride[d] = it.out_strides[d];
            }
            launch(kernels::evaluate_strided<Out, Lowered, I>, GridDim(detail::blocks_for_work(count, threads, plan.cap), site),
                   dim3(threads), 0, stream, so, lowered, I(count));
        }
    });
    out_.storage()->note_write(stream, out_.device());
}

}  // namespace tessel::ops

namespace tessel {

template <Element T>
template <class E>
    requires std::is_base_of_v<Expression<E>, E>
ops::Assignment<T, E> Tensor<T>::operator=(const E& expr) const {
    return ops::Assignment<T, E>(*this, expr);
}
template <Element T>
template <class E>
    requires std::is_base_of_v<Expression<E>, E>
ops::Assignment<T, E> Tensor<T>::operator=(const E& expr) {
    return ops::Assignment<T, E>(*this, expr);
}

template <Element T>
template <Element U>
ops::Assignment<T, ops::TensorRef<U>> Tensor<T>::operator=(const Tensor<U>& source) && {
    return ops::Assignment<T, ops::TensorRef<U>>(*this, ops::TensorRef<U>(source));
}

template <Element T>
template <class E>
    requires std::is_base_of_v<Expression<E>, E>
Tensor<T>::Tensor(const E& expr) {
    std::optional<Device> device;
    expr.visit_leaves([&](const auto& t) {
        if (!device) device = t.device();
    });
    const TensorOptions o{.space = MemorySpace::device, .device = device};
    *this = empty<T>(expr.shape(), o);
    ops::Assignment<T, E>(*this, expr).run(o.resolved_stream());
}

#define TESSEL_COMPOUND_ASSIGNMENT(op, binary)                                       \
    template <Element T, class B>                                                    \
        requires ops::operand<B>                                                     \
    auto operator op(const Tensor<T>& t, const B& b) {                               \
        auto e = t binary b;                                                         \
        return ops::Assignment<T, decltype(e)>(t, std::move(e));                     \
    }
TESSEL_COMPOUND_ASSIGNMENT(+=, +)
TESSEL_COMPOUND_ASSIGNMENT(-=, -)
TESSEL_COMPOUND_ASSIGNMENT(*=, *)
TESSEL_COMPOUND_ASSIGNMENT(/=, /)
TESSEL_COMPOUND_ASSIGNMENT(%=, %)
#undef TESSEL_COMPOUND_ASSIGNMENT

// A new tensor holding `expr` (its promoted element type and broadcast shape), on the device of
// its first tensor operand, computed by one kernel on `stream` (default: that device's current stream).
template <class E>
    requires std::is_base_of_v<Expression<E>, E>
Tensor<typename E::dtype> evaluate(const E& expr, std::optional<StreamArg> stream = std::nullopt,
                                   std::source_location site = std::source_location::current()) {
    std::optional<Device> device;
    expr.visit_leaves([&](const auto& t) {
        if (!device) device = t.device();
    });
    TensorOptions o{.space = MemorySpace::device, .device = device, .stream = stream};
    Tensor<typename E::dtype> out = empty<typename E::dtype>(expr.shape(), o);
    ops::Assignment<typename E::dtype, E>(out, expr).run(o.resolved_stream(), site);
    return out;
}

}  // namespace tessel
