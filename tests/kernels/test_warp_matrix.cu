// tessel::ptx against the PTX ISA: every mma.sync fragment layout pinned element by element, ldmatrix
// with and without .trans, cp.async groups and zero-fill, an ldmatrix + mma tile against a host
// product; on the sim also the misuse a GPU punishes (partial warps, lanes at different instructions,
// misaligned or non-shared addresses, reading a cp.async destination before its wait). The same
// tests run on a GPU, where they check the hardware against the same tables.
#include <tessel/core/ptx.hpp>
#include <tessel/runtime/device.hpp>
#include <tessel/runtime/launch.hpp>

#include <algorithm>
#include <bit>
#include <cstring>
#include <numeric>

#include "../support/device_array.hpp"

using tessel::testing::DeviceArray;

namespace {

enum class Op { f16, bf16, tf32, s8 };

// ---- the ISA's fragment tables, transcribed (PTX ISA 9.7.14.5.8-10) -----------------------------
// Each register of a fragment covers one 8-row tile of the operand; within it, lane l sits in row
// l/4 (groupID) and holds `per` consecutive elements starting at column (l%4)*per
// (threadID_in_group). A tile's origin per register, as the ISA's figures place them:
//   A (M x K): register r at (row 8*(r%2), col (r/2) * K/2)      [k16, k32: a0a1|a2a3|a4a5|a6a7 ...]
//   B (K x N, stored by columns): register r at k = r * K/2, n = l/4
//   C, D: element i at (row l/4 + 8*(i/2), col 2*(l%4) + i%2)
struct Coord {
    int row, col;
};
constexpr int k_of(Op op) { return op == Op::tf32 ? 8 : op == Op::s8 ? 32 : 16; }
constexpr int per_reg(Op op) { return op == Op::tf32 ? 1 : op == Op::s8 ? 4 : 2; }
constexpr int a_elements(Op op) { return 4 * per_reg(op); }
constexpr int b_elements(Op op) { return 2 * per_reg(op); }

Coord isa_a(Op op, int lane, int e) {
    const int per = per_reg(op), reg = e / per, within = e % per, K = k_of(op);
    return {8 * (reg % 2) + lane / 4, (reg / 2) * (K / 2) + (lane % 4) * per + within};
}
Coord isa_b(Op op, int lane, int e) {  // {k, n}
    const int per = per_reg(op), reg = e / per, within = e % per, K = k_of(op);
    return {reg * (K / 2) + (lane % 4) * per + within, lane / 4};
}
Coord isa_acc(int lane, int i) { return {lane / 4 + 8 * (i / 2), 2 * (lane % 4) + i % 2}; }

// Integer-valued element <-> its bits within a register.
std::uint32_t element_bits(Op op, int v) {
    switch (op) {
        case Op::f16: return __half_as_ushort(__float2half(float(v)));
        case Op::bf16: return std::bit_cast<std::uint32_t>(float(v)) >> 16;  // exact for |v| <= 256
        case Op::tf32: return std::bit_cast<std::uint32_t>(float(v));
        case Op::s8: return std::uint8_t(std::int8_t(v));
    }
    return 0;
}
void put(Op op, std::uint32_t* regs, int e, int v) {
    const int per = per_reg(op), bits = 32 / per, shift = (e % per) * bits;
    const std::uint32_t mask = per == 1 ? ~0u : ((1u << bits) - 1u) << shift;
    regs[e / per] = (regs[e / per] & ~mask) | (element_bits(op, v) << shift);
}
double acc_value(Op op, std::uint32_t bits) {
    return op == Op::s8 ? double(std::int32_t(bits)) : double(std::bit_cast<float>(bits));
}
std::uint32_t acc_bits(Op op, double v) {
    return op == Op::s8 ? std::uint32_t(std::int32_t(v)) : std::bit_cast<std::uint32_t>(float(v));
}

// One warp per block: block p reads its 32 lanes' A (4), B (2), C (4) registers and writes D (4).
template <Op O>
__global__ void mma_warps(const std::uint32_t* a, const std::uint32_t* b, const std::uint32_t* c, std::uint32_t* d) {
    const unsigned lane = threadIdx.x, p = blockIdx.x * 32 + lane;
    const std::uint32_t ra[4] = {a[p * 4], a[p * 4 + 1], a[p * 4 + 2], a[p * 4 + 3]};
    const std::uint32_t rb[2] = {b[p * 2], b[p * 2 + 1]};
    if constexpr (O == Op::s8) {
        const int rc[4] = {int(c[p * 4]), int(c[p * 4 + 1]), int(c[p * 4 + 2]), int(c[p * 4 + 3])};
        int rd[4];
        tessel::ptx::mma_m16n8k32_s8(rd, ra, rb, rc);
        for (int i = 0; i < 4; ++i) d[p * 4 + i] = std::uint32_t(rd[i]);
    } else {
        float rc[4], rd[4];
        for (int i = 0; i < 4; ++i) rc[i] = __uint_as_float(c[p * 4 + i]);
        if constexpr (O == Op::bf16) tessel::ptx::mma_m16n8k16_bf16(rd, ra, rb, rc);
        if constexpr (O == Op::f16) tessel::ptx::mma_m16n8k16_f16(rd, ra, rb, rc);
        if constexpr (O == Op::tf32) tessel::ptx::mma_m16n8k8_tf32(rd, ra, rb, rc);
        for (int i = 0; i < 4; ++i) d[p * 4 + i] = __float_as_uint(rd[i]);
    }
}

__global__ void tf32_rounding(const float* x, std::uint32_t* bits, float* d) {
    const unsigned lane = threadIdx.x;
    if (lane < 8) bits[lane] = tessel::ptx::cvt_rna_tf32(x[lane]);
    const std::uint32_t one_and_low = __float_as_uint(1.0f + 0x1p-11f + 0x1p-13f), one = __float_as_uint(1.0f);
    const std::uint32_t a[4] = {one_and_low, one_and_low, one_and_low, one_and_low}, b[2] = {one, one};
    const float c[4] = {0, 0, 0, 0};
    float r[4];
    tessel::ptx::mma_m16n8k8_tf32(r, a, b, c);
    for (int i = 0; i < 4; ++i) d[lane * 4 + i] = r[i];
}

// Registers of `warps` warps in, D registers out.
struct WarpRegs {
    std::vector<std::uint32_t> a, b, c;
    explicit WarpRegs(int warps) : a(std::size_t(warps) * 128), b(std::size_t(warps) * 64), c(std::size_t(warps) * 128) {}
};
template <Op O>
std::vector<std::uint32_t> run_mma(const WarpRegs& r, int warps) {
    DeviceArray<std::uint32_t> a(r.a), b(r.b), c(r.c), d(r.c.size());
    d.poison();
    tessel::launch(mma_warps<O>, warps, 32, 0, nullptr, a.data(), b.data(), c.data(), d.data());
    return d.download();
}
std::vector<std::uint32_t> run_mma_any(Op op, const WarpRegs& r, int warps) {
    switch (op) {
        case Op::f16: return run_mma<Op::f16>(r, warps);
        case Op::bf16: return run_mma<Op::bf16>(r, warps);
        case Op::tf32: return run_mma<Op::tf32>(r, warps);
        case Op::s8: return run_mma<Op::s8>(r, warps);
    }
    return {};
}

const char* op_name(Op op) {
    switch (op) {
        case Op::f16: return "f16 m16n8k16";
        case Op::bf16: return "bf16 m16n8k16";
        case Op::tf32: return "tf32 m16n8k8";
        case Op::s8: return "s8 m16n8k32";
    }
    return "?";
}

// D as a 16 x 8 matrix, read through the ISA's C/D table.
std::vector<double> d_matrix(Op op, const std::vector<std::uint32_t>& d, int warp) {
    std::vector<double> m(128, -1e300);
    for (int l = 0; l < 32; ++l)
        for (int i = 0; i < 4; ++i) {
            const Coord e = isa_acc(l, i);
            m[e.row * 8 + e.col] = acc_value(op, d[std::size_t(warp) * 128 + l * 4 + i]);
        }
    return m;
}

}  // namespace

TEST_CASE("mma.sync fragments sit where the PTX ISA's tables put them, element by element", "[kernels][ptx]") {
    if (tessel::device_count() == 0) return;
    for (Op op : {Op::f16, Op::bf16, Op::tf32, Op::s8}) {
        INFO(op_name(op));
        // A probes: one A element set to 1, B[k][n] = k + 1 (all n). D is then zero except the A
        // element's row, which holds its k + 1: the row and the value pin (row, col) of the element.
        const int na = 32 * a_elements(op);
        WarpRegs ra(na);
        for (int p = 0; p < na; ++p) {
            const int lane = p / a_elements(op), e = p % a_elements(op);
            put(op, &ra.a[std::size_t(p) * 128 + lane * 4], e, 1);
            for (int l = 0; l < 32; ++l)
                for (int j = 0; j < b_elements(op); ++j) put(op, &ra.b[std::size_t(p) * 64 + l * 2], j, isa_b(op, l, j).row + 1);
        }
        auto d = run_mma_any(op, ra, na);
        int wrong = 0;
        for (int p = 0; p < na; ++p) {
            const int lane = p / a_elements(op), e = p % a_elements(op);
            const Coord want = isa_a(op, lane, e);
            const auto m = d_matrix(op, d, p);
            for (int i = 0; i < 16; ++i)
                for (int n = 0; n < 8; ++n) {
                    const double expect = i == want.row ? want.col + 1 : 0;
                    if (m[i * 8 + n] != expect && wrong++ < 4)
                        FAIL_CHECK("A element a" << e << " of lane " << lane << " (ISA: row " << want.row << ", col " << want.col
                                                 << "): D[" << i << "][" << n << "] = " << m[i * 8 + n] << ", expected " << expect);
                }
        }
        CHECK(wrong == 0);

        // B probes: one B element set to 1, A[m][k] = k + 1: D is zero except the element's
        // column n, which holds its k + 1 in every row.
        const int nb = 32 * b_elements(op);
        WarpRegs rb(nb);
        for (int p = 0; p < nb; ++p) {
            const int lane = p / b_elements(op), e = p % b_elements(op);
            put(op, &rb.b[std::size_t(p) * 64 + lane * 2], e, 1);
            for (int l = 0; l < 32; ++l)
                for (int j = 0; j < a_elements(op); ++j) put(op, &rb.a[std::size_t(p) * 128 + l * 4], j, isa_a(op, l, j).col + 1);
        }
        d = run_mma_any(op, rb, nb);
        wrong = 0;
        for (int p = 0; p < nb; ++p) {
            const int lane = p / b_elements(op), e = p % b_elements(op);
            const Coord want = isa_b(op, lane, e);
            const auto m = d_matrix(op, d, p);
            for (int i = 0; i < 16; ++i)
                for (int n = 0; n < 8; ++n) {
                    const double expect = n == want.col ? want.row + 1 : 0;
                    if (m[i * 8 + n] != expect && wrong++ < 4)
                        FAIL_CHECK("B element b" << e << " of lane " << lane << " (ISA: k " << want.row << ", n " << want.col
                                                 << "): D[" << i << "][" << n << "] = " << m[i * 8 + n] << ", expected " << expect);
                }
        }
        CHECK(wrong == 0);
    }
}

TEST_CASE("mma.sync computes D = A * B + C on random integer-valued fragments exactly", "[kernels][ptx]") {
    if (tessel::device_count() == 0) return;
    std::mt19937 rng(20261202);
    for (Op op : {Op::f16, Op::bf16, Op::tf32, Op::s8}) {
        INFO(op_name(op));
        const int K = k_of(op), warps = 5;
        // |a|, |b| <= 8 and K <= 32: every partial sum is an integer below 2^11 + |c|, exact in fp32
        // and in every input type (bf16 holds integers to 256); int8 spans its whole range.
        const int lo = op == Op::s8 ? -128 : -8, hi = op == Op::s8 ? 127 : 8;
        std::uniform_int_distribution<int> val(lo, hi), cval(-1000, 1000);
        WarpRegs r(warps);
        std::vector<double> A(std::size_t(warps) * 16 * K), B(std::size_t(warps) * K * 8), C(std::size_t(warps) * 128);
        for (int w = 0; w < warps; ++w)
            for (int l = 0; l < 32; ++l) {
                for (int e = 0; e < a_elements(op); ++e) {
                    const int v = val(rng);
                    const Coord x = isa_a(op, l, e);
                    A[std::size_t(w) * 16 * K + x.row * K + x.col] = v;
                    put(op, &r.a[std::size_t(w) * 128 + l * 4], e, v);
                }
                for (int e = 0; e < b_elements(op); ++e) {
                    const int v = val(rng);
                    const Coord x = isa_b(op, l, e);
                    B[std::size_t(w) * K * 8 + x.row * 8 + x.col] = v;
                    put(op, &r.b[std::size_t(w) * 64 + l * 2], e, v);
                }
                for (int i = 0; i < 4; ++i) {
                    const int v = cval(rng);
                    const Coord x = isa_acc(l, i);
                    C[std::size_t(w) * 128 + x.row * 8 + x.col] = v;
                    r.c[std::size_t(w) * 128 + l * 4 + i] = acc_bits(op, v);
                }
            }
        const auto d = run_mma_any(op, r, warps);
        int wrong = 0;
        for (int w = 0; w < warps; ++w) {
            const auto m = d_matrix(op, d, w);
            for (int i = 0; i < 16; ++i)
                for (int n = 0; n < 8; ++n) {
                    double s = C[std::size_t(w) * 128 + i * 8 + n];
                    for (int k = 0; k < K; ++k) s += A[std::size_t(w) * 16 * K + i * K + k] * B[std::size_t(w) * K * 8 + k * 8 + n];
                    if (m[i * 8 + n] != s && wrong++ < 4)
                        FAIL_CHECK("warp " << w << " D[" << i << "][" << n << "] = " << m[i * 8 + n] << ", expected " << s);
                }
        }
        CHECK(wrong == 0);
    }
}

TEST_CASE("tf32 operands: cvt.rna rounds to 10 mantissa bits and mma reads no lower bit", "[kernels][ptx]") {
    if (tessel::device_count() == 0) return;
    // Ties go away from zero; just below a tie goes down.
    const std::vector<float> x = {1.0f + 0x1p-11f, -(1.0f + 0x1p-11f), 1.0f + 0x1p-12f, 1.0f + 0x1p-11f - 0x1p-23f,
                                  1.0f + 0x1p-10f + 0x1p-11f, 3.0f, -0.0f, 1e-40f};
    const std::vector<float> want = {1.0f + 0x1p-10f, -(1.0f + 0x1p-10f), 1.0f, 1.0f, 1.0f + 0x1p-9f, 3.0f, -0.0f, 0.0f};
    DeviceArray<float> in(x);
    DeviceArray<std::uint32_t> bits(32);
    DeviceArray<float> d(128);
    bits.poison();
    d.poison();
    tessel::launch(tf32_rounding, 1, 32, 0, nullptr, in.data(), bits.data(), d.data());
    const auto b = bits.download();
    for (std::size_t i = 0; i < x.size(); ++i) {
        INFO("x = " << x[i]);
        if (i == 7) CHECK(std::fabs(std::bit_cast<float>(b[i])) < 1e-39f);  // a subnormal stays subnormal (or flushes)
        else CHECK(std::bit_cast<float>(b[i]) == want[i]);
    }
    // An unrounded operand 1 + 2^-11 + 2^-13 counts as 1 (its bits below tf32's 10 are not read):
    // eight of them times B = 1 sum to exactly 8 (rounding would give 8 + 2^-7).
    for (float v : d.download()) CHECK(v == 8.0f);
}

TEST_CASE("tf32 cvt.rna keeps infinities and NaNs unrounded but truncated to tf32's bits", "[kernels][ptx]") {
    if (tessel::device_count() == 0) return;
    // As ptxas compiles cvt.rna.tf32.f32 for sm_90: no rounding add for |x| >= inf, the mask on
    // every input, so a NaN whose payload lies only in the 13 low bits becomes an infinity.
    const std::vector<std::uint32_t> x = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u,
                                          0xff801fffu, 0x7fffffffu, 0x7f7fffffu, 0x00800000u};
    const std::vector<std::uint32_t> want = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800000u,
                                             0xff800000u, 0x7fffe000u, 0x7f800000u, 0x00800000u};
    std::vector<float> xf(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) xf[i] = std::bit_cast<float>(x[i]);
    DeviceArray<float> in(xf);
    DeviceArray<std::uint32_t> bits(32);
    DeviceArray<float> d(128);
    bits.poison();
    tessel::launch(tf32_rounding, 1, 32, 0, nullptr, in.data(), bits.data(), d.data());
    const auto b = bits.download();
    for (std::size_t i = 0; i < x.size(); ++i) {
        INFO("x = 0x" << std::hex << x[i] << ", got 0x" << b[i] << ", want 0x" << want[i]);
        CHECK(b[i] == want[i]);  // FLT_MAX rounds up to the infinity (ties away, carry into the exponent)
    }
}

namespace {

// Lanes 8j..8j+7 point at rows perm[8j..8j+7] of a 32 x 8 table of 16-bit values in shared
// memory; every lane stores the registers it receives. Lanes whose address the instruction does not
// read (8N and up) pass a misaligned one, which must not matter.
template <int N, bool Trans>
__global__ void ldmatrix_rows(const std::uint16_t* table, const int* perm, std::uint32_t* out) {
    TESSEL_DYNAMIC_SHARED(std::uint16_t, s);
    const unsigned lane = threadIdx.x;
    for (int i = 0; i < 8; ++i) s[lane * 8 + i] = table[lane * 8 + i];
    __syncwarp();
    const void* row = lane < 8 * N ? static_cast<const void*>(s + perm[lane] * 8) : static_cast<const void*>(s + 1);
    std::uint32_t r[N];
    tessel::ptx::ldmatrix<N, Trans>(r, row);
    for (int j = 0; j < N; ++j) out[lane * 4 + j] = r[j];
}

template <int N, bool Trans>
void check_ldmatrix() {
    INFO("ldmatrix x" << N << (Trans ? " .trans" : ""));
    std::mt19937 rng(N * 2 + Trans);
    std::vector<std::uint16_t> table(256);
    for (int i = 0; i < 256; ++i) table[i] = std::uint16_t(0x1000 + i * 7);  // distinct values
    std::vector<int> perm(32);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    DeviceArray<std::uint16_t> t(table);
    DeviceArray<int> p(perm);
    DeviceArray<std::uint32_t> out(128);
    out.poison();
    tessel::launch(ldmatrix_rows<N, Trans>, 1, 32, 512, nullptr, t.data(), p.data(), out.data());
    const auto h = out.download();
    int wrong = 0;
    for (int l = 0; l < 32; ++l)
        for (int j = 0; j < N; ++j) {
            // Matrix j: row r is table row perm[8j + r]. Lane l: elements (l/4, 2(l%4) + h), or with
            // .trans (2(l%4) + h, l/4), h = 0 in the low half.
            auto at = [&](int r, int c) { return std::uint32_t(table[perm[8 * j + r] * 8 + c]); };
            const int g = l / 4, t2 = 2 * (l % 4);
            const std::uint32_t want = Trans ? at(t2, g) | at(t2 + 1, g) << 16 : at(g, t2) | at(g, t2 + 1) << 16;
            if (h[l * 4 + j] != want && wrong++ < 4)
                FAIL_CHECK("lane " << l << " register " << j << ": " << std::hex << h[l * 4 + j] << ", expected " << want);
        }
    CHECK(wrong == 0);
}

// One warp computes a 16 x 8 x 16 bf16 tile the way tensor-core kernels do: A (row-major) by
// ldmatrix.x4, B (stored k-major, [k][n]) by ldmatrix.x2.trans, then one mma.
__global__ void ldmatrix_mma_tile(const std::uint16_t* a, const std::uint16_t* b, float* d) {
    TESSEL_DYNAMIC_SHARED(std::uint16_t, s);
    std::uint16_t* sa = s;          // 16 x 16
    std::uint16_t* sb = s + 256;    // 16 x 8
    const unsigned lane = threadIdx.x;
    for (int i = 0; i < 8; ++i) sa[lane * 8 + i] = a[lane * 8 + i];
    for (int i = 0; i < 4; ++i) sb[lane * 4 + i] = b[lane * 4 + i];
    __syncwarp();
    std::uint32_t ra[4], rb[2];
    tessel::ptx::ldmatrix<4>(ra, sa + (lane % 16) * 16 + (lane / 16) * 8);
    tessel::ptx::ldmatrix<2, true>(rb, sb + (lane % 16) * 8);
    const float zero[4] = {0, 0, 0, 0};
    float rd[4];
    tessel::ptx::mma_m16n8k16_bf16(rd, ra, rb, zero);
    for (int i = 0; i < 4; ++i) d[(lane / 4 + 8 * (i / 2)) * 8 + 2 * (lane % 4) + i % 2] = rd[i];
}

}  // namespace

TEST_CASE("ldmatrix gives each lane the rows and columns the PTX ISA says, with and without .trans", "[kernels][ptx]") {
    if (tessel::device_count() == 0) return;
    check_ldmatrix<1, false>();
    check_ldmatrix<2, false>();
    check_ldmatrix<4, false>();
    check_ldmatrix<1, true>();
    check_ldmatrix<2, true>();
    check_ldmatrix<4, true>();
}

TEST_CASE("an ldmatrix + mma.sync tile matches the host product of random reals", "[kernels][ptx]") {
    if (tessel::device_count() == 0) return;
    const auto av = tessel::testing::random_vector<__nv_bfloat16>(256, 7);
    const auto bv = tessel::testing::random_vector<__nv_bfloat16>(128, 8);
    std::vector<std::uint16_t> ab(256), bb(128);
    std::memcpy(ab.data(), av.data(), 512);
    std::memcpy(bb.data(), bv.data(), 256);
    DeviceArray<std::uint16_t> a(ab), b(bb);
    DeviceArray<float> d(128);
    d.poison();
    tessel::launch(ldmatrix_mma_tile, 1, 32, 768, nullptr, a.data(), b.data(), d.data());
    std::vector<double> want(128), tol(128);
    for (int i = 0; i < 16; ++i)
        for (int n = 0; n < 8; ++n) {
            double s = 0, mag = 0;
            for (int k = 0; k < 16; ++k) {
                const double x = tessel::testing::to_double(av[i * 16 + k]) * tessel::testing::to_double(bv[k * 8 + n]);
                s += x;
                mag += std::fabs(x);
            }
            want[i * 8 + n] = s;
            // bf16 products are exact in fp32; 16 fp32 additions carry at most 16 * 2^-24 * sum|x|.
            tol[i * 8 + n] = 16 * 0x1p-24 * mag;
        }
    tessel::testing::check_close(d.download(), want, tol, "ldmatrix + mma tile");
}

namespace {

// Each thread copies its 16 bytes in two groups (first half of the source, then the second) and
// records what its destination holds at each step: before any wait, after wait_group 1 (the first
// group complete, the second not yet), after wait_group 0. Then zero-fill: src-size 0 and 8.
__global__ void cp_async_steps(const std::uint32_t* src, std::uint32_t* seen) {
    TESSEL_DYNAMIC_SHARED(std::uint32_t, s);
    const unsigned t = threadIdx.x;
    std::uint32_t* mine = s + t * 8;
    std::uint32_t* out = seen + t * 24;
    tessel::ptx::cp_async_16(mine, src + t * 8);
    tessel::ptx::cp_async_commit();
    tessel::ptx::cp_async_16(mine + 4, src + t * 8 + 4);
    tessel::ptx::cp_async_commit();
    for (int i = 0; i < 4; ++i) out[i] = mine[i];  // step 0: nothing waited for
    tessel::ptx::cp_async_wait<1>();
    for (int i = 0; i < 8; ++i) out[4 + i] = mine[i];  // step 1: first group only
    tessel::ptx::cp_async_wait<0>();
    for (int i = 0; i < 8; ++i) out[12 + i] = mine[i];  // step 2: both
    tessel::ptx::cp_async_16(mine, src, 0);     // predicated off: zeros, nothing read
    tessel::ptx::cp_async_16(mine + 4, src + t * 8, 8);  // 8 bytes read, 8 zero-filled
    tessel::ptx::cp_async_wait_all();
    out[20] = mine[0] | mine[1] | mine[2] | mine[3];     // zero-filled copy: 0
    out[21] = mine[4], out[22] = mine[5], out[23] = mine[6] | mine[7];
}

}  // namespace

TEST_CASE("cp.async completes by groups, zero-fills past src-size, and is poison until waited for", "[kernels][ptx]") {
    if (tessel::device_count() == 0) return;
    const int threads = 64;
    std::vector<std::uint32_t> src(threads * 8);
    for (std::size_t i = 0; i < src.size(); ++i) src[i] = std::uint32_t(i * 2654435761u + 1);
    DeviceArray<std::uint32_t> s(src), seen(threads * 24);
    seen.poison();
    tessel::launch(cp_async_steps, 1, threads, threads * 32, nullptr, s.data(), seen.data());
    const auto h = seen.download();
    for (int t = 0; t < threads; ++t) {
        INFO("thread " << t);
        const std::uint32_t* x = &h[t * 24];
        const std::uint32_t* v = &src[t * 8];
#if defined(TESSEL_BACKEND_SIM)
        // What a GPU shows before the wait is undefined (it depends on timing); the sim shows poison.
        for (int i = 0; i < 4; ++i) CHECK(x[i] == 0xffffffffu);
        for (int i = 4; i < 8; ++i) CHECK(x[4 + i] == 0xffffffffu);
#endif
        for (int i = 0; i < 4; ++i) CHECK(x[4 + i] == v[i]);
        for (int i = 0; i < 8; ++i) CHECK(x[12 + i] == v[i]);
        CHECK(x[20] == 0u);
        CHECK(x[21] == v[0]);
        CHECK(x[22] == v[1]);
        CHECK(x[23] == 0u);
    }
}

#if defined(TESSEL_BACKEND_SIM)

namespace {

__global__ void mma_in(int threads_taking_part, float* out) {
    const std::uint32_t a[4] = {}, b[2] = {};
    const float c[4] = {};
    float d[4] = {};
    if (int(threadIdx.x) < threads_taking_part) tessel::ptx::mma_m16n8k16_bf16(d, a, b, c);
    out[threadIdx.x] = d[0];
}

__global__ void mma_at_two_sites(float* out) {
    const std::uint32_t a[4] = {}, b[2] = {};
    const float c[4] = {};
    float d[4] = {};
    if (threadIdx.x % 2) tessel::ptx::mma_m16n8k16_bf16(d, a, b, c);
    else tessel::ptx::mma_m16n8k16_bf16(d, a, b, c);
    out[threadIdx.x] = d[0];
}

__global__ void ldmatrix_misaligned(std::uint32_t* out, int offset_bytes) {
    TESSEL_DYNAMIC_SHARED(unsigned char, s);
    for (int i = 0; i < 16; ++i) s[threadIdx.x * 16 + i] = 0;
    __syncwarp();
    std::uint32_t r[4];
    tessel::ptx::ldmatrix<4>(r, s + (threadIdx.x * 16 + (threadIdx.x == 9 ? offset_bytes : 0)) % 512);
    out[threadIdx.x] = r[0];
}

__global__ void ldmatrix_from_global(const std::uint32_t* g, std::uint32_t* out) {
    std::uint32_t r[1];
    tessel::ptx::ldmatrix<1>(r, g + (threadIdx.x % 8) * 4);
    out[threadIdx.x] = r[0];
}

__global__ void cp_async_misuse(const std::uint32_t* g, std::uint32_t* gdst, int what) {
    TESSEL_DYNAMIC_SHARED(std::uint32_t, s);
    if (what == 0) tessel::ptx::cp_async_16(s + 1, g);         // destination only 4-byte aligned
    if (what == 1) tessel::ptx::cp_async_16(gdst, g);          // destination in global memory
    if (what == 2) tessel::ptx::cp_async_16(s, s + 4);         // source in shared memory
    if (what == 3) tessel::ptx::cp_async_16(s + 256, g);       // past the dynamic shared memory
    tessel::ptx::cp_async_wait_all();
}

// A two-stage pipeline whose second tile is read without waiting for its group: the reader sees
// poison where a GPU would read stale or half-written data.
__global__ void pipeline_missing_wait(const float* g, float* out) {
    TESSEL_DYNAMIC_SHARED(float, s);
    const unsigned t = threadIdx.x;
    tessel::ptx::cp_async_16(s + t * 4, g + t * 4);
    tessel::ptx::cp_async_commit();
    tessel::ptx::cp_async_16(s + 128 + t * 4, g + 128 + t * 4);
    tessel::ptx::cp_async_commit();
    tessel::ptx::cp_async_wait<1>();  // stage 0 only
    __syncthreads();
    float sum = 0;
    for (int i = 0; i < 4; ++i) sum += s[t * 4 + i] + s[128 + ((t + 1) % 32) * 4 + i];  // stage 1 not waited for
    out[t] = sum;
}

std::string fault_of(auto&& launch) {
    try {
        launch();
        tessel::rt::device_synchronize();
    } catch (const tessel::CudaError& e) {
        return e.what();
    }
    return "(no error)";
}

}  // namespace

TEST_CASE("the sim faults on warp-level matrix instructions a GPU would punish, naming the line", "[sim][ptx]") {
    DeviceArray<float> out(64);
    DeviceArray<std::uint32_t> u(64), g(64);
    std::string msg = fault_of([&] { tessel::launch(mma_in, 1, 16, 0, nullptr, 16, out.data()); });
    INFO(msg);
    CHECK_THAT(msg, Catch::Contains("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 at") &&
                        Catch::Contains("test_warp_matrix.cu") && Catch::Contains("partial warp"));
    msg = fault_of([&] { tessel::launch(mma_in, 1, 64, 0, nullptr, 48, out.data()); });  // warp 1: half its lanes
    CHECK_THAT(msg, Catch::Contains("partial warp: warp 1"));
    msg = fault_of([&] { tessel::launch(mma_at_two_sites, 1, 32, 0, nullptr, out.data()); });
    CHECK_THAT(msg, Catch::Contains("at different warp-wide matrix instructions"));
    msg = fault_of([&] { tessel::launch(ldmatrix_misaligned, 1, 32, 512, nullptr, u.data(), 4); });
    CHECK_THAT(msg, Catch::Contains("ldmatrix.sync.aligned.m8n8.x4.shared.b16 at") && Catch::Contains("test_warp_matrix.cu:") &&
                        Catch::Contains("lane 9") && Catch::Contains("not 16-byte aligned"));
    msg = fault_of([&] { tessel::launch(ldmatrix_misaligned, 1, 32, 512, nullptr, u.data(), 0); });
    CHECK(msg == "(no error)");
    msg = fault_of([&] { tessel::launch(ldmatrix_from_global, 1, 32, 0, nullptr, g.data(), u.data()); });
    CHECK_THAT(msg, Catch::Contains("not in the block's dynamic shared memory"));
    const char* expected[] = {"both must be aligned to 16 bytes", "is not in the block's dynamic shared memory",
                              "is in shared memory, not global memory", "is not in the block's dynamic shared memory"};
    for (int what = 0; what < 4; ++what) {
        msg = fault_of([&] { tessel::launch(cp_async_misuse, 1, 1, 1024, nullptr, g.data(), u.data(), what); });
        INFO(msg);
        CHECK_THAT(msg, Catch::Contains(expected[what]) && Catch::Contains("test_warp_matrix.cu:"));
    }
    // The device is usable after each fault.
    tessel::launch(mma_in, 1, 32, 0, nullptr, 32, out.data());
    tessel::rt::device_synchronize();
}

namespace {

// Lane l points ldmatrix.x4 at byte offset offsets[l] of dynamic shared memory.
__global__ void ldmatrix_at(const int* offsets, std::uint32_t* out) {
    TESSEL_DYNAMIC_SHARED(unsigned char, s);
    for (int i = 0; i < 128; ++i) s[threadIdx.x * 128 + i] = 0;
    __syncwarp();
    std::uint32_t r[4];
    tessel::ptx::ldmatrix<4>(r, s + offsets[threadIdx.x]);
    out[threadIdx.x] = r[0];
}

// The wavefronts four matrices take when matrix j's row r lies at offset(j, r).
std::uint64_t ldmatrix_wavefronts_for(auto offset) {
    std::vector<int> o(32);
    for (int l = 0; l < 32; ++l) o[std::size_t(l)] = offset(l / 8, l % 8);
    DeviceArray<int> offsets(o);
    DeviceArray<std::uint32_t> out(32);
    const tessel::sim::LdmatrixTraffic before = tessel::sim::ldmatrix_traffic();
    tessel::launch(ldmatrix_at, 1, 32, 4096, nullptr, offsets.data(), out.data());
    tessel::rt::device_synchronize();
    const tessel::sim::LdmatrixTraffic after = tessel::sim::ldmatrix_traffic();
    CHECK(after.matrices - before.matrices == 4);
    return after.wavefronts - before.wavefronts;
}

}  // namespace

// The bank model (sm_80-sm_90: 32 banks of 4 bytes, one request per 8x8 matrix): 8 rows of 16 bytes
// take one wavefront when they cover the 32 banks once, n when n distinct words share a bank.
TEST_CASE("the sim counts the wavefronts ldmatrix's shared-memory reads take under the bank model", "[sim][ptx]") {
    // 8 consecutive rows (128 contiguous bytes per matrix): every bank once.
    CHECK(ldmatrix_wavefronts_for([](int j, int r) { return j * 128 + r * 16; }) == 4);
    // The same column chunk of 64-byte rows: rows r, r + 2, r + 4, r + 6 share banks, 4 ways.
    CHECK(ldmatrix_wavefronts_for([](int j, int r) { return j * 512 + r * 64; }) == 16);
    // 128-byte rows: all 8 rows on the same 4 banks.
    CHECK(ldmatrix_wavefronts_for([](int j, int r) { return j * 1024 + r * 128; }) == 32);
    // 64-byte rows with the chunk XOR-swizzled by (row / 2) % 4, as mma_matmul stages A: conflict-free.
    CHECK(ldmatrix_wavefronts_for([](int j, int r) { return j * 512 + r * 64 + ((1 ^ ((r >> 1) & 3)) << 4); }) == 4);
    // Every row of a matrix at one address: one word per bank, broadcast.
    CHECK(ldmatrix_wavefronts_for([](int j, int) { return j * 16; }) == 4);
    // Two rows at one address, the rest conflict-free: the shared word is read once.
    CHECK(ldmatrix_wavefronts_for([](int j, int r) { return j * 128 + (r == 7 ? 0 : r) * 16; }) == 4);
}

TEST_CASE("a tile read before its cp.async group is waited for reads poison in the sim", "[sim][ptx]") {
    std::vector<float> src(256, 1.0f);
    DeviceArray<float> g(src), out(32);
    out.poison();
    tessel::launch(pipeline_missing_wait, 1, 32, 1024, nullptr, g.data(), out.data());
    for (float v : out.download()) CHECK(std::isnan(v));
}

#endif
