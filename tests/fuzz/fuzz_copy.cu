// Fuzzed copies between memory spaces and layouts: contiguous(), clone(), to_host(), to(options)
// (device, host, pinned, managed; blocking or not), to<U>() conversions, reshape(), view(), item()
// and to_vector(), from any view in any space, compared bit for bit with the fuzzer's own gather of
// the source; copy_ and assignment between two views of one buffer (refused exactly when they share
// an element); and the bad requests (impossible views and reshapes, undefined tensors, absent
// devices, allocations too large for the device, dtypes DLPack cannot express).
#include <tessel/ops/assign.hpp>  // dst = src + src between views of one buffer
#include <tessel/ops/copy.hpp>  // the device gather behind contiguous() of device views
#include <tessel/tensor/dlpack.hpp>

#include "fuzz.hpp"
#include "reference.hpp"

namespace fuzz {
namespace {

enum class Op { contiguous, clone, to_host, to_space, to_dtype, reshape, view, item };
const char* op_name(Op o) {
    static const char* names[] = {"contiguous", "clone", "to_host", "to(options)", "to<U>", "reshape", "view", "item/to_vector"};
    return names[int(o)];
}

MemorySpace random_space(Rng& r) {
    return MemorySpace(r.weighted({5, 1.5, 1.5, 1}));  // device, host, pinned, managed
}

// A shape with the same number of elements as `s` (flattened, merged, split or padded with 1s),
// sometimes with one size left to be inferred (-1).
Dims reshaped(Rng& r, const Dims& s, Dims& inferred) {
    const std::int64_t n = count(s);
    Dims out;
    switch (r.between(0, 3)) {
        case 0: out = {n}; break;
        case 1: out = s, out.insert(out.begin() + r.between(0, std::int64_t(s.size())), 1); break;
        case 2:
            out = s;
            if (out.size() >= 2) {
                const std::size_t d = std::size_t(r.between(0, std::int64_t(out.size()) - 2));
                out[d] *= out[d + 1];
                out.erase(out.begin() + std::ptrdiff_t(d) + 1);
            }
            break;
        default:
            for (std::int64_t f : {2, 3, 5}) {
                if (n > 0 && n % f == 0) {
                    out = {f, n / f};
                    break;
                }
            }
            if (out.empty()) out = {n, 1};
            break;
    }
    inferred = out;
    if (out.empty()) return out;  // a scalar stays a scalar
    std::int64_t others = 1;
    const std::size_t d = std::size_t(r.between(0, std::int64_t(out.size()) - 1));
    for (std::size_t k = 0; k < out.size(); ++k)
        if (k != d) others *= out[k];
    if (others != 0 && r.chance(0.4)) out[d] = -1;
    return out;
}

// The value v converted to U as tessel's to<U>() converts: a truncating cast to integers, else a
// rounding, through float for the reduced types (hence float's rounding on top of U's in `tol`).
template <class U>
double converted(double v, double& tol) {
    tol = 0;
    if constexpr (std::is_integral_v<U>) return std::trunc(v);
    else {
        tol = rounding<U>(v) + (ops::is_reduced_float<U> ? roundoff<float>() * std::fabs(v) : 0.0);
        return v;
    }
}

template <class T>
void check_copy(const std::string& what, const Readback<T>& r, const std::vector<double>& expected, const Dims& shape) {
    compare(what, shape, r.doubles(), expected, std::vector<double>(expected.size(), 0.0));
}

template <class T>
void valid_step(Step& st) {
    const Op op = Op(st.rng.between(0, 7));
    if (op == Op::to_host || op == Op::to_dtype || op == Op::item) st.only_current_stream();  // these use the current stream
    const Dims shape = step_shape(st.rng);
    const MemorySpace space = op == Op::view || op == Op::reshape || st.rng.chance(0.6) ? MemorySpace::device : random_space(st.rng);
    const Operand<T> x = make_operand<T>(st, shape, {.values = Values(st.rng.weighted({3, 2, 1, 0, 1})), .space = space});
    st.op = op_name(op);
    st.note(op_name(op), ", x: ", x.text());
    st.inputs_ready();
    const std::vector<double> expected = x.all();
    const auto s = st.stream_arg();
    auto expect_new_contiguous = [&](const auto& r, MemorySpace want) {
        if (!r.is_contiguous() || r.space() != want || dims_of(r.shape()) != shape)
            check_failed(op_name(op), ": result ", describe(r), ", expected a contiguous ", space_name(want), " tensor of shape ", dims_text(shape));
    };
    switch (op) {
        case Op::contiguous: {
            const Tensor<T> r = x.t.contiguous(s);
            expect_new_contiguous(r, space);
            if (x.t.is_contiguous() && r.data() != x.t.data()) check_failed("contiguous() of a contiguous view copied it");
            check_copy("contiguous", read_back(r, st.stream()), expected, shape);
            break;
        }
        case Op::clone: {
            const Tensor<T> r = x.t.clone(s);
            expect_new_contiguous(r, space);
            if (count(shape) > 0 && r.storage() == x.t.storage()) check_failed("clone() shares its source's storage");
            check_copy("clone", read_back(r, st.stream()), expected, shape);
            break;
        }
        case Op::to_host: {
            const Tensor<T> r = x.t.to_host();
            expect_new_contiguous(r, MemorySpace::host);
            check_copy("to_host", read_back(r, st.stream()), expected, shape);
            break;
        }
        case Op::to_space: {
            const MemorySpace to = random_space(st.rng);
            const bool non_blocking = st.rng.chance(0.5);
            st.note("to ", space_name(to), non_blocking ? ", non-blocking" : "");
            const Tensor<T> r = x.t.to(TensorOptions{.space = to, .stream = st.stream(), .non_blocking = non_blocking});
            expect_new_contiguous(r, to);
            check_copy("to(options)", read_back(r, st.stream()), expected, shape);
            break;
        }
        case Op::to_dtype: {
            auto convert_to = [&]<class U>() {
                st.note("to<", type_name<U>(), ">()");
                const Tensor<U> r = x.t.template to<U>();
                expect_new_contiguous(r, space);
                std::vector<double> want(expected.size()), tol(expected.size());
                for (std::size_t i = 0; i < want.size(); ++i) want[i] = converted<U>(expected[i], tol[i]);
                compare("to<U>", shape, read_back(r, st.stream()).doubles(), want, tol, max_finite<U>());
            };
            switch (st.rng.between(0, 3)) {
                case 0: convert_to.template operator()<float>(); break;
                case 1: convert_to.template operator()<double>(); break;
                case 2: convert_to.template operator()<__nv_bfloat16>(); break;
                default: convert_to.template operator()<std::int32_t>(); break;
            }
            break;
        }
        case Op::reshape: {
            Dims want;
            const Dims arg = reshaped(st.rng, shape, want);
            st.note("reshape(", dims_text(arg), ")");
            const Tensor<T> r = x.t.reshape(shape_of(arg), s);
            if (dims_of(r.shape()) != want) check_failed("reshape: shape ", r.shape().to_string(), ", expected ", dims_text(want));
            check_copy("reshape", read_back(r, st.stream()), expected, want);
            break;
        }
        case Op::view: {
            Dims want;
            const Dims arg = reshaped(st.rng, shape, want);
            st.note("view(", dims_text(arg), ")");
            Tensor<T> r;
            try {
                r = x.t.view(shape_of(arg));
            } catch (const InvalidArgument& e) {
                // Legitimate only when no strides can give the new shape, which a contiguous view always has.
                if (x.t.is_contiguous()) check_failed("view() of a contiguous tensor threw: ", e.what());
                st.note("refused: ", e.what());
                break;
            }
            if (r.storage() != x.t.storage()) check_failed("view() did not share the storage");
            if (dims_of(r.shape()) != want) check_failed("view: shape ", r.shape().to_string(), ", expected ", dims_text(want));
            check_copy("view", read_back(r, st.stream()), expected, want);
            break;
        }
        case Op::item: {
            if (count(shape) == 1) {
                const double v = to_double(x.t.item());
                if (v != expected[0]) check_failed("item(): got ", v, ", expected ", expected[0]);
            } else {
                const std::vector<T> v = x.t.to_vector();
                std::vector<double> got(v.size());
                for (std::size_t i = 0; i < v.size(); ++i) got[i] = to_double(v[i]);
                compare("to_vector", shape, got, expected, std::vector<double>(expected.size(), 0.0));
            }
            break;
        }
    }
}

// A view [count] elements long of a dim of `extent`: a start and a step (1 to 3) that fit.
std::pair<std::int64_t, std::int64_t> random_run(Rng& r, std::int64_t extent, std::int64_t count) {
    const std::int64_t step = count == 1 ? 1 : r.between(1, std::max<std::int64_t>(1, std::min<std::int64_t>(3, (extent - 1) / (count - 1))));
    return {r.between(0, extent - 1 - (count - 1) * step), step};
}

// Two strided views of one device buffer (the second sometimes of its transpose), the second
// copied into the first by copy_ or by an expression (dst = src + src): refused exactly when they
// share an element and are not the same view, else the buffer afterwards holds the source's old
// values (doubled) at the destination's elements and nothing else changed. Interleaved views (every
// other column, the halves of each row) share no element though their address ranges cross.
template <class T>
void two_views_step(Step& st) {
    const std::int64_t rows = st.rng.between(1, 40), cols = st.rng.between(1, 40);
    const Operand<T> x = make_operand<T>(st, {rows, cols}, {.max_views = 0, .values = Values::small_ints});
    const bool transposed = st.rng.chance(0.3);
    const std::int64_t s0 = st.rng.between(1, transposed ? std::min(rows, cols) : rows);
    const std::int64_t s1 = st.rng.between(1, transposed ? std::min(rows, cols) : cols);
    const auto [dr, dr_step] = random_run(st.rng, rows, s0);
    const auto [dc, dc_step] = random_run(st.rng, cols, s1);
    const std::int64_t src_rows = transposed ? cols : rows, src_cols = transposed ? rows : cols;
    auto [sr, sr_step] = random_run(st.rng, src_rows, s0);
    auto [sc, sc_step] = random_run(st.rng, src_cols, s1);
    if (!transposed && st.rng.chance(0.2)) sr = dr, sr_step = dr_step, sc = dc, sc_step = dc_step;  // the same view
    const Tensor<T> dst = x.t.slice(0, dr, dr + (s0 - 1) * dr_step + 1, dr_step).slice(1, dc, dc + (s1 - 1) * dc_step + 1, dc_step);
    const Tensor<T> from = transposed ? x.t.transpose(0, 1) : x.t;
    const Tensor<T> src = from.slice(0, sr, sr + (s0 - 1) * sr_step + 1, sr_step).slice(1, sc, sc + (s1 - 1) * sc_step + 1, sc_step);
    // Storage indices of each view's elements, by hand from the slices.
    std::vector<std::int64_t> at_dst, at_src;
    for (std::int64_t i = 0; i < s0; ++i)
        for (std::int64_t j = 0; j < s1; ++j) {
            at_dst.push_back(x.layout.storage_index((dr + i * dr_step) * cols + dc + j * dc_step));
            const std::int64_t r = sr + i * sr_step, c = sc + j * sc_step;
            at_src.push_back(x.layout.storage_index(transposed ? c * cols + r : r * cols + c));
        }
    const bool same = at_dst == at_src;
    bool shared = false;
    for (std::int64_t a : at_dst) shared = shared || std::find(at_src.begin(), at_src.end(), a) != at_src.end();
    const bool expression = st.rng.chance(0.5);
    st.op = expression ? "dst = src + src, views of one buffer" : "dst.copy_(src), views of one buffer";
    st.note(st.op, ", x: ", x.text(), ", dst: ", describe(dst), ", src: ", describe(src), transposed ? " (of x.T)" : "",
            same ? ", the same view" : shared ? ", sharing elements" : ", sharing none");
    st.inputs_ready();
    auto act = [&] {
        if (expression) {
            if (const auto s = st.stream_arg()) (dst = src + src).run(*s);
            else (dst = src + src).run();
        } else {
            dst.copy_(src, st.stream_arg());
        }
    };
    if (shared && !same) {
        expect_error(st, Want::invalid_argument, st.op, act);
        return;
    }
    act();
    std::vector<double> want = x.base;
    for (std::size_t k = 0; k < at_dst.size(); ++k) want[std::size_t(at_dst[k])] = x.base[std::size_t(at_src[k])] * (expression ? 2 : 1);
    const Tensor<T> whole(x.t.storage(), Layout::contiguous(Shape{std::int64_t(x.base.size())}));
    const Dims flat{std::int64_t(x.base.size())};
    compare(st.op, flat, read_back(whole, st.stream()).doubles(), want, std::vector<double>(want.size(), 0.0));
}

template <class T>
void invalid_step(Step& st) {
    const auto s = st.stream_arg();
    switch (st.rng.between(0, 8)) {
        case 0: {
            st.op = "reshape to another element count";
            const Dims shape = random_shape(st.rng, 0, 3, 1024);
            const Operand<T> x = make_operand<T>(st, shape, {});
            const Dims to{count(shape) + st.rng.between(1, 5)};
            st.note(st.op, ", x: ", x.text(), ", reshape(", dims_text(to), ")");
            expect_error(st, Want::invalid_argument, "reshape", [&] { (void)x.t.reshape(shape_of(to), s); });
            break;
        }
        case 1: {
            st.op = "view of a transpose as one dim";
            const std::int64_t m = st.rng.between(2, 30), n = st.rng.between(2, 30);
            const Operand<T> x = make_operand<T>(st, {m, n}, {.max_views = 0});
            const Tensor<T> t = x.t.transpose(0, 1);
            st.note(st.op, ", x: ", describe(t));
            expect_error(st, Want::invalid_argument, "view({m * n})", [&] { (void)t.view({m * n}); });
            break;
        }
        case 2: {
            st.op = "item() of several elements";
            const Operand<T> x = make_operand<T>(st, {st.rng.between(2, 9)}, {});
            st.note(st.op, ", x: ", x.text());
            st.inputs_ready();
            expect_error(st, Want::invalid_argument, "item()", [&] { (void)x.t.item(); });
            break;
        }
        case 3: {
            st.op = "copy of an undefined tensor";
            const int which = int(st.rng.between(0, 3));
            expect_error(st, Want::invalid_argument, "contiguous/clone/to_host/to<float> of Tensor{}", [&] {
                const Tensor<T> u;
                switch (which) {
                    case 0: (void)u.clone(s); break;
                    case 1: (void)u.to_host(); break;
                    case 2: (void)u.reshape({-1}, s); break;
                    default: (void)u.template to<float>(); break;
                }
            });
            break;
        }
        case 4: {
            st.op = "copy to a device that does not exist";
            const Operand<T> x = make_operand<T>(st, random_shape(st.rng, 1, 2, 64), {});
            const int d = device_count() + int(st.rng.between(0, 5));
            st.note(st.op, ", x: ", x.text(), ", device ", d);
            expect_error(st, Want::invalid_argument, "to({.device = " + std::to_string(d) + "})",
                         [&] { (void)x.t.to(TensorOptions{.device = Device{d}, .stream = st.stream()}); });
            break;
        }
        case 5: {
            st.op = "allocation beyond the device";
            const std::int64_t n = std::int64_t(1) << st.rng.between(38, 44);
            st.note(st.op, ": empty<", type_name<T>(), ">({", n, "})");
            expect_error(st, Want::out_of_memory, "empty({2^k})", [&] { (void)empty<T>({n}, {.stream = st.stream()}); });
            break;
        }
        case 6: {
            st.op = "element count overflowing 64 bits";
            const std::int64_t big = std::int64_t(1) << 40;
            expect_error(st, Want::invalid_argument, "empty({2^40, 2^40})", [&] { (void)empty<T>({big, big}); });
            break;
        }
        case 7: {
            st.op = "from_dlpack of a bool capsule as uint8";  // bool travels with DLPack 1.x's code 6, not as uint8
            const Tensor<bool> b = zeros<bool>({st.rng.between(0, 9)}, {.stream = st.stream()});
            st.note(st.op, ": ", describe(b));
            DLManagedTensor* m = to_dlpack(b);
            expect_error(st, Want::invalid_argument, "from_dlpack<uint8>(bool capsule)", [&] { (void)from_dlpack<std::uint8_t>(m); });
            break;
        }
        default: {
            st.op = "from_dlpack of the wrong dtype";
            const Operand<T> x = make_operand<T>(st, random_shape(st.rng, 1, 2, 64), {.max_views = 0});
            st.note(st.op, ", x: ", x.text());
            st.inputs_ready();
            DLManagedTensor* m = to_dlpack(x.t);
            expect_error(st, Want::invalid_argument, "from_dlpack<wrong type>", [&] {
                if constexpr (std::is_same_v<T, std::int8_t>) (void)from_dlpack<std::uint8_t>(m);
                else (void)from_dlpack<std::int8_t>(m);
            });
            break;
        }
    }
}

}  // namespace

void copy_step(Step& st) {
    st.family = "copy";
    with_type(any_type(st.rng), [&]<class T>() {
        if (st.invalid) invalid_step<T>(st);
        else if (st.rng.chance(0.2)) two_views_step<T>(st);
        else valid_step<T>(st);
    });
}

}  // namespace fuzz
