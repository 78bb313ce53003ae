// The arguments of a matrix-product call: MatmulOptions (alpha, beta, policy, TF32, stream) and
// MatmulEpilogue (bias, activation, residual fused into the store); the policy and the dispatch
// table are in matmul_policy.hpp. ops/matmul.hpp is the API.
#pragma once

#include <optional>

#include <tessel/kernels/gemm_epilogue.cuh>

#include "../tensor/tensor.hpp"
#include "matmul_policy.hpp"

namespace tessel {

// The knobs of one matmul call.
struct MatmulOptions {
    double alpha = 1, beta = 0;          // out = alpha * a @ b + beta * out (beta only with an out tensor)
    std::optional<MatmulPolicy> policy = std::nullopt;  // unset: matmul_policy(), the process default
    bool allow_tf32 = false;             // fp32 may run on TF32 tensor cores (library), as torch.backends.cuda.matmul.allow_tf32
    std::optional<rt::stream_t> stream = std::nullopt;  // unset: the current stream of the operands' device
};

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
