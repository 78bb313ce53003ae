// The non-template parts of fuzz.hpp: view chains and their model, shapes, comparisons.
#include "fuzz.hpp"

namespace fuzz {

namespace {
// d, or the same dim counted from the end (rank d + negative), at random.
int maybe_negative(Rng& r, int d, int rank) { return r.chance(0.3) ? d - rank : d; }
std::int64_t maybe_from_end(Rng& r, std::int64_t i, std::int64_t size) { return i < size && r.chance(0.3) ? i - size : i; }
int wrap(int d, int rank) { return d < 0 ? d + rank : d; }
}  // namespace

std::string& last_error_message() {
    static std::string m;
    return m;
}

std::string ViewOp::text() const {
    std::ostringstream os;
    switch (kind) {
        case permute:
            os << "permute(";
            for (std::size_t i = 0; i < perm.size(); ++i) os << (i ? "," : "") << perm[i];
            os << ")";
            break;
        case transpose: os << "transpose(" << dim << "," << dim2 << ")"; break;
        case slice: os << "slice(" << dim << "," << start << "," << stop << "," << step << ")"; break;
        case narrow: os << "narrow(" << dim << "," << start << "," << stop << ")"; break;
        case select: os << "select(" << dim << "," << start << ")"; break;
        case expand: os << (broadcast_to ? "broadcast_to(" : "expand(") << dims_text(sizes) << ")"; break;
        case view: os << "view(" << dims_text(sizes) << ")"; break;
        case unsqueeze: os << "unsqueeze(" << dim << ")"; break;
    }
    return os.str();
}

HostLayout ViewOp::apply(const HostLayout& in) const {
    HostLayout out = in;
    const int rank = in.rank();
    switch (kind) {
        case permute:
            for (std::size_t i = 0; i < perm.size(); ++i) {
                const auto d = std::size_t(wrap(perm[i], rank));
                out.shape[i] = in.shape[d];
                out.strides[i] = in.strides[d];
            }
            break;
        case transpose:
            if (rank > 0) {
                const auto a = std::size_t(wrap(dim, rank)), b = std::size_t(wrap(dim2, rank));
                std::swap(out.shape[a], out.shape[b]);
                std::swap(out.strides[a], out.strides[b]);
            }
            break;
        case slice: {
            const auto d = std::size_t(wrap(dim, rank));
            const std::int64_t size = in.shape[d], first = start < 0 ? start + size : start, last = stop < 0 ? stop + size : stop;
            out.shape[d] = (last - first + step - 1) / step;
            out.offset += first * in.strides[d];
            out.strides[d] *= step;
            break;
        }
        case narrow: {
            const auto d = std::size_t(wrap(dim, rank));
            const std::int64_t first = start < 0 ? start + in.shape[d] : start;
            out.shape[d] = stop;
            out.offset += first * in.strides[d];
            break;
        }
        case select: {
            const auto d = std::size_t(wrap(dim, rank));
            out.offset += (start < 0 ? start + in.shape[d] : start) * in.strides[d];
            out.shape.erase(out.shape.begin() + std::ptrdiff_t(d));
            out.strides.erase(out.strides.begin() + std::ptrdiff_t(d));
            break;
        }
        case expand: {
            const std::size_t lead = sizes.size() - in.shape.size();
            out.shape = sizes;
            out.strides.assign(sizes.size(), 0);
            for (std::size_t i = lead; i < sizes.size(); ++i) {
                const std::int64_t have = in.shape[i - lead];
                if (sizes[i] == -1 || sizes[i] == have) {
                    out.shape[i] = have;
                    out.strides[i] = in.strides[i - lead];
                }
            }
            break;
        }
        case view: {
            Dims s = sizes;
            std::int64_t known = 1;
            for (auto v : s)
                if (v != -1) known *= v;
            for (auto& v : s)
                if (v == -1) v = in.numel() / known;
            out = HostLayout::contiguous(s);
            out.offset = in.offset;
            break;
        }
        case unsqueeze: {
            const auto d = std::size_t(wrap(dim, rank + 1));
            out.shape.insert(out.shape.begin() + std::ptrdiff_t(d), 1);
            out.strides.insert(out.strides.begin() + std::ptrdiff_t(d), 1);
            break;
        }
    }
    return out;
}

std::vector<ViewOp> random_views(Rng& r, const Dims& want, bool allow_expand, int max_views, Dims& base) {
    std::vector<ViewOp> backwards;
    Dims cur = want;
    const int n = max_views <= 0 || r.chance(0.3) ? 0 : int(r.between(1, max_views));
    for (int i = 0; i < n; ++i) {
        const int rank = int(cur.size());
        ViewOp op;
        Dims prev = cur;
        op.kind = ViewOp::Kind(r.weighted({rank >= 2 ? 2.0 : 0.0, rank >= 1 ? 1.5 : 0.0, rank >= 1 ? 3.0 : 0.0, rank >= 1 ? 1.0 : 0.0,
                                           1.5, allow_expand ? 1.5 : 0.0, 1.0,
                                           std::count(cur.begin(), cur.end(), 1) ? 1.0 : 0.0}));
        switch (op.kind) {
            case ViewOp::permute: {
                std::vector<int> p(static_cast<std::size_t>(rank));
                std::iota(p.begin(), p.end(), 0);
                std::shuffle(p.begin(), p.end(), std::mt19937_64(r.bits()));
                for (int k = 0; k < rank; ++k) prev[std::size_t(p[std::size_t(k)])] = cur[std::size_t(k)];
                for (int& d : p) d = maybe_negative(r, d, rank);
                op.perm = p;
                break;
            }
            case ViewOp::transpose: {
                const int a = int(r.between(0, rank - 1)), b = int(r.between(0, rank - 1));
                std::swap(prev[std::size_t(a)], prev[std::size_t(b)]);
                op.dim = maybe_negative(r, a, rank);
                op.dim2 = maybe_negative(r, b, rank);
                break;
            }
            case ViewOp::slice: {
                const int d = int(r.between(0, rank - 1));
                const std::int64_t n_out = cur[std::size_t(d)];
                op.step = r.pick(std::vector<std::int64_t>{1, 1, 2, 3, 5});
                const std::int64_t start = r.between(0, 3);
                const std::int64_t stop = n_out > 0 ? start + (n_out - 1) * op.step + 1 + r.between(0, op.step - 1) : start;
                const std::int64_t size = stop + r.between(0, 2);
                prev[std::size_t(d)] = size;
                op.dim = maybe_negative(r, d, rank);
                op.start = maybe_from_end(r, start, size);
                op.stop = maybe_from_end(r, stop, size);
                break;
            }
            case ViewOp::narrow: {
                const int d = int(r.between(0, rank - 1));
                const std::int64_t start = r.between(0, 3), size = start + cur[std::size_t(d)] + r.between(0, 2);
                prev[std::size_t(d)] = size;
                op.dim = maybe_negative(r, d, rank);
                op.start = maybe_from_end(r, start, size);
                op.stop = cur[std::size_t(d)];
                break;
            }
            case ViewOp::select: {
                const int d = int(r.between(0, rank));
                const std::int64_t size = r.between(1, 4), index = r.between(0, size - 1);
                prev.insert(prev.begin() + d, size);
                op.dim = maybe_negative(r, d, rank + 1);
                op.start = r.chance(0.3) ? index - size : index;
                break;
            }
            case ViewOp::expand: {
                const int drop = r.chance(0.3) ? int(r.between(0, rank)) : 0;
                prev.erase(prev.begin(), prev.begin() + drop);
                op.sizes = cur;
                for (std::size_t k = 0; k < prev.size(); ++k) {
                    if (r.chance(0.4)) prev[k] = 1;
                    else if (r.chance(0.3)) op.sizes[k + std::size_t(drop)] = -1;
                }
                op.broadcast_to = r.chance(0.3) && std::find(op.sizes.begin(), op.sizes.end(), -1) == op.sizes.end();
                break;
            }
            case ViewOp::view: {
                const int how = int(r.between(0, 2));
                if (how == 0 || rank < 2) {
                    prev = Dims{count(cur)};
                } else if (how == 1) {
                    const int d = int(r.between(0, rank - 2));
                    prev[std::size_t(d)] *= prev[std::size_t(d) + 1];
                    prev.erase(prev.begin() + d + 1);
                } else {
                    prev.insert(prev.begin() + r.between(0, rank), 1);
                }
                op.sizes = cur;
                if (rank > 0 && r.chance(0.4)) {  // -1: inferred, unless the other sizes hold no elements (ambiguous)
                    const int d = int(r.between(0, rank - 1));
                    std::int64_t others = 1;
                    for (int k = 0; k < rank; ++k)
                        if (k != d) others *= cur[std::size_t(k)];
                    if (others != 0) op.sizes[std::size_t(d)] = -1;
                }
                break;
            }
            case ViewOp::unsqueeze: {
                std::vector<int> ones;
                for (int k = 0; k < rank; ++k)
                    if (cur[std::size_t(k)] == 1) ones.push_back(k);
                const int d = r.pick(ones);
                prev.erase(prev.begin() + d);
                op.dim = r.chance(0.3) ? d - rank : d;
                break;
            }
        }
        if (count(prev) > base_cap || prev.size() > 6) continue;
        backwards.push_back(op);
        cur = prev;
        if (op.kind == ViewOp::view) break;  // view() is applied to the contiguous base only
    }
    base = cur;
    std::reverse(backwards.begin(), backwards.end());
    return backwards;
}

Dims random_shape(Rng& r, int lo, int hi, std::int64_t cap) {
    Dims s(std::size_t(r.between(lo, hi)));
    for (auto& v : s) {
        switch (r.weighted({0.04, 0.22, 0.42, 0.32})) {
            case 0: v = 0; break;
            case 1: v = 1; break;
            case 2: v = r.between(2, 8); break;
            default: v = r.between(9, 70); break;
        }
    }
    while (count(s) > cap) {
        auto& v = s[std::size_t(r.between(0, std::int64_t(s.size()) - 1))];
        if (v > 1) v = (v + 1) / 2;
    }
    return s;
}

Dims broadcast_source(Rng& r, const Dims& to) {
    Dims s(to.begin() + (r.chance(0.3) ? r.between(0, std::int64_t(to.size())) : 0), to.end());
    for (auto& v : s)
        if (r.chance(0.3)) v = 1;
    return s;
}

Dims step_shape(Rng& r, int lo, int hi) {
    if (hi >= 1 && r.chance(0.03)) {
        // Long rows: the reductions' split path (K > 16384 with few outputs), the row kernels'
        // shared-memory path (rows over 1024).
        Dims s{r.between(1025, 70000)};
        if (hi >= 2 && r.chance(0.5)) s = {r.between(1, 3), r.between(1025, 20000)};
        while (std::int64_t(s.size()) < lo) s.insert(s.begin(), 1);
        return s;
    }
    return random_shape(r, lo, hi);
}

void compare(const std::string& what, const Dims& shape, const std::vector<double>& actual, const std::vector<double>& expected,
             const std::vector<double>& tol, double largest) {
    if (actual.size() != expected.size()) check_failed(what, ": ", actual.size(), " values, expected ", expected.size());
    std::int64_t bad = 0, first = -1;
    for (std::size_t i = 0; i < actual.size(); ++i) {
        const double a = actual[i], e = expected[i];
        bool ok;
        if (std::isnan(e)) ok = std::isnan(a);
        else if (std::isinf(e)) ok = a == e;
        else if (std::isinf(a)) ok = std::fabs(e) >= largest * (1 - 0x1p-7) && (a > 0) == (e > 0);
        else ok = std::fabs(a - e) <= tol[i];
        if (!ok && bad++ == 0) first = std::int64_t(i);
    }
    if (bad == 0) return;
    std::ostringstream os;
    os.precision(17);
    os << what << ": " << bad << " of " << actual.size() << " elements differ; first at " << index_text(first, shape) << " (flat " << first
       << ", shape " << dims_text(shape) << "): expected " << expected[std::size_t(first)] << ", got " << actual[std::size_t(first)]
       << ", tolerance " << tol[std::size_t(first)];
    throw Mismatch{os.str()};
}

void compare_exact(const std::string& what, const Dims& shape, const std::vector<std::int64_t>& actual,
                   const std::vector<std::int64_t>& expected) {
    if (actual.size() != expected.size()) check_failed(what, ": ", actual.size(), " values, expected ", expected.size());
    std::int64_t bad = 0, first = -1;
    for (std::size_t i = 0; i < actual.size(); ++i)
        if (actual[i] != expected[i] && bad++ == 0) first = std::int64_t(i);
    if (bad == 0) return;
    check_failed(what, ": ", bad, " of ", actual.size(), " elements differ; first at ", index_text(first, shape), " (flat ", first,
             ", shape ", dims_text(shape), "): expected ", expected[std::size_t(first)], ", got ", actual[std::size_t(first)],
             ", tolerance 0");
}

void check_shape(const std::string& what, const Shape& actual, const Dims& expected) {
    if (dims_of(actual) != expected) check_failed(what, ": shape ", actual.to_string(), ", expected ", dims_text(expected));
}

}  // namespace fuzz
