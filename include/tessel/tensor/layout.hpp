// Where a tensor's elements lie in its storage (sizes, strides in elements, an offset), and every
// operation that re-describes the same elements without copying them: slicing, selecting, permuting,
// squeezing, broadcasting and view(). Semantics follow PyTorch except where a comment says otherwise;
// the main difference is that out-of-range slice bounds throw instead of being clamped.
// Host-only. Shape and Layout are plain values that never allocate (error messages aside).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <ostream>
#include <span>
#include <sstream>
#include <string>

#include "../core/error.hpp"

namespace tessel {

// The most dims a tensor may have; Shape stores this many values inline.
inline constexpr int max_rank = 8;

// Sizes or strides of a tensor: a vector of at most max_rank int64 values that never allocates.
class Shape {
public:
    Shape() = default;
    Shape(std::initializer_list<std::int64_t> values) : Shape(std::span(values.begin(), values.size())) {}
    explicit Shape(std::span<const std::int64_t> values) {
        check_rank(values.size());
        std::copy(values.begin(), values.end(), v_.begin());
        n_ = int(values.size());
    }

    int size() const { return n_; }
    bool empty() const { return n_ == 0; }
    // Unchecked, like std::array: i must be in [0, size()).
    std::int64_t& operator[](int i) { return v_[std::size_t(i)]; }
    std::int64_t operator[](int i) const { return v_[std::size_t(i)]; }
    std::int64_t* begin() { return v_.data(); }
    std::int64_t* end() { return v_.data() + n_; }
    const std::int64_t* begin() const { return v_.data(); }
    const std::int64_t* end() const { return v_.data() + n_; }
    operator std::span<const std::int64_t>() const { return {v_.data(), std::size_t(n_)}; }

    void push_back(std::int64_t value) { insert(n_, value); }
    // Inserts value before position pos in [0, size()].
    void insert(int pos, std::int64_t value) {
        check_rank(std::size_t(n_) + 1);
        std::copy_backward(begin() + pos, end(), end() + 1);
        v_[std::size_t(pos)] = value;
        ++n_;
    }
    // Removes the value at position pos in [0, size()).
    void erase(int pos) {
        std::copy(begin() + pos + 1, end(), begin() + pos);
        v_[std::size_t(--n_)] = 0;
    }

    friend bool operator==(const Shape& a, const Shape& b) { return std::equal(a.begin(), a.end(), b.begin(), b.end()); }
    friend std::ostream& operator<<(std::ostream& os, const Shape& s) {
        os << '[';
        for (int i = 0; i < s.n_; ++i) os << (i ? ", " : "") << s.v_[std::size_t(i)];
        return os << ']';
    }
    std::string to_string() const { return detail::concat(*this); }

private:
    static void check_rank(std::size_t rank) {
        require(rank <= std::size_t(max_rank), "a tensor may have at most ", max_rank, " dims, not ", rank);
    }
    std::array<std::int64_t, max_rank> v_{};
    int n_ = 0;
};

// The smallest and largest storage offset (inclusive) that a non-empty layout reaches.
struct OffsetRange {
    std::int64_t lowest = 0;
    std::int64_t highest = 0;
    friend bool operator==(const OffsetRange&, const OffsetRange&) = default;
};

namespace detail {

// "[a, b, c]" for any list of integers (dims, indices), for error messages.
template <class T>
std::string list(std::span<const T> values) {
    std::ostringstream os;
    os << '[';
    for (std::size_t i = 0; i < values.size(); ++i) os << (i ? ", " : "") << values[i];
    os << ']';
    return os.str();
}

// a * b, or nothing when the product does not fit in 64 bits (signed overflow is undefined).
constexpr std::optional<std::int64_t> checked_mul(std::int64_t a, std::int64_t b) {
    constexpr auto hi = std::numeric_limits<std::int64_t>::max(), lo = std::numeric_limits<std::int64_t>::min();
    if (a == 0 || b == 0) return 0;
    if (a > 0 ? (b > 0 ? a > hi / b : b < lo / a) : (b > 0 ? a < lo / b : a < hi / b)) return std::nullopt;
    return a * b;
}
constexpr std::optional<std::int64_t> checked_add(std::int64_t a, std::int64_t b) {
    constexpr auto hi = std::numeric_limits<std::int64_t>::max(), lo = std::numeric_limits<std::int64_t>::min();
    if (b > 0 ? a > hi - b : a < lo - b) return std::nullopt;
    return a + b;
}
// The same, throwing InvalidArgument "<context> overflows 64 bits" on overflow.
template <class... Context>
std::int64_t mul_or_fail(std::int64_t a, std::int64_t b, const Context&... context) {
    if (!checked_mul(a, b)) fail<InvalidArgument>(context..., " overflows 64 bits");
    return a * b;
}
template <class... Context>
std::int64_t add_or_fail(std::int64_t a, std::int64_t b, const Context&... context) {
    if (!checked_add(a, b)) fail<InvalidArgument>(context..., " overflows 64 bits");
    return a + b;
}

// Product of the sizes; throws on a negative size or when the product overflows. A zero size makes
// the count 0 even when the other sizes alone would overflow.
inline std::int64_t element_count(const Shape& shape) {
    for (int d = 0; d < shape.size(); ++d)
        require(shape[d] >= 0, "shape ", shape, " has a negative size ", shape[d], " at dim ", d);
    if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
    std::int64_t n = 1;
    for (auto s : shape) n = mul_or_fail(n, s, "the element count of shape ", shape);
    return n;
}

// Row-major strides. A size-0 dim counts as 1 (as in PyTorch), so strides stay distinct and
// meaningful for empty tensors.
inline Shape contiguous_strides(const Shape& shape) {
    Shape strides = shape;
    std::int64_t next = 1;
    for (int d = shape.size() - 1; d >= 0; --d) {
        strides[d] = next;
        if (d > 0) next = mul_or_fail(next, std::max<std::int64_t>(shape[d], 1),
                                       "the strides of a contiguous layout of shape ", shape);
    }
    return strides;
}

// dim wrapped from [-n, n) to [0, n); anything else throws naming the op, the dim and the shape.
inline int wrap_dim(const char* op, int dim, int n, const Shape& shape) {
    if (dim < -n || dim >= n) {
        if (n == 0) fail<InvalidArgument>(op, ": dim ", dim, " does not exist in shape [] (it has no dims)");
        fail<InvalidArgument>(op, ": dim ", dim, " is out of range [", -n, ", ", n - 1, "] for shape ", shape);
    }
    return dim < 0 ? dim + n : dim;
}

// new_shape with its -1 (at most one) replaced so that it holds numel elements; throws if impossible.
inline Shape infer_view_shape(const Shape& new_shape, std::int64_t numel) {
    int inferred = -1;
    std::optional<std::int64_t> known = 1;   // product of the other sizes; nothing once it overflows
    for (int d = 0; d < new_shape.size(); ++d) {
        if (new_shape[d] == -1) {
            require(inferred < 0, "view: shape ", new_shape, " has more than one -1 (dims ", inferred, " and ", d, ")");
            inferred = d;
        } else {
            require(new_shape[d] >= 0, "view: shape ", new_shape, " has a negative size ", new_shape[d], " at dim ", d);
            if (known) known = checked_mul(*known, new_shape[d]);
        }
    }
    if (std::find(new_shape.begin(), new_shape.end(), 0) != new_shape.end()) known = 0;
    Shape out = new_shape;
    if (inferred >= 0) {
        require(known != 0 || numel == 0, "view: shape ", new_shape, " is invalid for a tensor of ", numel, " elements");
        require(known != 0, "view: shape ", new_shape, " is ambiguous for a tensor of ", numel,
                " elements: its -1 could be any size");
        require(known && numel % *known == 0, "view: shape ", new_shape, " is invalid for a tensor of ", numel,
                " elements");
        out[inferred] = numel / *known;
    } else {
        require(known == numel, "view: shape ", new_shape, " is invalid for a tensor of ", numel, " elements");
    }
    return out;
}

// Strides that give new_sizes the same elements in the same row-major order as (sizes, strides), or
// nothing if no such strides exist. PyTorch's computeStride: the old dims are split into chunks
// that are each contiguous among themselves; each chunk must be covered by a run of new dims with
// exactly its element count. Size-1 dims, old or new, never break a chunk.
inline std::optional<Shape> view_strides(const Shape& sizes, const Shape& strides, const Shape& new_sizes) {
    Shape out = new_sizes;
    if (sizes.empty()) {
        std::fill(out.begin(), out.end(), 1);
        return out;
    }
    const auto numel = element_count(sizes);
    if (numel == 0) return sizes == new_sizes ? strides : contiguous_strides(new_sizes);
    int view_d = new_sizes.size() - 1;
    std::int64_t chunk_base = strides[sizes.size() - 1], tensor_numel = 1, view_numel = 1;
    for (int d = sizes.size() - 1; d >= 0; --d) {
        tensor_numel *= sizes[d];   // a prefix of numel: cannot overflow
        const bool chunk_ends =
            d == 0 || (sizes[d - 1] != 1 && checked_mul(tensor_numel, chunk_base) != strides[d - 1]);
        if (!chunk_ends) continue;
        while (view_d >= 0 && (view_numel < tensor_numel || new_sizes[view_d] == 1)) {
            // A size-1 dim's stride is never used: where the product overflows (hand-made strides),
            // any value does; a larger dim's stays within the tensor's extent.
            const std::optional<std::int64_t> stride = checked_mul(view_numel, chunk_base);
            out[view_d] = stride ? *stride : new_sizes[view_d] == 1 ? 1 : mul_or_fail(view_numel, chunk_base, "view: a stride for shape ", new_sizes);
            view_numel *= new_sizes[view_d];
            --view_d;
        }
        if (view_numel != tensor_numel) return std::nullopt;
        if (d > 0) chunk_base = strides[d - 1], tensor_numel = 1, view_numel = 1;
    }
    if (view_d != -1) return std::nullopt;
    return out;
}

}  // namespace detail

// Where a tensor's elements lie in its storage: element (i0, i1, ...) is at storage index
// offset + i0*strides[0] + i1*strides[1] + ... (in elements, not bytes). The operations below
// return new layouts over the same storage; none of them moves data.
struct Layout {
    Shape shape;
    Shape strides;   // same size as shape; may be 0 (broadcast) or any value for a hand-made layout
    std::int64_t offset = 0;

    // Row-major layout of shape at offset 0; throws on negative sizes or overflow.
    static Layout contiguous(const Shape& shape) {
        detail::element_count(shape);
        return {shape, detail::contiguous_strides(shape), 0};
    }
    // A layout as given, after checking it is well formed: ranks agree, sizes are not negative, and
    // the element count and offset range fit in 64 bits.
    static Layout strided(const Shape& shape, const Shape& strides, std::int64_t offset = 0) {
        require(shape.size() == strides.size(), "strides ", strides, " do not match the rank of shape ", shape);
        Layout l{shape, strides, offset};
        l.extent();
        return l;
    }

    int rank() const { return shape.size(); }
    // Product of the sizes; throws InvalidArgument on a negative size or a 64-bit overflow.
    std::int64_t numel() const { return detail::element_count(shape); }

    // True when the elements in row-major order are at offset, offset+1, ... (PyTorch's rule: dims
    // of size 1 may have any stride, and an empty tensor is contiguous whatever its strides).
    bool is_contiguous() const {
        if (numel() == 0) return true;
        std::int64_t expected = 1;
        for (int d = rank() - 1; d >= 0; --d) {
            if (shape[d] == 1) continue;
            if (strides[d] != expected) return false;
            expected *= shape[d];
        }
        return true;
    }

    // Storage index of the element at index (one value per dim, each in [0, size); no wrapping).
    std::int64_t offset_of(std::span<const std::int64_t> index) const {
        if (int(index.size()) != rank())
            fail<InvalidArgument>("offset_of: index ", detail::list(index), " has ", index.size(),
                                  " values but shape ", shape, " has ", rank(), " dims");
        std::int64_t at = offset;
        for (int d = 0; d < rank(); ++d) {
            const auto i = index[std::size_t(d)];
            if (i < 0 || i >= shape[d])
                fail<InvalidArgument>("offset_of: index ", detail::list(index), " is out of range at dim ", d,
                                      " for shape ", shape);
            at = detail::add_or_fail(at, detail::mul_or_fail(i, strides[d], "offset_of: ", i, " * stride ", strides[d]),
                                     "offset_of: the offset in ", *this);
        }
        return at;
    }
    std::int64_t offset_of(std::initializer_list<std::int64_t> index) const {
        return offset_of(std::span(index.begin(), index.size()));
    }

    // Lowest and highest storage index any element occupies, or nothing for an empty tensor (it
    // occupies no storage, so any storage fits it; this is also PyTorch's rule).
    std::optional<OffsetRange> extent() const {
        if (numel() == 0) return std::nullopt;
        OffsetRange r{offset, offset};
        for (int d = 0; d < rank(); ++d) {
            const auto reach = detail::mul_or_fail(strides[d], shape[d] - 1, "the extent of ", *this);
            auto& end = reach < 0 ? r.lowest : r.highest;
            end = detail::add_or_fail(end, reach, "the extent of ", *this);
        }
        return r;
    }
    // True when every element lies in a storage of storage_elements elements, [0, storage_elements).
    bool fits_in(std::int64_t storage_elements) const {
        const auto r = extent();
        return !r || (r->lowest >= 0 && r->highest < storage_elements);
    }

    // Elements start, start+step, ... before stop along dim. Negative dim, start and stop count from
    // the end (Python); after that, start and stop must lie in [0, size] with start <= stop, and
    // step must be >= 1. Unlike Python, out-of-range bounds throw instead of being clamped.
    Layout slice(int dim, std::int64_t start, std::int64_t stop, std::int64_t step = 1) const {
        const int d = detail::wrap_dim("slice", dim, rank(), shape);
        const auto size = shape[d];
        require(step >= 1, "slice: step ", step, " at dim ", dim, " must be >= 1 (shape ", shape, ")");
        require(start >= -size && start <= size && stop >= -size && stop <= size, "slice: start ", start,
                " or stop ", stop, " at dim ", dim, " is out of range [", -size, ", ", size, "] for shape ", shape);
        const auto first = start < 0 ? start + size : start, last = stop < 0 ? stop + size : stop;
        require(first <= last, "slice: start ", start, " is after stop ", stop, " at dim ", dim, " for shape ", shape);
        Layout out = *this;
        out.shape[d] = last == first ? 0 : (last - first - 1) / step + 1;  // no `+ step - 1`: it would overflow for huge steps
        // A dim of one element never moves by its stride, so a huge step only matters when it would.
        out.strides[d] = out.shape[d] <= 1 ? strides[d] : detail::mul_or_fail(strides[d], step, "slice: stride ", strides[d], " * step ", step);
        const auto skip = detail::mul_or_fail(first, strides[d], "slice: start ", first, " * stride ", strides[d]);
        out.offset = detail::add_or_fail(offset, skip, "slice: the offset of ", *this);
        return out;
    }
    // length elements from start along dim (start may be negative; start + length must be <= size).
    Layout narrow(int dim, std::int64_t start, std::int64_t length) const {
        const int d = detail::wrap_dim("narrow", dim, rank(), shape);
        const auto size = shape[d];
        require(start >= -size && start <= size, "narrow: start ", start, " at dim ", dim, " is out of range [",
                -size, ", ", size, "] for shape ", shape);
        const auto first = start < 0 ? start + size : start;
        require(length >= 0 && length <= size - first, "narrow: length ", length, " from start ", start, " at dim ",
                dim, " does not fit in size ", size, " of shape ", shape);
        return slice(d, first, first + length);
    }
    // The sub-tensor at index along dim, without that dim (negative index counts from the end).
    Layout select(int dim, std::int64_t index) const {
        const int d = detail::wrap_dim("select", dim, rank(), shape);
        require(index >= -shape[d] && index < shape[d], "select: index ", index, " at dim ", dim,
                " is out of range [", -shape[d], ", ", shape[d] - 1, "] for shape ", shape);
        const auto i = index < 0 ? index + shape[d] : index;
        const auto skip = detail::mul_or_fail(i, strides[d], "select: index ", i, " * stride ", strides[d]);
        Layout out = without_dim(d);
        out.offset = detail::add_or_fail(offset, skip, "select: the offset of ", *this);
        return out;
    }

    // Dim i of the result is dim dims[i] of this one; dims must be a permutation (negative allowed).
    Layout permute(std::span<const int> dims) const {
        const auto bad = [&] {
            return detail::concat("permute: dims ", detail::list(dims), " are not a permutation of the dims of shape ",
                                  shape);
        };
        if (int(dims.size()) != rank()) fail<InvalidArgument>(bad());
        Layout out = *this;
        std::array<bool, max_rank> seen{};
        for (int i = 0; i < rank(); ++i) {
            const int raw = dims[std::size_t(i)];
            if (raw < -rank() || raw >= rank()) fail<InvalidArgument>(bad());
            const int d = raw < 0 ? raw + rank() : raw;
            if (seen[std::size_t(d)]) fail<InvalidArgument>(bad());
            seen[std::size_t(d)] = true;
            out.shape[i] = shape[d];
            out.strides[i] = strides[d];
        }
        return out;
    }
    Layout permute(std::initializer_list<int> dims) const { return permute(std::span(dims.begin(), dims.size())); }
    // Swaps two dims. A rank-0 layout accepts dims 0 and -1 (as PyTorch does) and is returned as is.
    Layout transpose(int d0, int d1) const {
        const int n = std::max(rank(), 1);
        const int a = detail::wrap_dim("transpose", d0, n, shape), b = detail::wrap_dim("transpose", d1, n, shape);
        if (rank() == 0) return *this;
        Layout out = *this;
        std::swap(out.shape[a], out.shape[b]);
        std::swap(out.strides[a], out.strides[b]);
        return out;
    }

    // Inserts a size-1 dim at position dim in [-rank-1, rank] (negative counts from the end).
    Layout unsqueeze(int dim) const {
        const int d = detail::wrap_dim("unsqueeze", dim, rank() + 1, shape);
        Layout out = *this;
        // A size-1 dim's stride is never used; PyTorch's choice keeps contiguous strides row-major
        // (and 1 where that product overflows, as hand-made strides can make it).
        out.strides.insert(d, d < rank() ? detail::checked_mul(shape[d], strides[d]).value_or(1) : 1);
        out.shape.insert(d, 1);
        return out;
    }
    // Removes every size-1 dim.
    Layout squeeze() const {
        Layout out = *this;
        for (int d = rank() - 1; d >= 0; --d)
            if (shape[d] == 1) out = out.without_dim(d);
        return out;
    }
    // Removes dim if its size is 1, else returns the layout unchanged (PyTorch's rule). A rank-0
    // layout accepts dims 0 and -1.
    Layout squeeze(int dim) const {
        const int d = detail::wrap_dim("squeeze", dim, std::max(rank(), 1), shape);
        return rank() == 0 || shape[d] != 1 ? *this : without_dim(d);
    }

    // Broadcasts to sizes (aligned at the last dim): new leading dims and expanded size-1 dims get
    // stride 0, so their elements alias; -1 keeps an existing dim's size. Throws on a mismatch.
    Layout expand(const Shape& sizes) const {
        const int lead = sizes.size() - rank();
        require(lead >= 0, "expand: shape ", sizes, " has fewer dims than shape ", shape);
        Layout out{sizes, sizes, offset};
        for (int i = 0; i < sizes.size(); ++i) {
            const int d = i - lead;   // dim of this layout, or negative for a new leading dim
            const auto want = sizes[i];
            const bool keep = d >= 0 && (want == -1 || want == shape[d]);
            require(keep || (want >= 0 && (d < 0 || shape[d] == 1)), "expand: cannot expand shape ", shape,
                    " to ", sizes, ": size ", want, " at dim ", i, d < 0 ? " (a new leading dim)" : "",
                    " does not fit");
            out.shape[i] = keep ? shape[d] : want;
            out.strides[i] = keep ? strides[d] : 0;
        }
        out.numel();
        return out;
    }

    // The same elements in the same row-major order with shape new_shape, if strides exist that say
    // so without a copy (PyTorch's view rule); nothing otherwise. One size may be -1 (inferred).
    // Throws InvalidArgument when new_shape cannot hold numel() elements at all.
    std::optional<Layout> view(const Shape& new_shape) const {
        const Shape sizes = detail::infer_view_shape(new_shape, numel());
        auto new_strides = detail::view_strides(shape, strides, sizes);
        if (!new_strides) return std::nullopt;
        return Layout{sizes, *new_strides, offset};
    }
    // view(), throwing when it would need a copy.
    Layout view_or_throw(const Shape& new_shape) const {
        if (auto v = view(new_shape)) return *v;
        fail<InvalidArgument>("view: ", *this, " cannot be viewed as shape ", new_shape,
                              " without a copy (its strides are incompatible); use reshape() or contiguous() instead");
    }

    // "shape [2, 3] strides [3, 1] offset 0"
    std::string to_string() const { return detail::concat(*this); }
    friend std::ostream& operator<<(std::ostream& os, const Layout& l) {
        return os << "shape " << l.shape << " strides " << l.strides << " offset " << l.offset;
    }
    friend bool operator==(const Layout&, const Layout&) = default;

private:
    Layout without_dim(int d) const {
        Layout out = *this;
        out.shape.erase(d);
        out.strides.erase(d);
        return out;
    }
};

// The shape two shapes broadcast to (NumPy's rule: align at the last dim; sizes must match or one
// must be 1). Throws naming both shapes when they do not broadcast.
inline Shape broadcast_shapes(const Shape& a, const Shape& b) {
    const int rank = std::max(a.size(), b.size());
    Shape out;
    for (int i = 0; i < rank; ++i) {
        const int da = i - (rank - a.size()), db = i - (rank - b.size());
        const auto x = da >= 0 ? a[da] : 1, y = db >= 0 ? b[db] : 1;
        require(x >= 0 && y >= 0, "broadcast_shapes: shapes ", a, " and ", b, " must not have negative sizes");
        require(x == y || x == 1 || y == 1, "broadcast_shapes: shapes ", a, " and ", b,
                " do not broadcast: sizes ", x, " and ", y, " at dim ", i, " of the result differ and neither is 1");
        out.push_back(x == 1 ? y : x);
    }
    return out;
}

}  // namespace tessel
