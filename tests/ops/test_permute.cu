// contiguous() of strided device views runs one kernel (tiled transpose or strided gather) and
// reproduces the view's elements exactly, for 1-, 2-, 4- and 8-byte elements, on odd shapes that
// leave partial tiles; the output's cache block is poisoned first.
#include <catch2/catch.hpp>

#include <tessel/ops/copy.hpp>

#include "../reference/elementwise.hpp"
#include "../support/random_tensor.hpp"

using namespace tessel;

namespace {

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
}

}  // namespace

TEMPLATE_TEST_CASE("contiguous() of permuted, sliced and broadcast device views", "[ops][permute][slow_under_tsan]", std::int8_t, __half, float,
                   double) {
    using T = TestType;
    {
        auto [d, h] = testing::random_pair<T>({33, 31}, 1);
        check_view("2-d transpose", d.transpose(0, 1), h.transpose(0, 1));
    }
    {
        auto [d, h] = testing::random_pair<T>({1003, 1001}, 2);
        check_view("large 2-d transpose", d.transpose(0, 1), h.transpose(0, 1));
    }
    {
        auto [d, h] = testing::random_pair<T>({3, 33, 65}, 3);
        check_view("batched transpose", d.permute({0, 2, 1}), h.permute({0, 2, 1}));
    }
    {
        auto [d, h] = testing::random_pair<T>({2, 3, 5, 7}, 4);
        check_view("4-d permutation", d.permute({3, 1, 0, 2}), h.permute({3, 1, 0, 2}));
        check_view("4-d permutation, fastest dim kept", d.permute({2, 0, 1, 3}), h.permute({2, 0, 1, 3}));
    }
    {
        auto [d, h] = testing::random_pair<T>({40, 66}, 5);
        check_view("stepped slice, transposed", d.slice(1, 1, 66, 2).transpose(0, 1), h.slice(1, 1, 66, 2).transpose(0, 1));
        check_view("stepped slice (no dim of stride 1)", d.slice(1, 0, 66, 3), h.slice(1, 0, 66, 3));
    }
    {
        auto [d, h] = testing::random_pair<T>({1, 33}, 6);
        check_view("broadcast rows", d.expand({31, 33}), h.expand({31, 33}));
        check_view("broadcast, transposed", d.expand({31, 33}).transpose(0, 1), h.expand({31, 33}).transpose(0, 1));
    }
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
