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
            p.shape());
    Tensor<P> v = p;
    for (int d = axis + 1; d < rank; ++d) v = v.unsqueeze(-1);
    return v;
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
    const double lo = std::min(0.0, convert<double>(amin(x).item())), hi = std::max(0.0, convert<double>(amax(x).item()));
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
    const int a = ops::detail::wrap_axis(axis, x.dim());
    std::vector<int> others;
    for (int d = 0; d < x.dim(); ++d)
        if (d != a) others.push_back(d);
    const auto lo = minimum(amin(x, Axes(others)), 0.0);
    const auto hi = maximum(amax(x, Axes(others)), 0.0);
    ChannelQuantParams p{empty<float>({x.size(a)}, {.device = x.device()}), empty<std::int32_t>({x.size(a)}, {.device = x.device()}), a};
    if (symmetric) {
        const auto m = maximum(abs(lo), abs(hi));
        (p.scale = where(m > 0, maximum(m / 127.0, smallest_scale), 1.0)).run();
        p.zero_point = zeros<std::int32_t>({x.size(a)}, {.device = x.device()});
    } else {
        (p.scale = where(hi > lo, maximum((hi - lo) / 255.0, smallest_scale), 1.0)).run();
        (p.zero_point = cast_to<std::int32_t>(clamp(round(-128.0 - lo / p.scale), -128, 127))).run();
    }
    return p;
}

// Quantises to int8 with one scale and zero point.
template <Element T>
Tensor<std::int8_t> quantize(const Tensor<T>& x, QuantParams p) {
    require(float(p.scale) > 0 && std::isfinite(float(p.scale)), "quantize: scale must be positive and finite as a float, got ",
            p.scale);
    require(p.zero_point >= -128 && p.zero_point <= 127, "quantize: zero point ", p.zero_point, " is outside int8");
    Tensor<std::int8_t> q = empty<std::int8_t>(x.shape(), {.device = x.device()});
    (q = cast_to<std::int8_t>(clamp(round(cast_to<float>(x) / float(p.scale)) + p.zero_point, -128, 127))).run();
    return q;
}
// Quantises to int8 with a scale and zero point per index of p.axis.
template <Element T>
Tensor<std::int8_t> quantize(const Tensor<T>& x, const ChannelQuantParams& p) {
    const int a = ops::detail::wrap_axis(p.axis, x.dim());
    const auto s = ops::detail::along_axis(p.scale, a, x.dim(), x.size(a), "scale");
    const auto z = ops::detail::along_axis(p.zero_point, a, x.dim(), x.size(a), "zero_point");
    // The per-tensor form's checks, channel by channel: the parameters are read back once (C values,
    // a wait for the stream; quantising a weight is not a hot loop) so that a zero, negative or NaN
    // scale is an error naming the channel rather than a tensor of saturated codes.
    const std::vector<float> scales = p.scale.to_vector();
    const std::vector<std::int32_t> zeros = p.zero_point.to_vector();
    for (std::size_t c = 0; c < scales.size(); ++c) {
        require(scales[c] > 0 && std::isfinite(scales[c]), "quantize: channel ", c, " has scale ", scales[c],
                "; scales must be positive and finite");
        require(zeros[c] >= -128 && zeros[c] <= 127, "quantize: channel ", c, " has zero point ", zeros[c], ", outside int8");
    }
    Tensor<std::int8_t> q = empty<std::int8_t>(x.shape(), {.device = x.device()});
    (q = cast_to<std::int8_t>(clamp(round(cast_to<float>(x) / s) + z, -128, 127))).run();
    return q;
}
// Back to float32: (q - zero_point) * scale.
inline Tensor<float> dequantize(const Tensor<std::int8_t>& q, QuantParams p) {
    return evaluate((cast_to<float>(q) - float(p.zero_point)) * float(p.scale));
}
inline Tensor<float> dequantize(const Tensor<std::int8_t>& q, const ChannelQuantParams& p) {
    const int a = ops::detail::wrap_axis(p.axis, q.dim());
    const auto s = ops::detail::along_axis(p.scale, a, q.dim(), q.size(a), "scale");
    const auto z = ops::detail::along_axis(p.zero_point, a, q.dim(), q.size(a), "zero_point");
    return evaluate((cast_to<float>(q) - z) * s);
}

}  // namespace tessel
