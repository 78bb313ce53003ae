// DLPack exchange: round trips for every dtype DLPack 0.6 expresses, in every memory space, with
// strides preserved and each side's memory released exactly once.
#include <tessel/tensor/dlpack.hpp>

#include "../support/device_array.hpp"

namespace {
template <class T>
void round_trip(tessel::MemorySpace space) {
    auto values = tessel::testing::random_vector<T>(4 * 6, 31, -50, 50);
    auto t = tessel::from_host<T>(std::span<const T>(values), {4, 6}, {.space = space}).transpose(0, 1).slice(0, 1, 6, 2);
    const auto want = t.to_vector();
    const auto count_before = t.storage().use_count();
    DLManagedTensor* m = tessel::to_dlpack(t);
    CHECK(m->dl_tensor.ndim == 2);
    CHECK(m->dl_tensor.strides[0] == 2);  // the view's strides travel as they are
    CHECK(m->dl_tensor.strides[1] == 6);
    CHECK(t.storage().use_count() == count_before + 1);  // the DLPack tensor holds the memory
    {
        auto back = tessel::from_dlpack<T>(m);
        CHECK(back.space() == space);
        CHECK(back.shape() == t.shape());
        CHECK(back.data() == t.data());  // no copy
        CHECK(back.to_vector() == want);
    }
    CHECK(t.storage().use_count() == count_before);  // released through the DLPack deleter
}
}  // namespace

TEMPLATE_TEST_CASE("DLPack round trips keep data, strides and ownership", "[tensor][dlpack]", double, float, __half,
                   __nv_bfloat16, std::int8_t, std::uint8_t, std::int32_t, std::int64_t) {
    for (auto space : {tessel::MemorySpace::device, tessel::MemorySpace::host, tessel::MemorySpace::pinned, tessel::MemorySpace::managed}) {
        INFO("space " << tessel::space_name(space));
        round_trip<TestType>(space);
    }
}

TEST_CASE("DLPack rejects what it cannot express and releases what it was given", "[tensor][dlpack]") {
    auto t = tessel::zeros<float>({3});
    const auto before = t.storage().use_count();
    try {
        (void)tessel::from_dlpack<int>(tessel::to_dlpack(t));
        FAIL("a float32 DLPack tensor was accepted as int32");
    } catch (const tessel::InvalidArgument& e) {
        CHECK(std::string(e.what()).find("float32") != std::string::npos);
    }
    CHECK(t.storage().use_count() == before);  // the rejected DLPack tensor was still released
    CHECK_THROWS_AS(tessel::to_dlpack(tessel::zeros<bool>({2})), tessel::Unsupported);
    CHECK_THROWS_AS(tessel::to_dlpack(tessel::zeros<__nv_fp8_e4m3>({2})), tessel::Unsupported);
}
