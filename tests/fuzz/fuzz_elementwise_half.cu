// Element-wise steps on float16 and bfloat16 (computed in float32, rounded once when stored).
#include "fuzz_elementwise.hpp"

namespace fuzz {

void elementwise_f16_bf16(Step& st, bool bfloat) {
    using namespace ew;
    if (bfloat) {
        if (st.invalid) invalid_step<__nv_bfloat16>(st);
        else pair_step<__nv_bfloat16, __nv_bfloat16, mul_add | where_select | divide | math | power | add_in_place | self_mul_add>(st);
    } else {
        if (st.invalid) invalid_step<__half>(st);
        else pair_step<__half, __half, mul_add | where_select | divide | math | add_in_place | self_mul_add | wide_out>(st);
    }
}

}  // namespace fuzz
