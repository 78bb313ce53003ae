// The types of a matrix-product call: MatmulPolicy (which implementation), MatmulOptions (alpha,
// beta, policy, TF32, stream), MatmulEpilogue (bias, activation, residual fused into the store),
// MatmulChoice (what ran and why), and the process default policy. ops/matmul.hpp is the API.
#pragma once

#include <atomic>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include <tessel/kernels/gemm_epilogue.cuh>

#include "../tensor/tensor.hpp"

namespace tessel {

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

// The knobs of one matmul call.
struct MatmulOptions {
    double alpha = 1, beta = 0;          // out = alpha * a @ b + beta * out (beta only with an out tensor)
    std::optional<MatmulPolicy> policy = std::nullopt;  // unset: matmul_policy(), the process default
    bool allow_tf32 = false;             // fp32 may run on TF32 tensor cores (library), as torch.backends.cuda.matmul.allow_tf32
    std::optional<rt::stream_t> stream = std::nullopt;  // unset: the current stream of the operands' device
};

// What a matmul call ran, and why (last_matmul_choice(); tests and tessel-info read it).
struct MatmulChoice {
    MatmulPolicy path = MatmulPolicy::library;  // handwritten or library: what automatic resolved to
    std::string_view implementation;            // e.g. "mma_matmul<128x128, 4 stages>" or "cublasGemmStridedBatchedEx"
    std::string_view reason;                    // (static strings: recording a choice allocates nothing)
    int copied_operands = 0;                    // operands copied first (layout or alignment the path cannot take)
};

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


// The activation fused after bias (kernels/gemm_epilogue.cuh): none, relu, gelu (erf form),
// gelu_tanh, silu.
using kernels::Activation;

// What is fused into a product's store: out = activation(alpha a @ b + beta out + bias) + residual,
// in the accumulator type, rounded once. bias is one value per output column (torch's linear:
// shape [N]) or, with bias_per_row, per row ([M]), shared by every batch entry; residual has the
// output's shape. Both have the output's dtype.
template <Element Out>
struct MatmulEpilogue {
    std::optional<Tensor<Out>> bias = std::nullopt;
    bool bias_per_row = false;
    Activation activation = Activation::none;
    std::optional<Tensor<Out>> residual = std::nullopt;
    bool fuses_anything() const { return bias || activation != Activation::none || residual; }
};

}  // namespace tessel
