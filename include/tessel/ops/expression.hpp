// Lazy element-wise expressions over tensors and scalars: `a * b + 1` builds a small tree of nodes
// and computes nothing; `(c = expr).run(stream)` (ops/assign.hpp) evaluates the whole tree in ONE
// kernel. Nodes are plain values: the host tree holds Tensor handles (keeping their memory alive),
// and run() lowers it to a device tree of raw pointers and strides that is the kernel's parameter.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>

#include "../core/backend.hpp"
#include "../tensor/tensor.hpp"
#include "functors.hpp"

namespace tessel {

// Base of every expression node. Being in namespace tessel, it lets argument-dependent lookup find
// tessel's operators and functions for any node. The tensor-reading members below exist only to turn
// a forgotten evaluation into a compiler error that says what to write.
template <class Derived>
struct Expression {
#define TESSEL_LAZY_MEMBER(member)                                                                              \
    template <class Lazy = Derived, class... A>                                                                 \
    void member(A&&...) const {                                                                                 \
        static_assert(sizeof(Lazy) == 0,                                                                        \
                      "tessel: an expression is lazy and holds no values; evaluate it first: "                 \
                      "tessel::evaluate(expr) or Tensor<T> t = expr; or write into a tensor: (out = expr).run(stream)"); \
    }
    TESSEL_LAZY_MEMBER(item)
    TESSEL_LAZY_MEMBER(to_vector)
    TESSEL_LAZY_MEMBER(to_host)
    TESSEL_LAZY_MEMBER(data)
    TESSEL_LAZY_MEMBER(contiguous)
    TESSEL_LAZY_MEMBER(to_string)
#undef TESSEL_LAZY_MEMBER
};

namespace ops {

// True for expression node types (not Tensor itself; a Tensor becomes a TensorRef leaf).
template <class T>
concept node = std::is_base_of_v<Expression<T>, T>;
template <class T>
inline constexpr bool is_tensor = false;
template <Element T>
inline constexpr bool is_tensor<Tensor<T>> = true;
// A C++ number usable in an expression (bool included).
template <class T>
concept number = std::is_arithmetic_v<T>;

// V values of T side by side: what a thread computes on the vectorised path.
template <class T, int V>
struct Array {
    T v[V];
    __host__ __device__ T& operator[](int k) { return v[k]; }
    __host__ __device__ const T& operator[](int k) const { return v[k]; }
};
// V values of T as one aligned memory access (16 bytes when V * sizeof(T) == 16).
template <class T, int V>
struct alignas(sizeof(T) * V) Packed {
    using value_type = T;
    static constexpr int lanes = V;
    T v[V];
};

// Where a kernel thread evaluates: element i of a contiguous iteration (operands have stride 0 or
// 1), the V elements from i, or the coordinates of a general strided iteration.
template <class I>
struct LinearIndex {
    I i;
};
template <class I, int V>
struct VectorIndex {
    I i;
};
// V elements of row `row` from column `col` of a rank-2 iteration whose operands all have column
// stride 0 or 1 (a row broadcast such as [M, N] + [N], or a column one such as [M, N] * [M, 1]).
template <class I, int V>
struct RowVectorIndex {
    I row, col;
};
// Element (row, col) of such a rank-2 iteration: the row's tail, one element at a time.
template <class I>
struct RowIndex {
    I row, col;
};
template <class I>
struct CoordIndex {
    const I* coord;  // coord[0..rank): the iteration's (coalesced) coordinates
    int rank;
};
template <class Idx>
inline constexpr bool is_vector_index = false;
template <class I, int V>
inline constexpr bool is_vector_index<VectorIndex<I, V>> = true;
template <class I, int V>
inline constexpr bool is_vector_index<RowVectorIndex<I, V>> = true;
template <class Idx>
inline constexpr int lanes = 1;
template <class I, int V>
inline constexpr int lanes<VectorIndex<I, V>> = V;
template <class I, int V>
inline constexpr int lanes<RowVectorIndex<I, V>> = V;

// Applies f lane by lane when evaluating a VectorIndex, or once otherwise.
template <class R, class Idx, class F, class... A>
__host__ __device__ auto apply_lanes(F&& f, const A&... a) {
    if constexpr (!is_vector_index<Idx>) {
        return R(f(a...));
    } else {
        Array<R, lanes<Idx>> r;
        for (int k = 0; k < lanes<Idx>; ++k) r[k] = R(f(a[k]...));
        return r;
    }
}

// ---- device tree ----------------------------------------------------------------------------------

// A tensor operand in a kernel: its first element and its strides over the iteration's dims.
template <class T>
struct DeviceLeaf {
    using dtype = T;
    using value_t = compute_t<T>;
    const T* data;
    std::int64_t stride[max_rank];

    template <class Idx>
    __host__ __device__ auto eval(const Idx& idx) const {
        if constexpr (!is_vector_index<Idx>) {
            return cast<value_t>(data[offset(idx)]);
        } else {
            constexpr int V = lanes<Idx>;
            Array<value_t, V> r;
            const T* first = data;  // the lanes' first element; along the lanes stride 0 or 1
            std::int64_t along = stride[0];
            if constexpr (requires { idx.row; }) {
                first += std::int64_t(idx.row) * stride[0];
                along = stride[1];
                if (along != 0) first += idx.col;
            } else if (along != 0) {
                first += idx.i;
            }
            if (along == 0) {
                const value_t x = cast<value_t>(*first);
                for (int k = 0; k < V; ++k) r[k] = x;
            } else {
                const Packed<T, V> p = *reinterpret_cast<const Packed<T, V>*>(first);
                for (int k = 0; k < V; ++k) r[k] = cast<value_t>(p.v[k]);
            }
            return r;
        }
    }

private:
    template <class I>
    __host__ __device__ std::int64_t offset(const LinearIndex<I>& idx) const { return std::int64_t(idx.i) * stride[0]; }
    template <class I>
    __host__ __device__ std::int64_t offset(const RowIndex<I>& idx) const {
        return std::int64_t(idx.row) * stride[0] + std::int64_t(idx.col) * stride[1];
    }
    template <class I>
    __host__ __device__ std::int64_t offset(const CoordIndex<I>& idx) const {
        std::int64_t o = 0;
        // Unrolled to max_rank with a guard: the caller's coordinates stay in registers.
TESSEL_PRAGMA_UNROLL
        for (int d = 0; d < max_rank; ++d)
            if (d < idx.rank) o += std::int64_t(idx.coord[d]) * stride[d];
        return o;
    }
};

// What run() knows about one tensor operand while planning: read by the checks, written back as
// strides over the coalesced iteration.
struct LeafPlan {
    const Storage* storage;
    Layout layout;          // the operand's own layout
    Shape strides;          // strides broadcast to the output's shape, then coalesced
    const void* data;       // first element
    std::size_t element_size;
    std::string_view dtype;
};

// ---- host tree ----------------------------------------------------------------------------------

// A tensor operand in an expression (holds the tensor, so its memory lives as long as the tree).
template <Element T>
struct TensorRef : Expression<TensorRef<T>> {
    using dtype = T;
    static constexpr std::size_t widest = sizeof(T);
    static constexpr int leaf_count = 1;
    Tensor<T> tensor;

    explicit TensorRef(Tensor<T> t) : tensor(std::move(t)) {
        require(tensor.defined(), "expression operand: an undefined (default-constructed) tensor");
    }
    template <class F>
    void visit_leaves(F&& f) const {
        f(tensor);
    }
    Shape shape() const { return tensor.shape(); }
    DeviceLeaf<T> lower(const LeafPlan*& next) const {
        DeviceLeaf<T> d{static_cast<const T*>(next->data), {}};
        for (int k = 0; k < next->strides.size(); ++k) d.stride[k] = next->strides[k];
        ++next;
        return d;
    }
};

// A C++ number in an expression, already converted to the type its operation computes in; `Tag` is
// its element type for promotion (weak_float / weak_int for C++ floating / integer numbers).
template <class Tag, class C>
struct Scalar : Expression<Scalar<Tag, C>> {
    using dtype = Tag;
    using value_t = C;
    static constexpr std::size_t widest = 1;
    static constexpr int leaf_count = 0;
    C value;

    explicit Scalar(C v) : value(v) {}
    template <class F>
    void visit_leaves(F&&) const {}
    Shape shape() const { return {}; }
    Scalar lower(const LeafPlan*&) const { return *this; }
    template <class Idx>
    __host__ __device__ auto eval(const Idx&) const {
        if constexpr (!is_vector_index<Idx>) {
            return value;
        } else {
            Array<C, lanes<Idx>> r;
            for (int k = 0; k < lanes<Idx>; ++k) r[k] = value;
            return r;
        }
    }
};

namespace detail {
inline Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
    const int n = std::max(a.size(), b.size());
    std::array<std::int64_t, max_rank> out{};
    for (int k = 0; k < n; ++k) {
        const int ia = a.size() - n + k, ib = b.size() - n + k;
        const std::int64_t sa = ia >= 0 ? a[ia] : 1, sb = ib >= 0 ? b[ib] : 1;
        require(sa == sb || sa == 1 || sb == 1, "operator ", op, ": shapes ", a, " and ", b,
                " do not broadcast (dim ", k - n, ": ", sa, " vs ", sb, ")");
        out[std::size_t(k)] = sa == 1 ? sb : sa;
    }
    return Shape(std::span<const std::int64_t>(out.data(), std::size_t(n)));
}
}  // namespace detail

// op(child).
template <class Op, class E>
struct Unary : Expression<Unary<Op, E>> {
    using dtype = unary_result_t<Op::kind, typename E::dtype>;
    using operand_t = unary_operand_t<Op::kind, typename E::dtype>;
    static constexpr std::size_t widest = E::widest;
    static constexpr int leaf_count = E::leaf_count;
    Op op;
    E child;

    Unary(Op o, E e) : op(o), child(std::move(e)) {}
    template <class F>
    void visit_leaves(F&& f) const {
        child.visit_leaves(f);
    }
    Shape shape() const { return child.shape(); }
    auto lower(const LeafPlan*& next) const {
        auto c = child.lower(next);
        return Unary<Op, decltype(c)>(op, c);
    }
    template <class Idx>
    __host__ __device__ auto eval(const Idx& idx) const {
        const auto a = child.eval(idx);
        return apply_lanes<compute_t<dtype>, Idx>([this](auto x) { return op(cast<operand_t>(x)); }, a);
    }
};

// cast_to<T>(child): rounds to T (saturating for fp8), then computes on in T's compute type.
template <class T, class E>
struct Unary<CastTo<T>, E> : Expression<Unary<CastTo<T>, E>> {
    using dtype = T;
    static constexpr std::size_t widest = std::max(E::widest, sizeof(T));
    static constexpr int leaf_count = E::leaf_count;
    CastTo<T> op;
    E child;

    Unary(CastTo<T> o, E e) : op(o), child(std::move(e)) {}
    template <class F>
    void visit_leaves(F&& f) const {
        child.visit_leaves(f);
    }
    Shape shape() const { return child.shape(); }
    auto lower(const LeafPlan*& next) const {
        auto c = child.lower(next);
        return Unary<CastTo<T>, decltype(c)>(op, c);
    }
    template <class Idx>
    __host__ __device__ auto eval(const Idx& idx) const {
        const auto a = child.eval(idx);
        return apply_lanes<compute_t<T>, Idx>([](auto x) { return cast<compute_t<T>>(cast<T>(x)); }, a);
    }
};

// An operand's value (in its own compute type) as an operation of common element type `Common`
// takes it, in `Compute`. Where Common is a reduced float (computed in float) and the operand's
// element type `Own` is another type, the value is first rounded to Common, as torch converts every
// input to the common dtype: an int32 257 meets a bf16 tensor as 256. A C++ number (a weak type)
// joins unrounded, in the compute type, as torch's opmath scalars do.
template <class Compute, class Common, class Own, class X>
__host__ __device__ Compute as_operand(X x) {
    if constexpr (!std::is_same_v<compute_t<Common>, Common> && !std::is_same_v<Own, Common> && !is_weak_type<Own> &&
                  !std::is_same_v<Compute, bool>)
        return cast<Compute>(cast<Common>(x));
    else return cast<Compute>(x);
}

// op(left, right), broadcasting.
template <class Op, class L, class R>
struct Binary : Expression<Binary<Op, L, R>> {
    using dtype = binary_result_t<Op::kind, typename L::dtype, typename R::dtype>;
    using operand_t = binary_operand_t<Op::kind, typename L::dtype, typename R::dtype>;
    static constexpr std::size_t widest = std::max(L::widest, R::widest);
    static constexpr int leaf_count = L::leaf_count + R::leaf_count;
    Op op;
    L left;
    R right;

    Binary(Op o, L l, R r) : op(o), left(std::move(l)), right(std::move(r)) {}
    template <class F>
    void visit_leaves(F&& f) const {
        left.visit_leaves(f);
        right.visit_leaves(f);
    }
    Shape shape() const { return detail::broadcast_shapes(left.shape(), right.shape(), Op::name); }
    auto lower(const LeafPlan*& next) const {
        auto l = left.lower(next);
        auto r = right.lower(next);
        return Binary<Op, decltype(l), decltype(r)>(op, l, r);
    }
    template <class Idx>
    __host__ __device__ auto eval(const Idx& idx) const {
        const auto a = left.eval(idx);
        const auto b = right.eval(idx);
        using common_t = promote_t<typename L::dtype, typename R::dtype>;
        return apply_lanes<compute_t<dtype>, Idx>(
            [this](auto x, auto y) {
                return op(as_operand<operand_t, common_t, typename L::dtype>(x),
                          as_operand<operand_t, common_t, typename R::dtype>(y));
            },
            a, b);
    }
};

// where(cond, a, b): a where cond is true, else b (both are evaluated).
template <class Cond, class A, class B>
struct Where : Expression<Where<Cond, A, B>> {
    using dtype = promote_t<typename A::dtype, typename B::dtype>;
    using value_t = compute_t<dtype>;
    static constexpr std::size_t widest = std::max({Cond::widest, A::widest, B::widest});
    static constexpr int leaf_count = Cond::leaf_count + A::leaf_count + B::leaf_count;
    Cond cond;
    A a;
    B b;

    Where(Cond c, A x, B y) : cond(std::move(c)), a(std::move(x)), b(std::move(y)) {}
    template <class F>
    void visit_leaves(F&& f) const {
        cond.visit_leaves(f);
        a.visit_leaves(f);
        b.visit_leaves(f);
    }
    Shape shape() const {
        return detail::broadcast_shapes(detail::broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
    }
    auto lower(const LeafPlan*& next) const {
        auto c = cond.lower(next);
        auto x = a.lower(next);
        auto y = b.lower(next);
        return Where<decltype(c), decltype(x), decltype(y)>(c, x, y);
    }
    template <class Idx>
    __host__ __device__ auto eval(const Idx& idx) const {
        const auto c = cond.eval(idx);
        const auto x = a.eval(idx);
        const auto y = b.eval(idx);
        return apply_lanes<value_t, Idx>(
            [](auto k, auto p, auto q) {
                return cast<bool>(k) ? as_operand<value_t, dtype, typename A::dtype>(p)
                                     : as_operand<value_t, dtype, typename B::dtype>(q);
            },
            c, x, y);
    }
};

// ---- operands -----------------------------------------------------------------------------------

// The element type an operand contributes to promotion.
template <class X>
struct operand_dtype {
    using type = typename X::dtype;
};
template <Element T>
struct operand_dtype<Tensor<T>> {
    using type = T;
};
template <number X>
struct operand_dtype<X> {
    using type = std::conditional_t<std::is_same_v<X, bool>, bool, std::conditional_t<std::is_floating_point_v<X>, weak_float, weak_int>>;
};
template <class X>
using operand_dtype_t = typename operand_dtype<std::remove_cvref_t<X>>::type;

// An operand as a node; a number becomes a Scalar in the compute type of its operation with `Other`.
template <class Other, class X>
auto as_node(const X& x) {
    if constexpr (node<X>) return x;
    else if constexpr (is_tensor<X>) return TensorRef<typename X::value_type>(x);
    else {
        using tag = operand_dtype_t<X>;
        using C = compute_t<std::conditional_t<std::is_same_v<tag, bool>, bool, promote_t<Other, tag>>>;
        return Scalar<tag, C>(static_cast<C>(x));
    }
}

// Something an expression operator accepts: a node, a Tensor or a number.
template <class X>
concept operand = node<X> || is_tensor<X> || number<X>;
// Two operands of which at least one is a node or a Tensor (number op number stays C++'s).
template <class A, class B>
concept operands = operand<A> && operand<B> && (!number<A> || !number<B>);

// A comparison's operand as a node, the number exact on the operand's scale:
// - against a bf16, half or fp8 operand, a number within the type's finite range is first rounded
//   to the type, as torch does (x == 0.1 holds where x holds bf16(0.1)); one beyond it is kept as
//   it is (rounded, 1000 would be e4m3's 448 and x < 1000 false for x = 448, or half's inf);
// - against an integer or bool operand, an integer number is compared in int64, so it cannot wrap
//   (u8 > -1 is true everywhere; torch converts -1 to 255 first).
template <class Other, class X>
auto comparison_operand(const X& x) {
    if constexpr (number<X> && !std::is_same_v<X, bool>) {
        using tag = operand_dtype_t<X>;
        using P = promote_t<Other, tag>;
        if constexpr (is_reduced_float<P>) {
            const double v = double(x), top = double(convert<float>(::tessel::detail::largest_finite<P>()));
            return Scalar<tag, compute_t<P>>(std::fabs(v) <= top ? cast<compute_t<P>>(cast<P>(v)) : compute_t<P>(v));
        } else if constexpr (std::is_integral_v<X> && (is_int_type<Other> || is_bool_type<Other>) && !std::is_same_v<Other, weak_int>) {
            require(std::in_range<std::int64_t>(+x), "comparison: the number ", +x, " is beyond int64");
            return Scalar<std::int64_t, std::int64_t>(std::int64_t(x));
        } else {
            return as_node<Other>(x);
        }
    } else {
        return as_node<Other>(x);
    }
}

// A division's operand; a number in the division's compute type (float for integer operands), so
// x_i8 / 128 divides by 128 as torch's true division does, not by the int8 128 would wrap to.
template <class Other, class X>
auto division_operand(const X& x) {
    if constexpr (number<X>) {
        using tag = operand_dtype_t<X>;
        using C = binary_operand_t<Kind::divide, Other, tag>;
        return Scalar<tag, C>(static_cast<C>(x));
    } else {
        return as_node<Other>(x);
    }
}

// Whether a number of type X, converted into the integer result type R of its operation, must be
// checked against R's range (an integer number with an integer result: converting would wrap).
template <class R, class X>
inline constexpr bool integer_number_into = number<X> && std::is_integral_v<X> && !std::is_same_v<X, bool> && std::is_integral_v<R> &&
                                            !std::is_same_v<R, bool>;
// A number bound of an integer clamp (lower: of maximum(x, b)), brought into the result type R:
// outside it, a bound would wrap when converted (clamp(u8, -5, 10) would clamp every element to 10,
// maximum(u8, -1) give 255), while the nearest value in range bounds exactly as the number itself
// would. A lower bound above the range (or an upper one below it) has no such value: an error, as
// in torch. `op` and `what` name it in the message ("clamp", "lower bound").
template <class R, class Bound>
auto clamp_bound(const Bound& b, bool lower, const char* op, const char* what) {
    if constexpr (!integer_number_into<R, Bound>) {
        return b;
    } else {
        using L = std::numeric_limits<R>;
        const auto v = +b;  // a character type widens to int (the std::cmp_* functions refuse char types)
        require(lower ? std::cmp_less_equal(v, L::max()) : std::cmp_greater_equal(v, L::min()), op, ": the ", what, " ", v, " is ",
                lower ? "above" : "below", " every value of ", dtype_traits<R>::name, " [", +L::min(), ", ", +L::max(),
                "]; cast the operand to a wider type first (cast_to<T>)");
        return std::cmp_less(v, L::min()) ? L::min() : std::cmp_greater(v, L::max()) ? L::max() : R(v);
    }
}
// An operand of maximum / minimum: an integer number bounds the integer operand exactly (above).
template <class Op, class Other, class X>
auto extremum_operand(const X& x) {
    if constexpr (number<X>) {
        using R = promote_t<Other, operand_dtype_t<X>>;
        constexpr bool is_max = std::is_same_v<Op, Maximum>;
        return as_node<Other>(clamp_bound<R>(x, is_max, is_max ? "maximum" : "minimum", "number"));
    } else {
        return as_node<Other>(x);
    }
}

template <class Op, class A, class B>
auto make_binary(Op op, const A& a, const B& b) {
    static_assert(!(std::is_same_v<Op, Sub> && std::is_same_v<operand_dtype_t<A>, bool> && std::is_same_v<operand_dtype_t<B>, bool>),
                  "bool - bool is not defined (as in torch and NumPy): use a != b (exclusive or) for masks, or cast_to<int> first");
    if constexpr (Op::kind == Kind::compare) {
        auto l = comparison_operand<operand_dtype_t<B>>(a);
        auto r = comparison_operand<operand_dtype_t<A>>(b);
        return Binary<Op, decltype(l), decltype(r)>(op, std::move(l), std::move(r));
    } else if constexpr (Op::kind == Kind::divide) {
        auto l = division_operand<operand_dtype_t<B>>(a);
        auto r = division_operand<operand_dtype_t<A>>(b);
        return Binary<Op, decltype(l), decltype(r)>(op, std::move(l), std::move(r));
    } else if constexpr (std::is_same_v<Op, Maximum> || std::is_same_v<Op, Minimum>) {
        auto l = extremum_operand<Op, operand_dtype_t<B>>(a);
        auto r = extremum_operand<Op, operand_dtype_t<A>>(b);
        return Binary<Op, decltype(l), decltype(r)>(op, std::move(l), std::move(r));
    } else {
        auto l = as_node<operand_dtype_t<B>>(a);
        auto r = as_node<operand_dtype_t<A>>(b);
        return Binary<Op, decltype(l), decltype(r)>(op, std::move(l), std::move(r));
    }
}

template <class Op, class A>
auto make_unary(Op op, const A& a) {
    static_assert(!(std::is_same_v<Op, Negate> && std::is_same_v<operand_dtype_t<A>, bool>),
                  "-x of a bool x is not defined (as in torch and NumPy): use !x to invert a mask, or cast_to<int>(x) first");
    auto x = as_node<void>(a);
    return Unary<Op, decltype(x)>(op, std::move(x));
}

}  // namespace ops

// ---- operators and functions (namespace tessel, found by argument-dependent lookup) -------------

#define TESSEL_BINARY_OPERATOR(op, Op)                           \
    template <class A, class B>                                  \
        requires ops::operands<A, B>                             \
    auto operator op(const A& a, const B& b) {                   \
        return ops::make_binary(ops::Op{}, a, b);                \
    }
TESSEL_BINARY_OPERATOR(+, Add)
TESSEL_BINARY_OPERATOR(-, Sub)
TESSEL_BINARY_OPERATOR(*, Mul)
TESSEL_BINARY_OPERATOR(/, Div)
TESSEL_BINARY_OPERATOR(%, Mod)
TESSEL_BINARY_OPERATOR(==, Equal)
TESSEL_BINARY_OPERATOR(!=, NotEqual)
TESSEL_BINARY_OPERATOR(<, Less)
TESSEL_BINARY_OPERATOR(<=, LessEqual)
TESSEL_BINARY_OPERATOR(>, Greater)
TESSEL_BINARY_OPERATOR(>=, GreaterEqual)
TESSEL_BINARY_OPERATOR(&&, LogicalAnd)
TESSEL_BINARY_OPERATOR(||, LogicalOr)
#undef TESSEL_BINARY_OPERATOR

#define TESSEL_BINARY_FUNCTION(name, Op)                         \
    template <class A, class B>                                  \
        requires ops::operands<A, B>                             \
    auto name(const A& a, const B& b) {                          \
        return ops::make_binary(ops::Op{}, a, b);                \
    }
TESSEL_BINARY_FUNCTION(maximum, Maximum)
TESSEL_BINARY_FUNCTION(minimum, Minimum)
TESSEL_BINARY_FUNCTION(pow, Pow)
TESSEL_BINARY_FUNCTION(logical_and, LogicalAnd)
TESSEL_BINARY_FUNCTION(logical_or, LogicalOr)
#undef TESSEL_BINARY_FUNCTION

template <class A>
    requires(ops::node<A> || ops::is_tensor<A>)
auto operator-(const A& a) {
    return ops::make_unary(ops::Negate{}, a);
}
template <class A>
    requires(ops::node<A> || ops::is_tensor<A>)
auto operator!(const A& a) {
    return ops::make_unary(ops::LogicalNot{}, a);
}

#define TESSEL_UNARY_FUNCTION(name, Op)                          \
    template <class A>                                           \
        requires(ops::node<A> || ops::is_tensor<A>)              \
    auto name(const A& a) {                                      \
        return ops::make_unary(ops::Op{}, a);                    \
    }
TESSEL_UNARY_FUNCTION(logical_not, LogicalNot)
TESSEL_UNARY_FUNCTION(abs, Abs)
TESSEL_UNARY_FUNCTION(sqrt, Sqrt)
TESSEL_UNARY_FUNCTION(rsqrt, Rsqrt)
TESSEL_UNARY_FUNCTION(exp, Exp)
TESSEL_UNARY_FUNCTION(exp2, Exp2)
TESSEL_UNARY_FUNCTION(log, Log)
TESSEL_UNARY_FUNCTION(log2, Log2)
TESSEL_UNARY_FUNCTION(log1p, Log1p)
TESSEL_UNARY_FUNCTION(expm1, Expm1)
TESSEL_UNARY_FUNCTION(sin, Sin)
TESSEL_UNARY_FUNCTION(cos, Cos)
TESSEL_UNARY_FUNCTION(tanh, Tanh)
TESSEL_UNARY_FUNCTION(sigmoid, Sigmoid)
TESSEL_UNARY_FUNCTION(relu, Relu)
TESSEL_UNARY_FUNCTION(gelu, Gelu)
TESSEL_UNARY_FUNCTION(gelu_tanh, GeluTanh)
TESSEL_UNARY_FUNCTION(silu, Silu)
TESSEL_UNARY_FUNCTION(softplus, Softplus)
TESSEL_UNARY_FUNCTION(floor, Floor)
TESSEL_UNARY_FUNCTION(ceil, Ceil)
TESSEL_UNARY_FUNCTION(round, Round)
TESSEL_UNARY_FUNCTION(isnan, IsNan)
TESSEL_UNARY_FUNCTION(isinf, IsInf)
#undef TESSEL_UNARY_FUNCTION

// max(x, 0) + slope * min(x, 0).
template <class A>
    requires(ops::node<A> || ops::is_tensor<A>)
auto leaky_relu(const A& a, double slope = 0.01) {
    return ops::make_unary(ops::LeakyRelu{slope}, a);
}
// The values as element type T (round to nearest even; fp8 saturates), inside an expression.
template <Element T, class A>
    requires(ops::node<A> || ops::is_tensor<A>)
auto cast_to(const A& a) {
    return ops::make_unary(ops::CastTo<T>{}, a);
}
// cond ? a : b element-wise, broadcasting all three.
template <class Cond, class A, class B>
    requires(ops::node<Cond> || ops::is_tensor<Cond>) && ops::operand<A> && ops::operand<B> &&
            (!ops::number<A> || !ops::number<B>)
auto where(const Cond& cond, const A& a, const B& b) {
    // A number the result's integer type cannot hold would wrap (torch refuses most such numbers too).
    using R = ops::promote_t<ops::operand_dtype_t<A>, ops::operand_dtype_t<B>>;
    auto check = [](const auto& v) {
        if constexpr (ops::integer_number_into<R, std::remove_cvref_t<decltype(v)>>)
            require(std::in_range<R>(+v), "where: the value ", +v, " does not fit the result's type ", dtype_traits<R>::name,
                    " (the tensor operand's type); cast the tensor operand first (cast_to<T>), or pass a value in range");
    };
    check(a);
    check(b);
    auto c = ops::as_node<void>(cond);
    auto x = ops::as_node<ops::operand_dtype_t<B>>(a);
    auto y = ops::as_node<ops::operand_dtype_t<A>>(b);
    return ops::Where<decltype(c), decltype(x), decltype(y)>(std::move(c), std::move(x), std::move(y));
}
// cond ? a : b with two numbers: a tensor's worth of torch's default types (torch.where(mask, 1.0,
// 0.0) is float32; two integers give int64, two bools bool), so the result can be evaluated alone.
template <class Cond, ops::number A, ops::number B>
    requires(ops::node<Cond> || ops::is_tensor<Cond>)
auto where(const Cond& cond, A a, B b) {
    using W = ops::promote_t<ops::operand_dtype_t<A>, ops::operand_dtype_t<B>>;
    using R = std::conditional_t<std::is_same_v<W, ops::weak_float>, float, std::conditional_t<std::is_same_v<W, ops::weak_int>, std::int64_t, W>>;
    auto scalar = [](auto v) {
        if constexpr (ops::integer_number_into<R, decltype(v)>)
            require(std::in_range<R>(+v), "where: the value ", +v, " does not fit int64, the type of where with two integer numbers");
        return ops::Scalar<R, ops::compute_t<R>>(static_cast<ops::compute_t<R>>(v));
    };
    return where(cond, scalar(a), scalar(b));
}
namespace ops {
// The type clamp(x, lo, hi) computes and returns in: x's promoted with both bounds' (a floating or
// wider bound widens it, as in torch: clamp(u8, -5.5, -1) is float32 -1).
template <class X, class Lo, class Hi>
using clamp_result_t = promote_t<promote_t<operand_dtype_t<X>, operand_dtype_t<Lo>>, operand_dtype_t<Hi>>;
}  // namespace ops

// min(max(x, lo), hi), in x's type promoted with the bounds' (x converted first when they widen it,
// so that neither step wraps or rounds in x's narrower type).
template <class X, class Lo, class Hi>
    requires(ops::node<X> || ops::is_tensor<X>) && ops::operand<Lo> && ops::operand<Hi>
auto clamp(const X& x, const Lo& lo, const Hi& hi) {
    using R = ops::clamp_result_t<X, Lo, Hi>;
    if constexpr (std::is_same_v<R, ops::operand_dtype_t<X>>)
        return minimum(maximum(x, ops::clamp_bound<R>(lo, true, "clamp", "lower bound")), ops::clamp_bound<R>(hi, false, "clamp", "upper bound"));
    else
        return minimum(maximum(cast_to<R>(x), ops::clamp_bound<R>(lo, true, "clamp", "lower bound")), ops::clamp_bound<R>(hi, false, "clamp", "upper bound"));
}

}  // namespace tessel
