// DLPack exchange: round trips for every dtype, in every memory space, with strides preserved and
// each side's memory released exactly once; capsules as other producers make them (0-d, empty,
// broadcast, reversed, malformed), each released once whether accepted or refused.
#include <tessel/tensor/dlpack.hpp>

#include <algorithm>
#include <cstring>
#include <limits>

#include "../support/device_array.hpp"

namespace {
template <class T>
void round_trip(tessel::MemorySpace space) {
    auto values = tessel::testing::random_vector<T>(4 * 6, 31, -50, 50);
    auto t = tessel::from_host<T>(std::span<const T>(values), {4, 6}, {.space = space}).transpose(0, 1).slice(0, 1, 6, 2);
    std::vector<T> want;  // t[i][j] = values[j][1 + 2 i]: columns 1, 3, 5 of the [4, 6] matrix as rows
    for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 4; ++j) want.push_back(values[std::size_t(j * 6 + 1 + 2 * i)]);
    REQUIRE(t.to_vector() == want);
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
}

TEMPLATE_TEST_CASE("DLPack carries bool and float8 with DLPack 1.x's codes", "[tensor][dlpack]", bool, __nv_fp8_e4m3, __nv_fp8_e5m2) {
    // The codes PyTorch exchanges (torch.bool 6, float8_e4m3fn 10, float8_e5m2 12); DLPack 0.6's
    // header names none of them, the layout is the same.
    using T = TestType;
    const std::uint8_t code = std::is_same_v<T, bool> ? 6 : std::is_same_v<T, __nv_fp8_e4m3> ? 10 : 12;
    for (auto space : {tessel::MemorySpace::device, tessel::MemorySpace::host}) {
        INFO("space " << tessel::space_name(space));
        // A strided view of values 0..23 (0/1 for bool) there and back: the same elements, no copy.
        std::vector<float> values(24);
        for (int i = 0; i < 24; ++i) values[std::size_t(i)] = std::is_same_v<T, bool> ? float(i % 3 == 0) : float(i - 12);
        const auto t = tessel::from_host<float>(std::span<const float>(values), {4, 6}).to<T>().to(space).transpose(0, 1).slice(0, 1, 6, 2);
        {
            const auto back = tessel::from_dlpack<T>(tessel::to_dlpack(t));
            CHECK(back.data() == t.data());
            CHECK(back.strides() == t.strides());
            std::vector<float> want;  // back[i][j] = values[j][1 + 2 i], through T
            for (int i = 0; i < 3; ++i)
                for (int j = 0; j < 4; ++j) want.push_back(float(T(values[std::size_t(j * 6 + 1 + 2 * i)])));
            CHECK(back.template to<float>().to_vector() == want);
        }
        auto z = tessel::zeros<T>({3}, {.space = space});
        DLManagedTensor* m = tessel::to_dlpack(z);
        CHECK(int(m->dl_tensor.dtype.code) == code);
        CHECK(int(m->dl_tensor.dtype.bits) == 8);
        m->deleter(m);
    }
    // One of them read as another says which it is.
    const auto what = tessel::testing::message([] { (void)tessel::from_dlpack<std::uint8_t>(tessel::to_dlpack(tessel::zeros<T>({2}))); });
    CHECK_THAT(what, Catch::Contains(std::is_same_v<T, bool> ? "holds bool" : std::is_same_v<T, __nv_fp8_e4m3> ? "holds float8_e4m3fn" : "holds float8_e5m2"));
}

namespace {
// A capsule over `data` (not owned) with the given fields, counting its deleter's calls.
struct Capsule {
    std::int64_t shape[4] = {}, strides[4] = {};
    DLManagedTensor managed{};
    int deleted = 0;
    Capsule(void* data, std::initializer_list<std::int64_t> s, std::initializer_list<std::int64_t> st, DLDataType dtype = {kDLFloat, 32, 1}) {
        std::copy(s.begin(), s.end(), shape);
        std::copy(st.begin(), st.end(), strides);
        managed.dl_tensor = {data, {kDLCPU, 0}, int(s.size()), dtype, shape, st.size() ? strides : nullptr, 0};
        managed.manager_ctx = this;
        managed.deleter = [](DLManagedTensor* self) { ++static_cast<Capsule*>(self->manager_ctx)->deleted; };
    }
    Capsule(const Capsule&) = delete;  // it points into itself
};
}  // namespace

TEST_CASE("DLPack capsules from other producers: 0-d, empty, broadcast, and malformed ones", "[tensor][dlpack]") {
    float values[12];
    for (int i = 0; i < 12; ++i) values[i] = float(i);
    {  // 0-d, an empty dim, a stride-0 (broadcast) dim: wrapped as they are, released once
        Capsule scalar(values + 5, {}, {}), empty(values, {3, 0}, {0, 1}), broadcast(values, {4, 3}, {0, 1});
        {
            const auto s = tessel::from_dlpack<float>(&scalar.managed);
            CHECK(s.dim() == 0);
            CHECK(s.item() == 5.f);
            CHECK(tessel::from_dlpack<float>(&empty.managed).numel() == 0);
            const auto b = tessel::from_dlpack<float>(&broadcast.managed);
            CHECK(b.to_vector() == std::vector<float>{0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2});
        }
        CHECK(scalar.deleted == 1);
        CHECK(empty.deleted == 1);
        CHECK(broadcast.deleted == 1);
    }
    // Malformed or inexpressible: a typed error naming it, and the deleter still runs once.
    struct Bad {
        Capsule capsule;
        const char* says;
    };
    Bad bad[] = {
        {Capsule(values + 11, {4}, {-1}), "negative stride -1"},
        {Capsule(nullptr, {2}, {1}), "null data pointer"},
        {Capsule(values, {2}, {1}, {kDLComplex, 64, 1}), "holds complex64"},
        {Capsule(values, {2}, {1}, {99, 32, 1}), "type code 99"},
        {Capsule(values, {2}, {std::numeric_limits<std::int64_t>::max()}), "spans more bytes"},
    };
    for (Bad& b : bad) {
        INFO(b.says);
        CHECK_THAT(tessel::testing::message<tessel::Error>([&] { (void)tessel::from_dlpack<float>(&b.capsule.managed); }),
                   Catch::Contains(b.says));
        CHECK(b.capsule.deleted == 1);
    }
    // DLPack's float8_e4m3 (code 8, with infinities) is not tessel's float8_e4m3 (e4m3fn, code 10): the
    // refusal tells them apart.
    Capsule e4m3_with_infinities(values, {2}, {1}, {8, 8, 1});
    CHECK_THAT(tessel::testing::message<tessel::Error>([&] { (void)tessel::from_dlpack<__nv_fp8_e4m3>(&e4m3_with_infinities.managed); }),
               Catch::Contains("holds float8_e4m3 (with infinities, not e4m3fn), not float8_e4m3 (float8_e4m3fn)"));
    CHECK(e4m3_with_infinities.deleted == 1);
    Capsule later_device(values, {2}, {1});
    const std::int32_t maia = 17;  // a DLPack 1.x device type beyond 0.6's enum
    std::memcpy(&later_device.managed.dl_tensor.device.device_type, &maia, sizeof maia);
    CHECK_THAT(tessel::testing::message<tessel::Unsupported>([&] { (void)tessel::from_dlpack<float>(&later_device.managed); }),
               Catch::Contains("device type 17"));
    CHECK(later_device.deleted == 1);
}
