// tessel-info: the devices this build sees, like nvidia-smi, plus the runtime and driver versions
// with a compatibility verdict. On the sim it describes the simulated devices (NVML's readings from
// the sim's stand-in).
//   tessel-info          a table: properties, and NVML's temperature, power, utilisation, memory
//   tessel-info --json   the properties as JSON (for scripts and bench reports)
//   tessel-info --query=FIELD,... [--format=csv[,noheader][,nounits]|json] [--watch SECONDS [--count N]]
//                        NVML readings by nvidia-smi's field names (--query=help lists them),
//                        again every SECONDS (N times, or until interrupted); flags in any order,
//                        nvidia-smi's --query-gpu and -l/--loop too; json: one array per line
//   tessel-info --processes                 the compute processes on each device
//   tessel-info --prometheus [FILE]         the readings in Prometheus's text format, FILE written
//                        atomically (node-exporter's textfile collector), or stdout
//   tessel-info --bandwidth [MiB]           pinned/pageable H2D and D2H, and D2D copy bandwidth
//   tessel-info --memory-snapshot IN.json OUT.html   draws a snapshot a program wrote with
//                        tessel::memory::write_snapshot("IN.json")
//   tessel-info --matmul M N K DTYPE [fused]   what MatmulPolicy::automatic picks for that product
//                        on device 0 (DTYPE fp32, tf32, fp64, fp16, bf16, int8 or e4m3; fused: with
//                        a bias/activation epilogue), and why
#include <tessel/ops/matmul_policy.hpp>
#include <tessel/runtime/device.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <optional>
#include <string>
#include <thread>

#include <tessel/core/env.hpp>

#include "info_bandwidth.hpp"
#include "info_nvml.hpp"
#include "info_snapshot.hpp"

namespace {

using info::json_escape;

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
        if (info::nvml_only()) {  // CUDA cannot start, but the GPUs are there: what NVML says of them
            const auto gpus = info::gpus();
            std::printf("\nNVML sees %zu GPU(s), numbered as nvidia-smi numbers them%s:\n", gpus.size(), info::hidden_note());
            info::print_readings(gpus, true);
        } else {
            std::printf("\nNVML: %s\n", tessel::nvml::available() ? "sees no GPU either" : tessel::nvml::unavailable_reason().c_str());
        }
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
    std::printf("\nNVML: %s\n", tessel::nvml::available() ? "available" : tessel::nvml::unavailable_reason().c_str());
    if (tessel::nvml::available()) info::print_readings(info::gpus(), false);
}

}  // namespace

// Without a device there is nothing to read: the reason, and 77 (what ctest takes as skipped).
int no_device() {
    std::fprintf(stderr, "tessel-info: %s\n", tessel::unavailable_reason().c_str());
    return 77;
}

// Whether NVML's readings can be given: CUDA sees a device, or NVML alone sees GPUs (then stderr
// says that CUDA cannot use them and that the numbering is NVML's).
bool readings_available() {
    if (tessel::is_available()) return true;
    if (!info::nvml_only()) return false;
    std::fprintf(stderr, "tessel-info: %s\ntessel-info: the GPUs below are NVML's, numbered as nvidia-smi numbers them%s\n",
                 tessel::unavailable_reason().c_str(), info::hidden_note());
    return true;
}

// tessel-info --matmul M N K DTYPE [fused]
int explain_matmul(int argc, char** argv) {
    const bool fused = argc == 7 && std::strcmp(argv[6], "fused") == 0;
    const std::string dtype = argc >= 6 ? argv[5] : "";
    const bool known = dtype == "fp32" || dtype == "tf32" || dtype == "fp64" || dtype == "fp16" || dtype == "bf16" || dtype == "int8" ||
                       dtype == "e4m3";
    if ((argc != 6 && !fused) || !known) {
        std::fprintf(stderr, "usage: tessel-info --matmul M N K fp32|tf32|fp64|fp16|bf16|int8|e4m3 [fused]\n");
        return 2;
    }
    const auto dim = [](const char* text) { return std::int64_t(tessel::env::parse_integer("tessel-info --matmul", text, 1, std::int64_t(1) << 40)); };
    const std::int64_t m = dim(argv[2]), n = dim(argv[3]), k = dim(argv[4]);
    if (!tessel::is_available()) return no_device();  // the choice depends on the device's architecture
    const auto props = tessel::properties(tessel::Device{0});
    const int major = props.major;
    const tessel::MatmulChoice c = tessel::automatic_choice(major, dtype, fused, m, n);
    std::printf("matmul %lld x %lld x %lld %s%s on sm_%d%d (shape class %s):\n  automatic -> %s\n  %.*s\n",
                (long long)m, (long long)n, (long long)k, dtype.c_str(), fused ? " with a fused epilogue" : "", major, props.minor,
                tessel::matmul_shape_class(m, n), tessel::policy_name(c.path), int(c.reason.size()), c.reason.data());
    if (c.entry) std::printf("  measured: the hand-written kernel at %.1f%% of the library's speed\n", c.entry->handwritten_pct_of_library);
    std::printf("  table: %s\n", tessel::matmul_table::source);
    return 0;
}

// tessel-info --query=... [--format=...] [--watch SECONDS [--count N]], in any order; --query-gpu
// (nvidia-smi's spelling) is the same flag.
int query(int argc, char** argv) {
    std::string fields, format = "csv";
    bool has_fields = false;
    double watch = 0;
    long count = -1;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        // The flag's value, from "--flag=value" or "--flag value"; nullopt when a is another flag.
        auto value = [&](std::initializer_list<const char*> names) -> std::optional<std::string> {
            for (const std::string f : names) {
                if (a.rfind(f + "=", 0) == 0) return a.substr(f.size() + 1);
                if (a == f) {
                    if (i + 1 >= argc) throw std::invalid_argument(f + " needs a value");
                    return std::string(argv[++i]);
                }
            }
            return std::nullopt;
        };
        if (auto v = value({"--query", "--query-gpu"})) fields = *v, has_fields = true;
        else if (auto v = value({"--format"})) format = *v;
        else if (auto v = value({"--watch", "-l", "--loop"})) watch = tessel::env::parse_decimal("--watch", *v, 0, 86400);
        else if (auto v = value({"--count"})) count = long(tessel::env::parse_integer("--count", *v, 1, 1000000000));
        else throw std::invalid_argument("unknown argument '" + a + "' with --query");
    }
    if (!has_fields) throw std::invalid_argument("--format, --watch and --count go with --query=FIELD,...");
    if (fields == "help") {
        for (const info::Field& f : info::fields()) std::printf("%s%s%s\n", f.name, *f.unit ? "  " : "", f.unit);
        return 0;
    }
    const auto fs = info::parse_fields(fields);
    info::Format fmt = info::parse_format(format);
    if (count > 0 && watch <= 0) throw std::invalid_argument("--count goes with --watch SECONDS");
    if (!readings_available()) return no_device();
    for (long n = 0; count < 0 || n < count; ++n) {
        info::print_query(fs, fmt);
        fmt.header = false;  // once, as nvidia-smi -l does
        if (watch <= 0) break;
        if (count < 0 || n + 1 < count) std::this_thread::sleep_for(std::chrono::duration<double>(watch));
    }
    return 0;
}

// Whether any argument is a query flag (they may come in any order, as nvidia-smi's).
bool query_mode(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        for (const char* f : {"--query", "--query-gpu", "--format", "--watch", "-l", "--loop", "--count"})
            if (a == f || a.rfind(std::string(f) + "=", 0) == 0) return true;
    }
    return false;
}

int main(int argc, char** argv) try {
    if (argc > 1 && std::strcmp(argv[1], "--matmul") == 0) return explain_matmul(argc, argv);
    if (query_mode(argc, argv)) return query(argc, argv);
    if (argc == 2 && std::strcmp(argv[1], "--processes") == 0) {
        if (!readings_available()) return no_device();
        info::print_processes();
        return 0;
    }
    if (argc >= 2 && argc <= 3 && std::strcmp(argv[1], "--prometheus") == 0) {
        if (!readings_available()) return no_device();
        info::write_prometheus(argc == 3 ? argv[2] : "-");
        return 0;
    }
    if (argc >= 2 && argc <= 3 && std::strcmp(argv[1], "--bandwidth") == 0) {
        const std::size_t mib = argc == 3 ? std::size_t(tessel::env::parse_integer("tessel-info --bandwidth", argv[2], 1, 1 << 16))
                                          : (tessel::backend == tessel::Backend::sim ? 64 : 256);
        if (!tessel::is_available()) return no_device();
        info::print_bandwidth(mib);
        return 0;
    }
    if (argc == 4 && std::strcmp(argv[1], "--memory-snapshot") == 0) {
        const auto segments = info::read_snapshot(argv[2]);
        std::ofstream out(argv[3]);
        out << tessel::memory::snapshot_html(segments, std::string("tessel memory snapshot: ") + argv[2]);
        if (!out.flush()) throw std::runtime_error(std::string("--memory-snapshot: cannot write ") + argv[3]);
        std::printf("%zu segments from %s drawn into %s\n", segments.size(), argv[2], argv[3]);
        return 0;
    }
    const bool json = argc == 2 && std::strcmp(argv[1], "--json") == 0;
    const bool help = argc == 2 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0);
    if (argc > 1 && !json) {  // --help: the usage on stdout and success, as nvidia-smi -h
        std::fprintf(help ? stdout : stderr,
                     "usage: tessel-info [--json | --query=FIELD,... [--format=csv[,noheader][,nounits]|json] [--watch S [--count N]] |\n"
                     "                    --processes | --prometheus [FILE] | --bandwidth [MiB] |\n"
                     "                    --memory-snapshot IN.json OUT.html | --matmul M N K DTYPE [fused]]\n");
        return help ? 0 : 2;
    }
    const auto v = tessel::versions();
    json ? print_json(v) : print_table(v);
    return tessel::is_available() ? 0 : 1;
} catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "tessel-info: %s\n", e.what());
    return 2;
} catch (const tessel::InvalidArgument& e) {  // a malformed number (tessel::env's parsers)
    std::fprintf(stderr, "tessel-info: %s\n", e.what());
    return 2;
} catch (const std::exception& e) {
    std::fprintf(stderr, "tessel-info: %s\n", e.what());
    return 1;
}
