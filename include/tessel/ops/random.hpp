// Random tensors from a counter-based generator (Philox4x32-10, kernels/tessel/kernels/random.cuh):
// reproducible from (seed, offset) whatever the launch configuration or device.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <source_location>

#include <tessel/kernels/random.cuh>

#include "assign.hpp"

namespace tessel {

// Fills `t` with values offset .. offset + numel - 1 of stream `seed` (a view: in its row-major
// order): uniform in [lo, hi).
template <Element T>
void uniform_fill(const Tensor<T>& t, std::uint64_t seed, std::uint64_t offset = 0, double lo = 0.0, double hi = 1.0,
                  std::optional<StreamArg> stream = {}, std::source_location site = std::source_location::current());
// The same with normal values of the given mean and standard deviation (Box-Muller).
template <Element T>
void normal_fill(const Tensor<T>& t, std::uint64_t seed, std::uint64_t offset = 0, double mean = 0.0, double stddev = 1.0,
                 std::optional<StreamArg> stream = {}, std::source_location site = std::source_location::current());

namespace ops::detail {
template <kernels::Distribution D, Element T>
void random_fill(const char* name, const Tensor<T>& t, std::uint64_t seed, std::uint64_t offset, double a, double b,
                 std::optional<StreamArg> stream, std::source_location site) {
    static_assert(is_float_type<T>, "random fills produce floating-point tensors");
    require(t.defined(), name, ": the tensor is undefined (default-constructed)");
    require(t.space() == MemorySpace::device || t.space() == MemorySpace::managed, name, ": needs a device or managed tensor, got ",
            space_name(t.space()), " memory; fill a device tensor and copy it (copy_)");
    const std::uint64_t n = std::uint64_t(t.numel());
    if (n == 0) return;
    const Device device = t.device();
    DeviceGuard guard(device);
    if (!t.is_contiguous()) {
        // A view takes the values a contiguous tensor of its shape would, in its row-major order,
        // filled on the op's stream and copied in (torch's uniform_ of a view draws in place).
        require(::tessel::detail::distinct_elements(t.layout()), name, ": the tensor (shape ", t.shape(), ", strides ", t.strides(),
                ") ", ::tessel::detail::repeated_elements_text(t.layout()),
                " (a broadcast or overlapping view); fill a tensor whose elements are distinct");
        const rt::stream_t s = stream_for(name, stream, device);
        const Tensor<T> dense = empty<T>(t.shape(), TensorOptions{.device = device, .stream = s, .non_blocking = true});
        random_fill<D>(name, dense, seed, offset, a, b, s, site);
        t.copy_(dense, s);
        return;
    }
    constexpr std::uint64_t per_block = kernels::values_per_block<T>;
    require(offset <= std::numeric_limits<std::uint64_t>::max() - per_block - n, name, ": values ", offset, " .. ", offset,
            " + ", n, " pass the end of the stream's 2^64 values; start at a smaller offset or take another seed");
    const std::uint64_t blocks_needed = (offset % per_block + n + per_block - 1) / per_block;
    const auto grid = unsigned(std::clamp<std::uint64_t>((blocks_needed + 255) / 256, 1, std::uint64_t(max_blocks(device, 32))));
    const rt::stream_t s = stream_for(name, stream, device);
    // The smallest value of the kernel's compute type at or above b (uniform's exclusive bound).
    using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
    C limit = C(b);
    if (double(limit) < b) limit = std::nextafter(limit, std::numeric_limits<C>::infinity());
    launch(kernels::random_fill<D, T>, GridDim(grid, site), dim3(256), 0, s, t.data(), n, seed, offset, a, b, double(limit));
    t.storage()->note_write(s, device);
}
}  // namespace ops::detail

template <Element T>
void uniform_fill(const Tensor<T>& t, std::uint64_t seed, std::uint64_t offset, double lo, double hi, std::optional<StreamArg> stream,
                  std::source_location site) {
    require(std::isfinite(lo) && std::isfinite(hi) && lo <= hi, "uniform_fill: the range [", lo, ", ", hi,
            ") must be finite with lo <= hi");
    // As torch's uniform_: the bounds and the width within the dtype's finite range (else lo + (hi -
    // lo) u overflows to inf, or to NaN for hi - lo).
    if constexpr (ops::is_float_type<T>) {
        const double top = [] {
            if constexpr (std::is_same_v<T, double>) return std::numeric_limits<double>::max();
            else return double(convert<float>(::tessel::detail::largest_finite<T>()));
        }();
        require(lo >= -top && hi <= top && hi - lo <= top, "uniform_fill: the range [", lo, ", ", hi, ") of a ", dtype_name(dtype_of<T>),
                " tensor must lie within +-", top, " and be at most ", top, " wide");
    }
    ops::detail::random_fill<kernels::Distribution::uniform>("uniform_fill", t, seed, offset, lo, hi, stream, site);
}
template <Element T>
void normal_fill(const Tensor<T>& t, std::uint64_t seed, std::uint64_t offset, double mean, double stddev,
                 std::optional<StreamArg> stream, std::source_location site) {
    require(std::isfinite(mean) && std::isfinite(stddev) && stddev >= 0, "normal_fill: mean ", mean, " and stddev ", stddev,
            " must be finite, stddev not negative");
    ops::detail::random_fill<kernels::Distribution::normal>("normal_fill", t, seed, offset, mean, stddev, stream, site);
}

// A seed and a position in its stream, counted in 32-bit Philox words: each draw starts at the next
// whole block and takes the blocks its values need (a float uses one word, a double two), so
// successive draws never overlap and a program's draws reproduce run to run.
class Philox {
public:
    explicit Philox(std::uint64_t seed, std::uint64_t offset = 0) : seed_(seed), offset_(offset) {}
    std::uint64_t seed() const { return seed_; }
    std::uint64_t offset() const { return offset_; }

    // A new tensor of uniform values in [lo, hi).
    template <Element T>
    Tensor<T> uniform(const Shape& shape, double lo = 0.0, double hi = 1.0, TensorOptions o = {}) {
        Tensor<T> t = empty<T>(shape, o);
        draw<T>(t.numel(), [&](std::uint64_t first) { uniform_fill(t, seed_, first, lo, hi, o.resolved_stream()); });
        return t;
    }
    // A new tensor of normal values.
    template <Element T>
    Tensor<T> normal(const Shape& shape, double mean = 0.0, double stddev = 1.0, TensorOptions o = {}) {
        Tensor<T> t = empty<T>(shape, o);
        draw<T>(t.numel(), [&](std::uint64_t first) { normal_fill(t, seed_, first, mean, stddev, o.resolved_stream()); });
        return t;
    }

private:
    // Runs fill(first value's index) for a draw of n values of T; a fill that refuses its arguments
    // (a range, a stddev, host memory) leaves the generator where it was, as torch's checks run
    // before its offset moves, so a program that catches the error still reproduces.
    template <class T, class Fill>
    void draw(std::int64_t n, Fill&& fill) {
        const std::uint64_t before = offset_;
        const std::uint64_t first = take<T>(n);
        try {
            fill(first);
        } catch (...) {
            offset_ = before;
            throw;
        }
    }
    // Returns the first value's index in T's units and advances past the draw.
    template <class T>
    std::uint64_t take(std::int64_t n) {
        constexpr std::uint64_t per_block = kernels::values_per_block<T>, blocks_in_stream = std::uint64_t(1) << 62;
        const std::uint64_t block = offset_ / 4 + (offset_ % 4 != 0), blocks = (std::uint64_t(n) + per_block - 1) / per_block;
        // Below the stream's last block (as the fill's own check, offset + n + a block < 2^64), so the
        // fill cannot refuse what take() handed out.
        require(block < blocks_in_stream && blocks < blocks_in_stream - 1 - block, "Philox(seed ", seed_, "): a draw of ", n,
                " values at word ", offset_, " passes the end of the stream's 2^64 words; take another seed");
        offset_ = (block + blocks) * 4;  // below 2^64 - 4: cannot wrap to 0
        return block * per_block;
    }
    std::uint64_t seed_, offset_;
};

}  // namespace tessel
