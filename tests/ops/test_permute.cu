// contiguous() of strided device views runs one kernel (tiled transpose or strided gather) and
// reproduces the view's elements exactly, for 1-, 2-, 4- and 8-byte elements, on odd shapes that
// leave partial tiles; the output's cache block is poisoned first.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <functional>
#include <set>
#include <vector>

#include <tessel/kernels/permute.cuh>
#include <tessel/ops/copy.hpp>

#include "../reference/elementwise.hpp"
#include "../support/random_tensor.hpp"

using namespace tessel;

namespace {

// Random values of [-100, 100): int8 ones hit the 0xFF poison (-1) once in 200, where [-1, 1)
// would give only -1 and 0 and leave half the unwritten elements unseen.
template <class T>
testing::TensorPair<T> values(const Shape& s, std::uint64_t seed) {
    return testing::random_pair<T>(s, seed, -100, 100);
}

// dev and host carry the same view; contiguous() of the device one must equal the host one's
// elements in row-major order, bit for bit, in one launch.
template <class T>
void check_view(const std::string& what, const Tensor<T>& dev, const Tensor<T>& host) {
    INFO(what << ": shape " << dev.shape().to_string() << " strides " << dev.strides().to_string());
    REQUIRE_FALSE(dev.is_contiguous());
    testing::poison_next<T>(dev.shape());  // the block contiguous() will take
    const auto before = testing::launch_count();
    const Tensor<T> got = dev.contiguous();
    if (backend == Backend::sim) CHECK(testing::launch_count() - before == 1);
    REQUIRE(got.is_contiguous());
    const Tensor<T> h = got.to_host();
    std::size_t i = 0, bad = 0;
    reference::for_each_index(dev.shape(), [&](const std::vector<std::int64_t>& idx) {
        const T want = reference::at(host, idx);
        bad += std::memcmp(&want, h.data() + i++, sizeof(T)) != 0;
    });
    CHECK(bad == 0);
    // Straight to the host: gathered on the device (one launch, then one copy of its elements)
    // unless it spans fewer elements than it has (a broadcast view: its span is copied and repeated).
    const auto extent = *dev.layout().extent();
    const bool spans_all = extent.highest - extent.lowest + 1 >= dev.numel();
    const auto before_host = testing::launch_count();
    const Tensor<T> direct = dev.to_host();
    if (backend == Backend::sim) CHECK(testing::launch_count() - before_host == (spans_all ? 1u : 0u));
    REQUIRE(direct.numel() == h.numel());
    CHECK(std::memcmp(direct.data(), h.data(), std::size_t(h.numel()) * sizeof(T)) == 0);
}

}  // namespace

#ifndef TESSEL_TEST_UNDER_TSAN  // [slow_under_tsan]: not built under ThreadSanitizer (tests/CMakeLists.txt)
TEMPLATE_TEST_CASE("contiguous() of permuted, sliced and broadcast device views", "[ops][permute][slow_under_tsan]", std::int8_t, __half, float,
                   double) {
    using T = TestType;
    {
        auto [d, h] = values<T>({33, 31}, 1);
        check_view("2-d transpose", d.transpose(0, 1), h.transpose(0, 1));
    }
    {
        auto [d, h] = values<T>({1003, 1001}, 2);
        check_view("large 2-d transpose", d.transpose(0, 1), h.transpose(0, 1));
    }
    {
        auto [d, h] = values<T>({3, 33, 65}, 3);
        check_view("batched transpose", d.permute({0, 2, 1}), h.permute({0, 2, 1}));
    }
    {
        auto [d, h] = values<T>({2, 3, 5, 7}, 4);
        check_view("4-d permutation", d.permute({3, 1, 0, 2}), h.permute({3, 1, 0, 2}));
        check_view("4-d permutation, fastest dim kept", d.permute({2, 0, 1, 3}), h.permute({2, 0, 1, 3}));
    }
    {
        auto [d, h] = values<T>({40, 66}, 5);
        check_view("stepped slice, transposed", d.slice(1, 1, 66, 2).transpose(0, 1), h.slice(1, 1, 66, 2).transpose(0, 1));
        check_view("stepped slice (no dim of stride 1)", d.slice(1, 0, 66, 3), h.slice(1, 0, 66, 3));
    }
    {
        auto [d, h] = values<T>({1, 33}, 6);
        check_view("broadcast rows", d.expand({31, 33}), h.expand({31, 33}));
        check_view("broadcast, transposed", d.expand({31, 33}).transpose(0, 1), h.expand({31, 33}).transpose(0, 1));
    }
}
#endif  // TESSEL_TEST_UNDER_TSAN

// The tiled transpose moves 16-byte chunks where every row on both sides is aligned to them, and
// 4-byte chunks of 1- and 2-byte elements where rows are aligned to those; partial tiles and
// partial chunks at the edges still occur.
TEMPLATE_TEST_CASE("contiguous() of transposes whose rows allow chunked access", "[ops][permute]", std::int8_t, __half, float, double) {
    using T = TestType;
    {
        auto [d, h] = values<T>({80, 48}, 8);  // rows of 16k elements: 16-byte chunks for every type
        check_view("aligned 2-d transpose", d.transpose(0, 1), h.transpose(0, 1));
    }
    {
        auto [d, h] = values<T>({144, 160}, 17);  // whole tiles and partial ones
        check_view("aligned 2-d transpose, whole tiles", d.transpose(0, 1), h.transpose(0, 1));
    }
    {
        auto [d, h] = values<T>({80, 64}, 9);  // 50 = 3 * 16 + 2: a partial chunk ends each input row
        check_view("aligned rows, partial chunks", d.slice(1, 0, 50).transpose(0, 1), h.slice(1, 0, 50).transpose(0, 1));
    }
    {
        auto [d, h] = values<T>({132, 136}, 10);  // rows of 4k elements: 4-byte chunks for int8 and half
        check_view("rows aligned to 4 elements", d.transpose(0, 1), h.transpose(0, 1));
    }
    {
        auto [d, h] = values<T>({3, 80, 48}, 11);
        check_view("aligned batched transpose", d.permute({0, 2, 1}), h.permute({0, 2, 1}));
        check_view("aligned transpose, batch in between", d.permute({2, 0, 1}), h.permute({2, 0, 1}));
    }
    {
        auto [d, h] = values<T>({16, 200}, 12);
        check_view("an offset view", d.slice(1, 1, 161).transpose(0, 1), h.slice(1, 1, 161).transpose(0, 1));  // not 16-byte aligned
    }
}

// A gather that keeps the fastest dim moves it in words of up to 16 bytes where its size, the
// other strides and both ends allow.
TEMPLATE_TEST_CASE("contiguous() of permutes keeping the last dim", "[ops][permute]", std::int8_t, __half, float, double) {
    using T = TestType;
    {
        auto [d, h] = values<T>({2, 3, 5, 16}, 13);
        check_view("last dim of 16", d.permute({2, 0, 1, 3}), h.permute({2, 0, 1, 3}));
    }
    {
        auto [d, h] = values<T>({2, 3, 5, 6}, 14);  // 2-element words at most
        check_view("last dim of 6", d.permute({2, 0, 1, 3}), h.permute({2, 0, 1, 3}));
    }
    {
        auto [d, h] = values<T>({7, 40}, 15);
        check_view("rows sliced to 24", d.slice(1, 8, 32), h.slice(1, 8, 32));
        check_view("rows sliced from an odd column", d.slice(1, 3, 27), h.slice(1, 3, 27));
    }
}

// copy_ into a strided device view writes exactly the view's elements (the scatter kernel, whole
// words where the fastest dim is kept); every other element keeps its poison.
TEMPLATE_TEST_CASE("copy_ into strided device views", "[ops][permute]", std::int8_t, __half, float, double) {
    using T = TestType;
    auto check = [](const std::string& what, const std::function<Tensor<T>(const Tensor<T>&)>& view, const Shape& whole) {
        INFO(what);
        Tensor<T> dst = empty<T>(whole);
        rt::memset_async(dst.data(), 0xFF, std::size_t(dst.numel()) * sizeof(T), current_stream().handle());
        const Tensor<T> target = view(dst);
        auto [src, src_host] = values<T>(target.shape(), 16);
        target.copy_(src);
        const Tensor<T> got = dst.to_host();
        // The same view of a host tensor holding the poison, written on the host, is the reference.
        Tensor<T> want = empty<T>(whole, {.space = MemorySpace::host});
        std::memset(static_cast<void*>(want.data()), 0xFF, std::size_t(want.numel()) * sizeof(T));
        view(want).copy_(src_host);
        CHECK(std::memcmp(got.data(), want.data(), std::size_t(want.numel()) * sizeof(T)) == 0);
    };
    check("columns 8..32 of [7, 40]", [](const Tensor<T>& t) { return t.slice(1, 8, 32); }, {7, 40});
    check("columns 3..27 of [7, 40]", [](const Tensor<T>& t) { return t.slice(1, 3, 27); }, {7, 40});
    check("a transposed [33, 31]", [](const Tensor<T>& t) { return t.transpose(0, 1); }, {33, 31});
    check("a 4-d permutation keeping the last dim", [](const Tensor<T>& t) { return t.permute({2, 0, 1, 3}); }, {2, 3, 5, 16});
}

// TileMap (kernels/tessel/kernels/permute.cuh): the threads' chunks cover every element of a tile
// once in each phase, and under the shared-memory bank model (32 banks of 4 bytes; a request of
// 4 bytes or less per thread served per warp, of 8 per half-warp, of 16 per quarter-warp, and
// accesses to one word sharing it) every warp's stores down columns and loads along rows take one
// wavefront per group: no bank conflicts.
namespace {

template <int Bytes, int V, int Tile = 64>
void check_tile_map() {
    using Map = kernels::TileMap<Bytes, Tile, V>;
    constexpr int tile = Tile;
    INFO(Bytes << "-byte elements in chunks of " << V << ", tiles of " << Tile);
    // Coverage: (chunk, row) over threads and passes visits every chunk of the tile once, and at()
    // is a one-to-one map of the tile onto its shared memory keeping each chunk contiguous.
    std::vector<int> seen(tile * tile, 0), placed(tile * tile, 0);
    for (int t = 0; t < Map::threads; ++t)
        for (int q = 0; q < Map::passes; ++q)
            for (int k = 0; k < V; ++k) ++seen[Map::row(t, q) * tile + Map::chunk(t) * V + k];
    CHECK(std::count(seen.begin(), seen.end(), 1) == tile * tile);
    for (int r = 0; r < tile; ++r)
        for (int c = 0; c < tile; ++c) {
            ++placed[Map::at(r, c)];
            if (c % V) CHECK(Map::at(r, c) == Map::at(r, c - 1) + 1);
        }
    CHECK(std::count(placed.begin(), placed.end(), 1) == tile * tile);
    if (V > 1) {
        for (int r = 0; r < tile; ++r) CHECK(Map::at(r, 0) % V == 0);
    }

    // Wavefronts of one warp's request: byte addresses per lane, `width` bytes each.
    auto wavefronts = [](const std::array<int, 32>& address, int width) {
        const int group = width <= 4 ? 32 : 128 / width;
        int total = 0;
        for (int g = 0; g < 32; g += group) {
            std::array<std::set<int>, 32> words;
            for (int lane = g; lane < g + group; ++lane)
                for (int w = address[lane] / 4; w <= (address[lane] + width - 1) / 4; ++w) words[std::size_t(w % 32)].insert(w);
            std::size_t most = 0;
            for (const auto& b : words) most = std::max(most, b.size());
            total += int(most);
        }
        return total;
    };
    int worst_store = 0, worst_load = 0;
    for (int warp = 0; warp < Map::threads / 32; ++warp)
        for (int q = 0; q < Map::passes; ++q) {
            // Phase 1: element k of the thread's chunk of input row j goes to tile row c + k, column j.
            for (int k = 0; k < V; ++k) {
                std::array<int, 32> a{};
                for (int lane = 0; lane < 32; ++lane) {
                    const int t = warp * 32 + lane;
                    a[std::size_t(lane)] = Map::at(Map::chunk(t) * V + k, Map::row(t, q)) * Bytes;
                }
                worst_store = std::max(worst_store, wavefronts(a, Bytes) - (Bytes <= 4 ? 1 : 32 * Bytes / 128));
            }
            // Phase 2: a chunk of tile row i.
            std::array<int, 32> a{};
            for (int lane = 0; lane < 32; ++lane) {
                const int t = warp * 32 + lane;
                a[std::size_t(lane)] = Map::at(Map::row(t, q), Map::chunk(t) * V) * Bytes;
            }
            worst_load = std::max(worst_load, wavefronts(a, V * Bytes) - (V * Bytes <= 4 ? 1 : 32 * V * Bytes / 128));
        }
    CHECK(worst_store == 0);
    CHECK(worst_load == 0);
}

}  // namespace

TEST_CASE("the tiled transpose's shared memory has no bank conflicts", "[ops][permute]") {
    check_tile_map<1, 16, 128>();  // the tiles ops/copy.hpp uses for chunked 1-byte elements
    check_tile_map<1, 16>();
    check_tile_map<1, 4>();
    check_tile_map<1, 1>();
    check_tile_map<2, 8>();
    check_tile_map<2, 2>();
    check_tile_map<2, 1>();
    check_tile_map<4, 4>();
    check_tile_map<4, 1>();
    check_tile_map<8, 2>();
    check_tile_map<8, 1>();
}

TEST_CASE("clone() and to() of a permuted view use the device gather", "[ops][permute]") {
    auto [d, h] = testing::random_pair<float>({17, 19}, 7);
    const auto before = testing::launch_count();
    const auto c = d.transpose(0, 1).clone();
    if (backend == Backend::sim) CHECK(testing::launch_count() - before == 1);
    const auto back = c.to_host();
    for (std::int64_t i = 0; i < 19; ++i)
        for (std::int64_t j = 0; j < 17; ++j) CHECK(back({i, j}) == h({j, i}));
}

// full() and ones() of device memory: one fill kernel (16-byte stores, the tail one by one), every
// element the value's exact bits, on a block poisoned first; and the unaligned path on an interior
// range, whose neighbours must keep their poison.
TEMPLATE_TEST_CASE("full and ones fill device memory with one kernel", "[ops][fill]", std::int8_t, __half, float, double, bool) {
    using T = TestType;
    const T value = std::is_same_v<T, bool> ? convert<T>(1) : convert<T>(-3.25);
    for (std::int64_t n : {std::int64_t(1), std::int64_t(31), std::int64_t(33), testing::large(1000003)}) {
        INFO("n " << n);
        testing::poison_next<T>({n});
        const auto before = testing::launch_count();
        const Tensor<T> t = full<T>({n}, value);
        if (backend == Backend::sim) CHECK(testing::launch_count() - before == 1);
        const Tensor<T> h = t.to_host();
        std::size_t bad = 0;
        for (std::int64_t i = 0; i < n; ++i) bad += std::memcmp(h.data() + i, &value, sizeof(T)) != 0;
        CHECK(bad == 0);
    }
    const T one = convert<T>(1);
    const Tensor<T> o = ones<T>({2, 17}).to_host();
    for (std::int64_t i = 0; i < 34; ++i) CHECK(std::memcmp(o.data() + i, &one, sizeof(T)) == 0);

    Tensor<T> poisoned = empty<T>({40});
    rt::memset_async(poisoned.data(), 0xFF, 40 * sizeof(T), current_stream().handle());
    std::uint64_t bits = 0;
    std::memcpy(&bits, &value, sizeof(T));
    ops::fill_device(poisoned.data() + 1, 33, sizeof(T), bits, current_stream().handle(), poisoned.device());
    const Tensor<T> h = poisoned.to_host();
    std::uint64_t all_ones = ~std::uint64_t(0);
    for (std::int64_t i = 0; i < 40; ++i) {
        INFO("element " << i);
        const bool inside = i >= 1 && i <= 33;
        CHECK(std::memcmp(h.data() + i, inside ? static_cast<const void*>(&value) : &all_ones, sizeof(T)) == 0);
    }
}
