// Element-wise steps on float32 and int32 (the widest set of forms), the family's dispatch, and the
// chain family (element-wise ops handed from stream to stream), which reuses the float32 kernels.
#include "fuzz_elementwise.hpp"

namespace fuzz {

void elementwise_f32_i32(Step& st, bool integer) {
    using namespace ew;
    if (integer) {
        if (st.invalid) invalid_step<std::int32_t>(st);
        else pair_step<std::int32_t, std::int32_t, mul_add | max_min | where_select | divide | modulo | power | comparison | clamped | add_in_place |
                                                       mul_in_place | self_mul_add>(st);
    } else {
        if (st.invalid) invalid_step<float>(st);
        else pair_step<float, float, mul_add | max_min | where_select | divide | modulo | math | power | comparison | clamped | add_in_place |
                                         mul_in_place | self_mul_add>(st);
    }
}

void elementwise_step(Step& st) {
    st.family = "elementwise";
    switch (st.invalid ? int(st.rng.between(0, 2)) : st.rng.weighted({3.5, 2, 2, 2.5})) {
        case 0: elementwise_f32_i32(st, st.rng.chance(0.5)); break;
        case 1: elementwise_f64_i64(st, st.rng.chance(0.5)); break;
        case 2: elementwise_f16_bf16(st, st.rng.chance(0.5)); break;
        default: elementwise_mixed(st); break;
    }
}

namespace {

// An event that records where one stream is and makes another wait for it.
struct Handoff {
    rt::event_t event = rt::event_create(false);
    Handoff() = default;
    Handoff(const Handoff&) = delete;
    Handoff& operator=(const Handoff&) = delete;
    ~Handoff() { rt::event_destroy(event); }
    void order(rt::stream_t from, rt::stream_t to) {
        rt::event_record(event, from);
        rt::stream_wait_event(to, event);
    }
};

// Declares that `s` reads t (allocated for another stream), so its memory waits for s when freed.
void used_on(const Tensor<float>& t, rt::stream_t s) {
    if (t.numel() > 0 && t.space() == MemorySpace::device) memory::record_stream(t.storage()->data(), s);
}

// Misuses of the allocator that it must reject without corrupting its state (the driver checks
// its statistics afterwards): freeing a pointer twice or one it never handed out, recording a
// stream on memory it does not own, an impossible memory fraction.
void allocator_misuse(Step& st) {
    const auto n = st.rng.between(2, 5000);
    const Tensor<float> t = empty<float>({n}, {.stream = st.stream()});
    st.note("a device tensor of ", n, " float32");
    switch (st.rng.between(0, 4)) {
        case 0: {
            st.op = "deallocate twice";
            void* p = memory::allocate(std::size_t(n) * 4, st.stream());
            memory::deallocate(p);
            expect_error(st, Want::invalid_argument, "deallocate(p) again", [&] { memory::deallocate(p); });
            break;
        }
        case 1:
            st.op = "deallocate an interior pointer";
            expect_error(st, Want::invalid_argument, "deallocate(t.data() + 1)", [&] { memory::deallocate(t.data() + 1); });
            break;
        case 2:
            st.op = "record_stream of an interior pointer";
            expect_error(st, Want::invalid_argument, "record_stream(t.data() + 1, s)", [&] { memory::record_stream(t.data() + 1, st.stream()); });
            break;
        case 3: {
            st.op = "record_stream of host memory";
            const Tensor<float> h = empty<float>({n}, {.space = MemorySpace::host});
            expect_error(st, Want::invalid_argument, "record_stream(host pointer, s)", [&] { memory::record_stream(h.data(), st.stream()); });
            break;
        }
        default: {
            st.op = "set_memory_fraction out of (0, 1]";
            const double f = st.rng.pick(std::vector<double>{0.0, -0.5, 1.5, std::nan("")});
            // The pool allocator has no fraction at all.
            const Want want = memory::backend() == memory::Backend::native ? Want::invalid_argument : Want::unsupported;
            expect_error(st, want, "set_memory_fraction(" + std::to_string(f) + ")", [&] { memory::set_memory_fraction(f); });
            break;
        }
    }
}

}  // namespace

// A chain of element-wise ops over three streams, each ordered after the previous by an event and
// recorded as a user of the memory it reads: y1 = a * b + 1 on the step's stream; y2 = y1 * c + 1
// on a second stream, while y1's handle is dropped and a block of its size is taken and poisoned on
// the first stream (it must not be y1's memory before the second stream has read y1); y2 += d on
// a third stream. It reuses the float32 kernels of this file, so it costs no compile time.
void chain_step(Step& st) {
    using namespace ew;
    st.family = "chain";
    if (st.invalid) return allocator_misuse(st);
    st.op = "y1 = a * b + 1; y2 = y1 * c + 1; y2 += d, on three streams";
    Dims shape = step_shape(st.rng);
    if (known_issue_alias_size1_dims)
        for (auto& s : shape) s = s == 1 ? 2 : s;
    const Operand<float> a = make_operand<float>(st, shape, {.values = pick_values(st.rng)});
    const Operand<float> b = make_operand<float>(st, broadcast_source(st.rng, shape), {.values = pick_values(st.rng)});
    const Operand<float> c = make_operand<float>(st, broadcast_source(st.rng, shape), {.values = pick_values(st.rng)});
    const Operand<float> d = make_operand<float>(st, broadcast_source(st.rng, shape), {.values = pick_values(st.rng)});
    const Stream second = Stream::create();
    const Stream third = st.rng.chance(0.5) ? Stream::create(StreamOptions{.non_blocking = false}) : Stream();
    st.note(st.op, "; a: ", a.text(), ", b: ", b.text(), ", c: ", c.text(), ", d: ", d.text(), "; third stream ",
            third.is_default() ? "the default one" : "a blocking one");
    st.inputs_ready();
    const rt::stream_t s1 = st.stream(), s2 = second.handle(), s3 = third.handle();
    used_on(c.t, s2);
    used_on(d.t, s3);
    Handoff first_to_second, second_to_third;

    Tensor<float> y1 = evaluate(a.t * b.t + 1, s1);
    first_to_second.order(s1, s2);
    used_on(y1, s2);
    const Tensor<float> y2 = evaluate(y1 * c.t + 1, s2);
    const std::size_t bytes = std::size_t(y1.numel()) * sizeof(float);
    y1 = Tensor<float>{};
    void* reuse = memory::allocate(bytes, s1);
    if (bytes) rt::memset_async(reuse, 0xFF, bytes, s1);
    second_to_third.order(s2, s3);
    used_on(y2, s3);
    (y2 += d.t).run(s3);
    const Readback<float> r = read_back(y2, s3);
    rt::device_synchronize();
    memory::deallocate(reuse);

    const double u = roundoff<float>();
    const std::size_t n = std::size_t(count(shape));
    std::vector<double> expected(n), tol(n);
    for (std::size_t i = 0; i < n; ++i) {
        const auto f = std::int64_t(i);
        const double x = a.at(f), yb = b.at(ref::broadcast_index(f, shape, b.shape())), yc = c.at(ref::broadcast_index(f, shape, c.shape())),
                     yd = d.at(ref::broadcast_index(f, shape, d.shape()));
        const double m1 = std::fabs(x * yb) + 1, v1 = x * yb + 1, v2 = v1 * yc + 1;
        expected[i] = v2 + yd;
        // Each rounding of y1 carries through the product with c; then y2's two, then the sum's.
        tol[i] = 2 * u * m1 * std::fabs(yc) + 2 * u * (std::fabs(v1 * yc) + 1) + u * (std::fabs(v2) + std::fabs(yd)) + subnormal<float>();
    }
    compare("chain", shape, r.doubles(), expected, tol, max_finite<float>());
}

}  // namespace fuzz
