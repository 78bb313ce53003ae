// Element-wise steps mixing two element types: promotion (float16 with bfloat16 gives float32, an
// integer with a float the float, int64 with int32 int64), and in-place updates narrowing back.
#include "fuzz_elementwise.hpp"

namespace fuzz {

void elementwise_mixed(Step& st) {
    using namespace ew;
    switch (st.rng.between(0, 7)) {
        case 0: pair_step<float, double, mul_add | where_select | add_in_place>(st); break;
        case 1: pair_step<__half, float, mul_add | math | add_in_place>(st); break;
        case 2: pair_step<__half, __nv_bfloat16, mul_add | where_select>(st); break;
        case 3: pair_step<std::int32_t, float, mul_add | divide>(st); break;
        case 4: pair_step<std::int64_t, std::int32_t, mul_add | modulo | add_in_place>(st); break;
        case 5: pair_step<std::int32_t, __half, where_select | power>(st); break;
        case 6: pair_step<__nv_bfloat16, std::int64_t, mul_add | add_in_place>(st); break;
        default: pair_step<double, std::int32_t, divide | where_select>(st); break;
    }
}

}  // namespace fuzz
