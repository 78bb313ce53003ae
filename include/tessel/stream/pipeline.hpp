// The copy/compute overlap pipeline: a large host array goes through the device in chunks, each
// chunk H2D -> compute -> D2H on one of several streams, with pinned staging buffers per stream, so
// uploads, kernels and downloads of different chunks run at the same time.
#pragma once

#include <algorithm>
#include <cstring>
#include <exception>
#include <span>
#include <tuple>
#include <vector>

#include "../memory/allocator.hpp"
#include "../tensor/tensor.hpp"
#include "stream.hpp"

namespace tessel {

// How overlap_pipeline splits the work.
struct PipelineOptions {
    std::size_t chunk_elements = std::size_t(1) << 22;
    int streams = 3;
};

// Runs `step(const In* device_in, Out* device_out, std::size_t n, rt::stream_t stream)` over
// `input` chunk by chunk and gathers the results into `output` (same length). `step` must queue
// its work on the stream it is given. Returns when every chunk is back in `output`.
template <class In, class Out, class Step>
void overlap_pipeline(std::span<const In> input, std::span<Out> output, Step&& step, PipelineOptions o = {}) {
    require(input.size() == output.size(), "overlap_pipeline: input has ", input.size(), " elements but output ",
            output.size());
    require(o.chunk_elements > 0 && o.streams > 0, "overlap_pipeline: chunk_elements (", o.chunk_elements,
            ") and streams (", o.streams, ") must be positive");
    // Buffers of at most the input's size: a chunk_elements beyond it (up to SIZE_MAX) would make
    // chunk * sizeof(T) wrap and the staging buffers too small.
    const std::size_t chunk = std::min(o.chunk_elements, std::max<std::size_t>(input.size(), 1)),
                      chunks = (input.size() + chunk - 1) / chunk;
    const int lanes = int(std::min<std::size_t>(std::size_t(o.streams), std::max<std::size_t>(chunks, 1)));

    // One lane per stream: pinned staging and device buffers, and where its last chunk goes.
    struct Lane {
        Stream stream;
        Event done{false};
        In* pin_in = nullptr;
        Out* pin_out = nullptr;
        In* dev_in = nullptr;
        Out* dev_out = nullptr;
        std::size_t pending_at = 0, pending_n = 0;  // output range its staging buffer holds
    };
    std::vector<Lane> lane;
    lane.reserve(std::size_t(lanes));
    auto drain = [&](Lane& l) {  // waits for the lane's last chunk and moves it to `output`
        l.done.synchronize();
        if (l.pending_n) std::memcpy(output.data() + l.pending_at, l.pin_out, l.pending_n * sizeof(Out));
        l.pending_n = 0;
    };
    auto release = [&] {  // every lane, even if one fails: what was allocated is given back
        std::exception_ptr first;
        auto attempt = [&](auto&& step) {
            try {
                step();
            } catch (...) {
                if (!first) first = std::current_exception();
            }
        };
        for (Lane& l : lane) {
            // The pinned buffers wait for the lane's copies; a synchronize that reports a fault (its
            // work has ended) still lets every buffer go back. Device frees are stream-ordered.
            attempt([&] { l.stream.synchronize(); });
            attempt([&] { memory::deallocate(l.dev_in); });
            attempt([&] { memory::deallocate(l.dev_out); });
            attempt([&] { memory::deallocate_host(l.pin_in); });
            attempt([&] { memory::deallocate_host(l.pin_out); });
        }
        return first;
    };
    try {
    for (int i = 0; i < lanes; ++i) {  // each lane is listed before its buffers exist, so release() sees them
        lane.push_back(Lane{Stream::create()});
        Lane& l = lane.back();
        l.pin_in = static_cast<In*>(memory::allocate_host(chunk * sizeof(In)));
        l.pin_out = static_cast<Out*>(memory::allocate_host(chunk * sizeof(Out)));
        l.dev_in = static_cast<In*>(memory::allocate(chunk * sizeof(In), l.stream.handle()));
        l.dev_out = static_cast<Out*>(memory::allocate(chunk * sizeof(Out), l.stream.handle()));
    }
    for (std::size_t k = 0; k < chunks; ++k) {
        Lane& l = lane[k % std::size_t(lanes)];
        const std::size_t at = k * chunk, n = std::min(chunk, input.size() - at);
        drain(l);  // the lane's buffers are free again
        std::memcpy(l.pin_in, input.data() + at, n * sizeof(In));  // overlaps the other lanes' device work
        rt::memcpy_async(l.dev_in, l.pin_in, n * sizeof(In), l.stream.handle());
        step(static_cast<const In*>(l.dev_in), l.dev_out, n, l.stream.handle());
        rt::memcpy_async(l.pin_out, l.dev_out, n * sizeof(Out), l.stream.handle());
        l.done.record(l.stream);
        l.pending_at = at;
        l.pending_n = n;
    }
    for (Lane& l : lane) drain(l);
    } catch (...) {
        (void)release();  // the first error is the one to report
        throw;
    }
    if (auto e = release()) std::rethrow_exception(e);
}

// The same over tensors: `input` and `output` are contiguous host or pinned tensors of equal element
// counts, and `step(const Tensor<In>& in, const Tensor<Out>& out, rt::stream_t stream)` receives each
// chunk as 1-d device tensors, e.g. [](auto& in, auto& out, auto s) { (out = in * 3 + 1).run(s); }.
template <Element In, Element Out, class Step>
void overlap_pipeline(const Tensor<In>& input, const Tensor<Out>& output, Step&& step, PipelineOptions o = {}) {
    for (const auto& [what, defined, space, contiguous] :
         {std::tuple{"input", input.defined(), input.defined() ? input.space() : MemorySpace::host, input.defined() && input.is_contiguous()},
          std::tuple{"output", output.defined(), output.defined() ? output.space() : MemorySpace::host,
                     output.defined() && output.is_contiguous()}}) {
        require(defined, "overlap_pipeline: the ", what, " tensor is undefined (default-constructed)");
        require(is_plain_host(space) && contiguous, "overlap_pipeline: the ", what, " must be a contiguous host or pinned tensor (it is ",
                space_name(space), contiguous ? "" : ", strided", "); the pipeline moves host data through the device");
    }
    require(input.numel() == output.numel(), "overlap_pipeline: the input has ", input.numel(), " elements (shape ",
            input.shape(), ") but the output ", output.numel(), " (shape ", output.shape(), ")");
    const auto n = std::size_t(input.numel());
    overlap_pipeline(std::span<const In>(input.data(), n), std::span<Out>(output.data(), n),
                     [&](const In* in, Out* out, std::size_t m, rt::stream_t stream) {
                         const Device d = current_device();
                         const Shape shape{std::int64_t(m)};
                         step(from_blob<In>(const_cast<In*>(in), shape, MemorySpace::device, d),
                              from_blob<Out>(out, shape, MemorySpace::device, d), stream);
                     },
                     o);
}

}  // namespace tessel
