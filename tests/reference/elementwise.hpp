// Host references for element-wise tests: iteration over every index of a shape and NumPy-style
// broadcast reads from host tensors, in double precision.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

#include <tessel/tensor/tensor.hpp>

namespace tessel::reference {

// Calls f(index) for every index of `shape` in row-major order (once for rank 0).
template <class F>
void for_each_index(const Shape& shape, F&& f) {
    std::vector<std::int64_t> idx(std::size_t(shape.size()), 0);
    for (std::int64_t d : shape)
        if (d == 0) return;
    while (true) {
        f(idx);
        int d = shape.size() - 1;
        for (; d >= 0; --d) {
            if (++idx[std::size_t(d)] < shape[d]) break;
            idx[std::size_t(d)] = 0;
        }
        if (d < 0) return;
    }
}

// The element of host tensor h seen at `index` of a broadcast shape (right-aligned; size-1 dims repeat).
template <class T>
T at(const Tensor<T>& h, const std::vector<std::int64_t>& index) {
    std::array<std::int64_t, max_rank> idx{};
    const int r = h.dim(), extra = int(index.size()) - r;
    for (int d = 0; d < r; ++d) idx[std::size_t(d)] = h.shape()[d] == 1 ? 0 : index[std::size_t(d + extra)];
    const T* base = static_cast<const T*>(h.storage()->data());
    return base[h.layout().offset_of(std::span<const std::int64_t>(idx.data(), std::size_t(r)))];
}

// The raw bytes of a tensor's elements in row-major order (reads bool outputs without assuming 0/1).
template <class T>
std::vector<unsigned char> bytes_of(const Tensor<T>& t) {
    const Tensor<T> h = t.to_host();
    std::vector<unsigned char> b(std::size_t(h.numel()) * sizeof(T));
    if (!b.empty()) std::memcpy(b.data(), h.data(), b.size());
    return b;
}

}  // namespace tessel::reference
