// Row-wise normalisations over one axis: softmax and log_softmax (numerically stable: online max and
// rescaled sum), layer_norm and rms_norm (optional weight and bias, statistics in float or double).
// Each is one kernel over contiguous rows (kernels/tessel/kernels/rows.cuh) that reads a row once
// when it fits in registers (<= 1024) or shared memory (<= 227 KiB on Hopper); another axis is moved
// last with the device transpose first.
#pragma once

#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <source_location>
#include <tuple>

#include <tessel/core/ptx.hpp>
#include <tessel/kernels/rows.cuh>

#include "../runtime/launch.hpp"
#include "assign.hpp"  // detail::aligned, max_blocks, device_attribute
#include "copy.hpp"
#include "reducers.hpp"

namespace tessel::ops {

// Running maximum and sum of exp(x - maximum) (Milakov and Gimelshein's online softmax).
template <class C>
struct MaxSum {
    C max;
    C sum;
};
// Rounded: the output is rounded to 16 bits or fewer (bf16, half, fp8), and exp(d) is taken as
// (2^(d log2(e) / 2))^2 by the approximate exp2 (ptx::ex2_approx_ftz): 3 SASS instructions and no
// predicate where expf takes 9 (docs/kernels.md). Halving keeps the approximate exp2's input and
// result normal down to d = -174, so a result below float's normal range (bf16 has the same) is
// formed by the square, as expf forms it. Relative error at most 1.2e-7 |d| + 5.4e-7 (the
// constant's and the product's roundings doubled by the square, 2 ulp of exp2 doubled, the
// square's rounding): 1.1e-5 at d = -87, where exp underflows, 22 times below half a unit in the
// last place of half (2^-12 at its finest), the finest such output.
template <class C, bool Log, bool Rounded = false>
struct SoftmaxRow {
    static_assert(!Rounded || std::is_same_v<C, float>, "the approximate exp is for float computation");
    using compute_t = C;
    __host__ __device__ static C exp(C d) {
        if constexpr (Rounded) {
            const C half_power = ptx::ex2_approx_ftz(d * C(0.72134752044448170368));  // log2(e) / 2
            return half_power * half_power;
        } else {
            return math::exp(d);
        }
    }
    using stats_t = MaxSum<C>;
    struct Prepared {
        C max, scale;  // softmax: exp(x - max) * scale, scale = 1 / sum; log: x - max - scale, scale = log(sum)
    };
    __host__ __device__ stats_t identity() const { return {-std::numeric_limits<C>::infinity(), C(0)}; }
    // A side whose maximum is the combined one is not rescaled: exact, and right for two sides
    // whose maximum is -inf (masked entries), where exp(-inf - -inf) would be NaN.
    __host__ __device__ stats_t combine(stats_t a, stats_t b) const {
        const C m = Maximum{}(a.max, b.max);
        const C sa = a.max == m ? a.sum : a.sum * exp(a.max - m);
        const C sb = b.max == m ? b.sum : b.sum * exp(b.max - m);
        return {m, sa + sb};
    }
    // One exp per element: only a new maximum rescales the running sum. NaN fails both comparisons
    // and makes the sum NaN; a row of only -inf ends as {-inf, n}, whose outputs are NaN (as PyTorch's).
    __host__ __device__ stats_t accumulate(stats_t s, C x) const {
        if (x > s.max) return {x, s.sum * exp(s.max - x) + C(1)};
        if (x == s.max) return {s.max, s.sum + C(1)};
        return {s.max, s.sum + exp(x - s.max)};
    }
    // A +inf maximum makes x - max NaN or -inf for every entry: the whole row is NaN, as in PyTorch.
    __host__ __device__ Prepared finish(stats_t s, std::int64_t) const {
        const C sum = s.max == std::numeric_limits<C>::infinity() ? std::numeric_limits<C>::quiet_NaN() : s.sum;
        return {s.max, Log ? math::log(sum) : C(1) / sum};
    }
    __host__ __device__ C apply(const Prepared& p, C x, std::int64_t) const {
        return Log ? x - p.max - p.scale : exp(x - p.max) * p.scale;
    }
    // The row in registers (kernels::rows_per_warp): the maximum first, then exp(x - max) once per
    // element for the sum, kept for the output (softmax) or not needed by it (log_softmax). NaN or
    // +inf anywhere, or a row of only -inf, make x - max NaN for some element, so the sum and the
    // whole row NaN, as above.
    static constexpr bool output_from_exp = !Log;
    __host__ __device__ C shifted_exp(C x, C max) const { return exp(x - max); }
    __host__ __device__ Prepared finish_max_sum(C max, C sum) const { return {max, Log ? math::log(sum) : C(1) / sum}; }
    __host__ __device__ C apply_shifted(const Prepared& p, C v) const { return Log ? v - p.max - p.scale : v * p.scale; }
    // The cached block and cluster paths keep e = exp(x - local) for a slice whose maximum is `local`
    // (softmax only): exp(x - max) / sum = e * (exp(local - max) / sum), one exp per slice. A slice of
    // only -inf has e = 0 and a factor of 0; a row of only -inf, a factor of NaN.
    __host__ __device__ Prepared finish_rebased(C max, C sum, C local) const { return {max, exp(local - max) / sum}; }
};

// (x - mean) / sqrt(var + eps) * weight + bias, population variance (Welford).
template <class T, class C>
struct LayerNormRow {
    using compute_t = C;
    using stats_t = Moments<C>;
    struct Prepared {
        C mean, rstd;
    };
    const T* weight;  // may be null: 1
    const T* bias;    // may be null: 0
    C eps;
    static constexpr int column_parameters = 2;  // weight and bias (kernels::rows_per_warp_min_blocks)
    __host__ __device__ stats_t identity() const { return {C(0), C(0), 0}; }
    __host__ __device__ stats_t combine(stats_t a, stats_t b) const { return VarianceReducer<C, false>{}.combine(a, b); }
    // Welford's update: one division per element.
    __host__ __device__ stats_t accumulate(stats_t s, C x) const {
        const std::int64_t n = s.count + 1;
        const C delta = x - s.mean, mean = s.mean + delta / C(n);
        return {mean, s.m2 + delta * (x - mean), n};
    }
    __host__ __device__ Prepared finish(stats_t s, std::int64_t n) const {
        return {s.mean, C(1) / math::sqrt(s.m2 / C(n) + eps)};
    }
    // The row in registers (kernels::rows_per_warp): the mean and the sum of centred squares, taken
    // in two exact passes instead of Welford's division per element.
    __host__ __device__ Prepared centered(C mean, C squares, std::int64_t n) const { return {mean, C(1) / math::sqrt(squares / C(n) + eps)}; }
    __host__ __device__ C apply(const Prepared& p, C x, std::int64_t c) const {
        C y = (x - p.mean) * p.rstd;
        if (weight) y *= cast<C>(weight[c]);
        if (bias) y += cast<C>(bias[c]);
        return y;
    }
};

// x / sqrt(mean(x^2) + eps) * weight.
template <class T, class C>
struct RmsNormRow {
    using compute_t = C;
    using stats_t = C;
    const T* weight;  // may be null: 1
    C eps;
    __host__ __device__ stats_t identity() const { return C(0); }
    __host__ __device__ stats_t combine(stats_t a, stats_t b) const { return a + b; }
    __host__ __device__ stats_t accumulate(stats_t s, C x) const { return s + x * x; }
    __host__ __device__ C finish(stats_t s, std::int64_t n) const { return C(1) / math::sqrt(s / C(n) + eps); }
    __host__ __device__ C apply(C rstd, C x, std::int64_t c) const { return weight ? x * rstd * cast<C>(weight[c]) : x * rstd; }
};

namespace detail {

template <class T>
using row_compute_t = std::conditional_t<std::is_same_v<T, double>, double, float>;
// softmax (Log false) or log_softmax of rows of T: the cheaper exp where outputs keep at most 16 bits.
template <class T, bool Log>
using softmax_row_t = SoftmaxRow<row_compute_t<T>, Log, (sizeof(T) <= 2)>;

// How many clusters of `size` blocks of Kernel, each with `threads` threads and `bytes` of dynamic
// shared memory, the device runs at once (0: none fit), asked once per device and configuration.
// Also 0 when the kernel's code was compiled for an architecture without clusters (ptxVersion) (a build for an
// older GPU JIT-run on sm_90 would reach the kernel's __trap stub). The sim runs any cluster: it
// answers with its multiprocessors / size.
template <auto Kernel>
int active_clusters(Device d, int size, unsigned threads, std::size_t bytes) {
    static std::mutex m;
    static std::map<std::tuple<int, int, unsigned, std::size_t>, int> known;
    const auto key = std::make_tuple(d.index, size, threads, bytes);
    std::lock_guard lock(m);
    if (auto it = known.find(key); it != known.end()) return it->second;
    int active = std::max(1, multiprocessors(d) / size);
#if !defined(TESSEL_BACKEND_SIM)
    cudaFuncAttributes attributes{};
    TESSEL_CUDA_CHECK(cudaFuncGetAttributes(&attributes, Kernel));
    // The PTX's architecture, not the binary's: PTX for compute_80 JIT-compiled on sm_90 has
    // binaryVersion 90 but was built with __CUDA_ARCH__ 800, the cluster kernel's __trap stub.
    if (attributes.ptxVersion < 90) {
        active = 0;
    } else {
        cudaLaunchConfig_t config{};
        config.gridDim = dim3(unsigned(size));
        config.blockDim = dim3(threads);
        config.dynamicSmemBytes = bytes;
        cudaLaunchAttribute attribute[1];
        attribute[0].id = cudaLaunchAttributeClusterDimension;
        attribute[0].val.clusterDim = {unsigned(size), 1, 1};
        config.attrs = attribute;
        config.numAttrs = 1;
        TESSEL_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&active, Kernel, &config));
    }
#endif
    known.emplace(key, active);
    return active;
}

// Runs `op` over the rows of x along `axis`; the result has x's shape and is contiguous.
template <Element T, class Op>
Tensor<T> normalize_rows(const char* name, const Tensor<T>& x, int axis, Op op, std::optional<StreamArg> stream_opt,
                         std::source_location site) {
    static_assert(is_float_type<T>, "row normalisations need a floating-point tensor; convert with cast_to<float>(...) first");
    require(x.defined(), name, ": an undefined (default-constructed) tensor");
    require(x.space() == MemorySpace::device || x.space() == MemorySpace::managed, name, ": the input (", ::tessel::dtype_name(dtype_of<T>), " ",
            x.shape(), ") is in ", space_name(x.space()), " memory; move it to the device first");
    // A 0-d tensor is one row of one element along axis 0 or -1 (torch wraps its dims as if it had one).
    if (x.dim() == 0) {
        require(axis == 0 || axis == -1, name, ": axis ", axis, " out of range for a 0-d tensor (0 or -1)");
        return normalize_rows(name, x.view(Shape{1}), -1, op, stream_opt, site).view(Shape{});
    }
    require(axis >= -x.dim() && axis < x.dim(), name, ": axis ", axis, " out of range for shape ", x.shape());
    const int last = x.dim() - 1, a = axis < 0 ? axis + x.dim() : axis;
    const Device device = x.device();
    const rt::stream_t stream = stream_for(name, stream_opt, device);
    const TensorOptions on{.device = device, .stream = stream, .non_blocking = true};
    if (a != last) {
        const Tensor<T> moved = normalize_rows(name, x.transpose(a, last).to(on), -1, op, stream, site);
        return moved.transpose(a, last).to(on);
    }
    const Tensor<T> in = x.is_contiguous() ? x : x.to(on);
    Tensor<T> out = empty<T>(x.shape(), on);
    const std::int64_t cols = x.shape()[last], rows = cols == 0 ? 0 : x.numel() / cols;
    if (rows == 0) return out;
    // Rows and columns are counted in 32 bits, element offsets in 64: [8192, 262144] logits (2^31
    // elements) are fine; 2^31 - 1 or more rows (the other dims' product) or columns are refused.
    require(rows < std::numeric_limits<std::int32_t>::max() && cols < std::numeric_limits<std::int32_t>::max(), name, ": ", rows,
            " rows of ", cols, "; row kernels count rows and columns with 32 bits (split the tensor)");
    using I = std::uint32_t;
    DeviceGuard guard(device);
    constexpr int V = int(16 / sizeof(T)) > 1 ? int(16 / sizeof(T)) : 1;
    // 16-byte accesses on rows of any length (each row's aligned middle as vectors, its ends one
    // element per thread): input and output rows must share their offset within 16 bytes. Rows of
    // whole aligned vectors skip the edge code on the warp path (kernels::rows_per_warp's Edges);
    // rows of 64 or fewer (8 lanes or a thread a row, too few for the ends) and doubles there keep
    // to whole vectors: with edges, 32 doubles a lane spill in log_softmax.
    const bool whole = cols % V == 0 && aligned(in.data(), 16) && aligned(out.data(), 16);
    constexpr bool warp_edges = V > 1 && sizeof(T) < 8;
    const bool vector = V > 1 && (reinterpret_cast<std::uintptr_t>(in.data()) - reinterpret_cast<std::uintptr_t>(out.data())) % 16 == 0 &&
                        (whole || (warp_edges && cols > 64) || cols > 1024);
    // Rows beyond one block's shared memory: a cluster of 2, 4 or 8 blocks (the fewest whose shared
    // memory holds the row) on devices with clusters (sm_90+); false if none fits or can be scheduled.
    auto try_cluster = [&]<int W>() {
        if (device_attribute<cudaDevAttrComputeCapabilityMajor>(device) < 9) return false;
        const auto optin = std::size_t(device_attribute<cudaDevAttrMaxSharedMemoryPerBlockOptin>(device));
        const std::int64_t vectors = cols / W;
        for (const int size : {2, 4, 8}) {
            const std::int64_t slice = (vectors + size - 1) / size;
            const std::size_t bytes = kernels::cluster_header_bytes<Op> + std::size_t(slice) * W * sizeof(T);
            if (bytes > optin) continue;
            constexpr auto kernel = kernels::rows_per_cluster<W, Op, T, I>;
            allow_dynamic_smem<kernel>(device, int(optin));
            const unsigned threads = unsigned(std::clamp<std::int64_t>((slice / 8 + 31) / 32 * 32, 128, 1024));
            // A cluster needs `size` multiprocessors with this much shared memory free in one GPC:
            // the grid is as many clusters as run at once (each walks rows), never more than rows.
            const int active = active_clusters<kernel>(device, size, threads, bytes);
            if (active == 0) continue;  // a bigger cluster has smaller slices, which may fit
            const std::int64_t clusters = std::clamp<std::int64_t>(rows, 1, active);
            launch_cluster(kernel, GridDim(unsigned(clusters * size), site), dim3(threads), dim3(unsigned(size)), bytes, stream, in.data(),
                           out.data(), I(rows), I(cols), I(slice), op);
            return true;
        }
        return false;
    };
    auto run = [&]<int W>() {
        if (cols <= 1024) {
            // A row per thread up to 8 values (a router's softmax over 8 experts: 16 bf16 bytes),
            // per 8 lanes up to 64, per warp beyond: 256, 32 or 8 rows a 256-thread block.
            constexpr int few = std::max(8, W);
            const int lanes = cols <= 8 ? 1 : cols <= 64 ? 8 : 32;
            const auto blocks = unsigned(std::clamp<std::int64_t>((rows * lanes + 255) / 256, 1, max_blocks(device, 32)));
            auto warp = [&]<bool Edges>() {
                return cols <= 8 * 32 ? kernels::rows_per_warp<32, few, W, Edges, Op, T, I> : kernels::rows_per_warp<32, std::max(32, W), W, Edges, Op, T, I>;
            };
            auto kernel = lanes == 1 ? kernels::rows_per_warp<1, few, W, false, Op, T, I>
                          : lanes == 8 ? kernels::rows_per_warp<8, few, W, false, Op, T, I>
                                       : warp.template operator()<false>();
            if constexpr (W > 1 && warp_edges)
                if (lanes == 32 && !whole) kernel = warp.template operator()<true>();
            launch(kernel, GridDim(blocks, site), dim3(256), 0, stream, in.data(), out.data(), I(rows), I(cols), op);
            return;
        }
        // About 8 vectors per thread: enough loads in flight, few idle threads on the shorter rows.
        const std::int64_t vectors = cols / W;
        const unsigned threads = unsigned(std::clamp<std::int64_t>((vectors / 8 + 31) / 32 * 32, 128, 1024));
        const std::size_t bytes = std::size_t(cols) * sizeof(T);
        const auto blocks = unsigned(std::clamp<std::int64_t>(rows, 1, max_blocks(device, 16)));
        // Dynamic plus static shared memory must stay within the opt-in limit (48 KiB without it);
        // 128 bytes are left for the static array's alignment.
        const std::size_t fixed = kernels::rows_static_smem<Op> + 128;
        const auto optin = std::size_t(device_attribute<cudaDevAttrMaxSharedMemoryPerBlockOptin>(device));
        if (bytes + fixed <= optin) {
            constexpr auto kernel = kernels::rows_per_block<W, true, Op, T, I>;
            if (bytes + fixed > 48 * 1024) allow_dynamic_smem<kernel>(device, int(optin - fixed));
            launch(kernel, GridDim(blocks, site), dim3(threads), bytes, stream, in.data(), out.data(), I(rows), I(cols), op);
        } else if (!try_cluster.template operator()<W>()) {
            launch(kernels::rows_per_block<W, false, Op, T, I>, GridDim(blocks, site), dim3(threads), 0, stream, in.data(), out.data(),
                   I(rows), I(cols), op);
        }
    };
    if (vector) run.template operator()<V>();
    else run.template operator()<1>();
    return out;
}

// A layer_norm/rms_norm weight or bias checked against x; one that is not contiguous (a strided
// view, an expanded 0-d tensor) is copied on the op's stream first, as torch takes it.
template <Element T>
std::optional<Tensor<T>> parameter(const char* name, const char* what, const std::optional<Tensor<T>>& p, const Tensor<T>& x,
                                   std::optional<StreamArg> stream) {
    if (!p) return std::nullopt;
    const std::int64_t cols = x.shape()[x.dim() - 1];
    require(p->defined() && p->dim() == 1 && p->numel() == cols, name, ": ", what, " must be a 1-d tensor of ", cols,
            " elements (the last dim of ", x.shape(), "), not shape ", ::tessel::detail::shape_of(*p));
    require(p->space() == MemorySpace::device || p->space() == MemorySpace::managed, name, ": ", what, " is in ",
            space_name(p->space()), " memory; it must be in device memory on the input's device ", x.device().index);
    require(p->device() == x.device(), name, ": ", what, " is on device ", p->device().index, " and the input on device ",
            x.device().index, "; move one of them");
    if (p->is_contiguous()) return p;
    return p->contiguous(stream_for(name, stream, p->device()));
}
// The data of a checked parameter, or null for none.
template <Element T>
const T* data_or_null(const std::optional<Tensor<T>>& p) {
    return p ? p->data() : nullptr;
}

}  // namespace detail
}  // namespace tessel::ops

namespace tessel {

// exp(x - max) / sum(exp(x - max)) along `axis`.
template <Element T>
Tensor<T> softmax(const Tensor<T>& x, int axis = -1, std::optional<StreamArg> stream = {},
                  std::source_location site = std::source_location::current()) {
    return ops::detail::normalize_rows("softmax", x, axis, ops::detail::softmax_row_t<T, false>{}, stream, site);
}
// x - max - log(sum(exp(x - max))) along `axis`.
template <Element T>
Tensor<T> log_softmax(const Tensor<T>& x, int axis = -1, std::optional<StreamArg> stream = {},
                      std::source_location site = std::source_location::current()) {
    return ops::detail::normalize_rows("log_softmax", x, axis, ops::detail::softmax_row_t<T, true>{}, stream, site);
}
// Layer normalisation over the last dim: (x - mean) / sqrt(var + eps) * weight + bias.
template <Element T>
Tensor<T> layer_norm(const Tensor<T>& x, const std::type_identity_t<std::optional<Tensor<T>>>& weight = {}, const std::type_identity_t<std::optional<Tensor<T>>>& bias = {},
                     double eps = 1e-5, std::optional<StreamArg> stream = {},
                     std::source_location site = std::source_location::current()) {
    using C = ops::detail::row_compute_t<T>;
    require(x.defined() && x.dim() > 0, "layer_norm: needs a defined tensor of at least one dim");
    require(std::isfinite(eps) && eps >= 0, "layer_norm: eps ", eps, " must be finite and not negative");
    const auto w = ops::detail::parameter("layer_norm", "weight", weight, x, stream);
    const auto b = ops::detail::parameter("layer_norm", "bias", bias, x, stream);
    const ops::LayerNormRow<T, C> op{ops::detail::data_or_null(w), ops::detail::data_or_null(b), C(eps)};
    return ops::detail::normalize_rows("layer_norm", x, -1, op, stream, site);
}
// RMS normalisation over the last dim: x / sqrt(mean(x^2) + eps) * weight.
template <Element T>
Tensor<T> rms_norm(const Tensor<T>& x, const std::type_identity_t<std::optional<Tensor<T>>>& weight = {}, double eps = 1e-6,
                   std::optional<StreamArg> stream = {}, std::source_location site = std::source_location::current()) {
    using C = ops::detail::row_compute_t<T>;
    require(x.defined() && x.dim() > 0, "rms_norm: needs a defined tensor of at least one dim");
    require(std::isfinite(eps) && eps >= 0, "rms_norm: eps ", eps, " must be finite and not negative");
    const auto w = ops::detail::parameter("rms_norm", "weight", weight, x, stream);
    const ops::RmsNormRow<T, C> op{ops::detail::data_or_null(w), C(eps)};
    return ops::detail::normalize_rows("rms_norm", x, -1, op, stream, site);
}

}  // namespace tessel
