// A child process for the sim-tsan race check: `tsan_race race` runs a kernel whose missing
// __syncthreads lets threads read a shared slot another thread writes; `tsan_race clean` runs the
// same kernel with the barrier. Under sim-tsan the block's threads are OS threads, so
// ThreadSanitizer reports the first as a data race and stays silent on the second.
#include <tessel/runtime/launch.hpp>

#include <cstdio>
#include <cstring>
#include <vector>

namespace {
template <bool WithBarrier>
__global__ void rotate(const int* in, int* out) {
    __shared__ int s[64];
    const int t = int(threadIdx.x);
    s[t] = in[t];
    if (WithBarrier) __syncthreads();
    out[t] = s[(t + 1) % 64];
}
}  // namespace

int main(int argc, char** argv) {
    const bool race = argc > 1 && std::strcmp(argv[1], "race") == 0;
    std::vector<int> h(64);
    for (int i = 0; i < 64; ++i) h[i] = i * 5;
    int* in = static_cast<int*>(tessel::rt::malloc_device(64 * sizeof(int)));
    int* out = static_cast<int*>(tessel::rt::malloc_device(64 * sizeof(int)));
    tessel::rt::memcpy(in, h.data(), 64 * sizeof(int));
    if (race) tessel::launch(rotate<false>, 1, 64, 0, nullptr, in, out);
    else tessel::launch(rotate<true>, 1, 64, 0, nullptr, in, out);
    tessel::rt::memcpy(h.data(), out, 64 * sizeof(int));
    tessel::rt::free_device(in);
    tessel::rt::free_device(out);
    int wrong = 0;
    for (int i = 0; i < 64; ++i) wrong += h[i] != ((i + 1) % 64) * 5;
    std::printf("%s kernel: %d of 64 outputs differ from the race-free result\n", race ? "racy" : "clean", wrong);
    return race || wrong == 0 ? 0 : 1;
}
