// tessel::launch: the one way a kernel is launched, in both backends, always checked.
//   tessel::launch(kernel, grid, block, dynamic_smem_bytes, stream, args...);
// Launch-configuration errors throw CudaError at once (as cudaGetLastError would report them);
// faults while the kernel runs surface at the next synchronisation of its stream, as on a GPU.
#pragma once

#include <cstddef>
#include <memory>
#include <source_location>
#include <string>
#include <tuple>
#include <type_traits>

#include "../core/kernel.hpp"
#include "rt.hpp"

namespace tessel {

// A grid shape that remembers where the launch was written, for error messages.
struct GridDim {
    dim3 dims;
    std::source_location site;
    GridDim(dim3 d, std::source_location s = std::source_location::current()) : dims(d), site(s) {}
    GridDim(unsigned x, std::source_location s = std::source_location::current()) : dims(x), site(s) {}
};

namespace detail {
inline std::string site_string(const std::source_location& s) {
    return std::string(s.file_name()) + ":" + std::to_string(s.line());
}

#if defined(TESSEL_BACKEND_SIM)
// A queued sim launch: the kernel and a copy of its arguments, alive until the grid has run.
template <class... P>
struct SimKernelCall final : sim::LaunchSpec {
    void (*fn)(P...);
    std::tuple<std::decay_t<P>...> params;
    template <class... A>
    explicit SimKernelCall(void (*f)(P...), A&&... a) : fn(f), params(std::forward<A>(a)...) {
        invoke = &SimKernelCall::run;
        args = this;
    }
    static void run(const void* self) {
        const auto* c = static_cast<const SimKernelCall*>(self);
        std::apply(c->fn, c->params);  // each CUDA thread gets its own copy of the parameters
    }
};
#endif
}  // namespace detail

template <class... P, class... A>
void launch(void (*kernel)(P...), GridDim grid, dim3 block, std::size_t dynamic_smem, rt::stream_t stream, A&&... args) {
    static_assert(sizeof...(P) == sizeof...(A), "tessel::launch: the number of arguments does not match the kernel's parameters");
    static_assert((std::is_convertible_v<A&&, P> && ...), "tessel::launch: an argument does not convert to the kernel's parameter type");
#if defined(TESSEL_BACKEND_SIM)
    auto call = std::make_shared<detail::SimKernelCall<P...>>(kernel, std::forward<A>(args)...);
    call->launch_site = detail::site_string(grid.site);
    rt::check(sim::api::launch_kernel(reinterpret_cast<const void*>(kernel), grid.dims, block, dynamic_smem, stream, call),
              "tessel::launch", grid.site);
#else
    kernel<<<grid.dims, block, dynamic_smem, stream>>>(P(std::forward<A>(args))...);
    rt::check(cudaGetLastError(), "tessel::launch", grid.site);
#endif
}

// Blocks needed to cover n items with `per_block` each.
constexpr unsigned blocks_for(std::size_t n, unsigned per_block) { return unsigned((n + per_block - 1) / per_block); }

}  // namespace tessel
