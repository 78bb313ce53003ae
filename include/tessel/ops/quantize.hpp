// int8 quantisation, per tensor or per channel, symmetric (zero point 0) or asymmetric:
//   q = clamp(round_half_even(x / scale) + zero_point, -128, 127),  x' = (q - zero_point) * scale.
// Each is one element-wise expression (one kernel); per-channel scales broadcast along `axis`.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>

#include "assign.hpp"
#include "reduce.hpp"

namespace tessel {

// A per-tensor quantisation: x = (q - zero_point) * scale.
struct QuantParams {
    double scale = 1.0;
    int zero_point = 0;
};
// Per-channel quantisation along `axis`: one scale and zero point per index of that dim.
struct ChannelQuantParams {
    Tensor<float> scale;             // shape [channels]
    Tensor<std::int32_t> zero_point; // shape [channels]
    int axis = 0;
};

namespace ops::detail {
// A [C] parameter viewed so it broadcasts along `axis` of a tensor of rank `rank`: shape [C, 1, ..., 1].
template <Element P>
Tensor<P> along_axis(const Tensor<P>& p, int axis, int rank, std::int64_t channels, const char* what) {
    require(p.dim() == 1 && p.numel() == channels, "quantisation: ", what, " must have shape [", channels, "], not ",
            ::tessel::detail::shape_of(p));
    Tensor<P> v = p;
    for (int d = axis + 1; d < rank; ++d) v = v.unsqueeze(-1);
    return v;
}
// The parameters quantize and dequantize accept: a positive, finite float scale and a zero point in
// int8; `op` names the caller. The per-channel form reads its C values back once (a wait for the
// stream; quantising a weight is not a hot loop) so that the error names the channel.
inline void check_qparams(const char* op, double scale, int zero_point) {
    require(float(scale) > 0 && std::isfinite(float(scale)), op, ": scale must be positive and finite as a float, got ", scale);
    require(zero_point >= -128 && zero_point <= 127, op, ": zero point ", zero_point, " is outside int8");
}
inline void check_channel_qparams(const char* op, const Tensor<float>& scale, const Tensor<std::int32_t>& zero_point) {
    const std::vector<float> scales = scale.to_vector();
    const std::vector<std::int32_t> zeros = zero_point.to_vector();
    for (std::size_t c = 0; c < scales.size(); ++c) {
        require(scales[c] > 0 && std::isfinite(scales[c]), op, ": channel ", c, " has scale ", scales[c],
                "; scales must be positive and finite");
        require(zeros[c] >= -128 && zeros[c] <= 127, op, ": channel ", c, " has zero point ", zeros[c], ", outside int8");
    }
}
inline int wrap_axis(int axis, int rank) {
    require(axis >= -rank && axis < rank, "quantisation: axis ", axis, " out of range for rank ", rank);
    return axis < 0 ? axis + rank : axis;
}
}  // namespace ops::detail

// The smallest scale chosen: float's smallest normal, so that a range of subnormals gives a scale
// quantize() accepts (a quotient rounded to float 0 would not be) and x / scale stays finite.
inline constexpr double smallest_scale = double(std::numeric_limits<float>::min());

// Parameters covering x's range: symmetric uses scale = max|x| / 127 and zero point 0; asymmetric maps
// [min(x, 0), max(x, 0)] onto [-128, 127]. Reads two values back from the device (synchronises).
template <Element T>
QuantParams choose_qparams(const Tensor<T>& x, bool symmetric = true) {
    require(x.defined(), "choose_qparams: x is an undefined (default-constructed) tensor");
    require(x.numel() > 0, "choose_qparams: x (shape ", x.shape(), ") is empty, so it has no range to quantise");
    const double x_min = convert<double>(amin(x).item()), x_max = convert<double>(amax(x).item());
    // std::min(0, NaN) is 0: a NaN would vanish from the range instead of failing.
    require(std::isfinite(x_min) && std::isfinite(x_max), "choose_qparams: x holds ", std::isnan(x_min) || std::isnan(x_max) ? "NaN" : "an infinity",
            " (min ", x_min, ", max ", x_max, "); int8 quantisation needs a finite range");
    const double lo = std::min(0.0, x_min), hi = std::max(0.0, x_max);
    if (symmetric) {
        const double m = std::max(std::fabs(lo), std::fabs(hi));
        return {m > 0 ? std::max(m / 127.0, smallest_scale) : 1.0, 0};
    }
    const double scale = hi > lo ? std::max((hi - lo) / 255.0, smallest_scale) : 1.0;
    return {scale, int(std::clamp(std::nearbyint(-128.0 - lo / scale), -128.0, 127.0))};
}
// Per-channel parameters along `axis`, computed on the device (no synchronisation).
template <Element T>
ChannelQuantParams choose_channel_qparams(const Tensor<T>& x, int axis, bool symmetric = true) {
    require(x.defined(), "choose_channel_qparams: x is an undefined (default-constructed) tensor");
    const int a = ops::detail::wrap_axis(axis, x.dim());
    std::vector<int> others;
    for (int d = 0; d < x.dim(); ++d)
        if (d != a) others.push_back(d);
    require(x.numel() > 0 || x.size(a) == 0, "choose_channel_qparams: x (shape ", x.shape(), ") has ", x.size(a),
            " channels along axis ", axis, " but no elements in them, so they have no range to quantise");
    // A 1-d x has nothing to reduce: each element is its own channel (Axes{} would mean every dim).
    const Tensor<T> x_min = others.empty() ? x : amin(x, Axes(others)), x_max = others.empty() ? x : amax(x, Axes(others));
    const auto lo = minimum(x_min, 0.0);
    const auto hi = maximum(x_max, 0.0);
    ChannelQuantParams p{empty<float>({x.size(a)}, {.device = x.device()}), empty<std::int32_t>({x.size(a)}, {.device = x.device()}), a};
    if (symmetric) {
        const auto m = maximum(abs(lo), abs(hi));
        // A channel holding NaN or an infinity gets that as its scale (where(m > 0) would turn NaN into
        // 1), which quantize refuses naming the channel.
        (p.scale = where(m == 0, 1.0, maximum(m / 127.0, smallest_scale))).run();
        p.zero_point = zeros<std::int32_t>({x.size(a)}, {.device = x.device()});
    } else {
        // In double, as choose_qparams: hi - lo of finite floats can overflow float (-3e38 to 3e38).
        (p.scale = where(hi == lo, 1.0, maximum((cast_to<double>(hi) - cast_to<double>(lo)) / 255.0, smallest_scale))).run();
        (p.zero_point = cast_to<std::int32_t>(clamp(round(-128.0 - lo / p.scale), -128, 127))).run();
    }
    return p;
}

// Quantises to int8 with one scale and zero point.
template <Element T>
Tensor<std::int8_t> quantize(const Tensor<T>& x, QuantParams p) {
    ops::detail::check_qparams("quantize", p.scale, p.zero_point);
    Tensor<std::int8_t> q = empty<std::int8_t>(x.shape(), {.device = x.device()});
    // A NaN has no code: it takes the zero point, so that it dequantises to 0 (converting it would give
    // code 0, which dequantises to -zero_point * scale).
    // (The scale is finite and positive, so x / scale is NaN exactly where x is.)
    const auto xf = cast_to<float>(x);
    (q = cast_to<std::int8_t>(where(isnan(xf), p.zero_point, clamp(round(xf / float(p.scale)) + p.zero_point, -128, 127)))).run();
    return q;
}
// Quantises to int8 with a scale and zero point per index of p.axis.
template <Element T>
Tensor<std::int8_t> quantize(const Tensor<T>& x, const ChannelQuantParams& p) {
    const int a = ops::detail::wrap_axis(p.axis, x.dim());
    const auto s = ops::detail::along_axis(p.scale, a, x.dim(), x.size(a), "scale");
    const auto z = ops::detail::along_axis(p.zero_point, a, x.dim(), x.size(a), "zero_point");
    // A zero, negative or NaN scale is an error naming the channel rather than a tensor of saturated codes.
    ops::detail::check_channel_qparams("quantize", p.scale, p.zero_point);
    Tensor<std::int8_t> q = empty<std::int8_t>(x.shape(), {.device = x.device()});
    const auto xf = cast_to<float>(x);
    (q = cast_to<std::int8_t>(where(isnan(xf), z, clamp(round(xf / s) + z, -128, 127)))).run();  // NaN: as above
    return q;
}
// Back to float32: (q - zero_point) * scale.
inline Tensor<float> dequantize(const Tensor<std::int8_t>& q, QuantParams p) {
    ops::detail::check_qparams("dequantize", p.scale, p.zero_point);  // the parameters quantize would take
    return evaluate((cast_to<float>(q) - float(p.zero_point)) * float(p.scale));
}
inline Tensor<float> dequantize(const Tensor<std::int8_t>& q, const ChannelQuantParams& p) {
    const int a = ops::detail::wrap_axis(p.axis, q.dim());
    const auto s = ops::detail::along_axis(p.scale, a, q.dim(), q.size(a), "scale");
    const auto z = ops::detail::along_axis(p.zero_point, a, q.dim(), q.size(a), "zero_point");
    // The values are not read back here (a wait per call, and dequantising weights is a hot loop in
    // weight-only inference): quantize and choose_channel_qparams are where parameters are checked.
    return evaluate((cast_to<float>(q) - z) * s);
}

}  // namespace tessel
