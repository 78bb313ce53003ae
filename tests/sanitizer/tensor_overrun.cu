// A child process for the sim-asan checks of the caches' poisoning (memory/asan.hpp): a tensor is a
// piece of a larger cached segment, so only the poisoning makes AddressSanitizer report a kernel
// that writes one element past it. `tensor_overrun <mode>` does so for a tensor that is
//   fresh   the first block carved from a new segment (the write lands in the rounding slack),
//   reused  a freed block handed out again (the same slack, after its free poisoned it whole),
//   split   split from a larger free block (the write lands in the free rest of the segment),
//   pinned  a pinned host block of the pinned cache, written past on the host;
// each must be reported as use-after-poison in write_elements. `tensor_overrun clean` is the
// negative control: the same allocations written in bounds, plus the orders in which a freed
// block's own work still runs after the host frees it, must draw no report.
#include <tessel/memory/allocator.hpp>
#include <tessel/memory/caching_allocator.hpp>  // the allocators themselves
#include <tessel/memory/host_allocator.hpp>
#include <tessel/runtime/launch.hpp>
#include <tessel/tensor/tensor.hpp>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "../support/slow_kernels.hpp"

namespace {

namespace mem = tessel::memory;

// x[0, count) = 1: with count = n + 1 the last write is one past an n-element tensor.
__global__ void write_elements(float* x, int count) {
    const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < count) x[i] = 1.f;
}

[[gnu::noinline]] void write_elements_on_host(float* x, int count) {
    for (int i = 0; i < count; ++i) static_cast<volatile float*>(x)[i] = 1.f;
}

void write(const tessel::Tensor<float>& t, int count) {
    tessel::launch(write_elements, (count + 127) / 128, 128, 0, nullptr, t.data(), count);
    tessel::rt::device_synchronize();
}

int fail(const std::string& why) {
    std::fprintf(stderr, "tensor_overrun: %s\n", why.c_str());
    return 2;
}

// Every allocator's books still add up (the checks a fuzzer makes after each step).
int check_books() {
    auto bad = mem::check_invariants();
    for (const auto& s : mem::check_host_invariants()) bad.push_back(s);
    for (const auto& s : bad) std::fprintf(stderr, "invariant: %s\n", s.c_str());
    return bad.empty() ? 0 : fail("the allocators' invariants are broken");
}

// The negative control: in-bounds use, and the legal orders of host frees and queued work.
int clean() {
    const int n = 100;
    {  // fresh, reused and split blocks, written in bounds
        auto a = tessel::empty<float>({n});
        write(a, n);
        float* at = a.data();
        a = {};
        auto b = tessel::empty<float>({n});
        if (b.data() != at) return fail("the freed block was not reused");
        write(b, n);
    }
    {
        auto big = tessel::empty<float>({256 * 1024});
        float* at = big.data();
        big = {};
        auto piece = tessel::empty<float>({128});
        if (piece.data() != at) return fail("the small block was not split from the freed larger one");
        write(piece, 128);
    }
    auto s = tessel::rt::stream_create(true), other = tessel::rt::stream_create(true);
    {  // a freed tensor's kernel still runs while its block is handed out again, smaller
        auto a = tessel::empty<float>({4096}, {.stream = s});
        float* at = a.data();
        tessel::launch(tessel::testing::slow_fill<float>, 4, 128, 0, s, a.data(), 4096, 2.f, 200);
        a = {};  // the kernel above still writes all 4096 elements
        auto b = tessel::empty<float>({1000}, {.stream = s});
        if (b.data() != at) return fail("the freed block was not reused on its stream");
        tessel::launch(write_elements, 8, 128, 0, s, b.data(), 1000);
        tessel::rt::stream_synchronize(s);
    }
    {  // a fill still queued when the tensor is freed (what testing::poison_next does)
        auto a = tessel::empty<float>({3000}, {.stream = s});
        tessel::launch(tessel::testing::slow_add_one<float>, 2, 128, 0, s, a.data(), 3000, 100);
        tessel::rt::memset_async(a.data(), 0xFF, 3000 * sizeof(float), s);
    }
    {  // a reader on another stream, declared with record_stream, outlives the free
        auto a = tessel::empty<float>({5000}, {.stream = s});
        auto y = tessel::empty<float>({5000}, {.stream = other});
        tessel::launch(write_elements, 40, 128, 0, s, a.data(), 5000);
        tessel::rt::stream_synchronize(s);
        tessel::launch(tessel::testing::slow_copy<float>, 4, 128, 0, other, a.data(), y.data(), 5000, 200);
        mem::record_stream(a.data(), other);
        a = {};
        auto b = tessel::empty<float>({10}, {.stream = s});  // must not be a's block while `other` reads it
        tessel::launch(write_elements, 1, 128, 0, s, b.data(), 10);
        tessel::rt::device_synchronize();
    }
    {  // pinned blocks: in bounds, and freed with an asynchronous copy declared pending
        auto* h = static_cast<float*>(mem::allocate_host(n * sizeof(float)));
        write_elements_on_host(h, n);
        mem::deallocate_host(h);
        auto* h2 = static_cast<float*>(mem::allocate_host(n * sizeof(float)));
        if (h2 != h) return fail("the pinned block was not reused");
        write_elements_on_host(h2, n);
        auto d = tessel::empty<float>({n}, {.stream = s});
        tessel::launch(tessel::testing::slow_fill<float>, 1, 128, 0, s, d.data(), n, 3.f, 200);
        tessel::rt::memcpy_async(h2, d.data(), n * sizeof(float), s);
        mem::record_host_use(h2, s);
        mem::deallocate_host(h2);
        tessel::rt::stream_synchronize(s);
        auto* h3 = static_cast<float*>(mem::allocate_host(n * sizeof(float)));
        if (h3 != h2) return fail("the pinned block did not come back once the copy was done");
        for (int i = 0; i < n; ++i)
            if (h3[i] != 3.f) return fail("the pending copy into the freed pinned block did not complete");
        mem::deallocate_host(h3);
    }
    tessel::rt::device_synchronize();
    if (int rc = check_books()) return rc;
    mem::empty_cache();  // the runtime takes its segments back whole
    mem::empty_host_cache();
    if (int rc = check_books()) return rc;
    tessel::rt::stream_destroy(s);
    tessel::rt::stream_destroy(other);
    std::printf("tensor_overrun clean: ok\n");
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    const std::string mode = argc > 1 ? argv[1] : "";
    const int n = 100;
    if (mode == "fresh") {
        auto t = tessel::empty<float>({n});
        write(t, n + 1);
    } else if (mode == "reused") {
        auto a = tessel::empty<float>({n});
        write(a, n);
        float* at = a.data();
        a = {};
        auto t = tessel::empty<float>({n});
        if (t.data() != at) return fail("the freed block was not reused");
        write(t, n + 1);
    } else if (mode == "split") {
        auto big = tessel::empty<float>({256 * 1024});  // 1 MiB of a 2 MiB segment
        float* at = big.data();
        big = {};  // coalesces with the rest: one free 2 MiB block
        auto t = tessel::empty<float>({128});  // 512 bytes: no slack, the next byte is the free rest
        if (t.data() != at) return fail("the small block was not split from the freed larger one");
        write(t, 128 + 1);
    } else if (mode == "pinned") {
        auto* h = static_cast<float*>(mem::allocate_host(n * sizeof(float)));
        write_elements_on_host(h, n + 1);
        mem::deallocate_host(h);
    } else if (mode == "clean") {
        return clean();
    } else {
        return fail("usage: tensor_overrun fresh|reused|split|pinned|clean");
    }
    return fail("the overrun was not reported");
}
