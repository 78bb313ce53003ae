// tessel::launch: the one way a kernel is launched, in both backends, always checked.
//   tessel::launch(kernel, grid, block, dynamic_smem_bytes, stream, args...);
// Launch-configuration errors throw CudaError at once (as cudaGetLastError would report them);
// faults while the kernel runs surface at the next synchronisation of its stream, as on a GPU.
#pragma once

#include <cstddef>
#include <cstring>
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
        std::apply([this](const auto&... p) {
            int i = 0;
            (note_pointer(i++, p), ...);
        }, params);
    }
    template <class X>
    void note_pointer(int position, const X& x) {
        if constexpr (std::is_pointer_v<X> && !std::is_function_v<std::remove_pointer_t<X>>) {
            if (x) pointer_args.push_back({position, -1, const_cast<const void*>(static_cast<const volatile void*>(x))});
        } else if constexpr (std::is_class_v<X> && std::has_unique_object_representations_v<X> && alignof(X) >= alignof(void*)) {
            // A parameter structure: its fields are not known here, so every pointer-aligned word that
            // is not zero is a candidate (the sim's check skips values that point into no allocation).
            // Only structures without padding: padding bytes are whatever the stack held (a stale
            // pointer among them would fail a correct launch), and the trait rules them out.
            const auto* bytes = reinterpret_cast<const unsigned char*>(&x);
            for (std::size_t at = 0; at + sizeof(void*) <= sizeof(X); at += alignof(void*)) {
                const void* p = nullptr;
                std::memcpy(&p, bytes + at, sizeof p);
                if (p) pointer_args.push_back({position, int(at), p});
            }
        }
    }
    static void run(const void* self) {
        const auto* c = static_cast<const SimKernelCall*>(self);
        std::apply(c->fn, c->params);  // each CUDA thread gets its own copy of the parameters
    }
};

// The part of a sim launch that does not depend on the kernel's parameters: compiled once per file,
// not once per kernel (a third of each launch's code in the sim). `cluster` null: a plain launch,
// which then checks the last error as cudaGetLastError after <<<>>> would.
inline void sim_launch(const void* kernel, const GridDim& grid, dim3 block, std::size_t dynamic_smem, rt::stream_t stream,
                       std::shared_ptr<sim::LaunchSpec> call, const char* what, const dim3* cluster = nullptr) {
    call->launch_file = grid.site.file_name();
    call->launch_line = grid.site.line();
    if (cluster) {
        rt::check(sim::api::launch_kernel(kernel, grid.dims, block, dynamic_smem, stream, std::move(call), *cluster), what, grid.site);
        return;
    }
    rt::check(sim::api::launch_kernel(kernel, grid.dims, block, dynamic_smem, stream, std::move(call)), what, grid.site);
    // As cudaGetLastError after <<<>>> on CUDA: an error some earlier call left behind (a query's
    // NotReady not cleared) fails here, so the sim shows what the GPU would.
    rt::check(sim::api::cudaGetLastError(), what, grid.site);
}
#endif
}  // namespace detail

template <class... P, class... A>
void launch(void (*kernel)(P...), GridDim grid, dim3 block, std::size_t dynamic_smem, rt::stream_t stream, A&&... args) {
    static_assert(sizeof...(P) == sizeof...(A), "tessel::launch: the number of arguments does not match the kernel's parameters");
    static_assert((std::is_convertible_v<A&&, P> && ...), "tessel::launch: an argument does not convert to the kernel's parameter type");
#if defined(TESSEL_BACKEND_SIM)
    detail::sim_launch(reinterpret_cast<const void*>(kernel), grid, block, dynamic_smem, stream,
                       std::make_shared<detail::SimKernelCall<P...>>(kernel, std::forward<A>(args)...), "tessel::launch");
#else
    kernel<<<grid.dims, block, dynamic_smem, stream>>>(P(std::forward<A>(args))...);
    rt::check(cudaGetLastError(), "tessel::launch", grid.site);
#endif
}

// A launch in thread-block clusters of `cluster` blocks (sm_90; at most 8 blocks, the portable size):
// the blocks of a cluster run at the same time and may sync and read each other's shared memory
// (cooperative_groups::this_cluster()). The grid must be a whole number of clusters.
template <class... P, class... A>
void launch_cluster(void (*kernel)(P...), GridDim grid, dim3 block, dim3 cluster, std::size_t dynamic_smem, rt::stream_t stream,
                    A&&... args) {
    static_assert(sizeof...(P) == sizeof...(A), "tessel::launch_cluster: the number of arguments does not match the kernel's parameters");
    static_assert((std::is_convertible_v<A&&, P> && ...), "tessel::launch_cluster: an argument does not convert to the kernel's parameter type");
#if defined(TESSEL_BACKEND_SIM)
    detail::sim_launch(reinterpret_cast<const void*>(kernel), grid, block, dynamic_smem, stream,
                       std::make_shared<detail::SimKernelCall<P...>>(kernel, std::forward<A>(args)...), "tessel::launch_cluster", &cluster);
#else
    cudaLaunchConfig_t config{};
    config.gridDim = grid.dims;
    config.blockDim = block;
    config.dynamicSmemBytes = dynamic_smem;
    config.stream = stream;
    cudaLaunchAttribute attribute[1];
    attribute[0].id = cudaLaunchAttributeClusterDimension;
    attribute[0].val.clusterDim.x = cluster.x;
    attribute[0].val.clusterDim.y = cluster.y;
    attribute[0].val.clusterDim.z = cluster.z;
    config.attrs = attribute;
    config.numAttrs = 1;
    rt::check(cudaLaunchKernelEx(&config, kernel, P(std::forward<A>(args))...), "tessel::launch_cluster", grid.site);
#endif
}

// Blocks needed to cover n items with `per_block` each.
constexpr unsigned blocks_for(std::size_t n, unsigned per_block) { return unsigned((n + per_block - 1) / per_block); }

}  // namespace tessel
