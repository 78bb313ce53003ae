// tessel::Shape and tessel::Layout: every view operation, exhaustively on small shapes, checked
// against what it must mean for the storage offsets of the elements. The references here enumerate
// elements with a plain N-d counter and never call the code under test.
#include <tessel/tensor/layout.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

using tessel::Layout;
using tessel::Shape;
using Offsets = std::vector<std::int64_t>;   // storage offsets of a layout's elements, row-major
using Index = std::vector<std::int64_t>;

namespace {

std::int64_t product(const Shape& shape) {
    std::int64_t n = 1;
    for (auto s : shape) n *= s;
    return n;
}

// Row-major strides built by hand (size-0 dims count as 1, as PyTorch does).
Shape row_major_strides(const Shape& shape) {
    Shape strides = shape;
    std::int64_t next = 1;
    for (int d = shape.size() - 1; d >= 0; --d) strides[d] = next, next *= std::max<std::int64_t>(shape[d], 1);
    return strides;
}

// The storage offset of every element of l, in row-major order of its shape.
Offsets materialise(const Layout& l) {
    const int rank = l.shape.size();
    for (auto s : l.shape)
        if (s == 0) return {};
    Offsets out;
    Index i(std::size_t(rank), 0);
    for (;;) {
        std::int64_t at = l.offset;
        for (int d = 0; d < rank; ++d) at += i[std::size_t(d)] * l.strides[d];
        out.push_back(at);
        int d = rank - 1;
        while (d >= 0 && ++i[std::size_t(d)] == l.shape[d]) i[std::size_t(d)] = 0, --d;
        if (d < 0) return out;
    }
}

std::int64_t ravel(const Index& i, const Shape& shape) {
    std::int64_t at = 0;
    for (int d = 0; d < shape.size(); ++d) at = at * shape[d] + i[std::size_t(d)];
    return at;
}

Index unravel(std::int64_t linear, const Shape& shape) {
    Index i(std::size_t(shape.size()));
    for (int d = shape.size() - 1; d >= 0; --d) i[std::size_t(d)] = linear % shape[d], linear /= shape[d];
    return i;
}

// What an operation must produce: element r of a result of shape result_shape is the element
// source_index(r) of src.
Offsets expected(const Shape& result_shape, const Layout& src, const std::function<Index(const Index&)>& source_index) {
    const Offsets from = materialise(src);
    Offsets out;
    for (std::int64_t k = 0; k < product(result_shape); ++k)
        out.push_back(from[std::size_t(ravel(source_index(unravel(k, result_shape)), src.shape))]);
    return out;
}

// Every shape of rank min_rank..max_rank whose sizes are drawn from sizes.
std::vector<Shape> shapes(int min_rank, int max_rank, const std::vector<std::int64_t>& sizes) {
    std::vector<Shape> out;
    std::vector<Shape> level{Shape{}};
    for (int r = 0; r <= max_rank; ++r) {
        if (r >= min_rank) out.insert(out.end(), level.begin(), level.end());
        std::vector<Shape> next;
        for (const auto& s : level)
            for (auto v : sizes) next.push_back(s), next.back().push_back(v);
        level = std::move(next);
    }
    return out;
}

// The shapes of rank 0..3 with sizes 0..3, and some random rank-4 and rank-5 shapes.
const std::vector<Shape>& test_shapes() {
    static const std::vector<Shape> all = [] {
        auto out = shapes(0, 3, {0, 1, 2, 3});
        std::mt19937 rng(20240601);
        for (int k = 0; k < 12; ++k) {
            Shape s;
            const int rank = 4 + k % 2;
            for (int d = 0; d < rank; ++d) s.push_back(std::uniform_int_distribution<int>(k == 0 ? 0 : 1, 3)(rng));
            out.push_back(s);
        }
        return out;
    }();
    return all;
}

// Layouts of one shape with different kinds of strides, all made by hand: row-major, column-major
// with gaps and an offset, and one with a broadcast (stride-0) first dim.
std::vector<Layout> sources(const Shape& shape) {
    std::vector<Layout> out{Layout{shape, row_major_strides(shape), 0}};
    Shape gapped = shape;
    std::int64_t next = 2;
    for (int d = 0; d < shape.size(); ++d) gapped[d] = next, next *= std::max<std::int64_t>(shape[d], 1) + 1;
    out.push_back(Layout{shape, gapped, 3});
    if (!shape.empty()) {
        Layout broadcast{shape, row_major_strides(shape), 1};
        broadcast.strides[0] = 0;
        out.push_back(broadcast);
    }
    return out;
}

// The dims 0..rank-1 in order: the identity permutation.
std::vector<int> identity(int rank) {
    std::vector<int> dims(static_cast<std::size_t>(rank));
    std::iota(dims.begin(), dims.end(), 0);
    return dims;
}

// The message of the InvalidArgument that f throws; fails the test if it throws nothing or another type.
std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const tessel::InvalidArgument& e) {
        return e.what();
    }
    FAIL("expected tessel::InvalidArgument");
    return {};
}

Shape erased(Shape s, int d) { return s.erase(d), s; }
Shape inserted(Shape s, int d, std::int64_t v) { return s.insert(d, v), s; }
Index inserted(Index i, int d, std::int64_t v) { return i.insert(i.begin() + d, v), i; }

// The brute-force truth for view: a layout of shape target reproducing offs in row-major order, if
// one exists. Strides are forced by the offsets at unit steps (any stride works for a size-1 dim,
// and anything works when there are no elements), so checking that one candidate decides it.
std::optional<Layout> reference_view(const Offsets& offs, const Shape& target) {
    if (offs.empty()) return Layout{target, row_major_strides(target), 0};
    Layout candidate{target, target, offs[0]};
    std::int64_t step = 1;
    for (int d = target.size() - 1; d >= 0; --d) {
        candidate.strides[d] = target[d] > 1 ? offs[std::size_t(step)] - offs[0] : 0;
        step *= target[d];
    }
    if (materialise(candidate) != offs) return std::nullopt;
    return candidate;
}

// Layouts to view: for each shape, the sources above, every permutation of it, slices of it and
// slices of it with its dims reversed.
std::vector<Layout> view_sources() {
    std::vector<Layout> out;
    for (const auto& shape : shapes(0, 3, {0, 1, 2, 3})) {
        const auto base = sources(shape);
        out.insert(out.end(), base.begin(), base.end());
        auto perm = identity(shape.size());
        while (std::next_permutation(perm.begin(), perm.end())) out.push_back(base[0].permute(perm));
        const auto flipped = base[0].permute(std::vector<int>(perm.rbegin(), perm.rend()));
        for (int d = 0; d < shape.size(); ++d) {
            const auto s = shape[d], f = flipped.shape[d];
            if (s >= 1) out.push_back(base[0].slice(d, 1, s)), out.push_back(base[0].slice(d, 0, s, 2));
            if (s >= 2) out.push_back(base[0].slice(d, 0, 1)), out.push_back(base[0].slice(d, 1, s, 2));
            if (f >= 2) out.push_back(flipped.slice(d, 1, f)), out.push_back(flipped.slice(d, 0, f, 2));
        }
    }
    return out;
}

}  // namespace

TEST_CASE("Shape is a small vector that prints and compares", "[layout]") {
    Shape s{2, 3, 4};
    CHECK(s.size() == 3);
    CHECK(s.to_string() == "[2, 3, 4]");
    CHECK(Shape{}.to_string() == "[]");
    CHECK(Shape{}.empty());
    s.insert(1, 7);
    CHECK(s == Shape{2, 7, 3, 4});
    s.erase(0);
    s.push_back(5);
    CHECK(s == Shape{7, 3, 4, 5});
    CHECK(s != Shape{7, 3, 4});
    const std::vector<std::int64_t> v{1, 2};
    CHECK(Shape(std::span<const std::int64_t>(v)) == Shape{1, 2});
    CHECK(std::accumulate(s.begin(), s.end(), std::int64_t{0}) == 19);

    const std::vector<std::int64_t> nine(9, 1);
    CHECK_THAT(error_of([&] { Shape{std::span<const std::int64_t>(nine)}; }), Catch::Contains("at most 8 dims, not 9"));
    Shape eight{1, 1, 1, 1, 1, 1, 1, 1};
    CHECK_THAT(error_of([&] { eight.push_back(1); }), Catch::Contains("not 9"));
    CHECK_THAT(error_of([&] { eight.insert(0, 1); }), Catch::Contains("not 9"));
    CHECK(eight.size() == 8);
}

TEST_CASE("contiguous layouts are row-major, count their elements and span their storage", "[layout]") {
    for (const auto& shape : test_shapes()) {
        INFO("shape " << shape);
        const auto l = Layout::contiguous(shape);
        const auto n = product(shape);
        Offsets iota(static_cast<std::size_t>(n));
        std::iota(iota.begin(), iota.end(), 0);
        CHECK(l.shape == shape);
        CHECK(l.strides == row_major_strides(shape));
        CHECK(l.offset == 0);
        CHECK(l.rank() == shape.size());
        CHECK(l.numel() == n);
        CHECK(materialise(l) == iota);
        CHECK(l.is_contiguous());
        CHECK(l.fits_in(n));
        if (n == 0) CHECK_FALSE(l.extent().has_value());
        else CHECK(l.extent() == tessel::OffsetRange{0, n - 1});
        if (n > 0) CHECK_FALSE(l.fits_in(n - 1));
    }
    CHECK(Layout::contiguous({2, 0, 3}).strides == Shape{3, 3, 1});
    CHECK(Layout::contiguous({}).numel() == 1);
}

TEST_CASE("is_contiguous, extent and offset_of agree with the materialised offsets", "[layout]") {
    int contiguous = 0, not_contiguous = 0;
    std::vector<Layout> layouts = view_sources();
    for (const auto& shape : test_shapes()) {
        // Size-1 dims with odd strides, and an offset: still contiguous by PyTorch's rule.
        Layout odd = Layout::contiguous(shape);
        odd.offset = 5;
        for (int d = 0; d < shape.size(); ++d)
            if (shape[d] == 1) odd.strides[d] = 17 + d;
        layouts.push_back(odd);
        layouts.push_back(sources(shape).back());
    }
    for (const auto& l : layouts) {
        INFO(l.to_string());
        const auto offs = materialise(l);
        Offsets iota(offs.size());
        std::iota(iota.begin(), iota.end(), l.offset);
        const bool want = offs == iota;
        CHECK(l.is_contiguous() == want);
        (want ? contiguous : not_contiguous)++;
        const auto range = l.extent();
        REQUIRE(range.has_value() == !offs.empty());
        if (range) {
            CHECK(range->lowest == *std::min_element(offs.begin(), offs.end()));
            CHECK(range->highest == *std::max_element(offs.begin(), offs.end()));
        }
        for (std::size_t k = 0; k < offs.size(); ++k) {
            const auto i = unravel(std::int64_t(k), l.shape);
            CHECK(l.offset_of(std::span<const std::int64_t>(i)) == offs[k]);
        }
    }
    CHECK(contiguous > 300);
    CHECK(not_contiguous > 300);
}

TEST_CASE("permute and transpose reorder dims", "[layout]") {
    for (const auto& shape : test_shapes())
        for (const auto& src : sources(shape)) {
            INFO(src.to_string());
            const int rank = shape.size();
            auto perm = identity(rank);
            do {
                Shape want_shape;
                for (int p : perm) want_shape.push_back(shape[p]);
                const auto want = expected(want_shape, src, [&](const Index& r) {
                    Index s(r.size());
                    for (std::size_t k = 0; k < r.size(); ++k) s[std::size_t(perm[k])] = r[k];
                    return s;
                });
                const auto got = src.permute(perm);
                CHECK(got.shape == want_shape);
                CHECK(materialise(got) == want);
                std::vector<int> negative = perm;   // the same permutation, counted from the end
                for (int& p : negative) p -= rank;
                CHECK(src.permute(negative) == got);
            } while (std::next_permutation(perm.begin(), perm.end()));

            for (int a = -std::max(rank, 1); a < std::max(rank, 1); ++a)
                for (int b = -std::max(rank, 1); b < std::max(rank, 1); ++b) {
                    if (rank == 0) {
                        CHECK(src.transpose(a, b) == src);
                        continue;
                    }
                    auto swap = identity(rank);
                    std::swap(swap[std::size_t((a + rank) % rank)], swap[std::size_t((b + rank) % rank)]);
                    CHECK(src.transpose(a, b) == src.permute(swap));
                }
        }
}

TEST_CASE("slice and narrow take every step-th element from start to stop", "[layout]") {
    int valid = 0, rejected = 0;
    for (const auto& shape : test_shapes()) {
        const auto all = sources(shape);
        for (const auto& src : all)
            for (int dim = -shape.size(); dim < shape.size(); ++dim) {
                const int d = dim < 0 ? dim + shape.size() : dim;
                const auto size = shape[d];
                const bool check_rejections = &src == &all.front();   // they do not depend on strides
                for (auto start = -size - 1; start <= size + 1; ++start)
                    for (auto stop = -size - 1; stop <= size + 1; ++stop)
                        for (std::int64_t step = 1; step <= 3; ++step) {
                            INFO(src.to_string() << " slice(" << dim << ", " << start << ", " << stop << ", " << step << ")");
                            const auto first = start < 0 ? start + size : start, last = stop < 0 ? stop + size : stop;
                            const bool ok = first >= 0 && first <= size && last >= 0 && last <= size && first <= last;
                            if (!ok) {
                                if (check_rejections && step == 1) {
                                    ++rejected;
                                    CHECK_THROWS_AS(src.slice(dim, start, stop, step), tessel::InvalidArgument);
                                }
                                continue;
                            }
                            ++valid;
                            Shape want_shape = shape;
                            want_shape[d] = 0;
                            for (auto i = first; i < last; i += step) ++want_shape[d];
                            const auto got = src.slice(dim, start, stop, step);
                            CHECK(got.shape == want_shape);
                            CHECK(materialise(got) == expected(want_shape, src, [&](Index r) {
                                      r[std::size_t(d)] = first + r[std::size_t(d)] * step;
                                      return r;
                                  }));
                            if (step == 1) {
                                const auto length = last - first;
                                CHECK(src.narrow(dim, start, length) == got);
                                CHECK_THROWS_AS(src.narrow(dim, start, size - first + 1), tessel::InvalidArgument);
                            }
                        }
                CHECK_THROWS_AS(src.slice(dim, 0, size, 0), tessel::InvalidArgument);
                CHECK_THROWS_AS(src.slice(dim, 0, size, -1), tessel::InvalidArgument);
                CHECK_THROWS_AS(src.narrow(dim, 0, -1), tessel::InvalidArgument);
                CHECK_THROWS_AS(src.narrow(dim, size + 1, 0), tessel::InvalidArgument);
                CHECK_THROWS_AS(src.narrow(dim, -size - 1, 0), tessel::InvalidArgument);
            }
    }
    CHECK(valid > 10000);
    CHECK(rejected > 1000);
}

TEST_CASE("select drops a dim at an index", "[layout]") {
    for (const auto& shape : test_shapes())
        for (const auto& src : sources(shape))
            for (int dim = -shape.size(); dim < shape.size(); ++dim) {
                const int d = dim < 0 ? dim + shape.size() : dim;
                for (auto index = -shape[d] - 1; index <= shape[d]; ++index) {
                    INFO(src.to_string() << " select(" << dim << ", " << index << ")");
                    if (index < -shape[d] || index >= shape[d]) {
                        CHECK_THROWS_AS(src.select(dim, index), tessel::InvalidArgument);
                        continue;
                    }
                    const auto i = index < 0 ? index + shape[d] : index;
                    const auto got = src.select(dim, index);
                    CHECK(got.shape == erased(shape, d));
                    CHECK(materialise(got) ==
                          expected(erased(shape, d), src, [&](const Index& r) { return inserted(r, d, i); }));
                }
            }
}

TEST_CASE("unsqueeze and squeeze add and remove size-1 dims in place", "[layout]") {
    for (const auto& shape : test_shapes()) {
        const int rank = shape.size();
        for (const auto& src : sources(shape)) {
            INFO(src.to_string());
            const auto offs = materialise(src);
            for (int dim = -rank - 2; dim <= rank + 1; ++dim) {
                if (dim < -rank - 1 || dim > rank) {
                    CHECK_THROWS_AS(src.unsqueeze(dim), tessel::InvalidArgument);
                    continue;
                }
                const auto got = src.unsqueeze(dim);
                CHECK(got.shape == inserted(shape, dim < 0 ? dim + rank + 1 : dim, 1));
                CHECK(materialise(got) == offs);
                CHECK(got.squeeze(dim) == src);
            }
            Shape squeezed;
            for (auto s : shape)
                if (s != 1) squeezed.push_back(s);
            CHECK(src.squeeze().shape == squeezed);
            CHECK(materialise(src.squeeze()) == offs);
            const int n = std::max(rank, 1);   // a rank-0 layout accepts dims 0 and -1
            for (int dim = -n - 1; dim <= n; ++dim) {
                if (dim < -n || dim >= n) {
                    CHECK_THROWS_AS(src.squeeze(dim), tessel::InvalidArgument);
                    continue;
                }
                const int d = dim < 0 ? dim + n : dim;
                const auto got = src.squeeze(dim);
                CHECK(got.shape == (rank > 0 && shape[d] == 1 ? erased(shape, d) : shape));
                CHECK(materialise(got) == offs);
            }
        }
    }
}

TEST_CASE("expand broadcasts size-1 and new leading dims with stride 0", "[layout]") {
    std::vector<std::vector<Shape>> targets;   // by source rank: every shape of that rank or one more
    for (int rank = 0; rank <= 3; ++rank) targets.push_back(shapes(rank, rank + 1, {-1, 0, 1, 2, 3}));
    int valid = 0, rejected = 0;
    for (const auto& shape : test_shapes()) {
        if (shape.size() > 3) continue;
        const int rank = shape.size();
        const auto all = sources(shape);
        for (const auto& src : all)
            for (const auto& target : targets[std::size_t(rank)]) {
                INFO(src.to_string() << " expand(" << target << ")");
                const int lead = target.size() - rank;
                bool ok = true;
                Shape want_shape = target;
                for (int i = 0; i < target.size(); ++i) {
                    const int d = i - lead;
                    if (d < 0) ok &= target[i] >= 0;
                    else if (target[i] == -1) want_shape[i] = shape[d];
                    else ok &= target[i] == shape[d] || (shape[d] == 1 && target[i] >= 0);
                }
                if (!ok) {
                    if (&src == &all.front()) {   // rejections do not depend on strides
                        ++rejected;
                        CHECK_THROWS_AS(src.expand(target), tessel::InvalidArgument);
                    }
                    continue;
                }
                ++valid;
                const auto got = src.expand(target);
                CHECK(got.shape == want_shape);
                CHECK(materialise(got) == expected(want_shape, src, [&](const Index& r) {
                          Index s(r.begin() + lead, r.end());
                          for (int d = 0; d < rank; ++d)
                              if (shape[d] == 1) s[std::size_t(d)] = 0;
                          return s;
                      }));
            }
    }
    CHECK(valid > 1000);
    CHECK(rejected > 1000);
}

TEST_CASE("broadcast_shapes follows NumPy's rule", "[layout]") {
    const auto all = shapes(0, 3, {0, 1, 2, 3});
    for (const auto& a : all)
        for (const auto& b : all) {
            INFO(a << " with " << b);
            const int rank = std::max(a.size(), b.size());
            Shape want;
            bool ok = true;
            for (int i = 0; i < rank; ++i) {
                const int da = i - (rank - a.size()), db = i - (rank - b.size());
                const std::int64_t x = da >= 0 ? a[da] : 1, y = db >= 0 ? b[db] : 1;
                ok &= x == y || x == 1 || y == 1;
                want.push_back(x == 1 ? y : x);
            }
            if (!ok) {
                CHECK_THAT(error_of([&] { tessel::broadcast_shapes(a, b); }),
                           Catch::Contains(a.to_string()) && Catch::Contains(b.to_string()));
                continue;
            }
            CHECK(tessel::broadcast_shapes(a, b) == want);
            CHECK(Layout::contiguous(a).expand(want).shape == want);   // both really expand to it
            CHECK(Layout::contiguous(b).expand(want).shape == want);
        }
    CHECK_THROWS_AS(tessel::broadcast_shapes({-1}, {1}), tessel::InvalidArgument);
}

TEST_CASE("view exists exactly when strides can reproduce the elements' order", "[layout]") {
    std::map<std::int64_t, std::vector<Shape>> targets;   // by element count
    for (const auto& t : shapes(0, 4, {1, 2, 3, 4})) targets[product(t)].push_back(t);
    for (const auto& t : shapes(1, 3, {0, 1, 2}))
        if (product(t) == 0) targets[0].push_back(t);
    int views = 0, copies = 0;
    for (const auto& src : view_sources()) {
        const auto offs = materialise(src);
        for (const auto& target : targets[product(src.shape)]) {
            INFO(src.to_string() << " view(" << target << ")");
            const auto want = reference_view(offs, target);
            const auto got = src.view(target);
            REQUIRE(got.has_value() == want.has_value());
            if (!got) {
                ++copies;
                CHECK_THAT(error_of([&] { src.view_or_throw(target); }),
                           Catch::Contains(target.to_string()) && Catch::Contains("reshape() or contiguous()"));
                continue;
            }
            ++views;
            CHECK(got->shape == target);
            CHECK(materialise(*got) == offs);
            CHECK(src.view_or_throw(target) == *got);
            for (int d = 0; d < target.size(); ++d) {   // -1 infers the same size
                Shape inferred = target;
                inferred[d] = -1;
                if (product(target) > 0 || product(erased(target, d)) > 0) CHECK(src.view(inferred) == got);
            }
        }
    }
    CHECK(views > 10000);
    CHECK(copies > 1000);
}

TEST_CASE("view rejects shapes that cannot hold the elements", "[layout]") {
    const auto l = Layout::contiguous({2, 3, 4});
    CHECK_THAT(error_of([&] { (void)l.view({5, 5}); }), Catch::Contains("[5, 5]") && Catch::Contains("24"));
    CHECK_THAT(error_of([&] { (void)l.view({-1, -1}); }), Catch::Contains("more than one -1"));
    CHECK_THAT(error_of([&] { (void)l.view({5, -1}); }), Catch::Contains("[5, -1]") && Catch::Contains("24"));
    CHECK_THAT(error_of([&] { (void)l.view({-2, 12}); }), Catch::Contains("-2"));
    CHECK_THAT(error_of([&] { (void)l.view({std::int64_t(1) << 32, std::int64_t(1) << 32}); }),
               Catch::Contains("[4294967296, 4294967296]"));
    CHECK_THAT(error_of([&] { (void)Layout::contiguous({0, 3}).view({0, -1}); }), Catch::Contains("ambiguous"));
    // A 0 beside the -1 of a tensor with elements: no size fits (torch: invalid, not ambiguous).
    CHECK_THAT(error_of([&] { (void)Layout::contiguous({2, 3}).view({0, -1}); }),
               Catch::Contains("view: shape [0, -1] is invalid for a tensor of 6 elements"));
    CHECK(Layout::contiguous({0, 3}).view({-1})->shape == Shape{0});
    CHECK(l.view({-1, 4})->shape == Shape{6, 4});
    CHECK(Layout::contiguous({}).view({1, 1})->strides == Shape{1, 1});
    // Empty tensors view as anything; the same shape keeps its strides, another gets row-major ones.
    const auto empty = Layout::contiguous({0, 3}).transpose(0, 1);
    CHECK(empty.view({3, 0})->strides == Shape{1, 3});
    CHECK(empty.view({1, 0, 3})->strides == Shape{3, 3, 1});
    const auto t = Layout::contiguous({2, 3}).transpose(0, 1);
    CHECK_THAT(error_of([&] { t.view_or_throw({6}); }),
               Catch::Contains("shape [3, 2] strides [1, 3]") && Catch::Contains("[6]") && Catch::Contains("copy"));
}

TEST_CASE("bad sizes, dims, indices and permutations throw naming the values and the shape", "[layout]") {
    using Catch::Contains;
    const auto big = std::int64_t(1) << 32;
    CHECK_THAT(error_of([&] { Layout::contiguous({big, big}); }),
               Contains("the element count of shape [4294967296, 4294967296] overflows 64 bits"));
    CHECK(Layout::contiguous({big, big / 2 - 1}).numel() == big * (big / 2 - 1));
    CHECK(Layout::contiguous({big, 0, big}).numel() == 0);   // no elements, and its strides fit
    CHECK(Layout::contiguous({big, 0, big}).strides == Shape{big, big, 1});
    CHECK_THAT(error_of([&] { Layout::contiguous({0, big, big}); }), Contains("strides") && Contains("overflow"));
    CHECK_THAT(error_of([&] { Layout::contiguous({2, -3}); }), Contains("[2, -3]") && Contains("-3"));
    CHECK_THAT(error_of([&] { (void)Layout{Shape{2, -1}, Shape{1, 1}, 0}.numel(); }), Contains("-1"));

    const auto l = Layout::contiguous({2, 3, 4});
    CHECK_THAT(error_of([&] { l.select(3, 0); }), Contains("dim 3") && Contains("[2, 3, 4]"));
    CHECK_THAT(error_of([&] { l.select(-4, 0); }), Contains("dim -4") && Contains("[2, 3, 4]"));
    CHECK_THAT(error_of([&] { l.select(1, 3); }), Contains("index 3") && Contains("[2, 3, 4]"));
    CHECK_THAT(error_of([&] { l.select(1, -4); }), Contains("index -4") && Contains("[-3, 2]"));
    CHECK_THAT(error_of([&] { Layout::contiguous({}).select(0, 0); }), Contains("dim 0") && Contains("[]"));
    CHECK_THAT(error_of([&] { l.slice(2, 1, 5); }), Contains("stop 5") && Contains("dim 2") && Contains("[2, 3, 4]"));
    CHECK_THAT(error_of([&] { l.slice(2, -5, 2); }), Contains("start -5") && Contains("[2, 3, 4]"));
    CHECK_THAT(error_of([&] { l.slice(2, 3, 1); }), Contains("start 3") && Contains("stop 1") && Contains("[2, 3, 4]"));
    CHECK_THAT(error_of([&] { l.slice(2, 0, 4, 0); }), Contains("step 0") && Contains("[2, 3, 4]"));
    CHECK_THAT(error_of([&] { l.narrow(1, 2, 2); }), Contains("length 2") && Contains("start 2") && Contains("[2, 3, 4]"));
    CHECK_THAT(error_of([&] { l.permute({0, 0, 1}); }), Contains("[0, 0, 1]") && Contains("[2, 3, 4]"));
    CHECK_THAT(error_of([&] { l.permute({0, 1}); }), Contains("[0, 1]") && Contains("[2, 3, 4]"));
    CHECK_THAT(error_of([&] { l.permute({0, 1, 3}); }), Contains("[0, 1, 3]"));
    CHECK_THAT(error_of([&] { l.transpose(0, 3); }), Contains("dim 3") && Contains("[2, 3, 4]"));
    CHECK_THAT(error_of([&] { l.unsqueeze(4); }), Contains("dim 4") && Contains("[-4, 3]"));
    CHECK_THAT(error_of([&] { l.squeeze(-4); }), Contains("dim -4"));
    CHECK_THAT(error_of([&] { l.expand({3, 3, 4}); }), Contains("[2, 3, 4]") && Contains("[3, 3, 4]"));
    CHECK_THAT(error_of([&] { l.expand({3, 4}); }), Contains("[2, 3, 4]") && Contains("[3, 4]"));
    CHECK_THAT(error_of([&] { l.expand({-1, 2, 3, 4}); }), Contains("-1") && Contains("leading"));
    CHECK_THAT(error_of([&] { Layout::contiguous({1}).expand({big, big}); }), Contains("overflows"));
    CHECK_THAT(error_of([&] { tessel::broadcast_shapes({2, 3}, {4, 1, 2}); }),
               Contains("[2, 3]") && Contains("[4, 1, 2]") && Contains("sizes 3 and 2"));
    CHECK_THAT(error_of([&] { (void)l.offset_of({1, 3, 0}); }), Contains("[1, 3, 0]") && Contains("[2, 3, 4]"));
    CHECK_THAT(error_of([&] { (void)l.offset_of({1, 2}); }), Contains("[1, 2]") && Contains("[2, 3, 4]"));
}

TEST_CASE("hand-made layouts: negative strides, storage fit and overflow", "[layout]") {
    const auto reversed = Layout::strided({3}, {-2}, 4);
    CHECK(materialise(reversed) == Offsets{4, 2, 0});
    CHECK(reversed.extent() == tessel::OffsetRange{0, 4});
    CHECK(reversed.fits_in(5));
    CHECK_FALSE(reversed.fits_in(4));
    CHECK_FALSE(Layout::strided({3}, {1}, -1).fits_in(10));
    CHECK(Layout::strided({0, 5}, {1, 1}, 100).fits_in(0));   // no elements: needs no storage
    CHECK(materialise(reversed.slice(0, 1, 3)) == Offsets{2, 0});
    CHECK_THAT(error_of([&] { Layout::strided({2, 2}, {1}); }), Catch::Contains("[1]") && Catch::Contains("[2, 2]"));
    const auto huge = std::numeric_limits<std::int64_t>::max() / 2;
    CHECK_THAT(error_of([&] { Layout::strided({4}, {huge}, 0); }), Catch::Contains("overflows 64 bits"));
    CHECK(Layout::strided({2}, {huge}, huge).extent() == tessel::OffsetRange{huge, 2 * huge});
    CHECK_THAT(error_of([&] { Layout::strided({2}, {huge}, huge + 2); }), Catch::Contains("overflows"));
    // A new size-1 dim's stride is never used: where PyTorch's choice (size x stride of the next
    // dim) overflows, the view is still made, with the same elements.
    const auto wide = Layout::strided({3}, {huge});
    CHECK(materialise(wide.view_or_throw({1, 3})) == materialise(wide));
    CHECK(materialise(wide.unsqueeze(0)) == materialise(wide));
    CHECK(wide.unsqueeze(0).shape == Shape{1, 3});
    CHECK(Layout::contiguous({2, 3}).unsqueeze(0).strides == Shape{6, 3, 1});  // PyTorch's where it fits
}
