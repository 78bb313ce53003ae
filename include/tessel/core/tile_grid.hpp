// The launch grid of a tiled matrix kernel: column tiles along x, row tiles along y, batch entries
// along z. y and z hold at most 65535, so taller or longer problems have each block walk the rest
// (the kernels loop over row tiles and batches by gridDim.y and gridDim.z).
#pragma once

#include <vector_types.h>

#include <cstdint>

namespace tessel {

inline dim3 tile_grid(std::int64_t m, std::int64_t n, std::int64_t batches, int tile_m, int tile_n) {
    auto clamp = [](std::int64_t x) { return unsigned(x < 1 ? 1 : x > 65535 ? 65535 : x); };
    return dim3(unsigned((n + tile_n - 1) / tile_n), clamp((m + tile_m - 1) / tile_m), clamp(batches));
}

}  // namespace tessel
