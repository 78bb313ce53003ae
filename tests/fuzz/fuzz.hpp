// Shared pieces of the op fuzzer (fuzz_ops): the seeded randomness and description of a step, the
// stream it runs on, operands built through random chains of views with a host mirror of their
// memory and layout, read-back that bypasses tessel's own gather, poisoning, comparison with
// tolerances, and the check that a bad input throws a typed tessel error.
#pragma once

// Only what every family needs: each family includes its own ops (each op header costs seconds of
// compile time in every file that includes it).
#include <tessel/core/error.hpp>
#include <tessel/memory/allocator.hpp>
#include <tessel/ops/promote.hpp>
#include <tessel/runtime/device.hpp>
#include <tessel/stream/stream.hpp>
#include <tessel/tensor/tensor.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <vector>

#include "known_issues.hpp"

namespace fuzz {

using namespace tessel;
using Dims = std::vector<std::int64_t>;

// ---- randomness ---------------------------------------------------------------------------------

// splitmix64: spreads (seed, step) so that neighbouring steps draw unrelated streams.
inline std::uint64_t mix(std::uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

class Rng {
public:
    explicit Rng(std::uint64_t seed) : g_(seed) {}
    // Uniform in [lo, hi], both included.
    std::int64_t between(std::int64_t lo, std::int64_t hi) { return std::uniform_int_distribution<std::int64_t>(lo, hi)(g_); }
    double uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(g_); }
    bool chance(double p) { return uniform(0.0, 1.0) < p; }
    std::uint64_t bits() { return g_(); }
    template <class V>
    const V& pick(const std::vector<V>& v) {
        return v[std::size_t(between(0, std::int64_t(v.size()) - 1))];
    }
    // Index i with probability weights[i] / sum(weights).
    int weighted(std::initializer_list<double> weights) {
        double total = 0;
        for (double w : weights) total += w;
        double r = uniform(0.0, total);
        int i = 0;
        for (double w : weights) {
            if (r < w) return i;
            r -= w;
            ++i;
        }
        return i - 1;
    }

private:
    std::mt19937_64 g_;
};

// ---- a step -------------------------------------------------------------------------------------

// A failed check. Not a std::exception, so nothing that catches library errors can swallow it.
struct Mismatch {
    std::string message;
};

template <class... Parts>
[[noreturn]] void check_failed(const Parts&... parts) {
    throw Mismatch{tessel::detail::concat(parts...)};
}

// How a step hands its stream to the ops: nothing (the current stream, the legacy default stream),
// the raw handle of a created stream, nothing while a StreamGuard makes that stream current, or an
// explicit null handle (the legacy default stream again, spelled as a handle).
enum class StreamMode { current, created_handle, created_current, null_handle };

inline const char* stream_mode_name(StreamMode m) {
    switch (m) {
        case StreamMode::current: return "current (default)";
        case StreamMode::created_handle: return "created, passed as handle";
        case StreamMode::created_current: return "created, made current";
        case StreamMode::null_handle: return "nullptr handle";
    }
    return "?";
}

// Published for the crash handlers: what the step in progress is, as far as it has been described.
void publish_description(const std::string& text);

class Step {
public:
    Step(std::uint64_t seed, std::int64_t index) : rng(mix(seed * 0x100000001B3ull + std::uint64_t(index))), seed_(seed), index_(index) {
        invalid = rng.chance(0.25);
        choose_stream(rng.weighted({3, 3, 2, 1}));
    }
    Step(const Step&) = delete;
    Step& operator=(const Step&) = delete;
    ~Step() {
        guard_.reset();
        if (ready_event_) rt::event_destroy(ready_event_);
    }

    std::uint64_t seed() const { return seed_; }
    std::int64_t index() const { return index_; }
    // The byte a new output is poisoned with: 0xFF (NaN, -1, a bad bool) or, every other step, 0x5A
    // (finite in every float type), since a NaN poison passes where NaN is the expected value.
    int poison_byte() const { return index_ % 2 == 0 ? 0xFF : 0x5A; }

    // The stream the step's work runs on, and what the ops are passed for it.
    rt::stream_t stream() const { return uses_created() ? created_.handle() : nullptr; }
    std::optional<rt::stream_t> stream_arg() const {
        switch (mode_) {
            case StreamMode::created_handle: return created_.handle();
            case StreamMode::null_handle: return rt::stream_t{nullptr};
            default: return std::nullopt;
        }
    }
    StreamMode mode() const { return mode_; }
    const Stream& created() const { return created_; }
    // For ops that only ever use the current stream (to_host, to<U>, item): the step's stream is made
    // the current one. Call before making operands.
    void only_current_stream() {
        if (mode_ == StreamMode::created_handle) {
            mode_ = StreamMode::created_current;
            guard_.emplace(created_);
        }
    }
    // The stream operands are made on: usually the step's stream, sometimes another one, so the
    // step's stream must wait for them (an event) and the allocator must learn that the step's
    // stream uses them (record_stream).
    rt::stream_t input_stream() const { return input_stream_; }
    // Orders the step's stream after everything queued on the input stream so far.
    void inputs_ready() {
        if (input_stream_ == stream()) return;
        if (!ready_event_) ready_event_ = rt::event_create(false);
        rt::event_record(ready_event_, input_stream_);
        rt::stream_wait_event(stream(), ready_event_);
    }

    // Appends to the one-line description printed when the step fails.
    template <class... Parts>
    void note(const Parts&... parts) {
        desc_ += desc_.empty() ? "" : "; ";
        desc_ += tessel::detail::concat(parts...);
        publish_description(desc_);
    }
    const std::string& description() const { return desc_; }

    Rng rng;
    bool invalid = false;
    std::string family, op;  // what ran, for the summary

private:
    bool uses_created() const { return mode_ == StreamMode::created_handle || mode_ == StreamMode::created_current; }
    void choose_stream(int m) {
        mode_ = StreamMode(m);
        if (uses_created()) {
            created_ = Stream::create(StreamOptions{.non_blocking = !rng.chance(0.25), .priority = rng.chance(0.2) ? -1 : 0});
            if (mode_ == StreamMode::created_current) guard_.emplace(created_);
        }
        input_stream_ = stream();
        if (rng.chance(0.2)) {
            if (uses_created()) input_stream_ = nullptr;
            else {
                input_creator_ = Stream::create();
                input_stream_ = input_creator_.handle();
            }
        }
        note("stream ", stream_mode_name(mode_), input_stream_ != stream() ? ", inputs made on another stream" : "");
    }

    std::uint64_t seed_;
    std::int64_t index_;
    StreamMode mode_ = StreamMode::current;
    Stream created_, input_creator_;
    std::optional<StreamGuard> guard_;
    rt::stream_t input_stream_ = nullptr;
    rt::event_t ready_event_ = nullptr;
    std::string desc_;
};

// ---- element types ------------------------------------------------------------------------------

template <class T>
inline constexpr bool is_floating = ops::is_float_type<T>;

template <class T>
double to_double(T v) {
    if constexpr (std::is_same_v<T, bool>) return v ? 1.0 : 0.0;
    else if constexpr (ops::is_reduced_float<T>) return double(float(v));
    else return double(v);
}
template <class T>
std::int64_t to_int(T v) {
    if constexpr (std::is_same_v<T, bool>) return v ? 1 : 0;
    else return std::int64_t(v);
}

// Unit roundoff (half an ulp of 1) of each type's significand: the relative error of one rounding.
template <class T>
constexpr double roundoff() {
    if constexpr (std::is_same_v<T, double>) return 0x1p-53;
    else if constexpr (std::is_same_v<T, float>) return 0x1p-24;
    else if constexpr (std::is_same_v<T, __half>) return 0x1p-11;
    else if constexpr (std::is_same_v<T, __nv_bfloat16>) return 0x1p-8;
    else return 0.0;
}
// The spacing of the type's subnormals: rounding near zero is off by up to half of it in absolute terms.
template <class T>
constexpr double subnormal() {
    if constexpr (std::is_same_v<T, double>) return 0x1p-1074;
    else if constexpr (std::is_same_v<T, float>) return 0x1p-149;
    else if constexpr (std::is_same_v<T, __half>) return 0x1p-24;
    else if constexpr (std::is_same_v<T, __nv_bfloat16>) return 0x1p-133;
    else return 0.0;
}
template <class T>
constexpr double max_finite() {
    if constexpr (std::is_same_v<T, __half>) return 65504.0;
    else if constexpr (std::is_same_v<T, __nv_bfloat16>) return 0x1.FEp127;
    else if constexpr (std::is_same_v<T, float>) return double(std::numeric_limits<float>::max());
    else return std::numeric_limits<double>::max();
}
// The smallest normal value: below it a type keeps fewer significant bits than roundoff() says.
template <class T>
constexpr double min_normal() {
    if constexpr (std::is_same_v<T, double>) return 0x1p-1022;
    else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, __nv_bfloat16>) return 0x1p-126;
    else if constexpr (std::is_same_v<T, __half>) return 0x1p-14;
    else return 0.0;
}
// What rounding a value of magnitude |v| into T may cost.
template <class T>
double rounding(double v) {
    return roundoff<T>() * std::fabs(v) + subnormal<T>();
}

template <class T>
std::string type_name() {
    return std::string(dtype_traits<T>::name);
}

inline std::string dims_text(const Dims& d) {
    std::ostringstream os;
    os << '[';
    for (std::size_t i = 0; i < d.size(); ++i) os << (i ? ", " : "") << d[i];
    os << ']';
    return os.str();
}
inline Dims dims_of(const Shape& s) { return Dims(s.begin(), s.end()); }
inline Shape shape_of(const Dims& d) { return Shape(std::span<const std::int64_t>(d.data(), d.size())); }
inline std::int64_t count(const Dims& d) {
    std::int64_t n = 1;
    for (auto s : d) n *= s;
    return n;
}

template <class T>
std::string describe(const Tensor<T>& t) {
    if (!t.defined()) return type_name<T>() + " undefined";
    return tessel::detail::concat(type_name<T>(), " ", t.layout().to_string(), " ", space_name(t.space()));
}

// ---- layouts and views --------------------------------------------------------------------------

// The fuzzer's own model of where a view's elements are in its base storage, kept beside tessel's
// Layout and compared with it after every view.
struct HostLayout {
    Dims shape, strides;
    std::int64_t offset = 0;

    static HostLayout contiguous(const Dims& shape) {
        HostLayout l{shape, Dims(shape.size()), 0};
        std::int64_t next = 1;
        for (std::size_t d = shape.size(); d-- > 0;) {
            l.strides[d] = next;
            next *= std::max<std::int64_t>(shape[d], 1);
        }
        return l;
    }
    int rank() const { return int(shape.size()); }
    std::int64_t numel() const { return count(shape); }
    // Storage index of element `flat` in row-major order.
    std::int64_t storage_index(std::int64_t flat) const {
        std::int64_t at = offset;
        for (std::size_t d = shape.size(); d-- > 0;) {
            at += (flat % shape[d]) * strides[d];
            flat /= shape[d];
        }
        return at;
    }
    std::string text() const { return "shape " + dims_text(shape) + " strides " + dims_text(strides) + " offset " + std::to_string(offset); }
};

// One view operation, applied to a tensor (tessel) and to a HostLayout (the model).
struct ViewOp {
    enum Kind { permute, transpose, slice, narrow, select, expand, view, unsqueeze } kind = permute;
    int dim = 0, dim2 = 0;
    std::int64_t start = 0, stop = 0, step = 1;
    std::vector<int> perm;
    Dims sizes;
    bool broadcast_to = false;  // expand spelled broadcast_to

    std::string text() const;
    HostLayout apply(const HostLayout& in) const;
    template <class T>
    Tensor<T> apply(const Tensor<T>& t) const {
        switch (kind) {
            case permute: {
                switch (perm.size()) {  // Tensor::permute takes an initializer_list
                    case 2: return t.permute({perm[0], perm[1]});
                    case 3: return t.permute({perm[0], perm[1], perm[2]});
                    case 4: return t.permute({perm[0], perm[1], perm[2], perm[3]});
                    case 5: return t.permute({perm[0], perm[1], perm[2], perm[3], perm[4]});
                    default: return t.permute({perm[0], perm[1], perm[2], perm[3], perm[4], perm[5]});
                }
            }
            case transpose: return t.transpose(dim, dim2);
            case slice: return t.slice(dim, start, stop, step);
            case narrow: return t.narrow(dim, start, stop);
            case select: return t.select(dim, start);
            case expand: return broadcast_to ? t.broadcast_to(shape_of(sizes)) : t.expand(shape_of(sizes));
            case view: return t.view(shape_of(sizes));
            case unsqueeze: return t.unsqueeze(dim);
        }
        return t;
    }
};

// Throws a Mismatch unless tessel's layout of `t` agrees with the model where it matters: the shape,
// the strides of dims longer than 1, and the offset of a non-empty view.
template <class T>
void check_layout(const Tensor<T>& t, const HostLayout& model, const std::string& what) {
    const Layout& l = t.layout();
    bool same = dims_of(l.shape) == model.shape;
    for (int d = 0; same && d < l.rank(); ++d) same = l.shape[d] <= 1 || l.strides[d] == model.strides[std::size_t(d)];
    if (same && model.numel() > 0) same = l.offset == model.offset;
    if (!same) check_failed(what, " gave layout ", l.to_string(), ", expected ", model.text());
}

// What values an operand holds: the kinds exercise different things (exact sums and ties for
// quarters, overflow-free products near one, logs and roots of positive values).
enum class Values { uniform, quarters, small_ints, near_one, positive };

inline const char* values_name(Values v) {
    switch (v) {
        case Values::uniform: return "uniform";
        case Values::quarters: return "quarters";
        case Values::small_ints: return "small ints";
        case Values::near_one: return "near one";
        case Values::positive: return "positive";
    }
    return "?";
}

// A value of kind v, exactly representable in T (returned as T).
template <class T>
T draw(Rng& r, Values v) {
    double x = 0;
    if constexpr (std::is_same_v<T, bool>) {
        return r.chance(0.5);
    } else if constexpr (is_floating<T>) {
        switch (v) {
            case Values::uniform: x = r.uniform(-2.0, 2.0); break;
            case Values::quarters: x = std::round(r.uniform(-4.0, 4.0) * 4.0) / 4.0; break;
            case Values::small_ints: x = double(r.between(-3, 3)); break;
            case Values::near_one: x = r.uniform(0.7, 1.3); break;
            case Values::positive: x = r.uniform(0.1, 3.0); break;
        }
    } else {
        switch (v) {
            case Values::uniform: x = double(r.between(-60, 60)); break;
            case Values::quarters: x = double(r.between(-4, 4)); break;
            case Values::small_ints: x = double(r.between(-3, 3)); break;
            case Values::near_one: x = double(r.pick(std::vector<int>{1, 1, 1, -1, 2})); break;
            case Values::positive: x = double(r.between(1, 9)); break;
        }
    }
    return ops::cast<T>(x);
}

// A tensor the op reads or writes, with the values of its whole base storage on the host and the
// model of its layout, so references read exactly the elements the view covers.
template <class T>
struct Operand {
    Tensor<T> t;
    std::vector<double> base;
    HostLayout layout;
    std::string views;
    Values values = Values::uniform;

    double at(std::int64_t flat) const { return base[std::size_t(layout.storage_index(flat))]; }
    std::vector<double> all() const {
        std::vector<double> v(std::size_t(layout.numel()));
        for (std::size_t i = 0; i < v.size(); ++i) v[i] = at(std::int64_t(i));
        return v;
    }
    Dims shape() const { return layout.shape; }
    std::string text() const { return describe(t) + " (" + values_name(values) + (views.empty() ? "" : ", " + views) + ")"; }
};

struct OperandSpec {
    bool expand = true;          // broadcast views allowed (not for outputs)
    int max_views = 3;
    Values values = Values::uniform;
    MemorySpace space = MemorySpace::device;
    bool on_step_stream = false; // made on the step's stream even when inputs come from another
};

// The largest base storage a view chain may ask for, in elements.
inline constexpr std::int64_t base_cap = 400000;

// A random chain of views that yields shape `want`, generated backwards from it; returns the ops in
// the order they are applied and sets `base` to the shape the chain starts from.
std::vector<ViewOp> random_views(Rng& r, const Dims& want, bool allow_expand, int max_views, Dims& base);

template <class T>
Operand<T> make_operand(Step& st, const Dims& want, OperandSpec spec) {
    Operand<T> op;
    op.values = spec.values;
    Dims base_shape;
    const std::vector<ViewOp> chain = random_views(st.rng, want, spec.expand, spec.max_views, base_shape);
    const std::int64_t n = count(base_shape);
    tessel::detail::HostArray<T> h(static_cast<std::size_t>(n));
    op.base.resize(std::size_t(n));
    for (std::size_t i = 0; i < std::size_t(n); ++i) {
        h.data()[i] = draw<T>(st.rng, spec.values);
        op.base[i] = to_double(h.data()[i]);
    }
    const rt::stream_t s = spec.on_step_stream || spec.space != MemorySpace::device ? st.stream() : st.input_stream();
    op.t = from_host<T>(h.span(), shape_of(base_shape), TensorOptions{.space = spec.space, .stream = s});
    if (spec.space == MemorySpace::device && s != st.stream() && n > 0) memory::record_stream(op.t.storage()->data(), st.stream());
    op.layout = HostLayout::contiguous(base_shape);
    for (const ViewOp& v : chain) {
        const std::string before = describe(op.t);
        op.t = v.apply(op.t);
        op.layout = v.apply(op.layout);
        op.views += (op.views.empty() ? "" : ".") + v.text();
        check_layout(op.t, op.layout, "view " + v.text() + " of " + before);
    }
    if (chain.size() > 0) op.views = "base " + dims_text(base_shape) + "." + op.views;
    return op;
}

// ---- shapes -------------------------------------------------------------------------------------

// A random shape of rank in [lo, hi]: sizes mostly small, 1 often, 0 sometimes, up to about 70, with
// at most `cap` elements.
Dims random_shape(Rng& r, int lo = 0, int hi = 4, std::int64_t cap = 4096);
// A shape that broadcasts to `to` (NumPy rule): leading dims dropped or sizes set to 1 at random.
Dims broadcast_source(Rng& r, const Dims& to);
// Rarely a long shape (the kernels' split, shared-memory and cluster paths), else random_shape.
Dims step_shape(Rng& r, int lo = 0, int hi = 4);

// ---- reading results ----------------------------------------------------------------------------

// The whole storage of t copied to the host after `s` finished, bypassing tessel's gather (which
// the copy ops test), with t's elements taken in row-major order through its layout.
template <class T>
struct Readback {
    std::vector<unsigned char> raw;
    Layout layout;
    std::int64_t storage_elements = 0;

    // A bool's byte is read as it is, so a poison byte (0xFF, 0x5A) is neither false nor true.
    T element(std::int64_t storage_index) const requires(!std::is_same_v<T, bool>) {
        T v;
        std::memcpy(&v, raw.data() + std::size_t(storage_index) * sizeof(T), sizeof(T));
        return v;
    }
    auto at(std::int64_t flat) const {
        std::int64_t at = layout.offset;
        for (int d = layout.rank(); d-- > 0;) {
            at += (flat % layout.shape[d]) * layout.strides[d];
            flat /= layout.shape[d];
        }
        return element(at);
    }
    unsigned char element(std::int64_t storage_index) const requires std::is_same_v<T, bool> { return raw[std::size_t(storage_index)]; }
    std::vector<double> doubles() const {
        std::vector<double> v(std::size_t(layout.numel()));
        for (std::size_t i = 0; i < v.size(); ++i) v[i] = to_double(at(std::int64_t(i)));
        return v;
    }
    std::vector<std::int64_t> ints() const {
        std::vector<std::int64_t> v(std::size_t(layout.numel()));
        for (std::size_t i = 0; i < v.size(); ++i) v[i] = to_int(at(std::int64_t(i)));
        return v;
    }
    // Storage indices no element of the layout covers.
    std::vector<std::int64_t> uncovered() const {
        std::vector<char> hit(std::size_t(storage_elements), 0);
        for (std::int64_t i = 0; i < layout.numel(); ++i) {
            std::int64_t at = layout.offset, flat = i;
            for (int d = layout.rank(); d-- > 0;) {
                at += (flat % layout.shape[d]) * layout.strides[d];
                flat /= layout.shape[d];
            }
            hit[std::size_t(at)] = 1;
        }
        std::vector<std::int64_t> out;
        for (std::size_t k = 0; k < hit.size(); ++k)
            if (!hit[k]) out.push_back(std::int64_t(k));
        return out;
    }
};

template <class T>
Readback<T> read_back(const Tensor<T>& t, rt::stream_t s) {
    Readback<T> r;
    r.layout = t.layout();
    const Storage& storage = *t.storage();
    r.raw.resize(storage.bytes());
    r.storage_elements = std::int64_t(storage.bytes() / sizeof(T));
    if (storage.bytes() == 0) return r;
    if (is_plain_host(storage.space())) {
        rt::stream_synchronize(s);  // a non-blocking copy into pinned memory may still be queued
        std::memcpy(r.raw.data(), storage.data(), storage.bytes());
    } else {
        rt::memcpy_async(r.raw.data(), storage.data(), storage.bytes(), s);
        rt::stream_synchronize(s);
    }
    return r;
}

// ---- checks -------------------------------------------------------------------------------------

inline std::string index_text(std::int64_t flat, const Dims& shape) {
    Dims idx(shape.size());
    for (std::size_t d = shape.size(); d-- > 0;) {
        idx[d] = shape[d] ? flat % shape[d] : 0;
        flat = shape[d] ? flat / shape[d] : 0;
    }
    return dims_text(idx);
}

// actual against expected within tol, element by element: NaN must meet NaN, an infinity its equal,
// and a value beyond `largest` (the output type's largest finite value) may have become infinite.
void compare(const std::string& what, const Dims& shape, const std::vector<double>& actual, const std::vector<double>& expected,
             const std::vector<double>& tol, double largest = std::numeric_limits<double>::max());
void compare_exact(const std::string& what, const Dims& shape, const std::vector<std::int64_t>& actual,
                   const std::vector<std::int64_t>& expected);
void check_shape(const std::string& what, const Shape& actual, const Dims& expected);

// Makes the next allocation of `bytes` on `s` likely to come out filled with `byte` (Step::poison_byte):
// a block of that size is taken from the cache, filled and returned, and best fit hands it to the
// next request of that size on that stream.
inline void poison_next(std::size_t bytes, rt::stream_t s, int byte) {
    if (bytes == 0) return;
    void* p = memory::allocate(bytes, s);
    rt::memset_async(p, byte, bytes, s);
    memory::deallocate(p);
}
// The same for the next several allocations, held at once so that each takes a block of its own: an
// op that copies inputs (a strided weight, a transposed x) allocates those copies before its output.
inline void poison_next(const std::vector<std::size_t>& sizes, rt::stream_t s, int byte) {
    std::vector<void*> held;
    for (const std::size_t bytes : sizes) {
        if (bytes == 0) continue;
        held.push_back(memory::allocate(bytes, s));
        rt::memset_async(held.back(), byte, bytes, s);
    }
    for (void* p : held) memory::deallocate(p);
}
template <class T>
void poison_storage(const Tensor<T>& t, rt::stream_t s) {
    const Storage& storage = *t.storage();
    if (storage.bytes() == 0) return;
    if (is_plain_host(storage.space())) std::memset(storage.data(), 0xFF, storage.bytes());
    else rt::memset_async(storage.data(), 0xFF, storage.bytes(), s);
}
// Every storage element of `r` outside its layout still holds the poison (all bytes 0xFF).
template <class T>
void check_untouched(const std::string& what, const Readback<T>& r) {
    for (std::int64_t k : r.uncovered()) {
        for (std::size_t b = 0; b < sizeof(T); ++b)
            if (r.raw[std::size_t(k) * sizeof(T) + b] != 0xFF)
                check_failed(what, ": storage element ", k, " outside the output view (", r.layout.to_string(), ") was written");
    }
}

// The kinds of error a bad input may raise.
enum class Want { invalid_argument, unsupported, out_of_memory };

// The message of the last error expect_error caught, for --verbose.
std::string& last_error_message();

// Runs f, which must throw the tessel error `want`; anything else (no error, another tessel type,
// a non-tessel exception) is a Mismatch.
template <class F>
void expect_error(Step& st, Want want, const std::string& what, F&& f) {
    static const char* names[] = {"InvalidArgument", "Unsupported", "OutOfMemoryError"};
    st.note("expect ", names[int(want)], ": ", what);
    const char* got = nullptr;
    std::string message;
    try {
        f();
    } catch (const InvalidArgument& e) {
        got = names[0], message = e.what();
    } catch (const Unsupported& e) {
        got = names[1], message = e.what();
    } catch (const OutOfMemoryError& e) {
        got = names[2], message = e.what();
    } catch (const CudaError& e) {
        check_failed(what, ": expected ", names[int(want)], ", got CudaError (the bad input reached the runtime unchecked): ", e.what());
    } catch (const Error& e) {
        check_failed(what, ": expected ", names[int(want)], ", got another tessel::Error: ", e.what());
    } catch (const std::exception& e) {
        check_failed(what, ": expected ", names[int(want)], ", got a non-tessel exception (", typeid(e).name(), "): ", e.what());
    }
    if (!got) check_failed(what, ": expected ", names[int(want)], " but it was accepted");
    if (got != names[int(want)]) check_failed(what, ": expected ", names[int(want)], ", got ", got, ": ", message);
    last_error_message() = message;
}

// ---- the families ---------------------------------------------------------------------------------

// Each runs one step of its family, valid or invalid as st.invalid says, and throws a Mismatch on
// any disagreement.
void elementwise_step(Step& st);
void reduce_step(Step& st);
void rows_step(Step& st);
void copy_step(Step& st);
void sort_step(Step& st);
void random_step(Step& st);
void view_step(Step& st);
void chain_step(Step& st);  // with the float32 element-wise steps, whose kernels it reuses

// A random element type among those the family supports, dispatched to f.template operator()<T>().
template <class F>
void with_type(DType d, F&& f) {
    switch (d) {
        case DType::f32: f.template operator()<float>(); break;
        case DType::f64: f.template operator()<double>(); break;
        case DType::f16: f.template operator()<__half>(); break;
        case DType::bf16: f.template operator()<__nv_bfloat16>(); break;
        case DType::i32: f.template operator()<std::int32_t>(); break;
        case DType::i64: f.template operator()<std::int64_t>(); break;
        default: check_failed("fuzzer: no dispatch for dtype ", dtype_name(d));
    }
}
template <class F>
void with_float_type(DType d, F&& f) {
    switch (d) {
        case DType::f32: f.template operator()<float>(); break;
        case DType::f64: f.template operator()<double>(); break;
        case DType::f16: f.template operator()<__half>(); break;
        case DType::bf16: f.template operator()<__nv_bfloat16>(); break;
        default: check_failed("fuzzer: no floating dispatch for dtype ", dtype_name(d));
    }
}
inline DType any_type(Rng& r) { return r.pick(std::vector<DType>{DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64}); }
inline DType float_type(Rng& r) { return r.pick(std::vector<DType>{DType::f32, DType::f64, DType::f16, DType::bf16}); }

}  // namespace fuzz
