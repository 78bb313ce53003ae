// The sampled error of a benchmarked matrix product: |c - a b| / sum_k |a b| (a componentwise relative
// error: fp32 accumulation keeps it near k * 2^-24, a bf16 output's rounding near 2^-9) over
// `samples` elements, against a double-precision host product. a [M, K], b [K, N], c [M, N], contiguous.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include <tessel/tensor/tensor.hpp>

namespace tessel::bench {

inline double as_double(float x) { return x; }
inline double as_double(double x) { return x; }
inline double as_double(__nv_bfloat16 x) { return double(__bfloat162float(x)); }
inline double as_double(__half x) { return double(__half2float(x)); }

template <class T>
double sampled_matmul_error(const Tensor<T>& a, const Tensor<T>& b, const Tensor<T>& c, int samples = 64) {
    const auto ha = a.to_vector(), hb = b.to_vector(), hc = c.to_vector();
    const std::int64_t m = a.size(0), k = a.size(1), n = b.size(1);
    double worst = 0;
    for (std::int64_t s = 0; s < samples; ++s) {
        const std::int64_t i = (s * 7919) % m, j = (s * 104729 + 13) % n;
        double ref = 0, mag = 0;
        for (std::int64_t p = 0; p < k; ++p) {
            const double x = as_double(ha[std::size_t(i * k + p)]) * as_double(hb[std::size_t(p * n + j)]);
            ref += x;
            mag += std::fabs(x);
        }
        worst = std::max(worst, std::fabs(as_double(hc[std::size_t(i * n + j)]) - ref) / std::max(mag, 1e-30));
    }
    return worst;
}

}  // namespace tessel::bench
