// The arguments of a matrix-product call: MatmulOptions (alpha, beta, policy, TF32, stream) and
// MatmulEpilogue (bias, activation, residual fused into the store); the policy and the dispatch
// table are in matmul_policy.hpp. ops/matmul.hpp is the API.
#pragma once

#include <optional>
#include <type_traits>

#include <tessel/kernels/gemm_epilogue.cuh>

#include "../tensor/tensor.hpp"
#include "matmul_policy.hpp"

namespace tessel {

// The knobs of one matmul call.
struct MatmulOptions {
    double alpha = 1, beta = 0;          // out = alpha * a @ b + beta * out (beta only with an out tensor)
    std::optional<MatmulPolicy> policy = std::nullopt;  // unset: matmul_policy(), the process default
    bool allow_tf32 = false;             // fp32 may run on TF32 tensor cores (library), as torch.backends.cuda.matmul.allow_tf32
    std::optional<StreamArg> stream = std::nullopt;  // unset: the current stream of the operands' device
};

// The activation fused after bias (kernels/gemm_epilogue.cuh): none, relu, gelu (erf form),
// gelu_tanh, silu.
using kernels::Activation;

// The type of a fused bias or residual: the output's, or fp32 for an integer output (an int8
// product requantised to int8).
template <class Out>
using epilogue_operand_t = std::conditional_t<std::is_integral_v<Out>, float, Out>;

// What is fused into a product's store: out = activation(alpha * a_scale * b_scale * row_scale[row] *
// col_scale[col] * (a @ b) + beta out + bias) + residual, in the accumulator type, rounded once.
// row_scale and col_scale (fp32, [M] and [N]; int8 and fp8 inputs only) dequantise a quantised
// product: per token along rows, per channel along columns. a_scale and b_scale (fp32, one element
// each, in device memory; fp8 inputs only) are per-tensor scales, as torch._scaled_mm's scale_a and
// scale_b: read by the device, so scales computed on it need no synchronisation. bias is one value
// per output column (torch's linear: shape [N]) or, with bias_per_row, per row ([M]), shared by every
// batch entry; residual has the output's shape. Bias and residual have the output's dtype (fp32 for
// an int8 output). An int32 output is the exact product: alpha and beta only.
template <Element Out>
struct MatmulEpilogue {
    using Operand = epilogue_operand_t<Out>;
    std::optional<Tensor<Operand>> bias = std::nullopt;
    bool bias_per_row = false;
    Activation activation = Activation::none;
    std::optional<Tensor<Operand>> residual = std::nullopt;
    std::optional<Tensor<float>> row_scale = std::nullopt;
    std::optional<Tensor<float>> col_scale = std::nullopt;
    std::optional<Tensor<float>> a_scale = std::nullopt;
    std::optional<Tensor<float>> b_scale = std::nullopt;
    // Whether anything is applied after the product (the per-tensor scales are part of the product:
    // cuBLASLt applies them inside it).
    bool fuses_anything() const { return bias || activation != Activation::none || residual || row_scale || col_scale; }
};

}  // namespace tessel
