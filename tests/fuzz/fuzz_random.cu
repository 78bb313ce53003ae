// Fuzzed random fills: uniform_fill and normal_fill into a contiguous or strided view (at an offset
// inside a poisoned buffer) and Philox draws into new tensors, checked for range, finiteness, loose moments,
// reproducibility from (seed, offset) and equality with the same fill split in two at the matching
// offsets; and the fills' bad inputs.
#include <tessel/ops/random.hpp>

#include "fuzz.hpp"

namespace fuzz {
namespace {

struct Moments {
    double mean = 0, var = 0;
};
Moments moments(const std::vector<double>& v) {
    Moments m;
    if (v.empty()) return m;
    long double s = 0;
    for (double x : v) s += x;
    m.mean = double(s / v.size());
    long double q = 0;
    for (double x : v) q += (x - m.mean) * (x - m.mean);
    m.var = double(q / v.size());
    return m;
}

// Values in [lo, hi] (the rounding of lo + (hi - lo) u may reach hi in any type), finite, and, for
// 200 or more, a mean within 6 standard errors of the distribution's (a false alarm rate far below
// one in a million per check) and for normal values a variance within 6 standard errors too;
// bfloat16's rounding (2^-8 relative) is allowed for on top.
template <class T>
void check_distribution(const std::string& what, const std::vector<double>& v, bool normal, double a, double b) {
    for (std::size_t i = 0; i < v.size(); ++i) {
        if (!std::isfinite(v[i])) check_failed(what, ": element ", i, " is ", v[i]);
        if (!normal && (v[i] < a - rounding<T>(a) || v[i] > b + rounding<T>(b)))
            check_failed(what, ": element ", i, " = ", v[i], " outside [", a, ", ", b, ")");
    }
    if (v.size() < 200) return;
    const double n = double(v.size());
    const Moments m = moments(v);
    const double mean = normal ? a : (a + b) / 2, var = normal ? b * b : (b - a) * (b - a) / 12;
    const double slack = 4 * roundoff<T>() * (std::fabs(a) + std::fabs(b));
    if (std::fabs(m.mean - mean) > 6 * std::sqrt(var / n) + slack)
        check_failed(what, ": mean ", m.mean, " of ", v.size(), " values, expected ", mean, " +- ", 6 * std::sqrt(var / n) + slack);
    if (normal && std::fabs(m.var - var) > 6 * var * std::sqrt(2 / n) + 8 * roundoff<T>() * var + slack * slack)
        check_failed(what, ": variance ", m.var, " of ", v.size(), " values, expected ", var);
}

template <class T>
void fill(bool normal, const Tensor<T>& t, std::uint64_t seed, std::uint64_t offset, double a, double b, std::optional<rt::stream_t> s) {
    if (normal) normal_fill(t, seed, offset, a, b, s);
    else uniform_fill(t, seed, offset, a, b, s);
}

template <class T>
void bits_equal(const std::string& what, const Readback<T>& x, const Readback<T>& y) {
    const std::int64_t n = x.layout.numel();
    for (std::int64_t i = 0; i < n; ++i) {
        const T p = x.at(i), q = y.at(i);
        if (std::memcmp(&p, &q, sizeof(T)) != 0)
            check_failed(what, ": element ", i, " differs: ", to_double(p), " vs ", to_double(q));
    }
}

template <class T>
void valid_step(Step& st) {
    const Dims shape = step_shape(st.rng);
    const bool normal = st.rng.chance(0.5);
    const double a = normal ? st.rng.uniform(-3, 3) : st.rng.uniform(-3, 2), b = normal ? st.rng.uniform(0, 3) : a + st.rng.uniform(0.01, 4);
    const std::uint64_t seed = st.rng.bits(), offset = std::uint64_t(st.rng.between(0, 1000));
    const std::int64_t n = count(shape);
    const auto s = st.stream_arg();
    if (st.rng.chance(0.3)) {
        st.op = normal ? "Philox::normal" : "Philox::uniform";
        st.note(st.op, "<", type_name<T>(), ">(", dims_text(shape), ", ", a, ", ", b, ") seed ", seed, " offset ", offset);
        Philox g(seed, offset), h(seed, offset);
        const TensorOptions o{.stream = st.stream()};
        const Tensor<T> x = normal ? g.template normal<T>(shape_of(shape), a, b, o) : g.template uniform<T>(shape_of(shape), a, b, o);
        const Tensor<T> y = normal ? h.template normal<T>(shape_of(shape), a, b, o) : h.template uniform<T>(shape_of(shape), a, b, o);
        check_shape(st.op, x.shape(), shape);
        const Readback<T> rx = read_back(x, st.stream());
        check_distribution<T>(st.op, rx.doubles(), normal, a, b);
        bits_equal(st.op + " twice from the same (seed, offset)", rx, read_back(y, st.stream()));
        if (g.offset() != h.offset() || (n > 0 && g.offset() <= offset)) check_failed(st.op, ": the generator's offset went from ", offset, " to ", g.offset());
        return;
    }
    st.op = normal ? "normal_fill" : "uniform_fill";
    // The tensor is a piece of a larger poisoned buffer, so writes outside it show: contiguous, or
    // every other element (a view, filled in its row-major order as a contiguous tensor would be).
    const std::int64_t before = st.rng.between(0, 5), after = st.rng.between(0, 5), step = n > 0 && st.rng.chance(0.3) ? 2 : 1;
    const Tensor<T> buffer = empty<T>({before + step * n + after}, {.stream = st.stream()});
    poison_storage(buffer, st.stream());
    const Tensor<T> t = buffer.slice(0, before + st.rng.between(0, step - 1), before + step * n, step).view(shape_of(shape));
    st.note(st.op, "(", describe(t), ", seed ", seed, ", offset ", offset, ", ", a, ", ", b, ")");
    fill(normal, t, seed, offset, a, b, s);
    const Readback<T> r = read_back(t, st.stream());
    check_distribution<T>(st.op, r.doubles(), normal, a, b);
    check_untouched(st.op, r);
    // Value e is a function of (seed, offset + e) alone: a second fill and a fill in two pieces agree.
    const Tensor<T> again = empty<T>(shape_of(shape), {.stream = st.stream()});
    fill(normal, again, seed, offset, a, b, s);
    bits_equal(st.op + " twice", r, read_back(again, st.stream()));
    if (n >= 2) {
        const std::int64_t k = st.rng.between(1, n - 1);
        const Tensor<T> pieces = empty<T>({n}, {.stream = st.stream()});
        fill(normal, pieces.narrow(0, 0, k), seed, offset, a, b, s);
        fill(normal, pieces.narrow(0, k, n - k), seed, offset + std::uint64_t(k), a, b, s);
        st.note("split at ", k);
        bits_equal(st.op + " in two pieces", r, read_back(pieces.view(shape_of(shape)), st.stream()));
    }
}

template <class T>
void invalid_step(Step& st) {
    const auto s = st.stream_arg();
    const bool normal = st.rng.chance(0.5);
    st.op = normal ? "normal_fill" : "uniform_fill";
    switch (st.rng.between(0, 3)) {
        case 0: {
            st.op += ": broadcast tensor";
            const std::int64_t m = st.rng.between(2, 20), n = st.rng.between(2, 20);
            const Tensor<T> t = empty<T>({m, 1}, {.stream = st.stream()}).expand({m, n});
            st.note(st.op, ": ", describe(t));
            expect_error(st, Want::invalid_argument, st.op, [&] { fill(normal, t, 1, 0, 0.0, 1.0, s); });
            break;
        }
        case 1: {
            st.op += ": host tensor";
            const Tensor<T> t = empty<T>({st.rng.between(1, 50)}, {.space = st.rng.chance(0.5) ? MemorySpace::host : MemorySpace::pinned});
            st.note(st.op, ": ", describe(t));
            expect_error(st, Want::invalid_argument, st.op, [&] { fill(normal, t, 1, 0, 0.0, 1.0, s); });
            break;
        }
        case 2: {
            st.op = "normal_fill: negative stddev";
            const Tensor<T> t = empty<T>({st.rng.between(0, 50)}, {.stream = st.stream()});
            const double sd = -st.rng.uniform(0.001, 3);
            st.note(st.op, ": ", describe(t), ", stddev ", sd);
            expect_error(st, Want::invalid_argument, st.op, [&] { normal_fill(t, 1, 0, 0.0, sd, s); });
            break;
        }
        default: {
            st.op += ": undefined tensor";
            expect_error(st, Want::invalid_argument, st.op, [&] { fill(normal, Tensor<T>{}, 1, 0, 0.0, 1.0, s); });
            break;
        }
    }
}

}  // namespace

void random_step(Step& st) {
    st.family = "random";
    with_float_type(float_type(st.rng), [&]<class T>() {
        if (st.invalid) invalid_step<T>(st);
        else valid_step<T>(st);
    });
}

}  // namespace fuzz
