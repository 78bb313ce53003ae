// tessel-info: the devices this build sees, like `nvidia-smi --query-gpu=...`, plus the runtime and
// driver versions with a compatibility verdict. On the sim it describes the simulated devices.
//   tessel-info          a table
//   tessel-info --json   the same as JSON (for scripts and bench reports)
//   tessel-info --matmul M N K DTYPE [fused]   what MatmulPolicy::automatic picks for that product
//                        on device 0 (DTYPE fp32, fp64, fp16 or bf16; fused: with a bias/activation
//                        epilogue), and why
#include <tessel/ops/matmul_policy.hpp>
#include <tessel/runtime/device.hpp>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include <tessel/core/env.hpp>

namespace {

std::string json_escape(const std::string& s) {
    std::string r;
    for (char c : s) {
        if (c == '"' || c == '\\') r += '\\';
        r += c;
    }
    return r;
}

void print_json(const tessel::Versions& v) {
    std::printf("{\n  \"backend\": \"%s\",\n  \"runtime_version\": \"%s\",\n  \"driver_version\": \"%s\",\n"
                "  \"compatible\": %s,\n  \"verdict\": \"%s\",\n  \"devices\": [",
                tessel::backend_name, tessel::version_string(v.runtime).c_str(), tessel::version_string(v.driver).c_str(),
                v.compatible ? "true" : "false", json_escape(v.verdict).c_str());
    for (int i = 0; i < tessel::device_count(); ++i) {
        const auto p = tessel::properties(tessel::Device{i});
        std::printf("%s\n    {\"index\": %d, \"name\": \"%s\", \"compute_capability\": \"%s\", \"sm_count\": %d, "
                    "\"memory_total_bytes\": %zu, \"memory_free_bytes\": %zu, \"l2_bytes\": %d, "
                    "\"smem_per_block_bytes\": %zu, \"smem_per_block_optin_bytes\": %zu, \"smem_per_sm_bytes\": %zu, "
                    "\"clock_khz\": %d, \"memory_clock_khz\": %d, \"memory_bus_bits\": %d, "
                    "\"theoretical_bandwidth_gbs\": %.1f, \"simulated\": %s}",
                    i ? "," : "", p.index, json_escape(p.name).c_str(), p.compute_capability().c_str(), p.sm_count,
                    p.total_memory, p.free_memory, p.l2_cache_bytes, p.shared_memory_per_block,
                    p.shared_memory_per_block_optin, p.shared_memory_per_sm, p.clock_khz, p.memory_clock_khz,
                    p.memory_bus_bits, p.theoretical_bandwidth_gbs(), p.simulated ? "true" : "false");
    }
    std::printf("\n  ],\n  \"unavailable_reason\": \"%s\"\n}\n", json_escape(tessel::unavailable_reason()).c_str());
}

void print_table(const tessel::Versions& v) {
    std::printf("backend: %s    CUDA runtime %s    driver %s\n", tessel::backend_name, tessel::version_string(v.runtime).c_str(),
                v.driver ? tessel::version_string(v.driver).c_str() : "none");
    std::printf("verdict: %s\n\n", v.verdict.c_str());
    if (!tessel::is_available()) {
        std::printf("%s\n", tessel::unavailable_reason().c_str());
        return;
    }
    std::printf("%-3s %-40s %-4s %5s %11s %11s %8s %13s %9s %8s %9s\n", "idx", "name", "cc", "SMs", "mem total",
                "mem free", "L2", "smem/blk(opt)", "SM clock", "bus", "BW (GB/s)");
    for (int i = 0; i < tessel::device_count(); ++i) {
        const auto p = tessel::properties(tessel::Device{i});
        char smem[64];
        std::snprintf(smem, sizeof smem, "%zuK (%zuK)", p.shared_memory_per_block / 1024, p.shared_memory_per_block_optin / 1024);
        std::printf("%-3d %-40.40s %-4s %5d %8.1f GiB %8.1f GiB %5d KiB %13s %5d MHz %4d bit %9.0f%s\n", i, p.name.c_str(),
                    p.compute_capability().c_str(), p.sm_count, double(p.total_memory) / (1 << 30),
                    double(p.free_memory) / (1 << 30), p.l2_cache_bytes / 1024, smem, p.clock_khz / 1000, p.memory_bus_bits,
                    p.theoretical_bandwidth_gbs(), p.simulated ? " (nominal)" : "");
    }
}

}  // namespace

// tessel-info --matmul M N K DTYPE [fused]
int explain_matmul(int argc, char** argv) {
    const bool fused = argc == 7 && std::strcmp(argv[6], "fused") == 0;
    const std::string dtype = argc >= 6 ? argv[5] : "";
    if ((argc != 6 && !fused) || (dtype != "fp32" && dtype != "fp64" && dtype != "fp16" && dtype != "bf16")) {
        std::fprintf(stderr, "usage: tessel-info --matmul M N K fp32|fp64|fp16|bf16 [fused]\n");
        return 2;
    }
    const auto dim = [](const char* text) { return std::int64_t(tessel::env::parse_integer("tessel-info --matmul", text, 1, std::int64_t(1) << 40)); };
    const std::int64_t m = dim(argv[2]), n = dim(argv[3]), k = dim(argv[4]);
    const auto props = tessel::device_count() > 0 ? tessel::properties(tessel::Device{0}) : tessel::DeviceProperties{};
    const int major = props.major;
    const tessel::MatmulChoice c = tessel::automatic_choice(major, dtype, fused, m, n);
    std::printf("matmul %lld x %lld x %lld %s%s on sm_%d%d (shape class %s):\n  automatic -> %s\n  %.*s\n",
                (long long)m, (long long)n, (long long)k, dtype.c_str(), fused ? " with a fused epilogue" : "", major, props.minor,
                tessel::matmul_shape_class(m, n), tessel::policy_name(c.path), int(c.reason.size()), c.reason.data());
    if (c.entry) std::printf("  measured: the hand-written kernel at %.1f%% of the library's speed\n", c.entry->handwritten_pct_of_library);
    std::printf("  table: %s\n", tessel::matmul_table::source);
    return 0;
}

int main(int argc, char** argv) try {
    if (argc > 1 && std::strcmp(argv[1], "--matmul") == 0) return explain_matmul(argc, argv);
    const bool json = argc > 1 && std::strcmp(argv[1], "--json") == 0;
    if (argc > 1 && !json) {
        std::fprintf(stderr, "usage: tessel-info [--json | --matmul M N K DTYPE [fused]]\n");
        return 2;
    }
    const auto v = tessel::versions();
    json ? print_json(v) : print_table(v);
    return tessel::is_available() ? 0 : 1;
} catch (const std::exception& e) {
    std::fprintf(stderr, "tessel-info: %s\n", e.what());
    return 1;
}
