// Every inline-PTX wrapper of tessel/core/ptx.hpp in one kernel, for ptxas to assemble: the library's
// kernels (kernels.cu) use most of them, the sim's tests the rest (ldmatrix x1/x2, cp.async 4-byte,
// wait_all), and CI compiles the tests to PTX only (scripts/test.sh without a GPU), so a malformed
// instruction in a wrapper only the tests use fails here instead of on the first GPU build. Not
// part of the report (compile.sh discards its ptxas output); nothing here is ever run.
#include <tessel/core/ptx.hpp>

#include <cstdint>

namespace report {

__global__ void every_ptx_wrapper(const std::uint32_t* g, std::uint32_t* out) {
    namespace ptx = tessel::ptx;
    __shared__ __align__(16) std::uint32_t tile[32 * 4];
    const unsigned lane = threadIdx.x % 32;
    ptx::cp_async_16(&tile[lane * 4], g + lane * 4);
    ptx::cp_async_4(&tile[lane], g + lane, 0);
    ptx::cp_async_commit();
    ptx::cp_async_wait<0>();
    ptx::cp_async_wait<1>();
    ptx::cp_async_wait_all();
    __syncthreads();
    std::uint32_t a[4], at[4], b2[2], b2t[2], b1[1], b1t[1];
    const void* row = &tile[(lane % 8) * 4];
    ptx::ldmatrix<4>(a, row);
    ptx::ldmatrix<4, true>(at, row);
    ptx::ldmatrix<2>(b2, row);
    ptx::ldmatrix<2, true>(b2t, row);
    ptx::ldmatrix<1>(b1, row);
    ptx::ldmatrix<1, true>(b1t, row);
    for (int i = 0; i < 4; ++i) a[i] ^= at[i];
    for (int i = 0; i < 2; ++i) b2[i] ^= b2t[i] ^ b1t[0];
    float c[4] = {0, 0, 0, 0}, d[4];
    ptx::mma_m16n8k16_bf16(d, a, b2, c);
    ptx::mma_m16n8k16_f16(c, a, b2, d);
    std::uint32_t t[4];
    for (int i = 0; i < 4; ++i) t[i] = ptx::cvt_rna_tf32(c[i]);
    ptx::mma_m16n8k8_tf32(d, t, b2, c);
    int ci[4] = {0, 0, 0, int(b1[0])}, di[4];
    ptx::mma_m16n8k32_s8(di, a, b2, ci);
    out[threadIdx.x] = std::uint32_t(di[0] + di[3]) + __float_as_uint(ptx::ex2_approx_ftz(d[0] + d[3]));
}

}  // namespace report
