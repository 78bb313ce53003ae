// Type rules of tessel's element-wise expressions: which element type a mixed expression produces
// (promotion), the type it computes in, and value casts usable in kernels. See docs/expressions.md.
//
//   - Two floating types: float64 if either is; else float32 if either is; two different reduced
//     types (float16, bfloat16, fp8) give float32; equal types stay.
//   - Floating with integer or bool: the floating type. Two integer types: the wider; int8 with
//     uint8 gives int32. bool with an integer: the integer.
//   - C++ scalars are weak, as in PyTorch and NumPy 2: `x * 2.0` keeps x's type when x is floating;
//     a floating scalar with an integer or bool tensor gives float32; an integer scalar with a bool
//     tensor gives int64.
//   - float16, bfloat16 and fp8 values are computed in float32 and rounded once when stored.
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "../tensor/dtype.hpp"

namespace tessel::ops {

// The element type of a C++ floating scalar in an expression before promotion (weak: see above).
struct weak_float {};
// The element type of a C++ integer scalar in an expression before promotion.
struct weak_int {};

// A C++ number's type in an expression (weak_float, weak_int), not a tensor's element type.
template <class T>
inline constexpr bool is_weak_type = std::is_same_v<T, weak_float> || std::is_same_v<T, weak_int>;

template <class T>
inline constexpr bool is_reduced_float = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16> ||
                                         std::is_same_v<T, __nv_fp8_e4m3> || std::is_same_v<T, __nv_fp8_e5m2>;
template <class T>
inline constexpr bool is_float_type = std::is_floating_point_v<T> || is_reduced_float<T> || std::is_same_v<T, weak_float>;
template <class T>
inline constexpr bool is_bool_type = std::is_same_v<T, bool>;
template <class T>
inline constexpr bool is_int_type = (std::is_integral_v<T> && !is_bool_type<T>) || std::is_same_v<T, weak_int>;

namespace detail {
// The promotion of two strong element types, as a type_identity (only its type is used).
template <class A, class B>
auto pick_strong() {
    if constexpr (std::is_same_v<A, B>) return std::type_identity<A>{};
    else if constexpr (is_float_type<A> && is_float_type<B>) {
        if constexpr (std::is_same_v<A, double> || std::is_same_v<B, double>) return std::type_identity<double>{};
        else return std::type_identity<float>{};  // one is float32, or two different reduced types
    } else if constexpr (is_float_type<A>) return std::type_identity<A>{};
    else if constexpr (is_float_type<B>) return std::type_identity<B>{};
    else if constexpr (is_bool_type<A>) return std::type_identity<B>{};
    else if constexpr (is_bool_type<B>) return std::type_identity<A>{};
    else if constexpr (sizeof(A) != sizeof(B)) return std::type_identity<std::conditional_t<(sizeof(A) > sizeof(B)), A, B>>{};
    else return std::type_identity<std::int32_t>{};  // int8 with uint8
}
template <class A, class B>
struct promote2 {
    using type = typename decltype(pick_strong<A, B>())::type;
};
// Weak scalars: the tensor side's type wins within its category.
template <class A>
struct promote2<A, weak_float> {
    using type = std::conditional_t<is_float_type<A>, A, float>;
};
template <class A>
struct promote2<A, weak_int> {
    using type = std::conditional_t<is_bool_type<A>, std::int64_t, A>;
};
template <class B>
    requires(!is_weak_type<B>)
struct promote2<weak_float, B> : promote2<B, weak_float> {};
template <class B>
    requires(!is_weak_type<B>)
struct promote2<weak_int, B> : promote2<B, weak_int> {};
template <>
struct promote2<weak_float, weak_int> {
    using type = weak_float;
};
template <>
struct promote2<weak_int, weak_float> {
    using type = weak_float;
};
template <>
struct promote2<weak_float, weak_float> {
    using type = weak_float;
};
template <>
struct promote2<weak_int, weak_int> {
    using type = weak_int;
};

template <class T>
struct compute {
    using type = T;
};
template <class T>
    requires is_reduced_float<T>
struct compute<T> {
    using type = float;
};
template <>
struct compute<weak_float> {
    using type = double;
};
template <>
struct compute<weak_int> {
    using type = std::int64_t;
};
}  // namespace detail

// The element type an expression mixing A and B produces.
template <class A, class B>
using promote_t = typename detail::promote2<A, B>::type;
// The type values of element type T are computed in (float for the reduced floating types).
template <class T>
using compute_t = typename detail::compute<T>::type;
// The floating type a math function (exp, sqrt, ...) of T produces: T if floating, else float32.
template <class T>
using float_result_t = std::conditional_t<is_float_type<T> && !std::is_same_v<T, weak_float>, T, float>;

// Converts a value between element and compute types, in kernels and on the host. Reduced floating
// types round once to nearest even (tessel::detail::to_reduced_float); fp8 saturates to its largest
// finite value. Floating to integer truncates toward zero, saturating at the integer's range, NaN
// giving 0 (as the GPU's conversion instructions do, and defined on the host too).
template <class To, class From>
__host__ __device__ inline To cast(From v) {
    if constexpr (std::is_same_v<To, From>) return v;
    else if constexpr (is_reduced_float<From>) return cast<To>(float(v));
    else if constexpr (std::is_same_v<To, bool>) return v != From(0);
    else if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To>) return tessel::detail::float_to_int_saturating<To>(v);
    else if constexpr (is_reduced_float<To>) return tessel::detail::to_reduced_float<To>(v);
    else return static_cast<To>(v);
}

}  // namespace tessel::ops
