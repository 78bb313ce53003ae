// Benchmark inputs: random values generated on the device with tessel's Philox fill, so large GPU
// inputs (1 GiB and more) cost milliseconds to make, and never zeros.
#pragma once

#include <tessel/ops/random.hpp>

namespace tessel::bench {

// Uniform values in [lo, hi) of the given shape, from stream `seed`.
template <Element T>
Tensor<T> random_tensor(const Shape& shape, std::uint64_t seed, double lo = -1.0, double hi = 1.0) {
    return Philox(seed).uniform<T>(shape, lo, hi);
}

}  // namespace tessel::bench
