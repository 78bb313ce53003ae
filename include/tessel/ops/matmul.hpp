// Matrix products with torch.matmul's rules: matmul(a, b) into a new tensor, matmul(a, b, out, options)
// into an existing one (out = alpha * a @ b + beta * out), an epilogue fused into the store (bias,
// activation, residual; MatmulEpilogue), linear(x, weight, bias, activation) as
// torch.nn.functional.linear. 2-D, batched with NumPy-broadcast batch dims, 1-D operands as PyTorch
// treats them; bf16/fp16 products may write fp32. Each batched product is one launch of a
// hand-written kernel or of cuBLAS, chosen by MatmulPolicy (ops/matmul_dispatch.hpp);
// docs/matmul.md says what runs where and when an operand is copied first.
#pragma once

#include <cmath>
#include <optional>
#include <source_location>

#include "matmul_dispatch.hpp"
#include "matmul_options.hpp"

namespace tessel {

namespace ops::detail {

// The shapes of a product by torch.matmul's rules: a 1-D a is a row [1, K] and b a column [K, 1]
// whose added dim the result drops; batch dims broadcast.
struct MatmulShapes {
    Shape result;      // what the caller sees
    Shape full;        // batch + [M, N]
    bool a_vector = false, b_vector = false;
};

template <class T>
MatmulShapes matmul_shapes(const Tensor<T>& a, const Tensor<T>& b) {
    require(a.defined() && b.defined(), "matmul: ", a.defined() ? "b" : "a", " is an undefined (default-constructed) tensor");
    require(a.dim() >= 1 && b.dim() >= 1, "matmul: both arguments need at least one dim; got shapes ", a.shape(),
            " and ", b.shape());
    for (const Tensor<T>* t : {&a, &b})
        require(t->space() == MemorySpace::device || t->space() == MemorySpace::managed, "matmul: ", t == &a ? "a" : "b", " is in ",
                space_name(t->space()), " memory; move it to the device first (.to(MemorySpace::device))");
    require(a.device() == b.device(), "matmul: a is on device ", a.device().index, " and b on device ", b.device().index,
            "; move one of them (.to(TensorOptions{.device = ...}))");
    MatmulShapes s;
    s.a_vector = a.dim() == 1;
    s.b_vector = b.dim() == 1;
    const std::int64_t k_a = a.shape()[a.dim() - 1], k_b = b.shape()[s.b_vector ? 0 : b.dim() - 2];
    require(k_a == k_b, "matmul: shapes ", a.shape(), " and ", b.shape(), " cannot be multiplied: a's last dim (",
            k_a, ") differs from b's ", s.b_vector ? "only dim" : "second-to-last dim", " (", k_b, ")");
    const std::int64_t m = s.a_vector ? 1 : a.shape()[a.dim() - 2], n = s.b_vector ? 1 : b.shape()[b.dim() - 1];
    Shape batch_a, batch_b;
    for (int i = 0; i + 2 < a.dim(); ++i) batch_a.push_back(a.shape()[i]);
    for (int i = 0; i + 2 < b.dim(); ++i) batch_b.push_back(b.shape()[i]);
    const int rank = std::max(batch_a.size(), batch_b.size());
    for (int i = 0; i < rank; ++i) {
        const int ia = i - (rank - batch_a.size()), ib = i - (rank - batch_b.size());
        const std::int64_t x = ia >= 0 ? batch_a[ia] : 1, y = ib >= 0 ? batch_b[ib] : 1;
        require(x == y || x == 1 || y == 1, "matmul: the batch dims of ", a.shape(), " and ", b.shape(),
                " do not broadcast: ", x, " and ", y, " at batch dim ", i, " differ and neither is 1");
        s.full.push_back(x == 1 ? y : x);
    }
    // Dims beyond 32 bits are refused before anything is copied or allocated.
    checked_int(m, "M");
    checked_int(n, "N");
    checked_int(k_a, "K");
    s.result = s.full;
    s.full.push_back(m);
    s.full.push_back(n);
    if (!s.a_vector) s.result.push_back(m);
    if (!s.b_vector) s.result.push_back(n);
    return s;
}

// The view of t (the output's shape, or a residual's) as batch + [M, N]: the dims a vector operand
// dropped put back.
template <class U>
Tensor<U> as_full(const Tensor<U>& t, const MatmulShapes& s) {
    Tensor<U> v = t;
    if (s.a_vector) v = v.unsqueeze(v.dim() - (s.b_vector ? 0 : 1));
    if (s.b_vector) v = v.unsqueeze(v.dim());
    return v;
}

template <class T, class Out>
void check_epilogue(const MatmulEpilogue<Out>& e, const MatmulShapes& s, const MatmulOptions& o, Device device) {
    const std::int64_t m = s.full[s.full.size() - 2], n = s.full[s.full.size() - 1];
    if constexpr (!std::is_same_v<T, std::int8_t> && !fp8_type<T>)
        require(!e.row_scale && !e.col_scale, "matmul: row and column scales dequantise an int8 or fp8 product; for ", dtype_name<T>(),
                " inputs fold a per-tensor scale into alpha");
    if constexpr (!fp8_type<T>)
        require(!e.a_scale && !e.b_scale, "matmul: a_scale and b_scale are fp8 inputs' per-tensor scales; for ", dtype_name<T>(),
                " inputs fold a per-tensor scale into alpha");
    if constexpr (std::is_same_v<Out, int>) {
        require(!e.fuses_anything(), "matmul: an int32 output is the exact int8 product: it takes no bias, activation, residual or "
                "scales; write int8, fp32, bf16 or fp16 for a requantised or dequantised result");
        auto int32_value = [](double v) { return v >= -2147483648.0 && v <= 2147483647.0 && v == std::trunc(v); };  // NaN: false
        require(int32_value(o.alpha) && int32_value(o.beta), "matmul: an int32 output takes integer alpha and "
                "beta (the product is exact); got alpha = ", o.alpha, ", beta = ", o.beta, "; write fp32 (or int8) for a scaled result");
    }
    for (const auto* scale : {&e.row_scale, &e.col_scale}) {
        if (!*scale) continue;
        const bool rows = scale == &e.row_scale;
        const Tensor<float>& t = **scale;
        const std::int64_t want = rows ? m : n;
        require(t.defined() && t.dim() == 1 && t.numel() == want && t.is_contiguous(), "matmul: the ", rows ? "row" : "column",
                " scale must be a contiguous 1-d fp32 tensor of ", want, " elements (one per output ", rows ? "row" : "column",
                "), not shape ", ::tessel::detail::shape_of(t));
        require(t.device() == device && t.space() != MemorySpace::host && t.space() != MemorySpace::pinned, "matmul: the ",
                rows ? "row" : "column", " scale must be in device memory on the operands' device ", device.index);
    }
    for (const auto* scale : {&e.a_scale, &e.b_scale}) {
        if (!*scale) continue;
        const char* name = scale == &e.a_scale ? "a_scale" : "b_scale";
        const Tensor<float>& t = **scale;
        require(t.defined() && t.numel() == 1, "matmul: ", name, " is a per-tensor scale: one fp32 element, not shape ",
                ::tessel::detail::shape_of(t));
        require(t.device() == device && t.space() != MemorySpace::host && t.space() != MemorySpace::pinned, "matmul: ", name,
                " must be in device memory on the operands' device ", device.index, " (cuBLASLt reads it on the device)");
        require(reinterpret_cast<std::uintptr_t>(t.data()) % alignof(float) == 0, "matmul: ", name, " is not 4-byte aligned");
    }
    if (e.bias) {
        const std::int64_t want = e.bias_per_row ? m : n;
        require(e.bias->defined() && e.bias->dim() == 1 && e.bias->numel() == want && e.bias->is_contiguous(), "matmul: the bias must be a "
                "contiguous 1-d tensor of ", want, " elements (one per output ", e.bias_per_row ? "row" : "column", "), not shape ",
                ::tessel::detail::shape_of(*e.bias));
        require(e.bias->device() == device && e.bias->space() != MemorySpace::host && e.bias->space() != MemorySpace::pinned,
                "matmul: the bias must be in device memory on the operands' device ", device.index);
    }
    if (e.residual) {
        require(e.residual->defined() && e.residual->shape() == s.result, "matmul: the residual has shape ",
                ::tessel::detail::shape_of(*e.residual), " but the product has shape ",
                s.result);
        require(e.residual->device() == device && e.residual->space() != MemorySpace::host && e.residual->space() != MemorySpace::pinned,
                "matmul: the residual must be in device memory on the operands' device ", device.index);
    }
}

template <class T, class Out>
void matmul_into(const Tensor<T>& a, const Tensor<T>& b, const Tensor<Out>& out, const MatmulShapes& s, const MatmulOptions& o,
                 const MatmulEpilogue<Out>& e, std::source_location site) {
    const Device device = a.device();
    const rt::stream_t stream = stream_for("matmul", o.stream, device);  // one the caller chose must be of the operands' device
    check_epilogue<T, Out>(e, s, o, device);
    // The operands as [..., M, K] and [..., K, N], the output (and residual) as batch + [M, N].
    Tensor<T> a2 = s.a_vector ? a.unsqueeze(0) : a;
    Tensor<T> b2 = s.b_vector ? b.unsqueeze(1) : b;
    if (o.alpha == 0) {
        // BLAS's rule: with alpha 0, a and b are not read, so an Inf or NaN in them does not make
        // 0 * Inf; every path then computes beta * out and the rest of the epilogue (as for K = 0).
        a2 = a2.narrow(a2.dim() - 1, 0, 0);
        b2 = b2.narrow(b2.dim() - 2, 0, 0);
    }
    MatmulEpilogue<Out> full_e = e;
    if (e.residual) full_e.residual = as_full(*e.residual, s);
    for (const Tensor<T>* t : {&a, &b}) ::tessel::detail::order_after_last_write(*t->storage(), stream, device);
    ::tessel::detail::order_after_last_write(*out.storage(), stream, device);
    for (const auto* t : {&e.bias, &e.residual})
        if (*t) ::tessel::detail::order_after_last_write(*(*t)->storage(), stream, device);
    for (const auto* t : {&e.row_scale, &e.col_scale, &e.a_scale, &e.b_scale})
        if (*t) ::tessel::detail::order_after_last_write(*(*t)->storage(), stream, device);
    run_matmul<T, Out>(a2, b2, as_full(out, s), o, full_e, stream, device, site);
}

template <class T, class Out>
constexpr bool matmul_types = (tensor_core_type<T> && (std::is_same_v<Out, T> || std::is_same_v<Out, float>)) ||
                              ((std::is_same_v<T, float> || std::is_same_v<T, double>) && std::is_same_v<Out, T>) ||
                              (std::is_same_v<T, std::int8_t> && (std::is_same_v<Out, int> || std::is_same_v<Out, std::int8_t> ||
                                                                  std::is_same_v<Out, float> || tensor_core_type<Out>)) ||
                              // e4m3 only: cuBLASLt's fp8 tables pair e5m2 with e4m3, never with itself.
                              (std::is_same_v<T, __nv_fp8_e4m3> && (std::is_same_v<Out, float> || tensor_core_type<Out>));

}  // namespace ops::detail

// The dtype matmul(a, b) returns: the inputs', int32 for int8 (the exact product, as torch._int_mm),
// fp32 for fp8 (the dequantised product, unrounded).
template <class T>
using matmul_result_t = std::conditional_t<std::is_same_v<T, std::int8_t>, int, std::conditional_t<ops::detail::fp8_type<T>, float, T>>;

// out = epilogue(alpha * (a @ b) + beta * out) with torch.matmul's shape rules; out must have the
// product's shape, be on the operands' device and share no memory with them (beta == 0 never reads
// it). Out is T, or fp32 for bf16/fp16 inputs (the accumulator, unrounded); for int8 inputs int32
// (exact), or int8, fp32, bf16, fp16 through the epilogue's scales (requantised, dequantised); for
// fp8 inputs (cuBLASLt, sm_89+) fp32, bf16 or fp16, with the epilogue's per-tensor a_scale and
// b_scale as torch._scaled_mm's.
template <Element T, Element Out>
void matmul(const Tensor<T>& a, const Tensor<T>& b, const Tensor<Out>& out, const MatmulOptions& options = {},
            const MatmulEpilogue<Out>& epilogue = {}, std::source_location site = std::source_location::current()) {
    static_assert(ops::detail::matmul_types<T, Out>,
                  "matmul takes float, double, __half and __nv_bfloat16 tensors, writing the same type or, for __half and "
                  "__nv_bfloat16, float; int8 tensors, writing int32, int8, float, __half or __nv_bfloat16; and fp8 __nv_fp8_e4m3 "
                  "tensors, writing float, __half or __nv_bfloat16 (cuBLASLt has no e5m2 x e5m2 product)");
    const ops::detail::MatmulShapes s = ops::detail::matmul_shapes(a, b);
    require(out.defined(), "matmul: out is an undefined (default-constructed) tensor");
    require(out.space() == MemorySpace::device || out.space() == MemorySpace::managed, "matmul: out is in ", space_name(out.space()),
            " memory; it must be device memory");
    require(out.device() == a.device(), "matmul: out is on device ", out.device().index, ", the operands on device ", a.device().index);
    require(out.shape() == s.result, "matmul: out has shape ", out.shape(), " but the product of ", a.shape(),
            " and ", b.shape(), " has shape ", s.result);
    require(::tessel::detail::distinct_elements(out.layout()), "matmul: out (shape ", out.shape(), ", strides ", out.strides(), ") ",
            ::tessel::detail::repeated_elements_text(out.layout()), " (a broadcast or overlapping view); write into a tensor whose elements are distinct");
    const MatmulEpilogue<Out>* e = &epilogue;
    MatmulEpilogue<Out> copied;
    if (out.numel() > 0) {
        auto sharing = [&](const auto& t) {
            return ::tessel::detail::memory_sharing(out.data(), out.layout(), sizeof(Out), t.data(), t.layout(), sizeof(*t.data()));
        };
        auto overlaps = [&](const auto& t) { return sharing(t) != ::tessel::detail::Sharing::none; };  // unknown counts as sharing
        auto check = [&](const auto& t, const char* name) {
            const auto s = sharing(t);
            require(s == ::tessel::detail::Sharing::none, "matmul: out (shape ", out.shape(), ", strides ", out.strides(),
                    s == ::tessel::detail::Sharing::some ? ") shares memory with " : ") may share memory (too many candidates to rule it out) with ",
                    name, "; a product cannot be written over its own input: use another output tensor");
        };
        check(a, "a");
        check(b, "b");
        if (epilogue.bias) check(*epilogue.bias, "the bias");
        if (epilogue.row_scale) check(*epilogue.row_scale, "the row scale");
        if (epilogue.col_scale) check(*epilogue.col_scale, "the column scale");
        if (epilogue.a_scale) check(*epilogue.a_scale, "a_scale");
        if (epilogue.b_scale) check(*epilogue.b_scale, "b_scale");
        // out += a @ b as residual = out: the library path writes the product into out before its
        // epilogue reads the residual, and a residual laid out otherwise than out would be read
        // after other blocks wrote it; one copy of the residual makes every path read the old values.
        // The copy is made on the product's stream, so its memory is not reused before the product
        // has read it.
        if (epilogue.residual && overlaps(*epilogue.residual)) {
            copied = epilogue;
            copied.residual = epilogue.residual->clone(options.stream);
            e = &copied;
        }
    }
    ops::detail::matmul_into(a, b, out, s, options, *e, site);
}

// a @ b (with the epilogue) as a new contiguous tensor of a's dtype (int32 for int8, fp32 for fp8), with
// torch.matmul's shape rules (beta must be 0: there is no prior output to scale).
template <Element T>
Tensor<matmul_result_t<T>> matmul(const Tensor<T>& a, const Tensor<T>& b, const MatmulOptions& options = {},
                                  const MatmulEpilogue<matmul_result_t<T>>& epilogue = {},
                                  std::source_location site = std::source_location::current()) {
    using R = matmul_result_t<T>;
    static_assert(ops::detail::matmul_types<T, R>,
                  "matmul takes float, double, __half, __nv_bfloat16, int8 and fp8 e4m3 tensors (not e5m2: cuBLASLt has no "
                  "e5m2 x e5m2 product)");
    const ops::detail::MatmulShapes s = ops::detail::matmul_shapes(a, b);
    require(options.beta == 0, "matmul: beta = ", options.beta, " scales an existing output; pass one (matmul(a, b, out, options))");
    const rt::stream_t stream = stream_for("matmul", options.stream, a.device());
    Tensor<R> out = empty<R>(s.result, TensorOptions{.device = a.device(), .stream = stream, .non_blocking = true});
    ops::detail::matmul_into(a, b, out, s, options, epilogue, site);
    return out;
}

// torch.nn.functional.linear with the activation fused: activation(x @ weight^T + bias), x of shape
// [..., in], weight [out, in] (read through its transpose: cuBLAS and the tensor-core kernel take it
// as it lies; the SIMT kernel, exact fp32 and fp64 on the hand-written path, takes rows only and so
// reads a copy), bias [out] or 0-d (any strides: one that is not contiguous is copied first, as
// torch takes it). A 1-d weight [in] is one output feature that the result drops ([..., in] ->
// [...], its bias 0-d), as in torch.
template <Element T>
Tensor<T> linear(const Tensor<T>& x, const Tensor<T>& weight, const std::type_identity_t<std::optional<Tensor<T>>>& bias = std::nullopt,
                 Activation activation = Activation::none, const MatmulOptions& options = {},
                 std::source_location site = std::source_location::current()) {
    static_assert(!std::is_same_v<T, std::int8_t> && !ops::detail::fp8_type<T>, "linear of int8 or fp8 tensors: call matmul(x, weight.transpose(0, 1), out, options, "
                  "epilogue) with an int8, fp32, bf16 or fp16 out and the epilogue's scales and bias");
    require(options.beta == 0, "linear: beta = ", options.beta, " scales an existing output, which linear does not take; call "
            "matmul(x, weight.transpose(0, 1), out, options, {.bias = bias, .activation = activation})");
    require(weight.defined() && (weight.dim() == 2 || weight.dim() == 1), "linear: the weight must be a 2-d tensor [out_features, "
            "in_features] or a 1-d one [in_features], not shape ", ::tessel::detail::shape_of(weight));
    const std::int64_t in_features = weight.shape()[weight.dim() - 1];
    require(x.defined() && x.dim() >= 1 && x.shape()[x.dim() - 1] == in_features, "linear: the input's last dim must be the "
            "weight's in_features (", in_features, "); the input has shape ", ::tessel::detail::shape_of(x));
    if (weight.dim() == 1) {
        if (bias)
            require(bias->defined() && bias->dim() == 0, "linear: with a 1-d weight (one output feature) the bias must be 0-d, not shape ",
                    ::tessel::detail::shape_of(*bias));
        const Tensor<T> y = linear(x, weight.unsqueeze(0), bias ? std::optional(bias->unsqueeze(0)) : std::nullopt, activation, options, site);
        return y.squeeze(y.dim() - 1);
    }
    // Named here as linear's arguments; matmul would call them b and the bias of a product.
    auto in_host = [](const Tensor<T>& t) { return t.space() != MemorySpace::device && t.space() != MemorySpace::managed; };
    require(!in_host(x) && !in_host(weight), "linear: the ", in_host(x) ? "input" : "weight", " is in host memory; move it to the device "
            "with .to(TensorOptions{.device = ...}) first");
    require(x.device() == weight.device(), "linear: the input is on device ", x.device().index, " and the weight on device ",
            weight.device().index, "; move one of them (.to(TensorOptions{.device = ...}))");
    MatmulEpilogue<T> e{.bias = bias, .bias_per_row = false, .activation = activation};
    if (bias) {
        require(bias->defined() && (bias->dim() == 0 || (bias->dim() == 1 && bias->numel() == weight.shape()[0])), "linear: the bias "
                "must be a 1-d tensor of out_features (", weight.shape()[0], ") elements or 0-d, not shape ", ::tessel::detail::shape_of(*bias));
        require(!in_host(*bias), "linear: the bias is in host memory; move it to the device with .to(TensorOptions{.device = ...}) first");
        require(bias->device() == x.device(), "linear: the bias is on device ", bias->device().index, " and the input on device ",
                x.device().index);
        const Tensor<T> b = bias->dim() == 0 ? bias->unsqueeze(0).expand({weight.shape()[0]}) : *bias;
        e.bias = b.is_contiguous() ? b : b.contiguous(options.stream);
    }
    return matmul(x, weight.transpose(0, 1), options, e, site);
}

}  // namespace tessel
