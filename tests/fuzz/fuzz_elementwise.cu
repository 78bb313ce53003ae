// Element-wise steps on float32 and int32 (the widest set of forms), and the family's dispatch.
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

}  // namespace fuzz
