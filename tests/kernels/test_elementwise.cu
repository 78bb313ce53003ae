// kernels::map against a double-precision host reference: one, two and three inputs, odd sizes
// that leave a partial last block and several grid-stride rounds, output poisoned first.
#include <tessel/kernels/elementwise.cuh>
#include <tessel/runtime/launch.hpp>

#include "../support/device_array.hpp"

using tessel::testing::DeviceArray;

namespace {
struct Negate {
    __host__ __device__ float operator()(float a) const { return -a; }
};
struct AxpyRelu {
    double alpha;
    __host__ __device__ double operator()(double x, double y) const {
        const double v = alpha * x + y;
        return v > 0 ? v : 0;
    }
};
struct MulAddHalf {  // half inputs, float output: a * b + c computed in float
    __host__ __device__ float operator()(__half a, __half b, __half c) const {
        return __half2float(a) * __half2float(b) + __half2float(c);
    }
};
}  // namespace

TEST_CASE("map applies a functor to every element, whatever the grid", "[kernels][elementwise]") {
    using tessel::testing::random_vector;
    using tessel::testing::to_double;
    for (std::size_t n : {std::size_t(1), std::size_t(255), std::size_t(1000003)}) {
        for (unsigned blocks : {1u, 7u, 300u}) {  // 1 and 7 blocks force many grid-stride rounds
            INFO("n " << n << " blocks " << blocks);
            auto a = random_vector<float>(n, 1);
            DeviceArray<float> da(a), out(n);
            out.poison();
            tessel::launch(tessel::kernels::map<Negate, float, float>, blocks, 128, 0, nullptr, n, Negate{}, out.data(),
                           static_cast<const float*>(da.data()));
            std::vector<double> want(n), tol(n, 0.0);  // negation is exact
            for (std::size_t i = 0; i < n; ++i) want[i] = -double(a[i]);
            tessel::testing::check_close(out.download(), want, tol, "map(Negate)");
        }
    }
    const std::size_t n = 4099;
    auto x = random_vector<double>(n, 2), y = random_vector<double>(n, 3);
    DeviceArray<double> dx(x), dy(y), dz(n);
    dz.poison();
    const AxpyRelu f{-1.5};
    tessel::launch(tessel::kernels::map<AxpyRelu, double, double, double>, 5, 256, 0, nullptr, n, f, dz.data(),
                   static_cast<const double*>(dx.data()), static_cast<const double*>(dy.data()));
    std::vector<double> want(n), tol(n);
    for (std::size_t i = 0; i < n; ++i) {
        want[i] = std::max(0.0, -1.5 * x[i] + y[i]);
        tol[i] = 0x1p-52 * (1.5 * std::fabs(x[i]) + std::fabs(y[i]));  // one fused or two roundings
    }
    tessel::testing::check_close(dz.download(), want, tol, "map(AxpyRelu<double>)");

    auto a = random_vector<__half>(n, 4), b = random_vector<__half>(n, 5), c = random_vector<__half>(n, 6);
    DeviceArray<__half> ha(a), hb(b), hc(c);
    DeviceArray<float> r(n);
    r.poison();
    tessel::launch(tessel::kernels::map<MulAddHalf, float, __half, __half, __half>, 3, 64, 0, nullptr, n, MulAddHalf{},
                   r.data(), static_cast<const __half*>(ha.data()), static_cast<const __half*>(hb.data()),
                   static_cast<const __half*>(hc.data()));
    for (std::size_t i = 0; i < n; ++i) {
        want[i] = to_double(a[i]) * to_double(b[i]) + to_double(c[i]);  // exact in double
        tol[i] = 0x1p-23 * (std::fabs(to_double(a[i]) * to_double(b[i])) + std::fabs(to_double(c[i])));  // float rounding
    }
    tessel::testing::check_close(r.download(), want, tol, "map(MulAddHalf)");
}
