// detail::memory_sharing: whether two strided views touch a common byte, against the byte sets of
// both views enumerated on the host; and the views it must tell apart though their byte ranges cross.
#include <tessel/tensor/overlap.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <random>
#include <set>
#include <vector>

using tessel::Layout;
using tessel::Shape;
using tessel::detail::memory_sharing;
using tessel::detail::Sharing;

namespace {

// An address to stand for a view's element 0; nothing is read through it.
const void* address(std::uintptr_t at) { return reinterpret_cast<const void*>(at); }

// Every byte the view's elements cover, by walking its indices.
std::set<std::uintptr_t> bytes_of(std::uintptr_t first, const Layout& l, std::size_t element_size) {
    std::set<std::uintptr_t> out;
    if (l.numel() == 0) return out;
    std::vector<std::int64_t> i(std::size_t(l.rank()), 0);
    for (;;) {
        std::int64_t at = 0;
        for (int d = 0; d < l.rank(); ++d) at += i[std::size_t(d)] * l.strides[d];
        for (std::size_t b = 0; b < element_size; ++b) out.insert(first + std::uintptr_t(at * std::int64_t(element_size)) + b);
        int d = l.rank() - 1;
        while (d >= 0 && ++i[std::size_t(d)] == l.shape[d]) i[std::size_t(d)] = 0, --d;
        if (d < 0) return out;
    }
}

Layout random_layout(std::mt19937_64& rng) {
    std::uniform_int_distribution<int> rank(0, 3), size(0, 6), stride(-9, 9);
    const int r = rank(rng);
    Shape shape, strides;
    for (int d = 0; d < r; ++d) {
        shape.push_back(size(rng) == 0 ? 0 : size(rng));
        strides.push_back(stride(rng));
    }
    // Element 0 sits far enough from address 0 that negative strides stay positive.
    return Layout::strided(shape, strides, 0);
}

}  // namespace

TEST_CASE("memory_sharing agrees with the enumerated bytes of random views", "[layout][overlap]") {
    std::mt19937_64 rng(20261206);
    const std::size_t sizes[] = {1, 2, 4, 8};
    std::uniform_int_distribution<int> pick(0, 3), shift(-40, 40);
    int some = 0, none = 0;
    for (int trial = 0; trial < 20000; ++trial) {
        const Layout la = random_layout(rng), lb = random_layout(rng);
        const std::size_t ea = sizes[pick(rng)], eb = sizes[pick(rng)];
        const std::uintptr_t a = 4096, b = std::uintptr_t(std::int64_t(a) + shift(rng));
        const auto ba = bytes_of(a, la, ea), bb = bytes_of(b, lb, eb);
        bool common = false;
        for (auto x : ba) common = common || bb.count(x) > 0;
        const Sharing got = memory_sharing(address(a), la, ea, address(b), lb, eb);
        INFO("a: shape " << la.shape << " strides " << la.strides << " of " << ea << " bytes at " << a << "; b: shape " << lb.shape
                         << " strides " << lb.strides << " of " << eb << " bytes at " << b);
        REQUIRE(got == (common ? Sharing::some : Sharing::none));
        // The answer does not depend on which view is the first.
        REQUIRE(memory_sharing(address(b), lb, eb, address(a), la, ea) == got);
        (common ? some : none) += 1;
    }
    // Both answers were tried many times (the draws are not all disjoint or all overlapping).
    CHECK(some > 2000);
    CHECK(none > 2000);
}

TEST_CASE("memory_sharing tells interleaved views of large tensors apart in a few steps", "[layout][overlap]") {
    const std::uintptr_t base = 1 << 20;
    const std::int64_t rows = 1000003, cols = 2 * 517;
    const auto matrix = Layout::strided({rows, cols / 2}, {cols, 1});
    // x[:, :d] and x[:, d:] (float): every row's halves, byte ranges crossing over the whole matrix.
    CHECK(memory_sharing(address(base), matrix, 4, address(base + 4 * (cols / 2)), matrix, 4, 64) == Sharing::none);
    // x[:, :d] and x[:, d-1:2d-1]: the last column of the first half is the first of the second.
    CHECK(memory_sharing(address(base), matrix, 4, address(base + 4 * (cols / 2 - 1)), matrix, 4, 64) == Sharing::some);
    // x[::2] and x[1::2] of bf16, and the same with one odd byte of offset (a byte view of it).
    const auto evens = Layout::strided({7000001}, {2});
    CHECK(memory_sharing(address(base), evens, 2, address(base + 2), evens, 2, 64) == Sharing::none);
    CHECK(memory_sharing(address(base), evens, 2, address(base + 3), evens, 2, 64) == Sharing::some);
    // Real and imaginary parts of complex float as [n, 2] float: column 0 and column 1, and a column
    // of 8-byte elements over both.
    const auto column = Layout::strided({999999}, {2});
    CHECK(memory_sharing(address(base), column, 4, address(base + 4), column, 4, 64) == Sharing::none);
    CHECK(memory_sharing(address(base), column, 4, address(base), Layout::strided({999999}, {1}), 8, 64) == Sharing::some);
    // A transposed square matrix shares its diagonal with the matrix.
    CHECK(memory_sharing(address(base), Layout::strided({513, 513}, {513, 1}), 4, address(base), Layout::strided({513, 513}, {1, 513}), 4, 64) ==
          Sharing::some);
}

TEST_CASE("memory_sharing lines up rows whose strides are multiples of each other", "[layout][overlap]") {
    // float x [262144, 64]: x[:131072, :32] and x[::2, 32:] (row strides 64 and 128 elements):
    // without merging 128 = 2 x 64 the search tried every row, past the work limit.
    const std::uintptr_t base = std::uintptr_t(1) << 36;
    const std::int64_t n = 262144;
    const auto top_left = Layout::strided({n / 2, 32}, {64, 1}), odd_right = Layout::strided({n / 2, 32}, {128, 1});
    CHECK(memory_sharing(address(base), top_left, 4, address(base + 4 * 32), odd_right, 4, 64) == Sharing::none);
    CHECK(memory_sharing(address(base), top_left, 4, address(base + 4 * 31), odd_right, 4, 64) == Sharing::some);
    // x[::2, ::3] and x[:, 1::3] of x [300000, 99].
    const auto every_other = Layout::strided({150000, 33}, {198, 3}), all_rows = Layout::strided({300000, 33}, {99, 3});
    CHECK(memory_sharing(address(base), every_other, 4, address(base + 4), all_rows, 4, 64) == Sharing::none);
    CHECK(memory_sharing(address(base), every_other, 4, address(base + 4 * 99), all_rows, 4, 64) == Sharing::some);
}

TEST_CASE("memory_sharing of hand-made strides past 64-bit byte offsets", "[layout][overlap]") {
    const std::uintptr_t base = std::uintptr_t(1) << 36;
    const std::int64_t huge = std::numeric_limits<std::int64_t>::max();
    // A dim of one element moves nothing, whatever its stride: decided exactly.
    const auto row = Layout::strided({1, 4}, {huge, 1});
    CHECK(memory_sharing(address(base), row, 4, address(base + 8), row, 4) == Sharing::some);
    CHECK(memory_sharing(address(base), row, 4, address(base + 16), Layout::strided({1, 4}, {std::numeric_limits<std::int64_t>::min(), 1}), 4) ==
          Sharing::none);
    // Strides of 2^61 floats (2^63 bytes): not a real tensor; unknown, not an overflow.
    const auto far = Layout::strided({2}, {std::int64_t(1) << 61});
    CHECK(memory_sharing(address(base), far, 4, address(base), Layout::strided({3}, {1}), 4) != Sharing::none);
}

TEST_CASE("memory_sharing answers unknown, never none, when its work limit runs out", "[layout][overlap]") {
    const std::uintptr_t base = 1 << 20;
    // Coprime strides 7 and 11 (bytes): 7i = 11j + 3001 has solutions (i = 435, j = 4), which a
    // search finds and a search cut after one step cannot.
    const auto sevens = Layout::strided({1000}, {7}), elevens = Layout::strided({1000}, {11});
    REQUIRE(memory_sharing(address(base), sevens, 1, address(base + 3001), elevens, 1) == Sharing::some);
    CHECK(memory_sharing(address(base), sevens, 1, address(base + 3001), elevens, 1, 1) == Sharing::unknown);
    // With no work at all, crossing byte ranges cannot be called disjoint.
    const auto evens = Layout::strided({9}, {2});
    CHECK(memory_sharing(address(base), evens, 4, address(base + 4), evens, 4, 0) == Sharing::unknown);
}

TEST_CASE("repeated_elements agrees with the enumerated elements of random layouts", "[layout][overlap]") {
    std::mt19937_64 rng(20261207);
    int repeated = 0, distinct = 0, interleaved_distinct = 0;
    for (int trial = 0; trial < 20000; ++trial) {
        const Layout l = random_layout(rng);
        const auto bytes = bytes_of(4096, l, 1);  // one byte per element: the set of offsets
        const bool repeats = std::int64_t(bytes.size()) != l.numel();
        INFO("shape " << l.shape << " strides " << l.strides);
        REQUIRE(tessel::detail::repeated_elements(l) == (repeats ? Sharing::some : Sharing::none));
        REQUIRE(tessel::detail::distinct_elements(l) == !repeats);
        (repeats ? repeated : distinct) += 1;
        // Distinct though no dim steps past the smaller ones: what the listing decides.
        if (!repeats && l.rank() == 2 && l.shape[0] > 1 && l.shape[1] > 1) {
            const std::int64_t s0 = l.strides[0] < 0 ? -l.strides[0] : l.strides[0], s1 = l.strides[1] < 0 ? -l.strides[1] : l.strides[1];
            interleaved_distinct += s0 < s1 ? s1 <= s0 * (l.shape[0] - 1) : s0 <= s1 * (l.shape[1] - 1);
        }
    }
    CHECK(repeated > 2000);
    CHECK(distinct > 2000);
    CHECK(interleaved_distinct > 20);
    // Shape [3, 2] with strides [2, 3] reaches 0 3 2 5 4 7: distinct; [4, 4] with [3, 2] reaches 6 twice.
    CHECK(tessel::detail::repeated_elements(Layout::strided({3, 2}, {2, 3})) == Sharing::none);
    CHECK(tessel::detail::repeated_elements(Layout::strided({4, 4}, {3, 2})) == Sharing::some);
    // Past the listing limit an interleaved layout is unknown, never none.
    const std::int64_t rows = tessel::detail::repeated_elements_listing_limit / 2 + 1;
    CHECK(tessel::detail::repeated_elements(Layout::strided({rows, 2}, {2, 3})) == Sharing::unknown);
    CHECK_THAT(tessel::detail::repeated_elements_text(Layout::strided({rows, 2}, {2, 3})), Catch::Contains("too many elements to rule it out"));
}

TEST_CASE("byte_range of a layout reaching the largest offset does not overflow", "[layout][overlap]") {
    const std::int64_t top = std::numeric_limits<std::int64_t>::max();
    const auto l = Layout::strided({2}, {top}, 0);  // offsets 0 and 2^63 - 1, as from_blob<uint8_t> may make
    const auto [lo, hi] = tessel::detail::byte_range(address(0), l, 1);
    CHECK(lo == 0);
    CHECK(hi == std::uintptr_t(top));
}
