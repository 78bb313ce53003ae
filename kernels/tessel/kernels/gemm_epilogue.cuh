// What a matrix-product kernel does to each accumulated element on its way to memory, fused into the
// store (CUTLASS's "epilogue"): out = activation(alpha * acc + beta * prior + bias) + residual,
// in the accumulator type, rounded once to the output type. Every GEMM kernel (mma_matmul,
// simt_matmul) takes it as a template parameter, and gemm_epilogue_apply runs it on its own after a
// library GEMM whose library cannot fuse it.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include <tessel/core/kernel.hpp>
#include <tessel/ops/functors.hpp>  // Relu, Gelu, GeluTanh, Silu: the expressions' own definitions

namespace tessel::kernels {

// The activation applied after bias, as in torch.nn.functional (gelu: the erf form; gelu_tanh:
// approximate='tanh').
enum class Activation : int { none, relu, gelu, gelu_tanh, silu };

// The epilogue of one product: out = activation(alpha * acc + beta * prior + bias) + residual; with
// Scaled (an int8 product's dequantisation) alpha * acc becomes alpha * row_scale[row] *
// col_scale[col] * acc, the scales fp32 (null: 1), per token along rows and per channel along
// columns. Unscaled products carry no scale code, so the fp16/bf16/fp32 kernels keep their
// registers. Bias and residual have the output's type, or fp32 for an integer output. A bias is one
// value per column (torch's linear: bias[col]) or per row (bias[row]), each batch entry
// bias_batch_stride apart (0: shared). The residual is read at [batch * residual_batch_stride + row
// * residual_ld + col].
template <class Acc, class Out, bool Scaled = false>
struct GemmEpilogue {
    using acc_type = Acc;
    static constexpr bool scaled = Scaled;
    using operand_type = std::conditional_t<std::is_integral_v<Out>, float, Out>;  // bias and residual
    static_assert(!Scaled || !std::is_integral_v<Acc>, "scales apply to a product dequantised in floating point");
    Acc alpha = Acc(1), beta = Acc(0);
    const float* row_scale = nullptr;  // read only when Scaled
    const float* col_scale = nullptr;
    const operand_type* bias = nullptr;
    bool bias_per_row = false;
    std::int64_t bias_batch_stride = 0;
    Activation activation = Activation::none;
    const operand_type* residual = nullptr;
    std::int64_t residual_ld = 0, residual_batch_stride = 0;

    // beta == 0 never reads the prior output (it may hold NaN).
    __host__ __device__ bool reads_prior() const { return beta != Acc(0); }

    __host__ __device__ Acc operator()(Acc acc, Acc prior, int batch, int row, int col) const {
        if constexpr (Scaled) {
            if (row_scale) acc *= Acc(row_scale[row]);
            if (col_scale) acc *= Acc(col_scale[col]);
        }
        Acc v = beta != Acc(0) ? alpha * acc + beta * prior : alpha * acc;
        if (bias) v += to_acc(bias[batch * bias_batch_stride + (bias_per_row ? row : col)]);
        if constexpr (!std::is_integral_v<Acc>) {  // an integer accumulator is the exact product: no activation
            if (activation == Activation::relu) v = ops::Relu{}(v);
            else if (activation == Activation::gelu) v = ops::Gelu{}(v);
            else if (activation == Activation::gelu_tanh) v = ops::GeluTanh{}(v);
            else if (activation == Activation::silu) v = ops::Silu{}(v);
        }
        if (residual) v += to_acc(residual[batch * residual_batch_stride + std::int64_t(row) * residual_ld + col]);
        return v;
    }

    template <class X>
    __host__ __device__ static Acc to_acc(X x) {
        if constexpr (std::is_same_v<X, __nv_bfloat16>) return Acc(__bfloat162float(x));
        else if constexpr (std::is_same_v<X, __half>) return Acc(__half2float(x));
        else return Acc(x);
    }
    // Rounded once; an int8 output rounds to nearest even and saturates (NaN gives 0), as
    // cvt.rni.sat.s8.f32 and cuBLASLt's int8 output do.
    __host__ __device__ static int round_even(float x) {
#if defined(__CUDA_ARCH__)
        return __float2int_rn(x);
#else
        return int(std::nearbyint(x));  // the host's default rounding mode: nearest, ties to even
#endif
    }
    __host__ __device__ static Out to_out(Acc x) {
        if constexpr (std::is_same_v<Out, __nv_bfloat16>) return __float2bfloat16(float(x));
        else if constexpr (std::is_same_v<Out, __half>) return __float2half(float(x));
        else if constexpr (std::is_same_v<Out, std::int8_t> && !std::is_integral_v<Acc>)
            return x != x ? std::int8_t(0) : std::int8_t(round_even(float(x < Acc(-128) ? Acc(-128) : x > Acc(127) ? Acc(127) : x)));
        else return Out(x);
    }
};

// The epilogue on its own, after a library GEMM that cannot fuse it: the product read from
// `product` (fp32, fp64 or an int8 product's int32: [batches][m][n], row stride ldp), the prior output from C when
// the epilogue reads it, the result to C ([batches][m][n], row stride ldc). product may be C itself
// (an fp32/fp64 output the GEMM wrote, beta applied, and an epilogue with alpha 1 and beta 0).
// budget: threads 256, registers 40
template <class Product, class Acc, class Out, bool Scaled = false>
__global__ void __launch_bounds__(256)
gemm_epilogue_apply(std::int64_t batches, int m, int n, const Product* product, int ldp, std::int64_t batch_stride_p, Out* c, int ldc,
                    std::int64_t batch_stride_c, GemmEpilogue<Acc, Out, Scaled> epilogue) {
    const std::int64_t per_batch = std::int64_t(m) * n, total = batches * per_batch;
    for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += std::int64_t(gridDim.x) * blockDim.x) {
        const std::int64_t batch = i / per_batch, rest = i - batch * per_batch;
        const int row = int(rest / n), col = int(rest - std::int64_t(row) * n);
        Out* p = c + batch * batch_stride_c + std::int64_t(row) * ldc + col;
        const Acc x = Acc(product[batch * batch_stride_p + std::int64_t(row) * ldp + col]);
        const Acc prior = epilogue.reads_prior() ? epilogue.to_acc(*p) : Acc(0);
        *p = epilogue.to_out(epilogue(x, prior, int(batch), row, col));
    }
}

}  // namespace tessel::kernels
