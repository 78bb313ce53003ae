// The element-wise expression fuzzing of fuzz_ops, shared by the translation units that instantiate
// it for different element types (each form and type is a kernel set of its own, expensive to
// compile, so they are spread over several files): a form (a * b + 1, where(a > b, a, b), pow(a, b),
// ...) over two operands, broadcast into an output view, evaluated into a new tensor, or assigned in
// place (a += b); and the bad inputs run() must reject, spelled a * b + 1 so that they reuse the
// kernels of the valid steps.
#pragma once

#include <utility>

#include <tessel/ops/assign.hpp>

#include "fuzz.hpp"
#include "reference.hpp"

namespace fuzz::ew {


// A reference value and the magnitude of the intermediate values that produced it: the compute
// type's roundings scale with the magnitude (a * b + 1 near 0 still carries a * b's rounding).
struct RefValue {
    double value, magnitude;
    std::int64_t exact = 0;  // integer results (double cannot hold every int64)
};

template <class D>
constexpr int bits_of = int(sizeof(D) * 8);

// Each form: its text, the expression, its reference in double (integer semantics when the
// result type D is an integer), and how many roundings in the compute type it takes at most,
// counting a correctly rounded library function (tanh, exp, pow) as two.
struct MulAdd {
    static constexpr const char* text = "a * b + 1";
    static constexpr int roundings = 2;
    static auto build(const auto& a, const auto& b) { return a * b + 1; }
    template <class D>
    static RefValue ref(double x, double y) {
        return {x * y + 1, std::fabs(x * y) + 1};
    }
};
struct MaxMin {
    static constexpr const char* text = "maximum(a, b) - minimum(a, b) * 2";
    static constexpr int roundings = 2;
    static auto build(const auto& a, const auto& b) { return maximum(a, b) - minimum(a, b) * 2; }
    template <class D>
    static RefValue ref(double x, double y) {
        const double hi = std::max(x, y), lo = std::min(x, y);
        return {hi - lo * 2, std::fabs(hi) + 2 * std::fabs(lo)};
    }
};
struct Where {
    static constexpr const char* text = "where(a > b, a, b)";
    static constexpr int roundings = 0;
    static auto build(const auto& a, const auto& b) { return where(a > b, a, b); }
    template <class D>
    static RefValue ref(double x, double y) {
        return {x > y ? x : y, 0};
    }
};
struct Divide {
    static constexpr const char* text = "a / (abs(b) + 1)";
    static constexpr int roundings = 3;
    static auto build(const auto& a, const auto& b) { return a / (abs(b) + 1); }
    template <class D>
    static RefValue ref(double x, double y) {
        const double v = x / (std::fabs(y) + 1);
        return {v, std::fabs(v)};
    }
};
struct Modulo {
    static constexpr const char* text = "a % b";
    static constexpr int roundings = 1;
    static auto build(const auto& a, const auto& b) { return a % b; }
    template <class D>
    static RefValue ref(double x, double y) {
        if constexpr (std::is_integral_v<D>) {
            const std::int64_t r = ref::py_mod(std::int64_t(x), std::int64_t(y));
            return {double(r), 0, r};
        }
        else return {ref::py_fmod(x, y), std::fabs(y)};
    }
};
struct Math {
    static constexpr const char* text = "tanh(a) + exp(b * 0.25)";
    static constexpr int roundings = 5;
    static auto build(const auto& a, const auto& b) { return tanh(a) + exp(b * 0.25); }
    template <class D>
    static RefValue ref(double x, double y) {
        const double t = std::tanh(x), e = std::exp(y * 0.25);
        return {t + e, std::fabs(t) + e};
    }
};
struct Power {
    static constexpr const char* text = "pow(a, b)";
    static constexpr int roundings = 4;
    static auto build(const auto& a, const auto& b) { return pow(a, b); }
    template <class D>
    static RefValue ref(double x, double y) {
        if constexpr (std::is_integral_v<D>) {
            const std::int64_t r = ref::int_pow(std::int64_t(x), std::int64_t(y), bits_of<D>);
            return {double(r), 0, r};
        }
        else {
            const double v = std::pow(x, y);
            return {v, std::fabs(v)};
        }
    }
};
struct Compare {
    static constexpr const char* text = "(a >= b) && (b != 0)";
    static constexpr int roundings = 0;
    static auto build(const auto& a, const auto& b) { return (a >= b) && (b != 0); }
    template <class D>
    static RefValue ref(double x, double y) {
        return {(x >= y && y != 0) ? 1.0 : 0.0, 0};
    }
};
struct Clamp {
    static constexpr const char* text = "clamp(a, -1, 1) * b";
    static constexpr int roundings = 1;
    static auto build(const auto& a, const auto& b) { return clamp(a, -1, 1) * b; }
    template <class D>
    static RefValue ref(double x, double y) {
        const double v = std::clamp(x, -1.0, 1.0) * y;
        return {v, std::fabs(v)};
    }
};
// The in-place forms: the output is operand a itself.
struct AddInPlace {
    static constexpr const char* text = "a += b";
    static constexpr int roundings = 1;
    template <class D>
    static RefValue ref(double x, double y) {
        return {x + y, std::fabs(x) + std::fabs(y)};
    }
};
struct MulInPlace {
    static constexpr const char* text = "a *= b";
    static constexpr int roundings = 1;
    template <class D>
    static RefValue ref(double x, double y) {
        return {x * y, std::fabs(x * y)};
    }
};
struct SelfMulAdd {
    static constexpr const char* text = "a = a * b + 1 (reads its own output)";
    static constexpr int roundings = 2;
    template <class D>
    static RefValue ref(double x, double y) {
        return MulAdd::ref<D>(x, y);
    }
};

// Runs an assignment the way the step's stream mode says: run(), run(handle), run(Stream), run(nullptr).
template <class Assignment>
void run_on_step_stream(Step& st, const Assignment& assignment) {
    switch (st.mode()) {
        case StreamMode::current:
        case StreamMode::created_current: assignment.run(); break;
        case StreamMode::created_handle:
            if (st.rng.chance(0.5)) assignment.run(st.created().handle());
            else assignment.run(st.created());
            break;
        case StreamMode::null_handle: assignment.run(rt::stream_t{nullptr}); break;
    }
}

template <class... Ts>
constexpr double worst_roundoff() {
    return std::max({roundoff<Ts>()...});
}
template <class... Ts>
constexpr double worst_subnormal() {
    return std::max({subnormal<Ts>()...});
}

// Checks `out` (read back) against Form over a and b broadcast to the output's shape. The
// tolerance: `roundings` roundings of the widest-error compute type any node of the tree may use,
// scaled by the intermediate magnitude, plus the final rounding into Out, plus underflow in any of
// them. `untouched` says what the output's storage outside its view must still hold.
template <class Form, class D, class Out, class A, class B>
void check_result(const std::string& what, const Readback<Out>& out, const Operand<A>& a, const Operand<B>& b) {
    using CA = ops::compute_t<ops::float_result_t<A>>;
    using CB = ops::compute_t<ops::float_result_t<B>>;
    using CD = ops::compute_t<D>;
    const double u = worst_roundoff<CA, CB, CD>(), tiny = worst_subnormal<CA, CB, CD, Out>();
    const Dims shape = dims_of(out.layout.shape);
    const std::size_t n = std::size_t(count(shape));
    if constexpr (std::is_integral_v<Out>) {
        std::vector<std::int64_t> expected(n);
        for (std::size_t i = 0; i < n; ++i) {
            const auto f = std::int64_t(i);
            const RefValue r = Form::template ref<D>(a.at(ref::broadcast_index(f, shape, a.shape())), b.at(ref::broadcast_index(f, shape, b.shape())));
            // Integer forms other than % and pow stay far inside 2^53, where double is exact.
            expected[i] = std::is_integral_v<D> && (std::is_same_v<Form, Modulo> || std::is_same_v<Form, Power>) ? r.exact : std::int64_t(r.value);
        }
        compare_exact(what, shape, out.ints(), expected);
    } else {
        std::vector<double> expected(n), tol(n);
        for (std::size_t i = 0; i < n; ++i) {
            const auto f = std::int64_t(i);
            const RefValue r = Form::template ref<D>(a.at(ref::broadcast_index(f, shape, a.shape())), b.at(ref::broadcast_index(f, shape, b.shape())));
            expected[i] = r.value;
            tol[i] = Form::roundings * u * r.magnitude + rounding<Out>(r.value) + tiny;
        }
        compare(what, shape, out.doubles(), expected, tol, std::min(max_finite<CD>(), max_finite<Out>()));
    }
}

inline Values pick_values(Rng& r) {
    return Values(r.weighted({4, 2.5, 1.5, 1, 1}));
}

// One form over operands of types A and B, evaluated into a new tensor or assigned into an output
// view of the result type D (one instantiation: evaluate() assigns into a D tensor too) or, with
// Wide, of double.
template <class Form, class A, class B, bool Wide = false>
void run_form(Step& st, const Dims& out_shape) {
    using E = decltype(Form::build(std::declval<Tensor<A>>(), std::declval<Tensor<B>>()));
    using D = typename E::dtype;
    st.op = std::string(Form::text) + (Wide ? " into float64" : "");
    const Operand<A> a = make_operand<A>(st, broadcast_source(st.rng, out_shape), {.values = pick_values(st.rng)});
    const Operand<B> b = make_operand<B>(st, broadcast_source(st.rng, out_shape), {.values = pick_values(st.rng)});
    st.note(Form::text, ", a: ", a.text(), ", b: ", b.text(), ", result ", type_name<D>());
    if (!Wide && (st.rng.chance(0.4) || ops::is_bool_type<D>)) {
        st.note("evaluate(expr)");
        st.inputs_ready();
        poison_next(std::size_t(count(*ref::broadcast(a.shape(), b.shape()))) * sizeof(D), st.stream(), st.poison_byte());
        const Tensor<D> r = evaluate(Form::build(a.t, b.t), st.stream_arg());
        check_shape("evaluate", r.shape(), *ref::broadcast(a.shape(), b.shape()));
        if (!r.is_contiguous() || r.space() != MemorySpace::device) check_failed("evaluate: result ", describe(r), " is not a new contiguous device tensor");
        check_result<Form, D>("evaluate", read_back(r, st.stream()), a, b);
        return;
    }
    using Out = std::conditional_t<Wide, double, D>;
    const Operand<Out> out = make_operand<Out>(st, out_shape, {.expand = false, .on_step_stream = true});
    st.note("into ", out.text());
    poison_storage(out.t, st.stream());
    st.inputs_ready();
    run_on_step_stream(st, (out.t = Form::build(a.t, b.t)));
    const Readback<Out> r = read_back(out.t, st.stream());
    check_result<Form, D>("assignment", r, a, b);
    check_untouched("assignment", r);
}

// An in-place form: a (a writable view of the output's shape) is updated with b.
template <class Form, class A, class B>
void run_in_place(Step& st, Dims shape) {
    using D = ops::promote_t<A, B>;
    if (known_issue_alias_size1_dims)
        for (auto& s : shape) s = s == 1 ? 2 : s;
    st.op = Form::text;
    const Operand<A> a = make_operand<A>(st, shape, {.expand = false, .values = pick_values(st.rng), .on_step_stream = true});
    const Operand<B> b = make_operand<B>(st, broadcast_source(st.rng, shape), {.values = pick_values(st.rng)});
    st.note(Form::text, ", a: ", a.text(), ", b: ", b.text());
    st.inputs_ready();
    if constexpr (std::is_same_v<Form, AddInPlace>) run_on_step_stream(st, (a.t += b.t));
    else if constexpr (std::is_same_v<Form, MulInPlace>) run_on_step_stream(st, (a.t *= b.t));
    else run_on_step_stream(st, (a.t = a.t * b.t + 1));
    const Readback<A> r = read_back(a.t, st.stream());
    check_result<Form, D>("in-place assignment", r, a, b);
    for (std::int64_t k : r.uncovered())
        if (to_double(r.element(k)) != a.base[std::size_t(k)])
            check_failed("in-place assignment: storage element ", k, " outside the view (", r.layout.to_string(), ") changed from ",
                     a.base[std::size_t(k)], " to ", to_double(r.element(k)));
}

// The forms a pair of types runs (each one costs compile time: one kernel set per form and type).
enum : unsigned {
    mul_add = 1u << 0, max_min = 1u << 1, where_select = 1u << 2, divide = 1u << 3, modulo = 1u << 4, math = 1u << 5, power = 1u << 6,
    comparison = 1u << 7, clamped = 1u << 8, add_in_place = 1u << 9, mul_in_place = 1u << 10, self_mul_add = 1u << 11, wide_out = 1u << 12,
};

template <class A, class B, unsigned Forms>
void pair_step(Step& st) {
    using D = ops::promote_t<A, B>;
    // Floating into integer is a compile error (cast_to is the way), so an in-place form needs an
    // A that can hold promote(A, B).
    static_assert(!(Forms & (add_in_place | mul_in_place | self_mul_add)) || !(is_floating<D> && !is_floating<A>));
    std::vector<unsigned> choices;
    for (unsigned bit = 1; bit <= Forms; bit <<= 1)
        if (Forms & bit) choices.push_back(bit);
    const unsigned f = st.rng.pick(choices);
    const Dims shape = step_shape(st.rng);
    if constexpr (bool(Forms & mul_add)) if (f == mul_add) return run_form<MulAdd, A, B>(st, shape);
    if constexpr (bool(Forms & max_min)) if (f == max_min) return run_form<MaxMin, A, B>(st, shape);
    if constexpr (bool(Forms & where_select)) if (f == where_select) return run_form<Where, A, B>(st, shape);
    if constexpr (bool(Forms & divide)) if (f == divide) return run_form<Divide, A, B>(st, shape);
    if constexpr (bool(Forms & modulo)) if (f == modulo) return run_form<Modulo, A, B>(st, shape);
    if constexpr (bool(Forms & math)) if (f == math) return run_form<Math, A, B>(st, shape);
    if constexpr (bool(Forms & power)) if (f == power) return run_form<Power, A, B>(st, shape);
    if constexpr (bool(Forms & comparison)) if (f == comparison) return run_form<Compare, A, B>(st, shape);
    if constexpr (bool(Forms & clamped)) if (f == clamped) return run_form<Clamp, A, B>(st, shape);
    if constexpr (bool(Forms & wide_out)) if (f == wide_out) return run_form<MulAdd, A, B, true>(st, shape);
    if constexpr (bool(Forms & add_in_place)) if (f == add_in_place) return run_in_place<AddInPlace, A, B>(st, shape);
    if constexpr (bool(Forms & mul_in_place)) if (f == mul_in_place) return run_in_place<MulInPlace, A, B>(st, shape);
    if constexpr (bool(Forms & self_mul_add)) if (f == self_mul_add) return run_in_place<SelfMulAdd, A, B>(st, shape);
}

// ---- bad inputs -----------------------------------------------------------------------------------

// Shape `s` with dim d changed so that it no longer broadcasts against s (neither size is 1).
inline Dims clash(Rng& r, Dims s, std::size_t d) {
    s[d] = s[d] >= 2 ? s[d] + 1 : r.between(2, 5);
    return s;
}

template <class T>
void invalid_step(Step& st) {
    Dims shape = random_shape(st.rng, 1, 3, 2048);
    for (auto& s : shape) s = std::max<std::int64_t>(s, 1);  // an empty output skips the checks
    const std::size_t d = std::size_t(st.rng.between(0, std::int64_t(shape.size()) - 1));
    if (shape[d] < 3) shape[d] = st.rng.between(3, 6);  // v[1:] and v[:-1] share elements only from 3 on
    const int kind = int(st.rng.between(0, 8));
    auto operand = [&](const Dims& s, MemorySpace space = MemorySpace::device) {
        Operand<T> o = make_operand<T>(st, s, {.space = space});
        st.note(o.text());
        return o;
    };
    auto output = [&](const Dims& s, MemorySpace space = MemorySpace::device) {
        Operand<T> o = make_operand<T>(st, s, {.expand = false, .space = space, .on_step_stream = true});
        st.note("output ", o.text());
        return o;
    };
    st.inputs_ready();
    switch (kind) {
        case 0: {
            st.op = "operands that do not broadcast";
            const auto a = operand(shape), b = operand(clash(st.rng, shape, d));
            expect_error(st, Want::invalid_argument, "evaluate(a * b + 1)", [&] { (void)evaluate(a.t * b.t + 1, st.stream_arg()); });
            break;
        }
        case 1: {
            st.op = "expression larger than the output";
            const auto out = output(shape), a = operand(clash(st.rng, shape, d));
            expect_error(st, Want::invalid_argument, "(out = a * a + 1).run()", [&] { run_on_step_stream(st, (out.t = a.t * a.t + 1)); });
            break;
        }
        case 2: {
            st.op = "broadcast output";
            Dims base = shape;
            base[d] = 1;
            const auto a = operand(shape);
            const Tensor<T> out = make_operand<T>(st, base, {.expand = false}).t.expand(shape_of(shape));
            st.note("output ", describe(out));
            expect_error(st, Want::invalid_argument, "(expanded = a * a + 1).run()", [&] { run_on_step_stream(st, (out = a.t * a.t + 1)); });
            break;
        }
        case 3: {
            st.op = "host operand";
            const auto a = operand(shape, st.rng.chance(0.5) ? MemorySpace::host : MemorySpace::pinned), b = operand(shape);
            expect_error(st, Want::invalid_argument, "evaluate(b * host + 1)", [&] { (void)evaluate(b.t * a.t + 1, st.stream_arg()); });
            break;
        }
        case 4: {
            st.op = "host output";
            const auto out = output(shape, MemorySpace::host), a = operand(shape);
            expect_error(st, Want::invalid_argument, "(host = a * a + 1).run()", [&] { run_on_step_stream(st, (out.t = a.t * a.t + 1)); });
            break;
        }
        case 5: {
            st.op = "undefined operand";
            const auto a = operand(shape);
            expect_error(st, Want::invalid_argument, "evaluate(a * Tensor{} + 1)", [&] { (void)evaluate(a.t * Tensor<T>{} + 1, st.stream_arg()); });
            break;
        }
        case 6: {
            st.op = "undefined output";
            const auto a = operand(shape);
            expect_error(st, Want::invalid_argument, "(Tensor{} = a * a + 1).run()", [&] { run_on_step_stream(st, (Tensor<T>{} = a.t * a.t + 1)); });
            break;
        }
        case 7: {
            st.op = "output overlapping an operand (shifted)";
            const auto v = output(shape);
            const std::int64_t n = shape[d];
            const Tensor<T> dst = v.t.slice(int(d), 1, n), src = v.t.slice(int(d), 0, n - 1);
            expect_error(st, Want::invalid_argument, "(v[1:] = v[:-1] * v[:-1] + 1).run() along dim " + std::to_string(d),
                         [&] { run_on_step_stream(st, (dst = src * src + 1)); });
            break;
        }
        default: {
            st.op = "output overlapping an operand (transposed)";
            const std::int64_t n = st.rng.between(2, 40);
            const auto v = output({n, n});
            expect_error(st, Want::invalid_argument, "(x = x.T * x.T + 1).run()", [&] {
                const Tensor<T> xt = v.t.transpose(0, 1);
                run_on_step_stream(st, (v.t = xt * xt + 1));
            });
            break;
        }
    }
}

}  // namespace fuzz::ew

namespace fuzz {
// The element-wise steps of each group of element types, one translation unit each.
void elementwise_f32_i32(Step& st, bool integer);
void elementwise_f64_i64(Step& st, bool integer);
void elementwise_f16_bf16(Step& st, bool bfloat);
void elementwise_mixed(Step& st);
}  // namespace fuzz
