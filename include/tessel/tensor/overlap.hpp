// Whether strided views share memory: the checks that let copy_, expression assignment and matmul
// refuse a destination that overlaps its source, and accept interleaved views that do not
// (x[:, :d] and x[:, d:], x[::2] and x[1::2]) though their byte ranges cross.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <utility>
#include <vector>

#include "layout.hpp"

namespace tessel::detail {

// The lowest and highest byte a non-empty layout of element_size bytes touches; `first` is the
// address of its element at index 0 (a tensor's data()).
inline std::pair<std::uintptr_t, std::uintptr_t> byte_range(const void* first, const Layout& l, std::size_t element_size) {
    const auto e = *l.extent();
    const auto base = reinterpret_cast<std::uintptr_t>(first) - std::uintptr_t(l.offset) * element_size;
    // The last byte in unsigned arithmetic: highest may be INT64_MAX (from_blob's hand-made strides).
    return {base + std::uintptr_t(e.lowest) * element_size, base + std::uintptr_t(e.highest) * element_size + (element_size - 1)};
}

// What two views' memory has in common (or one view's elements among themselves).
enum class Sharing { none, some, unknown };
// The verb for an error message: "overlap" ("overlaps" for one subject) or "may overlap" (the search ran out).
inline const char* overlap_verb(Sharing s, bool one_subject = false) {
    return s != Sharing::some ? "may overlap (too many candidates to rule it out)" : one_subject ? "overlaps" : "overlap";
}

// The most elements whose offsets repeated_elements lists to decide an interleaved layout.
inline constexpr std::int64_t repeated_elements_listing_limit = std::int64_t(1) << 20;

// Whether distinct indices of `l` reach one element: none for an empty layout, or when the dims
// sorted by stride each step past everything the smaller ones reach (every view tessel's own
// operations make); some for a zero stride over a dim of size > 1; otherwise (dims interleaved, as
// from_blob or DLPack strides may be: shape [3, 2], strides [2, 3] reaches 0 3 2 5 4 7) by listing
// the offsets of up to repeated_elements_listing_limit elements, and unknown beyond.
inline Sharing repeated_elements(const Layout& l) {
    if (l.numel() == 0) return Sharing::none;  // no elements, none repeated (whatever the strides)
    std::array<std::pair<std::int64_t, std::int64_t>, max_rank> dims;  // (|stride|, size)
    int n = 0;
    for (int d = 0; d < l.rank(); ++d)
        if (l.shape[d] > 1) dims[std::size_t(n++)] = {l.strides[d] < 0 ? -l.strides[d] : l.strides[d], l.shape[d]};
    for (int k = 1; k < n; ++k)  // insertion sort of at most 8 (std::sort's 16-element insertion step trips g++'s -Warray-bounds)
        for (int j = k; j > 0 && dims[std::size_t(j)] < dims[std::size_t(j - 1)]; --j) std::swap(dims[std::size_t(j)], dims[std::size_t(j - 1)]);
    std::int64_t reach = 0;  // the largest offset the smaller dims reach
    bool nested = true;
    for (int k = 0; k < n && nested; ++k) {
        const auto [stride, size] = dims[std::size_t(k)];
        if (stride == 0) return Sharing::some;
        nested = stride > reach;
        reach += stride * (size - 1);  // fits: the layout's extent was checked when it was made
    }
    if (nested) return Sharing::none;
    const std::int64_t count = l.numel();
    if (count > repeated_elements_listing_limit) return Sharing::unknown;
    std::vector<std::int64_t> offsets;
    offsets.reserve(std::size_t(count));
    std::array<std::int64_t, max_rank> idx{};
    for (std::int64_t i = 0; i < count; ++i) {  // row-major; each offset relative to the first element
        std::int64_t at = 0;
        for (int d = 0; d < l.rank(); ++d) at += idx[std::size_t(d)] * l.strides[d];
        offsets.push_back(at);
        for (int d = l.rank() - 1; d >= 0; --d) {
            if (++idx[std::size_t(d)] < l.shape[d]) break;
            idx[std::size_t(d)] = 0;
        }
    }
    std::sort(offsets.begin(), offsets.end());
    return std::adjacent_find(offsets.begin(), offsets.end()) != offsets.end() ? Sharing::some : Sharing::none;
}
inline bool distinct_elements(const Layout& l) { return repeated_elements(l) == Sharing::none; }
// How a refusal of `l` as a destination ends: that some elements repeat, or that it could not be ruled out.
inline const char* repeated_elements_text(const Layout& l) {
    return repeated_elements(l) == Sharing::unknown
               ? "may reach some elements through more than one index (its dims interleave, and it has too many elements to rule it out)"
               : "reaches some elements through more than one index";
}

// Whether two views of `shape` are the same elements: the same first element and the same strides
// wherever a dim has more than one element (a size-1 dim's stride is never used).
inline bool same_elements(const void* a, const Shape& a_strides, const void* b, const Shape& b_strides, const Shape& shape) {
    bool same = a == b && a_strides.size() == shape.size() && b_strides.size() == shape.size();
    for (int d = 0; same && d < shape.size(); ++d) same = shape[d] <= 1 || a_strides[d] == b_strides[d];
    return same;
}

// Whether sum(c_k x_k) = target has a solution with 0 <= x_k <= bound_k, for positive coefficients
// sorted from the largest: a depth-first search that tries, at each level, only the x_k the rest can
// still complete (by their largest sum) and that leave a remainder divisible by the gcd of the
// remaining coefficients (an arithmetic progression, from a modular inverse). Terms are merged
// first where that is exact: equal coefficients (x + y over [0, u] and [0, v] is z over [0, u + v]),
// and c = q d with the d term's bound at least q - 1 (q x + y then takes every value of
// [0, q u + v]), so the rows of two views, one's row stride a multiple of the other's, cost a step
// each, not one per row. `work` counts steps; past its limit the answer is unknown.
class BoundedSum {
public:
    struct Term {
        std::int64_t coefficient, bound;
    };
    // The terms' coefficients and bounds are positive, and each c_k * bound_k and their sum fit in
    // 64 bits (memory_sharing checks).
    BoundedSum(std::vector<Term> terms, std::int64_t work_limit) : terms_(std::move(terms)), limit_(work_limit) {
        for (bool merged = true; merged;) {
            merged = false;
            for (std::size_t i = 0; i < terms_.size() && !merged; ++i)
                for (std::size_t j = 0; j < terms_.size() && !merged; ++j) {
                    const Term big = terms_[i], small = terms_[j];
                    if (i == j || big.coefficient % small.coefficient != 0) continue;
                    const std::int64_t q = big.coefficient / small.coefficient;
                    if (small.bound < q - 1) continue;
                    terms_[j].bound = q * big.bound + small.bound;  // at most the two terms' largest sum over c_j
                    terms_.erase(terms_.begin() + std::ptrdiff_t(i));
                    merged = true;
                }
        }
        std::sort(terms_.begin(), terms_.end(), [](const Term& a, const Term& b) { return a.coefficient > b.coefficient; });
        reach_.assign(terms_.size() + 1, 0);
        gcd_.assign(terms_.size() + 1, 0);
        for (std::size_t k = terms_.size(); k-- > 0;) {
            reach_[k] = reach_[k + 1] + terms_[k].coefficient * terms_[k].bound;
            gcd_[k] = std::gcd(gcd_[k + 1], terms_[k].coefficient);
        }
    }
    // The largest sum the terms reach.
    std::int64_t reach() const { return reach_[0]; }
    Sharing solvable(std::int64_t target) {
        if (target < 0 || target > reach_[0]) return Sharing::none;
        exhausted_ = false;
        const bool found = search(0, target);
        return found ? Sharing::some : exhausted_ ? Sharing::unknown : Sharing::none;
    }

private:
    static std::int64_t floor_div(std::int64_t a, std::int64_t b) { return a / b - (a % b != 0 && (a < 0) != (b < 0)); }
    static std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return -floor_div(-a, b); }
    // The inverse of a modulo m (gcd(a, m) = 1, m > 1), by the extended Euclidean algorithm.
    static std::int64_t inverse(std::int64_t a, std::int64_t m) {
        std::int64_t r0 = m, r1 = a % m, s0 = 0, s1 = 1;
        while (r1 != 0) {
            const std::int64_t q = r0 / r1;
            const std::int64_t r2 = r0 - q * r1, s2 = s0 - q * s1;
            r0 = r1, r1 = r2, s0 = s1, s1 = s2;
        }
        return s0 < 0 ? s0 + m : s0;
    }
    static std::int64_t mul_mod(std::int64_t a, std::int64_t b, std::int64_t m) {
        __extension__ using wide = unsigned __int128;
        return std::int64_t(wide(std::uint64_t(a)) * wide(std::uint64_t(b)) % wide(std::uint64_t(m)));
    }
    bool search(std::size_t k, std::int64_t rest) {
        if (k == terms_.size()) return rest == 0;
        if (++work_ > limit_) {
            exhausted_ = true;
            return false;
        }
        const auto [c, bound] = terms_[k];
        const std::int64_t lo = std::max<std::int64_t>(0, ceil_div(rest - reach_[k + 1], c));
        const std::int64_t hi = std::min(bound, floor_div(rest, c));
        if (lo > hi) return false;
        const std::int64_t g = gcd_[k + 1];
        if (g == 0) return rest % c == 0;  // the last term: x = rest / c, within [lo, hi]
        // rest - c x must be a multiple of g: x = x0 (mod m).
        const std::int64_t d = std::gcd(c, g);
        if (rest % d != 0) return false;
        const std::int64_t m = g / d;
        const std::int64_t x0 = m == 1 ? 0 : mul_mod((rest / d) % m, inverse((c / d) % m, m), m);
        for (std::int64_t x = lo + ((x0 - lo) % m + m) % m; x <= hi; x += m) {
            if (search(k + 1, rest - c * x)) return true;
            if (exhausted_) return false;
        }
        return false;
    }

    std::vector<Term> terms_;
    std::vector<std::int64_t> reach_, gcd_;  // of terms k.. (the largest sum; the gcd, 0 for none)
    std::int64_t limit_, work_ = 0;
    bool exhausted_ = false;
};

// Whether some byte of view a (elements of ea bytes, element 0 at `a`) is also a byte of view b: x
// (an element's address in a) and y (in b) overlap when x - y lies in [-(ea - 1), eb - 1], which is
// sum(i_d * stride_a_d) - sum(j_d * stride_b_d) = (b - a) - (ea - 1) + t over the indices i, j and
// t in [0, ea + eb - 2]; negative terms are flipped (v -> bound - v) into a bounded sum of positive
// coefficients. Views whose byte ranges do not cross are told apart at once; `unknown` past
// work_limit search steps (strides whose rows do not line up, over very many elements), and for
// hand-made strides whose byte offsets do not fit in 64 bits.
inline Sharing memory_sharing(const void* a, const Layout& la, std::size_t ea, const void* b, const Layout& lb, std::size_t eb,
                              std::int64_t work_limit = std::int64_t(1) << 16) {
    if (la.numel() == 0 || lb.numel() == 0) return Sharing::none;
    const auto ra = byte_range(a, la, ea), rb = byte_range(b, lb, eb);
    if (ra.second < rb.first || rb.second < ra.first) return Sharing::none;
    std::int64_t target = std::int64_t(reinterpret_cast<std::uintptr_t>(b) - reinterpret_cast<std::uintptr_t>(a)) - std::int64_t(ea - 1);
    std::int64_t reach = 0;  // the sum of every term's largest value, which the search adds up
    bool overflow = false;
    std::vector<BoundedSum::Term> terms;
    auto add = [&](std::int64_t stride, std::int64_t size, std::size_t element_size, bool negate) {
        if (size <= 1 || stride == 0) return;  // a dim of one element moves nothing, whatever its stride
        std::int64_t c = 0, span = 0;
        overflow = overflow || __builtin_mul_overflow(stride, std::int64_t(element_size), &c) || c == INT64_MIN;
        if (overflow) return;
        c = negate ? -c : c;
        const std::int64_t magnitude = c < 0 ? -c : c;
        overflow = __builtin_mul_overflow(magnitude, size - 1, &span) || __builtin_add_overflow(reach, span, &reach) ||
                   (c < 0 && __builtin_add_overflow(target, span, &target));  // c v = c bound + |c| (bound - v)
        terms.push_back({magnitude, size - 1});
    };
    for (int d = 0; d < la.rank(); ++d) add(la.strides[d], la.shape[d], ea, false);
    for (int d = 0; d < lb.rank(); ++d) add(lb.strides[d], lb.shape[d], eb, true);
    if (overflow) return Sharing::unknown;
    BoundedSum sum(std::move(terms), work_limit);
    bool unknown = false;
    for (std::int64_t t = 0; t <= std::int64_t(ea + eb - 2) && target <= sum.reach() - t; ++t) {  // past reach: no solution
        const Sharing s = sum.solvable(target + t);
        if (s == Sharing::some) return s;
        unknown = unknown || s == Sharing::unknown;
    }
    return unknown ? Sharing::unknown : Sharing::none;
}

}  // namespace tessel::detail
