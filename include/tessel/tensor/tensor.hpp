// Tensor<T>: an N-d array (rank 0..8) in device, host or pinned memory: a Layout (shape, strides in
// elements, offset) over refcounted Storage. Copies are cheap views of the same memory; clone()
// copies the data. Views never copy; reshape() copies only when a view is impossible.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <limits>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <concepts>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../stream/stream.hpp"
#include "device_paths.hpp"
#include "dtype.hpp"
#include "layout.hpp"
#include "overlap.hpp"
#include "storage.hpp"

namespace tessel {

template <class Derived>
struct Expression;
namespace ops {
template <Element Out, class E>
class Assignment;
template <Element T>
struct TensorRef;
}

// Where and on which stream a new tensor is made.
struct TensorOptions {
    MemorySpace space = MemorySpace::device;
    std::optional<Device> device = {};        // default: the current device
    std::optional<StreamArg> stream = {};     // default: the current stream of that device
    // Copies (to, clone) involving host, pinned or managed memory return once queued instead of
    // once done: synchronise the stream before reading a host result. Only contiguous copies
    // involving device or pinned memory can be asynchronous; others complete before returning.
    // Copies between device memory of one device always return once queued (torch's device copies).
    bool non_blocking = false;

    Device resolved_device() const { return device ? *device : current_device(); }
    // The stream given (which must be of the tensor's device) or that device's current stream.
    rt::stream_t resolved_stream() const { return stream_for("TensorOptions", stream, resolved_device()); }
};

template <Element T>
class Tensor {
public:
    using value_type = T;

    Tensor() = default;  // undefined: no storage; most operations throw
    Tensor(const Tensor&) = default;
    Tensor(Tensor&&) noexcept = default;
    // Assigning a Tensor to a named tensor rebinds the handle (no data is copied), as copying one does.
    Tensor& operator=(const Tensor&) & = default;
    Tensor& operator=(Tensor&&) & noexcept = default;
    // Assigning a Tensor to a temporary, a view (`x.select(0, 1) = y`), prepares the element-wise
    // copy as an expression does: `(x.select(0, 1) = y).run(s)` (libtorch copies at once there; here
    // on the stream .run names). Rebinding a temporary would silently do nothing.
    template <Element U>
    ops::Assignment<T, ops::TensorRef<U>> operator=(const Tensor<U>& source) &&;
    // Assigning an expression prepares `this = expr` element-wise; `.run(stream)` computes it in one
    // kernel (include <tessel/ops/assign.hpp>). Works on views: (t.slice(0, 0, 4) = x * 2).run(s).
    template <class E>
        requires std::is_base_of_v<Expression<E>, E>
    ops::Assignment<T, E> operator=(const E& expr) const;
    // The same for a non-const tensor: an exact match, so `t = expr` never considers converting expr
    // to a Tensor (the converting constructor below) and rebinding.
    template <class E>
        requires std::is_base_of_v<Expression<E>, E>
    ops::Assignment<T, E> operator=(const E& expr);
    // `Tensor<float> d = a * b + 1;` evaluates the expression into a new tensor on the current stream
    // of its device, as evaluate(expr) does (defined in tessel/ops/assign.hpp). An expression alone
    // (`auto e = a + 1;`) stays lazy and reads its operands' memory when it is evaluated.
    template <class E>
        requires std::is_base_of_v<Expression<E>, E>
    Tensor(const E& expr);
    Tensor(std::shared_ptr<Storage> storage, Layout layout) : storage_(std::move(storage)), layout_(std::move(layout)) {
        require(storage_ != nullptr, "Tensor: no storage");
        require(layout_.shape.size() == layout_.strides.size(), "Tensor: layout of shape ", layout_.shape, " has ",
                layout_.strides.size(), " strides");
        require(layout_.fits_in(std::int64_t(storage_->bytes() / sizeof(T))), "Tensor: layout ", layout_,
                " reaches outside its storage of ", storage_->bytes() / sizeof(T), " ", dtype_traits<T>::name, " elements");
    }

    // ---- what it is ----
    bool defined() const { return storage_ != nullptr; }
    const Shape& shape() const { return layout_.shape; }
    const Shape& strides() const { return layout_.strides; }
    std::int64_t offset() const { return layout_.offset; }
    const Layout& layout() const { return layout_; }
    int dim() const { return layout_.rank(); }
    std::int64_t numel() const { return layout_.numel(); }
    std::int64_t size(int d) const { return layout_.shape[wrap(d)]; }
    static constexpr DType dtype() { return dtype_of<T>; }
    Device device() const { return need().device(); }
    MemorySpace space() const { return need().space(); }
    bool is_contiguous() const { return layout_.is_contiguous(); }
    const std::shared_ptr<Storage>& storage() const { return storage_; }
    // The first element (strides and offset apply from there).
    T* data() const { return static_cast<T*>(need().data()) + layout_.offset; }

    // ---- views: the same memory, another layout ----
    Tensor slice(int d, std::int64_t start, std::int64_t stop, std::int64_t step = 1) const { return with(layout_.slice(d, start, stop, step)); }
    Tensor narrow(int d, std::int64_t start, std::int64_t length) const { return with(layout_.narrow(d, start, length)); }
    Tensor select(int d, std::int64_t index) const { return with(layout_.select(d, index)); }
    Tensor permute(std::initializer_list<int> dims) const { return with(layout_.permute(dims)); }
    Tensor permute(std::span<const int> dims) const { return with(layout_.permute(dims)); }  // dims computed at run time
    Tensor transpose(int d0, int d1) const { return with(layout_.transpose(d0, d1)); }
    Tensor unsqueeze(int d) const { return with(layout_.unsqueeze(d)); }
    Tensor squeeze() const { return with(layout_.squeeze()); }
    Tensor squeeze(int d) const { return with(layout_.squeeze(d)); }
    Tensor expand(const Shape& s) const { return with(layout_.expand(s)); }
    Tensor broadcast_to(const Shape& s) const { return with(layout_.expand(s)); }
    // A view with another shape; throws InvalidArgument when the strides make that impossible.
    Tensor view(const Shape& s) const { return with(layout_.view_or_throw(s)); }
    // view() when possible, otherwise a contiguous copy with the new shape (so it may copy).
    Tensor reshape(const Shape& s, std::optional<StreamArg> stream = std::nullopt) const {
        std::optional<Layout> v;
        try {
            v = layout_.view(s);
        } catch (const InvalidArgument& e) {  // the shape itself is wrong: say so as reshape
            const std::string_view what = e.what();
            fail<InvalidArgument>(what.starts_with("view") ? "reshape" + std::string(what.substr(4)) : "reshape: " + std::string(what));
        }
        if (v) return with(*v);
        return contiguous(stream).view(s);
    }

    // ---- copies ----
    // Copies `src` (same shape, same element type; any memory space, any layout) into this tensor's
    // existing memory, ordered on `stream` (default: the current stream of the device side) after
    // the last write to `src`. Asynchronous when both sides are tessel's device or pinned memory
    // (their use is recorded for the stream); otherwise (managed, pageable or foreign memory) it
    // returns once done. Returns *this.
    const Tensor& copy_(const Tensor& src, std::optional<StreamArg> stream = std::nullopt) const;
    // The same data in new contiguous memory in `o.space` (on `o.device`), ordered on `o.stream`.
    // Without o.device: a device or managed tensor's own device; from host or pinned memory onto a
    // device, the current device (as torch's .to("cuda")).
    Tensor to(TensorOptions o) const;
    Tensor to(MemorySpace space) const { return to(TensorOptions{.space = space}); }
    Tensor to_host() const { return to(MemorySpace::host); }
    // A copy in new memory of the same space, on `stream` (default: the current stream).
    Tensor clone(std::optional<StreamArg> stream = std::nullopt) const {
        return to(TensorOptions{.space = space(), .device = device(), .stream = stream});
    }
    // This tensor if it is contiguous, else a contiguous copy in the same memory space.
    Tensor contiguous(std::optional<StreamArg> stream = std::nullopt) const { return is_contiguous() ? *this : clone(stream); }
    // The values as another element type (a new tensor in the same space): t.to<float>().
    template <Element U>
    Tensor<U> to_dtype() const;
    template <Element U>
    Tensor<U> to() const {
        return to_dtype<U>();
    }

    // ---- managed memory ----
    // Migrates a managed tensor's memory to `to` (a device, or the host when nullopt), ordered on `stream`.
    void prefetch(std::optional<Device> to, rt::stream_t stream = nullptr) const {
        require(space() == MemorySpace::managed, "prefetch needs a managed tensor, this one is in ", space_name(space()), " memory");
        rt::prefetch_async(need().data(), need().bytes(), to ? to->index : -1, stream);
    }
    // Tells the driver how the memory will be used (e.g. cudaMemAdviseSetReadMostly), for `by` or the host.
    void advise(cudaMemoryAdvise advice, std::optional<Device> by) const {
        require(space() == MemorySpace::managed, "advise needs a managed tensor, this one is in ", space_name(space()), " memory");
        rt::mem_advise(need().data(), need().bytes(), advice, by ? by->index : -1);
    }

    // ---- host element access (host, pinned or managed tensors; managed: after synchronising) ----
    T& operator()(std::initializer_list<std::int64_t> index) const {
        require(space() != MemorySpace::device, "element access needs a host tensor, this one is in device memory: ",
                "call to_host() first");
        require(std::int64_t(index.size()) == dim(), "element access with ", index.size(), " indices into a tensor of rank ",
                dim(), " (shape ", shape(), ")");
        int d = 0;
        std::array<std::int64_t, max_rank> at{};
        for (std::int64_t i : index) {
            const std::int64_t size = layout_.shape[d];
            require(i >= -size && i < size, "index ", i, " out of range for dimension ", d, " of size ", size, " (shape ", shape(), ")");
            at[std::size_t(d)] = i < 0 ? i + size : i;  // negative: counted from the end
            ++d;
        }
        // Pinned memory a queued copy is filling (pinned.copy_(device_tensor) returns once queued) is
        // read only after it landed, as item() and to_vector() do; the element may be written, so
        // a queued copy still reading it (device.copy_(pinned)) finishes first too.
        if (space() == MemorySpace::pinned) detail::host_wait_for_access(*storage_);
        return static_cast<T*>(need().data())[layout_.offset_of(std::span<const std::int64_t>(at.data(), index.size()))];
    }
    // The single value of a one-element tensor (copied to the host if needed).
    T item() const {
        require(numel() == 1, "item() needs exactly one element, the tensor has ", numel(), " (shape ", shape(), ")");
        if (is_plain_host(space())) {
            detail::host_wait_for_last_write(*storage_);  // a copy into pinned memory may be in flight
            return *data();
        }
        T v;
        // Read on the current stream of the tensor's device, after the last write tessel queued
        // (on whichever stream).
        DeviceGuard g(device());
        const rt::stream_t s = current_stream(device()).handle();
        detail::order_after_last_write(*storage_, s, device());
        rt::memcpy_async(&v, data(), sizeof(T), s);
        rt::stream_synchronize(s);
        return v;
    }
    // All values in row-major order, on the host: read on the current stream after the last write
    // tessel queued on this tensor's memory (whichever stream it was on).
    std::vector<T> to_vector() const {
        Tensor h = to_host();
        const T* p = h.data();
        return std::vector<T>(p, p + h.numel());
    }

    // PyTorch-style text: dtype, shape, space and device, and the values (corners only when large).
    std::string to_string(int edge = 3) const;

private:
    const Storage& need() const {
        require(storage_ != nullptr, "operation on an undefined (default-constructed) tensor");
        return *storage_;
    }
    Tensor with(Layout l) const {
        need();
        return Tensor(storage_, std::move(l));
    }
    int wrap(int d) const {
        const int n = dim();
        require(d >= -n && d < n, "dimension ", d, " out of range for a tensor of rank ", n, " (shape ", shape(), ")");
        return d < 0 ? d + n : d;
    }

    std::shared_ptr<Storage> storage_;
    Layout layout_;
};

namespace detail {
// A host array of n T (std::vector<bool> has no data(), so staging buffers use this).
template <class T>
struct HostArray {
    std::size_t n;
    std::unique_ptr<T[]> p;
    explicit HostArray(std::size_t count) : n(count), p(new T[count]) {}
    T* data() { return p.get(); }
    std::span<const T> span() const { return {p.get(), n}; }
};
}  // namespace detail

// ---- factories ----------------------------------------------------------------------------------

// Uninitialised memory for `shape` (device memory holds whatever was there: poison before reading).
template <Element T>
Tensor<T> empty(const Shape& shape, TensorOptions o = {}) {
    const Layout l = Layout::contiguous(shape);
    const std::int64_t n = l.numel();
    require(std::uint64_t(n) <= std::numeric_limits<std::size_t>::max() / sizeof(T), "empty: ", n, " elements of ",
            dtype_traits<T>::name, " overflow the byte count");
    return Tensor<T>(Storage::allocate(std::size_t(n) * sizeof(T), o.space, o.resolved_device(), o.resolved_stream()), l);
}

// Zero-filled: every supported type's zero is all-zero bytes.
template <Element T>
Tensor<T> zeros(const Shape& shape, TensorOptions o = {}) {
    Tensor<T> t = empty<T>(shape, o);
    const std::size_t bytes = std::size_t(t.numel()) * sizeof(T);
    if (!is_plain_host(t.space())) {
        DeviceGuard g(t.device());  // a null stream is the tensor's device's default stream
        rt::memset_async(t.data(), 0, bytes, o.resolved_stream());
    } else if (bytes) {
        std::memset(t.data(), 0, bytes);
    }
    return t;
}

// A contiguous tensor holding `values` (row-major), copied from the host.
template <Element T>
Tensor<T> from_host(std::span<const T> values, const Shape& shape, TensorOptions o = {}) {
    const std::int64_t n = Layout::contiguous(shape).numel();
    require(std::int64_t(values.size()) == n, "from_host: ", values.size(), " values for shape ", shape,
            " which has ", n, " elements");
    Tensor<T> t = empty<T>(shape, o);
    if (n == 0) return t;
    if (!is_plain_host(t.space())) {
        DeviceGuard g(t.device());  // a null stream is the tensor's device's default stream
        rt::memcpy_async(t.data(), values.data(), values.size_bytes(), o.resolved_stream());  // pageable: returns after reading
    } else {
        std::memcpy(t.data(), values.data(), values.size_bytes());
    }
    return t;
}
template <Element T>
Tensor<T> from_host(std::initializer_list<T> values, const Shape& shape, TensorOptions o = {}) {
    return from_host<T>(std::span<const T>(values.begin(), values.size()), shape, o);
}

// Every element `value`.
template <Element T>
Tensor<T> full(const Shape& shape, T value, TensorOptions o = {}) {
    if (const detail::DeviceFillFn fill = detail::device_fill.load(); fill && !is_plain_host(o.space)) {
        Tensor<T> t = empty<T>(shape, o);
        std::uint64_t bits = 0;
        std::memcpy(&bits, &value, sizeof(T));
        if (t.numel() > 0) fill(t.data(), std::size_t(t.numel()), sizeof(T), bits, o.resolved_stream(), t.device());
        return t;
    }
    Tensor<T> t = empty<T>(shape, o);  // the size checked (tessel's errors) before anything is filled
    if (is_plain_host(o.space)) {  // in place: no staging array of the same size
        std::fill(t.data(), t.data() + t.numel(), value);
        return t;
    }
    detail::HostArray<T> h(static_cast<std::size_t>(t.numel()));  // no fill kernel in this program
    std::fill(h.data(), h.data() + h.n, value);
    if (h.n) {
        DeviceGuard g(t.device());  // a null stream is the tensor's device's default stream
        rt::memcpy_async(t.data(), h.data(), h.n * sizeof(T), o.resolved_stream());  // pageable: returns after reading
    }
    return t;
}
template <Element T>
Tensor<T> ones(const Shape& shape, TensorOptions o = {}) {
    return full<T>(shape, convert<T>(1), o);
}
// start, start+step, ... below stop (a 1-d tensor). Every value must be representable in T.
template <Element T>
Tensor<T> arange(double start, double stop, double step = 1.0, TensorOptions o = {}) {
    require(std::isfinite(start) && std::isfinite(stop) && std::isfinite(step), "arange: start ", start, ", stop ", stop,
            " and step ", step, " must be finite");
    require(step != 0.0, "arange: step must not be 0");
    const double count = std::ceil((stop - start) / step);
    // 2^53: beyond it the values start + i * step are no longer distinct doubles.
    require(count <= 9007199254740992.0, "arange: [", start, ", ", stop, ") in steps of ", step, " has ", count,
            " elements, more than a tensor can index");
    const std::int64_t n = count > 0 ? std::int64_t(count) : 0;
    // An integer arange counts in the given numbers but steps in T, as torch's: start and step are
    // truncated to integers first (arange<int>(-0.5, 2) is 0, 1, 2).
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
        const double whole_step = std::trunc(step);
        require(whole_step != 0.0 || n <= 1, "arange: step ", step, " is 0 in ", dtype_traits<T>::name,
                " (an integer arange steps by whole numbers): use a floating type, or a step of at least 1");
        start = std::trunc(start);
        step = whole_step != 0.0 ? whole_step : 1.0;  // one element or none: the step is never taken
    }
    if (n > 0) {
        const double last = start + double(n - 1) * step;
        const double lo = std::min(start, last), hi = std::max(start, last);
        double lowest = 0, highest = 0;
        if constexpr (std::is_same_v<T, bool>) lowest = 0, highest = 1;
        else if constexpr (std::is_arithmetic_v<T>) lowest = double(std::numeric_limits<T>::lowest()), highest = double(std::numeric_limits<T>::max());
        else lowest = -double(convert<float>(detail::largest_finite<T>())), highest = double(convert<float>(detail::largest_finite<T>()));
        bool exact = false;  // int64 in integers: the last value checked exactly
        if constexpr (std::is_same_v<T, std::int64_t>)
            if (detail::arange_in_integers(start, step)) {
                const __int128 end = __int128(std::int64_t(start)) + __int128(n - 1) * std::int64_t(step);
                require(end >= std::numeric_limits<T>::lowest() && end <= std::numeric_limits<T>::max(), "arange: the last value ",
                        std::int64_t(start), " + ", n - 1, " * ", std::int64_t(step), " is beyond the range of int64");
                exact = true;
            }
        // In doubles: int64's largest value is not one (its bound rounds up to 2^63, itself beyond).
        const bool past_top = std::is_same_v<T, std::int64_t> ? hi >= highest : hi > highest;
        require(exact || (lo >= lowest && !past_top), "arange: the values run from ", lo, " to ", hi, ", beyond the range of ",
                dtype_traits<T>::name, " [", lowest, ", ", highest, (std::is_same_v<T, std::int64_t> ? ")" : "]"));
    }
    if (const detail::DeviceArangeFn fill = detail::device_arange.load(); fill && !is_plain_host(o.space)) {
        Tensor<T> t = empty<T>(Shape{n}, o);
        if (n > 0) fill(t.data(), dtype_of<T>, std::size_t(n), start, step, o.resolved_stream(), t.device());
        return t;
    }
    // On the host: in place for host memory (the size checked by empty first), else staged (no
    // arange kernel in this program). Rounded once, or in integers, as the kernel.
    Tensor<T> t = empty<T>(Shape{n}, o);
    detail::HostArray<T> staged(is_plain_host(o.space) ? 0 : static_cast<std::size_t>(n));
    T* const h = is_plain_host(o.space) ? t.data() : staged.data();
    bool in_integers = false;
    if constexpr (std::is_same_v<T, std::int64_t>) in_integers = detail::arange_in_integers(start, step);
    for (std::int64_t i = 0; i < n; ++i) {
        if constexpr (std::is_same_v<T, std::int64_t>)
            if (in_integers) {
                h[i] = detail::arange_integer(std::uint64_t(i), start, step);
                continue;
            }
        h[i] = convert<T>(std::fma(double(i), step, start));
    }
    if (!is_plain_host(o.space) && n > 0) {
        DeviceGuard g(t.device());
        rt::memcpy_async(t.data(), staged.data(), staged.n * sizeof(T), o.resolved_stream());  // pageable: returns after reading
    }
    return t;
}

// arange of integer numbers: int64 bounds beyond 2^53 are no doubles (arange<int64_t>(2^53 + 1,
// 2^53 + 8) through doubles would start at 2^53 and have 8 elements), so an int64 arange whose
// numbers are beyond it counts and steps in integers, as torch's (made on the host, then copied);
// every other one is the arange above, whose doubles hold its numbers exactly.
template <Element T, std::integral A, std::integral B, std::integral C = int>
    requires(!std::is_same_v<A, bool> && !std::is_same_v<B, bool> && !std::is_same_v<C, bool>)
Tensor<T> arange(A start, B stop, C step = 1, TensorOptions o = {}) {
    if constexpr (!std::is_same_v<T, std::int64_t>) {
        return arange<T>(double(start), double(stop), double(step), o);
    } else {
        constexpr __int128 exact = __int128(1) << 53;
        const auto beyond = [&](auto v) { return __int128(v) > exact || __int128(v) < -exact; };
        if (!(beyond(start) || beyond(stop) || beyond(step))) return arange<T>(double(start), double(stop), double(step), o);
        require(std::in_range<std::int64_t>(start) && std::in_range<std::int64_t>(stop) && std::in_range<std::int64_t>(step),
                "arange: start ", start, ", stop ", stop, " and step ", step, " must be int64 values for an int64 arange");
        require(step != 0, "arange: step must not be 0");
        const __int128 span = __int128(stop) - __int128(start), s = step;
        const __int128 count = span / s + (span % s != 0 && (span > 0) == (s > 0));  // ceil(span / step) where it is positive
        require(count <= exact, "arange: [", start, ", ", stop, ") in steps of ", step, " has more elements than a tensor can index");
        const std::int64_t n = count > 0 ? std::int64_t(count) : 0;
        detail::HostArray<T> h(static_cast<std::size_t>(n));
        for (std::int64_t i = 0; i < n; ++i) h.data()[i] = std::int64_t(__int128(start) + __int128(i) * s);  // within [start, stop)
        return from_host<T>(h.span(), Shape{n}, o);
    }
}

// A tensor over memory tessel does not own. `deleter` (may be empty) runs when the last view goes.
// The pointer must be aligned for T, and may be null only when the shape has no elements; device and
// managed memory name a visible device.
template <Element T>
Tensor<T> from_blob(T* data, const Shape& shape, MemorySpace space, Device device = Device{0},
                    Storage::Deleter deleter = {}, std::optional<Shape> strides = std::nullopt) {
    const Layout l = strides ? Layout::strided(shape, *strides) : Layout::contiguous(shape);
    const auto extent = l.extent();
    // highest + 1 in unsigned arithmetic: highest may be INT64_MAX (a stride of INT64_MAX).
    const std::uint64_t elements = extent ? std::uint64_t(extent->highest) + 1 : 0;
    // Checked before the storage exists, so a rejected blob never runs its deleter.
    require(!extent || extent->lowest >= 0, "from_blob: strides ", l.strides, " reach before the pointer");
    require(elements <= std::numeric_limits<std::size_t>::max() / sizeof(T), "from_blob: shape ",
            shape, " with strides ", l.strides, " spans more bytes than memory can hold");
    require(data != nullptr || l.numel() == 0, "from_blob: null pointer for shape ", shape, " (", l.numel(),
            " elements of ", dtype_traits<T>::name, ")");
    require(reinterpret_cast<std::uintptr_t>(data) % alignof(T) == 0, "from_blob: pointer ", static_cast<const void*>(data),
            " is not aligned to ", alignof(T), " bytes, as ", dtype_traits<T>::name, " elements must be");
    require(space == MemorySpace::host || space == MemorySpace::pinned || (device.index >= 0 && device.index < device_count()),
            "from_blob: ", space_name(space), " memory on device ", device.index, ", which does not exist (", device_count(),
            " device(s) visible)");
    return Tensor<T>(Storage::wrap(data, std::size_t(elements) * sizeof(T), space, device, std::move(deleter)), l);
}

// ---- copies -------------------------------------------------------------------------------------

namespace detail {
// Declares that work queued on `stream` (of `device`) uses `s`, so its memory is not reused before
// that work ends. Returns false for memory tessel's caches do not own (their owner must wait).
inline bool record_use(const Storage& s, rt::stream_t stream, Device device) {
    if (s.space() == MemorySpace::pinned && memory::owns_host(s.data())) {
        memory::record_host_use(s.data(), stream, device);
        return true;
    }
    if (s.space() == MemorySpace::device && memory::owns(s.data())) {
        memory::record_stream(s.data(), stream, device);
        return true;
    }
    return s.space() == MemorySpace::host;  // pageable copies return only once done
}

// Calls f(i, offset) for the i-th element of the view `l` in row-major order and its offset in the storage.
template <class F>
void for_each_offset(const Layout& l, F&& f) {
    std::array<std::int64_t, max_rank> idx{};
    for (std::int64_t i = 0, n = l.numel(); i < n; ++i) {
        std::int64_t at = l.offset;
        for (int d = 0; d < l.rank(); ++d) at += idx[std::size_t(d)] * l.strides[d];
        f(i, at);
        for (int d = l.rank() - 1; d >= 0; --d) {
            if (++idx[std::size_t(d)] < l.shape[d]) break;
            idx[std::size_t(d)] = 0;
        }
    }
}

// copy_to_contiguous (below) once the copy's ordering is settled: one copy for contiguous sources,
// the device_gather kernel for strided device views on the stream's device (into a device buffer
// first where the destination is host memory and the view spans at least its elements), otherwise
// a gather on the host from a copy of the memory the source's layout spans.
template <Element T>
void copy_to_contiguous_now(const Tensor<T>& src, T* dst_data, const Storage& dst, rt::stream_t stream, Device stream_device,
                            bool non_blocking) {
    const std::int64_t n = src.numel();
    const bool src_host = is_plain_host(src.space()), dst_host = is_plain_host(dst.space());
    if (src.is_contiguous()) {
        if (src_host && dst_host) {
            std::memcpy(dst_data, src.data(), std::size_t(n) * sizeof(T));
            return;
        }
        // Non-blocking: both buffers must outlive the queued copy whatever their owners do, so their
        // use is recorded first; memory the caches do not own makes the copy blocking.
        const bool may_return_early = non_blocking && record_use(*src.storage(), stream, stream_device) &&
                                      record_use(dst, stream, stream_device);
        rt::memcpy_async(dst_data, src.data(), std::size_t(n) * sizeof(T), stream);
        if (!may_return_early) rt::stream_synchronize(stream);
        else if (src_host) src.storage()->note_read(stream, stream_device);  // a host write to it waits for the copy
        return;
    }
    if (const DeviceGatherFn gather = device_gather.load(); gather && !src_host && !dst_host && src.device() == stream_device &&
                                                           dst.device() == stream_device) {
        const bool may_return_early = non_blocking && record_use(*src.storage(), stream, stream_device) &&
                                      record_use(dst, stream, stream_device);
        gather(src.data(), src.layout(), dst_data, sizeof(T), stream, stream_device);
        if (!may_return_early) rt::stream_synchronize(stream);
        return;
    }
    const auto extent = *src.layout().extent();
    const std::int64_t span = extent.highest - extent.lowest + 1;
    if (const DeviceGatherFn gather = device_gather.load(); gather && !src_host && dst_host && src.device() == stream_device && span >= n) {
        // A device view bound for the host is gathered on the device first, as torch's .cpu() of a
        // view is: the copy then carries its elements, not every byte its layout spans (a corner
        // of a [64, 4096, 4096] float tensor spans 128 MiB). A broadcast view, which spans fewer
        // elements than it has, copies its span and repeats it on the host (below).
        const Tensor<T> packed = empty<T>(src.shape(), TensorOptions{.device = stream_device, .stream = stream, .non_blocking = true});
        gather(src.data(), src.layout(), packed.data(), sizeof(T), stream, stream_device);
        rt::memcpy_async(dst_data, packed.data(), std::size_t(n) * sizeof(T), stream);
        rt::stream_synchronize(stream);
        return;
    }
    const T* base = static_cast<const T*>(src.storage()->data());
    detail::HostArray<T> span_copy(src_host ? 0 : static_cast<std::size_t>(span));
    if (!src_host) {
        rt::memcpy_async(span_copy.data(), base + extent.lowest, span_copy.n * sizeof(T), stream);
        rt::stream_synchronize(stream);
        base = span_copy.data() - extent.lowest;
    }
    detail::HostArray<T> gathered(dst_host ? 0 : static_cast<std::size_t>(n));
    T* out = dst_host ? dst_data : gathered.data();
    for_each_offset(src.layout(), [&](std::int64_t i, std::int64_t at) { out[i] = base[at]; });
    if (!dst_host) {
        rt::memcpy_async(dst_data, gathered.data(), gathered.n * sizeof(T), stream);
        rt::stream_synchronize(stream);
    }
}

// Copies `src` (any layout, any space) into contiguous `dst_data` of numel elements in `dst`, on
// `stream` of `stream_device`. Between device memory it returns once queued whatever `non_blocking`
// says, as torch's device copies do (clone(), contiguous(), to(another device)): it is ordered on
// its stream as a kernel is. A copy that touches another device's memory (device or managed; a
// pinned or host side of a copy from another device too) also runs after the work queued so far on
// that device's current stream and before the work queued there later (torch's two-way ordering,
// though torch queues the copy on the source's device), so a later write to the source on its
// device's current stream needs no event. A strided device source on another device is gathered
// there first (queued). Host, pinned and managed sides follow `non_blocking`.
template <Element T>
void copy_to_contiguous(const Tensor<T>& src, T* dst_data, const Storage& dst, rt::stream_t stream, Device stream_device,
                        bool non_blocking) {
    if (src.numel() == 0) return;
    const bool device_sides = src.space() == MemorySpace::device && dst.space() == MemorySpace::device;
    if (device_sides && !src.is_contiguous() && src.device() != stream_device && device_gather.load())
        return copy_to_contiguous(src.contiguous(), dst_data, dst, stream, stream_device, true);
    std::vector<Device> others;  // the devices other than the stream's whose memory the copy touches
    for (const Storage* side : std::array<const Storage*, 2>{src.storage().get(), &dst})
        if (!is_plain_host(side->space()) && side->device() != stream_device &&
            std::find(others.begin(), others.end(), side->device()) == others.end())
            others.push_back(side->device());
    for (Device d : others) stream_wait_for(stream, stream_device, current_stream_handle(d), d);
    copy_to_contiguous_now(src, dst_data, dst, stream, stream_device, non_blocking || device_sides);
    for (Device d : others) stream_wait_for(current_stream_handle(d), d, stream, stream_device);
}
}  // namespace detail

template <Element T>
Tensor<T> Tensor<T>::to(TensorOptions o) const {
    need();
    if (!o.device) o.device = is_plain_host(space()) && !is_plain_host(o.space) ? current_device() : device();
    Tensor<T> out = empty<T>(shape(), o);
    const rt::stream_t stream = o.resolved_stream();
    // A null stream is the default stream of the current device: make that o.device's.
    std::optional<DeviceGuard> guard;
    if (!is_plain_host(space()) || !is_plain_host(o.space)) guard.emplace(*o.device);
    detail::order_after_last_write(*storage_, stream, *o.device);
    detail::copy_to_contiguous(*this, out.data(), *out.storage(), stream, *o.device, o.non_blocking);
    if (o.non_blocking || !is_plain_host(o.space)) out.storage()->note_write(stream, *o.device);  // may be in flight
    return out;
}

namespace detail {
// Writes contiguous `in` in row-major order into the view `l` of host memory `base`.
template <class T>
void scatter_on_host(const T* in, T* base, const Layout& l) {
    for_each_offset(l, [&](std::int64_t i, std::int64_t at) { base[at] = in[i]; });
}
}  // namespace detail

template <Element T>
const Tensor<T>& Tensor<T>::copy_(const Tensor& src, std::optional<StreamArg> stream_opt) const {
    require(defined(), "copy_: the destination is an undefined (default-constructed) tensor");
    require(src.defined(), "copy_: the source is an undefined (default-constructed) tensor");
    require(src.shape() == shape(), "copy_: the source has shape ", src.shape(), " but the destination ",
            shape(), " (copy_ does not broadcast; use (dst = src.expand(...)).run(stream) on the device)");
    require(detail::distinct_elements(layout_), "copy_: the destination (shape ", shape(), ", strides ", strides(), ") ",
            detail::repeated_elements_text(layout_), " (a broadcast or overlapping view); copy into a tensor whose elements are distinct");
    if (numel() == 0) return *this;
    if (detail::same_elements(data(), strides(), src.data(), src.strides(), shape())) return *this;  // a view onto itself: nothing changes
    const auto sharing = detail::memory_sharing(data(), layout_, sizeof(T), src.data(), src.layout(), sizeof(T));
    require(sharing == detail::Sharing::none, "copy_: the source (strides ", src.strides(), ") and the destination (strides ",
            strides(), ") ", detail::overlap_verb(sharing), " in memory, so elements would be read after being overwritten; copy from a clone() of the source");
    // The stream belongs to the device side (the destination's when both are on devices).
    const bool dst_host = is_plain_host(space()), src_host = is_plain_host(src.space());
    if (dst_host && src_host) {  // host to host: after any copy still landing in either
        detail::host_wait_for_last_write(*src.storage());
        detail::host_wait_for_access(*storage_);  // a queued copy may still read the destination
        if (is_contiguous()) detail::copy_to_contiguous(src, data(), *storage_, nullptr, Device{}, false);
        else detail::scatter_on_host(src.contiguous().data(), static_cast<T*>(storage_->data()), layout_);
        return *this;
    }
    const Device device = !dst_host ? this->device() : src.device();
    DeviceGuard guard(device);  // a null stream is this device's default stream
    // On the destination's device, or the source's for a host destination.
    const rt::stream_t stream = stream_for("copy_", stream_opt, device);
    detail::order_after_last_write(*src.storage(), stream, device);
    detail::order_after_last_write(*storage_, stream, device);  // earlier writes to the destination land first
    if (dst_host) detail::host_wait_for_access(*storage_);    // and copies still reading a host destination finish
    if (is_contiguous()) {
        detail::copy_to_contiguous(src, data(), *storage_, stream, device, /*non_blocking=*/true);
    } else if (const detail::DeviceScatterFn scatter = detail::device_scatter.load(); scatter && !dst_host) {
        // The source made contiguous on this device (a no-op view when it already is), then scattered:
        // only the view's elements are written.
        const bool packed_already = src.is_contiguous() && !src_host && src.device() == device;
        const Tensor<T> packed = packed_already ? src : src.to(TensorOptions{.space = MemorySpace::device, .device = device,
                                                                              .stream = stream, .non_blocking = true});
        const bool keep_async = detail::record_use(*packed.storage(), stream, device) && detail::record_use(*storage_, stream, device);
        scatter(packed.data(), data(), layout_, sizeof(T), stream, device);
        if (!keep_async) rt::stream_synchronize(stream);
    } else {  // through the host (a host destination, or no scatter kernel registered in this program)
        const Tensor<T> h = src.to(TensorOptions{.space = MemorySpace::host, .device = device, .stream = stream});
        const auto extent = *layout_.extent();
        T* base = static_cast<T*>(storage_->data());
        detail::HostArray<T> span_copy(dst_host ? 0 : std::size_t(extent.highest - extent.lowest + 1));
        T* window = dst_host ? base : span_copy.data() - extent.lowest;
        if (!dst_host) {  // keep the destination's other elements: read its span, patch, write back
            rt::memcpy_async(span_copy.data(), base + extent.lowest, span_copy.n * sizeof(T), stream);
            rt::stream_synchronize(stream);
        }
        detail::scatter_on_host(h.data(), window, layout_);
        if (!dst_host) {
            rt::memcpy_async(base + extent.lowest, span_copy.data(), span_copy.n * sizeof(T), stream);
            rt::stream_synchronize(stream);
        }
    }
    storage_->note_write(stream, device);
    return *this;
}

namespace detail {
// to<U>() where no device kernel is registered, or of host memory: converted on the host.
template <Element U, Element T>
Tensor<U> convert_on_host(const Tensor<T>& t) {
    const Tensor<T> h = is_plain_host(t.space()) ? t.contiguous() : t.to_host();
    if (is_plain_host(t.space())) host_wait_for_last_write(*h.storage());  // a copy into pinned memory may be in flight
    detail::HostArray<U> converted(static_cast<std::size_t>(t.numel()));
    const T* p = h.data();
    for (std::size_t i = 0; i < converted.n; ++i) converted.data()[i] = convert<U>(p[i]);  // NaN -> 0, saturating, as on the device
    return from_host<U>(converted.span(), t.shape(), TensorOptions{.space = t.space(), .device = t.device()});
}
}  // namespace detail

template <Element T>
template <Element U>
Tensor<U> Tensor<T>::to_dtype() const {
    need();
    if constexpr (std::is_same_v<T, U>) {
        return clone();
    } else {
        if (const detail::DeviceConvertFn convert_fn = detail::device_convert.load(); convert_fn && !is_plain_host(space())) {
            // On the tensor's device and its current stream, queued: a strided view is gathered
            // first (one more kernel), then one kernel converts.
            const Device dev = device();
            const rt::stream_t stream = current_stream(dev).handle();
            const Tensor<T> src =
                is_contiguous() ? *this : to(TensorOptions{.space = space(), .device = dev, .stream = stream, .non_blocking = true});
            detail::order_after_last_write(*src.storage(), stream, dev);
            Tensor<U> out = empty<U>(shape(), TensorOptions{.space = space(), .device = dev, .stream = stream});
            if (numel() > 0) convert_fn(src.data(), dtype_of<T>, out.data(), dtype_of<U>, std::size_t(numel()), stream, dev);
            out.storage()->note_write(stream, dev);
            // The source may be freed or overwritten as soon as this returns: its memory is not
            // reused before the kernel is done (the caches), or this waits for it (other memory).
            if (!detail::record_use(*src.storage(), stream, dev)) rt::stream_synchronize(stream);
            return out;
        }
        return detail::convert_on_host<U>(*this);
    }
}

namespace detail {
// A tensor's shape in an error message, "(undefined)" for a default-constructed tensor. It holds a
// pointer, so a check that passes formats nothing (messages are built only when thrown).
template <Element T>
struct ShapeOf {
    const Tensor<T>* t;
    friend std::ostream& operator<<(std::ostream& os, const ShapeOf& s) {
        return s.t->defined() ? os << s.t->shape() : os << "(undefined)";
    }
};
template <Element T>
ShapeOf<T> shape_of(const Tensor<T>& t) {
    return {&t};
}
}  // namespace detail

}  // namespace tessel

#include "print.hpp"  // Tensor::to_string and operator<<
