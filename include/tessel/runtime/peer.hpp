// Peer access between devices (NVLink or PCIe peer-to-peer): whether device a can read and write
// device b's memory directly, enabling it (idempotent), and copying between devices: direct where
// access is enabled, staged through host memory by the driver where it is not (copy_between). On
// the sim every pair of simulated devices can (TESSEL_SIM_PEER=0 makes them unable, to test the
// other path), and sim::peer_copy_count()/staged_copy_count() say which a copy took.
#pragma once

#include <cstddef>

#include "../core/error.hpp"
#include "../memory/allocator.hpp"
#include "device.hpp"
#include "rt.hpp"

namespace tessel {

// Whether device a can access device b's memory directly (false for a == b: nothing to enable).
inline bool can_access_peer(Device a, Device b) {
    int can = 0;
    TESSEL_CUDA_CHECK(rt::api::cudaDeviceCanAccessPeer(&can, a.index, b.index));
    return can != 0;
}

namespace detail {
// Under backend:async, lets device a read and write the memory of device b's pool (tessel's
// allocations there): cudaDeviceEnablePeerAccess does not reach pool memory, whose accessibility is
// the pool's own (cudaMemPoolSetAccess). Idempotent.
inline void grant_pool_access(Device a, Device b) {
    if (memory::backend() != memory::Backend::async) return;
    cudaMemPool_t pool = nullptr;
    TESSEL_CUDA_CHECK(rt::api::cudaDeviceGetDefaultMemPool(&pool, b.index));
    cudaMemAccessDesc access{};
    access.location.type = cudaMemLocationTypeDevice;
    access.location.id = a.index;
    access.flags = cudaMemAccessFlagsProtReadWrite;
    TESSEL_CUDA_CHECK(rt::api::cudaMemPoolSetAccess(pool, &access, 1));
}
}  // namespace detail

// Lets kernels and copies on device a access device b's memory directly (under backend:async, its
// pool's memory too); no effect if already enabled or a == b. Unsupported, naming both, when the
// pair cannot (no NVLink, no PCIe P2P).
inline void enable_peer_access(Device a, Device b) {
    detail::require_device(a);  // before the a == b shortcut: device 9 of 2 is an error even paired with itself
    detail::require_device(b);
    if (a.index == b.index) return;
    if (!can_access_peer(a, b))
        fail<Unsupported>("enable_peer_access: device ", a.index, " cannot access device ", b.index,
                          "'s memory directly (no NVLink or PCIe peer-to-peer between them); copies between them are staged "
                          "through host memory");
    DeviceGuard guard(a);
    const cudaError_t e = rt::api::cudaDeviceEnablePeerAccess(b.index, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled) (void)rt::api::cudaGetLastError();  // by tessel or by the program itself
    else rt::check(e, "cudaDeviceEnablePeerAccess");
    detail::grant_pool_access(a, b);
}

// Enables access in both directions for every pair of devices that can; returns how many
// directions it enabled (or found enabled).
inline int enable_all_peer_access() {
    int enabled = 0;
    for (int a = 0; a < device_count(); ++a)
        for (int b = 0; b < device_count(); ++b)
            if (a != b && can_access_peer(Device{a}, Device{b})) enable_peer_access(Device{a}, Device{b}), ++enabled;
    return enabled;
}

// Copies `bytes` from device `src_device`'s memory to device `dst_device`'s, ordered on `stream`
// (of either device): cudaMemcpyPeerAsync, direct where peer access is enabled, staged by the driver
// otherwise. Raw pointers, as cudaMemcpyPeerAsync takes them: that both ranges lie in their
// allocations is the caller's to know (Tensor::to(device) and copy_ check shapes themselves).
inline void copy_between(void* dst, Device dst_device, const void* src, Device src_device, std::size_t bytes, rt::stream_t stream) {
    TESSEL_CUDA_CHECK(rt::api::cudaMemcpyPeerAsync(dst, dst_device.index, src, src_device.index, bytes, stream));
}

}  // namespace tessel
