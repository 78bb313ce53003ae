// Sorting and scanning along the last axis (another axis is moved there first): sort (stable,
// ascending or descending, with the permutation), argsort, cumsum, cumprod, unique.
// On CUDA these are CUB's device algorithms (radix sort, scan, select) with temporary storage from
// the caching allocator. On the sim they run the C++ library's stable_sort / inclusive_scan on the
// host after synchronising the stream (Thrust's host system was the first choice, but its sequential
// radix sort trips UndefinedBehaviorSanitizer), ordering keys by the same bit patterns radix sort
// uses, so NaNs land where CUB puts them (positive NaN after +inf; -0.0 equals +0.0).
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>
#include <vector>

#include "../core/kernel.hpp"  // first: a host-compiled file of a CUDA build stops here with the compile-as-CUDA message
#if defined(TESSEL_BACKEND_CUDA)
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>
#include <cub/device/device_select.cuh>
#include <cuda/std/functional>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#else
#include <algorithm>
#endif

#include "../memory/allocator.hpp"
#include "assign.hpp"
#include "copy.hpp"
#include "reducers.hpp"

namespace tessel {

// A sorted tensor and, for each of its elements, the position along the sorted axis it came from.
template <Element T>
struct Sorted {
    Tensor<T> values;
    Tensor<std::int64_t> indices;
};

namespace ops::detail {

// Scratch memory from the caching allocator for one CUB call, released once queued.
class CubScratch {
public:
    CubScratch(std::size_t bytes, rt::stream_t stream) : p_(bytes ? memory::allocate(bytes, stream) : nullptr) {}
    ~CubScratch() {
        if (p_) memory::deallocate(p_);
    }
    CubScratch(const CubScratch&) = delete;
    CubScratch& operator=(const CubScratch&) = delete;
    void* get() const { return p_; }

private:
    void* p_;
};

template <Element T>
void require_sortable(const char* name, const Tensor<T>& x) {
    require(x.defined() && (x.space() == MemorySpace::device || x.space() == MemorySpace::managed), name,
            ": needs a device tensor");
    require(!(std::is_same_v<T, __nv_fp8_e4m3> || std::is_same_v<T, __nv_fp8_e5m2>), name,
            ": fp8 keys are not supported; convert with cast_to<__half>(...) first");
    require(x.numel() < std::numeric_limits<std::int32_t>::max(), name, ": ", x.numel(),
            " elements; sorting is limited to 2^31 - 1 (CUB's segmented sort counts in int)");
}

// x with `axis` moved last (rows of the last dim), as a view.
template <Element T>
Tensor<T> rows_view(const char* name, const Tensor<T>& x, int axis, rt::stream_t stream) {
    // A scalar has the axes 0 and -1, as in PyTorch (and tessel's transpose and squeeze).
    const int rank = std::max(x.dim(), 1);
    const int a = axis < 0 ? axis + rank : axis;
    require(a >= 0 && a < rank, name, ": axis ", axis, " out of range for shape ", x.shape());
    if (x.dim() == 0) return x.reshape({1}, stream);
    return a == x.dim() - 1 ? x : x.transpose(a, x.dim() - 1);
}
// The same as a contiguous tensor (x itself where it already is one).
template <Element T>
Tensor<T> rows_of(const char* name, const Tensor<T>& x, int axis, rt::stream_t stream) {
    return rows_view(name, x, axis, stream).to(TensorOptions{.device = x.device(), .stream = stream, .non_blocking = true});
}
// Undoes rows_of for a result r of the same shape: the last axis goes back to `axis` of a tensor of rank `rank`.
template <Element T>
Tensor<T> rows_back(const Tensor<T>& r, int rank, int axis, rt::stream_t stream) {
    if (rank == 0) return r.reshape({});
    const int a = axis < 0 ? axis + rank : axis;
    return a == rank - 1 ? r : r.transpose(a, rank - 1).to({.device = r.device(), .stream = stream, .non_blocking = true});
}

#if defined(TESSEL_BACKEND_CUDA)
// Scan helpers at namespace scope: CUDA does not instantiate kernels with types local to a function.
struct RowOf {
    std::int64_t cols;
    __host__ __device__ std::int64_t operator()(std::int64_t i) const { return i / cols; }
};
template <class A>
struct MultiplyOp {
    __host__ __device__ A operator()(A a, A b) const { return wrapping_mul(a, b); }
};
template <class A>
struct AddOp {
    __host__ __device__ A operator()(A a, A b) const { return wrapping_add(a, b); }
};
#endif

#if !defined(TESSEL_BACKEND_CUDA)
// The unsigned bit pattern radix sort orders by: floats with the sign flipped (all bits for
// negatives), -0.0 as +0.0; signed integers with the sign bit flipped; descending inverts it.
template <class T>
auto radix_key(T v, bool descending) {
    using U = std::conditional_t<sizeof(T) == 1, std::uint8_t,
                                 std::conditional_t<sizeof(T) == 2, std::uint16_t, std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>>>;
    U u;
    std::memcpy(&u, &v, sizeof u);
    constexpr U top = U(U(1) << (8 * sizeof(U) - 1));
    if constexpr (is_float_type<T>) {
        if (u == top) u = 0;  // -0.0
        u = (u & top) ? U(~u) : U(u | top);
    } else if constexpr (std::is_signed_v<T>) {
        u = U(u ^ top);
    }
    return descending ? U(~u) : u;
}
#endif

// sort and argsort, which `name` names in errors.
template <Element T>
Sorted<T> sort_along(const char* name, const Tensor<T>& x, int axis, bool descending, std::optional<StreamArg> stream_opt) {
    ops::detail::require_sortable(name, x);
    const rt::stream_t stream = stream_for(name, stream_opt, x.device());
    DeviceGuard guard(x.device());
    Tensor<T> in;
    if constexpr (ops::is_float_type<T>) {
        // Radix order puts a NaN with the sign bit set (x86's 0/0, or -nan) before -inf; torch puts
        // every NaN last (first descending). The copy into rows makes each NaN the positive quiet
        // NaN, whose place is that on both backends: one pass, as the plain copy would be.
        const Tensor<T> rows = ops::detail::rows_view(name, x, axis, stream);
        in = empty<T>(rows.shape(), {.device = x.device(), .stream = stream});
        (in = where(isnan(rows), std::numeric_limits<double>::quiet_NaN(), rows)).run(stream);
    } else {
        in = ops::detail::rows_of(name, x, axis, stream);
    }
    const std::int64_t cols = in.dim() ? in.shape()[in.dim() - 1] : 1, n = in.numel(), rows = cols ? n / cols : 0;
    Tensor<T> keys = empty<T>(in.shape(), {.device = x.device(), .stream = stream});
    Tensor<std::int64_t> idx = empty<std::int64_t>(in.shape(), {.device = x.device(), .stream = stream});
    if (n > 0) {
#if defined(TESSEL_BACKEND_CUDA)
        // Values start as 0..cols-1 per row: the position within the row.
        Tensor<std::int64_t> iota = empty<std::int64_t>({cols}, {.device = x.device(), .stream = stream});
        {
            std::vector<std::int64_t> h(static_cast<std::size_t>(cols));
            std::iota(h.begin(), h.end(), 0);
            rt::memcpy_async(iota.data(), h.data(), h.size() * sizeof(std::int64_t), stream);
            rt::stream_synchronize(stream);  // the pageable source must outlive the copy
        }
        Tensor<std::int64_t> values_in = evaluate(iota.expand(in.shape()) + 0, stream);
        std::vector<int> off(static_cast<std::size_t>(rows + 1));
        for (std::size_t r = 0; r < off.size(); ++r) off[r] = int(std::int64_t(r) * cols);
        const Tensor<int> offsets = from_host<int>(std::span<const int>(off), {rows + 1}, {.device = x.device(), .stream = stream});
        std::size_t bytes = 0;
        auto call = [&](void* temp) {
            if (descending)
                return cub::DeviceSegmentedRadixSort::SortPairsDescending(temp, bytes, in.data(), keys.data(), values_in.data(), idx.data(),
                                                                         int(n), int(rows), offsets.data(), offsets.data() + 1, 0,
                                                                         int(sizeof(T) * 8), stream);
            return cub::DeviceSegmentedRadixSort::SortPairs(temp, bytes, in.data(), keys.data(), values_in.data(), idx.data(), int(n),
                                                            int(rows), offsets.data(), offsets.data() + 1, 0, int(sizeof(T) * 8), stream);
        };
        TESSEL_CUDA_CHECK(call(nullptr));
        ops::detail::CubScratch temp(bytes, stream);
        TESSEL_CUDA_CHECK(call(temp.get()));
        rt::stream_synchronize(stream);  // the host offsets above and the scratch go out of scope
#else
        rt::stream_synchronize(stream);
        std::vector<decltype(ops::detail::radix_key(T{}, false))> k(static_cast<std::size_t>(cols));
        for (std::int64_t r = 0; r < rows; ++r) {
            const T* src = in.data() + r * cols;
            std::int64_t* ix = idx.data() + r * cols;
            for (std::int64_t c = 0; c < cols; ++c) k[std::size_t(c)] = ops::detail::radix_key(src[c], descending), ix[c] = c;
            std::stable_sort(ix, ix + cols, [&](std::int64_t a, std::int64_t b) { return k[std::size_t(a)] < k[std::size_t(b)]; });
            for (std::int64_t c = 0; c < cols; ++c) keys.data()[r * cols + c] = src[ix[c]];
        }
#endif
    }
    return {ops::detail::rows_back(keys, x.dim(), axis, stream), ops::detail::rows_back(idx, x.dim(), axis, stream)};
}
}  // namespace ops::detail

// x sorted along `axis` (stable), with the original positions.
template <Element T>
Sorted<T> sort(const Tensor<T>& x, int axis = -1, bool descending = false, std::optional<StreamArg> stream = {}) {
    return ops::detail::sort_along("sort", x, axis, descending, stream);
}
// The positions that sort x along `axis` (stable).
template <Element T>
Tensor<std::int64_t> argsort(const Tensor<T>& x, int axis = -1, bool descending = false, std::optional<StreamArg> stream = {}) {
    return ops::detail::sort_along("argsort", x, axis, descending, stream).indices;
}

namespace ops::detail {
template <Element T, bool Product>
auto scan(const char* name, const Tensor<T>& x, int axis, std::optional<StreamArg> stream_opt) {
    using Out = std::conditional_t<is_float_type<T>, T, std::int64_t>;
    using Acc = reduce_acc_t<T>;
    require(x.defined() && (x.space() == MemorySpace::device || x.space() == MemorySpace::managed), name, ": needs a device tensor");
    const rt::stream_t stream = stream_for(name, stream_opt, x.device());
    DeviceGuard guard(x.device());
    const Tensor<T> in = rows_of(name, x, axis, stream);
    Tensor<Acc> acc = evaluate(cast_to<Acc>(in), stream);
    const std::int64_t cols = in.shape()[in.dim() - 1], n = in.numel();
    if (n > 0) {
#if defined(TESSEL_BACKEND_CUDA)
        const auto row_keys = thrust::make_transform_iterator(thrust::counting_iterator<std::int64_t>(0), RowOf{cols});
        std::size_t bytes = 0;
        auto call = [&](void* temp) {
            if constexpr (Product)
                return cub::DeviceScan::InclusiveScanByKey(temp, bytes, row_keys, acc.data(), acc.data(), MultiplyOp<Acc>{}, n,
                                                           ::cuda::std::equal_to<>{}, stream);
            else
                return cub::DeviceScan::InclusiveScanByKey(temp, bytes, row_keys, acc.data(), acc.data(), AddOp<Acc>{}, n,
                                                           ::cuda::std::equal_to<>{}, stream);
        };
        TESSEL_CUDA_CHECK(call(nullptr));
        CubScratch temp(bytes, stream);
        TESSEL_CUDA_CHECK(call(temp.get()));
#else
        rt::stream_synchronize(stream);
        for (std::int64_t r = 0; r < n / cols; ++r) {
            Acc* row = acc.data() + r * cols;
            if constexpr (Product) std::inclusive_scan(row, row + cols, row, [](Acc a, Acc b) { return wrapping_mul(a, b); });
            else std::inclusive_scan(row, row + cols, row, [](Acc a, Acc b) { return wrapping_add(a, b); });
        }
#endif
    }
    Tensor<Out> out;
    if constexpr (std::is_same_v<Out, Acc>) out = acc;
    else out = evaluate(cast_to<Out>(acc), stream);
    return rows_back(out, x.dim(), axis, stream);
}
}  // namespace ops::detail

// Running sums along `axis` (integers and bool give int64; float16/bfloat16 accumulate in float).
template <Element T>
auto cumsum(const Tensor<T>& x, int axis = -1, std::optional<StreamArg> stream = {}) {
    return ops::detail::scan<T, false>("cumsum", x, axis, stream);
}
// Running products along `axis`.
template <Element T>
auto cumprod(const Tensor<T>& x, int axis = -1, std::optional<StreamArg> stream = {}) {
    return ops::detail::scan<T, true>("cumprod", x, axis, stream);
}

// The distinct values of x in ascending order (1-d). Waits for the count to size the result.
template <Element T>
Tensor<T> unique(const Tensor<T>& x, std::optional<StreamArg> stream_opt = {}) {
    ops::detail::require_sortable("unique", x);
    const rt::stream_t stream = stream_for("unique", stream_opt, x.device());
    DeviceGuard guard(x.device());
    const Tensor<T> sorted = sort(x.reshape({x.numel()}, stream), -1, false, stream).values;
    Tensor<T> out = empty<T>({x.numel()}, {.device = x.device(), .stream = stream});
    std::int64_t count = 0;
    if (x.numel() > 0) {
#if defined(TESSEL_BACKEND_CUDA)
        Tensor<std::int64_t> d_count = empty<std::int64_t>({}, {.device = x.device(), .stream = stream});
        std::size_t bytes = 0;
        TESSEL_CUDA_CHECK(cub::DeviceSelect::Unique(nullptr, bytes, sorted.data(), out.data(), d_count.data(), x.numel(), stream));
        ops::detail::CubScratch temp(bytes, stream);
        TESSEL_CUDA_CHECK(cub::DeviceSelect::Unique(temp.get(), bytes, sorted.data(), out.data(), d_count.data(), x.numel(), stream));
        count = d_count.item();
#else
        rt::stream_synchronize(stream);
        std::memcpy(out.data(), sorted.data(), std::size_t(x.numel()) * sizeof(T));
        // As CUB's Unique, by ==: -0.0 and +0.0 are one value, and every NaN is distinct (even of the same bits).
        auto same = [](const T& a, const T& b) {
            const double av = static_cast<double>(a);
            return av == av && ops::detail::radix_key(a, false) == ops::detail::radix_key(b, false);
        };
        count = std::unique(out.data(), out.data() + x.numel(), same) - out.data();
#endif
    }
    return out.narrow(0, 0, count);
}

}  // namespace tessel
