// tessel-info --bandwidth [MiB]: copy bandwidth as CUDA's bandwidthTest measures it: host to device
// and device to host from pinned and from pageable memory, and device to device (bytes read plus
// written, as bandwidthTest counts them), each the median of 5 event-timed copies after a warm-up,
// per device. On the sim the figures are the CPU's memcpy.
#pragma once

#include <tessel/memory/allocator.hpp>
#include <tessel/runtime/rt.hpp>
#include <tessel/stream/stream.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

namespace info {

// Median GB/s (1e9 bytes/s) of `bytes_counted` per call of copy() on stream s.
template <class F>
double copy_gbs(const tessel::Stream& s, double bytes_counted, F&& copy) {
    tessel::Event start, stop;
    copy();
    s.synchronize();
    std::vector<double> gbs;
    for (int i = 0; i < 5; ++i) {
        start.record(s);
        copy();
        stop.record(s);
        stop.synchronize();
        gbs.push_back(bytes_counted / (double(start.elapsed_ms(stop)) * 1e-3) / 1e9);
    }
    std::nth_element(gbs.begin(), gbs.begin() + 2, gbs.end());
    return gbs[2];
}

inline void print_bandwidth(std::size_t mib) {
    const std::size_t bytes = mib << 20;
    std::printf("copy bandwidth, %zu MiB per copy, median of 5 (GB/s = 1e9 bytes/s)\n", mib);
    std::printf("%-4s %12s %12s %14s %14s %12s\n", "dev", "H2D pinned", "D2H pinned", "H2D pageable", "D2H pageable", "D2D");
    for (int d = 0; d < tessel::device_count(); ++d) {
        tessel::DeviceGuard guard(tessel::Device{d});
        const tessel::Stream s = tessel::Stream::create();
        void* dev_a = tessel::memory::allocate(bytes, s.handle());
        void* dev_b = tessel::memory::allocate(bytes, s.handle());
        void* pinned = tessel::memory::allocate_host(bytes);
        std::vector<unsigned char> pageable(bytes, 1);
        std::memset(pinned, 1, bytes);
        tessel::rt::memset_async(dev_a, 1, bytes, s.handle());
        const double b = double(bytes);
        const double h2d = copy_gbs(s, b, [&] { tessel::rt::memcpy_async(dev_a, pinned, bytes, s.handle()); });
        const double d2h = copy_gbs(s, b, [&] { tessel::rt::memcpy_async(pinned, dev_a, bytes, s.handle()); });
        const double h2d_pageable = copy_gbs(s, b, [&] { tessel::rt::memcpy_async(dev_a, pageable.data(), bytes, s.handle()); });
        const double d2h_pageable = copy_gbs(s, b, [&] { tessel::rt::memcpy_async(pageable.data(), dev_a, bytes, s.handle()); });
        const double d2d = copy_gbs(s, 2 * b, [&] { tessel::rt::memcpy_async(dev_b, dev_a, bytes, s.handle()); });
        s.synchronize();
        tessel::memory::deallocate(dev_a);
        tessel::memory::deallocate(dev_b);
        tessel::memory::deallocate_host(pinned);
        std::printf("%-4d %12.1f %12.1f %14.1f %14.1f %12.1f\n", d, h2d, d2h, h2d_pageable, d2h_pageable, d2d);
    }
}

}  // namespace info
