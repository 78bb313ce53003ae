// Element-wise map over flat arrays: out[i] = f(in0[i], in1[i], ...), grid-stride, any functor.
// A functor that composes several operations is a fused expression: one pass over memory. And the
// kernels behind Tensor's own methods: the fill of full() and ones(), the dtype conversion of
// to<U>(), and arange().
#pragma once

#include <cstddef>
#include <cstring>

#include <tessel/core/kernel.hpp>
#include <tessel/core/ptx.hpp>
#include <tessel/ops/promote.hpp>  // ops::cast: the conversion rules expressions use too

namespace tessel::kernels {

// budget: threads 256, registers 32, hot
template <class F, class Out, class... In>
__global__ void map(std::size_t n, F f, Out* __restrict__ out, const In*... in) {
    const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
    for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) out[i] = f(in[i]...);
}

// data[i] = value for i < n, where E is an unsigned integer of the element's size; V elements per
// 16-byte store (the host checks that data is 16-byte aligned when V > 1), the tail one by one.
// budget: threads 256, registers 32, hot
template <int V, class E>
__global__ void fill(E* __restrict__ data, std::size_t n, E value) {
    struct alignas(sizeof(E) * V) Vector {
        E v[V];
    };
    Vector pattern;
    for (int k = 0; k < V; ++k) pattern.v[k] = value;
    const std::size_t stride = std::size_t(gridDim.x) * blockDim.x, first = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
    const std::size_t vectors = n / V;
    for (std::size_t i = first; i < vectors; i += stride) reinterpret_cast<Vector*>(data)[i] = pattern;
    for (std::size_t i = vectors * V + first; i < n; i += stride) data[i] = value;
}

// dst[i] = cast<To>(src[i]) for i < n: V elements per access, V chosen by the host so that the
// narrower type moves 16 bytes (the wider one 16 bytes per instruction too, in several), both
// pointers aligned to their vector (checked by the host when V > 1); the tail one by one.
template <int V, class From, class To>
__device__ __forceinline__ void convert_elements(const From* __restrict__ src, To* __restrict__ dst, std::size_t n) {
    struct alignas(sizeof(From) * V) In {
        From v[V];
    };
    struct alignas(sizeof(To) * V) Out {
        To v[V];
    };
    const std::size_t stride = std::size_t(gridDim.x) * blockDim.x, first = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
    const std::size_t vectors = n / V;
    for (std::size_t i = first; i < vectors; i += stride) {
        const In in = reinterpret_cast<const In*>(src)[i];
        Out out;
#pragma unroll
        for (int k = 0; k < V; ++k) out.v[k] = ops::cast<To>(in.v[k]);
        reinterpret_cast<Out*>(dst)[i] = out;
    }
    for (std::size_t i = vectors * V + first; i < n; i += stride) dst[i] = ops::cast<To>(src[i]);
}

// to<U>() between any two dtypes but the truncating integer ones below.
// budget: threads 256, registers 48, hot, wide
template <int V, class From, class To>
__global__ void convert(const From* __restrict__ src, To* __restrict__ dst, std::size_t n) {
    convert_elements<V>(src, dst, n);
}

// Integer to narrower integer (int64 -> int32, int8, uint8; int32 -> int8, uint8): the same loop,
// but ptxas loads only the low bytes each element keeps (int64 -> int32: 4-byte loads 8 bytes
// apart, from a 16-byte load in the source and in the PTX alike), so its loads are not 16 bytes
// wide: the same DRAM sectors, more load instructions.
// budget: threads 256, registers 48, hot
template <int V, class From, class To>
__global__ void convert_truncating(const From* __restrict__ src, To* __restrict__ dst, std::size_t n) {
    convert_elements<V>(src, dst, n);
}

// out[i] = cast<T>(start + i * step) for i < n, as one fused multiply-add rounded once (which IEEE
// defines exactly, so the host's std::fma gives the same values whatever a compiler contracts), or
// for int64 with whole start and step in integers (exact beyond 2^53); V elements per 16-byte store
// when the host found `out` aligned, the tail one by one.
// budget: threads 256, registers 40, hot
template <int V, class T>
__global__ void arange(T* __restrict__ out, std::size_t n, double start, double step) {
    struct alignas(sizeof(T) * V) Vector {
        T v[V];
    };
    const bool integers = std::is_same_v<T, std::int64_t> && ::tessel::detail::arange_in_integers(start, step);
    auto value = [&](std::size_t i) {
        if constexpr (std::is_same_v<T, std::int64_t>)
            if (integers) return ::tessel::detail::arange_integer(i, start, step);
        return ops::cast<T>(__fma_rn(double(i), step, start));
    };
    const std::size_t stride = std::size_t(gridDim.x) * blockDim.x, first = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
    const std::size_t vectors = n / V;
    for (std::size_t i = first; i < vectors; i += stride) {
        Vector values;
#pragma unroll
        for (int k = 0; k < V; ++k) values.v[k] = value(i * V + std::size_t(k));
        reinterpret_cast<Vector*>(out)[i] = values;
    }
    for (std::size_t i = vectors * V + first; i < n; i += stride) out[i] = value(i);
}

}  // namespace tessel::kernels
