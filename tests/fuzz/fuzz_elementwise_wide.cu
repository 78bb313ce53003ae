// Element-wise steps on float64 and int64.
#include "fuzz_elementwise.hpp"

namespace fuzz {

void elementwise_f64_i64(Step& st, bool integer) {
    using namespace ew;
    if (integer) {
        if (st.invalid) invalid_step<std::int64_t>(st);
        else pair_step<std::int64_t, std::int64_t, mul_add | where_select | divide | modulo | power | add_in_place | self_mul_add>(st);
    } else {
        if (st.invalid) invalid_step<double>(st);
        else pair_step<double, double, mul_add | where_select | divide | math | add_in_place | self_mul_add>(st);
    }
}

}  // namespace fuzz
