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
