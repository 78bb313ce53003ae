// What memory::snapshot() returns: every segment of the device allocators with its blocks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <driver_types.h>  // cudaStream_t (types only)

namespace tessel::memory {

// One block of a snapshot (snapshot()): where it is and what state it is in.
struct BlockInfo {
    std::size_t size = 0, requested = 0;
    bool allocated = false, active = false;  // active: allocated, or waiting for other streams
};
// One segment (one cudaMalloc) of a snapshot, with its blocks in address order.
struct SegmentInfo {
    int device = 0;
    std::uintptr_t address = 0;
    std::size_t total_size = 0, allocated_size = 0, active_size = 0;
    cudaStream_t stream = nullptr;
    bool small_pool = false;
    std::vector<BlockInfo> blocks;
};

}  // namespace tessel::memory
