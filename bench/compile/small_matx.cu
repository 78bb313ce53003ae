// The compile-time benchmark's program written with MatX (docs/compile-time.md); bench/compile/small_tessel.cu
// is the same with tessel.
#include <matx.h>
int main() {
  auto a = matx::make_tensor<float>({1000, 1000});
  auto b = matx::make_tensor<float>({1000, 1000});
  auto c = matx::make_tensor<float>({1000, 1000});
  (a = matx::ones<float>({1000, 1000})).run();
  (b = matx::ones<float>({1000, 1000})).run();
  (c = a * b + 1.0f).run();
  (c = matx::matmul(a, b)).run();
  (c = matx::exp(a) * 2.0f).run();
  cudaDeviceSynchronize();
  return 0;
}
