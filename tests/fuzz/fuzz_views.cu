// Fuzzed views and factories beyond the view chains every operand is built through: host element
// access through a view (read and write, seen by the other views of the storage), squeeze and
// unsqueeze, and the bad arguments every view operation and factory must reject.
#include "fuzz.hpp"

namespace fuzz {
namespace {

template <class T>
void valid_step(Step& st) {
    const Dims shape = random_shape(st.rng, 0, 4, 2048);
    Operand<T> x = make_operand<T>(st, shape, {.space = st.rng.chance(0.5) ? MemorySpace::host : MemorySpace::pinned});
    st.note("x: ", x.text());
    if (st.rng.chance(0.5)) {
        st.op = "element access";
        const std::int64_t n = count(shape);
        for (int k = 0; k < 8 && n > 0; ++k) {
            const std::int64_t flat = st.rng.between(0, n - 1);
            Dims idx(shape.size());
            std::int64_t rest = flat;
            for (std::size_t d = shape.size(); d-- > 0;) idx[d] = rest % shape[d], rest /= shape[d];
            T& ref = [&]() -> T& {
                switch (idx.size()) {
                    case 0: return x.t({});
                    case 1: return x.t({idx[0]});
                    case 2: return x.t({idx[0], idx[1]});
                    case 3: return x.t({idx[0], idx[1], idx[2]});
                    default: return x.t({idx[0], idx[1], idx[2], idx[3]});
                }
            }();
            if (to_double(ref) != x.at(flat)) check_failed("x(", dims_text(idx), ") = ", to_double(ref), ", expected ", x.at(flat));
            // A write through the view lands where the model says, in the base storage.
            const T v = draw<T>(st.rng, Values::small_ints);
            ref = v;
            x.base[std::size_t(x.layout.storage_index(flat))] = to_double(v);
        }
        const Tensor<T> base(x.t.storage(), Layout::contiguous(Shape{std::int64_t(x.base.size())}));
        for (std::size_t i = 0; i < x.base.size(); ++i)
            if (to_double(base.data()[i]) != x.base[i]) check_failed("after writes through x, base element ", i, " is ", to_double(base.data()[i]), ", expected ", x.base[i]);
        return;
    }
    st.op = "squeeze/unsqueeze";
    const int rank = int(shape.size());
    const int d = int(st.rng.between(-rank - 1, rank));
    const Tensor<T> u = x.t.unsqueeze(d);
    HostLayout m = x.layout;
    const auto at = std::size_t(d < 0 ? d + rank + 1 : d);
    m.shape.insert(m.shape.begin() + std::ptrdiff_t(at), 1);
    m.strides.insert(m.strides.begin() + std::ptrdiff_t(at), 1);
    st.note("unsqueeze(", d, ")");
    check_layout(u, m, "unsqueeze(" + std::to_string(d) + ")");
    const Tensor<T> q = u.squeeze(d);
    check_layout(q, x.layout, "unsqueeze(d).squeeze(d)");
    HostLayout sq;
    for (std::size_t k = 0; k < x.layout.shape.size(); ++k)
        if (x.layout.shape[k] != 1) sq.shape.push_back(x.layout.shape[k]), sq.strides.push_back(x.layout.strides[k]);
    sq.offset = x.layout.offset;
    check_layout(u.squeeze(), sq, "squeeze()");
    if (rank == 0) {
        check_layout(x.t.transpose(0, -1), x.layout, "transpose(0, -1) of a scalar");
        check_layout(x.t.squeeze(-1), x.layout, "squeeze(-1) of a scalar");
    }
}

template <class T>
void invalid_step(Step& st) {
    Dims shape = random_shape(st.rng, 1, 4, 2048);
    for (auto& s : shape) s = std::max<std::int64_t>(s, 1);
    const int rank = int(shape.size());
    const Operand<T> x = make_operand<T>(st, shape, {.space = st.rng.chance(0.7) ? MemorySpace::device : MemorySpace::host});
    st.note("x: ", x.text());
    const int d = int(st.rng.between(0, rank - 1));
    const std::int64_t size = shape[std::size_t(d)];
    const int bad_dim = st.rng.chance(0.5) ? rank + int(st.rng.between(0, 2)) : -rank - 1 - int(st.rng.between(0, 2));
    auto expect = [&](const std::string& what, auto&& f) {
        st.op = what;
        expect_error(st, Want::invalid_argument, what, f);
    };
    switch (st.rng.between(0, 14)) {
        case 0: expect("slice: start after stop", [&] { (void)x.t.slice(d, size, size - 1 - st.rng.between(0, size - 1)); }); break;
        case 1: expect("slice: stop past the end", [&] { (void)x.t.slice(d, 0, size + st.rng.between(1, 5)); }); break;
        case 2: expect("slice: start before the beginning", [&] { (void)x.t.slice(d, -size - st.rng.between(1, 5), size); }); break;
        case 3: expect("slice: step below 1", [&] { (void)x.t.slice(d, 0, size, -st.rng.between(0, 2)); }); break;
        case 4: expect("select: index out of range", [&] { (void)x.t.select(d, st.rng.chance(0.5) ? size + st.rng.between(0, 3) : -size - 1 - st.rng.between(0, 3)); }); break;
        case 5: {
            const int which = int(st.rng.between(0, 5));
            expect("dim out of range", [&] {
                switch (which) {
                    case 0: (void)x.t.slice(bad_dim, 0, 1); break;
                    case 1: (void)x.t.select(bad_dim, 0); break;
                    case 2: (void)x.t.narrow(bad_dim, 0, 1); break;
                    case 3: (void)x.t.transpose(0, bad_dim); break;
                    case 4: (void)x.t.squeeze(bad_dim); break;
                    default: (void)x.t.unsqueeze(bad_dim + (bad_dim > 0 ? 1 : -1)); break;
                }
            });
            break;
        }
        case 6: {
            expect("permute: not a permutation", [&] {
                switch (rank) {
                    case 1: (void)x.t.permute({0, 0}); break;
                    case 2: (void)x.t.permute({1, 1}); break;
                    case 3: (void)x.t.permute({0, 2, -1}); break;
                    default: (void)x.t.permute({0, 1, 2, 4}); break;
                }
            });
            break;
        }
        case 7: {
            Dims to = shape;
            to[std::size_t(d)] = size + st.rng.between(1, 3);
            if (size == 1) to[std::size_t(d)] = -2;
            expect("expand: sizes that do not fit", [&] { (void)x.t.expand(shape_of(to)); });
            break;
        }
        case 8: {
            Dims to(shape.begin() + 1, shape.end());
            expect("expand: fewer dims", [&] { (void)x.t.expand(shape_of(to)); });
            break;
        }
        case 9: expect("narrow: longer than the dim", [&] { (void)x.t.narrow(d, st.rng.between(0, size), size + 1); }); break;
        case 10: {
            const int which = int(st.rng.between(0, 2));
            expect("view/reshape: impossible shape", [&] {
                switch (which) {
                    case 0: (void)x.t.reshape({-1, -1}); break;
                    case 1: (void)x.t.reshape({count(shape) + 1}); break;
                    default: (void)x.t.reshape({-3, count(shape)}); break;
                }
            });
            break;
        }
        case 11: {
            const bool device = x.t.space() == MemorySpace::device;
            expect(device ? "element access: device tensor" : "element access: bad index", [&] {
                if (device) (void)x.t({0});
                else if (rank == 1) (void)x.t({size});  // one past the end
                else (void)x.t({0});                    // too few indices
            });
            break;
        }
        case 12: {
            std::vector<T> v(std::size_t(count(shape) + 1));
            expect("from_host: count mismatch", [&] { (void)from_host<T>(std::span<const T>(v), shape_of(shape), {.stream = st.stream()}); });
            break;
        }
        case 13: {
            const int which = int(st.rng.between(0, 1));
            expect("factory: bad shape", [&] {
                if (which == 0) (void)empty<T>({2, -st.rng.between(1, 4)}, {.stream = st.stream()});
                else (void)zeros<T>({1, 1, 1, 1, 1, 1, 1, 1, 1}, {.stream = st.stream()});
            });
            break;
        }
        default: {
            static T storage[16];
            expect("from_blob: strides before the pointer", [&] { (void)from_blob<T>(storage, {4, 2}, MemorySpace::host, Device{0}, {}, Shape{-2, 1}); });
            break;
        }
    }
}

}  // namespace

void view_step(Step& st) {
    st.family = "view";
    with_type(any_type(st.rng), [&]<class T>() {
        if (st.invalid) invalid_step<T>(st);
        else valid_step<T>(st);
    });
}

}  // namespace fuzz
