// Must compile: what the two refusals beside it leave allowed (the harness's control: a snippet that
// fails for another reason would pass as a refusal without it).
// expect: (compiles)
#include <tessel/tessel.hpp>

void f(const tessel::Tensor<bool>& a, const tessel::Tensor<bool>& b, const tessel::Tensor<int>& i) {
    (void)tessel::evaluate(!a);
    (void)tessel::evaluate(a != b);
    (void)tessel::evaluate(a - i);
    (void)tessel::evaluate(-i);
}
