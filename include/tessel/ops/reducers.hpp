// What each reduction accumulates: one small struct per operation with its accumulator type, its
// identity, how an element enters (load), how two partial results merge (combine: associative, used
// in a fixed order so results are reproducible) and the final value (finish). Usable in kernels.
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>

#include "functors.hpp"

namespace tessel::ops {

// The type sums and products of T accumulate in: float for float and the reduced floating types,
// double for double, int64 for integers and bool.
template <class T>
using reduce_acc_t = std::conditional_t<std::is_same_v<T, double>, double, std::conditional_t<is_float_type<T>, float, std::int64_t>>;

template <class T>
__host__ __device__ constexpr compute_t<T> lowest_value() {
    using C = compute_t<T>;
    if constexpr (std::is_floating_point_v<C>) return -std::numeric_limits<C>::infinity();
    else return std::numeric_limits<C>::lowest();
}
template <class T>
__host__ __device__ constexpr compute_t<T> highest_value() {
    using C = compute_t<T>;
    if constexpr (std::is_floating_point_v<C>) return std::numeric_limits<C>::infinity();
    else return std::numeric_limits<C>::max();
}

// Sum (integers and bool give int64; floating types keep their type).
template <class T>
struct SumReducer {
    using acc_t = reduce_acc_t<T>;
    using out_t = std::conditional_t<is_float_type<T>, T, std::int64_t>;
    __host__ __device__ acc_t identity() const { return acc_t(0); }
    __host__ __device__ acc_t load(T x, std::int64_t) const { return cast<acc_t>(x); }
    __host__ __device__ acc_t combine(acc_t a, acc_t b) const { return wrapping_add(a, b); }  // integers wrap, as on a GPU
    __host__ __device__ out_t finish(acc_t a, std::int64_t) const { return cast<out_t>(a); }
};
// Mean: the sum divided by the count (integers and bool give float32).
template <class T>
struct MeanReducer : SumReducer<T> {
    using out_t = float_result_t<T>;
    __host__ __device__ out_t finish(reduce_acc_t<T> a, std::int64_t n) const {
        using F = std::conditional_t<std::is_same_v<T, double>, double, float>;
        return cast<out_t>(F(a) / F(n));
    }
};
template <class T>
struct ProdReducer {
    using acc_t = reduce_acc_t<T>;
    using out_t = std::conditional_t<is_float_type<T>, T, std::int64_t>;
    __host__ __device__ acc_t identity() const { return acc_t(1); }
    __host__ __device__ acc_t load(T x, std::int64_t) const { return cast<acc_t>(x); }
    __host__ __device__ acc_t combine(acc_t a, acc_t b) const {
        if constexpr (std::is_integral_v<acc_t>) return acc_t(std::uint64_t(a) * std::uint64_t(b));  // wraps, as on a GPU
        else return a * b;
    }
    __host__ __device__ out_t finish(acc_t a, std::int64_t) const { return cast<out_t>(a); }
};
// Maximum and minimum; NaN wins (as PyTorch's max/min).
template <class T, bool Max>
struct ExtremumReducer {
    using acc_t = compute_t<T>;
    using out_t = T;
    __host__ __device__ acc_t identity() const { return Max ? lowest_value<T>() : highest_value<T>(); }
    __host__ __device__ acc_t load(T x, std::int64_t) const { return cast<acc_t>(x); }
    __host__ __device__ acc_t combine(acc_t a, acc_t b) const { return Max ? Maximum{}(a, b) : Minimum{}(a, b); }
    __host__ __device__ out_t finish(acc_t a, std::int64_t) const { return cast<out_t>(a); }
};
// The value and position of an extremum; ties (and NaNs) go to the lowest index.
template <class C>
struct ValueIndex {
    C value;
    std::int64_t index;
};
template <class T, bool Max>
struct ArgExtremumReducer {
    using acc_t = ValueIndex<compute_t<T>>;
    using out_t = std::int64_t;
    // Where a launch's first element lies in its output: non-zero when the launch reduces a piece
    // of an output of 2^31 elements or more (ops/pieces.hpp). Positions are counted from the
    // launch's first element and moved once per partial result (partial()), not per element.
    std::int64_t index_base = 0;
    __host__ __device__ acc_t identity() const {
        return {Max ? lowest_value<T>() : highest_value<T>(), std::numeric_limits<std::int64_t>::max()};
    }
    __host__ __device__ acc_t load(T x, std::int64_t k) const { return {cast<compute_t<T>>(x), k}; }
    // A partial result as the combination of the output's partials needs it (the identity's
    // position stays the largest).
    __host__ __device__ acc_t partial(acc_t a) const {
        return {a.value, a.index == std::numeric_limits<std::int64_t>::max() ? a.index : a.index + index_base};
    }
    __host__ __device__ acc_t combine(acc_t a, acc_t b) const {
        const bool an = is_nan(a.value), bn = is_nan(b.value);
        if (an || bn) return an && (!bn || a.index < b.index) ? a : b;
        const bool b_better = Max ? b.value > a.value : b.value < a.value;
        if (b_better || (b.value == a.value && b.index < a.index)) return b;
        return a;
    }
    // Whether v, later in the order than `best`, replaces it: a NaN wins unless `best` is one, and
    // a tie keeps the earlier. One unordered compare and one NaN test, no branch.
    __host__ __device__ static bool later_wins(compute_t<T> v, compute_t<T> best) {
        return (Max ? !(v <= best) : !(v >= best)) && !is_nan(best);
    }
    // N elements at positions k0, k0 + dk, ... after every position in `a` (a thread's next vector,
    // or its next N strided elements): the best of them found with 32-bit positions and selects,
    // then one merge, instead of N branchy combines of 64-bit positions (32 SASS instructions per
    // fp32 element before; docs/kernels.md).
    template <int N>
    __host__ __device__ acc_t fold(acc_t a, const T (&x)[N], std::int64_t k0, std::int64_t dk) const {
        compute_t<T> best = cast<compute_t<T>>(x[0]);
        int at = 0;
        for (int j = 1; j < N; ++j) {
            const compute_t<T> v = cast<compute_t<T>>(x[j]);
            const bool take = later_wins(v, best);
            best = take ? v : best;
            at = take ? j : at;
        }
        // The identity's position is the largest: whatever comes first replaces it (-inf included).
        if (a.index == std::numeric_limits<std::int64_t>::max() || later_wins(best, a.value)) return {best, k0 + at * dk};
        return a;
    }
    __host__ __device__ out_t finish(acc_t a, std::int64_t) const { return a.index; }
};
// all / any over values taken as bool.
template <class T, bool All>
struct LogicalReducer {
    using acc_t = std::int32_t;
    using out_t = bool;
    __host__ __device__ acc_t identity() const { return All ? 1 : 0; }
    __host__ __device__ acc_t load(T x, std::int64_t) const { return cast<bool>(x) ? 1 : 0; }
    __host__ __device__ acc_t combine(acc_t a, acc_t b) const { return All ? (a & b) : (a | b); }
    __host__ __device__ out_t finish(acc_t a, std::int64_t) const { return a != 0; }
};
// Vector norms: L1 (sum |x|), L2 (sqrt of sum x^2), inf (max |x|).
enum class NormOrder { l1, l2, inf };
template <class T, NormOrder P>
struct NormReducer {
    using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;
    using out_t = float_result_t<T>;
    __host__ __device__ acc_t identity() const { return acc_t(0); }
    __host__ __device__ acc_t load(T x, std::int64_t) const {
        const acc_t v = cast<acc_t>(x);
        return P == NormOrder::l2 ? v * v : Abs{}(v);
    }
    __host__ __device__ acc_t combine(acc_t a, acc_t b) const { return P == NormOrder::inf ? Maximum{}(a, b) : a + b; }
    __host__ __device__ out_t finish(acc_t a, std::int64_t) const { return cast<out_t>(P == NormOrder::l2 ? math::sqrt(a) : a); }
};
// Count, mean and sum of squared deviations (Welford), merged with Chan et al.'s pairwise formula.
template <class C>
struct Moments {
    C mean;
    C m2;
    std::int64_t count;
};
template <class T, bool Std>
struct VarianceReducer {
    using F = std::conditional_t<std::is_same_v<T, double>, double, float>;
    using acc_t = Moments<F>;
    using out_t = float_result_t<T>;
    double correction = 1;  // 1: unbiased (divide by n - 1); 0: population; any other, as torch's (0.5: n - 0.5)
    __host__ __device__ acc_t identity() const { return {F(0), F(0), 0}; }
    // m2 starts as x - x: 0, or NaN for an infinity or a NaN, which every merge then carries (torch's
    // answer: the deviations inf - inf are NaN); the merge alone gave inf or NaN depending on where
    // in the tree the infinity fell. Finite values whose spread overflows still give inf.
    __host__ __device__ acc_t load(T x, std::int64_t) const {
        const F v = cast<F>(x);
        return {v, v - v, 1};
    }
    __host__ __device__ acc_t combine(acc_t a, acc_t b) const {
        if (a.count == 0) return b;
        if (b.count == 0) return a;
        const std::int64_t n = a.count + b.count;
        const F delta = b.mean - a.mean, wb = F(b.count) / F(n);
        // Means far apart (near +-3e38) overflow delta: the merged mean is then their weighted sum,
        // which cannot overflow (a mean of inf would turn the next merge's deviation into NaN),
        // while the squared deviations take the inf that is the answer.
        const F mean = delta - delta == F(0) ? a.mean + delta * wb : (a.mean - a.mean * wb) + b.mean * wb;
        return {mean, a.m2 + b.m2 + delta * delta * F(a.count) * wb, n};
    }
    // N elements at once (a thread's next vector, or its next N strided elements): their own mean
    // and squared deviations in registers, then one merge, where N loads and combines paid N
    // divisions and N conversions of 64-bit counts (38 SASS instructions per fp32 element before;
    // docs/kernels.md). The mean scales before it adds (1/N is a power of two, exact) and adds
    // pairwise, so N equal values (near the type's largest too) keep a variance of 0; an infinity
    // makes a deviation inf - inf, NaN, as load's x - x does.
    static constexpr bool fold_ignores_positions = true;  // kernels::folds_unordered
    template <int N>
    __host__ __device__ acc_t fold(acc_t a, const T (&x)[N], std::int64_t, std::int64_t) const {
        static_assert((N & (N - 1)) == 0, "1/N must be exact");
        F v[N];
        for (int j = 0; j < N; ++j) v[j] = cast<F>(x[j]);
        // Pairwise: equal values stay exact at every level (v/16 + v/16 = v/8, ...), where a running
        // sum of v/16 needs up to 4 bits more than the type has (0.1f: a variance of 2e-16, not 0).
        // The first level scales both terms (exact: 1/N is a power of two; a multiply and a fused
        // multiply-add per pair on the GPU).
        F mean;
        if constexpr (N == 1) {
            mean = v[0];
        } else {
            F pair[N / 2];
            for (int j = 0; j < N / 2; ++j) pair[j] = v[j] * (F(1) / F(N)) + v[j + N / 2] * (F(1) / F(N));
            for (int width = N / 4; width >= 1; width /= 2)
                for (int j = 0; j < width; ++j) pair[j] += pair[j + width];
            mean = pair[0];
        }
        F m2 = F(0);
        for (int j = 0; j < N; ++j) m2 += (v[j] - mean) * (v[j] - mean);
        return combine(a, acc_t{mean, m2, N});
    }
    // Divided by max(0, n - correction), as torch: a correction of n or more gives inf (0/0: NaN
    // when every value is equal, and for no values).
    __host__ __device__ out_t finish(acc_t a, std::int64_t) const {
        const F denom = double(a.count) > correction ? F(double(a.count) - correction) : F(0);
        const F var = a.m2 / denom;
        return cast<out_t>(Std ? math::sqrt(var) : var);
    }
};

}  // namespace tessel::ops
