// The sim's cuBLASLt stand-in (sim/cublaslt.hpp) called directly, for what tessel's layer never
// provokes on purpose: a pointer less aligned than the algorithm was chosen for, layouts and
// attributes the documentation refuses, scales on matrices that are not fp8. Each refusal is
// checked to fire, so that the stand-in keeps catching the mistakes it exists to catch in CI.
#include <tessel/lib/cublaslt.hpp>

#include "../support/device_array.hpp"

#if defined(TESSEL_BACKEND_SIM)

namespace {

namespace lt = tessel::sim::cublaslt;
using tessel::cublaslt::MatmulDesc;
using tessel::cublaslt::MatmulPreference;
using tessel::cublaslt::MatrixLayout;
using tessel::testing::DeviceArray;

// An 8 x 8 x 8 fp32 product (A, B, C = D column-major, ld 8), its descriptors and a preference.
struct Problem {
    cublasLtHandle_t h = tessel::cublaslt::handle(tessel::current_device());
    DeviceArray<float> a{std::vector<float>(128, 1.f)}, b{std::vector<float>(64, 1.f)}, d{64}, bias{std::vector<float>(128, 0.f)};
    MatmulDesc desc{CUBLAS_COMPUTE_32F, CUDA_R_32F};
    MatrixLayout la{CUDA_R_32F, 8, 8, 8}, lb{CUDA_R_32F, 8, 8, 8}, ld{CUDA_R_32F, 8, 8, 8};
    MatmulPreference pref;
    cublasLtMatmulHeuristicResult_t result{};
    int found = -1;

    cublasStatus_t heuristic(int requested = 1) {
        return lt::cublasLtMatmulAlgoGetHeuristic(h, desc.get(), la.get(), lb.get(), ld.get(), ld.get(), pref.get(), requested, &result,
                                                  &found);
    }
    cublasStatus_t run(const void* A, const cublasLtMatmulAlgo_t* algo, const float* alpha = &one) {
        return lt::cublasLtMatmul(h, desc.get(), alpha, A, la.get(), b.data(), lb.get(), &zero, d.data(), ld.get(), d.data(), ld.get(),
                                  algo, nullptr, 0, nullptr);
    }
    static constexpr float one = 1, zero = 0;
};
const char* bytes(const DeviceArray<float>& x) { return reinterpret_cast<const char*>(x.data()); }

}  // namespace

TEST_CASE("the cuBLASLt stand-in refuses pointers less aligned than its algorithm was chosen for", "[sim][cublaslt]") {
    Problem p;
    p.pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, std::uint32_t(16));
    REQUIRE(p.heuristic() == CUBLAS_STATUS_SUCCESS);
    REQUIRE(p.found == 1);
    const auto calls = lt::matmul_calls();
    CHECK(p.run(bytes(p.a) + 16, &p.result.algo) == CUBLAS_STATUS_SUCCESS);
    CHECK(p.run(bytes(p.a) + 4, &p.result.algo) == CUBLAS_STATUS_INVALID_VALUE);  // declared 16, is 4
    CHECK(lt::matmul_calls() == calls + 1);
    CHECK(p.run(bytes(p.a) + 4, nullptr) == CUBLAS_STATUS_SUCCESS);  // no algorithm: chosen for these pointers
    // The bias pointer's alignment at the heuristic is the one the algorithm expects.
    p.desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE, std::uint32_t(CUBLASLT_EPILOGUE_BIAS));
    p.desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(p.bias.data()));
    REQUIRE(p.heuristic() == CUBLAS_STATUS_SUCCESS);
    p.desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(p.bias.data() + 1));
    CHECK(p.run(p.a.data(), &p.result.algo) == CUBLAS_STATUS_INVALID_VALUE);
    p.desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(p.bias.data() + 64));
    CHECK(p.run(p.a.data(), &p.result.algo) == CUBLAS_STATUS_SUCCESS);
    tessel::rt::device_synchronize();
    const auto d = p.d.download();
    CHECK(std::all_of(d.begin(), d.end(), [](float v) { return v == 8.f; }));  // 8 products of ones
}

TEST_CASE("the cuBLASLt stand-in's heuristic refuses what the documentation says cuBLASLt does not run", "[sim][cublaslt]") {
    {
        Problem p;
        p.la.set(CUBLASLT_MATRIX_LAYOUT_ORDER, std::int32_t(CUBLASLT_ORDER_ROW));
        CHECK(p.heuristic() == CUBLAS_STATUS_NOT_SUPPORTED);  // column-major only
    }
    {
        Problem p;
        p.la = MatrixLayout(CUDA_R_32F, 8, 8, 4);  // ld < rows
        CHECK(p.heuristic() == CUBLAS_STATUS_INVALID_VALUE);
        p.la = MatrixLayout(CUDA_R_32F, 8, 7, 8);  // op(A) 8 x 7 but B has 8 rows
        CHECK(p.heuristic() == CUBLAS_STATUS_INVALID_VALUE);
        p.la = MatrixLayout(CUDA_R_32F, 8, 8, 8);
        p.la.set(CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, std::int32_t(2));  // D's is 1
        CHECK(p.heuristic() == CUBLAS_STATUS_INVALID_VALUE);
    }
    {
        Problem p;
        CHECK(p.heuristic(0) == CUBLAS_STATUS_INVALID_VALUE);
        p.desc.set(CUBLASLT_MATMUL_DESC_POINTER_MODE, std::int32_t(CUBLASLT_POINTER_MODE_DEVICE));
        CHECK(p.heuristic() == CUBLAS_STATUS_NOT_SUPPORTED);  // host alpha/beta only
    }
    {
        Problem p;  // a bias type other than the documented default (D's, fp32)
        p.desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE, std::uint32_t(CUBLASLT_EPILOGUE_BIAS));
        p.desc.set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, std::int32_t(CUDA_R_16F));
        CHECK(p.heuristic() == CUBLAS_STATUS_NOT_SUPPORTED);
        p.desc.set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, std::int32_t(CUDA_R_32F));
        CHECK(p.heuristic() == CUBLAS_STATUS_SUCCESS);
    }
    {
        Problem p;  // alignments below an fp32 element: no kernel, no result
        p.pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, std::uint32_t(2));
        CHECK(p.heuristic() == CUBLAS_STATUS_SUCCESS);
        CHECK(p.found == 0);
    }
    {
        // int8 -> int32: TN only, no epilogue; 4-byte pointers.
        Problem p;
        p.desc = MatmulDesc(CUBLAS_COMPUTE_32I, CUDA_R_32I);
        p.la = MatrixLayout(CUDA_R_8I, 8, 8, 8), p.lb = MatrixLayout(CUDA_R_8I, 8, 8, 8), p.ld = MatrixLayout(CUDA_R_32I, 8, 8, 8);
        CHECK(p.heuristic() == CUBLAS_STATUS_NOT_SUPPORTED);  // NN
        p.desc.set(CUBLASLT_MATMUL_DESC_TRANSA, std::int32_t(CUBLAS_OP_T));
        CHECK(p.heuristic() == CUBLAS_STATUS_SUCCESS);
        CHECK(p.found == 1);
        p.pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, std::uint32_t(2));
        CHECK(p.heuristic() == CUBLAS_STATUS_SUCCESS);
        CHECK(p.found == 0);
        p.desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE, std::uint32_t(CUBLASLT_EPILOGUE_RELU));
        CHECK(p.heuristic() == CUBLAS_STATUS_NOT_SUPPORTED);  // "non-default epilogue not supported"
    }
    CHECK(lt::cublasLtMatmulAlgoGetHeuristic(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 1, nullptr, nullptr) ==
          CUBLAS_STATUS_NOT_INITIALIZED);
}

TEST_CASE("the cuBLASLt stand-in's attributes: documented sizes, reading back, unmodelled ones refused", "[sim][cublaslt]") {
    Problem p;
    const std::int64_t eight = 1;
    CHECK(lt::cublasLtMatmulDescSetAttribute(p.desc.get(), CUBLASLT_MATMUL_DESC_TRANSA, &eight, 8) == CUBLAS_STATUS_INVALID_VALUE);
    CHECK(lt::cublasLtMatmulDescSetAttribute(p.desc.get(), CUBLASLT_MATMUL_DESC_TRANSA, nullptr, 4) == CUBLAS_STATUS_INVALID_VALUE);
    CHECK(lt::cublasLtMatrixLayoutSetAttribute(p.la.get(), CUBLASLT_MATRIX_LAYOUT_LD, &eight, 4) == CUBLAS_STATUS_INVALID_VALUE);
    const void* ptr = p.d.data();
    CHECK(lt::cublasLtMatmulDescSetAttribute(p.desc.get(), CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, &ptr, sizeof ptr) ==
          CUBLAS_STATUS_NOT_SUPPORTED);
    CHECK(lt::cublasLtMatrixLayoutSetAttribute(p.la.get(), CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET, &eight, 8) == CUBLAS_STATUS_NOT_SUPPORTED);
    CHECK(lt::cublasLtMatmulPreferenceSetAttribute(p.pref.get(), CUBLASLT_MATMUL_PREF_IMPL_MASK, &eight, 8) == CUBLAS_STATUS_NOT_SUPPORTED);
    p.desc.set(CUBLASLT_MATMUL_DESC_TRANSB, std::int32_t(CUBLAS_OP_T));
    std::size_t written = 0;
    std::int32_t value = 0;
    CHECK(lt::cublasLtMatmulDescGetAttribute(p.desc.get(), CUBLASLT_MATMUL_DESC_TRANSB, nullptr, 0, &written) == CUBLAS_STATUS_SUCCESS);
    CHECK(written == 4);  // size 0 asks for the size
    CHECK(lt::cublasLtMatmulDescGetAttribute(p.desc.get(), CUBLASLT_MATMUL_DESC_TRANSB, nullptr, 0, nullptr) ==
          CUBLAS_STATUS_INVALID_VALUE);
    CHECK(lt::cublasLtMatmulDescGetAttribute(p.desc.get(), CUBLASLT_MATMUL_DESC_TRANSB, &value, 8, &written) ==
          CUBLAS_STATUS_INVALID_VALUE);
    CHECK(lt::cublasLtMatmulDescGetAttribute(p.desc.get(), CUBLASLT_MATMUL_DESC_TRANSB, &value, 4, &written) == CUBLAS_STATUS_SUCCESS);
    CHECK(value == CUBLAS_OP_T);
    CHECK(std::string(lt::cublasLtGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED)) == "CUBLAS_STATUS_NOT_SUPPORTED");
}

TEST_CASE("the cuBLASLt stand-in refuses scales on matrices that are not fp8 and missing operands", "[sim][cublaslt]") {
    Problem p;
    REQUIRE(p.heuristic() == CUBLAS_STATUS_SUCCESS);
    const DeviceArray<float> scale(std::vector<float>{2.f});
    const void* s = scale.data();
    p.desc.set(CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, s);  // CUDA 13: refused on a D that is not fp8
    CHECK(p.run(p.a.data(), &p.result.algo) == CUBLAS_STATUS_INVALID_VALUE);
    p.desc.set(CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, static_cast<const void*>(nullptr));
    p.desc.set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, s);
    CHECK(p.run(p.a.data(), &p.result.algo) == CUBLAS_STATUS_INVALID_VALUE);
    p.desc.set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(nullptr));
    CHECK(p.run(p.a.data(), &p.result.algo, nullptr) == CUBLAS_STATUS_INVALID_VALUE);  // no alpha
    CHECK(p.run(nullptr, &p.result.algo) == CUBLAS_STATUS_INVALID_VALUE);              // no A
    p.desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE, std::uint32_t(CUBLASLT_EPILOGUE_RELU_BIAS));
    CHECK(p.run(p.a.data(), &p.result.algo) == CUBLAS_STATUS_INVALID_VALUE);  // a bias epilogue without a bias
    p.desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE, std::uint32_t(CUBLASLT_EPILOGUE_DEFAULT));
    const cublasLtMatmulAlgo_t foreign{};  // not one the heuristic made
    CHECK(p.run(p.a.data(), &foreign) == CUBLAS_STATUS_INVALID_VALUE);
    tessel::rt::device_synchronize();
}

#endif  // TESSEL_BACKEND_SIM
