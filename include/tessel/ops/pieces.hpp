// Iterations too large for 32-bit index arithmetic, cut into launches ("pieces") that each fit.
// The element-wise kernels index with 32 bits (multiply-shift divisors exact below 2^31, half the
// registers and instructions of 64-bit ones). An iteration of more elements runs as several
// launches of the same kernels, each over a box of the iteration with every operand's pointer
// moved to the box's first element, instead of a second, 64-bit-indexed set of kernels: that set
// doubled the kernels every expression compiled (a third of a test file's compile time) and ran
// only on tensors of 2^31 elements, which no sim test can afford.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <type_traits>

#include "../core/error.hpp"
#include "../tensor/layout.hpp"

namespace tessel::ops::detail {

// The most elements a piece holds: below 2^31, and a multiple of 16 so that a piece of a flat
// iteration starts every operand on its vector alignment (16 bytes over elements of 1 byte or more).
inline constexpr std::int64_t max_piece_elements = (std::int64_t(1) << 31) - 16;

// The limit the launches use: max_piece_elements, unless a test lowers it (PieceLimitForTesting)
// to run the piece loops on tensors the sim can afford.
inline std::atomic<std::int64_t> piece_limit{max_piece_elements};

// Sets the piece limit for its lifetime (a test hook; not thread-safe against running launches).
class PieceLimitForTesting {
public:
    explicit PieceLimitForTesting(std::int64_t elements) : saved_(piece_limit.load()) {
        require(elements >= 16 && elements <= max_piece_elements, "PieceLimitForTesting: ", elements,
                " elements; the piece limit must be in [16, 2^31 - 16] (a piece of a flat iteration is a multiple of 16)");
        piece_limit.store(elements);
    }
    ~PieceLimitForTesting() { piece_limit.store(saved_); }
    PieceLimitForTesting(const PieceLimitForTesting&) = delete;
    PieceLimitForTesting& operator=(const PieceLimitForTesting&) = delete;

private:
    std::int64_t saved_;
};

// A box of an iteration: its first coordinate and its extent along each dim.
struct Piece {
    Shape origin;
    Shape shape;
    std::int64_t numel = 1;
};

// Offset, in elements, of coordinate `origin` in a layout of `strides`.
inline std::int64_t offset_of(const Shape& origin, const Shape& strides) {
    std::int64_t at = 0;
    for (int d = 0; d < origin.size(); ++d) at += origin[d] * strides[d];
    return at;
}

// A callable that takes a Piece, held by reference for the length of a call: for_each_piece is then
// one function instead of one per caller (each expression type's Assignment::run had its own, 850
// bytes of code in the sim). The callable must outlive the call it is passed to.
class PieceVisitor {
public:
    template <class F>
        requires(!std::is_same_v<std::remove_cvref_t<F>, PieceVisitor> && std::is_invocable_v<F&, const Piece&>)
    PieceVisitor(F&& f)  // NOLINT(google-explicit-constructor): a lambda converts where for_each_piece is called
        : object_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
          call_([](void* object, const Piece& p) { (*static_cast<std::remove_reference_t<F>*>(object))(p); }) {}
    void operator()(const Piece& p) const { call_(object_, p); }

private:
    void* object_;
    void (*call_)(void*, const Piece&);
};

// Calls f(piece) for boxes that cover `shape` in row-major order, each of at most `limit` elements
// (limit >= 16): the whole iteration when it fits; otherwise the dims outside the first dim d whose
// inner dims fit in `limit` are taken one index at a time, and dim d in runs of as many whole inner
// blocks as fit (a multiple of 16 indices when d is the last dim, keeping vector alignment).
inline void for_each_piece(const Shape& shape, std::int64_t limit, PieceVisitor f) {
    const int rank = shape.size();
    std::int64_t n = 1;
    for (int d = 0; d < rank; ++d) n *= shape[d];
    if (n == 0) return;
    Piece p;
    for (int d = 0; d < rank; ++d) p.origin.push_back(0);
    if (n <= limit) {
        p.shape = shape;
        p.numel = n;
        f(p);
        return;
    }
    int split = rank - 1;
    std::int64_t inner = 1;  // elements of one index of dim `split`
    while (split > 0 && inner * shape[split] <= limit) inner *= shape[split--];
    std::int64_t run = limit / inner;
    if (split == rank - 1) run = run / 16 * 16;
    p.shape = shape;
    for (int d = 0; d < split; ++d) p.shape[d] = 1;
    while (true) {
        for (std::int64_t at = 0; at < shape[split]; at += run) {
            p.origin[split] = at;
            p.shape[split] = std::min(run, shape[split] - at);
            p.numel = p.shape[split] * inner;
            f(p);
        }
        p.origin[split] = 0;
        int d = split - 1;  // the next index of the outer dims, last fastest
        while (d >= 0 && ++p.origin[d] == shape[d]) p.origin[d--] = 0;
        if (d < 0) return;
    }
}

}  // namespace tessel::ops::detail
