// Every kernel the library dispatches to, instantiated through the public API for the dtypes it
// serves, so that one device-only compile (nvcc -cubin -Xptxas -v) shows each instantiation's
// registers, spills, stack and shared memory, and its SASS. Nothing here is ever run:
// tools/kernel-report/report.py reads what the compiler made of it (docs/kernels.md).
// Expressions are types, so their kernels have no finite list: the ones here are the shapes the
// benchmarks measure (a*b+c, a cast, a unary function, a row broadcast, a strided operand).
#include <tessel/tessel.hpp>

#include <tessel/ops/amp.hpp>
#include <tessel/ops/quantize.hpp>
#include <tessel/ops/random.hpp>
#include <tessel/kernels/elementwise.cuh>
#include <tessel/kernels/mma_matmul.cuh>
#include <tessel/kernels/simt_matmul.cuh>
#include <tessel/kernels/tiled_matmul.cuh>

#include <span>

namespace report {

using tessel::Tensor;

template <class T>
void elementwise(Tensor<T>& d, const Tensor<T>& a, const Tensor<T>& b, const Tensor<T>& c, const Tensor<T>& row) {
    (d = a * b + c).run();
    (d = tessel::abs(a)).run();
    (d = a + row).run();                 // [M, N] + [N]: a row broadcast
    (d = a.transpose(0, 1) + b).run();   // a strided operand
    (d.transpose(0, 1) = a * b).run();   // a strided output
    d.transpose(0, 1).copy_(a);          // a copy into a strided view
    d = tessel::full<T>(d.shape(), T(1));
}

template <class T>
void reductions(const Tensor<T>& x, const Tensor<T>& y) {
    (void)tessel::sum(x);
    (void)tessel::sum(x, {1});
    (void)tessel::sum(x, {0});
    (void)tessel::amax(x, {1});
    (void)tessel::argmax(x, {1});
    (void)tessel::mean(x, {1});
    (void)tessel::var(x, {1});
    (void)tessel::sum(x * y);  // a fused map-reduce
}

template <class T>
void rows(const Tensor<T>& x, const Tensor<T>& w, const Tensor<T>& b) {
    (void)tessel::softmax(x);
    (void)tessel::log_softmax(x);
    (void)tessel::layer_norm(x, w, b);
    (void)tessel::rms_norm(x, w);
}

template <class T>
void copies(const Tensor<T>& x) {
    (void)x.transpose(0, 1).contiguous();
    (void)x.permute({2, 0, 1}).contiguous();
}

template <class T>
void floats(const Tensor<T>& x, unsigned* found) {
    const Tensor<T> list[] = {x};
    tessel::unscale_and_check(std::span<const Tensor<T>>(list), 0.5f, found, nullptr);
    tessel::uniform_fill(x, 1);
    tessel::normal_fill(x, 2);
}

template <class T, class To>
void cast(Tensor<To>& y, const Tensor<T>& x) {
    (y = tessel::cast_to<To>(x)).run();
}

// kernels::map, the public kernel for a user's own functor.
struct Scale {
    __host__ __device__ float operator()(float x) const { return 2.0f * x; }
};
void map(std::size_t n, float* out, const float* in) {
    tessel::launch(tessel::kernels::map<Scale, float, float>, 132, 256, 0, nullptr, n, Scale{}, out, in);
}

template <class T, class Acc>
void matmul(int m, int n, int k, const T* a, const T* b, T* c) {
    using Tile = tessel::kernels::MatmulTile<64, 64, 16, 4, 4>;
    tessel::launch(tessel::kernels::tiled_matmul<T, Acc, Tile>, Tile::grid(m, n), Tile::block(), 0, nullptr, m, n, k, Acc(1), a, k, b, n,
                   Acc(0), c, n);
}

// The tensor-core product in the tile shapes the tests run (64 x 64 / 3 stages, 128 x 128 / 4); tf32
// and int8 take B by columns only.
template <class T, class Out, class Tile, class Acc = float>
void mma_matmul(int m, int n, int k, const T* a, const T* b, Out* c) {
    constexpr bool scaled = std::is_same_v<T, std::int8_t> && !std::is_same_v<Out, int>;  // as tessel::matmul instantiates it
    using Epilogue = tessel::kernels::GemmEpilogue<Acc, Out, scaled>;
    if constexpr (sizeof(T) == 2)
        tessel::launch(tessel::kernels::mma_matmul<T, Out, Tile, false, Epilogue>, Tile::grid(m, n), Tile::block(), Tile::smem_bytes(),
                       nullptr, m, n, k, a, k, std::int64_t(0), b, n, std::int64_t(0), c, n, std::int64_t(0), 1, Epilogue{});
    tessel::launch(tessel::kernels::mma_matmul<T, Out, Tile, true, Epilogue>, Tile::grid(m, n), Tile::block(), Tile::smem_bytes(), nullptr,
                   m, n, k, a, k, std::int64_t(0), b, k, std::int64_t(0), c, n, std::int64_t(0), 1, Epilogue{});
}

// The SIMT product in the configurations tessel::matmul picks, with and without 16-byte loads.
template <class T, class Tile>
void simt_matmul(int m, int n, int k, const T* a, const T* b, T* c) {
    tessel::launch(tessel::kernels::simt_matmul<T, Tile, true>, Tile::grid(m, n), Tile::block(), 0, nullptr, m, n, k, a, k,
                   std::int64_t(0), b, n, std::int64_t(0), c, n, std::int64_t(0), 1, tessel::kernels::GemmEpilogue<T, T>{});
    tessel::launch(tessel::kernels::simt_matmul<T, Tile, false>, Tile::grid(m, n), Tile::block(), 0, nullptr, m, n, k, a, k,
                   std::int64_t(0), b, n, std::int64_t(0), c, n, std::int64_t(0), 1, tessel::kernels::GemmEpilogue<T, T>{});
}

template <class T>
void every_family(Tensor<T>& d, const Tensor<T>& a, unsigned* found) {
    elementwise(d, a, a, a, a);
    reductions(a, a);
    copies(a);
    if constexpr (tessel::ops::is_float_type<T>) {
        rows(a, a, a);
        floats(a, found);
    }
}

// The dtypes the benchmarks and the PyTorch comparison use; int8 and double stand for the 1- and
// 8-byte element sizes (fp8 for the rows).
void instantiate(unsigned* found) {
    auto f32 = tessel::empty<float>({1, 1});
    auto f16 = tessel::empty<__half>({1, 1});
    auto bf16 = tessel::empty<__nv_bfloat16>({1, 1});
    auto f64 = tessel::empty<double>({1, 1});
    auto i32 = tessel::empty<std::int32_t>({1, 1});
    auto i8 = tessel::empty<std::int8_t>({1, 1});
    every_family(f32, f32, found);
    every_family(f16, f16, found);
    every_family(bf16, bf16, found);
    every_family(f64, f64, found);
    every_family(i32, i32, found);
    copies(i8);
    // fp8 rows: the only row kernels of 16 values a vector (their two-read path once spilled).
    auto f8 = tessel::empty<__nv_fp8_e4m3>({1, 1});
    rows(f8, f8, f8);
    cast(bf16, f32);
    cast(f32, bf16);
    map(1, nullptr, nullptr);
    matmul<float, float>(1, 1, 1, nullptr, nullptr, nullptr);
    matmul<__half, float>(1, 1, 1, nullptr, nullptr, nullptr);
    using MmaLarge = tessel::kernels::MmaTile<128, 128, 2, 2, 4>;
    using MmaSmall = tessel::kernels::MmaTile<64, 64, 2, 2, 3>;
    mma_matmul<__nv_bfloat16, float, MmaLarge>(1, 1, 1, nullptr, nullptr, static_cast<float*>(nullptr));
    mma_matmul<__nv_bfloat16, __nv_bfloat16, MmaLarge>(1, 1, 1, nullptr, nullptr, static_cast<__nv_bfloat16*>(nullptr));
    mma_matmul<__half, __half, MmaSmall>(1, 1, 1, nullptr, nullptr, static_cast<__half*>(nullptr));
    mma_matmul<float, float, MmaLarge>(1, 1, 1, nullptr, nullptr, static_cast<float*>(nullptr));
    mma_matmul<std::int8_t, int, MmaLarge, int>(1, 1, 1, nullptr, nullptr, static_cast<int*>(nullptr));
    mma_matmul<std::int8_t, std::int8_t, MmaLarge>(1, 1, 1, nullptr, nullptr, static_cast<std::int8_t*>(nullptr));
    mma_matmul<std::int8_t, __nv_bfloat16, MmaSmall>(1, 1, 1, nullptr, nullptr, static_cast<__nv_bfloat16*>(nullptr));
    simt_matmul<float, tessel::kernels::SimtTile<float, 128, 128, 8, 8, 8>>(1, 1, 1, nullptr, nullptr, nullptr);
    simt_matmul<float, tessel::kernels::SimtTile<float, 64, 64, 16, 4, 4>>(1, 1, 1, nullptr, nullptr, nullptr);
    simt_matmul<double, tessel::kernels::SimtTile<double, 64, 64, 8, 4, 4>>(1, 1, 1, nullptr, nullptr, nullptr);
    // The epilogue on its own, after a library GEMM (fp32 product into a bf16 output, and in place).
    tessel::launch(tessel::kernels::gemm_epilogue_apply<float, float, __nv_bfloat16>, 132, 256, 0, nullptr, std::int64_t(1), 1, 1,
                   static_cast<const float*>(nullptr), 1, std::int64_t(0), static_cast<__nv_bfloat16*>(nullptr), 1, std::int64_t(0),
                   tessel::kernels::GemmEpilogue<float, __nv_bfloat16>{});
    tessel::launch(tessel::kernels::gemm_epilogue_apply<float, float, float>, 132, 256, 0, nullptr, std::int64_t(1), 1, 1,
                   static_cast<const float*>(nullptr), 1, std::int64_t(0), static_cast<float*>(nullptr), 1, std::int64_t(0),
                   tessel::kernels::GemmEpilogue<float, float>{});
    // Dequantising epilogues: an int8 product's int32 into int8, an fp8 product's fp32 with row and column scales.
    tessel::launch(tessel::kernels::gemm_epilogue_apply<int, float, std::int8_t, true>, 132, 256, 0, nullptr, std::int64_t(1), 1, 1,
                   static_cast<const int*>(nullptr), 1, std::int64_t(0), static_cast<std::int8_t*>(nullptr), 1, std::int64_t(0),
                   tessel::kernels::GemmEpilogue<float, std::int8_t, true>{});
    tessel::launch(tessel::kernels::gemm_epilogue_apply<float, float, __nv_bfloat16, true>, 132, 256, 0, nullptr, std::int64_t(1), 1, 1,
                   static_cast<const float*>(nullptr), 1, std::int64_t(0), static_cast<__nv_bfloat16*>(nullptr), 1, std::int64_t(0),
                   tessel::kernels::GemmEpilogue<float, __nv_bfloat16, true>{});
}

}  // namespace report
