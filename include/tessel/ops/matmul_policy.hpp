// Which implementation a matrix product takes: MatmulPolicy, the process default (set_matmul_policy,
// TESSEL_MATMUL_POLICY), the dispatch table automatic reads (matmul_table.hpp, generated from a GPU
// benchmark run by bench/matmul_table.py), and MatmulChoice, what a call ran and why. Host code only
// (no kernels): tessel-info includes it to say what automatic would pick.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>

#include "../core/env.hpp"
#include "../core/error.hpp"

namespace tessel {

namespace matmul_table {
struct Entry;
}

// How a matrix product is computed. automatic: by the dispatch table (docs/matmul.md; until a GPU
// run has measured the hand-written kernels, the library); handwritten: tessel's own kernels;
// library: cuBLAS.
enum class MatmulPolicy { automatic, handwritten, library };

inline const char* policy_name(MatmulPolicy p) {
    switch (p) {
        case MatmulPolicy::automatic: return "automatic";
        case MatmulPolicy::handwritten: return "handwritten";
        case MatmulPolicy::library: return "library";
    }
    return "?";
}

// What a matmul call ran, and why (last_matmul_choice(); tests and tessel-info read it).
struct MatmulChoice {
    MatmulPolicy path = MatmulPolicy::library;  // handwritten or library: what automatic resolved to
    std::string_view implementation;            // e.g. "mma_matmul<128x128, 4 stages>" or "cublasGemmStridedBatchedEx"
    std::string_view reason;                    // (static strings: recording a choice allocates nothing)
    int copied_operands = 0;                    // operands copied first (layout or alignment the path cannot take)
    const matmul_table::Entry* entry = nullptr;  // automatic: the dispatch-table entry it followed, if any
};

}  // namespace tessel

#if !defined(TESSEL_MATMUL_TABLE_INCLUDED)  // bench/test_matmul_table.py includes a generated one first
#include "matmul_table.hpp"
#endif

namespace tessel {

namespace ops::detail {

inline MatmulPolicy parse_matmul_policy(const char* variable, const std::string& text) {
    if (text == "automatic") return MatmulPolicy::automatic;
    if (text == "handwritten") return MatmulPolicy::handwritten;
    if (text == "library") return MatmulPolicy::library;
    fail<InvalidArgument>(variable, "='", text, "' is not a matmul policy (automatic, handwritten or library)");
}

inline std::atomic<int>& policy_override() {
    static std::atomic<int> p{-1};
    return p;
}

inline MatmulChoice& last_choice() {
    static thread_local MatmulChoice c;
    return c;
}

inline MatmulPolicy env_policy() {
    static const MatmulPolicy p = [] {
        const char* v = std::getenv("TESSEL_MATMUL_POLICY");
        return v ? parse_matmul_policy("TESSEL_MATMUL_POLICY", v) : MatmulPolicy::automatic;
    }();
    return p;
}

}  // namespace ops::detail

// The process default: set_matmul_policy's, else TESSEL_MATMUL_POLICY (automatic, handwritten,
// library), else automatic.
inline MatmulPolicy matmul_policy() {
    const int p = ops::detail::policy_override().load(std::memory_order_relaxed);
    return p >= 0 ? MatmulPolicy(p) : ops::detail::env_policy();
}
inline void set_matmul_policy(MatmulPolicy p) { ops::detail::policy_override().store(int(p), std::memory_order_relaxed); }

// What the calling thread's last matmul ran, and why.
inline MatmulChoice last_matmul_choice() { return ops::detail::last_choice(); }

// Autotuning (like torch.backends.cudnn.benchmark): with it on, the first `automatic` call of each
// problem key (device, dtypes, M, N, K, batch count, operand layouts, epilogue) times the candidates
// on it with events (the hand-written kernel with each of its tile classes, the library with each
// of cuBLASLt's first heuristic results where cuBLASLt runs it) and keeps the fastest for the rest of
// the process, and in a file if one is set (set_matmul_autotune_file in ops/matmul_autotune.hpp,
// TESSEL_MATMUL_AUTOTUNE_FILE), which later processes read instead of timing again. Off by default;
// set_matmul_autotune(true) or TESSEL_MATMUL_AUTOTUNE=1.
struct MatmulAutotuneStats {
    std::int64_t keys_tuned = 0;        // problems timed
    std::int64_t candidates_timed = 0;  // candidates timed for them
    std::int64_t handwritten_won = 0;   // of the problems, how many a hand-written kernel won
    std::int64_t library_won = 0;
    std::int64_t cache_hits = 0;        // calls that followed a known winner
    std::int64_t loaded_from_file = 0;  // winners read from the autotune file
};

namespace ops::detail {
inline std::atomic<int>& autotune_override() {
    static std::atomic<int> on{-1};
    return on;
}
inline bool env_autotune() {
    static const bool on = [] {
        const char* v = std::getenv("TESSEL_MATMUL_AUTOTUNE");
        return v && env::parse_integer("TESSEL_MATMUL_AUTOTUNE", v, 0, 1) == 1;
    }();
    return on;
}
inline std::mutex& autotune_mutex() {
    static std::mutex m;
    return m;
}
inline MatmulAutotuneStats& autotune_counters() {
    static MatmulAutotuneStats s;
    return s;
}
}  // namespace ops::detail

inline bool matmul_autotune() {
    const int on = ops::detail::autotune_override().load(std::memory_order_relaxed);
    return on >= 0 ? on == 1 : ops::detail::env_autotune();
}
inline void set_matmul_autotune(bool on) { ops::detail::autotune_override().store(on ? 1 : 0, std::memory_order_relaxed); }
inline MatmulAutotuneStats matmul_autotune_stats() {
    std::lock_guard lk(ops::detail::autotune_mutex());
    return ops::detail::autotune_counters();
}

// The shape class of a product, as the dispatch table keys it: "decode" when M or N is at most 64
// (a few rows against a weight), "large" from 4096 x 4096 outputs per batch entry, else "medium".
inline const char* matmul_shape_class(std::int64_t m, std::int64_t n) {
    if (m <= 64 || n <= 64) return "decode";
    return m * n >= (std::int64_t(1) << 24) ? "large" : "medium";
}

// The table's entry for (architecture major, dtype "fp32"/"fp64"/"fp16"/"bf16", epilogue
// "none"/"fused", shape class), or null.
inline const matmul_table::Entry* matmul_table_entry(int sm_major, std::string_view dtype, bool fused, std::string_view shape_class) {
    for (const matmul_table::Entry& e : matmul_table::entries)
        if (e.sm_major == sm_major && dtype == e.dtype && (fused ? "fused" : "none") == std::string_view(e.epilogue) &&
            shape_class == e.shape_class)
            return &e;
    return nullptr;
}

// What `automatic` resolves to for such a product: the path and the reason (a static string).
inline MatmulChoice automatic_choice(int sm_major, std::string_view dtype, bool fused, std::int64_t m, std::int64_t n) {
    MatmulChoice c;
    c.entry = matmul_table_entry(sm_major, dtype, fused, matmul_shape_class(m, n));
    if (!c.entry) {
        c.path = MatmulPolicy::library;
        c.reason = "automatic: the dispatch table has no entry for this (architecture, dtype, epilogue, shape class): the library";
    } else if (c.entry->handwritten) {
        c.path = MatmulPolicy::handwritten;
        c.reason = "automatic: the dispatch table measured the hand-written kernel faster for this class";
    } else {
        c.path = MatmulPolicy::library;
        c.reason = "automatic: the dispatch table measured the library faster for this class";
    }
    return c;
}

}  // namespace tessel
