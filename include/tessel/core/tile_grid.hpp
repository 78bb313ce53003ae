// The launch grid of a tiled matrix kernel: column tiles along x, row tiles along y, batch entries
// along z. y and z hold at most 65535, so taller or longer problems have each block walk the rest
// (the kernels loop over row tiles and batches by gridDim.y and gridDim.z). And the order in which
// a kernel's blocks take their tiles (grouped_tile).
#pragma once

#include "kernel.hpp"

#include <cstdint>

namespace tessel {

inline dim3 tile_grid(std::int64_t m, std::int64_t n, std::int64_t batches, int tile_m, int tile_n) {
    auto clamp = [](std::int64_t x) { return unsigned(x < 1 ? 1 : x > 65535 ? 65535 : x); };
    return dim3(unsigned((n + tile_n - 1) / tile_n), clamp((m + tile_m - 1) / tile_m), clamp(batches));
}

// The tile of the grid's position (x, y) that block (x, y) computes. Blocks start roughly in launch
// order (x fastest), so in the plain order a wave of resident blocks covers a few whole rows of
// tiles, and every slab of B's column panels is fetched for each few rows. Groups of `group` row
// tiles (CUTLASS's threadblock swizzle, Triton's GROUP_SIZE_M) have consecutive blocks walk down a
// group's rows before moving one column tile right: at 128 x 128 tiles an H200 wave (264 blocks)
// of an 8192-wide product covers 8 x 33 tiles, not 4 rows of 64 and 8 more: per k-step it reads 41
// distinct slabs of A and B instead of 69 for the same 264 block tiles. A permutation of the
// grid's positions (each is taken once), so the kernels' loops over further row tiles and batches
// stay as they are. 32-bit: the
// position within a group is below group * grid_x. mma_matmul takes its tiles in this order;
// simt_matmul keeps the plain one: at its FMA rate even the plain order's traffic is no limit (an
// 8192^3 fp32 product, 1 or 2 blocks per SM, reads B's 256 MB 16 to 31 times: 0.9 to 1.7 ms of an
// H200's bandwidth spread over about 20 ms of FMAs), and in its 128-register variant the
// remapping made ptxas spill 56 bytes.
struct GridTile {
    int col, row;  // the tile's index along x (column tiles) and along y (row tiles)
};
__host__ __device__ inline GridTile grouped_tile(unsigned x, unsigned y, unsigned grid_x, unsigned grid_y, unsigned group) {
    const unsigned first = y / group * group, rows = grid_y - first < group ? grid_y - first : group;
    const unsigned within = (y - first) * grid_x + x;  // position in the group's run of blocks
    return {int(within / rows), int(first + within % rows)};
}

// Row tiles per group in the matrix kernels' launch order (grouped_tile).
inline constexpr unsigned tile_group_rows = 8;

}  // namespace tessel
