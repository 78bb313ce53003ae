// The second translation unit of the header-only program (main.cpp).
#include <tessel/tessel.hpp>

double fused_dot(const tessel::Tensor<float>& a, const tessel::Tensor<float>& b) { return double(tessel::sum(a * b).item()); }
