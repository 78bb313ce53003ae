// Watching the GPU from inside a program: a tessel::monitor::Monitor samples device 0 every 50 ms on
// its own thread while a "training loop" runs element-wise work and, by mistake, keeps one
// activation per step alive. The policies: temperature above 83 C, power above 90 % of the limit,
// clocks held down by power or heat, and the leak watch over 3 checkpoints (one per step), which
// catches the mistake. At the end: the samples, their summary and the alerts, and a picture of the
// caching allocator (monitor-snapshot.html, and .json for `tessel-info --memory-snapshot`).
#include <tessel/memory/snapshot_view.hpp>
#include <tessel/monitor/monitor.hpp>
#include <tessel/tessel.hpp>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

namespace {
std::string opt(const std::optional<unsigned>& v, const char* unit) { return v ? std::to_string(*v) + unit : "n/a"; }
std::string opt(const std::optional<double>& v, const char* unit) {
    char b[32];
    std::snprintf(b, sizeof b, "%.0f%s", v ? *v : 0.0, unit);
    return v ? b : "n/a";
}
}  // namespace

int main() try {
    if (!tessel::is_available()) {
        std::printf("SKIPPED: %s\n", tessel::unavailable_reason().c_str());
        return 77;
    }
    using namespace tessel::monitor;
    const tessel::Device dev{0};
    std::printf("device 0: %s; NVML: %s\n", tessel::properties(dev).name.c_str(),
                tessel::nvml::available() ? "available" : tessel::nvml::unavailable_reason().c_str());
    Monitor monitor({.period = std::chrono::milliseconds(50), .history = 64, .devices = {dev}});
    auto print = [](const Alert& a) { std::printf("  ALERT (%s): %s\n", alert_name(a.kind), a.message.c_str()); };
    monitor.add_policy(Policy::temperature_above(83, print));
    const double limit = tessel::nvml::read(dev).power_limit_w.value_or(700);
    monitor.add_policy(Policy::power_above(0.9 * limit, print));
    monitor.add_policy(Policy::throttling(print));
    monitor.add_policy(Policy::allocator_growth(3, print));
    monitor.start();

    const std::int64_t n = std::int64_t(1) << 22;
    tessel::Tensor<float> x = tessel::full<float>({n}, 1.f), y = tessel::empty<float>({n});
    std::vector<tessel::Tensor<float>> kept;  // the mistake: one activation per step never released
    for (int step = 0; step < 5; ++step) {
        const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(120);
        while (std::chrono::steady_clock::now() < end) {
            (y = x * 0.5f + 1.f).run();
            (x = y - 1.f).run();
            tessel::current_stream().synchronize();  // a step's work is done before the next is queued
        }
        kept.push_back(y.clone());
        tessel::current_stream().synchronize();
        std::printf("step %d done, %zu activations kept\n", step, kept.size());
        monitor.checkpoint();
    }
    monitor.stop();

    std::printf("\n%8s %8s %8s %6s %12s %14s  %s\n", "t (ms)", "temp", "power", "util", "NVML used", "tessel alloc", "clock reasons");
    const auto h = monitor.history(dev);
    for (const Sample& s : h) {
        const double t = std::chrono::duration<double, std::milli>(s.nvml.time - h.front().nvml.time).count();
        std::string reasons;
        for (const auto& r : tessel::nvml::clock_reason_names(s.nvml.clock_event_reasons.value_or(0))) reasons += (reasons.empty() ? "" : ", ") + r;
        std::printf("%8.0f %8s %8s %6s %10.1f MB %12.1f MB  %s\n", t, opt(s.nvml.temperature_c, " C").c_str(), opt(s.nvml.power_w, " W").c_str(),
                    opt(s.nvml.gpu_utilization_pct, "%").c_str(), double(s.nvml.memory_used_bytes.value_or(0)) / 1e6,
                    double(s.allocated_bytes) / 1e6, reasons.empty() ? "-" : reasons.c_str());
    }
    const Summary sum = monitor.summary(dev);
    std::printf("\nsummary of %zu samples: temperature %.0f..%.0f C (mean %.1f), power %.0f..%.0f W (mean %.0f), "
                "utilisation mean %.0f %%, tessel allocated %.1f..%.1f MB\n",
                sum.samples, sum.temperature_c.min, sum.temperature_c.max, sum.temperature_c.mean, sum.power_w.min, sum.power_w.max,
                sum.power_w.mean, sum.gpu_utilization_pct.mean, sum.allocated_bytes.min / 1e6, sum.allocated_bytes.max / 1e6);
    const auto alerts = monitor.alerts();
    std::printf("%zu alert(s)\n", alerts.size());
    bool leak_seen = false;
    for (const Alert& a : alerts) leak_seen |= a.kind == AlertKind::allocator_growth;
    std::printf("leak watch: %s\n", leak_seen ? "caught the kept activations" : "saw nothing");

    // The allocator's picture: every other kept activation released, and a 96 MiB buffer's cached
    // segment split by smaller tensors, one of them freed, so the cache holds free blocks between
    // live ones.
    for (std::size_t i = 0; i < kept.size(); i += 2) kept[i] = tessel::Tensor<float>();
    { const auto big = tessel::empty<float>({24 << 20}); }
    std::vector<tessel::Tensor<float>> parts;
    for (int i = 0; i < 4; ++i) parts.push_back(tessel::empty<float>({(5 - i) << 20}));
    parts[1] = tessel::Tensor<float>();
    tessel::current_stream().synchronize();
    tessel::memory::write_snapshot("monitor-snapshot.json");
    tessel::memory::write_snapshot("monitor-snapshot.html");
    std::printf("memory snapshot: monitor-snapshot.html (and monitor-snapshot.json for tessel-info --memory-snapshot)\n");
    return leak_seen ? 0 : 1;
} catch (const std::exception& e) {
    std::fprintf(stderr, "monitor: %s\n", e.what());
    return 1;
}
