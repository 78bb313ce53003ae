// Random test inputs: the same values as a device tensor and as a host tensor (apply the same views
// to both; the host one feeds the reference), and poisoning of the cache block an op's output will take.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include <tessel/ops/promote.hpp>
#include <tessel/tensor/tensor.hpp>

#include "device_array.hpp"

namespace tessel::testing {

// n values uniform in [lo, hi) from a fixed seed: floored for integer types; for bool, whether the
// value is above the middle of the range.
template <class T>
tessel::detail::HostArray<T> random_host(std::size_t n, std::uint64_t seed, double lo = -1.0, double hi = 1.0) {
    const auto r = random_vector<double>(n, seed, lo, hi);
    tessel::detail::HostArray<T> v(n);
    for (std::size_t i = 0; i < n; ++i) {
        if constexpr (std::is_same_v<T, bool>) v.data()[i] = r[i] > (lo + hi) / 2;
        else v.data()[i] = ops::cast<T>(std::is_integral_v<T> ? std::floor(r[i]) : r[i]);
    }
    return v;
}

// A device tensor and a host tensor holding the same values.
template <class T>
struct TensorPair {
    Tensor<T> dev;   // what the op reads
    Tensor<T> host;  // the same values (and views) on the host, for the reference
};
template <class T>
TensorPair<T> random_pair(const Shape& s, std::uint64_t seed, double lo = -1.0, double hi = 1.0) {
    auto v = random_host<T>(std::size_t(Layout::contiguous(s).numel()), seed, lo, hi);
    return {from_host<T>(v.span(), s), from_host<T>(v.span(), s, {.space = MemorySpace::host})};
}

// Fills a freed block of exactly `s`'s size with `byte` (0xFF: NaN, -1, a bad bool) at the front of
// the cache, so an op that allocates its output of that shape next gets it and an unwritten element shows.
template <class T>
void poison_next(const Shape& s, int byte = 0xFF) {
    Tensor<T> p = empty<T>(s);
    rt::memset_async(p.data(), byte, std::size_t(p.numel()) * sizeof(T), current_stream(p.device()).handle());
}
// The same for the next several allocations, held at once so that each takes a block of its own: an
// op that copies an input first (a strided weight) allocates that copy before its output.
template <class T>
void poison_next_all(const std::vector<Shape>& shapes, int byte = 0xFF) {
    std::vector<Tensor<T>> held;
    for (const Shape& s : shapes) {
        held.push_back(empty<T>(s));
        rt::memset_async(held.back().data(), byte, std::size_t(held.back().numel()) * sizeof(T), current_stream(held.back().device()).handle());
    }
}

}  // namespace tessel::testing
