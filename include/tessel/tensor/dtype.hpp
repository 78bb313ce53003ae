// The element types a Tensor can hold, and what tessel needs to know of each: its DType tag, name,
// size, whether it is floating point, and the type arithmetic on it accumulates in.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <limits>
#include <string_view>
#include <type_traits>

namespace tessel {

// A tensor's element type, as a runtime value.
enum class DType : std::uint8_t { f64, f32, f16, bf16, f8_e4m3, f8_e5m2, i8, u8, i32, i64, boolean };

// Compile-time facts about an element type T; specialised for every supported type only.
template <class T>
struct dtype_traits;

#define TESSEL_DTYPE(T, tag, label, floating, Acc)                   \
    template <>                                                      \
    struct dtype_traits<T> {                                         \
        static constexpr DType dtype = DType::tag;                   \
        static constexpr const char* name = label; /* prints with %s */ \
        static constexpr bool is_floating = floating;                \
        using accumulate_type = Acc;                                 \
    };
TESSEL_DTYPE(double, f64, "float64", true, double)
TESSEL_DTYPE(float, f32, "float32", true, float)
TESSEL_DTYPE(__half, f16, "float16", true, float)
TESSEL_DTYPE(__nv_bfloat16, bf16, "bfloat16", true, float)
TESSEL_DTYPE(__nv_fp8_e4m3, f8_e4m3, "float8_e4m3", true, float)
TESSEL_DTYPE(__nv_fp8_e5m2, f8_e5m2, "float8_e5m2", true, float)
TESSEL_DTYPE(std::int8_t, i8, "int8", false, std::int32_t)
TESSEL_DTYPE(std::uint8_t, u8, "uint8", false, std::int32_t)
TESSEL_DTYPE(std::int32_t, i32, "int32", false, std::int64_t)
TESSEL_DTYPE(std::int64_t, i64, "int64", false, std::int64_t)
TESSEL_DTYPE(bool, boolean, "bool", false, std::int64_t)
#undef TESSEL_DTYPE

// True for the element types Tensor supports.
template <class T>
concept Element = requires { dtype_traits<T>::dtype; };

template <Element T>
inline constexpr DType dtype_of = dtype_traits<T>::dtype;
template <Element T>
using accumulate_t = typename dtype_traits<T>::accumulate_type;

inline constexpr const char* dtype_name(DType d) {  // a C string: prints with %s too
    switch (d) {
        case DType::f64: return "float64";
        case DType::f32: return "float32";
        case DType::f16: return "float16";
        case DType::bf16: return "bfloat16";
        case DType::f8_e4m3: return "float8_e4m3";
        case DType::f8_e5m2: return "float8_e5m2";
        case DType::i8: return "int8";
        case DType::u8: return "uint8";
        case DType::i32: return "int32";
        case DType::i64: return "int64";
        case DType::boolean: return "bool";
    }
    return "?";
}
// Calls f(T{}) with T the element type of `d` (the dispatch from a runtime dtype to a template).
template <class F>
decltype(auto) visit_dtype(DType d, F&& f) {
    switch (d) {
        case DType::f64: return f(double{});
        case DType::f32: return f(float{});
        case DType::f16: return f(__half{});
        case DType::bf16: return f(__nv_bfloat16{});
        case DType::f8_e4m3: return f(__nv_fp8_e4m3{});
        case DType::f8_e5m2: return f(__nv_fp8_e5m2{});
        case DType::i8: return f(std::int8_t{});
        case DType::u8: return f(std::uint8_t{});
        case DType::i32: return f(std::int32_t{});
        case DType::i64: return f(std::int64_t{});
        case DType::boolean: break;
    }
    return f(bool{});
}
inline constexpr std::size_t dtype_size(DType d) {
    switch (d) {
        case DType::f64:
        case DType::i64: return 8;
        case DType::f32:
        case DType::i32: return 4;
        case DType::f16:
        case DType::bf16: return 2;
        default: return 1;
    }
}

namespace detail {
// The largest finite value of a reduced floating type (fp8 e4m3: 448, e5m2: 57344, half: 65504).
template <class T>
T largest_finite() {
    if constexpr (std::is_same_v<T, __half>) return T(65504.0f);
    else if constexpr (std::is_same_v<T, __nv_bfloat16>) return T(3.38953139e38f);
    else if constexpr (std::is_same_v<T, __nv_fp8_e4m3>) return T(448.0f);
    else if constexpr (std::is_same_v<T, __nv_fp8_e5m2>) return T(57344.0f);
    else return std::numeric_limits<T>::max();
}

// float, double or an integer to half, bf16 or fp8 (To), rounded once to nearest even (fp8 saturating
// at its largest finite value, as its CUDA type does): double through CUDA's double conversions
// (cvt.rn.f16.f64 and, on sm_90, cvt.rn.bf16.f64), not through float, which would round twice
// (1 + 2^-11 + 2^-40 came to half 1). Integers go through float, except wider ones to bf16, which go
// through double (exact up to 2^53; int64 beyond that rounds twice, as torch's through float does):
// beyond float's 2^24 an integer is past half's and fp8's range, where float's rounding cannot
// change the result, but not past bf16's (int32 2^24 + 2^16 + 1 came to bf16 2^24).
template <class To, class From>
__host__ __device__ inline To to_reduced_float(From v) {
    if constexpr (std::is_integral_v<From> && (sizeof(From) <= 2 || !std::is_same_v<To, __nv_bfloat16>))
        return to_reduced_float<To>(float(v));
    else if constexpr (std::is_integral_v<From>) return to_reduced_float<To>(double(v));
    else if constexpr (std::is_same_v<From, double> && std::is_same_v<To, __half>) return __double2half(v);
    else if constexpr (std::is_same_v<From, double> && std::is_same_v<To, __nv_bfloat16>) return __double2bfloat16(v);
    else return To(v);  // float to any, and double to fp8 (__nv_cvt_double_to_fp8)
}

// Floating to integer as the GPU's conversion instructions do it (cvt.rzi.sat): truncation toward
// zero, saturation at To's range, 0 for NaN. Shared by convert() on the host and ops::cast in kernels.
template <class To, class From>
__host__ __device__ inline To float_to_int_saturating(From v) {
    if (!(v == v)) return To(0);
    // The range's ends as From: the largest From below 2^63 for int64 (a converted max would round up).
    constexpr From lo = From(std::numeric_limits<To>::lowest());
    constexpr From hi = sizeof(To) == 8 ? From(std::numeric_limits<To>::max() / 2 + 1) * From(2) : From(std::numeric_limits<To>::max());
    if (v <= lo) return std::numeric_limits<To>::lowest();
    if (v >= hi) return std::numeric_limits<To>::max();
    return static_cast<To>(v);
}

// Whether arange's int64 values are computed in integers (start and step whole numbers of int64's
// range): beyond 2^53 doubles skip integers, and start + i * step in double would repeat values.
__host__ __device__ inline bool arange_in_integers(double start, double step) {
    return start >= -0x1p63 && start < 0x1p63 && step >= -0x1p63 && step < 0x1p63 && double(std::int64_t(start)) == start &&
           double(std::int64_t(step)) == step;
}
// Value i of such an arange: modulo 2^64, which is the value itself whenever it fits in int64.
__host__ __device__ inline std::int64_t arange_integer(std::uint64_t i, double start, double step) {
    return std::int64_t(std::uint64_t(std::int64_t(start)) + i * std::uint64_t(std::int64_t(step)));
}
}  // namespace detail

// Value conversions on the host, with the device's semantics (tessel::ops::cast): from the reduced
// types through float (exact), to them rounded once (detail::to_reduced_float); floating to integer
// truncates toward zero, saturates at the integer's range and gives 0 for NaN; anything to bool is
// `!= 0`.
template <class To, class From>
To convert(From v) {
    if constexpr (std::is_same_v<To, From>) return v;
    else if constexpr (dtype_traits<From>::is_floating && !std::is_arithmetic_v<From>) return convert<To>(float(v));
    else if constexpr (std::is_same_v<To, bool>) return v != From(0);
    else if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To>) return detail::float_to_int_saturating<To>(v);
    else if constexpr (!std::is_arithmetic_v<To>) return detail::to_reduced_float<To>(v);
    else return static_cast<To>(v);
}

}  // namespace tessel
