// Fuzzed row normalisations: softmax and log_softmax over a random axis, layer_norm and rms_norm
// over the last dim with optional weight and bias, on any view, on rows short (a warp per row), long
// (shared memory) or longer than a block's shared memory (a cluster); and their bad inputs.
#include <tessel/ops/rows.hpp>

#include "fuzz.hpp"
#include "reference.hpp"

namespace fuzz {
namespace {

enum class Op { softmax, log_softmax, layer_norm, rms_norm };
const char* op_name(Op o) {
    static const char* names[] = {"softmax", "log_softmax", "layer_norm", "rms_norm"};
    return names[int(o)];
}

// Expected outputs with tolerances, line by line (C: the statistics' type, float or double; u its
// roundoff; K the line's length):
//  - softmax y = exp(x - m) / S: x - m and exp cost 2u + |x - m| u relative, S (summed with online
//    rescaling) up to (2K + 4) u relative, the division u;
//  - log_softmax y = x - m - log S: the absolute error of log S is S's relative error, plus the
//    roundings of the two subtractions, relative to the magnitudes involved;
//  - layer_norm: Welford's mean is off by up to 2K u max|x|, the population variance by
//    4 K u mean(x^2), which moves rstd = 1/sqrt(var + eps) by half its relative error;
//  - rms_norm: mean(x^2) is off by (K + 2) u relative, rstd by half that plus the root;
// then the rounding into T.
template <class T>
void reference(Op op, const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& b, double eps,
               std::vector<double>& y, std::vector<double>& tol) {
    using C = ops::detail::row_compute_t<T>;
    const double u = roundoff<C>();
    const std::size_t K = x.size();
    y.assign(K, 0);
    tol.assign(K, 0);
    if (K == 0) return;
    const double hi = *std::max_element(x.begin(), x.end()), lo = *std::min_element(x.begin(), x.end());
    switch (op) {
        case Op::softmax:
        case Op::log_softmax: {
            long double s = 0;
            for (double v : x) s += std::exp((long double)(v - hi));
            const double rel_s = (2.0 * double(K) + 4 + 2 * (hi - lo)) * u;
            for (std::size_t i = 0; i < K; ++i) {
                if (op == Op::softmax) {
                    y[i] = double(std::exp((long double)(x[i] - hi)) / s);
                    tol[i] = (rel_s + (4 + std::fabs(x[i] - hi)) * u) * y[i];
                } else {
                    y[i] = double((long double)(x[i] - hi) - std::log(s));
                    tol[i] = rel_s + 4 * u * (std::fabs(x[i]) + std::fabs(hi) + double(std::log(s)));
                }
            }
            break;
        }
        case Op::layer_norm: {
            long double s = 0, sq = 0;
            for (double v : x) s += v, sq += (long double)v * v;
            const long double mean = s / K;
            long double m2 = 0;
            for (double v : x) m2 += (v - mean) * (v - mean);
            const double var = double(m2 / K), rstd = 1 / std::sqrt(var + eps);
            const double max_abs = std::max(std::fabs(hi), std::fabs(lo));
            const double err_mean = 2 * double(K) * u * max_abs;
            const double rel_rstd = 0.5 * (4 * double(K) * u * double(sq / K)) / (var + eps) + 3 * u;
            for (std::size_t i = 0; i < K; ++i) {
                const double wi = w.empty() ? 1 : w[i], bi = b.empty() ? 0 : b[i];
                const double z = double(x[i] - mean) * rstd;
                y[i] = z * wi + bi;
                tol[i] = std::fabs(wi) * (err_mean * rstd + std::fabs(z) * (rel_rstd + 2 * u)) + 2 * u * (std::fabs(z * wi) + std::fabs(bi));
            }
            break;
        }
        case Op::rms_norm: {
            long double sq = 0;
            for (double v : x) sq += (long double)v * v;
            const double ms = double(sq / K), rstd = 1 / std::sqrt(ms + eps);
            const double rel = 0.5 * (double(K) + 2) * u * ms / (ms + eps) + 5 * u;
            for (std::size_t i = 0; i < K; ++i) {
                const double wi = w.empty() ? 1 : w[i];
                y[i] = x[i] * rstd * wi;
                tol[i] = rel * std::fabs(y[i]);
            }
            break;
        }
    }
    for (std::size_t i = 0; i < K; ++i) tol[i] += rounding<T>(y[i]) + subnormal<C>();
}

template <class T>
Tensor<T> run(Step& st, Op op, const Tensor<T>& x, int axis, const std::optional<Tensor<T>>& w, const std::optional<Tensor<T>>& b, double eps) {
    const auto s = st.stream_arg();
    switch (op) {
        case Op::softmax: return softmax(x, axis, s);
        case Op::log_softmax: return log_softmax(x, axis, s);
        case Op::layer_norm: return layer_norm(x, w, b, eps, s);
        default: return rms_norm(x, w, eps, s);
    }
}

template <class T>
void valid_step(Step& st) {
    const Op op = Op(st.rng.between(0, 3));
    Dims shape = step_shape(st.rng, 1, 4);
    // Rows beyond one block's 227 KiB of shared memory: a cluster of blocks per row. Rare, as the
    // sim takes seconds over one such row; float64 needs the fewest elements.
    const bool cluster = std::is_same_v<T, double> && st.rng.chance(0.02);
    if (cluster) shape = {1, 29100 + st.rng.between(0, 900)};
    const int rank = int(shape.size());
    const int axis_w = (op == Op::softmax || op == Op::log_softmax) && !cluster ? int(st.rng.between(0, rank - 1)) : rank - 1;
    const int axis = st.rng.chance(0.3) ? axis_w - rank : axis_w;
    const Operand<T> x = make_operand<T>(st, shape, {.values = Values(st.rng.weighted({4, 3, 1, 0, 1}))});
    const std::int64_t cols = shape[std::size_t(axis_w)];
    std::optional<Operand<T>> w, b;
    // Weights and biases of any strides, broadcast ones included (copied first, as torch takes them).
    if ((op == Op::layer_norm || op == Op::rms_norm) && st.rng.chance(0.6)) w = make_operand<T>(st, {cols}, {.max_views = 2});
    if (op == Op::layer_norm && st.rng.chance(0.5)) b = make_operand<T>(st, {cols}, {.max_views = 2});
    const double eps = st.rng.pick(std::vector<double>{1e-5, 1e-3, 0.5});
    st.op = op_name(op);
    st.note(op_name(op), " axis ", axis, ", x: ", x.text(), w ? ", weight: " + w->text() : "", b ? ", bias: " + b->text() : "",
            op == Op::layer_norm || op == Op::rms_norm ? ", eps " + std::to_string(eps) : "");
    st.inputs_ready();
    // The op may copy x (strided, or another axis: there and back), the weight and the bias before
    // its output: a poisoned block for each, so that the output's is one whichever it takes.
    const std::size_t out_bytes = std::size_t(count(shape)) * sizeof(T), param_bytes = std::size_t(cols) * sizeof(T);
    poison_next({out_bytes, out_bytes, out_bytes, w && !w->t.is_contiguous() ? param_bytes : 0, b && !b->t.is_contiguous() ? param_bytes : 0},
                st.stream(), st.poison_byte());
    const Tensor<T> r = run<T>(st, op, x.t, axis, w ? std::optional<Tensor<T>>(w->t) : std::nullopt,
                               b ? std::optional<Tensor<T>>(b->t) : std::nullopt, eps);
    check_shape(op_name(op), r.shape(), shape);
    if (!r.is_contiguous()) check_failed(op_name(op), ": the result ", describe(r), " is not contiguous");

    const std::vector<double> xv = x.all(), wv = w ? w->all() : std::vector<double>{}, bv = b ? b->all() : std::vector<double>{};
    std::vector<double> expected(xv.size()), tol(xv.size()), line_x, line_y, line_tol;
    for (const auto& line : ref::lines(shape, axis_w)) {
        line_x.clear();
        for (std::int64_t i : line) line_x.push_back(xv[std::size_t(i)]);
        reference<T>(op, line_x, wv, bv, eps, line_y, line_tol);
        for (std::size_t k = 0; k < line.size(); ++k) expected[std::size_t(line[k])] = line_y[k], tol[std::size_t(line[k])] = line_tol[k];
    }
    compare(op_name(op), shape, read_back(r, st.stream()).doubles(), expected, tol, max_finite<T>());
}

template <class T>
void invalid_step(Step& st) {
    const Op op = Op(st.rng.between(0, 3));
    Dims shape = random_shape(st.rng, 1, 4, 2048);
    const int rank = int(shape.size());
    st.op = op_name(op);
    auto call = [&](const Tensor<T>& x, int axis, const std::optional<Tensor<T>>& w, const std::optional<Tensor<T>>& b) {
        (void)run<T>(st, op, x, axis, w, b, 1e-5);
    };
    switch (st.rng.between(0, 4)) {
        case 0: {
            // softmax of a 0-d tensor is defined along axis 0 or -1 (torch's): axis 1 is not; the
            // norms, over the last dim, need one.
            const bool softmax_kind = op == Op::softmax || op == Op::log_softmax;
            st.op += softmax_kind ? ": rank 0, axis 1" : ": rank 0";
            const Operand<T> x = make_operand<T>(st, {}, {});
            st.note(st.op, ", x: ", x.text());
            st.inputs_ready();
            expect_error(st, Want::invalid_argument, std::string(op_name(op)) + (softmax_kind ? " of a scalar along axis 1" : " of a scalar"),
                         [&] { call(x.t, softmax_kind ? 1 : 0, {}, {}); });
            break;
        }
        case 1: {
            st.op += ": host input";
            const Operand<T> x = make_operand<T>(st, shape, {.space = st.rng.chance(0.5) ? MemorySpace::host : MemorySpace::pinned});
            st.note(st.op, ", x: ", x.text());
            expect_error(st, Want::invalid_argument, "a host tensor", [&] { call(x.t, -1, {}, {}); });
            break;
        }
        case 2: {
            st.op += ": undefined input";
            expect_error(st, Want::invalid_argument, "Tensor{}", [&] { call(Tensor<T>{}, -1, {}, {}); });
            break;
        }
        case 3: {
            if (op == Op::layer_norm || op == Op::rms_norm) {
                st.op += ": bad weight";
                if (shape.back() < 2) shape.back() = st.rng.between(2, 9);
                const std::int64_t cols = shape.back();
                const Operand<T> x = make_operand<T>(st, shape, {});
                Tensor<T> w;
                std::string what;
                switch (st.rng.between(0, 3)) {
                    case 0: w = make_operand<T>(st, {cols + 1}, {.max_views = 0}).t, what = "a weight one too long"; break;
                    case 1: w = make_operand<T>(st, {1, cols}, {.max_views = 0}).t, what = "a 2-d weight"; break;
                    case 2: w = make_operand<T>(st, {2 * cols + 2}, {.max_views = 0}).t.slice(0, 0, 2 * cols + 2, 2), what = "a strided weight one too long"; break;
                    default: w = make_operand<T>(st, {cols}, {.max_views = 0, .space = MemorySpace::host}).t, what = "a host weight"; break;
                }
                st.note(st.op, ", x: ", x.text(), ", ", what, ": ", describe(w));
                st.inputs_ready();
                const bool as_bias = op == Op::layer_norm && st.rng.chance(0.5);
                expect_error(st, Want::invalid_argument, std::string(op_name(op)) + (as_bias ? " with it as bias" : " with it as weight"), [&] {
                    if (as_bias) call(x.t, -1, std::nullopt, w);
                    else call(x.t, -1, w, std::nullopt);
                });
                break;
            }
            [[fallthrough]];
        }
        default: {
            st.op = std::string(op == Op::log_softmax ? "log_softmax" : "softmax") + ": axis out of range";
            const Operand<T> x = make_operand<T>(st, shape, {});
            const int axis = st.rng.chance(0.5) ? rank + int(st.rng.between(0, 3)) : -rank - 1 - int(st.rng.between(0, 3));
            st.note(st.op, ", x: ", x.text(), ", axis ", axis);
            st.inputs_ready();
            expect_error(st, Want::invalid_argument, st.op, [&] {
                if (op == Op::log_softmax) (void)log_softmax(x.t, axis, st.stream_arg());
                else (void)softmax(x.t, axis, st.stream_arg());
            });
            break;
        }
    }
}

}  // namespace

void rows_step(Step& st) {
    st.family = "rows";
    with_float_type(float_type(st.rng), [&]<class T>() {
        if (st.invalid) invalid_step<T>(st);
        else valid_step<T>(st);
    });
}

}  // namespace fuzz
