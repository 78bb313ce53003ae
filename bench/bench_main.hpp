// The main() every benchmark executable shares (and tessel-bench, which links every family): it
// skips (exit 77) without a usable device, writes the device header and the ceilings measured now
// into the run's context (console and JSON), then runs Google Benchmark with its usual flags.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <tessel/lib/nvml.hpp>

#include "harness.hpp"

namespace tessel::bench {

inline void add_device_context() {
    const auto p = properties();
    const auto v = versions();
    auto fmt = [](double x) {
        char b[32];
        std::snprintf(b, sizeof b, "%.1f", x);
        return std::string(b);
    };
    benchmark::AddCustomContext("backend", backend_name);
    benchmark::AddCustomContext("figures", backend == Backend::sim ? "CPU figures of the simulation backend, not GPU times"
                                                                   : "GPU figures, CUDA event timing");
    benchmark::AddCustomContext("device", p.name);
    benchmark::AddCustomContext("compute_capability", p.compute_capability());
    benchmark::AddCustomContext("sm_count", std::to_string(p.sm_count));
    benchmark::AddCustomContext("sm_clock_mhz", std::to_string(p.clock_khz / 1000));
    benchmark::AddCustomContext("memory_gib", fmt(double(p.total_memory) / double(1 << 30)));
    benchmark::AddCustomContext("runtime_driver", version_string(v.runtime) + " / " + version_string(v.driver));
    const Ceilings& c = ceilings();
    benchmark::AddCustomContext("ceiling_d2d_copy_gbs", fmt(c.d2d_gbs));
    benchmark::AddCustomContext("ceiling_h2d_pinned_gbs", fmt(c.h2d_gbs));
    benchmark::AddCustomContext("ceiling_d2h_pinned_gbs", fmt(c.d2h_gbs));
    benchmark::AddCustomContext("ceiling_sgemm_tflops", c.sgemm_tflops > 0 ? fmt(c.sgemm_tflops) : "n/a");
    benchmark::AddCustomContext("ceiling_bf16_gemm_tflops", c.bf16_tflops > 0 ? fmt(c.bf16_tflops) : "n/a");
    if (auto r = nvml::clock_reasons(current_device()))
        benchmark::AddCustomContext("clocks_at_start", nvml::throttling(*r).empty() ? "not throttled" : nvml::throttling(*r));
}

// After the run: a warning when NVML says the clocks were being held down at the end.
inline void warn_if_throttled() {
    if (auto r = nvml::clock_reasons(current_device()); r && !nvml::throttling(*r).empty())
        std::fprintf(stderr, "WARNING: the GPU's clocks were throttled at the end of the run (%s); figures may be low\n",
                     nvml::throttling(*r).c_str());
}

inline int run_benchmarks(int argc, char** argv) {
    if (!is_available()) {
        std::printf("SKIPPED: %s\n", unavailable_reason().c_str());
        return 77;
    }
    add_device_context();
    // The minimum time a reported call runs (check_result's test), as Google Benchmark takes it:
    // the environment's BENCHMARK_MIN_TIME, then the flag; "100x" (an iteration count, newer
    // Google Benchmark) makes every call a reported one.
    auto min_time = [](const std::string& v) { return v.ends_with('x') ? 0.0 : std::strtod(v.c_str(), nullptr); };
    if (const char* env = std::getenv("BENCHMARK_MIN_TIME")) reported_call().min_time_s = min_time(env);
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i], flag = "--benchmark_min_time=";
        if (a.starts_with(flag)) reported_call().min_time_s = min_time(a.substr(flag.size()));
    }
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    // None run: a filter that matched nothing or did not compile (Google Benchmark has said which);
    // scripts must see it fail rather than a report without the figures they asked for.
    const std::size_t ran = benchmark::RunSpecifiedBenchmarks();
    warn_if_throttled();
    benchmark::Shutdown();
    return ran > 0 ? 0 : 1;
}

}  // namespace tessel::bench
