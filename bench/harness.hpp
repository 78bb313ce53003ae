// The benchmark harness every family uses: event-timed regions with warm-up and an optional L2
// flush between samples, the ceilings measured at the start of the run on the same device (device
// copy bandwidth, pinned H2D/D2H bandwidth), and counters that report GB/s and FLOP/s as a fraction
// of those ceilings. On the sim all figures are CPU figures and say so in the run's context.
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <new>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include <tessel/lib/cublas.hpp>
#include <tessel/memory/allocator.hpp>
#include <tessel/memory/caching_allocator.hpp>  // the allocators themselves
#include <tessel/memory/host_allocator.hpp>
#include <tessel/runtime/launch.hpp>
#include <tessel/stream/stream.hpp>

#include "inputs.hpp"

namespace tessel::bench {

// Ceilings measured once per run: bandwidths in GB/s (1e9 bytes/s), GEMM rates in TFLOP/s (0: not
// measured, as on the sim, which has no cuBLAS).
struct Ceilings {
    double d2d_gbs = 0;  // device-to-device copy, counting bytes read plus bytes written
    double h2d_gbs = 0;  // pinned host to device
    double d2h_gbs = 0;  // device to pinned host
    double sgemm_tflops = 0;  // cuBLAS SGEMM, 4096^3
    double bf16_tflops = 0;   // cuBLAS GEMM, bf16 inputs and output, fp32 accumulation, 8192^3
};

namespace detail {
// Median of `reps` event-timed runs of `body` on `s`, in milliseconds, after one warm-up run.
template <class F>
double median_ms(const Stream& s, int reps, F&& body) {
    Event start, stop;
    body();
    s.synchronize();
    std::vector<double> t;
    for (int i = 0; i < reps; ++i) {
        start.record(s);
        body();
        stop.record(s);
        stop.synchronize();
        t.push_back(double(start.elapsed_ms(stop)));
    }
    std::nth_element(t.begin(), t.begin() + std::ptrdiff_t(t.size() / 2), t.end());
    return t[t.size() / 2];
}
}  // namespace detail

#if defined(TESSEL_BACKEND_CUDA)
// cuBLAS's rate for an n x n x n product of T (fp32 accumulation) on random inputs, TFLOP/s: the
// tensor cores draw less power on constant or zero operands and run faster (METHOD.md measured 13%
// on zeros), which would make the ceiling, and every percentage of it, wrong.
template <class T>
double gemm_tflops(const Stream& s, int n, cudaDataType type) {
    const Tensor<T> a = random_tensor<T>({n, n}, 11), b = random_tensor<T>({n, n}, 12);
    Tensor<T> c = empty<T>({n, n});
    current_stream().synchronize();  // the fills ran there
    cublas::Handle h(s.handle());
    const float one = 1.f, zero = 0.f;
    const double ms = detail::median_ms(s, 5, [&] {
        TESSEL_CUBLAS_CHECK(cublasGemmEx(h.get(), CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a.data(), type, n, b.data(), type, n,
                                         &zero, c.data(), type, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    });
    s.synchronize();
    return 2.0 * double(n) * n * n / (ms / 1e3) / 1e12;
}
#endif

// Measures the copy ceilings with buffers large enough to leave the caches (256 MiB on a GPU, 64 MiB
// on the sim, which runs on a CPU whose caches are smaller).
inline Ceilings measure_ceilings() {
    const std::size_t bytes = backend == Backend::sim ? (std::size_t(64) << 20) : (std::size_t(256) << 20);
    Stream s = Stream::create();
    void* a = memory::allocate(bytes, s.handle());
    void* b = memory::allocate(bytes, s.handle());
    void* h = memory::allocate_host(bytes);
    rt::memset_async(a, 1, bytes, s.handle());
    Ceilings c;
    const double gb = double(bytes) / 1e9;
    c.d2d_gbs = 2 * gb / (detail::median_ms(s, 5, [&] { rt::memcpy_async(b, a, bytes, s.handle()); }) / 1e3);
    c.h2d_gbs = gb / (detail::median_ms(s, 5, [&] { rt::memcpy_async(a, h, bytes, s.handle()); }) / 1e3);
    c.d2h_gbs = gb / (detail::median_ms(s, 5, [&] { rt::memcpy_async(h, a, bytes, s.handle()); }) / 1e3);
    s.synchronize();
    memory::deallocate(a);
    memory::deallocate(b);
    memory::deallocate_host(h);
#if defined(TESSEL_BACKEND_CUDA)
    c.sgemm_tflops = gemm_tflops<float>(s, 4096, CUDA_R_32F);
    c.bf16_tflops = gemm_tflops<__nv_bfloat16>(s, 8192, CUDA_R_16BF);
#endif
    return c;
}

// The ceilings of this run (measured on first use).
inline const Ceilings& ceilings() {
    static const Ceilings c = measure_ceilings();
    return c;
}

// Writes over a buffer twice the L2 size, so the next sample starts with a cold L2.
class L2Flusher {
public:
    explicit L2Flusher(const Stream& s)
        : stream_(s), bytes_(std::size_t(std::max(properties().l2_cache_bytes, 1 << 20)) * 2),
          buffer_(memory::allocate(bytes_, s.handle())) {}
    ~L2Flusher() { memory::deallocate(buffer_); }
    L2Flusher(const L2Flusher&) = delete;
    L2Flusher& operator=(const L2Flusher&) = delete;
    void flush() { rt::memset_async(buffer_, ++pattern_, bytes_, stream_.handle()); }

private:
    Stream stream_;
    std::size_t bytes_;
    void* buffer_;
    int pattern_ = 0;
};

// How a region is timed.
struct TimingOptions {
    bool flush_l2 = false;  // set when the working set would otherwise sit in L2
    int warmup = 2;         // untimed runs first: module load, caches, allocator
};

// The host's switch for hold_stream, in pinned memory (which kernels read directly under unified
// addressing); one per process: benchmarks run one at a time.
struct HoldFlags {
    int release = 0;
    int timed_out = 0;
};
inline HoldFlags& hold_flags() {
    static HoldFlags* f = new (memory::allocate_host(sizeof(HoldFlags))) HoldFlags();  // never freed: used to the end
    return *f;
}

// Holds the stream, one thread spinning, until the host sets `release` or `timeout` ticks of
// clock64 pass (cycles on a GPU, nanoseconds on the sim), which it records in `timed_out`:
// nvbench's blocking kernel. A template so that every benchmark file may include it.
template <class = void>
__global__ void hold_stream(const volatile int* release, volatile int* timed_out, long long timeout) {
    const long long start = clock64();
    for (;;) {
#if defined(TESSEL_BACKEND_SIM)
        if (__atomic_load_n(const_cast<const int*>(release), __ATOMIC_ACQUIRE)) return;  // the host writes it from another thread
#else
        if (*release) return;
#endif
        if (clock64() - start > timeout) {
            *timed_out = 1;
            return;
        }
    }
}

// Google Benchmark calls a benchmark function again with more iterations until one call's manual
// time reaches --benchmark_min_time, and reports that call alone. A result check that downloads
// gigabytes or runs a host reference (seconds for a 1 GiB sum) is wanted in that call only, not in
// the three or four before it: time_region records whether its call may be the reported one (its
// samples add up to at least half the minimum, the reported call having all of it; or it runs the
// previous call's iteration count again, which Google Benchmark does only for a repetition after
// the first, reported whatever its time), and check_result runs the check only then. A
// benchmark with ->Iterations(n) or ->MinTime(t) below the flag's would be reported unchecked:
// check_result is not for those (none uses it).
struct ReportedCall {
    double min_time_s = 0.5;  // --benchmark_min_time or BENCHMARK_MIN_TIME (set by run_benchmarks; else Google Benchmark's default)
    benchmark::IterationCount last_iterations = -1;  // the previous call's count
    bool may_be_reported = true;
};
inline ReportedCall& reported_call() {
    static ReportedCall r;
    return r;
}

namespace detail {
// After a call's samples (time_region; not a template, so one copy per program): whether the call
// may be the reported one, and the samples' median (counter median_s). Google Benchmark's time is
// their mean; PyTorch's rows (bench/torch_compare.py) are medians, and bench/report.py sets median
// against median.
inline void finish_call(benchmark::State& state, std::vector<double>& samples) {
    const double timed_s = std::accumulate(samples.begin(), samples.end(), 0.0);
    ReportedCall& call = reported_call();
    call.may_be_reported = timed_s >= 0.5 * call.min_time_s || state.max_iterations == call.last_iterations;
    call.last_iterations = state.max_iterations;
    if (samples.empty()) return;
    const auto mid = samples.begin() + std::ptrdiff_t(samples.size() / 2);
    std::nth_element(samples.begin(), mid, samples.end());
    double median = *mid;
    if (samples.size() % 2 == 0) median = (median + *std::max_element(samples.begin(), mid)) / 2;
    state.counters["median_s"] = median;
}
}  // namespace detail

// Times `body()` (which queues work on `s`) with events, one sample per benchmark iteration, as
// Google Benchmark manual time. Use with ->UseManualTime() and ask for repetitions to get medians.
// A sample is the GPU's time alone: the stream is held by hold_stream (after the L2 flush, when
// asked) until the host has queued the sample and its stop event, so the start event fires when
// the GPU reaches the sample, not while the host is still dispatching it (PyTorch is timed the same
// way: bench/torch_compare.py), and the samples' median is reported beside their mean (counter
// median_s). A body that waits for the stream on the host (a pageable copy)
// would wait for the hold: the hold gives up after 1 ms, and the benchmark's later samples are
// held by a fixed 20 us instead (counter hold_fallback = 1).
template <class F>
void time_region(benchmark::State& state, const Stream& s, F&& body, TimingOptions o = {}) {
    std::optional<L2Flusher> flusher;
    if (o.flush_l2) flusher.emplace(s);
    const DeviceProperties p = properties();
    const long long ms = p.simulated ? 1000000 : std::max<long long>(1, p.clock_khz);  // clock64 ticks per millisecond
    HoldFlags& flags = hold_flags();
    bool released = true;  // hold until released; false: the fixed hold
    for (int i = 0; i < o.warmup; ++i) body();
    s.synchronize();
    Event start, stop;
    std::vector<double> samples;
    samples.reserve(std::size_t(std::min<benchmark::IterationCount>(state.max_iterations, 1 << 20)));
    for (auto _ : state) {
        if (flusher) flusher->flush();
        __atomic_store_n(&flags.release, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&flags.timed_out, 0, __ATOMIC_RELAXED);
        launch(hold_stream<>, 1, 1, 0, s.handle(), &flags.release, &flags.timed_out, released ? ms : ms / 50);
        start.record(s);
        body();
        stop.record(s);
        if (released) __atomic_store_n(&flags.release, 1, __ATOMIC_RELEASE);
        stop.synchronize();
        if (released && __atomic_load_n(&flags.timed_out, __ATOMIC_ACQUIRE)) {
            released = false;
            state.counters["hold_fallback"] = 1;
        }
        const double sample_s = double(start.elapsed_ms(stop)) / 1e3;
        samples.push_back(sample_s);
        state.SetIterationTime(sample_s);
    }
    detail::finish_call(state, samples);
}

// A benchmark function that reports an exception as a skipped benchmark with its message, so one
// failure (out of memory on a large shape, a CUDA error) does not end the run and lose the rest:
// wrap every registered function (RegisterBenchmark(name, guarded(fn), args...), TESSEL_BENCHMARK).
template <class F>
auto guarded(F fn) {
    return [fn](benchmark::State& state, auto&&... args) {
        try {
            fn(state, args...);
        } catch (const std::exception& e) {
            state.SkipWithError(e.what());
        }
    };
}

// Reports the bytes each iteration moved as GB/s and as a percentage of a ceiling measured in this
// run (default: the device copy bandwidth).
inline void report_bytes(benchmark::State& state, double bytes_per_iteration, double ceiling_gbs = ceilings().d2d_gbs) {
    const double gb = bytes_per_iteration * double(state.iterations()) / 1e9;
    state.counters["GB/s"] = benchmark::Counter(gb, benchmark::Counter::kIsRate);
    state.counters["pct_of_ceiling"] = benchmark::Counter(100.0 * gb / ceiling_gbs, benchmark::Counter::kIsRate);
    state.counters["bytes_per_iter"] = bytes_per_iteration;
}
// Reports FLOPs per iteration as GFLOP/s, and as a percentage of `ceiling_tflops` when one was
// measured (e.g. ceilings().sgemm_tflops for fp32 work).
inline void report_flops(benchmark::State& state, double flops_per_iteration, double ceiling_tflops = 0) {
    const double gflop = flops_per_iteration * double(state.iterations()) / 1e9;
    state.counters["GFLOP/s"] = benchmark::Counter(gflop, benchmark::Counter::kIsRate);
    if (ceiling_tflops > 0)
        state.counters["pct_of_ceiling"] = benchmark::Counter(100.0 * gflop / (ceiling_tflops * 1e3), benchmark::Counter::kIsRate);
    state.counters["flops_per_iter"] = flops_per_iteration;
}
// Reports the relative error of the benchmark's result against its reference; a result outside
// `tolerance` fails the benchmark (a wrong answer is never reported as a speed).
inline void report_error(benchmark::State& state, double relative_error, double tolerance) {
    state.counters["rel_error"] = relative_error;
    if (!(relative_error <= tolerance))
        state.SkipWithError(("wrong result: relative error " + std::to_string(relative_error) + " > " +
                             std::to_string(tolerance)).c_str());
}

// report_error(state, error(), tolerance) in the call Google Benchmark may report (see
// ReportedCall); in an earlier call `error` is not run. A reported call that was not checked would
// show the counter unchecked = 1 (never expected: the reported call always passes the test).
template <class F>
void check_result(benchmark::State& state, F&& error, double tolerance) {
    if (!reported_call().may_be_reported) {
        state.counters["unchecked"] = 1;
        return;
    }
    report_error(state, error(), tolerance);
}

}  // namespace tessel::bench

// BENCHMARK(fn) with fn guarded (an exception skips the benchmark), under fn's own name.
#define TESSEL_BENCHMARK_CONCAT2(a, b) a##b
#define TESSEL_BENCHMARK_CONCAT(a, b) TESSEL_BENCHMARK_CONCAT2(a, b)
#define TESSEL_BENCHMARK(...)                                                                    \
    [[maybe_unused]] static ::benchmark::internal::Benchmark* TESSEL_BENCHMARK_CONCAT(tessel_benchmark_, __COUNTER__) = \
        ::benchmark::RegisterBenchmark(#__VA_ARGS__, ::tessel::bench::guarded(__VA_ARGS__))
