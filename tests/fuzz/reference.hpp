// Host references for the op fuzzer, in plain loops over row-major values: broadcasting, which
// elements each output of a reduction combines, the lines a row op or a sort walks, and the
// integer semantics tessel documents (Python's modulo, wrapping products and powers). Sums are
// accumulated in long double, so the reference's own error is negligible beside any tolerance.
// Nothing here calls tessel.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <optional>
#include <vector>

namespace fuzz::ref {

using Dims = std::vector<std::int64_t>;

inline std::int64_t numel(const Dims& d) {
    std::int64_t n = 1;
    for (auto s : d) n *= s;
    return n;
}

// NumPy's broadcast of two shapes (aligned at the last dim; sizes equal or one of them 1), or
// nothing when they do not broadcast.
inline std::optional<Dims> broadcast(const Dims& a, const Dims& b) {
    const std::size_t n = std::max(a.size(), b.size());
    Dims out(n);
    for (std::size_t k = 0; k < n; ++k) {
        const std::int64_t x = k + a.size() >= n ? a[k + a.size() - n] : 1;
        const std::int64_t y = k + b.size() >= n ? b[k + b.size() - n] : 1;
        if (x != y && x != 1 && y != 1) return std::nullopt;
        out[k] = x == 1 ? y : x;
    }
    return out;
}

// The row-major index, in an operand of shape `from`, of element `flat` of the shape `to` it is
// broadcast to: dims the operand lacks or has as 1 repeat its element.
inline std::int64_t broadcast_index(std::int64_t flat, const Dims& to, const Dims& from) {
    std::int64_t index = 0, stride = 1;
    for (std::size_t k = to.size(); k-- > 0;) {
        const std::int64_t coord = flat % to[k];
        flat /= to[k];
        const std::ptrdiff_t j = std::ptrdiff_t(k) - std::ptrdiff_t(to.size() - from.size());
        if (j < 0) continue;
        const std::int64_t size = from[std::size_t(j)];
        if (size != 1) index += coord * stride;
        stride *= size;
    }
    return index;
}

// What a reduction over `axes` (wrapped to [0, rank); empty: all dims) computes: the output shape
// and, for each output in row-major order, the row-major positions of its elements, ordered
// row-major over the reduced dims (the order argmax's flat index counts in).
struct Groups {
    Dims out_shape;
    std::vector<std::vector<std::int64_t>> members;
};
inline Groups reduction_groups(const Dims& shape, const std::vector<int>& axes, bool keepdim) {
    const std::size_t rank = shape.size();
    std::vector<bool> reduced(rank, axes.empty());
    for (int a : axes) reduced[std::size_t(a)] = true;
    Groups g;
    Dims kept_sizes;
    for (std::size_t d = 0; d < rank; ++d) {
        if (reduced[d]) {
            if (keepdim) g.out_shape.push_back(1);
        } else {
            g.out_shape.push_back(shape[d]);
            kept_sizes.push_back(shape[d]);
        }
    }
    g.members.resize(std::size_t(numel(kept_sizes)));
    const std::int64_t n = numel(shape);
    // Walking the input in row-major order visits each group's members in their row-major order.
    for (std::int64_t i = 0; i < n; ++i) {
        std::int64_t rest = i, out = 0, out_stride = 1;
        for (std::size_t d = rank; d-- > 0;) {
            const std::int64_t coord = rest % shape[d];
            rest /= shape[d];
            if (!reduced[d]) {
                out += coord * out_stride;
                out_stride *= shape[d];
            }
        }
        g.members[std::size_t(out)].push_back(i);
    }
    return g;
}

// The lines along `axis` (wrapped): for each combination of the other dims in row-major order, the
// row-major positions of its elements along the axis.
inline std::vector<std::vector<std::int64_t>> lines(const Dims& shape, int axis) {
    if (shape.empty()) return {{0}};  // a scalar is one line of one element
    return reduction_groups(shape, {axis}, false).members;
}

// ---- integer semantics ----------------------------------------------------------------------------

// a * b wrapping at 64 bits (as tessel's integer products, like the GPU, do).
inline std::int64_t wrap_mul(std::int64_t a, std::int64_t b) { return std::int64_t(std::uint64_t(a) * std::uint64_t(b)); }
// v wrapped to a signed integer of `bits` bits.
inline std::int64_t wrap_to(std::int64_t v, int bits) {
    if (bits >= 64) return v;
    const std::uint64_t mask = (std::uint64_t(1) << bits) - 1, u = std::uint64_t(v) & mask;
    return (u >> (bits - 1)) ? std::int64_t(u | ~mask) : std::int64_t(u);
}
// Python's a % b (the divisor's sign); tessel defines x % 0 (and x % -1) as 0.
inline std::int64_t py_mod(std::int64_t a, std::int64_t b) {
    if (b == 0 || b == -1) return 0;
    std::int64_t r = a % b;
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
}
inline double py_fmod(double a, double b) {
    double r = std::fmod(a, b);
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
}
// a to the power b in a `bits`-bit integer: squaring with wrap-around; negative exponents give 0
// except for bases 1 and -1.
inline std::int64_t int_pow(std::int64_t a, std::int64_t b, int bits) {
    if (b < 0) return a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;
    std::int64_t r = 1;
    for (std::int64_t e = 0; e < b; ++e) r = wrap_to(wrap_mul(r, a), bits);
    return r;
}

// ---- float semantics --------------------------------------------------------------------------

// Stable order of positions by value (ascending or descending) with -0.0 equal to +0.0: ties keep
// their original order.
inline std::vector<std::int64_t> stable_order(const std::vector<double>& v, bool descending) {
    std::vector<std::int64_t> idx(v.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](std::int64_t a, std::int64_t b) {
        return descending ? v[std::size_t(a)] > v[std::size_t(b)] : v[std::size_t(a)] < v[std::size_t(b)];
    });
    return idx;
}

}  // namespace fuzz::ref
