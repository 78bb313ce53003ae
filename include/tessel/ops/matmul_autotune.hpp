// matmul's autotuning state (MatmulPolicy::automatic with set_matmul_autotune(true) or
// TESSEL_MATMUL_AUTOTUNE=1): the candidates a problem is timed on, the winner of each problem key in
// process, and the optional file that keeps winners for later processes (set_matmul_autotune_file,
// TESSEL_MATMUL_AUTOTUNE_FILE). The timing loop itself is in matmul_dispatch.hpp (run_matmul).
#pragma once

#include <compare>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../runtime/device.hpp"
#include "../tensor/dtype.hpp"
#include "matmul_policy.hpp"

namespace tessel {

namespace ops::detail {

// One way to run a product: the path and its variant. Hand-written: the tile class (0: by problem
// size, 1: the 64 x 64 tiles, 2: the 128 x 128 tiles). Library: which of cuBLASLt's heuristic results
// runs (0: its best; where cuBLAS runs instead there is only 0).
struct MatmulCandidate {
    MatmulPolicy path = MatmulPolicy::library;
    int variant = 0;
};
// How many variants each path has (a file line naming another is skipped).
inline constexpr int handwritten_variants = 3, library_variants = 4;

// The variant the calling thread's products run: 0 except while autotuning times a candidate or
// follows a winner.
inline int& candidate_variant() {
    static thread_local int v = 0;
    return v;
}
class VariantScope {
public:
    explicit VariantScope(int v) : saved_(std::exchange(candidate_variant(), v)) {}
    ~VariantScope() { candidate_variant() = saved_; }
    VariantScope(const VariantScope&) = delete;
    VariantScope& operator=(const VariantScope&) = delete;

private:
    int saved_;
};

// A problem as autotuning keys it.
struct AutotuneKey {
    int device;
    std::string_view in_dtype;   // a static string: dtype_key's
    std::string_view out_dtype;  // a static string: dtype_name's (int8 into int32 and into fp32 take different paths)
    std::int64_t m, n, k, batches;
    int layout_a, layout_b, layout_c;
    bool fused;
    auto operator<=>(const AutotuneKey&) const = default;
};

// The winners, and the file they are kept in (guarded by autotune_mutex()).
struct AutotuneState {
    std::map<AutotuneKey, MatmulCandidate> winners;
    std::string file;       // "": none
    bool file_read = false;  // TESSEL_MATMUL_AUTOTUNE_FILE consulted
};
inline AutotuneState& autotune_state() {
    static auto* s = new AutotuneState();  // never destroyed, as the allocators
    return *s;
}

// The dtype keys autotuning knows, as static strings (a key read from a file points at one of these).
inline std::string_view canonical_dtype(std::string_view text) {
    for (std::string_view d : {"fp32", "fp64", "fp16", "bf16", "tf32", "int8", "e4m3"})
        if (d == text) return d;
    return {};
}

// An output dtype's name as dtype_name gives it (a static string), or empty if it names none.
inline std::string_view canonical_out_dtype(std::string_view text) {
    for (int d = 0; d <= int(DType::boolean); ++d)
        if (::tessel::dtype_name(DType(d)) == text) return ::tessel::dtype_name(DType(d));
    return {};
}

// A device as the file names it: its name (spaces as '_') and compute capability, so that a file
// written on one machine applies to the same GPU model on another and to nothing else.
inline std::string device_tag(int device) {
    const DeviceProperties p = properties(Device{device});
    std::string name = p.name;
    for (char& c : name)
        if (c == ' ' || c == '\t') c = '_';
    return name + " " + p.compute_capability();
}

// The file's format, one winner per line:
//   tessel-autotune-2 DEVICE_NAME CC DTYPE OUT_DTYPE M N K BATCHES LAYOUT_A LAYOUT_B LAYOUT_C FUSED PATH VARIANT
// (version 1's lines, with the output's size in bytes where OUT_DTYPE stands, are skipped: the size
// did not tell int8 into int32 from int8 into fp32, which take different paths).
inline constexpr std::string_view autotune_file_magic = "tessel-autotune-2";

// Adds the file's winners for this process's devices (later lines win); lines for other devices or
// in another format are skipped. Returns how many were added. Caller holds autotune_mutex().
inline std::int64_t read_autotune_file(const std::string& path) {
    std::ifstream in(path);
    if (!in) return 0;  // not written yet
    std::vector<std::string> tags;
    for (int d = 0; d < device_count(); ++d) tags.push_back(device_tag(d));
    std::int64_t added = 0, line_number = 0;
    for (std::string line; std::getline(in, line);) {
        ++line_number;
        std::istringstream f(line);
        std::string magic, name, cc, dtype, out_dtype, path_name;
        AutotuneKey key{};
        MatmulCandidate c;
        int fused = 0;
        if (!(f >> magic >> name >> cc >> dtype >> out_dtype >> key.m >> key.n >> key.k >> key.batches >> key.layout_a >> key.layout_b >>
              key.layout_c >> fused >> path_name >> c.variant) ||
            magic != autotune_file_magic)
            continue;
        key.in_dtype = canonical_dtype(dtype);
        key.out_dtype = canonical_out_dtype(out_dtype);
        key.fused = fused != 0;
        if (key.in_dtype.empty() || key.out_dtype.empty() || (path_name != "handwritten" && path_name != "library")) continue;
        c.path = path_name == "handwritten" ? MatmulPolicy::handwritten : MatmulPolicy::library;
        if (c.variant < 0 || c.variant >= (c.path == MatmulPolicy::handwritten ? handwritten_variants : library_variants)) {
            // Followed, it would fail every product of its key: a warning, as for a file that cannot be written.
            std::fprintf(stderr, "tessel: %s:%lld: skipped: %s variant %d does not exist (0 to %d)\n", path.c_str(),
                         static_cast<long long>(line_number), path_name.c_str(), c.variant,
                         (c.path == MatmulPolicy::handwritten ? handwritten_variants : library_variants) - 1);
            continue;
        }
        for (int d = 0; d < int(tags.size()); ++d) {
            if (tags[std::size_t(d)] != name + " " + cc) continue;
            key.device = d;
            autotune_state().winners[key] = c;
            ++added;
        }
    }
    return added;
}

// Appends one winner to the file, if there is one. A file that cannot be written costs the
// persistence, not the product: one warning on stderr.
inline void append_autotune_file(const AutotuneKey& k, const MatmulCandidate& c) {
    AutotuneState& s = autotune_state();
    if (s.file.empty()) return;
    std::ofstream out(s.file, std::ios::app);
    out << autotune_file_magic << ' ' << device_tag(k.device) << ' ' << k.in_dtype << ' ' << k.out_dtype << ' ' << k.m << ' ' << k.n
        << ' ' << k.k << ' ' << k.batches << ' ' << k.layout_a << ' ' << k.layout_b << ' ' << k.layout_c << ' ' << int(k.fused) << ' '
        << policy_name(c.path) << ' ' << c.variant << '\n';
    out.flush();
    static bool warned = false;
    if (!out && !warned) {
        warned = true;
        std::fprintf(stderr, "tessel: cannot write the matmul autotune file '%s'; winners are kept in this process only\n",
                     s.file.c_str());
    }
}

// The file named by TESSEL_MATMUL_AUTOTUNE_FILE, read once before the first tuned call (unless
// set_matmul_autotune_file chose one). Caller holds autotune_mutex().
inline void read_autotune_file_from_environment() {
    AutotuneState& s = autotune_state();
    if (s.file_read) return;
    s.file_read = true;
    if (const char* v = std::getenv("TESSEL_MATMUL_AUTOTUNE_FILE"); v && *v) {
        s.file = v;
        autotune_counters().loaded_from_file += read_autotune_file(s.file);
    }
}

}  // namespace ops::detail

// Keeps autotuning's winners in `path` from now on (appending a line per newly tuned problem) and
// adds the winners already in it for this machine's GPU models, so a later process skips their
// timing runs; "" keeps winners in process only. Overrides TESSEL_MATMUL_AUTOTUNE_FILE.
inline void set_matmul_autotune_file(const std::string& path) {
    std::lock_guard lk(ops::detail::autotune_mutex());
    ops::detail::AutotuneState& s = ops::detail::autotune_state();
    s.file_read = true;
    s.file = path;
    if (!path.empty()) ops::detail::autotune_counters().loaded_from_file += ops::detail::read_autotune_file(path);
}

}  // namespace tessel
