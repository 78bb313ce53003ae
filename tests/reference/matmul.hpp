// Host reference for C = alpha*A*B + beta*C0 (row-major), in double precision, plus the error bound
// a K-term dot product in a type with unit roundoff `u` may carry.
#pragma once

#include <cmath>
#include <cstddef>
#include <vector>

namespace tessel::reference {

struct MatmulResult {
    std::vector<double> c;
    std::vector<double> bound;  // per element: |alpha| * sum_k |a||b| + |beta c0|
};

inline MatmulResult matmul(int m, int n, int k, double alpha, const std::vector<double>& a, const std::vector<double>& b,
                           double beta, const std::vector<double>& c0) {
    MatmulResult r{std::vector<double>(std::size_t(m) * n), std::vector<double>(std::size_t(m) * n)};
    for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j) {
            double s = 0, mag = 0;
            for (int p = 0; p < k; ++p) {
                const double x = a[std::size_t(i) * k + p] * b[std::size_t(p) * n + j];
                s += x;
                mag += std::fabs(x);
            }
            const double prior = beta == 0 ? 0.0 : beta * c0[std::size_t(i) * n + j];
            r.c[std::size_t(i) * n + j] = alpha * s + prior;
            r.bound[std::size_t(i) * n + j] = std::fabs(alpha) * mag + std::fabs(prior);
        }
    return r;
}

}  // namespace tessel::reference
