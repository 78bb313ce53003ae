// Test helpers: a device array with host round trips, random inputs, poisoning, and comparisons
// that print the first mismatching indices with expected, actual and tolerance.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <cuda_fp8.h>

#include <tessel/core/error.hpp>
#include <tessel/core/kernel.hpp>
#include <tessel/runtime/rt.hpp>

namespace tessel::testing {

// Owns n elements of device memory; the tests' stand-in until they move to Tensor.
template <class T>
class DeviceArray {
public:
    explicit DeviceArray(std::size_t n) : n_(n), p_(static_cast<T*>(rt::malloc_device(n * sizeof(T)))) {}
    explicit DeviceArray(const std::vector<T>& h) : DeviceArray(h.size()) { upload(h); }
    ~DeviceArray() {
        if (p_) rt::free_device(p_);
    }
    DeviceArray(const DeviceArray&) = delete;
    DeviceArray& operator=(const DeviceArray&) = delete;

    T* data() const { return p_; }
    std::size_t size() const { return n_; }
    void upload(const std::vector<T>& h) {
        REQUIRE(h.size() == n_);
        rt::memcpy(p_, h.data(), n_ * sizeof(T));
    }
    std::vector<T> download() const {
        std::vector<T> h(n_);
        rt::memcpy(h.data(), p_, n_ * sizeof(T));
        return h;
    }
    // Fills every byte with 0xFF: NaN for floating types, -1 for integers, so unwritten output shows.
    void poison() {
        rt::memset_async(p_, 0xFF, n_ * sizeof(T), nullptr);
        rt::device_synchronize();
    }

private:
    std::size_t n_;
    T* p_;
};

// A large test size (over 10^5 elements), cut to about 10^5 under AddressSanitizer and to about 10^4
// under ThreadSanitizer: there a block's
// threads are OS threads and every access is instrumented, and races show at any size. The cut keeps
// n's remainder mod 100, so odd stays odd and multiples of 4 stay multiples of 4.
constexpr std::int64_t large(std::int64_t n) {
#if defined(TESSEL_TEST_UNDER_TSAN)
    return n > 100000 ? 10000 + n % 100 : n;
#elif defined(TESSEL_TEST_UNDER_ASAN)
    return n > 100000 ? 100000 + n % 100 : n;  // overruns show at the tails, at any size; 10^6 took minutes under ASan
#else
    return n;
#endif
}

// The step through a sweep of shapes: every shape, or under ThreadSanitizer every third, starting
// with the first. A barrier or a shared-memory race shows at any shape that runs the kernel's main
// loop; the sweep's tail coverage (each dimension below, at and past a tile) runs in the other presets.
constexpr std::size_t sweep_step() {
#if defined(TESSEL_TEST_UNDER_TSAN)
    return 3;
#else
    return 1;
#endif
}

// The cases of a numerical sweep to run: all of them, or under ThreadSanitizer every sweep_step()-th
// from the first. Such a sweep checks a kernel's arithmetic at its edges; the race check needs each
// path once (a list's picks should still reach its split, multi-block sizes).
template <class T>
std::vector<T> sweep_cases(std::initializer_list<T> cases) {
    std::vector<T> picked;
    std::size_t i = 0;
    for (const T& c : cases)
        if (i++ % sweep_step() == 0) picked.push_back(c);
    return picked;
}

// Kernels launched so far in this process: the sim counts them; on CUDA this is 0 and tests check
// launch counts only on the sim.
inline std::uint64_t launch_count() {
#if defined(TESSEL_BACKEND_SIM)
    return sim::launch_count();
#else
    return 0;
#endif
}
// The kernel launched last, demangled ("" on CUDA).
inline std::string last_kernel() {
#if defined(TESSEL_BACKEND_SIM)
    return sim::last_kernel_name();
#else
    return {};
#endif
}
// Of those, the launches in thread-block clusters (0 on CUDA as well).
inline std::uint64_t cluster_launch_count() {
#if defined(TESSEL_BACKEND_SIM)
    return sim::cluster_launch_count();
#else
    return 0;
#endif
}

// The message of the E (InvalidArgument unless said) that f throws, or "(no error)"; another
// exception propagates and fails the test.
template <class E = InvalidArgument, class F>
std::string message(F&& f) {
    try {
        f();
    } catch (const E& e) {
        return e.what();
    }
    return "(no error)";
}

inline double to_double(float v) { return v; }
inline double to_double(double v) { return v; }
inline double to_double(__half v) { return double(__half2float(v)); }
inline double to_double(__nv_bfloat16 v) { return double(__bfloat162float(v)); }
inline double to_double(int v) { return v; }
inline double to_double(unsigned v) { return v; }
inline double to_double(long long v) { return double(v); }
inline double to_double(unsigned long long v) { return double(v); }
inline double to_double(__nv_fp8_e4m3 v) { return double(float(v)); }
inline double to_double(__nv_fp8_e5m2 v) { return double(float(v)); }

template <class T>
T from_double(double v) {
    if constexpr (std::is_same_v<T, __half>) return __float2half(float(v));
    else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16(float(v));
    else if constexpr (std::is_same_v<T, __nv_fp8_e4m3> || std::is_same_v<T, __nv_fp8_e5m2>) return T(float(v));
    // Through int64, then modulo 2^bits: a value outside a narrow (or unsigned) type wraps, where the
    // direct conversion would be undefined (-fsanitize=float-cast-overflow).
    else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) return T(std::int64_t(v));
    else return T(v);
}

// Uniform values in [lo, hi) rounded to T, from a fixed seed so failures reproduce.
template <class T>
std::vector<T> random_vector(std::size_t n, std::uint64_t seed, double lo = -1.0, double hi = 1.0) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> d(lo, hi);
    std::vector<T> v(n);
    for (auto& x : v) x = from_double<T>(d(rng));
    return v;
}

// Checks |actual[i] - expected[i]| <= tol[i] for all i; NaN always fails. On failure, reports the
// count and the first few mismatches with their indices.
template <class T>
void check_close(const std::vector<T>& actual, const std::vector<double>& expected, const std::vector<double>& tol,
                 const std::string& what) {
    REQUIRE(actual.size() == expected.size());
    std::size_t bad = 0;
    std::ostringstream os;
    for (std::size_t i = 0; i < actual.size(); ++i) {
        const double a = to_double(actual[i]);
        const bool ok = std::isfinite(a) && std::fabs(a - expected[i]) <= tol[i];
        if (!ok) {
            if (bad < 8)
                os << "\n  [" << i << "] expected " << expected[i] << ", actual " << a << ", tolerance " << tol[i];
            ++bad;
        }
    }
    INFO(what << ": " << bad << " of " << actual.size() << " elements outside tolerance" << os.str());
    CHECK(bad == 0);
}

template <class T>
void check_equal(const std::vector<T>& actual, const std::vector<T>& expected, const std::string& what) {
    REQUIRE(actual.size() == expected.size());
    std::size_t bad = 0;
    std::ostringstream os;
    for (std::size_t i = 0; i < actual.size(); ++i)
        if (std::memcmp(&actual[i], &expected[i], sizeof(T)) != 0) {
            if (bad < 8) os << "\n  [" << i << "] expected " << expected[i] << ", actual " << actual[i];
            ++bad;
        }
    INFO(what << ": " << bad << " of " << actual.size() << " elements differ" << os.str());
    CHECK(bad == 0);
}

}  // namespace tessel::testing
