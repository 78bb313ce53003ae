// The sampled error of a benchmarked matrix product: |c - a b| / sum_k |a b| (a componentwise relative
// error: fp32 accumulation keeps it near k * 2^-24, a bf16 output's rounding near 2^-9) over
// `samples` elements, against a double-precision host product. a [M, K] and c [M, N] contiguous; b
// [K, N] contiguous, or (b_columns) the transpose of a contiguous [N, K] weight.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include <tessel/tensor/tensor.hpp>

namespace tessel::bench {

inline double as_double(float x) { return x; }
inline double as_double(double x) { return x; }
inline double as_double(int x) { return x; }
inline double as_double(std::int8_t x) { return x; }
inline double as_double(__nv_bfloat16 x) { return double(__bfloat162float(x)); }
inline double as_double(__half x) { return double(__half2float(x)); }
inline double as_double(__nv_fp8_e4m3 x) { return double(float(x)); }

template <class T, class Out>
double sampled_matmul_error(const Tensor<T>& a, const Tensor<T>& b, const Tensor<Out>& c, int samples = 64, bool b_columns = false) {
    const auto ha = a.contiguous().to_vector();
    const auto hc = c.contiguous().to_vector();
    const auto hb = (b_columns ? b.transpose(0, 1) : b).contiguous().to_vector();
    const std::int64_t m = a.size(0), k = a.size(1), n = b.size(1);
    double worst = 0;
    for (std::int64_t s = 0; s < samples; ++s) {
        const std::int64_t i = (s * 7919) % m, j = (s * 104729 + 13) % n;
        double ref = 0, mag = 0;
        for (std::int64_t p = 0; p < k; ++p) {
            const double y = as_double(hb[std::size_t(b_columns ? j * k + p : p * n + j)]);
            const double x = as_double(ha[std::size_t(i * k + p)]) * y;
            ref += x;
            mag += std::fabs(x);
        }
        worst = std::max(worst, std::fabs(as_double(hc[std::size_t(i * n + j)]) - ref) / std::max(mag, 1e-30));
    }
    return worst;
}

}  // namespace tessel::bench
