// Must not compile: -x of a bool tensor (torch and NumPy refuse it too; ! inverts a mask).
// expect: -x of a bool x is not defined
#include <tessel/tessel.hpp>

void f(const tessel::Tensor<bool>& mask) { (void)tessel::evaluate(-mask); }
