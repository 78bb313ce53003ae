// Mixed precision: unscale_and_check (one fused launch that unscales a list of gradients in place and
// detects inf/NaN) and DynamicLossScaler, whose scale follows torch.cuda.amp.GradScaler: back off on
// an overflow, grow after growth_interval clean steps.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include <tessel/kernels/amp.cuh>

#include "../memory/allocator.hpp"
#include "../runtime/launch.hpp"
#include "../stream/stream.hpp"
#include "../tensor/tensor.hpp"
#include "assign.hpp"

namespace tessel {

// The most tensors one unscale_and_check launch takes; longer lists take one launch per this many.
inline constexpr int amp_tensors_per_launch = 64;

// Multiplies every element of `tensors` (contiguous, on one device) by inv_scale in place and sets
// *found_nonfinite (a device word) to 1 if any element was inf or NaN beforehand; never clears it.
template <Element T>
void unscale_and_check(std::span<const Tensor<T>> tensors, float inv_scale, unsigned* found_nonfinite, rt::stream_t stream,
                       std::source_location site = std::source_location::current()) {
    static_assert(ops::is_float_type<T>, "unscale_and_check: gradients are floating-point tensors");
    constexpr int chunk = 16384;
    using List = kernels::TensorList<T, amp_tensors_per_launch>;
    if (tensors.empty()) return;
    const Device device = tensors[0].device();
    for (std::size_t k = 0; k < tensors.size(); ++k) {
        const Tensor<T>& t = tensors[k];
        require(t.defined() && t.is_contiguous() && (t.space() == MemorySpace::device || t.space() == MemorySpace::managed) &&
                    t.device() == device,
                "unscale_and_check: tensor ", k, " must be a contiguous device tensor on ", backend_name, ":", device.index,
                "; its shape: ", ::tessel::detail::shape_of(t));
    }
    {
        // Each element is unscaled once: a gradient listed twice (or two views of one buffer) would be
        // divided by the scale twice.
        std::vector<std::size_t> order;  // the non-empty ones: an empty view between two would hide their overlap
        for (std::size_t k = 0; k < tensors.size(); ++k)
            if (tensors[k].numel() > 0) order.push_back(k);
        auto start = [&](std::size_t k) { return reinterpret_cast<std::uintptr_t>(tensors[k].data()); };
        std::sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return start(x) < start(y); });
        for (std::size_t i = 1; i < order.size(); ++i) {
            const std::size_t p = order[i - 1], k = order[i];
            require(start(p) + std::uintptr_t(tensors[p].numel()) * sizeof(T) <= start(k),
                    "unscale_and_check: tensors ", std::min(p, k), " and ", std::max(p, k),
                    " share memory; each gradient must be listed once (it would be unscaled twice)");
        }
    }
    require(found_nonfinite != nullptr, "unscale_and_check: found_nonfinite is a null pointer; pass a device word (set to 0) that "
            "the kernel raises to 1 on an inf or NaN, as DynamicLossScaler does");
    stream = stream_for("unscale_and_check", stream, device);  // before any launch or note_write: another device's stream fails here
    DeviceGuard guard(device);
    for (std::size_t first = 0; first < tensors.size(); first += amp_tensors_per_launch) {
        List list{};
        list.first_chunk[0] = 0;
        for (std::size_t k = first; k < std::min(tensors.size(), first + amp_tensors_per_launch); ++k) {
            const int i = list.count++;
            list.data[i] = tensors[k].data();
            list.numel[i] = tensors[k].numel();
            list.first_chunk[i + 1] = list.first_chunk[i] + (list.numel[i] + chunk - 1) / chunk;
        }
        const std::int64_t chunks = list.first_chunk[list.count];
        if (chunks == 0) continue;
        const auto blocks = unsigned(std::clamp<std::int64_t>(chunks, 1, ops::detail::max_blocks(device, 8)));
        launch(kernels::unscale_and_check<T, amp_tensors_per_launch, chunk>, GridDim(blocks, site), dim3(256), 0, stream, list,
               inv_scale, found_nonfinite);
    }
    for (const Tensor<T>& t : tensors) t.storage()->note_write(stream, device);
}

// How a DynamicLossScaler's scale evolves (GradScaler's defaults).
struct LossScalerOptions {
    double init_scale = 65536.0;
    double growth_factor = 2.0;
    double backoff_factor = 0.5;
    int growth_interval = 2000;
};

// A loss scale that adapts like torch.cuda.amp.GradScaler: scale the loss by scale(), call
// unscale(grads) after the backward pass, skip the optimiser step when found_nonfinite(), then
// update(): an overflow multiplies the scale by backoff_factor and restarts the count; growth_interval
// clean steps in a row multiply it by growth_factor.
class DynamicLossScaler {
public:
    using Options = LossScalerOptions;

    explicit DynamicLossScaler(Options o = {}, std::optional<Device> device = std::nullopt)
        : o_(o), scale_(o.init_scale), device_(device ? *device : current_device()), flag_done_(false, device_) {
        // The scale is used as a float (the loss's multiplier, 1/scale the gradients'): it must be one.
        require(o.init_scale > 0 && o.init_scale <= max_scale && o.growth_factor > 1 && o.growth_factor <= max_scale &&
                    o.backoff_factor > 0 && o.backoff_factor < 1 && o.growth_interval > 0,
                "DynamicLossScaler: needs init_scale > 0 and growth_factor > 1, both at most FLT_MAX (finite floats), "
                "0 < backoff_factor < 1, growth_interval > 0; got init_scale ", o.init_scale, ", growth_factor ", o.growth_factor, ", backoff_factor ",
                o.backoff_factor, ", growth_interval ", o.growth_interval);
        DeviceGuard g(device_);
        stream_ = alloc_stream_ = current_stream(device_).handle();
        flag_ = static_cast<unsigned*>(memory::allocate(sizeof(unsigned), stream_));
        rt::memset_async(flag_, 0, sizeof(unsigned), stream_);
        flag_done_.record(stream_);
    }
    ~DynamicLossScaler() {
        if (flag_) memory::deallocate(flag_);
    }
    DynamicLossScaler(const DynamicLossScaler&) = delete;
    DynamicLossScaler& operator=(const DynamicLossScaler&) = delete;

    // The current scale.
    double scale() const { return scale_; }
    // The loss times the current scale (a new tensor, computed on `stream`): backpropagate from it.
    template <Element T>
    Tensor<T> scale(const Tensor<T>& loss, std::optional<StreamArg> stream = {}) const {
        static_assert(ops::is_float_type<T>, "DynamicLossScaler::scale: the loss is a floating-point tensor");
        require(loss.defined(), "DynamicLossScaler::scale: the loss is an undefined (default-constructed) tensor");
        return evaluate(loss * scale_, stream);
    }
    int clean_steps() const { return tracker_; }

    // Unscales the gradients in place (one launch per dtype and 64 tensors) and records any inf/NaN
    // among them, on `stream` (default: the current stream of the scaler's device).
    // Undefined gradients (parameters without one) are skipped, as torch skips None; a gradient
    // already unscaled since the last update() is refused (it would be divided by the scale twice).
    template <Element T>
    void unscale(std::span<const Tensor<T>> all_grads, std::optional<StreamArg> stream = {}) {
        const rt::stream_t s = stream_for("DynamicLossScaler::unscale", stream, device_);
        std::vector<Tensor<T>> grads;
        grads.reserve(all_grads.size());
        for (std::size_t k = 0; k < all_grads.size(); ++k) {
            const Tensor<T>& g = all_grads[k];
            if (!g.defined()) continue;
            require(g.device() == device_, "DynamicLossScaler::unscale: gradient ", k, " is on device ", g.device().index,
                    " but the scaler on device ", device_.index);
            const auto seen = [&](const Unscaled& u) { return u.first == static_cast<const void*>(g.data()) && !u.second.expired(); };
            require(g.numel() == 0 || std::none_of(unscaled_.begin(), unscaled_.end(), seen),
                    "DynamicLossScaler::unscale: gradient ", k, " was already unscaled since the last update() (it would be divided "
                    "by the scale twice); unscale each gradient once per step, then update()");
            grads.push_back(g);
        }
        // Everything that touches the flag (its clear, each unscale's atomicOr) runs on one chain of
        // streams: flag_done_ is recorded after each, and a new stream waits for it first, so
        // found_nonfinite() and update(), on the last stream, come after every unscale since the
        // clear, and none overlaps the clear.
        if (s != stream_) {
            DeviceGuard g(device_);
            // The flag is written on `s` too: its memory must outlive that work, wherever it is freed
            // (the allocator keeps each stream once).
            if (s != alloc_stream_) memory::record_stream(flag_, s, device_);
            rt::stream_wait_event(s, flag_done_.handle());
            stream_ = s;
        }
        unscale_and_check(std::span<const Tensor<T>>(grads), float(1.0 / scale_), flag_, stream_);
        flag_done_.record(stream_);
        for (const Tensor<T>& g : grads)
            if (g.numel() > 0) unscaled_.emplace_back(g.data(), g.storage());
        checked_ = true;
    }
    template <Element T>
    void unscale(const std::vector<Tensor<T>>& grads, std::optional<StreamArg> stream = {}) {
        unscale(std::span<const Tensor<T>>(grads), stream);
    }
    template <Element T>
    void unscale(std::initializer_list<Tensor<T>> grads, std::optional<StreamArg> stream = {}) {
        unscale(std::span<const Tensor<T>>(grads.begin(), grads.size()), stream);
    }
    // Gradients of several dtypes in one call, each group a Tensor<T>, std::vector<Tensor<T>> or
    // std::span<const Tensor<T>>: scaler.unscale_all(stream, fp32_grads, bf16_grads).
    template <class... Groups>
    void unscale_all(std::optional<StreamArg> stream, const Groups&... groups) {
        (unscale_group(groups, stream), ...);
    }

    // Whether the gradients unscaled since the last update() held an inf or NaN (waits for them).
    bool found_nonfinite() const {
        DeviceGuard g(device_);  // a null stream_ is the scaler's device's default stream
        unsigned v = 0;
        rt::memcpy_async(&v, flag_, sizeof v, stream_);
        rt::stream_synchronize(stream_);
        return v != 0;
    }
    // Adjusts the scale for the next step and clears the flag. Refused when nothing was unscaled
    // since the last update() (torch's "No inf checks were recorded prior to update"): the step
    // would count as clean unseen.
    void update() {
        require(checked_, "DynamicLossScaler::update: no gradients were unscaled since the last update(); call unscale(grads) "
                "after the backward pass, before update()");
        DeviceGuard g(device_);
        if (found_nonfinite()) {
            scale_ *= o_.backoff_factor;
            tracker_ = 0;
        } else if (++tracker_ == o_.growth_interval) {
            // As GradScaler: grow only to a finite float (an inf scale would zero every gradient).
            if (scale_ * o_.growth_factor <= max_scale) scale_ *= o_.growth_factor;
            tracker_ = 0;
        }
        rt::memset_async(flag_, 0, sizeof(unsigned), stream_);
        flag_done_.record(stream_);
        unscaled_.clear();
        checked_ = false;
    }

private:
    template <Element T>
    void unscale_group(const Tensor<T>& g, std::optional<StreamArg> stream) {
        unscale(std::span<const Tensor<T>>(&g, 1), stream);
    }
    template <class G>
    void unscale_group(const G& g, std::optional<StreamArg> stream) {
        unscale(std::span<const typename G::value_type>(g.data(), g.size()), stream);
    }

    static constexpr double max_scale = 3.4028234663852886e38;  // FLT_MAX

    Options o_;
    double scale_;
    int tracker_ = 0;
    Device device_;
    Event flag_done_;  // recorded after each use of the flag; a new stream of unscale() waits for it
    unsigned* flag_ = nullptr;
    rt::stream_t stream_ = nullptr, alloc_stream_ = nullptr;
    // The gradients unscaled since the last update(): first element and storage (memory freed and
    // reused by another gradient within the step is not that gradient).
    using Unscaled = std::pair<const void*, std::weak_ptr<Storage>>;
    std::vector<Unscaled> unscaled_;
    bool checked_ = false;               // unscale() ran since the last update()
};

}  // namespace tessel
