// Printing a tensor: Tensor::to_string and operator<<, PyTorch-style text (dtype, shape, place,
// the values, corners only when large). Included by tensor.hpp.
#pragma once

#include <ostream>
#include <sstream>
#include <string>

#include "tensor.hpp"

namespace tessel {

namespace detail {
template <class T>
void print_value(std::ostream& os, T v) {
    if constexpr (std::is_same_v<T, bool>) os << (v ? "true" : "false");
    else if constexpr (std::is_same_v<T, std::int8_t> || std::is_same_v<T, std::uint8_t>) os << int(v);
    else if constexpr (dtype_traits<T>::is_floating) os << double(convert<float>(v));
    else os << v;
}
}  // namespace detail

template <Element T>
std::string Tensor<T>::to_string(int edge) const {
    std::ostringstream os;
    os << "tensor(" << dtype_traits<T>::name << ", shape " << shape() << ", " << space_name(space());
    if (!is_plain_host(space())) os << " " << backend_name << ":" << device().index;
    os << ")\n";
    const Tensor<T> h = to_host();
    const T* p = h.data();
    const Shape& s = h.shape();
    // Recursive row-major print; dims longer than 2*edge show their first and last `edge` entries.
    auto rec = [&](auto&& self, int d, std::int64_t base, int indent) -> void {
        if (d == s.size()) {
            detail::print_value(os, p[base]);
            return;
        }
        std::int64_t stride = 1;
        for (int k = d + 1; k < s.size(); ++k) stride *= s[k];
        os << '[';
        for (std::int64_t i = 0; i < s[d]; ++i) {
            if (s[d] > 2 * edge && i == edge) {
                os << "...";
                i = s[d] - edge - 1;
                os << (d + 1 == s.size() ? ", " : ",\n" + std::string(std::size_t(indent + 1), ' '));
                continue;
            }
            self(self, d + 1, base + i * stride, indent + 1);
            if (i + 1 < s[d]) os << (d + 1 == s.size() ? ", " : ",\n" + std::string(std::size_t(indent + 1), ' '));
        }
        os << ']';
    };
    rec(rec, 0, 0, 0);
    return os.str();
}

template <Element T>
std::ostream& operator<<(std::ostream& os, const Tensor<T>& t) {
    return os << t.to_string();
}

}  // namespace tessel
