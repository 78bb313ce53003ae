// What the matmul tests share: operands with their host values, the logical values of a view,
// torch.matmul's result in double (with the scale of its rounding error), the message a call throws.
#pragma once

#include <tessel/ops/matmul.hpp>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "../support/device_array.hpp"

namespace tessel::testing::matmul {

using tessel::MatmulPolicy;
using tessel::Shape;
using tessel::Tensor;

// A device tensor and the same values on the host (as doubles, contiguous in the base shape).
template <class T>
struct Operand {
    Tensor<T> base;             // on the device
    std::vector<double> host;   // base's values
};

// Integer-valued (in [-limit, limit]) or real (in [-1, 1)) values of shape s.
template <class T>
Operand<T> make(const Shape& s, std::uint64_t seed, bool integers, int limit = 4) {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int> ints(-limit, limit);
    std::uniform_real_distribution<double> reals(-1, 1);
    const auto n = std::size_t(tessel::Layout::contiguous(s).numel());
    std::vector<T> v(n);
    std::vector<double> h(n);
    for (std::size_t i = 0; i < n; ++i) {
        v[i] = tessel::testing::from_double<T>(integers ? ints(rng) : reals(rng));
        h[i] = tessel::testing::to_double(v[i]);
    }
    return {tessel::from_host<T>(std::span<const T>(v), s), h};
}

// The logical values of view `t` (a view of `base`, whose host values are `host`), row-major.
template <class T>
std::vector<double> logical(const Tensor<T>& t, const Tensor<T>& base, const std::vector<double>& host) {
    const std::int64_t origin = t.layout().offset - base.layout().offset;
    std::vector<double> out(std::size_t(t.numel()));
    std::vector<std::int64_t> idx(std::size_t(t.dim()), 0);
    for (std::size_t i = 0; i < out.size(); ++i) {
        std::int64_t off = origin;
        for (int d = 0; d < t.dim(); ++d) off += idx[std::size_t(d)] * t.strides()[d];
        out[i] = host[std::size_t(off)];
        for (int d = t.dim() - 1; d >= 0; --d) {
            if (++idx[std::size_t(d)] < t.shape()[d]) break;
            idx[std::size_t(d)] = 0;
        }
    }
    return out;
}

// torch.matmul's result, in double, for logical operands a (shape sa) and b (shape sb); also the
// sum of |products| per element (the error bound's scale).
struct Reference {
    Shape shape;
    std::vector<double> value, magnitude;
};
inline Reference reference_matmul(const std::vector<double>& a, Shape sa, const std::vector<double>& b, Shape sb) {
    const bool av = sa.size() == 1, bv = sb.size() == 1;
    if (av) sa.insert(0, 1);
    if (bv) sb.push_back(1);
    const int ra = sa.size(), rb = sb.size(), rank = std::max(ra, rb);
    const std::int64_t m = sa[ra - 2], k = sa[ra - 1], n = sb[rb - 1];
    Shape batch;
    for (int i = 0; i < rank - 2; ++i) {
        const int ia = i - (rank - ra), ib = i - (rank - rb);
        const std::int64_t x = ia >= 0 ? sa[ia] : 1, y = ib >= 0 ? sb[ib] : 1;
        batch.push_back(std::max(x, y));
    }
    std::int64_t batches = 1;
    for (auto x : batch) batches *= x;
    Reference r;
    r.value.assign(std::size_t(batches * m * n), 0);
    r.magnitude.assign(r.value.size(), 0);
    for (std::int64_t bi = 0; bi < batches; ++bi) {
        // Batch index -> offsets in a and b, broadcasting size-1 dims.
        std::int64_t rest = bi, oa = 0, ob = 0, stride_a = m * k, stride_b = k * n;
        for (int i = rank - 3; i >= 0; --i) {
            const std::int64_t j = rest % batch[i];
            rest /= batch[i];
            const int ia = i - (rank - ra), ib = i - (rank - rb);
            if (ia >= 0) {
                if (sa[ia] > 1) oa += j * stride_a;
                stride_a *= sa[ia];
            }
            if (ib >= 0) {
                if (sb[ib] > 1) ob += j * stride_b;
                stride_b *= sb[ib];
            }
        }
        for (std::int64_t i = 0; i < m; ++i)
            for (std::int64_t j = 0; j < n; ++j) {
                double s = 0, mag = 0;
                for (std::int64_t p = 0; p < k; ++p) {
                    const double x = a[std::size_t(oa + i * k + p)] * b[std::size_t(ob + p * n + j)];
                    s += x;
                    mag += std::fabs(x);
                }
                r.value[std::size_t((bi * m + i) * n + j)] = s;
                r.magnitude[std::size_t((bi * m + i) * n + j)] = mag;
            }
    }
    r.shape = batch;
    if (!av) r.shape.push_back(m);
    if (!bv) r.shape.push_back(n);
    return r;
}

template <class T>
std::string name() {
    if constexpr (std::is_same_v<T, float>) return "fp32";
    else if constexpr (std::is_same_v<T, double>) return "fp64";
    else if constexpr (std::is_same_v<T, __half>) return "fp16";
    else if constexpr (std::is_same_v<T, std::int8_t>) return "int8";
    else if constexpr (std::is_same_v<T, int>) return "int32";
    else if constexpr (std::is_same_v<T, __nv_fp8_e4m3>) return "e4m3";
    else return "bf16";
}

using tessel::testing::message;

inline constexpr MatmulPolicy policies[] = {MatmulPolicy::handwritten, MatmulPolicy::library};

}  // namespace tessel::testing::matmul
