// Test runner for both backends. A CUDA build on a machine without a usable GPU reports itself
// skipped (exit code 77, which ctest's SKIP_RETURN_CODE turns into "Skipped"), never passed.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <tessel/runtime/device.hpp>

int main(int argc, char** argv) {
    if (tessel::backend == tessel::Backend::cuda && !tessel::is_available()) {
        std::printf("SKIPPED: %s\n", tessel::unavailable_reason().c_str());
        return 77;
    }
    return Catch::Session().run(argc, argv);
}
