// The bytes of one element of a CUDA library data type (cudaDataType: what cuBLAS, cuBLASLt and
// their sim stand-ins describe matrices with), for the types tessel passes; 0 for any other.
#pragma once

#include <cstddef>

#include <library_types.h>

namespace tessel {

constexpr std::size_t data_type_bytes(cudaDataType t) {
    switch (t) {
        case CUDA_R_8I:
        case CUDA_R_8F_E4M3:
        case CUDA_R_8F_E5M2: return 1;
        case CUDA_R_16F:
        case CUDA_R_16BF: return 2;
        case CUDA_R_32F:
        case CUDA_R_32I: return 4;
        case CUDA_R_64F: return 8;
        default: return 0;
    }
}

}  // namespace tessel
