// Fuzzed sorts and scans along a random axis: sort (ascending or descending, stable, with the
// permutation), argsort, cumsum and cumprod, over views with many ties (quarters) and signed zeros;
// and their bad inputs.
#include <tessel/ops/sort.hpp>

#include "fuzz.hpp"
#include "reference.hpp"

namespace fuzz {
namespace {

enum class Op { sort, argsort, cumsum, cumprod };
const char* op_name(Op o) {
    static const char* names[] = {"sort", "argsort", "cumsum", "cumprod"};
    return names[int(o)];
}

template <class T>
void check_sort(Step& st, Op op, bool descending, const Operand<T>& x, int axis_w, const Sorted<T>& r) {
    const Dims shape = x.shape();
    if (op == Op::sort) check_shape("sort values", r.values.shape(), shape);
    check_shape("sort indices", r.indices.shape(), shape);
    const std::vector<double> xv = x.all();
    std::vector<double> values(xv.size());
    std::vector<std::int64_t> indices(xv.size());
    for (const auto& line : ref::lines(shape, axis_w)) {
        std::vector<double> v;
        for (std::int64_t i : line) v.push_back(xv[std::size_t(i)]);
        const std::vector<std::int64_t> order = ref::stable_order(v, descending);
        for (std::size_t k = 0; k < line.size(); ++k) {
            values[std::size_t(line[k])] = v[std::size_t(order[k])];
            indices[std::size_t(line[k])] = order[k];
        }
    }
    compare_exact("sort indices (stable)", shape, read_back(r.indices, st.stream()).ints(), indices);
    if (op == Op::sort) compare("sort values", shape, read_back(r.values, st.stream()).doubles(), values, std::vector<double>(values.size(), 0.0));
}

// Running sums and products per line. Sums are exact for quarters (every partial sum representable)
// and otherwise off by at most k u sum|x_0..x_k| at position k; products by k u |p_k|; integers
// (results int64) are exact, products wrapping.
template <class T, class Out>
void check_scan(Step& st, Op op, const Operand<T>& x, int axis_w, const Tensor<Out>& r) {
    using Acc = ops::reduce_acc_t<T>;
    const double u = roundoff<Acc>();
    const Dims shape = x.shape();
    check_shape(op_name(op), r.shape(), shape);
    const std::vector<double> xv = x.all();
    std::vector<double> expected(xv.size()), tol(xv.size());
    std::vector<std::int64_t> exact(xv.size());
    for (const auto& line : ref::lines(shape, axis_w)) {
        long double s = 0, sa = 0, p = 1;
        std::int64_t si = 0, pi = 1;
        bool quarters = true;
        for (std::size_t k = 0; k < line.size(); ++k) {
            const auto i = std::size_t(line[k]);
            const double v = xv[i];
            quarters = quarters && v * 4 == std::floor(v * 4);
            s += v, sa += std::fabs(v), p *= v;
            si += std::int64_t(v), pi = ref::wrap_mul(pi, std::int64_t(v));
            if (op == Op::cumsum) {
                expected[i] = double(s), exact[i] = si;
                tol[i] = quarters && sa * 4 * u < 0.5 ? 0 : double(k) * u * double(sa);
            } else {
                expected[i] = double(p), exact[i] = pi;
                tol[i] = double(k) * u * std::fabs(double(p)) + 2 * min_normal<Acc>();  // below it, precision is absolute
            }
            tol[i] += rounding<Out>(expected[i]);
        }
    }
    const Readback<Out> back = read_back(r, st.stream());
    if constexpr (std::is_integral_v<Out>) compare_exact(op_name(op), shape, back.ints(), exact);
    else compare(op_name(op), shape, back.doubles(), expected, tol, max_finite<Out>());
}

template <class T>
void valid_step(Step& st) {
    const Op op = Op(st.rng.between(0, 3));
    const Dims shape = step_shape(st.rng);
    const int rank = int(shape.size());
    const int axis_w = rank ? int(st.rng.between(0, rank - 1)) : 0;
    const int axis = st.rng.chance(0.3) ? axis_w - std::max(rank, 1) : axis_w;
    const bool descending = st.rng.chance(0.5);
    const Values values = op == Op::cumprod ? Values::near_one : Values(st.rng.weighted({2, 4, 2, 0, 1}));
    const Operand<T> x = make_operand<T>(st, shape, {.values = values});
    st.op = op_name(op);
    st.note(op_name(op), op == Op::sort || op == Op::argsort ? (descending ? " descending" : " ascending") : "", " axis ", axis, ", x: ", x.text());
    st.inputs_ready();
    const auto s = st.stream_arg();
    poison_next(std::size_t(count(shape)) * 8, st.stream(), st.poison_byte());
    switch (op) {
        case Op::sort: check_sort(st, op, descending, x, axis_w, sort(x.t, axis, descending, s)); break;
        case Op::argsort: check_sort(st, op, descending, x, axis_w, Sorted<T>{Tensor<T>{}, argsort(x.t, axis, descending, s)}); break;
        case Op::cumsum: check_scan(st, op, x, axis_w, cumsum(x.t, axis, s)); break;
        case Op::cumprod: check_scan(st, op, x, axis_w, cumprod(x.t, axis, s)); break;
    }
}

template <class T>
void invalid_step(Step& st) {
    const Op op = Op(st.rng.between(0, 3));
    const Dims shape = random_shape(st.rng, 1, 4, 2048);
    const int rank = int(shape.size());
    const auto s = st.stream_arg();
    auto call = [&](const auto& x, int axis) {
        switch (op) {
            case Op::sort: (void)sort(x, axis, false, s); break;
            case Op::argsort: (void)argsort(x, axis, true, s); break;
            case Op::cumsum: (void)cumsum(x, axis, s); break;
            case Op::cumprod: (void)cumprod(x, axis, s); break;
        }
    };
    st.op = op_name(op);
    switch (st.rng.between(0, 3)) {
        case 0: {
            st.op += ": axis out of range";
            const bool scalar = !known_issue_scalar_axis_unchecked && st.rng.chance(0.2);
            const Operand<T> x = make_operand<T>(st, scalar ? Dims{} : shape, {});
            // A scalar's axes are 0 and -1 (PyTorch's rule, and tessel's for transpose and squeeze).
            const int r = scalar ? 1 : rank;
            const int axis = st.rng.chance(0.5) ? r + int(st.rng.between(0, 3)) : -r - 1 - int(st.rng.between(0, 3));
            st.note(st.op, ", x: ", x.text(), ", axis ", axis);
            st.inputs_ready();
            expect_error(st, Want::invalid_argument, st.op, [&] { call(x.t, axis); });
            break;
        }
        case 1: {
            st.op += ": host input";
            const Operand<T> x = make_operand<T>(st, shape, {.space = st.rng.chance(0.5) ? MemorySpace::host : MemorySpace::pinned});
            st.note(st.op, ", x: ", x.text());
            expect_error(st, Want::invalid_argument, st.op, [&] { call(x.t, -1); });
            break;
        }
        case 2: {
            st.op += ": undefined input";
            expect_error(st, Want::invalid_argument, st.op, [&] { call(Tensor<T>{}, -1); });
            break;
        }
        default: {
            st.op = "sort: fp8 keys";
            const Tensor<__nv_fp8_e4m3> x = empty<__nv_fp8_e4m3>(shape_of(shape), {.stream = st.stream()});
            st.note(st.op, ", x: ", describe(x));
            expect_error(st, Want::invalid_argument, "sort of float8_e4m3", [&] { (void)sort(x, -1, false, s); });
            break;
        }
    }
}

}  // namespace

void sort_step(Step& st) {
    st.family = "sort";
    with_type(any_type(st.rng), [&]<class T>() {
        if (st.invalid) invalid_step<T>(st);
        else valid_step<T>(st);
    });
}

}  // namespace fuzz
