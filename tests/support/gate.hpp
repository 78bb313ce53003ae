// A gate that holds a stream until the host opens it, on a GPU as on the sim: tests queue work
// behind it to show that what should wait for that work does (and, where ordering is missing, that
// it does not), without depending on how long a busy kernel happens to take. The flag lives in
// managed memory that the host writes while the kernel spins on it: a GPU needs
// concurrentManagedAccess (Linux on Pascal and later; the H100/H200 of scripts/device-check.sh).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

#include <tessel/core/kernel.hpp>
#include <tessel/runtime/launch.hpp>
#include <tessel/tensor/tensor.hpp>

namespace tessel::testing {

// Spins until the host writes a non-zero value into *gate. Both sides use atomics (system scope
// here, std::atomic_ref on the host), so ThreadSanitizer sees no race on the gate. A template so
// that every test file including this header shares one kernel.
template <class Flag = std::int32_t>
__global__ void wait_for_gate(Flag* gate) {
    while (atomicAdd_system(gate, 0) == 0) {
    }
}

// A shut gate on `device`. Its destructor opens it, so a test that throws while a stream is held
// does not hang when the gate's memory is freed (cudaFree waits for the device). Under
// ThreadSanitizer the sim runs one grid at a time, so while a gate is shut no other kernel runs on
// any stream: a test must not wait on the host for another kernel then (open_later() first).
class Gate {
public:
    explicit Gate(Device device = current_device())
        : flag_(zeros<std::int32_t>({1}, {.space = MemorySpace::managed, .device = device})) {
        current_stream(device).synchronize();  // the zero has landed before any kernel reads it
    }
    Gate(const Gate&) = delete;
    Gate& operator=(const Gate&) = delete;
    ~Gate() { open(); }

    // Holds `stream` (of the gate's device) until open().
    void hold(rt::stream_t stream) const {
        DeviceGuard g(flag_.device());
        launch(wait_for_gate<>, 1, 1, 0, stream, flag_.data());
    }
    void open() const { std::atomic_ref<std::int32_t>(*flag_.data()).store(1); }
    // Opens the gate 50 ms from now, from another thread (joined when the result is destroyed).
    std::jthread open_later() const {
        return std::jthread([this] {
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
            open();
        });
    }

private:
    Tensor<std::int32_t> flag_;
};

}  // namespace tessel::testing
