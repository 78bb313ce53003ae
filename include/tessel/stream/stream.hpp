// Streams and events as values: Stream (shared ownership of a CUDA stream, or the default stream),
// Event (timing or not), and the current stream of each device on each host thread.
#pragma once

#include <algorithm>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "../runtime/device.hpp"
#include "../runtime/rt.hpp"

namespace tessel {

class Event;

// How Stream::create makes a stream.
struct StreamOptions {
    bool non_blocking = true;  // false: synchronises with the legacy default stream
    int priority = 0;          // lower is higher priority; clamped to cudaDeviceGetStreamPriorityRange, as CUDA does
};

namespace detail {
// Streams given back by their last Stream copy, kept for the next Stream::create with the same
// device, flags and priority. CUDA streams made by Stream::create are never destroyed, so a handle
// the allocators remember (a block's stream, a recorded use) always stays valid, as in PyTorch.
class StreamRecycler {
public:
    static StreamRecycler& instance() {
        static auto* r = new StreamRecycler();
        return *r;
    }
    rt::stream_t take(Device d, StreamOptions o) {
        {
            std::lock_guard lk(m_);
            auto& free = free_[key(d, o)];
            if (!free.empty()) {
                rt::stream_t s = free.back();
                free.pop_back();
                return s;
            }
        }
        DeviceGuard g(d);
        return rt::stream_create(o.non_blocking, o.priority);
    }
    void give_back(rt::stream_t s, Device d, StreamOptions o) {
        std::lock_guard lk(m_);
        free_[key(d, o)].push_back(s);
    }

private:
    static std::tuple<int, bool, int> key(Device d, StreamOptions o) { return {d.index, o.non_blocking, o.priority}; }
    std::mutex m_;
    std::map<std::tuple<int, bool, int>, std::vector<rt::stream_t>> free_;
};
}  // namespace detail

namespace detail {
// Runs f with `device` current when `s` is a default stream (a null handle is the *current*
// device's default stream to CUDA); a created stream names its device itself, so nothing changes.
template <class F>
void on_device_of(rt::stream_t s, Device device, F&& f) {
    if (s == nullptr && current_device() != device) {
        const DeviceGuard guard(device);
        f();
    } else {
        f();
    }
}
}  // namespace detail

// A CUDA stream of a device. Copies share the stream; when the last copy goes, the stream is kept
// for reuse by a later Stream::create rather than destroyed (see StreamRecycler). The default stream
// (Stream::default_stream) is shared by everyone.
class Stream {
public:
    // The default stream of the current device.
    Stream() : Stream(default_stream(current_device())) {}

    static Stream create(StreamOptions o = {}, Device d = current_device()) {
        {  // CUDA clamps the priority to the device's range; the Stream reports (and pools by) what CUDA applied
            DeviceGuard g(d);
            int least = 0, greatest = 0;
            TESSEL_CUDA_CHECK(rt::api::cudaDeviceGetStreamPriorityRange(&least, &greatest));
            o.priority = std::clamp(o.priority, greatest, least);
        }
        rt::stream_t s = detail::StreamRecycler::instance().take(d, o);
        return Stream(std::shared_ptr<CUstream_st>(s, [d, o](rt::stream_t h) {
            detail::StreamRecycler::instance().give_back(h, d, o);
        }), d, o.priority);
    }
    static Stream default_stream(Device d) { return Stream(nullptr, d, 0); }

    // Moving copies: a moved-from Stream still names its stream (a value, as c10::cuda::CUDAStream).
    Stream(const Stream&) = default;
    Stream(Stream&& o) noexcept : handle_(o.handle_), device_(o.device_), priority_(o.priority_) {}
    Stream& operator=(const Stream&) = default;
    Stream& operator=(Stream&& o) noexcept {
        handle_ = o.handle_;
        device_ = o.device_;
        priority_ = o.priority_;
        return *this;
    }

    rt::stream_t handle() const { return handle_.get(); }
    // For CUDA and library calls that take a raw handle. tessel's own operations take a StreamArg,
    // which keeps the Stream's device too (a default stream's handle is null on every device).
    operator rt::stream_t() const noexcept { return handle_.get(); }
    Device device() const { return device_; }
    int priority() const { return priority_; }
    bool is_default() const { return handle_ == nullptr; }

    // On the stream's own device: a default stream's null handle means the *current* device's
    // default stream to CUDA, so current_stream(Device{2}).synchronize() called from device 0 must
    // switch devices first (detail::on_device_of; created streams name their device themselves).
    void synchronize() const {
        detail::on_device_of(handle(), device_, [&] { rt::stream_synchronize(handle()); });
    }
    // True when all queued work has finished.
    bool query() const {
        bool done = false;
        detail::on_device_of(handle(), device_, [&] { done = rt::stream_query(handle()); });
        return done;
    }
    // Work queued on this stream after this call waits for `e`.
    inline void wait(const Event& e) const;

    friend bool operator==(const Stream& a, const Stream& b) { return a.handle() == b.handle() && a.device_ == b.device_; }

private:
    Stream(std::shared_ptr<CUstream_st> h, Device d, int prio) : handle_(std::move(h)), device_(d), priority_(prio) {}
    std::shared_ptr<CUstream_st> handle_;
    Device device_;
    int priority_ = 0;
};

// An operation's stream argument: a Stream, which names its device, or a raw handle, whose null
// value is the default stream of the device the operation runs on. (A Stream passed as its handle
// alone would lose its device: another device's default stream would pass for this device's.)
class StreamArg {
public:
    StreamArg(rt::stream_t handle) noexcept : handle_(handle) {}
    StreamArg(std::nullptr_t) noexcept {}
    StreamArg(const Stream& s) noexcept : handle_(s.handle()), device_(s.device()) {}
    operator rt::stream_t() const noexcept { return handle_; }
    rt::stream_t handle() const noexcept { return handle_; }
    // The Stream's device; none for a raw handle.
    std::optional<Device> device() const noexcept { return device_; }

private:
    rt::stream_t handle_ = nullptr;
    std::optional<Device> device_;
};

// A CUDA event: a point in a stream that other streams and the host can wait for, and time.
class Event {
public:
    explicit Event(bool timing = true, Device d = current_device()) : device_(d), timing_(timing) {
        DeviceGuard g(d);
        event_ = rt::event_create(timing);
    }
    ~Event() {
        if (event_) (void)rt::api::cudaEventDestroy(event_);
    }
    Event(Event&& o) noexcept : event_(std::exchange(o.event_, nullptr)), device_(o.device_), timing_(o.timing_) {}
    // This event's own is destroyed, and `o` holds none afterwards (valid() false), as after a move
    // construction (a swap left it holding this one's, attributed to its own device).
    Event& operator=(Event&& o) noexcept {
        if (this != &o) {
            if (event_) (void)rt::api::cudaEventDestroy(event_);
            event_ = std::exchange(o.event_, nullptr);
            device_ = o.device_;
            timing_ = o.timing_;
        }
        return *this;
    }
    Event(const Event&) = delete;
    Event& operator=(const Event&) = delete;

    void record(const Stream& s) {
        need("record");
        require(s.device() == device_, "Event::record: the event belongs to device ", device_.index,
                " but the stream to device ", s.device().index);
        detail::on_device_of(s.handle(), device_, [&] { rt::event_record(event_, s.handle()); });
    }
    // Records on a raw stream handle of this event's device (null: that device's default stream).
    void record(rt::stream_t s) {
        need("record");
        detail::on_device_of(s, device_, [&] { rt::event_record(event_, s); });
    }
    void synchronize() const { rt::event_synchronize(need("synchronize")); }
    bool query() const { return rt::event_query(need("query")); }
    // Milliseconds from this event to `end`; both must have completed and have timing enabled.
    float elapsed_ms(const Event& end) const {
        need("elapsed_ms");
        end.need("elapsed_ms (its end event)");
        require(timing_ && end.timing_, "Event::elapsed_ms: both events need timing (Event(true))");
        return rt::event_elapsed_ms(event_, end.event_);
    }
    rt::event_t handle() const { return event_; }
    Device device() const { return device_; }
    // False once moved from.
    bool valid() const { return event_ != nullptr; }

private:
    rt::event_t need(const char* what) const {
        require(event_ != nullptr, "Event::", what, ": this Event was moved from and holds no event");
        return event_;
    }

    rt::event_t event_ = nullptr;
    Device device_;
    bool timing_;
};

inline void Stream::wait(const Event& e) const {
    require(e.valid(), "Stream::wait: the Event was moved from and holds no event");
    detail::on_device_of(handle(), device_, [&] { rt::stream_wait_event(handle(), e.handle()); });
}

namespace detail {
inline std::vector<Stream>& current_streams() {
    static thread_local std::vector<Stream> streams;  // per device; default stream when unset
    return streams;
}
}  // namespace detail

// The stream ops use on device `d` when none is given: per host thread, the default stream until set.
inline Stream current_stream(Device d = current_device()) {
    auto& v = detail::current_streams();
    if (std::size_t(d.index) < v.size()) return v[std::size_t(d.index)];
    return Stream::default_stream(d);
}
// The handle of current_stream(d), without copying the Stream (for hot paths that only compare).
inline rt::stream_t current_stream_handle(Device d) {
    auto& v = detail::current_streams();
    return std::size_t(d.index) < v.size() ? v[std::size_t(d.index)].handle() : nullptr;
}
inline void set_current_stream(const Stream& s) {
    detail::require_device(s.device());  // the per-device list grows to the index: a bad one is an error
    auto& v = detail::current_streams();
    while (v.size() <= std::size_t(s.device().index)) v.push_back(Stream::default_stream(Device{int(v.size())}));
    v[std::size_t(s.device().index)] = s;
}

// The stream an operation `op` on `device`'s tensors runs on: the caller's `chosen` one, which must
// belong to that device (CUDA would fail the launch with "invalid resource handle"; this names both
// devices), or the device's current stream. A default-stream handle is that device's default stream.
// The device's current stream passes without a driver call.
inline rt::stream_t stream_for(const char* op, std::optional<StreamArg> chosen, Device device) {
    if (chosen && chosen->device())
        require(*chosen->device() == device, op, ": stream ", static_cast<const void*>(chosen->handle()),
                chosen->handle() ? "" : " (a default stream)", " belongs to device ", chosen->device()->index,
                ", the tensors are on device ", device.index, "; pass a stream of device ", device.index, " (or none: its current stream)");
    const rt::stream_t current = current_stream_handle(device);
    if (!chosen || chosen->handle() == current) return current;
    DeviceGuard guard(device);
    const int owner = rt::stream_device(chosen->handle());
    require(owner == device.index, op, ": stream ", static_cast<const void*>(chosen->handle()), " belongs to device ", owner,
            ", the tensors are on device ", device.index, "; pass a stream of device ", device.index,
            " (or none: its current stream)");
    return chosen->handle();
}

// Makes `s` the current stream of its device for the guard's lifetime.
class StreamGuard {
public:
    explicit StreamGuard(const Stream& s) : previous_(current_stream(s.device())) { set_current_stream(s); }
    ~StreamGuard() { set_current_stream(previous_); }
    StreamGuard(const StreamGuard&) = delete;
    StreamGuard& operator=(const StreamGuard&) = delete;

private:
    Stream previous_;
};

}  // namespace tessel
