// A child process for the sim-asan check: `asan_oob global` writes one element past a device
// allocation, `asan_oob shared` one element past the block's dynamic shared memory. Under sim-asan
// AddressSanitizer must report each as a heap-buffer-overflow in the kernel's source line.
#include <tessel/runtime/launch.hpp>

#include <cstring>

namespace {
__global__ void write_past_global(float* x, int n) {
    const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
    if (i <= n) x[i] = 1.f;  // off by one
}
__global__ void write_past_shared(float* x, int n) {
    TESSEL_DYNAMIC_SHARED(float, s);
    s[threadIdx.x + 1] = float(threadIdx.x);  // the last thread writes one past the end
    __syncthreads();
    if (int(threadIdx.x) < n) x[threadIdx.x] = s[threadIdx.x];
}
}  // namespace

int main(int argc, char** argv) {
    const bool shared = argc > 1 && std::strcmp(argv[1], "shared") == 0;
    float* x = static_cast<float*>(tessel::rt::malloc_device(100 * sizeof(float)));
    if (shared) tessel::launch(write_past_shared, 1, 64, 64 * sizeof(float), nullptr, x, 64);
    else tessel::launch(write_past_global, 1, 128, 0, nullptr, x, 100);
    tessel::rt::device_synchronize();
    tessel::rt::free_device(x);
    return 0;
}
