// Grid-stride loops that keep several loads in flight per thread: a thread's indices first,
// first + stride, ... below n are taken U at a time, every load of a step issued before the first
// store, so a thread has U loads in flight where a plain loop waits for each one before the next.
#pragma once

#include <tessel/core/kernel.hpp>

namespace tessel {

// store(i, load(i)) for i = first, first + stride, ... < n: U whole steps without guards, then the
// remaining indices one at a time. I is unsigned and n + (U - 1) * stride fits in it (the 32-bit
// index variants take n below 2^31).
template <int U, class I, class Load, class Store>
__device__ inline void grid_stride_unrolled(I first, I stride, I n, Load&& load, Store&& store) {
    using R = decltype(load(first));
    I i = first;
    for (; i + I(U - 1) * stride < n; i += I(U) * stride) {
        R r[U];
#pragma unroll
        for (int u = 0; u < U; ++u) r[u] = load(i + I(u) * stride);
#pragma unroll
        for (int u = 0; u < U; ++u) store(i + I(u) * stride, r[u]);
    }
    for (; i < n; i += stride) store(i, load(i));
}

}  // namespace tessel
