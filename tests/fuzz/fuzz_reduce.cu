// Fuzzed reductions: sum, mean, prod, amax, amin, argmax, argmin, var, stddev, norm (l1, l2, inf),
// all and any over random axes (negative, unordered, all of them), keepdim or not, of a view or of a
// fused expression; and the bad axes and inputs they must reject.
#include <tessel/ops/reduce.hpp>

#include "fuzz.hpp"
#include "reference.hpp"

namespace fuzz {
namespace {

enum class Op { sum, mean, prod, amax, amin, argmax, argmin, var, stddev, l1, l2, linf, all, any };
const char* op_name(Op o) {
    static const char* names[] = {"sum", "mean", "prod", "amax", "amin", "argmax", "argmin", "var", "stddev", "norm l1", "norm l2", "norm inf", "all", "any"};
    return names[int(o)];
}
constexpr unsigned bit(Op o) { return 1u << int(o); }

// Which reductions each element type runs, and (fused) which one it runs over an expression:
// every (type, reduction) pair is a kernel set of its own, expensive to compile, so each type runs
// the common ones (sum, amax, argmax) and a share of the rest; together they cover every reduction.
template <class T>
struct Plan;
template <>
struct Plan<float> {
    static constexpr unsigned ops = bit(Op::sum) | bit(Op::mean) | bit(Op::amax) | bit(Op::argmax) | bit(Op::var) | bit(Op::l1) | bit(Op::all);
    static constexpr Op fused = Op::sum;
};
template <>
struct Plan<double> {
    static constexpr unsigned ops = bit(Op::sum) | bit(Op::prod) | bit(Op::amax) | bit(Op::argmax) | bit(Op::var) | bit(Op::l2);
    static constexpr Op fused = Op::amax;
};
template <>
struct Plan<__half> {
    static constexpr unsigned ops = bit(Op::sum) | bit(Op::amax) | bit(Op::argmax) | bit(Op::argmin) | bit(Op::stddev) | bit(Op::l2) | bit(Op::any);
    static constexpr Op fused = Op::l1;
};
template <>
struct Plan<__nv_bfloat16> {
    static constexpr unsigned ops = bit(Op::sum) | bit(Op::amax) | bit(Op::amin) | bit(Op::argmax) | bit(Op::var) | bit(Op::linf);
    static constexpr Op fused = Op::sum;
};
template <>
struct Plan<std::int32_t> {
    static constexpr unsigned ops = bit(Op::sum) | bit(Op::mean) | bit(Op::amax) | bit(Op::amin) | bit(Op::argmax) | bit(Op::all);
    static constexpr Op fused = Op::mean;
};
template <>
struct Plan<std::int64_t> {
    static constexpr unsigned ops = bit(Op::sum) | bit(Op::prod) | bit(Op::amax) | bit(Op::argmax) | bit(Op::argmin) | bit(Op::any);
    static constexpr Op fused = Op::sum;
};
template <class T>
Op random_op(Rng& r) {
    std::vector<Op> v;
    for (int o = 0; o < 14; ++o)
        if (Plan<T>::ops & (1u << o)) v.push_back(Op(o));
    return r.pick(v);
}

// Calls reduction `op` (one of Plan<T>'s, known at compile time through Ops) on x, a tensor or an
// expression, and passes the result to f.
template <class T, bool Fused, class X, class F>
void call(Op op, const X& x, const Axes& axes, bool keepdim, double correction, std::optional<rt::stream_t> s, F&& f) {
    constexpr unsigned ops = Fused ? bit(Plan<T>::fused) : Plan<T>::ops;
    switch (op) {
        case Op::sum: if constexpr (bool(ops & bit(Op::sum))) return f(sum(x, axes, keepdim, s)); break;
        case Op::mean: if constexpr (bool(ops & bit(Op::mean))) return f(mean(x, axes, keepdim, s)); break;
        case Op::prod: if constexpr (bool(ops & bit(Op::prod))) return f(prod(x, axes, keepdim, s)); break;
        case Op::amax: if constexpr (bool(ops & bit(Op::amax))) return f(amax(x, axes, keepdim, s)); break;
        case Op::amin: if constexpr (bool(ops & bit(Op::amin))) return f(amin(x, axes, keepdim, s)); break;
        case Op::argmax: if constexpr (bool(ops & bit(Op::argmax))) return f(argmax(x, axes, keepdim, s)); break;
        case Op::argmin: if constexpr (bool(ops & bit(Op::argmin))) return f(argmin(x, axes, keepdim, s)); break;
        case Op::var: if constexpr (bool(ops & bit(Op::var))) return f(var(x, axes, correction, keepdim, s)); break;
        case Op::stddev: if constexpr (bool(ops & bit(Op::stddev))) return f(stddev(x, axes, correction, keepdim, s)); break;
        case Op::l1: if constexpr (bool(ops & bit(Op::l1))) return f(norm(x, ops::NormOrder::l1, axes, keepdim, s)); break;
        case Op::l2: if constexpr (bool(ops & bit(Op::l2))) return f(norm(x, ops::NormOrder::l2, axes, keepdim, s)); break;
        case Op::linf: if constexpr (bool(ops & bit(Op::linf))) return f(norm(x, ops::NormOrder::inf, axes, keepdim, s)); break;
        case Op::all: if constexpr (bool(ops & bit(Op::all))) return f(all(x, axes, keepdim, s)); break;
        case Op::any: if constexpr (bool(ops & bit(Op::any))) return f(any(x, axes, keepdim, s)); break;
    }
    check_failed("fuzzer: ", op_name(op), " is not in the plan of ", type_name<T>());
}
// The size of op's result elements (sums and products of integers are int64, their means float).
template <class T>
std::size_t out_size(Op o) {
    switch (o) {
        case Op::sum:
        case Op::prod: return is_floating<T> ? sizeof(T) : 8;
        case Op::amax:
        case Op::amin: return sizeof(T);
        case Op::argmax:
        case Op::argmin: return 8;
        case Op::all:
        case Op::any: return 1;
        default: return is_floating<T> ? sizeof(T) : 4;
    }
}
bool needs_elements(Op o) { return o == Op::amax || o == Op::amin || o == Op::argmax || o == Op::argmin || o == Op::linf; }

// True when summing `terms` in any order in a type of unit roundoff u is exact: every term is a
// multiple of 1/16 and every partial sum stays below 2^24 sixteenths (float) or 2^53 (double).
bool exactly_summable(const std::vector<double>& terms, double u) {
    double total = 0;
    for (double t : terms) {
        if (t * 16 != std::floor(t * 16)) return false;
        total += std::fabs(t);
    }
    return total * 16 * u < 0.5;
}

// Expected value(s) of one output from its elements, with tolerances:
//  - sums (sum, mean, norm l1) in an accumulator of roundoff u: exact when the terms allow it
//    (quarters), else (K - 1) u sum|x|, the first-order bound of any summation order;
//  - prod: K u |prod| (one rounding per product);
//  - var: Welford's merged updates in F: 4 K u sum(x^2) / (K - correction) bounds the error of
//    the sum of squared deviations for data centred near 0, as the generated data is;
//    stddev and norm l2 take square roots: |sqrt(a) - sqrt(b)| <= min(sqrt|a - b|, |a - b| / sqrt(a));
//  - amax, amin, arg*, all, any, norm inf: exact.
// Then the rounding into the output type. `element_slack` is what rounding each element to the
// expression's type (fused reductions) may add per element.
struct Expected {
    double value = 0, tol = 0;
    std::int64_t exact = 0;
};

template <class T, class Out>
Expected reference(Op op, const std::vector<double>& v, double correction, double element_slack) {
    using Acc = ops::reduce_acc_t<T>;
    using F = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const double ua = roundoff<Acc>(), uf = roundoff<F>();
    const auto K = std::int64_t(v.size());
    Expected e;
    long double s = 0, sa = 0, sq = 0;
    for (double x : v) s += x, sa += std::fabs(x), sq += (long double)x * x;
    const double slack = element_slack * double(K);
    auto sum_error = [&](const std::vector<double>& terms, double u, long double abs_total) {
        return exactly_summable(terms, u) ? slack : double(std::max<std::int64_t>(K - 1, 0)) * u * double(abs_total) + slack;
    };
    switch (op) {
        case Op::sum:
            if constexpr (std::is_integral_v<Out>) {
                for (double x : v) e.exact += std::int64_t(x);
            } else {
                e.value = double(s);
                e.tol = sum_error(v, ua, sa);
            }
            break;
        case Op::mean:
            e.value = K ? double(s / K) : std::nan("");
            e.tol = (std::is_integral_v<T> ? 0.0 : sum_error(v, ua, sa) / double(std::max<std::int64_t>(K, 1))) + 2 * uf * std::fabs(e.value);
            break;
        case Op::prod:
            if constexpr (std::is_integral_v<Out>) {
                e.exact = 1;
                for (double x : v) e.exact = ref::wrap_mul(e.exact, std::int64_t(x));
            } else {
                long double p = 1;
                for (double x : v) p *= x;
                e.value = double(p);
                // Long products of values near one can sink below the normal range, where
                // precision is absolute: anything that small is as good as the reference.
                e.tol = double(K) * ua * std::fabs(e.value) + slack + 2 * min_normal<Acc>();
            }
            break;
        case Op::amax:
        case Op::amin:
            e.value = op == Op::amax ? *std::max_element(v.begin(), v.end()) : *std::min_element(v.begin(), v.end());
            e.exact = std::int64_t(e.value);
            e.tol = element_slack;
            break;
        case Op::argmax:
        case Op::argmin:
            e.exact = op == Op::argmax ? std::max_element(v.begin(), v.end()) - v.begin() : std::min_element(v.begin(), v.end()) - v.begin();
            break;
        case Op::var:
        case Op::stddev: {
            const long double mean = K ? s / K : 0;
            long double m2 = 0;
            for (double x : v) m2 += (x - mean) * (x - mean);
            const double denom = double(K) - correction;
            // torch divides by max(0, K - correction): m2 / 0 is inf, or NaN when m2 is 0.
            const double var = denom > 0 ? double(m2 / denom) : m2 > 0 ? HUGE_VAL : std::nan("");
            const double tol = denom > 0 ? 4 * double(K) * uf * double(sq) / double(denom) : 0;
            if (op == Op::var) {
                e.value = var;
                e.tol = tol;
            } else {
                e.value = std::sqrt(var);
                e.tol = std::min(std::sqrt(tol), e.value > 0 ? tol / e.value : std::sqrt(tol)) + uf * e.value;
            }
            break;
        }
        case Op::l1:
            e.value = double(sa);
            e.tol = sum_error(v, uf, sa);
            break;
        case Op::l2: {
            std::vector<double> squares;
            for (double x : v) squares.push_back(x * x);
            const double d = exactly_summable(squares, uf) ? 0 : 2 * double(K) * uf * double(sq);
            e.value = std::sqrt(double(sq));
            e.tol = (d > 0 ? d / std::max(e.value, std::sqrt(d)) : 0) + 2 * uf * e.value + slack;
            break;
        }
        case Op::linf:
            for (double x : v) e.value = std::max(e.value, std::fabs(x));
            e.tol = element_slack;
            break;
        case Op::all: e.exact = std::all_of(v.begin(), v.end(), [](double x) { return x != 0; }); break;
        case Op::any: e.exact = std::any_of(v.begin(), v.end(), [](double x) { return x != 0; }); break;
    }
    if constexpr (!std::is_integral_v<Out>) e.tol += rounding<Out>(e.value);
    return e;
}

// Checks result `r` of `op` over the elements `values` (row-major, of shape `shape`).
template <class T, class Out>
void check_reduction(Step& st, Op op, const Tensor<Out>& r, const std::vector<double>& values, const Dims& shape,
                     const std::vector<int>& axes, bool keepdim, double correction, double element_slack) {
    const ref::Groups g = ref::reduction_groups(shape, axes, keepdim);
    check_shape(op_name(op), r.shape(), g.out_shape);
    const std::size_t m = g.members.size();
    std::vector<double> expected(m), tol(m);
    std::vector<std::int64_t> exact(m);
    for (std::size_t o = 0; o < m; ++o) {
        std::vector<double> v;
        for (std::int64_t i : g.members[o]) v.push_back(values[std::size_t(i)]);
        const Expected e = reference<T, Out>(op, v, correction, element_slack);
        expected[o] = e.value, tol[o] = e.tol, exact[o] = e.exact;
    }
    const Readback<Out> back = read_back(r, st.stream());
    if constexpr (std::is_integral_v<Out>) compare_exact(op_name(op), g.out_shape, back.ints(), exact);
    else compare(op_name(op), g.out_shape, back.doubles(), expected, tol, max_finite<Out>());
}

// Random axes of a tensor of rank `rank`: all (none given), or a subset in random order, each
// possibly counted from the end; wrapped (sorted, unique) into `wrapped`.
std::vector<int> random_axes(Rng& r, int rank, std::vector<int>& wrapped) {
    std::vector<int> axes;
    wrapped.clear();
    if (rank == 0) {
        if (r.chance(0.5)) axes.push_back(0);
        return axes;
    }
    if (r.chance(0.2)) return axes;
    for (int d = 0; d < rank; ++d)
        if (r.chance(0.5)) axes.push_back(d);
    if (axes.empty()) axes.push_back(int(r.between(0, rank - 1)));
    std::shuffle(axes.begin(), axes.end(), std::mt19937_64(r.bits()));
    wrapped = axes;
    std::sort(wrapped.begin(), wrapped.end());
    for (int& a : axes)
        if (r.chance(0.3)) a -= rank;
    return axes;
}

template <class T>
void valid_step(Step& st) {
    const Dims shape = step_shape(st.rng);
    std::vector<int> wrapped;
    const std::vector<int> axes = random_axes(st.rng, int(shape.size()), wrapped);
    const bool keepdim = st.rng.chance(0.5);
    // Fused: the reduction reads a * b as it computes it (same type, so the elements are rounded to T).
    const bool fused = st.rng.chance(0.2);
    Op op = fused ? Plan<T>::fused : random_op<T>(st.rng);
    const ref::Groups plan = ref::reduction_groups(shape, wrapped, keepdim);
    // No elements to reduce (also where there is no output either: torch refuses amax over dim 1 of
    // [0, 0], and so does tessel).
    std::int64_t reduced_elements = 1;
    if (wrapped.empty()) for (const std::int64_t d : shape) reduced_elements *= d;
    else for (const int a : wrapped) reduced_elements *= shape[std::size_t(a)];
    const bool no_elements = reduced_elements == 0;
    if (needs_elements(op) && no_elements) op = fused ? Op::amax : Op::sum;  // of nothing, undefined: the bad-input steps cover it
    if (needs_elements(op) && no_elements) return;
    Values values = Values(st.rng.weighted({4, 3, 1, 1, 1}));
    if (op == Op::prod) values = Values::near_one;
    const double correction = double(st.rng.between(0, 2)) + (st.rng.chance(0.25) ? 0.5 : 0.0);  // torch takes fractions too
    st.op = std::string(op_name(op)) + (fused ? " of a * b" : "");
    // Fused: one operand has the full shape, so the expression's shape is `shape` and the axes apply.
    const bool x_full = !fused || st.rng.chance(0.5);
    const Operand<T> x = make_operand<T>(st, x_full ? shape : broadcast_source(st.rng, shape), {.values = values});
    std::optional<Operand<T>> y;
    if (fused) y = make_operand<T>(st, x_full ? broadcast_source(st.rng, shape) : shape, {.values = values});
    st.note(st.op, " over axes ", dims_text(Dims(axes.begin(), axes.end())), keepdim ? " keepdim" : "",
            op == Op::var || op == Op::stddev ? " correction " + std::to_string(correction) : "", ", x: ", x.text(),
            y ? ", y: " + y->text() : "");
    st.inputs_ready();

    std::vector<double> v;
    double element_slack = 0;
    if (fused) {
        v.resize(std::size_t(count(shape)));
        for (std::size_t i = 0; i < v.size(); ++i) {
            const auto f = std::int64_t(i);
            v[i] = x.at(ref::broadcast_index(f, shape, x.shape())) * y->at(ref::broadcast_index(f, shape, y->shape()));
            element_slack = std::max(element_slack, rounding<T>(v[i]));
        }
    } else {
        v = x.all();
    }
    auto check = [&](const auto& result) {
        using Out = typename std::remove_cvref_t<decltype(result)>::value_type;
        check_reduction<T, Out>(st, op, result, v, shape, wrapped, keepdim, correction, element_slack);
    };
    poison_next(std::size_t(count(plan.out_shape)) * out_size<T>(op), st.stream(), st.poison_byte());
    if (fused) call<T, true>(op, x.t * y->t, axes, keepdim, correction, st.stream_arg(), check);
    else call<T, false>(op, x.t, axes, keepdim, correction, st.stream_arg(), check);
}

template <class T>
void invalid_step(Step& st) {
    Dims shape = random_shape(st.rng, 0, 4, 2048);
    const int rank = int(shape.size());
    const auto s = st.stream_arg();
    const Op op = random_op<T>(st.rng);
    auto reduce = [&](const auto& x, const Axes& axes) { call<T, false>(op, x, axes, st.rng.chance(0.5), 1, s, [](const auto&) {}); };
    auto reduce_fused = [&](const auto& x) { call<T, true>(Plan<T>::fused, x, Axes{}, false, 1, s, [](const auto&) {}); };
    const int kind = int(st.rng.between(0, 6));
    st.op = op_name(op);
    switch (kind) {
        case 0: {
            st.op += ": axis out of range";
            const Operand<T> x = make_operand<T>(st, shape, {});
            // -1 of a rank-0 tensor is left out: PyTorch accepts it, tessel's reductions do not (yet?).
            const int axis = st.rng.chance(0.5) ? std::max(rank, 1) + int(st.rng.between(0, 3)) : -std::max(rank, 1) - 1 - int(st.rng.between(0, 3));
            st.note(st.op, ", x: ", x.text(), ", axis ", axis);
            st.inputs_ready();
            expect_error(st, Want::invalid_argument, std::string(op_name(op)) + " over axis " + std::to_string(axis), [&] { reduce(x.t, Axes{axis}); });
            break;
        }
        case 1: {
            st.op += ": axis given twice";
            if (rank == 0) shape = {3};
            const Operand<T> x = make_operand<T>(st, shape, {});
            const int d = int(st.rng.between(0, int(shape.size()) - 1));
            const Axes axes{d, d - int(shape.size())};
            st.note(st.op, ", x: ", x.text(), ", axes ", d, " and ", d - int(shape.size()));
            st.inputs_ready();
            expect_error(st, Want::invalid_argument, "an axis twice", [&] { reduce(x.t, axes); });
            break;
        }
        case 2: {
            st.op += ": host input";
            const Operand<T> x = make_operand<T>(st, shape, {.space = st.rng.chance(0.5) ? MemorySpace::host : MemorySpace::pinned});
            st.note(st.op, ", x: ", x.text());
            expect_error(st, Want::invalid_argument, "a host tensor", [&] { reduce(x.t, Axes{}); });
            break;
        }
        case 3: {
            st.op += ": undefined input";
            expect_error(st, Want::invalid_argument, "Tensor{}", [&] { reduce(Tensor<T>{}, Axes{}); });
            break;
        }
        case 4: {
            const Op which = st.rng.chance(0.5) ? Op::amax : Op::argmax;
            st.op = std::string(op_name(which)) + " of no elements";
            const Dims empty_shape{st.rng.between(1, 5), 0};
            const Operand<T> x = make_operand<T>(st, empty_shape, {});
            st.note(st.op, ", x: ", x.text());
            st.inputs_ready();
            const Axes axes = st.rng.chance(0.5) ? Axes{1} : Axes{-1};
            expect_error(st, Want::invalid_argument, st.op, [&] { call<T, false>(which, x.t, axes, st.rng.chance(0.5), 1, s, [](const auto&) {}); });
            break;
        }
        case 5: {
            st.op = std::string(op_name(Plan<T>::fused)) + " of a * b: operands that do not broadcast";
            if (rank == 0) shape = {4};
            const std::size_t d = std::size_t(st.rng.between(0, std::int64_t(shape.size()) - 1));
            Dims other = shape;
            other[d] = shape[d] >= 2 ? shape[d] + 1 : 3;
            if (shape[d] < 2) shape[d] = 2;
            const Operand<T> x = make_operand<T>(st, shape, {}), y = make_operand<T>(st, other, {});
            st.note(st.op, ", x: ", x.text(), ", y: ", y.text());
            st.inputs_ready();
            expect_error(st, Want::invalid_argument, "reduce(x * y)", [&] { reduce_fused(x.t * y.t); });
            break;
        }
        default: {
            st.op = std::string(op_name(Plan<T>::fused)) + " of a * b: host operand";
            const Operand<T> x = make_operand<T>(st, shape, {}), y = make_operand<T>(st, shape, {.space = MemorySpace::host});
            st.note(st.op, ", x: ", x.text(), ", y: ", y.text());
            st.inputs_ready();
            expect_error(st, Want::invalid_argument, "reduce(x * host)", [&] { reduce_fused(x.t * y.t); });
            break;
        }
    }
}

}  // namespace

void reduce_step(Step& st) {
    st.family = "reduce";
    with_type(any_type(st.rng), [&]<class T>() {
        if (st.invalid) invalid_step<T>(st);
        else valid_step<T>(st);
    });
}

}  // namespace fuzz
