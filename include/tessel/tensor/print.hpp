// Printing a tensor: Tensor::to_string and operator<<, PyTorch-style text (dtype, shape, place,
// the values, corners only when large). Included by tensor.hpp.
#pragma once

#include <cmath>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "tensor.hpp"

namespace tessel {

namespace detail {
template <class T>
void print_value(std::ostream& os, T v) {
    if constexpr (std::is_same_v<T, bool>) os << (v ? "true" : "false");
    else if constexpr (std::is_same_v<T, std::int8_t> || std::is_same_v<T, std::uint8_t>) os << int(v);
    else if constexpr (dtype_traits<T>::is_floating) {
        const double d = convert<double>(v);  // not through float: 1e300 is no inf
        if (std::isnan(d)) os << "nan";  // whatever its sign bit (x86's 0/0 sets it: "-nan"), as torch prints it
        else os << d;
    }
    else os << v;
}
}  // namespace detail

template <Element T>
std::string Tensor<T>::to_string(int edge) const {
    require(edge >= 1, "to_string: edge = ", edge, "; it is how many entries each end of a long dim shows, at least 1");
    std::ostringstream os;
    os << "tensor(" << dtype_traits<T>::name << ", shape " << shape() << ", " << space_name(space());
    if (!is_plain_host(space())) os << " " << backend_name << ":" << device().index;
    os << ")\n";
    // Dims longer than 2 * edge show their first and last `edge` entries: only those are copied to
    // the host, a corner at a time (2^k copies for k long dims), so a huge view prints as PyTorch's do.
    const Shape& s = shape();
    const std::int64_t shown = 2 * std::int64_t(edge);
    Shape kept = s;
    std::vector<int> long_dims;
    for (int d = 0; d < s.size(); ++d)
        if (s[d] > shown) kept[d] = shown, long_dims.push_back(d);
    Tensor<T> h;
    if (long_dims.empty()) {
        h = to_host();
    } else {
        h = empty<T>(kept, TensorOptions{.space = MemorySpace::host});
        for (std::size_t corner = 0; corner < (std::size_t(1) << long_dims.size()); ++corner) {
            Tensor<T> from = *this, to = h;
            for (std::size_t j = 0; j < long_dims.size(); ++j) {
                const int d = long_dims[j];
                const bool tail = (corner >> j) & 1;
                from = from.narrow(d, tail ? s[d] - edge : 0, edge);
                to = to.narrow(d, tail ? edge : 0, edge);
            }
            to.copy_(from.to_host());  // with the copy kernels compiled in, only the corner's elements travel
        }
    }
    const T* p = h.data();
    auto rec = [&](auto&& self, int d, std::int64_t base, int indent) -> void {
        if (d == s.size()) {
            detail::print_value(os, p[base]);
            return;
        }
        std::int64_t stride = 1;  // in h, whose dims are `kept`
        for (int k = d + 1; k < s.size(); ++k) stride *= kept[k];
        const std::string separator = d + 1 == s.size() ? ", " : ",\n" + std::string(std::size_t(indent + 1), ' ');
        os << '[';
        for (std::int64_t i = 0; i < s[d]; ++i) {
            if (s[d] > shown && i == edge) {
                os << "..." << separator;
                i = s[d] - edge - 1;
                continue;
            }
            const std::int64_t at = s[d] > shown && i >= edge ? i - (s[d] - shown) : i;
            self(self, d + 1, base + at * stride, indent + 1);
            if (i + 1 < s[d]) os << separator;
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
