// Bad input to tensors themselves: shapes, views, sizes near the integer limits, host conversions,
// copies between memory spaces, handles (Stream, Event), DLPack capsules.
#include <dlpack/dlpack.h>

#include <cmath>
#include <cstring>
#include <thread>
#include <cstdint>
#include <cstdio>
#include <limits>

#include <tessel/dist/communicator.hpp>
#include <tessel/monitor/monitor.hpp>
#include <tessel/runtime/peer.hpp>
#include <tessel/tensor/dlpack.hpp>
#include <tessel/tessel.hpp>

#include "harness.hpp"

namespace {
using namespace tessel;
using robustness::expect;
constexpr std::int64_t i64max = std::numeric_limits<std::int64_t>::max();
constexpr std::size_t size_max = std::numeric_limits<std::size_t>::max();

Tensor<float> dev(const Shape& s) { return zeros<float>(s); }
Tensor<float> host(const Shape& s) { return zeros<float>(s, {.space = MemorySpace::host}); }
std::vector<float> iota_values(std::size_t n) {
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = float(i) + 0.5f;
    return v;
}
Tensor<float> iota_on(const Shape& s, MemorySpace space) {
    const auto v = iota_values(std::size_t(Layout::contiguous(s).numel()));
    return from_host<float>(std::span<const float>(v), s, {.space = space});
}
}  // namespace

// ---- shapes -------------------------------------------------------------------------------------
BAD("shapes", "empty with a negative size", Expect::invalid_argument, "negative size") { (void)empty<float>({3, -1}); };
BAD("shapes", "zeros with a negative size", Expect::invalid_argument, "negative size") { (void)zeros<float>({-5}); };
BAD("shapes", "full with a negative size", Expect::invalid_argument, "negative size") { (void)full<float>({2, -2}, 1.f); };
BAD("shapes", "host empty with a negative size", Expect::invalid_argument, "negative size") {
    (void)empty<float>({-1}, {.space = MemorySpace::host});
};
BAD("shapes", "rank 9", Expect::invalid_argument, "at most 8 dims") { (void)empty<float>({1, 1, 1, 1, 1, 1, 1, 1, 1}); };
BAD("shapes", "from_host with too few values", Expect::invalid_argument, "from_host: 3 values for shape [2, 2]") {
    (void)from_host<float>({1.f, 2.f, 3.f}, {2, 2});
};
BAD("shapes", "from_host with too many values", Expect::invalid_argument, "5 values") {
    (void)from_host<float>({1.f, 2.f, 3.f, 4.f, 5.f}, {2, 2});
};
BAD("shapes", "view to a different element count", Expect::invalid_argument, "view: shape") { (void)dev({4, 6}).view({5, 5}); };
BAD("shapes", "view with two -1", Expect::invalid_argument, "more than one -1") { (void)dev({4, 6}).view({-1, -1}); };
BAD("shapes", "view of a transposed tensor", Expect::invalid_argument, "cannot be viewed") {
    (void)dev({4, 6}).transpose(0, 1).view({24});
};
BAD("shapes", "view with a -1 that does not divide", Expect::invalid_argument, "invalid for a tensor of 24") {
    (void)dev({4, 6}).view({5, -1});
};
BAD("shapes", "view with a negative size", Expect::invalid_argument, "negative size") { (void)dev({4, 6}).view({-2, -12}); };
BAD("shapes", "reshape to a different element count", Expect::invalid_argument, "reshape") {
    (void)dev({4, 6}).transpose(0, 1).reshape({7});
};
BAD("shapes", "expand a non-1 dim", Expect::invalid_argument, "expand: cannot expand shape") { (void)dev({3, 2}).expand({3, 4}); };
BAD("shapes", "expand to fewer dims", Expect::invalid_argument, "fewer dims") { (void)dev({3, 2}).expand({2}); };
BAD("shapes", "element count overflows 64 bits", Expect::invalid_argument, "overflows 64 bits") {
    (void)empty<float>({std::int64_t(1) << 40, std::int64_t(1) << 40});
};
BAD("shapes", "byte count overflows", Expect::invalid_argument, "overflow the byte count") {
    (void)empty<double>({i64max / 2});
};
BAD("shapes", "strides of an empty shape that overflow", Expect::invalid_argument, "overflows 64 bits") {
    (void)empty<float>({0, i64max, i64max});
};
DEFINED("shapes", "a zero size makes a large shape empty") {
    const auto t = empty<float>({0, std::int64_t(1) << 40, std::int64_t(1) << 20});
    expect(t.numel() == 0, "numel of [0, 2^40, 2^20] is " + std::to_string(t.numel()));
};

// ---- views --------------------------------------------------------------------------------------
BAD("views", "slice step 0", Expect::invalid_argument, "step 0") { (void)dev({10}).slice(0, 0, 10, 0); };
BAD("views", "slice negative step", Expect::invalid_argument, "step -2") { (void)dev({10}).slice(0, 0, 10, -2); };
BAD("views", "slice start after stop", Expect::invalid_argument, "is after stop") { (void)dev({10}).slice(0, 7, 3); };
BAD("views", "slice start beyond the size", Expect::invalid_argument, "out of range") { (void)dev({10}).slice(0, 11, 12); };
BAD("views", "slice stop at INT64_MIN", Expect::invalid_argument, "out of range") {
    (void)dev({10}).slice(0, 0, std::numeric_limits<std::int64_t>::min());
};
BAD("views", "slice of a missing dim", Expect::invalid_argument, "slice: dim 2") { (void)dev({3, 4}).slice(2, 0, 1); };
DEFINED("views", "slice with a step of INT64_MAX keeps one element") {
    const auto t = iota_on({10}, MemorySpace::device).slice(0, 3, 10, i64max);
    expect(t.numel() == 1 && t.item() == 3.5f, "slice(3, 10, max) should be the one element 3.5");
};
DEFINED("views", "slice with a huge step on a large stride") {
    const auto t = dev({4, 1000}).slice(0, 0, 4, i64max / 2);
    expect(t.shape() == Shape{1, 1000}, "shape " + t.shape().to_string());
};
BAD("views", "narrow with a negative length", Expect::invalid_argument, "narrow: length -1") { (void)dev({10}).narrow(0, 2, -1); };
BAD("views", "narrow past the end", Expect::invalid_argument, "does not fit") { (void)dev({10}).narrow(0, 8, 5); };
BAD("views", "narrow with a huge start", Expect::invalid_argument, "out of range") { (void)dev({10}).narrow(0, i64max, 1); };
BAD("views", "select out of range", Expect::invalid_argument, "select: index 4") { (void)dev({4, 2}).select(0, 4); };
BAD("views", "select below -size", Expect::invalid_argument, "select: index -5") { (void)dev({4, 2}).select(0, -5); };
BAD("views", "permute repeats a dim", Expect::invalid_argument, "permute") { (void)dev({2, 3, 4}).permute({0, 0, 1}); };
BAD("views", "permute with too few dims", Expect::invalid_argument, "permute") { (void)dev({2, 3, 4}).permute({1, 0}); };
BAD("views", "permute with a dim out of range", Expect::invalid_argument, "permute") { (void)dev({2, 3}).permute({0, 5}); };
BAD("views", "transpose of a missing dim", Expect::invalid_argument, "out of range") { (void)dev({2, 3}).transpose(0, 2); };
BAD("views", "unsqueeze beyond rank", Expect::invalid_argument, "out of range") { (void)dev({2, 3}).unsqueeze(4); };
BAD("views", "squeeze of a missing dim", Expect::invalid_argument, "out of range") { (void)dev({2, 1}).squeeze(3); };
BAD("views", "size of a missing dim", Expect::invalid_argument, "dimension 2 out of range") { (void)dev({2, 3}).size(2); };
BAD("views", "element access of device memory", Expect::invalid_argument, "call to_host() first") { (void)dev({2, 3})({0, 0}); };
BAD("views", "element access with too few indices", Expect::invalid_argument, "with 1 indices") { (void)host({2, 3})({0}); };
BAD("views", "element access out of range", Expect::invalid_argument, "index 3 out of range") { (void)host({2, 3})({1, 3}); };
BAD("views", "item of several elements", Expect::invalid_argument, "exactly one element") { (void)dev({2}).item(); };
BAD("views", "device() of an undefined tensor", Expect::invalid_argument, "undefined") { (void)Tensor<float>{}.device(); };
BAD("views", "slice of an undefined tensor", Expect::invalid_argument, "slice") { (void)Tensor<float>{}.slice(0, 0, 1); };
BAD("views", "to_vector of an undefined tensor", Expect::invalid_argument, "undefined") { (void)Tensor<float>{}.to_vector(); };
BAD("views", "clone of an undefined tensor", Expect::invalid_argument, "undefined") { (void)Tensor<float>{}.clone(); };
BAD("views", "prefetch of device memory", Expect::invalid_argument, "prefetch needs a managed tensor") {
    dev({4}).prefetch(std::nullopt);
};
BAD("views", "Tensor over too little storage", Expect::invalid_argument, "reaches outside its storage") {
    auto t = dev({4});
    (void)Tensor<float>(t.storage(), Layout::contiguous({5}));
};

// ---- sizes near the limits ----------------------------------------------------------------------
BAD("sizes", "device tensor larger than the device", Expect::out_of_memory, "tried to allocate") {
    (void)empty<float>({std::int64_t(1) << 45});
};
BAD("sizes", "raw device request of SIZE_MAX", Expect::out_of_memory, "18446744073709551615 bytes") {
    (void)memory::allocate(size_max);
};
BAD("sizes", "raw device request of 2^63 + 1", Expect::out_of_memory, "9223372036854775809") {
    (void)memory::allocate((std::size_t(1) << 63) + 1);
};
BAD("sizes", "host tensor larger than memory", Expect::out_of_memory, "out of host memory") {
    (void)empty<float>({std::int64_t(1) << 60}, {.space = MemorySpace::host});
};
BAD("sizes", "pinned tensor larger than memory", Expect::out_of_memory, "pinned") {
    (void)empty<float>({std::int64_t(1) << 60}, {.space = MemorySpace::pinned});
};
// The host factories that fill: the size is checked (as empty's) before anything is staged or filled.
BAD("sizes", "full in host memory larger than memory", Expect::out_of_memory, "out of host memory") {
    (void)full<float>({std::int64_t(1) << 40}, 1.f, {.space = MemorySpace::host});
};
BAD("sizes", "ones in pinned memory larger than memory", Expect::out_of_memory, "pinned") {
    (void)ones<float>({std::int64_t(1) << 40}, {.space = MemorySpace::pinned});
};
BAD("sizes", "arange in host memory larger than memory", Expect::out_of_memory, "out of host memory") {
    (void)arange<float>(0, double(std::int64_t(1) << 40), 1, {.space = MemorySpace::host});
};
BAD("shapes", "full in host memory whose byte count overflows", Expect::invalid_argument, "overflow the byte count") {
    (void)full<float>({std::int64_t(1) << 62}, 1.f, {.space = MemorySpace::host});
};
BAD("shapes", "ones in pinned memory whose byte count overflows", Expect::invalid_argument, "overflow the byte count") {
    (void)ones<double>({std::int64_t(1) << 61}, {.space = MemorySpace::pinned});
};
BAD("sizes", "managed tensor larger than the device", Expect::out_of_memory, "managed") {
    (void)empty<float>({std::int64_t(1) << 45}, {.space = MemorySpace::managed});
};
BAD("sizes", "raw pinned request of SIZE_MAX / 2", Expect::out_of_memory, "pinned") { (void)rt::malloc_pinned(size_max / 2); };
BAD("sizes", "every OOM is an Error too", Expect::out_of_memory, "tried to allocate") {
    try {
        (void)empty<float>({std::int64_t(1) << 45});
    } catch (const Error&) {
        throw;  // caught as the base first, rethrown as what it is
    }
};
DEFINED("sizes", "OOM messages print sizes without a sign") {
    try {
        (void)memory::allocate(size_max - 7);
        expect(false, "no OutOfMemoryError");
    } catch (const OutOfMemoryError& e) {
        const std::string what = e.what();
        expect(what.find("-") == std::string::npos || what.find("tried to allocate -") == std::string::npos,
               "negative size in: " + what);
        expect(what.find("18446744073709551608") != std::string::npos, "size missing in: " + what);
    }
};
BAD("sizes", "arange with a NaN step", Expect::invalid_argument, "must be finite") { (void)arange<float>(0, 10, std::nan("")); };
BAD("sizes", "arange to infinity", Expect::invalid_argument, "must be finite") {
    (void)arange<float>(0, std::numeric_limits<double>::infinity());
};
BAD("sizes", "arange<int64> whose last value passes int64 (2^63 + 1024)", Expect::invalid_argument, "beyond the range of int64") {
    (void)arange<std::int64_t>(0x1p63 - 1024, 0x1p63 + 2048, 1024);
};
BAD("views", "to_string with edge 0", Expect::invalid_argument, "edge = 0") { (void)zeros<float>({3}).to_string(0); };
BAD("sizes", "arange with step 0", Expect::invalid_argument, "step must not be 0") { (void)arange<float>(0, 10, 0); };
BAD("sizes", "arange<int8> with a step that truncates to 0", Expect::invalid_argument, "step 0.5 is 0 in int8") {
    (void)arange<std::int8_t>(0, 10, 0.5);
};
BAD("sizes", "arange of 10^18 elements", Expect::invalid_argument, "more than a tensor can index") {
    (void)arange<std::int64_t>(0, 1e18, 1);
};
BAD("sizes", "arange past int8", Expect::invalid_argument, "beyond the range of int8") { (void)arange<std::int8_t>(0, 300); };
BAD("sizes", "arange below uint8", Expect::invalid_argument, "beyond the range of uint8") { (void)arange<std::uint8_t>(-3, 5); };
BAD("sizes", "an int64 arange to an unsigned bound beyond int64", Expect::invalid_argument, "must be int64 values") {
    (void)arange<std::int64_t>(0ull, ~0ull);
};
BAD("sizes", "an int64 arange of more than 2^53 elements", Expect::invalid_argument, "more elements than a tensor can index") {
    (void)arange<std::int64_t>(std::numeric_limits<std::int64_t>::min(), std::int64_t(0));
};
BAD("sizes", "arange past float16", Expect::invalid_argument, "beyond the range of float16") {
    (void)arange<__half>(0, 200000, 1000);
};
DEFINED("sizes", "arange counting down") {
    const auto v = arange<std::int32_t>(5, 0, -2).to_vector();
    expect(v == std::vector<std::int32_t>{5, 3, 1}, "arange(5, 0, -2)");
};
DEFINED("sizes", "arange with an empty range") { expect(arange<float>(5, 0).numel() == 0, "arange(5, 0) is empty"); };
BAD("sizes", "from_blob spanning more bytes than memory", Expect::invalid_argument, "spans more bytes") {
    static float x[4];
    (void)from_blob<float>(x, {i64max}, MemorySpace::host);
};
BAD("sizes", "from_blob strides reaching before the pointer", Expect::invalid_argument, "reach before the pointer") {
    static float x[4];
    (void)from_blob<float>(x, {2, 2}, MemorySpace::host, Device{0}, {}, Shape{-1, 1});
};

// ---- host conversions: the device casts' semantics ------------------------------------------------
DEFINED("conversions", "to<int32>() of NaN and infinities") {
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    const auto v = from_host<float>({nan, inf, -inf, 1e10f, -1e10f, -2.7f}, {6}, {.space = MemorySpace::host})
                       .to<std::int32_t>()
                       .to_vector();
    const std::vector<std::int32_t> want{0, 2147483647, -2147483647 - 1, 2147483647, -2147483647 - 1, -2};
    expect(v == want, "NaN->0, saturation, truncation toward zero");
};
DEFINED("conversions", "to<uint8>() saturates") {
    const auto v = from_host<float>({300.f, -5.f, 254.9f}, {3}, {.space = MemorySpace::host}).to<std::uint8_t>().to_vector();
    expect(v == std::vector<std::uint8_t>{255, 0, 254}, "300 -> 255, -5 -> 0, 254.9 -> 254");
};
DEFINED("conversions", "to<int64>() of 9.3e18 saturates") {
    const auto v = from_host<double>({9.3e18, -9.3e18}, {2}, {.space = MemorySpace::host}).to<std::int64_t>().to_vector();
    expect(v[0] == std::numeric_limits<std::int64_t>::max() && v[1] == std::numeric_limits<std::int64_t>::min(), "int64 saturation");
};
DEFINED("conversions", "to<int32>() on the device side agrees") {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const auto v = from_host<float>({nan, 3e9f, -3e9f}, {3}).to<std::int32_t>().to_vector();
    expect(v == std::vector<std::int32_t>{0, 2147483647, -2147483647 - 1}, "device tensor .to<int32>()");
};
DEFINED("conversions", "to<bool>() is != 0") {
    const auto v = from_host<float>({0.f, 0.5f, -0.f, std::numeric_limits<float>::quiet_NaN()}, {4}, {.space = MemorySpace::host})
                       .to<bool>()
                       .to_vector();
    expect(!v[0] && v[1] && !v[2] && v[3], "0 -> false, 0.5 -> true, -0 -> false, NaN -> true");
};
DEFINED("conversions", "convert<int16 range> from half infinity") {
    expect(convert<std::int8_t>(__float2half(std::numeric_limits<float>::infinity())) == 127, "half inf -> int8 127");
};
DEFINED("conversions", "dtype names print with %s") {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s/%s", dtype_traits<__nv_bfloat16>::name, dtype_name(DType::i64));
    expect(std::string(buf) == "bfloat16/int64", std::string("printed ") + buf);
};

// ---- copies into existing tensors ------------------------------------------------------------------
BAD("copies", "copy_ of another shape", Expect::invalid_argument, "copy_: the source has shape [3]") { dev({4}).copy_(dev({3})); };
BAD("copies", "copy_ from an undefined tensor", Expect::invalid_argument, "source is an undefined") { dev({4}).copy_(Tensor<float>{}); };
BAD("copies", "copy_ into an undefined tensor", Expect::invalid_argument, "destination is an undefined") {
    Tensor<float>{}.copy_(dev({4}));
};
BAD("copies", "copy_ into a broadcast view", Expect::invalid_argument, "reaches some elements through more than one index") {
    dev({1, 4}).expand({3, 4}).copy_(dev({3, 4}));
};
BAD("copies", "copy_ between overlapping views", Expect::invalid_argument, "overlap in memory") {
    const auto t = dev({10});
    t.slice(0, 0, 8).copy_(t.slice(0, 2, 10));
};
BAD("copies", "copy_ between overlapping blobs", Expect::invalid_argument, "overlap in memory") {
    const auto t = dev({10});
    const auto alias = from_blob<float>(t.data() + 1, {8}, MemorySpace::device, t.device());
    t.slice(0, 0, 8).copy_(alias);
};
DEFINED("copies", "copy_ between interleaved views that share no element (the right half of each row over its left)") {
    const auto t = iota_on({5, 6}, MemorySpace::device);  // the halves' byte ranges cross
    t.narrow(1, 0, 3).copy_(t.narrow(1, 3, 3));
    auto want = iota_values(30);
    for (std::size_t k = 0; k < 30; ++k)
        if (k % 6 < 3) want[k] = want[k + 3];
    expect(t.to_vector() == want, "each row's right half on both halves");
};
BAD("copies", "copy_ between interleaved views that share a column", Expect::invalid_argument, "overlap in memory") {
    const auto t = dev({5, 6});
    t.narrow(1, 0, 3).copy_(t.narrow(1, 2, 3));
};
DEFINED("copies", "copy_ onto itself changes nothing") {
    const auto t = iota_on({5}, MemorySpace::device);
    t.copy_(t);
    expect(t.to_vector() == iota_values(5), "values kept");
};
namespace {
// Copies a [7, 5] iota from `src_space` (transposed when `strided_src`) into a poisoned [5, 7]
// destination in `dst_space` (a transposed view when `strided_dst`) and checks every element.
void check_copy(MemorySpace src_space, bool strided_src, MemorySpace dst_space, bool strided_dst) {
    const auto base = iota_on({7, 5}, src_space);
    const Tensor<float> src = strided_src ? base.transpose(0, 1) : base.contiguous().view({5, 7});
    const auto dst_storage = full<float>({strided_dst ? 7 : 5, strided_dst ? 5 : 7}, -999.f, {.space = dst_space});
    const Tensor<float> dst = strided_dst ? dst_storage.transpose(0, 1) : dst_storage;
    const Stream s = Stream::create();
    dst.copy_(src, s);
    s.synchronize();
    // By index arithmetic, not through tessel's gathers: dst[i][j] must be src[i][j], which is
    // base[j][i] = 5 j + i + 0.5 transposed, else element 7 i + j of the iota.
    const auto storage = dst_storage.to_vector();
    for (std::size_t i = 0; i < 5; ++i)
        for (std::size_t j = 0; j < 7; ++j) {
            const float want = float(strided_src ? 5 * j + i : 7 * i + j) + 0.5f;
            const float got = storage[strided_dst ? 5 * j + i : 7 * i + j];
            expect(got == want, "element [" + std::to_string(i) + ", " + std::to_string(j) + "]: " + std::to_string(got) +
                                    " != " + std::to_string(want));
        }
}
}  // namespace
DEFINED("copies", "copy_ device <- strided device") { check_copy(MemorySpace::device, true, MemorySpace::device, false); };
DEFINED("copies", "copy_ strided device <- device") { check_copy(MemorySpace::device, false, MemorySpace::device, true); };
DEFINED("copies", "copy_ strided device <- strided host") { check_copy(MemorySpace::host, true, MemorySpace::device, true); };
DEFINED("copies", "copy_ strided host <- strided device") { check_copy(MemorySpace::device, true, MemorySpace::host, true); };
DEFINED("copies", "copy_ pinned <- device") { check_copy(MemorySpace::device, false, MemorySpace::pinned, false); };
DEFINED("copies", "copy_ managed <- strided pinned") { check_copy(MemorySpace::pinned, true, MemorySpace::managed, false); };
DEFINED("copies", "copy_ strided managed <- host") { check_copy(MemorySpace::host, false, MemorySpace::managed, true); };
DEFINED("copies", "copy_ host <- host") { check_copy(MemorySpace::host, true, MemorySpace::host, false); };

// ---- handles ------------------------------------------------------------------------------------
BAD("handles", "record on a moved-from Event", Expect::invalid_argument, "moved from") {
    Event e;
    Event f(std::move(e));
    e.record(Stream());
};
BAD("handles", "record on an Event moved from by assignment", Expect::invalid_argument, "moved from") {
    Event e, f;
    f = std::move(e);  // e held f's old event when the assignment swapped them
    expect(f.valid() && !e.valid(), "the assigned-to event valid, the moved-from one not");
    e.record(Stream());
};
BAD("handles", "query of a moved-from Event", Expect::invalid_argument, "Event::query") {
    Event e;
    Event f(std::move(e));
    (void)e.query();
};
BAD("handles", "synchronize on a moved-from Event", Expect::invalid_argument, "Event::synchronize") {
    Event e;
    Event f(std::move(e));
    e.synchronize();
};
BAD("handles", "elapsed_ms to a moved-from Event", Expect::invalid_argument, "elapsed_ms") {
    Event a, b;
    a.record(Stream());
    Event c(std::move(b));
    (void)a.elapsed_ms(b);
};
BAD("handles", "a stream waiting for a moved-from Event", Expect::invalid_argument, "Stream::wait") {
    Event e;
    Event f(std::move(e));
    Stream::create().wait(e);
};
BAD("handles", "elapsed_ms without timing", Expect::invalid_argument, "need timing") {
    Event a(false), b(false);
    a.record(Stream());
    b.record(Stream());
    b.synchronize();
    (void)a.elapsed_ms(b);
};
BAD("handles", "elapsed_ms of an event never recorded", Expect::cuda_error, "never recorded") {
    Event a, b;
    b.record(Stream());
    b.synchronize();
    (void)a.elapsed_ms(b);
};
BAD("handles", "Event recorded on another device's stream", Expect::invalid_argument, "belongs to device") {
    Event e;
    Stream s = Stream::default_stream(Device{1});
    e.record(s);
};
DEFINED("handles", "a moved-from Stream still names its stream") {
    Stream s = Stream::create();
    const rt::stream_t h = s.handle();
    Stream t(std::move(s));
    expect(s.handle() == h && t.handle() == h, "both name the stream");
    s.synchronize();
};
DEFINED("handles", "a default Stream is the default stream") {
    Stream s;
    expect(s.is_default() && s.query(), "default stream, idle");
};
DEFINED("handles", "a moved-into Event is usable") {
    Event a;
    Event b = std::move(a);
    b.record(Stream());
    b.synchronize();
    expect(b.query() && !a.valid(), "moved-into event records");
};

// ---- DLPack ---------------------------------------------------------------------------------------
namespace {
// A producer's capsule over `data`; counts its deleter calls.
struct Capsule {
    std::int64_t shape[8] = {2, 3};
    std::int64_t strides[8] = {3, 1};
    DLManagedTensor m{};
    int deleted = 0;
    Capsule(void* data, DLDevice device, DLDataType dtype = {kDLFloat, 32, 1}, int ndim = 2) {
        m.dl_tensor = DLTensor{data, device, ndim, dtype, shape, strides, 0};
        m.manager_ctx = this;
        m.deleter = [](DLManagedTensor* self) { ++static_cast<Capsule*>(self->manager_ctx)->deleted; };
    }
};
float host_block[64];
}  // namespace
BAD("dlpack", "null capsule", Expect::invalid_argument, "null DLManagedTensor") { (void)from_dlpack<float>(nullptr); };
BAD("dlpack", "null shape array", Expect::invalid_argument, "shape array is null") {
    Capsule c(host_block, {kDLCPU, 0});
    c.m.dl_tensor.shape = nullptr;
    (void)from_dlpack<float>(&c.m);
};
BAD("dlpack", "null data with elements", Expect::invalid_argument, "null data pointer") {
    Capsule c(nullptr, {kDLCPU, 0});
    (void)from_dlpack<float>(&c.m);
};
BAD("dlpack", "misaligned byte_offset", Expect::invalid_argument, "byte_offset 2") {
    Capsule c(host_block, {kDLCPU, 0});
    c.m.dl_tensor.byte_offset = 2;
    (void)from_dlpack<float>(&c.m);
};
BAD("dlpack", "misaligned data pointer", Expect::invalid_argument, "not aligned") {
    Capsule c(reinterpret_cast<char*>(host_block) + 1, {kDLCPU, 0});
    (void)from_dlpack<float>(&c.m);
};
BAD("dlpack", "CPU memory with device_id 3", Expect::invalid_argument, "device_id 3") {
    Capsule c(host_block, {kDLCPU, 3});
    (void)from_dlpack<float>(&c.m);
};
BAD("dlpack", "CUDA host memory with device_id -1", Expect::invalid_argument, "device_id -1") {
    Capsule c(host_block, {kDLCUDAHost, -1});
    (void)from_dlpack<float>(&c.m);
};
BAD("dlpack", "CUDA device 7", Expect::invalid_argument, "CUDA device 7 does not exist") {
    Capsule c(host_block, {kDLCUDA, 7});
    (void)from_dlpack<float>(&c.m);
};
BAD("dlpack", "CUDA managed device -1", Expect::invalid_argument, "managed device -1 does not exist") {
    Capsule c(host_block, {kDLCUDAManaged, -1});
    (void)from_dlpack<float>(&c.m);
};
BAD("dlpack", "an OpenCL device", Expect::unsupported, "device type 4") {
    Capsule c(host_block, {kDLOpenCL, 0});
    (void)from_dlpack<float>(&c.m);
};
BAD("dlpack", "rank 9", Expect::invalid_argument, "rank 9") {
    Capsule c(host_block, {kDLCPU, 0}, {kDLFloat, 32, 1}, 9);
    (void)from_dlpack<float>(&c.m);
};
BAD("dlpack", "negative rank", Expect::invalid_argument, "rank -1") {
    Capsule c(host_block, {kDLCPU, 0}, {kDLFloat, 32, 1}, -1);
    (void)from_dlpack<float>(&c.m);
};
BAD("dlpack", "a negative size", Expect::invalid_argument, "negative") {
    Capsule c(host_block, {kDLCPU, 0});
    c.shape[0] = -2;
    (void)from_dlpack<float>(&c.m);
};
BAD("dlpack", "float64 capsule read as float32", Expect::invalid_argument, "holds float64") {
    Capsule c(host_block, {kDLCPU, 0}, {kDLFloat, 64, 1});
    (void)from_dlpack<float>(&c.m);
};
BAD("dlpack", "vector lanes", Expect::invalid_argument, "float32x4") {
    Capsule c(host_block, {kDLCPU, 0}, {kDLFloat, 32, 4});
    (void)from_dlpack<float>(&c.m);
};
DEFINED("dlpack", "bool travels with DLPack 1.x's code 6 (PyTorch's)") {
    DLManagedTensor* m = to_dlpack(zeros<bool>({2}));
    const bool coded = m->dl_tensor.dtype.code == 6 && m->dl_tensor.dtype.bits == 8;
    m->deleter(m);
    expect(coded, "bool as code 6, 8 bits");
};
BAD("dlpack", "a reversed view (negative stride)", Expect::invalid_argument, "negative stride -1") {
    Capsule c(host_block + 5, {kDLCPU, 0});
    c.strides[0] = 3, c.strides[1] = -1;
    (void)from_dlpack<float>(&c.m);
};
BAD("dlpack", "an unknown type code", Expect::invalid_argument, "type code 99") {
    Capsule c(host_block, {kDLCPU, 0}, {99, 32, 1});
    (void)from_dlpack<float>(&c.m);
};
BAD("dlpack", "a DLPack 1.x device type beyond 0.6's enum", Expect::unsupported, "device type 17") {
    Capsule c(host_block, {kDLCPU, 0});
    const std::int32_t maia = 17;
    std::memcpy(&c.m.dl_tensor.device.device_type, &maia, sizeof maia);
    (void)from_dlpack<float>(&c.m);
};
BAD("dlpack", "a stride of INT64_MAX", Expect::invalid_argument, "overflows 64 bits") {
    Capsule c(host_block, {kDLCPU, 0});
    c.strides[0] = std::numeric_limits<std::int64_t>::max();
    (void)from_dlpack<float>(&c.m);
};
BAD("dlpack", "to_dlpack of an undefined tensor (nothing allocated before the check: LeakSanitizer)",
    Expect::invalid_argument, "to_dlpack: the tensor is undefined") {
    (void)to_dlpack(Tensor<float>{});
};
DEFINED("dlpack", "a rejected capsule is released exactly once") {
    Capsule c(host_block, {kDLCPU, 9});
    try {
        (void)from_dlpack<float>(&c.m);
    } catch (const InvalidArgument&) {
    }
    expect(c.deleted == 1, "deleter ran " + std::to_string(c.deleted) + " times");
};
DEFINED("dlpack", "an accepted capsule is released with its last view") {
    Capsule c(host_block, {kDLCPU, 0});
    {
        const auto t = from_dlpack<float>(&c.m);
        expect(t.shape() == Shape{2, 3} && c.deleted == 0, "wrapped, not yet released");
    }
    expect(c.deleted == 1, "released once");
};
DEFINED("dlpack", "a round trip keeps strides and values") {
    const auto t = iota_on({4, 6}, MemorySpace::device).transpose(0, 1);
    DLManagedTensor* m = to_dlpack(t);
    const auto back = from_dlpack<float>(m);
    expect(back.strides() == t.strides() && back.to_vector() == t.to_vector(), "same view");
};
BAD("dlpack", "null data with an empty shape is fine but device 3 is not", Expect::invalid_argument, "device 3") {
    Capsule c(nullptr, {kDLCUDA, 3});
    c.shape[0] = 0;
    (void)from_dlpack<float>(&c.m);
};

// ---- from_blob ------------------------------------------------------------------------------------
BAD("from_blob", "null pointer with elements", Expect::invalid_argument, "from_blob: null pointer") {
    (void)from_blob<float>(nullptr, {3}, MemorySpace::host);
};
DEFINED("from_blob", "null pointer without elements") {
    expect(from_blob<float>(nullptr, {0, 3}, MemorySpace::host).numel() == 0, "an empty blob may be null");
};
BAD("from_blob", "misaligned pointer", Expect::invalid_argument, "not aligned to 8 bytes") {
    (void)from_blob<double>(reinterpret_cast<double*>(reinterpret_cast<char*>(host_block) + 4), {2}, MemorySpace::host);
};
BAD("from_blob", "device memory on device 12", Expect::invalid_argument, "device 12, which does not exist") {
    (void)from_blob<float>(host_block, {2}, MemorySpace::device, Device{12});
};
BAD("from_blob", "managed memory on device -1", Expect::invalid_argument, "device -1") {
    (void)from_blob<float>(host_block, {2}, MemorySpace::managed, Device{-1});
};
DEFINED("from_blob", "a rejected blob never runs its deleter") {
    int calls = 0;
    try {
        (void)from_blob<float>(nullptr, {3}, MemorySpace::host, Device{0}, [&](void*) { ++calls; });
    } catch (const InvalidArgument&) {
    }
    expect(calls == 0, "deleter ran");
};
BAD_ENV("tensor", "peer access between devices that cannot", Expect::unsupported, "device 0 cannot access device 1's memory directly",
        {{"TESSEL_SIM_DEVICES", "2"}, {"TESSEL_SIM_PEER", "0"}}) {
    enable_peer_access(Device{0}, Device{1});
};
BAD_ENV("tensor", "peer access of a device that does not exist with itself", Expect::invalid_argument, "device 9 does not exist",
        {{"TESSEL_SIM_DEVICES", "2"}}) {
    enable_peer_access(Device{9}, Device{9});  // returned silently: the a == b shortcut came first
};

// A kernel run by device 0 on memory of device 1, the pointer handed over raw (as a program does
// with memory it allocated itself): the GPU's page tables fault (an illegal address) unless device
// 0 may reach device 1's memory: peer access for cudaMalloc's memory, the pool's access for memory
// from a pool (the async backend's), which peer access does not reach. The sim checks the same.
namespace {
__global__ void add_one(float* x, int n) {
    const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n) x[i] += 1;
}
// The same with the pointer inside a parameter structure, after another field (no padding: the
// sim reads only structures whose every byte is a field's).
struct AddOneJob {
    std::int64_t n;
    float* x;
};
__global__ void add_one_job(AddOneJob job) {
    const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < job.n) job.x[i] += 1.f;
}
void add_one_on_device_0_to_memory_of_device_1(bool in_structure = false) {
    Tensor<float> x = full<float>({100}, 2.f, {.device = Device{1}});
    current_stream(Device{1}).synchronize();
    const Stream zero = current_stream(Device{0});
    if (in_structure) launch(add_one_job, 1, 128, 0, zero.handle(), AddOneJob{100, x.data()});
    else launch(add_one, 1, 128, 0, zero.handle(), x.data(), 100);
    zero.synchronize();
    expect(x.to_vector() == std::vector<float>(100, 3.f), "device 0's kernel did not add one to device 1's memory");
}
}  // namespace
#if defined(TESSEL_BACKEND_SIM)
BAD_ENV("tensor", "a kernel on device 0 reading device 1's memory without peer access", Expect::cuda_error,
        "points into device 1's memory, and device 0 has no peer access to it (tessel::enable_peer_access(Device{0}, Device{1}))",
        {{"TESSEL_SIM_DEVICES", "2"}}) {
    add_one_on_device_0_to_memory_of_device_1();
};
BAD_ENV("tensor", "a kernel on device 0 reading device 1's memory through a pointer in a structure", Expect::cuda_error,
        ", bytes 8-15 of the structure) points into device 1's memory, and device 0 has no peer access to it", {{"TESSEL_SIM_DEVICES", "2"}}) {
    add_one_on_device_0_to_memory_of_device_1(true);
};
BAD_ENV("tensor", "a kernel on device 0 reading device 1's pool memory with peer access but no pool access", Expect::cuda_error,
        "allocated from its memory pool, which grants device 0 no access (peer access does not reach pools: cudaMemPoolSetAccess on device 1's pool",
        {{"TESSEL_SIM_DEVICES", "2"}, {"TESSEL_ALLOC_CONF", "backend:async"}}) {
    TESSEL_CUDA_CHECK(rt::api::cudaSetDevice(0));
    TESSEL_CUDA_CHECK(rt::api::cudaDeviceEnablePeerAccess(1, 0));  // CUDA's own call: the pool is not granted
    add_one_on_device_0_to_memory_of_device_1();
};
#endif
BAD_ENV("tensor", "a kernel on device 0 reading device 1's memory after enable_peer_access", Expect::defined, "",
        {{"TESSEL_SIM_DEVICES", "2"}}) {
    if (device_count() < 2 || !can_access_peer(Device{0}, Device{1})) return;
    enable_peer_access(Device{0}, Device{1});
    add_one_on_device_0_to_memory_of_device_1();
};
BAD_ENV("tensor", "a kernel on device 0 reading device 1's pool memory after enable_peer_access", Expect::defined, "",
        {{"TESSEL_SIM_DEVICES", "2"}, {"TESSEL_ALLOC_CONF", "backend:async"}}) {
    if (device_count() < 2 || !can_access_peer(Device{0}, Device{1})) return;
    enable_peer_access(Device{0}, Device{1});
    add_one_on_device_0_to_memory_of_device_1();
};
BAD_ENV("tensor", "a kernel on device 0 reading device 1's memory through a structure after enable_peer_access", Expect::defined, "",
        {{"TESSEL_SIM_DEVICES", "2"}}) {
    if (device_count() < 2 || !can_access_peer(Device{0}, Device{1})) return;
    enable_peer_access(Device{0}, Device{1});
    add_one_on_device_0_to_memory_of_device_1(true);
};

BAD("tensor", "a hand-made layout with fewer strides than dims", Expect::invalid_argument, "Tensor: layout of shape [2, 3] has 1 strides") {
    Layout l;
    l.shape = Shape{2, 3};
    l.strides = Shape{3};
    (void)Tensor<float>(Storage::allocate(6 * sizeof(float), MemorySpace::device, Device{0}, current_stream().handle()), l);
};

// ---- monitoring: the sampler's options and policies --------------------------------------------
BAD_ENV("monitor", "a sampler whose reading fails (a bad TESSEL_ALLOC_CONF): stop() rethrows it", Expect::invalid_argument,
        "TESSEL_ALLOC_CONF", {{"TESSEL_ALLOC_CONF", "garbage"}}) {
    monitor::Monitor m({.period = std::chrono::milliseconds(2)});
    m.start();  // the thread's samples read memory::stats, which throws: kept, not std::terminate
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    m.stop();
};
BAD("monitor", "a device listed twice", Expect::invalid_argument, "device 0 is listed twice") {
    monitor::Monitor m({.devices = {Device{0}, Device{0}}});
};
BAD("monitor", "a period beyond a day", Expect::invalid_argument, "at most a day") {
    monitor::Monitor m({.period = std::chrono::milliseconds::max()});
};
BAD("monitor", "a zero sampling period", Expect::invalid_argument, "the period must be positive") {
    monitor::Monitor m({.period = std::chrono::milliseconds(0)});
};
BAD("monitor", "an empty history", Expect::invalid_argument, "at least one sample") { monitor::Monitor m({.history = 0}); };
BAD("monitor", "a device that does not exist", Expect::invalid_argument, "device 99 does not exist") {
    monitor::Monitor m({.devices = {Device{99}}});
};
BAD("monitor", "a policy without a callback", Expect::invalid_argument, "policy needs a callback") {
    monitor::Monitor m;
    m.add_policy(monitor::Policy::temperature_above(90, nullptr));
};
BAD("monitor", "a leak watch of no checkpoints", Expect::invalid_argument, "the leak watch needs 1 to 1023 checkpoints") {
    monitor::Monitor m;
    m.add_policy(monitor::Policy::allocator_growth(0, [](const monitor::Alert&) {}));
};

#if defined(TESSEL_NCCL_AVAILABLE)
// ---- collectives: communicators, tensors, ranks, the job's environment ---------------------------
namespace {
dist::Communicator one_rank() { return dist::Communicator::create_local({Device{0}})[0]; }
}  // namespace
BAD("dist", "create_local on a device that does not exist", Expect::invalid_argument, "device 7 does not exist") {
    (void)dist::Communicator::create_local({Device{7}});
};
BAD("dist", "create_local with a device twice", Expect::invalid_argument, "device 0 is listed twice") {
    (void)dist::Communicator::create_local({Device{0}, Device{0}});
};
BAD("dist", "create with a rank beyond the size", Expect::invalid_argument, "rank 3 is not in [0, 2)") {
    (void)dist::Communicator::create(3, 2, dist::UniqueId{}, Device{0});
};
BAD("dist", "a zero timeout", Expect::invalid_argument, "the timeout must be positive") {
    (void)dist::Communicator::create_local({Device{0}}, {.timeout = std::chrono::milliseconds(0)});
};
BAD("dist", "all_reduce of a host tensor", Expect::invalid_argument, "all_reduce: the tensor is in host memory") {
    one_rank().all_reduce(host({4}));
};
BAD("dist", "all_reduce of a strided view", Expect::invalid_argument, "is not contiguous; pass t.contiguous()") {
    one_rank().all_reduce(dev({4, 6}).transpose(0, 1));
};
BAD("dist", "avg of integers", Expect::invalid_argument, "avg of integer tensors would truncate") {
    one_rank().all_reduce(zeros<std::int32_t>({4}), dist::ReduceOp::avg);
};
BAD("dist", "broadcast from a root that is not a rank", Expect::invalid_argument, "root 5 is not a rank of this communicator (1 ranks)") {
    one_rank().broadcast(dev({4}), 5);
};
BAD("dist", "all_gather into an output of the wrong size", Expect::invalid_argument, "all_gather: out must hold 1 x 4 elements") {
    one_rank().all_gather(dev({4}), dev({5}));
};
BAD("dist", "a timeout beyond a day", Expect::invalid_argument, "the timeout must be positive and at most a day") {
    (void)dist::Communicator::create_local({Device{0}}, {.timeout = std::chrono::milliseconds::max()});  // now() + it overflowed
};
BAD("dist", "all_to_all in place", Expect::invalid_argument, "all_to_all: in and out overlap; NCCL has no in-place all_to_all") {
    const auto t = dev({4});
    one_rank().all_to_all(t, t);  // a rank's receive overwrote what it still had to send
};
BAD("dist", "all_gather overlapping out outside NCCL's in-place layout", Expect::invalid_argument, "not in NCCL's in-place layout") {
    const auto buf = dev({8});
    one_rank().all_gather(buf.narrow(0, 1, 4), buf.narrow(0, 0, 4));
};
BAD("dist", "a send to itself outside a group", Expect::invalid_argument, "send: peer 0 is this rank") {
    one_rank().send(dev({4}), 0);  // waited for itself until the watchdog fired
};
BAD_ENV("dist", "TESSEL_DIST_DEBUG not 0 or 1", Expect::invalid_argument, "TESSEL_DIST_DEBUG='yes' is not an integer between 0 and 1",
        {{"TESSEL_DIST_DEBUG", "yes"}}) {
    (void)dist::CommOptions{};
};
BAD_ENV("dist", "one thread calling two ranks' all_reduce outside a group (a LibraryError naming dist::group)", Expect::defined, "",
        {{"TESSEL_SIM_DEVICES", "2"}}) {
    const auto comms = dist::Communicator::create_local({Device{0}, Device{1}}, {.timeout = std::chrono::seconds(30)});
    const Stream s0 = Stream::create({}, Device{0});  // rank 0's failed wait stays with its stream
    const auto a = zeros<float>({4}, {.device = Device{0}}), b = zeros<float>({4}, {.device = Device{1}});
    comms[0].all_reduce(a, dist::ReduceOp::sum, s0.handle());
    std::string what;
    try {
        comms[1].all_reduce(b);  // NCCL would deadlock; the sim says so
    } catch (const LibraryError& e) {
        what = e.what();
    }
    expect(what.find("called from one thread outside ncclGroupStart/ncclGroupEnd") != std::string::npos &&
               what.find("tessel::dist::group") != std::string::npos,
           "a LibraryError naming dist::group");
    try {
        s0.synchronize();
    } catch (const Error&) {  // rank 0's collective failed with it
    }
};
BAD_ENV("environment", "from_env without MASTER_PORT", Expect::invalid_argument, "MASTER_PORT is not set",
        {{"RANK", "0"}, {"WORLD_SIZE", "2"}}) {
    (void)dist::Communicator::from_env();
};
BAD_ENV("environment", "from_env with RANK >= WORLD_SIZE", Expect::invalid_argument, "RANK=4 must be in [0, WORLD_SIZE=4)",
        {{"MASTER_PORT", "29500"}, {"RANK", "4"}, {"WORLD_SIZE", "4"}}) {
    (void)dist::Communicator::from_env();
};
BAD_ENV("environment", "from_env with RANK not an integer", Expect::invalid_argument, "RANK='one' is not an integer",
        {{"MASTER_PORT", "29500"}, {"RANK", "one"}, {"WORLD_SIZE", "2"}}) {
    (void)dist::Communicator::from_env();
};
BAD_ENV("environment", "from_env with MASTER_PORT out of range", Expect::invalid_argument, "MASTER_PORT=70000 is not a TCP port",
        {{"MASTER_PORT", "70000"}, {"RANK", "0"}, {"WORLD_SIZE", "1"}}) {
    (void)dist::Communicator::from_env();
};
BAD_ENV("environment", "from_env with LOCAL_RANK beyond LOCAL_WORLD_SIZE", Expect::invalid_argument, "LOCAL_RANK=2 must be in [0, LOCAL_WORLD_SIZE=2)",
        {{"MASTER_PORT", "29500"}, {"RANK", "2"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}}) {
    (void)dist::Communicator::from_env();
};
BAD_ENV("environment", "from_env with LOCAL_RANK beyond the devices", Expect::invalid_argument, "LOCAL_RANK=99 but this process sees",
        {{"MASTER_PORT", "29500"}, {"RANK", "99"}, {"WORLD_SIZE", "100"}}) {
    (void)dist::Communicator::from_env();
};
#endif
