// Tensor<T>: factories in every memory space, views checked element by element against host index
// arithmetic, copies, storage lifetime, dtypes, element access, printing and bad input.
#include <tessel/ops/assign.hpp>  // the expressions that write tensors on chosen streams
#include <tessel/runtime/launch.hpp>
#include <tessel/tensor/tensor.hpp>

#include <limits>
#include <numeric>

#include "../support/device_array.hpp"
#include "../support/gate.hpp"
#include "../support/slow_kernels.hpp"

namespace {

using tessel::MemorySpace;
using tessel::Shape;
using tessel::Tensor;

// The host values of a row-major 5x7x3 block, as doubles, for reference arithmetic.
struct Block3 {
    static constexpr std::int64_t A = 5, B = 7, C = 3;
    std::vector<float> v = tessel::testing::random_vector<float>(A * B * C, 77);
    float at(std::int64_t a, std::int64_t b, std::int64_t c) const { return v[std::size_t((a * B + b) * C + c)]; }
};

const MemorySpace spaces[] = {MemorySpace::device, MemorySpace::host, MemorySpace::pinned, MemorySpace::managed};

}  // namespace

TEST_CASE("factories fill tensors in every memory space", "[tensor]") {
    for (MemorySpace sp : spaces) {
        INFO("space " << tessel::space_name(sp));
        const tessel::TensorOptions o{.space = sp};
        auto z = tessel::zeros<float>({3, 5}, o);
        CHECK(z.space() == sp);
        CHECK(z.shape() == Shape{3, 5});
        CHECK(z.to_vector() == std::vector<float>(15, 0.f));
        CHECK(tessel::ones<int>({4}, o).to_vector() == std::vector<int>(4, 1));
        CHECK(tessel::full<double>({2, 2}, 2.5, o).to_vector() == std::vector<double>(4, 2.5));
        CHECK(tessel::arange<std::int64_t>(3, 11, 2, o).to_vector() == std::vector<std::int64_t>{3, 5, 7, 9});
        auto f = tessel::from_host<int>({1, 2, 3, 4, 5, 6}, {2, 3}, o);
        CHECK(f.to_vector() == std::vector<int>{1, 2, 3, 4, 5, 6});
        CHECK(tessel::empty<float>({0, 4}, o).numel() == 0);
        auto scalar = tessel::full<float>({}, 4.f, o);
        CHECK(scalar.dim() == 0);
        CHECK(scalar.item() == 4.f);
    }
    CHECK_THROWS_AS(tessel::from_host<int>({1, 2, 3}, {2, 2}), tessel::InvalidArgument);
    try {
        (void)tessel::empty<float>({std::int64_t(1) << 32, std::int64_t(1) << 32});
        FAIL("an element count overflowing 64 bits was accepted");
    } catch (const tessel::InvalidArgument& e) {
        CHECK(std::string(e.what()).find("4294967296") != std::string::npos);
    }
    CHECK_THROWS_AS(tessel::empty<float>({3, -1}), tessel::InvalidArgument);
}

TEST_CASE("views read the right elements, on the device and on the host", "[tensor][views]") {
    const Block3 ref;
    for (MemorySpace sp : spaces) {
        INFO("space " << tessel::space_name(sp));
        auto t = tessel::from_host<float>(std::span<const float>(ref.v), {Block3::A, Block3::B, Block3::C}, {.space = sp});
        auto check = [&](const Tensor<float>& view, auto expected_at, const char* what) {
            INFO(what << " shape " << view.shape().to_string());
            const auto got = view.to_vector();
            std::vector<float> want;
            const Shape s = view.shape();
            std::vector<std::int64_t> i(std::size_t(s.size()), 0);
            for (std::int64_t k = 0; k < view.numel(); ++k) {
                want.push_back(expected_at(i));
                for (int d = s.size() - 1; d >= 0; --d) {
                    if (++i[std::size_t(d)] < s[d]) break;
                    i[std::size_t(d)] = 0;
                }
            }
            CHECK(got == want);
            CHECK(view.storage() == t.storage());  // a view, not a copy
        };
        check(t.slice(1, 1, 7, 2), [&](auto& i) { return ref.at(i[0], 1 + 2 * i[1], i[2]); }, "slice(1, 1, 7, 2)");
        check(t.slice(0, -3, 5), [&](auto& i) { return ref.at(2 + i[0], i[1], i[2]); }, "slice(0, -3, 5)");
        check(t.select(2, 1), [&](auto& i) { return ref.at(i[0], i[1], 1); }, "select(2, 1)");
        check(t.permute({2, 0, 1}), [&](auto& i) { return ref.at(i[1], i[2], i[0]); }, "permute(2, 0, 1)");
        const std::vector<int> order{-1, 0, 1};  // dims known at run time, negative counted from the end
        check(t.permute(order), [&](auto& i) { return ref.at(i[1], i[2], i[0]); }, "permute(vector{-1, 0, 1})");
        check(t.transpose(0, 1), [&](auto& i) { return ref.at(i[1], i[0], i[2]); }, "transpose(0, 1)");
        check(t.narrow(1, 2, 3).select(0, 4), [&](auto& i) { return ref.at(4, 2 + i[0], i[1]); }, "narrow then select");
        check(t.select(1, 3).unsqueeze(1).expand({Block3::A, 4, Block3::C}),
              [&](auto& i) { return ref.at(i[0], 3, i[2]); }, "unsqueeze then expand");
        check(t.view({Block3::A * Block3::B, Block3::C}), [&](auto& i) { return ref.at(i[0] / Block3::B, i[0] % Block3::B, i[1]); },
              "view(35, 3)");
    }
}

TEST_CASE("reshape views when it can and copies when it must; view refuses", "[tensor][views]") {
    auto t = tessel::arange<int>(0, 24).view({2, 3, 4});
    auto r = t.reshape({6, 4});
    CHECK(r.storage() == t.storage());
    auto p = t.permute({2, 0, 1});
    CHECK_FALSE(p.is_contiguous());
    try {
        (void)p.view({24});
        FAIL("view of a permuted tensor did not throw");
    } catch (const tessel::InvalidArgument& e) {
        CHECK(std::string(e.what()).find("reshape") != std::string::npos);
    }
    auto flat = p.reshape({24});
    CHECK(flat.storage() != p.storage());
    CHECK(flat.is_contiguous());
    std::vector<int> want;
    for (int c = 0; c < 4; ++c)
        for (int a = 0; a < 2; ++a)
            for (int b = 0; b < 3; ++b) want.push_back(a * 12 + b * 4 + c);
    CHECK(flat.to_vector() == want);
    auto cl = t.clone();
    CHECK(cl.storage() != t.storage());
    CHECK(cl.to_vector() == t.to_vector());
    CHECK(p.contiguous().to_vector() == want);
}

TEST_CASE("copies between memory spaces keep the values", "[tensor][copy]") {
    const Block3 ref;
    auto d = tessel::from_host<float>(std::span<const float>(ref.v), {Block3::A, Block3::B, Block3::C});
    auto pinned = d.to(MemorySpace::pinned);
    auto host = pinned.to(MemorySpace::host);
    auto back = host.transpose(0, 2).to(MemorySpace::device);  // non-contiguous source
    CHECK(pinned.to_vector() == ref.v);
    CHECK(host.to_vector() == ref.v);
    CHECK(back.shape() == Shape{Block3::C, Block3::B, Block3::A});
    CHECK(back.is_contiguous());
    std::vector<float> want;  // back[c][b][a] = ref(a, b, c), by index arithmetic
    for (std::int64_t c = 0; c < Block3::C; ++c)
        for (std::int64_t b = 0; b < Block3::B; ++b)
            for (std::int64_t a = 0; a < Block3::A; ++a) want.push_back(ref.at(a, b, c));
    CHECK(back.to_vector() == want);
}

TEST_CASE("a view keeps its memory alive; from_blob runs its deleter once, at the end", "[tensor][storage]") {
    const auto before = tessel::memory::stats().allocation[0].current;
    Tensor<float> view;
    {
        auto t = tessel::zeros<float>({1000});
        view = t.slice(0, 10, 20);
        CHECK(tessel::memory::stats().allocation[0].current == before + 1);
    }
    CHECK(tessel::memory::stats().allocation[0].current == before + 1);  // the view holds it
    CHECK(view.to_vector() == std::vector<float>(10, 0.f));
    view = Tensor<float>();
    CHECK(tessel::memory::stats().allocation[0].current == before);

    int deleted = 0;
    std::vector<double> mine(12, 1.5);
    {
        auto b = tessel::from_blob<double>(mine.data(), {3, 4}, MemorySpace::host, tessel::Device{0},
                                           [&](void* p) { deleted += p == mine.data(); });
        auto v = b.select(0, 2);
        b = Tensor<double>();
        CHECK(deleted == 0);
        CHECK(v(std::initializer_list<std::int64_t>{3}) == 1.5);
    }
    CHECK(deleted == 1);
}

TEST_CASE("element types convert through float and name themselves", "[tensor][dtype]") {
    auto f = tessel::from_host<float>({0.5f, -1.25f, 3.0f, 1000.f}, {4});
    CHECK(f.to_dtype<__half>().to_dtype<float>().to_vector() == std::vector<float>{0.5f, -1.25f, 3.0f, 1000.f});
    CHECK(f.to_dtype<__nv_bfloat16>().to_dtype<float>().to_vector() == std::vector<float>{0.5f, -1.25f, 3.0f, 1000.f});
    CHECK(f.to_dtype<__nv_fp8_e4m3>().to_dtype<float>().to_vector() == std::vector<float>{0.5f, -1.25f, 3.0f, 448.f});  // e4m3 saturates at 448
    CHECK(f.to<int>().to_vector() == std::vector<int>{0, -1, 3, 1000});
    CHECK(f.to_dtype<bool>().to_vector() == std::vector<bool>{true, true, true, true});
    CHECK(std::string(tessel::dtype_name(Tensor<__nv_bfloat16>::dtype())) == "bfloat16");
    CHECK(tessel::dtype_size(tessel::DType::f8_e5m2) == 1);
    static_assert(std::is_same_v<tessel::accumulate_t<__half>, float>);
}

TEST_CASE("host element access checks space, rank and range", "[tensor][errors]") {
    auto h = tessel::from_host<int>({1, 2, 3, 4, 5, 6}, {2, 3}, {.space = MemorySpace::host});
    CHECK(h({1, 2}) == 6);
    h({0, 0}) = 9;
    CHECK(h.to_vector()[0] == 9);
    CHECK_THROWS_AS(h({2, 0}), tessel::InvalidArgument);
    CHECK_THROWS_AS(h({1}), tessel::InvalidArgument);
    // Negative indices count from the end, as torch's (h[-1, -1] is the last element).
    CHECK(h({-1, -1}) == 6);
    CHECK(h({-2, 1}) == 2);
    CHECK(h.transpose(0, 1)({-1, 0}) == 3);
    CHECK_THROWS_WITH(h({-3, 0}), Catch::Contains("index -3 out of range for dimension 0 of size 2"));
    CHECK_THROWS_WITH(h({0, -4}), Catch::Contains("index -4 out of range for dimension 1 of size 3"));
    auto d = h.to(MemorySpace::device);
    try {
        (void)d({0, 0});
        FAIL("element access to device memory did not throw");
    } catch (const tessel::InvalidArgument& e) {
        CHECK(std::string(e.what()).find("to_host") != std::string::npos);
    }
    CHECK_THROWS_AS(d.size(2), tessel::InvalidArgument);
    CHECK_THROWS_AS(d.slice(1, 0, 4), tessel::InvalidArgument);
    CHECK_THROWS_AS(Tensor<float>().device(), tessel::InvalidArgument);  // undefined tensor
}

TEST_CASE("printing shows dtype, shape, place and the corner values", "[tensor][print]") {
    auto small = tessel::from_host<int>({1, 2, 3, 4, 5, 6}, {2, 3});
    CHECK(small.to_string() == std::string("tensor(int32, shape [2, 3], device ") + tessel::backend_name +
                                   ":0)\n[[1, 2, 3],\n [4, 5, 6]]");
    auto big = tessel::arange<float>(0, 100).view({10, 10});
    const std::string s = big.to_string();
    CHECK(s.find("...") != std::string::npos);
    CHECK(s.find("99") != std::string::npos);
    CHECK(s.find("[0, 1, 2, ..., 7, 8, 9]") != std::string::npos);
    // Both dims long, edge 2: the rows and columns kept, a strided view's corners gathered from the device.
    const auto grid = tessel::arange<int>(0, 30).view({5, 6});
    const std::string head = std::string("tensor(int32, shape [5, 6], device ") + tessel::backend_name + ":0)\n";
    CHECK(grid.to_string(2) == head + "[[0, 1, ..., 4, 5],\n [6, 7, ..., 10, 11],\n ...,\n [18, 19, ..., 22, 23],\n [24, 25, ..., 28, 29]]");
    CHECK(grid.transpose(0, 1).to_string(2).find("[[0, 6, ..., 18, 24],\n [1, 7, ..., 19, 25],\n ...,\n [4, 10, ..., 22, 28],\n [5, 11, ..., 23, 29]]") !=
          std::string::npos);
    // A view of 2^40 elements (stride 0) prints its corners without copying the rest.
    const auto huge = tessel::full<float>({1, 1}, 2.f).expand({std::int64_t(1) << 20, std::int64_t(1) << 20});
    CHECK(huge.to_string().find("[[2, 2, 2, ..., 2, 2, 2],") != std::string::npos);
    // Any edge from 1 up prints; an edge that shows nothing is refused.
    CHECK(small.to_string(std::numeric_limits<int>::max()).find("[[1, 2, 3],") != std::string::npos);
    CHECK(small.to_string(1).find("[[1, ..., 3],") != std::string::npos);
    CHECK_THROWS_WITH(small.to_string(0), Catch::Contains("edge = 0"));
    // A NaN prints as torch's "nan" whatever its sign bit (x86's 0/0 sets it).
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const auto nans = tessel::from_host<float>({nan, -nan, 1.5f}, {3});
    CHECK(nans.to_string().find("[nan, nan, 1.5]") != std::string::npos);
    // float64 values print as themselves (through float they printed inf and 0).
    const auto wide = tessel::from_host<double>({1e-300, 1e300, -3e39, 5e-324}, {4});
    CHECK(wide.to_string().find("[1e-300, 1e+300, -3e+39, 4.94066e-324]") != std::string::npos);
}

TEST_CASE("managed tensors prefetch and take advice; other spaces refuse", "[tensor][managed]") {
    auto m = tessel::arange<float>(0, 1000, 1, {.space = MemorySpace::managed});
    CHECK(m.space() == MemorySpace::managed);
    m.advise(cudaMemAdviseSetReadMostly, tessel::current_device());
    m.prefetch(tessel::current_device());
    m.prefetch(std::nullopt);  // to the host
    tessel::rt::device_synchronize();
    CHECK(m({999}) == 999.f);  // host-addressable once synchronised
    CHECK(m.to(MemorySpace::device).to_vector() == tessel::arange<float>(0, 1000).to_vector());
    auto d = tessel::zeros<float>({4});
    CHECK_THROWS_AS(d.prefetch(std::nullopt), tessel::InvalidArgument);
    CHECK_THROWS_AS(d.advise(cudaMemAdviseSetReadMostly, std::nullopt), tessel::InvalidArgument);
}

TEST_CASE("non-blocking copies return once queued and stay ordered on their stream", "[tensor][copy][stream]") {
    const int n = 1 << 16;
    tessel::Stream s = tessel::Stream::create();
    auto d = tessel::zeros<float>({n}, {.stream = s.handle()});
    const tessel::testing::Gate gate;
    gate.hold(s.handle());
    tessel::launch(tessel::testing::slow_add_one<float>, 4, 256, 0, s.handle(), d.data(), n, 200);  // d = 200 everywhere
    auto pinned = d.to({.space = MemorySpace::pinned, .stream = s.handle(), .non_blocking = true});
    CHECK_FALSE(s.query());  // the copy is queued behind the gate, not done
    gate.open();
    s.synchronize();
    CHECK(pinned.to_vector() == std::vector<float>(std::size_t(n), 200.f));
    auto back = pinned.to({.space = MemorySpace::device, .stream = s.handle(), .non_blocking = true});
    s.synchronize();  // to_vector() reads on the current stream, which does not wait for s
    CHECK(back.to_vector() == std::vector<float>(std::size_t(n), 200.f));
}

// clone(), contiguous() and to() between device memory do not wait for the stream (torch's device
// copies): each returns while the kernel ahead of it still runs, and reads of the results wait. The
// source, allocated on the current stream, is dropped at once: its memory must not serve a new
// tensor on the current stream before the copies on `s` have read it.
TEST_CASE("copies between device memory return once queued and stay ordered on their stream", "[tensor][copy][stream]") {
    const int n = 1 << 16;
    tessel::Stream s = tessel::Stream::create();
    tessel::Tensor<float> copy, every_third, moved;
    const tessel::testing::Gate gate;  // holds s until the source's memory has been offered to a new tensor
    {
        auto d = tessel::zeros<float>({n});
        tessel::current_stream().synchronize();  // the zeros land before the kernel on s adds to them
        gate.hold(s.handle());
        tessel::launch(tessel::testing::slow_add_one<float>, 4, 256, 0, s.handle(), d.data(), n, 211);  // d = 211 once the gate opens
        copy = d.clone(s.handle());
        CHECK_FALSE(s.query());  // queued behind the kernel, not done
        every_third = d.slice(0, 1, n, 3).contiguous(s.handle());  // the gather kernel
        CHECK_FALSE(s.query());
        moved = d.to({.device = d.device(), .stream = s.handle()});
        CHECK_FALSE(s.query());
    }
    const auto scribble = tessel::full<float>({n}, -5.f);  // d's size, on the current stream
    {
        // The fill lands while s is held (in d's memory if that was given back too early). Under
        // ThreadSanitizer the sim runs one grid at a time, so the fill waits for the gate there: the
        // gate opens 50 ms from now either way.
        const std::jthread opener = gate.open_later();
        tessel::current_stream().synchronize();
    }
    CHECK(copy.to_vector() == std::vector<float>(std::size_t(n), 211.f));  // read after the copy, on the current stream
    CHECK(every_third.to_vector() == std::vector<float>(std::size_t((n - 1 + 2) / 3), 211.f));
    CHECK(moved.to_vector() == std::vector<float>(std::size_t(n), 211.f));
    CHECK(scribble.to_vector() == std::vector<float>(std::size_t(n), -5.f));
}

// The host reads pinned memory a queued copy is still filling only once it landed: element access
// and a conversion on the host wait for it, as item() and to_vector() do.
TEST_CASE("host reads of pinned memory wait for the copy filling it", "[tensor][copy][stream]") {
    const int n = 1 << 16;
    tessel::Stream s = tessel::Stream::create();
    auto d = tessel::zeros<float>({n}, {.stream = s.handle()});
    auto pinned = tessel::full<float>({n}, -1.f, {.space = MemorySpace::pinned});
    {  // s is held at a gate that opens 50 ms after the read starts: a read that does not wait sees -1
        const tessel::testing::Gate gate;
        gate.hold(s.handle());
        tessel::launch(tessel::testing::slow_add_one<float>, 4, 256, 0, s.handle(), d.data(), n, 200);  // d = 200 everywhere
        pinned.copy_(d, s.handle());
        CHECK_FALSE(s.query());  // queued behind the gate
        const std::jthread opener = gate.open_later();
        CHECK(pinned({n - 1}) == 200.f);
    }
    {
        const tessel::testing::Gate gate;
        gate.hold(s.handle());
        tessel::launch(tessel::testing::slow_add_one<float>, 4, 256, 0, s.handle(), d.data(), n, 100);  // 300
        pinned.copy_(d, s.handle());
        CHECK_FALSE(s.query());
        const std::jthread opener = gate.open_later();
        CHECK(pinned.to<double>().to_vector() == std::vector<double>(std::size_t(n), 300.0));
    }
}

TEST_CASE("a tensor written on two streams is read after both writes", "[tensor][copy][stream]") {
    // Two halves of one tensor written concurrently on two streams (the first held at a gate): a read
    // that waited only for the later write would see the first half's old values.
    const std::int64_t n = 1001;
    const auto y = tessel::arange<float>(0, double(n));
    const auto x = tessel::full<float>({n}, -1.f);
    tessel::rt::device_synchronize();
    const tessel::Stream s1 = tessel::Stream::create(), s2 = tessel::Stream::create();
    const std::int64_t half = n / 2;
    std::vector<float> want(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) want[std::size_t(i)] = i < half ? 2.f * float(i) : 3.f * float(i);
    for (int reader = 0; reader < 3; ++reader) {
        INFO("reader " << reader);
        (x = x * 0.f - 1.f).run();
        tessel::rt::device_synchronize();
        const tessel::testing::Gate gate;
        gate.hold(s1.handle());
        (x.slice(0, 0, half) = y.slice(0, 0, half) * 2.f).run(s1);
        (x.slice(0, half, n) = y.slice(0, half, n) * 3.f).run(s2);
        // Opened from another thread 50 ms on (the sim-tsan preset runs one grid at a time: s2's
        // kernel may wait for s1's gate); the read below starts before then.
        const std::jthread opener = gate.open_later();
        if (reader == 0) CHECK(x.to_vector() == want);
        if (reader == 1) {
            CHECK(x.slice(0, 0, 1).item() == 0.f);
            CHECK(x.slice(0, 1, 2).item() == 2.f);
        }
        if (reader == 2) CHECK(x.to({.space = MemorySpace::pinned, .stream = s2}).to_vector() == want);
    }
}

TEST_CASE("a host write to pinned memory waits for a queued copy still reading it", "[tensor][copy][stream]") {
    const int n = 1 << 12;
    const tessel::Stream s = tessel::Stream::create();
    for (int writer = 0; writer < 2; ++writer) {
        INFO((writer == 0 ? "element access" : "a host copy_ into it"));
        auto pinned = tessel::full<float>({n}, 1.f, {.space = MemorySpace::pinned});
        auto d = tessel::zeros<float>({n}, {.stream = s});
        const tessel::testing::Gate gate;
        gate.hold(s.handle());
        d.copy_(pinned, s);  // queued behind the gate: it has not read `pinned` yet
        CHECK_FALSE(s.query());
        const std::jthread opener = gate.open_later();
        if (writer == 0) pinned({0}) = 7.f;
        else pinned.copy_(tessel::full<float>({n}, 7.f, {.space = MemorySpace::host}));
        CHECK(d.to_vector() == std::vector<float>(std::size_t(n), 1.f));
    }
}

TEST_CASE("copy_ and assignment write into interleaved layouts whose elements are distinct", "[tensor][copy]") {
    // Shape [3, 2] with strides [2, 3] reaches offsets 0 3 2 5 4 7 (as from_blob or DLPack may give):
    // distinct, so a destination; shape [4, 4] with strides [3, 2] reaches 6 twice, so not.
    const auto base = tessel::full<float>({8}, -1.f);
    const auto view = tessel::from_blob<float>(base.data(), {3, 2}, MemorySpace::device, tessel::Device{0}, {}, Shape{2, 3});
    const auto values = tessel::arange<float>(0, 6).view({3, 2});
    view.copy_(values);
    CHECK(base.to_vector() == std::vector<float>{0, -1, 2, 1, 4, 3, -1, 5});
    (view = values * 10.f).run();
    CHECK(base.to_vector() == std::vector<float>{0, -1, 20, 10, 40, 30, -1, 50});
    const auto big = tessel::zeros<float>({16});
    const auto repeating = tessel::from_blob<float>(big.data(), {4, 4}, MemorySpace::device, tessel::Device{0}, {}, Shape{3, 2});
    CHECK_THROWS_WITH(repeating.copy_(tessel::zeros<float>({4, 4})), Catch::Contains("reaches some elements through more than one index"));
}

// A host tensor goes to the current device, as torch's .to("cuda"); a device tensor keeps its own.
TEST_CASE("to() without a device takes the current one for host memory", "[.multidevice]") {
    auto h = tessel::full<float>({5}, 2.f, {.space = MemorySpace::host, .device = tessel::Device{1}});
    {
        tessel::DeviceGuard g(tessel::Device{2});
        CHECK(h.to(MemorySpace::device).device() == tessel::Device{2});
        CHECK(h.to(tessel::TensorOptions{.space = MemorySpace::device}).device() == tessel::Device{2});
        const auto d1 = h.to(tessel::TensorOptions{.space = MemorySpace::device, .device = tessel::Device{1}});
        CHECK(d1.to(MemorySpace::device).device() == tessel::Device{1});
        CHECK(d1.to(MemorySpace::device).to_vector() == std::vector<float>(5, 2.f));
    }
}
