// Watching GPUs from inside a program, as DCGM's policies and nvitop's history do: a Monitor samples
// every device on a background thread (NVML's readings, lib/nvml.hpp, and this process's tessel
// allocator), keeps the samples in a ring buffer per device with summary statistics, and runs
// policies that call back once per violation: temperature, power, memory fraction, clock throttling
// for given reasons, new uncorrected ECC errors, XID events, a device lost, and a leak watch on the allocator
// (growing across N checkpoints with no drop). stop() (and the destructor) joins the thread.
// docs/monitoring.md shows it at work; on the sim the readings come from the simulated devices.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "../lib/nvml.hpp"
#include "../memory/allocator.hpp"

namespace tessel::monitor {

// One sample of one device.
struct Sample {
    nvml::DeviceReading nvml;         // what NVML reports (fields it lacks are empty)
    std::int64_t allocated_bytes = 0;  // this process's tessel allocator on the device: bytes handed out
    std::int64_t reserved_bytes = 0;   // and bytes held from the driver, cached ones included
};

// min, mean and max of one reading over the samples that have it.
struct Range {
    double min = 0, mean = 0, max = 0;
    std::size_t count = 0;
};
// A device's history in numbers.
struct Summary {
    std::size_t samples = 0;
    Range temperature_c, power_w, gpu_utilization_pct, memory_used_bytes, allocated_bytes;
    std::uint64_t clock_reasons_seen = 0;  // every sample's clock event reasons OR-ed (nvml::ClockReason bits)
};

// What a policy watches.
enum class AlertKind { temperature, power, memory_fraction, throttling, ecc_uncorrected, xid, allocator_growth, device_lost };
inline const char* alert_name(AlertKind k) {
    switch (k) {
        case AlertKind::temperature: return "temperature";
        case AlertKind::power: return "power";
        case AlertKind::memory_fraction: return "memory fraction";
        case AlertKind::throttling: return "throttling";
        case AlertKind::ecc_uncorrected: return "uncorrected ECC errors";
        case AlertKind::xid: return "XID";
        case AlertKind::allocator_growth: return "allocator growth";
        case AlertKind::device_lost: return "device lost";
    }
    return "?";
}

// A policy's report: what, where, when, the value against the threshold, and a sentence saying so.
struct Alert {
    AlertKind kind = AlertKind::temperature;
    int device = 0;
    std::chrono::system_clock::time_point time;
    double value = 0, threshold = 0;
    std::string message;
};

// A condition on one device's readings and the callback it calls. A policy fires when its condition
// starts to hold and not again until it has stopped holding for a sample (XID: once per event).
// Callbacks run on the monitor's thread (or the caller's of sample_now/checkpoint), without the
// monitor's lock held: they may read the monitor, not stop it; what one throws on the monitor's
// thread is kept and rethrown by stop().
struct Policy {
    AlertKind kind = AlertKind::temperature;
    double threshold = 0;
    std::function<void(const Alert&)> callback;
    std::uint64_t bits = 0;  // throttling: the reason mask; xid: the XID (exact: a double holds 53 bits)

    // Above `celsius` (DCGM's thermal policy).
    static Policy temperature_above(double celsius, std::function<void(const Alert&)> f) { return {AlertKind::temperature, celsius, std::move(f)}; }
    // Drawing more than `watts`.
    static Policy power_above(double watts, std::function<void(const Alert&)> f) { return {AlertKind::power, watts, std::move(f)}; }
    // Device memory in use (NVML's used / total, every process's) above `fraction` of the total.
    static Policy memory_fraction_above(double fraction, std::function<void(const Alert&)> f) {
        return {AlertKind::memory_fraction, fraction, std::move(f)};
    }
    // Clocks held down for any of `reasons` (nvml::ClockReason bits; default: power and thermal
    // caps, hardware slowdown and power brake).
    static Policy throttling(std::function<void(const Alert&)> f,
                             std::uint64_t reasons = nvml::sw_power_cap | nvml::hw_slowdown | nvml::sw_thermal | nvml::hw_thermal |
                                                     nvml::hw_power_brake) {
        return {AlertKind::throttling, double(reasons), std::move(f), reasons};
    }
    // Uncorrected (double-bit) ECC errors counted since the monitor's first sample (DCGM's DBE policy).
    static Policy ecc_uncorrected(std::function<void(const Alert&)> f) { return {AlertKind::ecc_uncorrected, 0, std::move(f)}; }
    // An XID critical error (`xid` 0: any).
    static Policy xid(std::function<void(const Alert&)> f, std::uint64_t xid = 0) { return {AlertKind::xid, double(xid), std::move(f), xid}; }
    // The device has fallen off the bus: NVML answers NVML_ERROR_GPU_IS_LOST (DCGM's "GPU lost";
    // the XID 79 event, where delivered, comes through `xid`). Its queued work will not complete.
    static Policy device_lost(std::function<void(const Alert&)> f) { return {AlertKind::device_lost, 0, std::move(f)}; }
    // The leak watch: this process's tessel allocator (allocated bytes) grew at each of the last
    // `checkpoints` checkpoints (Monitor::checkpoint(), e.g. once per training step) with no drop.
    static Policy allocator_growth(int checkpoints, std::function<void(const Alert&)> f) {
        return {AlertKind::allocator_growth, double(checkpoints), std::move(f)};
    }
};

struct MonitorOptions {
    std::chrono::milliseconds period{1000};  // between samples
    std::size_t history = 600;               // samples kept per device (the oldest go first)
    std::vector<Device> devices = {};        // empty: every device
};

// The background sampler. Construct, add policies, start(); stop() or destroy to end it.
class Monitor {
public:
    // Checkpoints the leak watch keeps per device (a policy may look back at most one fewer).
    static constexpr std::size_t max_checkpoints = 1024;

    explicit Monitor(MonitorOptions options = {}) : options_(std::move(options)) {
        require(options_.period.count() > 0 && options_.period <= std::chrono::hours(24), "Monitor: the period must be positive and at "
                "most a day (86400000 ms), not ", options_.period.count(), " ms");
        require(options_.history > 0, "Monitor: the history must keep at least one sample");
        if (options_.devices.empty())
            for (int i = 0; i < device_count(); ++i) options_.devices.push_back(Device{i});
        for (std::size_t k = 0; k < options_.devices.size(); ++k) {
            const Device d = options_.devices[k];
            require(d.index >= 0 && d.index < device_count(), "Monitor: device ", d.index, " does not exist (", device_count(), " devices)");
            for (std::size_t j = 0; j < k; ++j)
                require(options_.devices[j] != d, "Monitor: device ", d.index, " is listed twice in MonitorOptions::devices");
        }
        xids_ = std::make_unique<nvml::XidWatch>(options_.devices);
    }
    ~Monitor() { halt(); }
    Monitor(const Monitor&) = delete;
    Monitor& operator=(const Monitor&) = delete;

    void add_policy(Policy p) {
        require(bool(p.callback), "Monitor: a ", alert_name(p.kind), " policy needs a callback");
        require(p.kind != AlertKind::allocator_growth || (p.threshold >= 1 && p.threshold < double(max_checkpoints)),
                "Monitor: the leak watch needs 1 to ", max_checkpoints - 1, " checkpoints, not ", p.threshold, " (", max_checkpoints,
                " are kept per device)");
        std::lock_guard lk(m_);
        policies_.push_back({std::move(p), {}});
    }

    // Starts the sampling thread (a first sample at once); no effect if it runs.
    void start() {
        std::lock_guard lk(thread_m_);
        if (thread_.joinable()) return;
        {
            std::lock_guard l(m_);
            stopping_ = false;
            failure_ = nullptr;  // an earlier run's, kept by halt(): not this run's to report
        }
        thread_ = std::thread([this] { run(); });
        running_ = true;
    }
    // Stops and joins the sampling thread (no effect if it does not run), then rethrows the first
    // exception the thread met since start(): a policy callback that threw, a reading that failed
    // (the sampler kept going). Calling it from a callback on that thread is an error (the thread
    // cannot join itself), which the thread keeps and the next stop() from elsewhere rethrows.
    void stop() {
        require(std::this_thread::get_id() != sampler_.load(), "Monitor::stop: called on the monitor's own thread (from a policy "
                "callback); stop the monitor from another thread");
        halt();
        std::exception_ptr failure;
        {
            std::lock_guard l(m_);
            failure = std::exchange(failure_, nullptr);
        }
        if (failure) std::rethrow_exception(failure);
    }
    // Stops and joins the sampling thread, keeping any exception it met (the destructor's stop).
    void halt() {
        std::lock_guard lk(thread_m_);  // start() waits for the join: one sampler at a time
        if (!thread_.joinable()) return;
        {
            std::lock_guard l(m_);
            stopping_ = true;
        }
        wake_.notify_all();
        thread_.join();
        running_ = false;
    }
    // Whether the sampling thread runs (true until stop() has joined it). Lock-free, so a policy
    // callback may ask while another thread's stop() waits for that callback to return.
    bool running() const { return running_.load(); }

    // One sample of every device now, on the calling thread, with the policies.
    void sample_now() { take_sample(); }

    // A checkpoint for the leak watch: records each device's allocated bytes now.
    void checkpoint() {
        std::vector<Fired> fired;
        {
            std::lock_guard lk(m_);
            for (Device d : options_.devices) {
                auto& marks = checkpoints_[d.index];
                marks.push_back(memory::stats(d).allocated_bytes[0].current);
                if (marks.size() > max_checkpoints) marks.pop_front();
            }
            for (std::size_t pi = 0; pi < policies_.size(); ++pi) {
                auto& [policy, active] = policies_[pi];
                if (policy.kind != AlertKind::allocator_growth) continue;
                const auto n = std::size_t(policy.threshold);
                for (Device d : options_.devices) {
                    const auto& marks = checkpoints_[d.index];
                    bool growing = marks.size() > n;
                    for (std::size_t i = marks.size() - std::min(marks.size(), n); growing && i < marks.size(); ++i)
                        growing = marks[i] > marks[i - 1];
                    if (fire(active[d.index], growing))
                        fired.push_back(make_alert(pi, d.index, double(marks.back()),
                                                   "the tessel allocator on device " + std::to_string(d.index) + " grew at each of the last " +
                                                       std::to_string(n) + " checkpoints, to " + std::to_string(marks.back()) +
                                                       " bytes allocated: a leak?"));
                }
            }
            record(fired);
        }
        notify(fired);
    }

    // Device d's samples, oldest first.
    std::vector<Sample> history(Device d) const {
        std::lock_guard lk(m_);
        auto it = history_.find(d.index);
        return it == history_.end() ? std::vector<Sample>() : std::vector<Sample>(it->second.begin(), it->second.end());
    }
    std::optional<Sample> latest(Device d) const {
        std::lock_guard lk(m_);
        auto it = history_.find(d.index);
        if (it == history_.end() || it->second.empty()) return std::nullopt;
        return it->second.back();
    }
    // min / mean / max of device d's kept samples.
    Summary summary(Device d) const {
        const std::vector<Sample> h = history(d);
        Summary s;
        s.samples = h.size();
        auto add = [](Range& r, double v) {
            r.min = r.count ? std::min(r.min, v) : v;
            r.max = r.count ? std::max(r.max, v) : v;
            r.mean += (v - r.mean) / double(++r.count);
        };
        for (const Sample& x : h) {
            if (x.nvml.temperature_c) add(s.temperature_c, *x.nvml.temperature_c);
            if (x.nvml.power_w) add(s.power_w, *x.nvml.power_w);
            if (x.nvml.gpu_utilization_pct) add(s.gpu_utilization_pct, *x.nvml.gpu_utilization_pct);
            if (x.nvml.memory_used_bytes) add(s.memory_used_bytes, double(*x.nvml.memory_used_bytes));
            add(s.allocated_bytes, double(x.allocated_bytes));
            s.clock_reasons_seen |= x.nvml.clock_event_reasons.value_or(0);
        }
        return s;
    }
    // Every alert raised so far, in order (the callbacks got them too).
    std::vector<Alert> alerts() const {
        std::lock_guard lk(m_);
        return alerts_;
    }
    const MonitorOptions& options() const { return options_; }

private:
    struct PolicyState {
        Policy policy;
        std::map<int, bool> active;  // per device: the condition held at the last look
    };

    // Whether a policy fires: its condition holds now and did not before.
    static bool fire(bool& active, bool holds) {
        const bool fires = holds && !active;
        active = holds;
        return fires;
    }
    // An alert and the index of the policy that raised it.
    struct Fired {
        std::size_t policy;
        Alert alert;
    };
    // Caller holds m_.
    Fired make_alert(std::size_t policy, int device, double value, std::string message) const {
        const Policy& p = policies_[policy].policy;
        return {policy, {p.kind, device, std::chrono::system_clock::now(), value, p.threshold, std::move(message)}};
    }

    void run() {
        sampler_ = std::this_thread::get_id();
        for (;;) {
            try {
                take_sample();
            } catch (...) {  // kept for stop(); an exception must not end the process on this thread
                std::lock_guard l(m_);
                if (!failure_) failure_ = std::current_exception();
            }
            std::unique_lock lk(m_);
            if (wake_.wait_for(lk, options_.period, [&] { return stopping_; })) {
                sampler_ = std::thread::id{};  // a later thread given this id is not the sampler
                return;
            }
        }
    }

    void take_sample() {
        std::vector<Sample> now;
        for (Device d : options_.devices) {
            Sample s;
            s.nvml = nvml::read(d);
            const memory::DeviceStats st = memory::stats(d);
            s.allocated_bytes = st.allocated_bytes[0].current;
            s.reserved_bytes = st.reserved_bytes[0].current;
            now.push_back(std::move(s));
        }
        const std::vector<nvml::XidWatch::Event> xids = xids_->poll(std::chrono::milliseconds(0));
        std::vector<Fired> fired;
        {
            std::lock_guard lk(m_);
            for (Sample& s : now) {
                const int dev = s.nvml.device;
                auto& h = history_[dev];
                if (!ecc_baseline_.count(dev) && s.nvml.ecc_uncorrected) ecc_baseline_[dev] = *s.nvml.ecc_uncorrected;
                evaluate(s, fired);
                h.push_back(std::move(s));
                while (h.size() > options_.history) h.pop_front();
            }
            for (const auto& e : xids)
                for (std::size_t pi = 0; pi < policies_.size(); ++pi) {
                    const Policy& policy = policies_[pi].policy;
                    if (policy.kind == AlertKind::xid && (policy.bits == 0 || policy.bits == e.xid))
                        fired.push_back(make_alert(pi, e.device, double(e.xid),
                                                   "XID " + std::to_string(e.xid) + " on device " + std::to_string(e.device)));
                }
            record(fired);
        }
        notify(fired);
    }

    // The policies on one fresh sample. Caller holds m_.
    void evaluate(const Sample& s, std::vector<Fired>& fired) {
        const int dev = s.nvml.device;
        const std::string on = " on device " + std::to_string(dev);
        for (std::size_t pi = 0; pi < policies_.size(); ++pi) {
            auto& [p, active] = policies_[pi];
            switch (p.kind) {
                case AlertKind::temperature:
                    if (fire(active[dev], s.nvml.temperature_c && *s.nvml.temperature_c > p.threshold))
                        fired.push_back(make_alert(pi, dev, *s.nvml.temperature_c, "temperature " + std::to_string(*s.nvml.temperature_c) +
                                                                                        " C" + on + ", above " + fmt(p.threshold) + " C"));
                    break;
                case AlertKind::power:
                    if (fire(active[dev], s.nvml.power_w && *s.nvml.power_w > p.threshold))
                        fired.push_back(make_alert(pi, dev, *s.nvml.power_w, "power draw " + fmt(*s.nvml.power_w) + " W" + on + ", above " +
                                                                                  fmt(p.threshold) + " W"));
                    break;
                case AlertKind::memory_fraction: {
                    const bool known = s.nvml.memory_used_bytes && s.nvml.memory_total_bytes && *s.nvml.memory_total_bytes > 0;
                    const double f = known ? double(*s.nvml.memory_used_bytes) / double(*s.nvml.memory_total_bytes) : 0;
                    if (fire(active[dev], known && f > p.threshold))
                        fired.push_back(make_alert(pi, dev, f, "device memory " + fmt(100 * f) + " % in use" + on + ", above " +
                                                                  fmt(100 * p.threshold) + " %"));
                    break;
                }
                case AlertKind::throttling: {
                    const std::uint64_t bits = s.nvml.clock_event_reasons.value_or(0) & p.bits;
                    if (fire(active[dev], bits != 0)) {
                        std::string names;
                        for (const std::string& n : nvml::clock_reason_names(bits)) names += (names.empty() ? "" : ", ") + n;
                        fired.push_back(make_alert(pi, dev, double(bits), "clocks held down" + on + ": " + names));
                    }
                    break;
                }
                case AlertKind::ecc_uncorrected: {
                    const auto base = ecc_baseline_.find(dev);
                    const std::uint64_t now = s.nvml.ecc_uncorrected.value_or(0);
                    const std::uint64_t since = base == ecc_baseline_.end() || now < base->second ? 0 : now - base->second;
                    if (fire(active[dev], since > 0))
                        fired.push_back(make_alert(pi, dev, double(since), std::to_string(since) + " uncorrected ECC error(s)" + on +
                                                                              " since monitoring began: the memory is failing"));
                    break;
                }
                case AlertKind::device_lost:
                    if (fire(active[dev], s.nvml.lost))
                        fired.push_back(make_alert(pi, dev, 1, "device " + std::to_string(dev) + " is lost (" + s.nvml.error +
                                                                  "): it has fallen off the bus and its queued work will not "
                                                                  "complete; drain this node and reset the GPU"));
                    break;
                case AlertKind::xid:
                case AlertKind::allocator_growth: break;  // take_sample's event poll; checkpoint()
            }
        }
    }

    static std::string fmt(double v) {
        char b[32];
        std::snprintf(b, sizeof b, "%.4g", v);
        return b;
    }
    // Keeps the alerts (caller holds m_).
    void record(const std::vector<Fired>& fired) {
        for (const Fired& f : fired) alerts_.push_back(f.alert);
        if (alerts_.size() > 4096) alerts_.erase(alerts_.begin(), alerts_.begin() + std::ptrdiff_t(alerts_.size() - 4096));
    }
    // Calls each fired alert's policy callback, without the lock; one that throws does not keep the
    // others from theirs (an alert fires once per violation), and the first exception is rethrown
    // after all have run.
    void notify(const std::vector<Fired>& fired) {
        std::exception_ptr first;
        for (const Fired& f : fired) {
            std::function<void(const Alert&)> callback;
            {
                std::lock_guard lk(m_);
                callback = policies_[f.policy].policy.callback;  // policies are only ever added
            }
            try {
                callback(f.alert);
            } catch (...) {
                if (!first) first = std::current_exception();
            }
        }
        if (first) std::rethrow_exception(first);
    }

    MonitorOptions options_;
    std::unique_ptr<nvml::XidWatch> xids_;
    mutable std::mutex m_;  // everything below but the thread
    std::condition_variable wake_;
    bool stopping_ = false;
    std::exception_ptr failure_;                  // the sampler's first exception since start()
    std::atomic<std::thread::id> sampler_{};      // the sampling thread while it runs
    std::vector<PolicyState> policies_;
    std::map<int, std::deque<Sample>> history_;
    std::map<int, std::uint64_t> ecc_baseline_;
    std::map<int, std::deque<std::int64_t>> checkpoints_;
    std::vector<Alert> alerts_;
    mutable std::mutex thread_m_;  // start/stop
    std::thread thread_;
    std::atomic<bool> running_{false};  // thread_ started and not yet joined
};

}  // namespace tessel::monitor
