// The element operations of tessel's expressions: one small functor per operation, usable in
// kernels and on the host, each with a `kind` that fixes its result type (see promote.hpp) and a name
// for error messages. Reduced floating types reach these functors already widened to float.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "../core/kernel.hpp"  // __host__ __device__ and the CUDA math functions (rsqrtf) in both backends
#include "promote.hpp"

namespace tessel::ops {

// How an operation's result type follows from its operands' types.
enum class Kind {
    arithmetic,  // promote(A, B), computed in that type
    divide,      // true division: promote(A, B) if floating, else float32
    compare,     // bool, operands compared in promote(A, B)
    logical,     // bool, operands taken as bool
    floating,    // unary math: the operand's type if floating, else float32
    same,        // unary, the operand's type (abs, negation, rounding, relu)
    predicate,   // unary test, bool (isnan, isinf)
};

// Math on the compute types (float, double, integers) in both backends: CUDA's global float and
// double functions on the GPU, the C library's in the sim.
namespace math {
#define TESSEL_MATH_UNARY(name, fname, dname)                                        \
    __host__ __device__ inline float name(float x) { return ::fname(x); }           \
    __host__ __device__ inline double name(double x) { return ::dname(x); }
TESSEL_MATH_UNARY(exp, expf, exp)
TESSEL_MATH_UNARY(exp2, exp2f, exp2)
TESSEL_MATH_UNARY(log, logf, log)
TESSEL_MATH_UNARY(log2, log2f, log2)
TESSEL_MATH_UNARY(log1p, log1pf, log1p)
TESSEL_MATH_UNARY(expm1, expm1f, expm1)
TESSEL_MATH_UNARY(sqrt, sqrtf, sqrt)
TESSEL_MATH_UNARY(rsqrt, rsqrtf, rsqrt)
TESSEL_MATH_UNARY(sin, sinf, sin)
TESSEL_MATH_UNARY(cos, cosf, cos)
TESSEL_MATH_UNARY(tanh, tanhf, tanh)
TESSEL_MATH_UNARY(erf, erff, erf)
TESSEL_MATH_UNARY(floor, floorf, floor)
TESSEL_MATH_UNARY(ceil, ceilf, ceil)
TESSEL_MATH_UNARY(rint, rintf, rint)  // round half to even, as NumPy's round
TESSEL_MATH_UNARY(fabs, fabsf, fabs)
#undef TESSEL_MATH_UNARY
__host__ __device__ inline float pow(float x, float y) { return ::powf(x, y); }
__host__ __device__ inline double pow(double x, double y) { return ::pow(x, y); }
// The larger of two numbers, a NaN ignored (one FMNMX; ops::Maximum propagates NaN in three).
__host__ __device__ inline float fmax(float x, float y) { return ::fmaxf(x, y); }
__host__ __device__ inline double fmax(double x, double y) { return ::fmax(x, y); }
// sin(pi x) and cos(pi x) at once: no Payne-Hanek reduction (the slow path with a stack frame that
// sin/cos keep for large arguments), since multiples of pi are taken out exactly.
__host__ __device__ inline void sincospi(float x, float* s, float* c) { ::sincospif(x, s, c); }
__host__ __device__ inline void sincospi(double x, double* s, double* c) { ::sincospi(x, s, c); }
__host__ __device__ inline float fmod(float x, float y) { return ::fmodf(x, y); }
__host__ __device__ inline double fmod(double x, double y) { return ::fmod(x, y); }
}  // namespace math

template <class C>
__host__ __device__ inline bool is_nan(C x) {
    if constexpr (std::is_floating_point_v<C>) return x != x;
    else return false;
}

// Integer +, - and * that wrap (two's complement) on overflow, as a GPU's integer units do: done in
// the unsigned type, where C++ defines the wrap, so the sanitizer builds never abort on a user's
// overflowing sum. Floating types compute as usual.
template <class C>
__host__ __device__ inline C wrapping_add(C a, C b) {
    if constexpr (std::is_integral_v<C> && !std::is_same_v<C, bool> && sizeof(C) >= sizeof(int))
        return C(std::make_unsigned_t<C>(a) + std::make_unsigned_t<C>(b));
    else return C(a + b);
}
template <class C>
__host__ __device__ inline C wrapping_sub(C a, C b) {
    if constexpr (std::is_integral_v<C> && !std::is_same_v<C, bool> && sizeof(C) >= sizeof(int))
        return C(std::make_unsigned_t<C>(a) - std::make_unsigned_t<C>(b));
    else return C(a - b);
}
template <class C>
__host__ __device__ inline C wrapping_mul(C a, C b) {
    if constexpr (std::is_integral_v<C> && !std::is_same_v<C, bool> && sizeof(C) >= sizeof(int))
        return C(std::make_unsigned_t<C>(a) * std::make_unsigned_t<C>(b));
    else if constexpr (std::is_integral_v<C> && !std::is_same_v<C, bool>)
        return C(unsigned(a) * unsigned(b));  // narrower types promote to int, whose product could overflow
    else return C(a * b);
}

// ---- binary -------------------------------------------------------------------------------------
struct Add {
    static constexpr Kind kind = Kind::arithmetic;
    static constexpr const char* name = "+";
    template <class C>
    __host__ __device__ C operator()(C a, C b) const { return wrapping_add(a, b); }
};
struct Sub {
    static constexpr Kind kind = Kind::arithmetic;
    static constexpr const char* name = "-";
    template <class C>
    __host__ __device__ C operator()(C a, C b) const { return wrapping_sub(a, b); }
};
struct Mul {
    static constexpr Kind kind = Kind::arithmetic;
    static constexpr const char* name = "*";
    template <class C>
    __host__ __device__ C operator()(C a, C b) const { return wrapping_mul(a, b); }
};
struct Div {
    static constexpr Kind kind = Kind::divide;
    static constexpr const char* name = "/";
    template <class C>
    __host__ __device__ C operator()(C a, C b) const { return a / b; }
};
// Python's and NumPy's modulo: the result has the divisor's sign. An integer x % 0 gives 0 (a GPU
// has no trap for it, and C++ leaves it undefined).
struct Mod {
    static constexpr Kind kind = Kind::arithmetic;
    static constexpr const char* name = "%";
    template <class C>
    __host__ __device__ C operator()(C a, C b) const {
        if constexpr (std::is_floating_point_v<C>) {
            C r = math::fmod(a, b);
            if (r != C(0) && ((r < C(0)) != (b < C(0)))) r += b;
            return r;
        } else if constexpr (std::is_same_v<C, bool>) {
            return false;
        } else {
            if (b == C(0) || (std::is_signed_v<C> && b == C(-1))) return C(0);
            C r = C(a % b);
            if (r != C(0) && ((r < C(0)) != (b < C(0)))) r = C(r + b);
            return r;
        }
    }
};
// Element-wise maximum and minimum; a NaN operand gives NaN (as PyTorch's maximum/minimum).
struct Maximum {
    static constexpr Kind kind = Kind::arithmetic;
    static constexpr const char* name = "maximum";
    template <class C>
    __host__ __device__ C operator()(C a, C b) const { return is_nan(a) ? a : is_nan(b) ? b : (a < b ? b : a); }
};
struct Minimum {
    static constexpr Kind kind = Kind::arithmetic;
    static constexpr const char* name = "minimum";
    template <class C>
    __host__ __device__ C operator()(C a, C b) const { return is_nan(a) ? a : is_nan(b) ? b : (b < a ? b : a); }
};
// Integer powers by squaring (negative exponents give 0 except for bases 1 and -1); floats via pow.
struct Pow {
    static constexpr Kind kind = Kind::arithmetic;
    static constexpr const char* name = "pow";
    template <class C>
    __host__ __device__ C operator()(C a, C b) const {
        if constexpr (std::is_floating_point_v<C>) {
            return math::pow(a, b);
        } else if constexpr (std::is_same_v<C, bool>) {
            return a || !b;
        } else {
            if (b < C(0)) return a == C(1) ? C(1) : a == C(-1) ? ((b & C(1)) ? C(-1) : C(1)) : C(0);
            using U = std::make_unsigned_t<C>;  // wraps like the GPU, without signed overflow
            U r = 1, base = U(a);
            for (C e = b; e != C(0); e = C(e >> 1)) {
                if (e & C(1)) r = U(r * base);
                base = U(base * base);
            }
            return C(r);
        }
    }
};
#define TESSEL_COMPARE(Name, op)                                                            \
    struct Name {                                                                           \
        static constexpr Kind kind = Kind::compare;                                         \
        static constexpr const char* name = #op;                                            \
        template <class C>                                                                  \
        __host__ __device__ bool operator()(C a, C b) const { return a op b; }              \
    };
TESSEL_COMPARE(Equal, ==)
TESSEL_COMPARE(NotEqual, !=)
TESSEL_COMPARE(Less, <)
TESSEL_COMPARE(LessEqual, <=)
TESSEL_COMPARE(Greater, >)
TESSEL_COMPARE(GreaterEqual, >=)
#undef TESSEL_COMPARE
struct LogicalAnd {
    static constexpr Kind kind = Kind::logical;
    static constexpr const char* name = "&&";
    __host__ __device__ bool operator()(bool a, bool b) const { return a && b; }
};
struct LogicalOr {
    static constexpr Kind kind = Kind::logical;
    static constexpr const char* name = "||";
    __host__ __device__ bool operator()(bool a, bool b) const { return a || b; }
};

// ---- unary --------------------------------------------------------------------------------------
struct Negate {
    static constexpr Kind kind = Kind::same;
    static constexpr const char* name = "-";
    template <class C>
    __host__ __device__ C operator()(C a) const {
        if constexpr (std::is_same_v<C, bool>) return a;
        else if constexpr (std::is_integral_v<C>) return C(std::make_unsigned_t<C>(0) - std::make_unsigned_t<C>(a));  // wraps
        else return -a;
    }
};
struct LogicalNot {
    static constexpr Kind kind = Kind::logical;
    static constexpr const char* name = "!";
    __host__ __device__ bool operator()(bool a) const { return !a; }
};
struct Abs {
    static constexpr Kind kind = Kind::same;
    static constexpr const char* name = "abs";
    template <class C>
    __host__ __device__ C operator()(C a) const {
        if constexpr (std::is_floating_point_v<C>) return math::fabs(a);
        else if constexpr (std::is_unsigned_v<C> || std::is_same_v<C, bool>) return a;
        else return a < C(0) ? Negate{}(a) : a;
    }
};
struct Relu {
    static constexpr Kind kind = Kind::same;
    static constexpr const char* name = "relu";
    template <class C>
    __host__ __device__ C operator()(C a) const { return is_nan(a) ? a : (a < C(0) ? C(0) : a); }
};
#define TESSEL_ROUNDING(Name, label, fn)                                                                  \
    struct Name {                                                                                         \
        static constexpr Kind kind = Kind::same;                                                          \
        static constexpr const char* name = label;                                                        \
        template <class C>                                                                                \
        __host__ __device__ C operator()(C a) const {                                                     \
            if constexpr (std::is_floating_point_v<C>) return math::fn(a);                                \
            else return a;                                                                                \
        }                                                                                                 \
    };
TESSEL_ROUNDING(Floor, "floor", floor)
TESSEL_ROUNDING(Ceil, "ceil", ceil)
TESSEL_ROUNDING(Round, "round", rint)
#undef TESSEL_ROUNDING
#define TESSEL_FLOAT_UNARY(Name, label, body)                              \
    struct Name {                                                          \
        static constexpr Kind kind = Kind::floating;                       \
        static constexpr const char* name = label;                         \
        template <class C>                                                 \
        __host__ __device__ C operator()(C x) const { body }               \
    };
TESSEL_FLOAT_UNARY(Sqrt, "sqrt", return math::sqrt(x);)
TESSEL_FLOAT_UNARY(Rsqrt, "rsqrt", return math::rsqrt(x);)
TESSEL_FLOAT_UNARY(Exp, "exp", return math::exp(x);)
TESSEL_FLOAT_UNARY(Exp2, "exp2", return math::exp2(x);)
TESSEL_FLOAT_UNARY(Log, "log", return math::log(x);)
TESSEL_FLOAT_UNARY(Log2, "log2", return math::log2(x);)
TESSEL_FLOAT_UNARY(Log1p, "log1p", return math::log1p(x);)
TESSEL_FLOAT_UNARY(Expm1, "expm1", return math::expm1(x);)
TESSEL_FLOAT_UNARY(Sin, "sin", return math::sin(x);)
TESSEL_FLOAT_UNARY(Cos, "cos", return math::cos(x);)
TESSEL_FLOAT_UNARY(Tanh, "tanh", return math::tanh(x);)
TESSEL_FLOAT_UNARY(Sigmoid, "sigmoid", return C(1) / (C(1) + math::exp(-x));)
TESSEL_FLOAT_UNARY(Silu, "silu", return x / (C(1) + math::exp(-x));)
// gelu, erf form: x/2 (1 + erf(x / sqrt 2)).
TESSEL_FLOAT_UNARY(Gelu, "gelu", return C(0.5) * x * (C(1) + math::erf(x * C(0.70710678118654752440)));)
// gelu, tanh approximation: x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
TESSEL_FLOAT_UNARY(GeluTanh, "gelu_tanh",
                   return C(0.5) * x * (C(1) + math::tanh(C(0.79788456080286535588) * (x + C(0.044715) * x * x * x)));)
// softplus = log(1 + e^x), written max(x, 0) + log1p(e^-|x|) so neither side overflows.
TESSEL_FLOAT_UNARY(Softplus, "softplus", return (x > C(0) ? x : C(0)) + math::log1p(math::exp(-math::fabs(x)));)
#undef TESSEL_FLOAT_UNARY
// max(x, 0) + slope * min(x, 0).
struct LeakyRelu {
    static constexpr Kind kind = Kind::floating;
    static constexpr const char* name = "leaky_relu";
    double slope = 0.01;
    template <class C>
    __host__ __device__ C operator()(C x) const { return x < C(0) ? C(slope) * x : x; }
};
struct IsNan {
    static constexpr Kind kind = Kind::predicate;
    static constexpr const char* name = "isnan";
    template <class C>
    __host__ __device__ bool operator()(C x) const { return is_nan(x); }
};
struct IsInf {
    static constexpr Kind kind = Kind::predicate;
    static constexpr const char* name = "isinf";
    template <class C>
    __host__ __device__ bool operator()(C x) const {
        if constexpr (std::is_floating_point_v<C>) return x == x && x - x != x - x;
        else return false;
    }
};
// Conversion to element type T (rounded once, saturating for fp8): an explicit cast node.
template <class T>
struct CastTo {
    static constexpr Kind kind = Kind::same;  // the node's type is T itself (see Unary)
    static constexpr const char* name = "cast";
    template <class C>
    __host__ __device__ C operator()(C x) const { return x; }
};

// The result element type of a unary operation of kind K on element type A.
template <Kind K, class A>
using unary_result_t = std::conditional_t<K == Kind::floating, float_result_t<A>,
                                          std::conditional_t<K == Kind::predicate || K == Kind::logical, bool, A>>;
// The type a unary operation of kind K computes in, for operand type A.
template <Kind K, class A>
using unary_operand_t =
    std::conditional_t<K == Kind::logical, bool, compute_t<std::conditional_t<K == Kind::predicate, A, unary_result_t<K, A>>>>;

// The result element type of a binary operation of kind K on element types A and B.
template <Kind K, class A, class B>
using binary_result_t = std::conditional_t<
    K == Kind::compare || K == Kind::logical, bool,
    std::conditional_t<K == Kind::divide, float_result_t<promote_t<A, B>>, promote_t<A, B>>>;
// The type a binary operation of kind K computes in.
template <Kind K, class A, class B>
using binary_operand_t = std::conditional_t<K == Kind::logical, bool,
                                            std::conditional_t<K == Kind::compare, compute_t<promote_t<A, B>>,
                                                               compute_t<binary_result_t<K, A, B>>>>;

}  // namespace tessel::ops
