// A gate that holds a stream until the host opens it, on a GPU as on the sim: tests queue work
// behind it to show that what should wait for that work does (and, where ordering is missing, that
// it does not), without depending on how long a busy kernel happens to take.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

#include <tessel/core/kernel.hpp>
#include <tessel/tensor/tensor.hpp>

namespace tessel::testing {

// Spins until the host writes a non-zero value into *gate (managed memory). Both sides use atomics
// (system scope here, std::atomic_ref on the host), so ThreadSanitizer sees no race on the gate.
// A template (launch wait_for_gate<>) so that every test file including this header shares one.
template <class Flag = std::int32_t>
__global__ void wait_for_gate(Flag* gate) {
    while (atomicAdd_system(gate, 0) == 0) {
    }
}

// A shut gate in managed memory of `device`, its zero landed.
inline Tensor<std::int32_t> make_gate(Device device = current_device()) {
    const auto gate = zeros<std::int32_t>({1}, {.space = MemorySpace::managed, .device = device});
    current_stream(device).synchronize();
    return gate;
}

inline void open_gate(const Tensor<std::int32_t>& gate) { std::atomic_ref<std::int32_t>(*gate.data()).store(1); }

// Opens the gate 50 ms from now, from another thread (joined when the result is destroyed, so a
// test that throws meanwhile still opens it).
inline std::jthread open_gate_later(const Tensor<std::int32_t>& gate) {
    return std::jthread([gate] {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        open_gate(gate);
    });
}

}  // namespace tessel::testing
