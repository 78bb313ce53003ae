// Row-wise normalisation: softmax, log_softmax, layer_norm, rms_norm and anything else of the form
//   stats = combine over the row of accumulate(x);  out[c] = apply(finish(stats), x[c], c)
// over contiguous rows, read once where the row fits on chip:
//   rows_per_warp   rows of at most 1024: a warp per row (8 lanes or a thread for rows of at most 64
//                   or 8), the row in registers;
//   rows_per_block  longer rows: a block per row; with Cached the row is kept in dynamic shared memory
//                   (up to the device's opt-in limit, 227 KiB on Hopper) and read from global memory
//                   once; without, it is read twice (statistics, then output);
//   rows_per_cluster  rows up to 8 blocks' shared memory (sm_90 clusters): each block of the cluster
//                   keeps a slice, statistics meet through distributed shared memory, read once.
// Softmax and layer_norm take their statistics in exact phases over values already on chip (the
// maximum, then one exp per element; the mean, then centred squares), not by per-element online
// updates; the two-read path folds groups of 4 vectors the same way (fold_group).
// V > 1 moves V elements per 16-byte load and store, on rows of any length whose input and output
// share their offset within 16 bytes (the host checks): the row's aligned middle in vectors, the
// fewer than V elements before and after it one per thread (RowSpan, RowEdge). Statistics combine in an order fixed by the
// shape and alignment (which choose V, the block size and each row's span), never by timing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

#include <tessel/kernels/reduce.cuh>

namespace tessel::kernels {

// Every lane of each group of Width lanes gets the group's first lane's value of any trivially
// copyable type.
template <int Width = 32, class A>
__device__ A warp_broadcast(const A& a) {
    if constexpr (Width == 1) return a;
    constexpr int words = int((sizeof(A) + 3) / 4);
    unsigned w[words] = {};
    std::memcpy(w, &a, sizeof(A));
    for (int i = 0; i < words; ++i) w[i] = __shfl_sync(0xffffffffu, w[i], 0, Width);
    A r;
    std::memcpy(&r, w, sizeof(A));
    return r;
}

// Combines one value per thread across the block (blockDim.x a multiple of 32, at most 1024) and
// gives every thread the result. `across_warps` holds 32 values; it is free again on return.
template <class Op, class S>
__device__ S block_combine(const Op& op, S s, S* across_warps) {
    const int t = int(threadIdx.x), warps = int(blockDim.x) / 32;
    s = warp_combine(op, s, 32);
    if (t % 32 == 0) across_warps[t / 32] = s;
    __syncthreads();
    if (t < 32) {
        S w = t < warps ? across_warps[t] : op.identity();
        w = warp_combine(op, w, 32);
        if (t == 0) across_warps[0] = w;
    }
    __syncthreads();
    const S all = across_warps[0];
    __syncthreads();  // across_warps may be written again by the caller's next combine
    return all;
}

// Every lane of each group of Width lanes (all 32 of the warp take part) gets f over the group's
// values, by an xor butterfly: at each step a lane and its partner compute f(a, b) and f(b, a), the
// same for commutative f (+, max), so all agree.
template <int Width = 32, class F, class C>
__device__ C warp_all(F f, C x) {
    for (int d = Width / 2; d >= 1; d /= 2) {
        unsigned w[(sizeof(C) + 3) / 4];
        std::memcpy(w, &x, sizeof(C));
        for (auto& word : w) word = __shfl_xor_sync(0xffffffffu, word, d);
        C y;
        std::memcpy(&y, w, sizeof(C));
        x = f(x, y);
    }
    return x;
}

// Ops whose statistics are a maximum and a sum of exp(x - maximum) (softmax): stats_t has .max and
// .sum; shifted_exp(x, max) is exp(x - max), finish_max_sum gives what apply and apply_shifted take.
template <class Op>
concept shifted_exp_op = requires(const Op& o, typename Op::compute_t c) {
    o.shifted_exp(c, c);
    o.finish_max_sum(c, c);
};
// Ops whose statistics are a mean and centred squares (layer_norm): stats_t is {mean, m2, count}.
template <class Op>
concept centered_op = requires(const Op& o, typename Op::compute_t c) { o.centered(c, c, std::int64_t(0)); };

// Blocks per SM the warp path asks the compiler to fit (__launch_bounds__). A lane's PerLane values
// take PerLane * sizeof(C) / 4 registers, and an op that reads per-column parameters (layer_norm's
// weight and bias: Op::column_parameters) has their loads in flight too: 32 floats with no or one
// parameter fit under 80 registers (3 blocks of 256 threads), 8 under 64 (4 blocks), 32 doubles or
// 32 floats with two parameters under 128 (2 blocks).
template <class Op>
inline constexpr int column_parameters = [] {
    if constexpr (requires { Op::column_parameters; }) return Op::column_parameters;
    else return 0;
}();
template <int PerLane, class Op>
inline constexpr int rows_per_warp_min_blocks = [] {
    const int bytes = PerLane * int(sizeof(typename Op::compute_t)) * (column_parameters<Op> > 1 ? 2 : 1);
    return bytes <= 32 ? 4 : bytes <= 128 ? 3 : 2;
}();

// Where a row's 16-byte vectors lie: `head` elements up to the first 16-byte boundary, `vectors`
// whole vectors of V, then `tail` elements (head and tail under V; with V == 1 all of the row is
// "vectors"). A vocabulary of 50257 bf16 logits is read 16 bytes at a time but for at most 14 of
// them, whatever the row's offset.
template <class I>
struct RowSpan {
    I head, vectors, tail;
};
template <int V, class T, class I>
__device__ RowSpan<I> row_span(const T* row, I cols) {
    if constexpr (V == 1) {
        return {I(0), cols, I(0)};
    } else {
        const I misaligned = I((reinterpret_cast<std::uintptr_t>(row) % 16) / sizeof(T));
        const I head = misaligned == 0 ? I(0) : I(V) - misaligned < cols ? I(V) - misaligned : cols;
        const I vectors = (cols - head) / I(V);
        return {head, vectors, cols - head - vectors * I(V)};
    }
}

// The element outside a row's vectors that a thread keeps through the phases: thread t < head +
// tail takes column t of the head, or element t - head of the tail. `value` is x, and after the
// sum of a softmax that keeps its exps (keeps_exp), exp(x - slice maximum).
template <class C, class I>
struct RowEdge {
    C value = C(0);
    I column = I(0);
    bool present = false;
};
template <int V, class C, class T, class I>
__device__ RowEdge<C, I> load_edge(const T* row, RowSpan<I> span, I t) {
    if (t >= span.head + span.tail) return {};
    const I column = t < span.head ? t : t + span.vectors * I(V);
    return {ops::cast<C>(row[column]), column, true};
}

// Lanes lanes per row: a warp (8 rows per 256-thread block), or for short rows 8 lanes or one
// thread (32 or 256 rows a block, so that a row of 8 experts' logits does not keep 31 lanes idle);
// each lane keeps PerLane values (PerLane / V vectors).
// Every load of the row is issued before any value is used (the lane's vectors sit at immediate
// offsets from one address), then the statistics are taken from registers: ops that define
// `shifted_exp` (softmax) reduce the maximum first and compute exp(x - max) once per element,
// reused by the output; ops that define `centered` (layer_norm) take the mean, then the centred
// squares (two exact passes over registers, no division per element); others fold `accumulate`.
// Edges: rows that are not all whole aligned vectors (RowSpan); without, the host has checked that
// they are, and no edge code is compiled (it costs 70 to 80 instructions per row and lane); only
// with 32 lanes, which hold a row's up to 2V - 2 edge elements one each.
// budget: threads 256, registers 128, hot
template <int Lanes, int PerLane, int V, bool Edges, class Op, class T, class I>
__global__ void __launch_bounds__(256, rows_per_warp_min_blocks<PerLane, Op>)
rows_per_warp(const T* __restrict__ in, T* __restrict__ out, I rows, I cols, Op op) {
    static_assert(PerLane % V == 0, "a lane holds whole vectors");
    static_assert(Lanes == 32 || Lanes == 8 || Lanes == 1, "a row takes a warp, 8 lanes or one thread");
    static_assert(!Edges || Lanes == 32, "edge elements need a lane each");
    using C = typename Op::compute_t;
    using P = ops::Packed<T, V>;
    constexpr int vectors = PerLane / V, rows_per_block = 256 / Lanes;
    const int lane = int(threadIdx.x) % Lanes, group = int(threadIdx.x) / Lanes;
    const int n = int(cols);  // at most 1024 on this path
    for (I base = I(blockIdx.x) * rows_per_block; base < rows; base += I(gridDim.x) * rows_per_block) {
        const I row = base + I(group);
        // A warp of one row skips a row past the end whole, so the shuffles below stay uniform; a
        // warp of several rows keeps a group past the end in them, with nothing loaded or stored.
        if (Lanes == 32 && row >= rows) continue;
        const bool active = Lanes == 32 || row < rows;
        const T* xr = in + std::int64_t(active ? row : I(0)) * cols;
        // Lane l holds vectors l, l + Lanes, ... of the row's aligned middle, and lanes below head +
        // tail one edge element each.
        const RowSpan<I> span = !active ? RowSpan<I>{I(0), I(0), I(0)} : Edges ? row_span<V>(xr, cols) : RowSpan<I>{I(0), cols / I(V), I(0)};
        const int body = int(span.vectors), head = int(span.head);
        auto in_row = [&](int k) { return lane + k * Lanes < body; };
        const T* x = xr + head + lane * V;
        RowEdge<C, I> edge = Edges ? load_edge<V, C>(xr, span, I(lane)) : RowEdge<C, I>{};
        C v[PerLane];
#pragma unroll
        for (int k = 0; k < vectors; ++k) {
            if (in_row(k)) {
                const P p = *reinterpret_cast<const P*>(x + k * Lanes * V);
#pragma unroll
                for (int j = 0; j < V; ++j) v[k * V + j] = ops::cast<C>(p.v[j]);
            } else {
                // Softmax pads with -inf: the maximum ignores it and its exp(x - max) is 0.
#pragma unroll
                for (int j = 0; j < V; ++j) v[k * V + j] = shifted_exp_op<Op> ? -std::numeric_limits<C>::infinity() : C(0);
            }
        }
        T* yr = out + std::int64_t(active ? row : I(0)) * cols;
        T* y = yr + head + lane * V;
        // Writes value(i, column) for the lane's slots i in the row, and edge_value for its edge.
        auto store = [&](auto&& value, C edge_value) {
            if (edge.present) yr[edge.column] = ops::cast<T>(edge_value);
#pragma unroll
            for (int k = 0; k < vectors; ++k) {
                if (in_row(k)) {
                    P p;
#pragma unroll
                    for (int j = 0; j < V; ++j) p.v[j] = ops::cast<T>(value(k * V + j, std::int64_t(head + lane * V + k * Lanes * V + j)));
                    *reinterpret_cast<P*>(y + k * Lanes * V) = p;
                }
            }
        };
        if constexpr (shifted_exp_op<Op>) {
            // The maximum ignores NaN (one instruction per element, not three): a NaN still makes
            // its own exp(x - max), so the sum and the whole row, NaN. Both loops skip only what
            // is outside the row for the whole group (a uniform test, not a predicate per lane and
            // element, which pressed the 1-element instantiations into spilling); a lane's slots
            // past the row's end hold -inf, whose exp(x - max) is 0 unless max is -inf, a row of
            // only -inf (or NaN) that is NaN as it is.
            auto warp_in_row = [&](int k) { return k * Lanes < body; };
            C m = -std::numeric_limits<C>::infinity();
            if (edge.present) m = ops::math::fmax(m, edge.value);
#pragma unroll
            for (int k = 0; k < vectors; ++k)
                if (warp_in_row(k))
#pragma unroll
                    for (int j = 0; j < V; ++j) m = ops::math::fmax(m, v[k * V + j]);
            m = warp_all<Lanes>([](C a, C b) { return ops::math::fmax(a, b); }, m);
            C sum = 0;
            if (edge.present) {
                sum = op.shifted_exp(edge.value, m);
                if constexpr (Op::output_from_exp) edge.value = sum;
            }
#pragma unroll
            for (int k = 0; k < vectors; ++k)
                if (warp_in_row(k))
#pragma unroll
                    for (int j = 0; j < V; ++j) {
                        const C e = op.shifted_exp(v[k * V + j], m);
                        sum += e;
                        if constexpr (Op::output_from_exp) v[k * V + j] = e;
                    }
            sum = warp_all<Lanes>([](C a, C b) { return a + b; }, sum);
            const auto f = op.finish_max_sum(m, sum);
            store([&](int i, std::int64_t) { return op.apply_shifted(f, v[i]); }, op.apply_shifted(f, edge.value));
        } else if constexpr (centered_op<Op>) {
            C total = edge.present ? edge.value : C(0);
#pragma unroll
            for (int k = 0; k < vectors; ++k)
                if (in_row(k))
#pragma unroll
                    for (int j = 0; j < V; ++j) total += v[k * V + j];
            const C mean = warp_all<Lanes>([](C a, C b) { return a + b; }, total) / C(n);
            C squares = edge.present ? (edge.value - mean) * (edge.value - mean) : C(0);
#pragma unroll
            for (int k = 0; k < vectors; ++k)
                if (in_row(k))
#pragma unroll
                    for (int j = 0; j < V; ++j) squares += (v[k * V + j] - mean) * (v[k * V + j] - mean);
            const auto f = op.centered(mean, warp_all<Lanes>([](C a, C b) { return a + b; }, squares), std::int64_t(n));
            store([&](int i, std::int64_t c) { return op.apply(f, v[i], c); }, op.apply(f, edge.value, std::int64_t(edge.column)));
        } else {
            auto s = edge.present ? op.accumulate(op.identity(), edge.value) : op.identity();
#pragma unroll
            for (int k = 0; k < vectors; ++k)
                if (in_row(k))
#pragma unroll
                    for (int j = 0; j < V; ++j) s = op.accumulate(s, v[k * V + j]);
            const auto f = op.finish(warp_broadcast<Lanes>(warp_combine(op, s, Lanes)), cols);
            store([&](int i, std::int64_t c) { return op.apply(f, v[i], c); }, op.apply(f, edge.value, std::int64_t(edge.column)));
        }
    }
}

// The two combiners of one value the cached paths' phases use (block_combine takes any op with
// identity and combine).
template <class C>
struct MaxOf {
    __device__ C identity() const { return -std::numeric_limits<C>::infinity(); }
    __device__ C combine(C a, C b) const { return ops::Maximum{}(a, b); }
};
template <class C>
struct SumOf {
    __device__ C identity() const { return C(0); }
    __device__ C combine(C a, C b) const { return a + b; }
};

// Calls visit(p, count, k, stride) for the vectors src[k], src[k + stride], ... (count of them) that
// thread t of `threads` takes among src[0, n): Unroll vectors a group, all loaded before visit sees
// any, then the remainder one at a time.
template <int Unroll, class P, class I, class F>
__device__ void visit_vectors(const P* __restrict__ src, I n, I t, I threads, F&& visit) {
    I k = t;
    for (; k + I(Unroll - 1) * threads < n; k += I(Unroll) * threads) {
        P p[Unroll];
#pragma unroll
        for (int u = 0; u < Unroll; ++u) p[u] = src[k + I(u) * threads];
        visit(p, Unroll, k, threads);
    }
    for (; k < n; k += threads) {
        const P p[1] = {src[k]};
        visit(p, 1, k, threads);
    }
}

// Folds `count` vectors, all loaded, into the running statistics s: for softmax the group's maximum
// first, then one exp per element (and one for the rescale), not Milakov's two per element; for
// layer_norm the group's exact mean and centred squares, merged by Chan's formula (one division per
// group, not Welford's one per element); others element by element.
template <class Op, class P>
__device__ typename Op::stats_t fold_group(const Op& op, typename Op::stats_t s, const P* p, int count) {
    using C = typename Op::compute_t;
    constexpr int V = P::lanes;
    if constexpr (shifted_exp_op<Op>) {
        C group_max = -std::numeric_limits<C>::infinity();
        for (int u = 0; u < count; ++u)
#pragma unroll
            for (int j = 0; j < V; ++j) group_max = ops::Maximum{}(group_max, ops::cast<C>(p[u].v[j]));
        const C m = ops::Maximum{}(s.max, group_max);
        // Only -inf so far: nothing to add (exp(-inf - -inf) would be NaN). A row of only -inf ends
        // as {-inf, 0}, whose outputs are NaN, as PyTorch's; NaN or +inf make the sum NaN.
        if (m == -std::numeric_limits<C>::infinity()) return s;
        C sum = s.max == m ? s.sum : s.sum * op.shifted_exp(s.max, m);
        for (int u = 0; u < count; ++u)
#pragma unroll
            for (int j = 0; j < V; ++j) sum += op.shifted_exp(ops::cast<C>(p[u].v[j]), m);
        s.max = m;
        s.sum = sum;
        return s;
    } else if constexpr (centered_op<Op>) {
        C total = 0;
        for (int u = 0; u < count; ++u)
#pragma unroll
            for (int j = 0; j < V; ++j) total += ops::cast<C>(p[u].v[j]);
        const std::int64_t n = std::int64_t(count) * V;
        const C mean = total / C(n);  // n is a power of two: Unroll * V or V (or 1, an edge element)
        C squares = 0;
        for (int u = 0; u < count; ++u)
#pragma unroll
            for (int j = 0; j < V; ++j) {
                const C d = ops::cast<C>(p[u].v[j]) - mean;
                squares += d * d;
            }
        return op.combine(s, typename Op::stats_t{mean, squares, n});
    } else {
        for (int u = 0; u < count; ++u)
#pragma unroll
            for (int j = 0; j < V; ++j) s = op.accumulate(s, ops::cast<C>(p[u].v[j]));
        return s;
    }
}

// Whether the cached paths keep exp(x - slice maximum) in the cache over x, for the output to reuse:
// softmax when the cache holds the compute type (float rows); 2-byte rows would round it to 8 or 11
// bits, so their output computes the exp again.
template <class Op, class T>
inline constexpr bool keeps_exp = [] {
    if constexpr (shifted_exp_op<Op>) return Op::output_from_exp && std::is_same_v<T, typename Op::compute_t>;
    else return false;
}();

// The statistics of the slice src[0, n) of a row (n vectors of V elements) and of the threads' edge
// elements (`edges` of them in the block, each kept by its thread), which every thread of the block
// gets, with the slice kept at cache[0, n) (read from global memory once). The phases meet in
// block_combine; each thread reads back only the vectors it stored, so the cache needs no barrier.
//   softmax:    the slice's maximum M while loading, then exp(x - M) once per element from the cache
//               (kept over x where keeps_exp): {M, sum}; a slice of only -inf gives {-inf, 0};
//   layer_norm: the slice's mean, then its centred squares: {mean, m2, count} (exact, no division
//               per element);
//   others:     accumulate.
template <class Op, class P, class I>
__device__ typename Op::stats_t cached_slice_stats(const Op& op, const P* __restrict__ src, P* cache, I n, I t, I threads,
                                                   typename Op::stats_t* across_warps, RowEdge<typename Op::compute_t, I>& edge,
                                                   I edges) {
    using C = typename Op::compute_t;
    using S = typename Op::stats_t;
    using T = typename P::value_type;
    constexpr int V = P::lanes;
    C* scalars = reinterpret_cast<C*>(across_warps);  // 32 C fit in 32 S
    if constexpr (shifted_exp_op<Op>) {
        C m = edge.present ? edge.value : -std::numeric_limits<C>::infinity();
        visit_vectors<4>(src, n, t, threads, [&](const P* p, int count, I k, I stride) {
            for (int u = 0; u < count; ++u) {
                cache[k + I(u) * stride] = p[u];
#pragma unroll
                for (int j = 0; j < V; ++j) m = ops::Maximum{}(m, ops::cast<C>(p[u].v[j]));
            }
        });
        m = block_combine(MaxOf<C>{}, m, scalars);
        // A slice of only -inf (masked) contributes e = 0, not exp(-inf - -inf) = NaN.
        const bool any = m != -std::numeric_limits<C>::infinity();
        C sum = 0;
        if (edge.present) {
            sum = any ? op.shifted_exp(edge.value, m) : C(0);
            if constexpr (keeps_exp<Op, T>) edge.value = sum;
        }
        visit_vectors<4>(static_cast<const P*>(cache), n, t, threads, [&](const P* p, int count, I k, I stride) {
            for (int u = 0; u < count; ++u) {
                P e;
#pragma unroll
                for (int j = 0; j < V; ++j) {
                    const C v = any ? op.shifted_exp(ops::cast<C>(p[u].v[j]), m) : C(0);
                    sum += v;
                    if constexpr (keeps_exp<Op, T>) e.v[j] = v;
                }
                if constexpr (keeps_exp<Op, T>) cache[k + I(u) * stride] = e;
            }
        });
        S s = op.identity();
        s.max = m;
        s.sum = block_combine(SumOf<C>{}, sum, scalars);
        return s;
    } else if constexpr (centered_op<Op>) {
        if (n == 0 && edges == 0) return op.identity();  // a cluster's last slice can be empty
        C total = edge.present ? edge.value : C(0);
        visit_vectors<4>(src, n, t, threads, [&](const P* p, int count, I k, I stride) {
            for (int u = 0; u < count; ++u) {
                cache[k + I(u) * stride] = p[u];
#pragma unroll
                for (int j = 0; j < V; ++j) total += ops::cast<C>(p[u].v[j]);
            }
        });
        const std::int64_t elements = std::int64_t(n) * V + edges;
        const C mean = block_combine(SumOf<C>{}, total, scalars) / C(elements);
        C squares = edge.present ? (edge.value - mean) * (edge.value - mean) : C(0);
        visit_vectors<4>(static_cast<const P*>(cache), n, t, threads, [&](const P* p, int count, I, I) {
            for (int u = 0; u < count; ++u)
#pragma unroll
                for (int j = 0; j < V; ++j) {
                    const C d = ops::cast<C>(p[u].v[j]) - mean;
                    squares += d * d;
                }
        });
        return S{mean, block_combine(SumOf<C>{}, squares, scalars), elements};
    } else {
        (void)edges;
        S s = edge.present ? op.accumulate(op.identity(), edge.value) : op.identity();
        visit_vectors<4>(src, n, t, threads, [&](const P* p, int count, I k, I stride) {
            for (int u = 0; u < count; ++u) cache[k + I(u) * stride] = p[u];
            s = fold_group(op, s, p, count);
        });
        return block_combine(op, s, across_warps);
    }
}

// Writes the output of vectors [begin, begin + n) of a row's vectors y (its column head + k * V
// for vector k) from the slice's cache, and the thread's edge element into the row yr, given the
// row's statistics `all` and the slice's own `local` (where the cache holds exp(x - local.max), the
// output rescales it: one exp per element in all).
template <class Op, class P, class S, class I>
__device__ void write_cached_slice(const Op& op, const S& all, const S& local, const P* cache, P* __restrict__ y, I begin, I n, I t,
                                   I threads, I cols, I head, typename P::value_type* yr,
                                   const RowEdge<typename Op::compute_t, I>& edge) {
    using C = typename Op::compute_t;
    using T = typename P::value_type;
    constexpr int V = P::lanes;
    auto write = [&](const auto& f, auto value) {
        if (edge.present) yr[edge.column] = ops::cast<T>(value(f, edge.value, std::int64_t(edge.column)));
        for (I k = t; k < n; k += threads) {
            const P p = cache[k];
            P q;
#pragma unroll
            for (int j = 0; j < V; ++j) q.v[j] = ops::cast<T>(value(f, ops::cast<C>(p.v[j]), std::int64_t(head) + std::int64_t(begin + k) * V + j));
            y[begin + k] = q;
        }
    };
    if constexpr (keeps_exp<Op, T>) {
        write(op.finish_rebased(all.max, all.sum, local.max), [&](const auto& f, C e, std::int64_t) { return op.apply_shifted(f, e); });
    } else if constexpr (shifted_exp_op<Op>) {
        write(op.finish_max_sum(all.max, all.sum), [&](const auto& f, C x, std::int64_t c) { return op.apply(f, x, c); });
    } else {
        (void)local;
        write(op.finish(all, std::int64_t(cols)), [&](const auto& f, C x, std::int64_t c) { return op.apply(f, x, c); });
    }
}

// The static shared memory of rows_per_block: the launch's dynamic bytes come on top of it.
template <class Op>
inline constexpr std::size_t rows_static_smem = 32 * sizeof(typename Op::stats_t);

// A block per row (any multiple of 32 threads up to 1024).
//   Cached: the launch gives cols * sizeof(T) bytes of dynamic shared memory; the row is read from
//           global memory once (cached_slice_stats), the output written from shared memory.
//   not:    rows beyond a cluster's shared memory: the statistics in groups of 4 vectors per thread
//           (fold_group), then the row read again for the output.
// budget: threads 1024, registers 64
template <int V, bool Cached, class Op, class T, class I>
__global__ void __launch_bounds__(1024) rows_per_block(const T* __restrict__ in, T* __restrict__ out, I rows, I cols, Op op) {
    using S = typename Op::stats_t;
    using C = typename Op::compute_t;
    using P = ops::Packed<T, V>;
    __shared__ S across_warps[rows_static_smem<Op> / sizeof(S)];
    TESSEL_DYNAMIC_SHARED(P, cache);
    const I t = I(threadIdx.x), threads = I(blockDim.x);
    for (I row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* xr = in + std::int64_t(row) * cols;
        T* yr = out + std::int64_t(row) * cols;
        const RowSpan<I> span = row_span<V>(xr, cols);
        const I n = span.vectors;
        const P* x = reinterpret_cast<const P*>(xr + span.head);
        P* y = reinterpret_cast<P*>(yr + span.head);
        RowEdge<C, I> edge = load_edge<V, C>(xr, span, t);
        if constexpr (Cached) {
            const S s = cached_slice_stats(op, x, cache, n, t, threads, across_warps, edge, span.head + span.tail);
            write_cached_slice(op, s, s, static_cast<const P*>(cache), y, I(0), n, t, threads, cols, span.head, yr, edge);
        } else {
            S s = op.identity();
            if (edge.present) {
                const ops::Packed<C, 1> e{{edge.value}};
                s = fold_group(op, s, &e, 1);
            }
            // Groups of 32 values at most: 4 vectors of fp8 (64 floats in flight) spilled under the
            // 64 registers of a 1024-thread block.
            visit_vectors<(V > 8 ? 32 / V : 4)>(x, n, t, threads, [&](const P* p, int count, I, I) { s = fold_group(op, s, p, count); });
            s = block_combine(op, s, across_warps);
            const auto f = [&] {
                if constexpr (shifted_exp_op<Op>) return op.finish_max_sum(s.max, s.sum);
                else return op.finish(s, std::int64_t(cols));
            }();
            if (edge.present) yr[edge.column] = ops::cast<T>(op.apply(f, edge.value, std::int64_t(edge.column)));
            for (I k = t; k < n; k += threads) {
                const P p = x[k];
                P q;
#pragma unroll
                for (int j = 0; j < V; ++j) q.v[j] = ops::cast<T>(op.apply(f, ops::cast<C>(p.v[j]), std::int64_t(span.head) + std::int64_t(k) * V + j));
                y[k] = q;
            }
        }
    }
}

// The dynamic shared memory rows_per_cluster puts before its slice of the row: 32 statistics for
// block_combine, the block's statistics for even and odd rows (which the cluster's other blocks
// read), and the row's combined statistics.
template <class Op>
inline constexpr std::size_t cluster_header_bytes = (35 * sizeof(typename Op::stats_t) + 15) / 16 * 16;

// Rows too long for one block's shared memory (sm_90): a cluster of blocks per row, block r keeping
// vectors [r * slice, (r + 1) * slice) in its dynamic shared memory (cached_slice_stats). Each block
// publishes its slice's statistics; after one cluster barrier per row, one warp of every block reads
// them through distributed shared memory (lane r from block r) and combines them on a fixed tree, so
// every block agrees; each block writes its slice: the row is read from global memory once.
// The published statistics alternate between two slots by row parity: a slot is written again two
// rows later, after every block has passed the next row's barrier and so finished reading it; one
// barrier per row, none after the stores, and one before exit (no block may leave while another
// still reads its shared memory). The barrier per row publishes shared-memory statistics, so it
// keeps cluster.sync()'s release and acquire (a relaxed arrive would not make them visible).
// Grid: clusters x blocks per cluster along x.
// budget: threads 1024, registers 64
template <int V, class Op, class T, class I>
__global__ void __launch_bounds__(1024) rows_per_cluster(const T* __restrict__ in, T* __restrict__ out, I rows, I cols, I slice, Op op) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
    // No clusters before sm_90. The host takes this path on sm_90 devices only, but code built for an
    // older architecture can still be JIT-run on one: stop rather than leave the output unwritten.
    (void)in, (void)out, (void)rows, (void)cols, (void)slice, (void)op;
    __trap();
#else
    using S = typename Op::stats_t;
    using C = typename Op::compute_t;
    using P = ops::Packed<T, V>;
    const cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    const unsigned blocks = cluster.num_blocks(), rank = cluster.block_rank();
    TESSEL_DYNAMIC_SHARED(unsigned char, smem);
    S* across_warps = reinterpret_cast<S*>(smem);
    S* published = across_warps + 32;  // [2], by row parity
    S* row_stats = across_warps + 34;
    P* cache = reinterpret_cast<P*>(smem + cluster_header_bytes<Op>);
    const I t = I(threadIdx.x), threads = I(blockDim.x);
    unsigned parity = 0;
    for (I row = I(blockIdx.x) / I(blocks); row < rows; row += I(gridDim.x) / I(blocks), parity ^= 1u) {
        const T* xr = in + std::int64_t(row) * cols;
        T* yr = out + std::int64_t(row) * cols;
        const RowSpan<I> span = row_span<V>(xr, cols);
        const I n = span.vectors;
        const I begin = I(rank) * slice < n ? I(rank) * slice : n, end = begin + slice < n ? begin + slice : n;
        const P* x = reinterpret_cast<const P*>(xr + span.head);
        // The row's edge elements are block 0's.
        RowEdge<C, I> edge = rank == 0 ? load_edge<V, C>(xr, span, t) : RowEdge<C, I>{};
        const S local = cached_slice_stats(op, x + begin, cache, end - begin, t, threads, across_warps, edge,
                                           rank == 0 ? span.head + span.tail : I(0));
        if (t == 0) published[parity] = local;
        cluster.sync();
        if (t < 32) {
            S s = t < I(blocks) ? *cluster.map_shared_rank(published + parity, int(t)) : op.identity();
            s = warp_combine(op, s, 32);
            if (t == 0) *row_stats = s;
        }
        __syncthreads();
        write_cached_slice(op, *row_stats, local, static_cast<const P*>(cache), reinterpret_cast<P*>(yr + span.head), begin, end - begin, t,
                           threads, cols, span.head, yr, edge);
    }
    cluster.sync();  // the last row's statistics are read from the other blocks' shared memory
#endif
}

}  // namespace tessel::kernels
