// tessel header-only (neither TESSEL_SEPARATE_RUNTIME nor the runtime library): two translation
// units of one program each compile the whole runtime inline; they must link (no duplicate
// definitions), share one runtime (a tensor made in one is used by the other) and compute right.
#include <cmath>
#include <cstdio>
#include <limits>

#include <tessel/tessel.hpp>

// In other.cpp: sum(a * b) as double, through the other translation unit's copy of the runtime.
double fused_dot(const tessel::Tensor<float>& a, const tessel::Tensor<float>& b);

int main() {
    using namespace tessel;
    if (!is_available()) return 77;
    const int n = 1001;  // not a multiple of any block or vector width
    auto a = arange<float>(0, n), b = full<float>({n}, 0.5f);
    auto c = full<float>({n}, std::numeric_limits<float>::quiet_NaN());  // poisoned: an unwritten element fails
    (c = a * b + 1).run();
    const auto got = c.to_vector();
    int bad = 0;
    for (int i = 0; i < n; ++i) {
        const double want = double(i) * 0.5 + 1.0;  // exact in float for these values
        if (!(got[std::size_t(i)] == want) && bad++ < 5) std::printf("c[%d] = %g, expected %g\n", i, double(got[std::size_t(i)]), want);
    }
    const double dot = fused_dot(a, b), want_dot = 0.5 * double(n - 1) * n / 2;
    // float accumulation of n <= 1001 terms of size <= 500: a relative error of 1e-5 covers it.
    if (!(std::abs(dot - want_dot) <= 1e-5 * want_dot)) {
        std::printf("sum(a * b) = %.9g, expected %.9g\n", dot, want_dot);
        ++bad;
    }
    if (!memory::check_invariants().empty()) {
        std::printf("allocator invariants broken: %s\n", memory::check_invariants().front().c_str());
        ++bad;
    }
    std::printf("header-only program: %s\n", bad ? "FAILED" : "ok");
    return bad ? 1 : 0;
}
