// fuzz_ops: a seeded, bounded fuzzer of tessel's tensor ops.
//
//   fuzz_ops [--seed S] [--steps N] [--only K] [--family NAME] [--piece-limit E] [--verbose]
//
// Each step draws, from (seed, step) alone, an op family, element types, shapes (rank 0-4, sizes 0
// to ~70, rarely long rows), a chain of views (slices with steps, permutes, selects, expands,
// narrows, view()), a stream (the current one, a created stream passed as a handle or made current,
// an explicit null handle) and one op; valid steps are checked element by element against host
// references (reference.hpp), and about a quarter of the steps are bad inputs that must throw a
// tessel::Error of the documented type. After every step the device allocator's statistics must be
// self-consistent and, once the step's tensors are gone and the device synchronised, its allocated
// bytes back where they were. A failure prints the seed, the step, what the step did and the
// command that replays it, and exits 1. TESSEL_FUZZ_SEED overrides the seed (to replay a seed
// through ctest). --piece-limit E lowers the elements one launch of an element-wise or reduction
// kernel covers (ops/pieces.hpp: 2^31 - 16 otherwise), so the steps run the paths of tensors of
// 2^31 elements or more: several launches over boxes of the iteration. In a CUDA build without a
// GPU it exits 77 (skipped).
#include "fuzz.hpp"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include <tessel/ops/pieces.hpp>

#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TESSEL_FUZZ_SANITIZED 1
#include <sanitizer/common_interface_defs.h>
#endif

namespace fuzz {

namespace {

// What a crash handler prints: kept formatted at all times, since a handler cannot format.
char crash_note[4096] = "fuzz_ops: crashed before the first step\n";
std::uint64_t current_seed = 0;
std::int64_t current_step = 0;
char replay_extra[48] = "";  // " --piece-limit E" when set: every replay line repeats it

void crash_report() {
    const ssize_t ignored = ::write(2, crash_note, std::strlen(crash_note));
    (void)ignored;
}

#if !defined(TESSEL_FUZZ_SANITIZED)
void on_signal(int sig) {
    crash_report();
    std::signal(sig, SIG_DFL);
    std::raise(sig);
}
#endif

}  // namespace

void publish_description(const std::string& text) {
    std::snprintf(crash_note, sizeof crash_note,
                  "\nfuzz_ops: died in seed %llu step %lld: %s\n  replay: fuzz_ops --seed %llu --steps %lld%s --verbose\n",
                  static_cast<unsigned long long>(current_seed), static_cast<long long>(current_step), text.c_str(),
                  static_cast<unsigned long long>(current_seed), static_cast<long long>(current_step + 1), replay_extra);
}

namespace {

struct Options {
    std::uint64_t seed = 1;
    std::int64_t steps = 8000;  // about 25 s on one core of the sim (RelWithDebInfo)
    std::int64_t only = -1;   // run just this step (quicker, but the allocator's state then differs)
    std::string family;       // run only steps that draw this family
    std::int64_t piece_limit = 0;  // if set (16 or more), ops::detail::piece_limit for the run
    bool verbose = false;
};

// The device allocator's statistics must agree with themselves: every counter non-negative and
// current == allocated - freed <= peak, the pools adding up to the total, allocated bytes within
// active bytes within reserved bytes, segments matching the runtime calls, sizes on their grain.
std::vector<std::string> check_allocator(const memory::DeviceStats& s) {
    std::vector<std::string> bad;
    auto report = [&](auto... parts) { bad.push_back(tessel::detail::concat(parts...)); };
    const bool native = memory::backend() == memory::Backend::native;
    const std::pair<const char*, const memory::StatArray*> arrays[] = {
        {"allocation", &s.allocation},         {"segment", &s.segment},           {"active", &s.active},
        {"inactive_split", &s.inactive_split}, {"allocated_bytes", &s.allocated_bytes}, {"requested_bytes", &s.requested_bytes},
        {"reserved_bytes", &s.reserved_bytes}, {"active_bytes", &s.active_bytes}, {"inactive_split_bytes", &s.inactive_split_bytes}};
    for (const auto& [name, a] : arrays) {
        // Under backend:async reserved bytes come from the pool and are not counted this way.
        if (!native && std::string_view(name) == "reserved_bytes") continue;
        for (int p = 0; p < 3; ++p) {
            const memory::Stat& st = (*a)[std::size_t(p)];
            if (st.current < 0 || st.allocated < 0 || st.freed < 0) report(name, "[", p, "] negative: current ", st.current, " allocated ", st.allocated, " freed ", st.freed);
            if (st.peak < st.current) report(name, "[", p, "] peak ", st.peak, " below current ", st.current);
            if (st.allocated - st.freed != st.current) report(name, "[", p, "] allocated ", st.allocated, " - freed ", st.freed, " != current ", st.current);
        }
        const memory::Stat &all = (*a)[0], &small = (*a)[1], &large = (*a)[2];
        if (all.current != small.current + large.current || all.allocated != small.allocated + large.allocated)
            report(name, ": all pools (current ", all.current, ", allocated ", all.allocated, ") != small (", small.current, ", ", small.allocated,
                   ") + large (", large.current, ", ", large.allocated, ")");
    }
    for (int p = 0; p < 3; ++p) {
        const auto i = std::size_t(p);
        if (s.allocated_bytes[i].current > s.active_bytes[i].current)
            report("pool ", p, ": allocated bytes ", s.allocated_bytes[i].current, " exceed active bytes ", s.active_bytes[i].current);
        if (s.allocation[i].current > s.active[i].current)
            report("pool ", p, ": ", s.allocation[i].current, " allocations exceed ", s.active[i].current, " active blocks");
        if (s.requested_bytes[i].current > s.active_bytes[i].current)
            report("pool ", p, ": requested bytes ", s.requested_bytes[i].current, " exceed active bytes ", s.active_bytes[i].current);
        if (native && s.active_bytes[i].current + s.inactive_split_bytes[i].current > s.reserved_bytes[i].current)
            report("pool ", p, ": active ", s.active_bytes[i].current, " + inactive split ", s.inactive_split_bytes[i].current, " bytes exceed reserved ",
                   s.reserved_bytes[i].current);
    }
    if (native) {
        if (s.allocated_bytes[0].current % 512 != 0) report("allocated bytes ", s.allocated_bytes[0].current, " are not a multiple of 512");
        if (s.reserved_bytes[0].current % (2 << 20) != 0) report("reserved bytes ", s.reserved_bytes[0].current, " are not a multiple of 2 MiB");
        if (s.segment[0].current != s.num_device_alloc - s.num_device_free)
            report(s.segment[0].current, " segments, but ", s.num_device_alloc, " device allocations - ", s.num_device_free, " frees");
        if ((s.segment[0].current == 0) != (s.reserved_bytes[0].current == 0))
            report(s.segment[0].current, " segments hold ", s.reserved_bytes[0].current, " reserved bytes");
    }
    if (s.num_alloc_retries < 0 || s.num_ooms < 0 || s.num_device_alloc < 0 || s.num_device_free < 0) report("negative event counters");
#if defined(TESSEL_FUZZ_HAVE_CHECK_INVARIANTS)
    for (std::string& v : tessel::memory::check_invariants(current_device())) bad.push_back("check_invariants: " + v);  // the allocator's own full check
#endif
    return bad;
}

// snapshot() must describe the same memory as stats(): its segments add up to the reserved bytes
// and its allocated blocks to the allocated bytes, and each segment's blocks to its size.
std::vector<std::string> check_snapshot(const memory::DeviceStats& s) {
    std::vector<std::string> bad;
    if (memory::backend() != memory::Backend::native) return bad;
    std::int64_t reserved = 0, allocated = 0, blocks = 0, segments = 0;
    for (const memory::SegmentInfo& seg : memory::snapshot()) {
        std::int64_t in_segment = 0;
        for (const memory::BlockInfo& b : seg.blocks) {
            in_segment += std::int64_t(b.size);
            if (b.allocated) allocated += std::int64_t(b.size), ++blocks;
        }
        if (in_segment != std::int64_t(seg.total_size))
            bad.push_back(tessel::detail::concat("snapshot: the blocks of segment ", seg.address, " add up to ", in_segment, " of ", seg.total_size, " bytes"));
        reserved += std::int64_t(seg.total_size);
        ++segments;
    }
    if (reserved != s.reserved_bytes[0].current || segments != s.segment[0].current)
        bad.push_back(tessel::detail::concat("snapshot: ", segments, " segments of ", reserved, " bytes, stats say ", s.segment[0].current, " of ",
                                             s.reserved_bytes[0].current));
    if (allocated != s.allocated_bytes[0].current || blocks != s.allocation[0].current)
        bad.push_back(tessel::detail::concat("snapshot: ", blocks, " allocated blocks of ", allocated, " bytes, stats say ", s.allocation[0].current,
                                             " of ", s.allocated_bytes[0].current));
    return bad;
}

struct Counts {
    std::int64_t valid = 0, invalid = 0;
    double seconds = 0;
};

using Family = void (*)(Step&);
struct FamilyEntry {
    const char* name;
    double weight;
    Family run;
};
const FamilyEntry families[] = {
    {"elementwise", 30, elementwise_step}, {"reduce", 22, reduce_step}, {"rows", 12, rows_step}, {"copy", 14, copy_step},
    {"sort", 10, sort_step},               {"random", 6, random_step},  {"view", 6, view_step},   {"chain", 5, chain_step},
};

// Runs step k; false (after printing why) when it failed.
bool run_step(const Options& o, std::int64_t k, std::map<std::string, Counts>& counts, std::map<std::string, Counts>& ops) {
    current_step = k;
    publish_description("(setting up)");
    const auto start = std::chrono::steady_clock::now();
    const std::int64_t allocated_before = memory::stats().allocated_bytes[0].current;
    const auto host_before = memory::host_stats().allocated_bytes.current;
    std::string failure, desc, family, op;
    bool invalid = false;
    {
        Step st(o.seed, k);
        double total = 0;
        for (const FamilyEntry& f : families) total += f.weight;
        double pick = st.rng.uniform(0, total);
        const FamilyEntry* chosen = &families[0];
        for (const FamilyEntry& f : families) {
            if (pick < f.weight) {
                chosen = &f;
                break;
            }
            pick -= f.weight;
        }
        if (!o.family.empty() && o.family != chosen->name) return true;
        try {
            chosen->run(st);
        } catch (const Mismatch& m) {
            failure = m.message;
        } catch (const CudaError& e) {
            failure = std::string("unexpected CudaError: ") + e.what();
        } catch (const Error& e) {
            failure = std::string("unexpected tessel::Error (") + typeid(e).name() + "): " + e.what();
        } catch (const std::exception& e) {
            failure = std::string("non-tessel exception (") + typeid(e).name() + "): " + e.what();
        } catch (...) {
            failure = "an exception of unknown type";
        }
        desc = st.description();
        family = st.family.empty() ? chosen->name : st.family;
        op = st.op;
        invalid = st.invalid;
    }
    try {
        rt::device_synchronize();  // a kernel fault of the step surfaces here
    } catch (const std::exception& e) {
        if (failure.empty()) failure = std::string("the device failed after the step: ") + e.what();
    }
    const memory::DeviceStats after = memory::stats();
    std::vector<std::string> problems = check_allocator(after);
    if (after.allocated_bytes[0].current != allocated_before)
        problems.push_back(tessel::detail::concat("allocated bytes went from ", allocated_before, " to ", after.allocated_bytes[0].current,
                                                  " over the step, with all its tensors gone and the device synchronised"));
    const auto host_after = memory::host_stats().allocated_bytes.current;
    if (host_after != host_before)
        problems.push_back(tessel::detail::concat("pinned bytes allocated went from ", host_before, " to ", host_after, " over the step"));
    if (k % 16 == 15) {
        for (std::string& p : check_snapshot(after)) problems.push_back(p);
    }
    if (k % 97 == 96) {
        // Releasing the cache waits for every pending event: then nothing is active but what is allocated.
        memory::empty_cache();
        const memory::DeviceStats s = memory::stats();
        if (s.active_bytes[0].current != s.allocated_bytes[0].current || s.active[0].current != s.allocation[0].current)
            problems.push_back(tessel::detail::concat("after empty_cache: ", s.active[0].current, " active blocks of ", s.active_bytes[0].current,
                                                      " bytes, but ", s.allocation[0].current, " allocated of ", s.allocated_bytes[0].current));
        for (std::string& p : check_allocator(s)) problems.push_back("after empty_cache: " + p);
    }
    if (!failure.empty() || !problems.empty()) {
        std::fprintf(stderr, "\nfuzz_ops: FAILED at seed %llu step %lld (%s, %s, %s)\n  step: %s\n", static_cast<unsigned long long>(o.seed),
                     static_cast<long long>(k), family.c_str(), op.c_str(), invalid ? "bad input" : "valid input", desc.c_str());
        if (!failure.empty()) std::fprintf(stderr, "  failure: %s\n", failure.c_str());
        for (const std::string& p : problems) std::fprintf(stderr, "  allocator: %s\n", p.c_str());
        std::fprintf(stderr, "  replay: fuzz_ops --seed %llu --steps %lld%s --verbose   (or --only %lld)\n", static_cast<unsigned long long>(o.seed),
                     static_cast<long long>(k + 1), replay_extra, static_cast<long long>(k));
        return false;
    }
    auto& c = counts[family];
    (invalid ? c.invalid : c.valid)++;
    c.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    auto& oc = ops[family + ": " + op];
    (invalid ? oc.invalid : oc.valid)++;
    if (o.verbose) {
        std::printf("step %lld (%.1f ms) %s%s: %s\n", static_cast<long long>(k),
                    1e3 * std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), invalid ? "bad input, " : "",
                    family.c_str(), desc.c_str());
        if (invalid) std::printf("    threw: %.300s\n", last_error_message().c_str());
    }
    return true;
}

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "fuzz_ops: %s needs a value\n", a.c_str());
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--seed") o.seed = std::stoull(value());
        else if (a == "--steps") o.steps = std::stoll(value());
        else if (a == "--only") o.only = std::stoll(value());
        else if (a == "--family") o.family = value();
        else if (a == "--piece-limit") o.piece_limit = std::stoll(value());
        else if (a == "--verbose") o.verbose = true;
        else {
            std::fprintf(stderr, "usage: fuzz_ops [--seed S] [--steps N] [--only K] [--family NAME] [--piece-limit E] [--verbose]\n");
            std::exit(2);
        }
    }
    if (o.piece_limit != 0 && o.piece_limit < 16) {
        std::fprintf(stderr, "fuzz_ops: --piece-limit %lld is below 16 (a piece of a flat iteration is a multiple of 16 elements)\n",
                     static_cast<long long>(o.piece_limit));
        std::exit(2);
    }
    if (const char* env = std::getenv("TESSEL_FUZZ_SEED"); env && *env) {
        o.seed = std::stoull(env);
        std::printf("fuzz_ops: seed %llu from TESSEL_FUZZ_SEED\n", static_cast<unsigned long long>(o.seed));
    }
    return o;
}

}  // namespace
}  // namespace fuzz

int main(int argc, char** argv) {
    using namespace fuzz;
    const Options o = parse(argc, argv);
#if defined(TESSEL_BACKEND_CUDA)
    if (tessel::device_count() == 0) {
        std::printf("fuzz_ops: skipped, no device: %s\n", tessel::unavailable_reason().c_str());
        return 77;
    }
#endif
#if defined(TESSEL_FUZZ_SANITIZED)
    __sanitizer_set_death_callback(crash_report);
#else
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) std::signal(sig, on_signal);
#endif
    current_seed = o.seed;
    std::optional<tessel::ops::detail::PieceLimitForTesting> pieces;
    if (o.piece_limit) {
        pieces.emplace(o.piece_limit);
        std::snprintf(replay_extra, sizeof replay_extra, " --piece-limit %lld", static_cast<long long>(o.piece_limit));
    }
    std::printf("fuzz_ops: seed %llu, %lld steps (replay: fuzz_ops --seed %llu --steps %lld%s)\n", static_cast<unsigned long long>(o.seed),
                static_cast<long long>(o.steps), static_cast<unsigned long long>(o.seed), static_cast<long long>(o.steps), replay_extra);
    std::fflush(stdout);
    const auto start = std::chrono::steady_clock::now();
    std::map<std::string, Counts> counts, ops;
    for (std::int64_t k = o.only >= 0 ? o.only : 0; k < (o.only >= 0 ? o.only + 1 : o.steps); ++k)
        if (!run_step(o, k, counts, ops)) return 1;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    Counts total;
    std::printf("fuzz_ops: seed %llu passed: ", static_cast<unsigned long long>(o.seed));
    for (const auto& [name, c] : counts) total.valid += c.valid, total.invalid += c.invalid;
    std::printf("%lld steps (%lld valid, %lld bad inputs) in %.1f s\n", static_cast<long long>(total.valid + total.invalid),
                static_cast<long long>(total.valid), static_cast<long long>(total.invalid), seconds);
    std::printf("  %-12s %7s %7s %9s\n", "family", "valid", "bad", "seconds");
    for (const auto& [name, c] : counts)
        std::printf("  %-12s %7lld %7lld %9.2f\n", name.c_str(), static_cast<long long>(c.valid), static_cast<long long>(c.invalid), c.seconds);
    if (o.verbose) {
        std::printf("  per op:\n");
        for (const auto& [name, c] : ops)
            std::printf("    %-60s %6lld %6lld\n", name.c_str(), static_cast<long long>(c.valid), static_cast<long long>(c.invalid));
    }
#if defined(TESSEL_BACKEND_SIM)
    std::printf("  sim: %llu kernel launches, %llu of them clusters\n", static_cast<unsigned long long>(tessel::sim::launch_count()),
                static_cast<unsigned long long>(tessel::sim::cluster_launch_count()));
#endif
    const memory::DeviceStats s = memory::stats();
    std::printf("  allocator: %lld device allocations, %lld frees, %lld retries, %lld OOMs; peak reserved %lld bytes\n",
                static_cast<long long>(s.num_device_alloc), static_cast<long long>(s.num_device_free), static_cast<long long>(s.num_alloc_retries),
                static_cast<long long>(s.num_ooms), static_cast<long long>(s.reserved_bytes[0].peak));
    return 0;
}
