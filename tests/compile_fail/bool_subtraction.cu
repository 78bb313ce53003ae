// Must not compile: bool - bool (torch and NumPy refuse it too; != is the exclusive or of masks).
// expect: bool - bool is not defined
#include <tessel/tessel.hpp>

void f(const tessel::Tensor<bool>& a, const tessel::Tensor<bool>& b) { (void)tessel::evaluate(a - b); }
