// The main() every benchmark executable shares: it skips (exit 77) without a usable device, records
// the backend and device in the JSON context, then runs Google Benchmark with its usual flags.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdio>

#include <tessel/runtime/device.hpp>

namespace tessel::bench {
inline int run_benchmarks(int argc, char** argv) {
    if (!tessel::is_available()) {
        std::printf("SKIPPED: %s\n", tessel::unavailable_reason().c_str());
        return 77;
    }
    benchmark::AddCustomContext("backend", tessel::backend_name);
    benchmark::AddCustomContext("device", tessel::properties().name);
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
}  // namespace tessel::bench

#define TESSEL_BENCHMARK_MAIN() \
    int main(int argc, char** argv) { return ::tessel::bench::run_benchmarks(argc, argv); }
