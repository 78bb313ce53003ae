// tessel-collectives-bench: dist::Communicator's collectives timed the way nccl-tests times NCCL's
// (all_reduce_perf and friends): sizes from -b to -e bytes in steps of -f (the input's size, or for
// all_gather the gathered output's, as nccl-tests' size column), each warmed up, then
// --iters calls timed with events on every rank; the time is the slowest rank's mean. Bandwidths
// follow nccl-tests' PERFORMANCE.md: algbw = S / t with S the size column, and busbw, the figure to
// compare with the links' peak, = algbw x 2(n-1)/n for all_reduce, (n-1)/n for all_gather,
// reduce_scatter and all_to_all, 1 for broadcast and reduce. Before timing a size, one call on
// rank-dependent data is checked element by element (#wrong).
//   one process, every GPU:   tessel-collectives-bench [-g N] ...
//   a process per GPU:        tessel-run -n N tessel-collectives-bench ...
// Options: -b MIN -e MAX (bytes; K, M, G suffixes) -f FACTOR --iters N --warmup N
//          --op all_reduce|all_gather|reduce_scatter|broadcast|reduce|all_to_all|all --json FILE
#include <tessel/core/env.hpp>
#include <tessel/dist/communicator.hpp>
#include <tessel/tessel.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

using namespace tessel;
using dist::Communicator;
using dist::ReduceOp;

namespace {

struct Options {
    std::int64_t min_bytes = 8, max_bytes = 0, factor = 2;
    int iters = 20, warmup = 5, gpus = 0;
    std::vector<std::string> ops{"all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all"};
    std::string json;
};

// A byte count as nccl-tests takes it: 8, 64K, 1M, 1G (powers of 1024).
std::int64_t parse_size(const char* flag, const std::string& s) {
    return std::int64_t(env::parse_bytes(flag, s, 1, std::uint64_t(1) << 40));
}

// The ranks this process drives: one (from the environment) or every local device.
std::vector<Communicator> ranks(const Options& o) {
    if (std::getenv("RANK")) return {Communicator::from_env({.timeout = std::chrono::minutes(5)})};
    std::vector<Device> d;
    for (int i = 0; i < (o.gpus > 0 ? o.gpus : device_count()); ++i) d.push_back(Device{i});
    return Communicator::create_local(d, {.timeout = std::chrono::minutes(5)});
}

// S of nccl-tests for `op` with `count` elements per rank's input, and busbw's factor.
std::pair<double, double> size_and_factor(const std::string& op, std::int64_t count, int n) {
    const double b = double(count) * sizeof(float), m = double(n - 1) / n;
    if (op == "all_reduce") return {b, 2 * m};
    if (op == "all_gather") return {b * n, m};
    if (op == "reduce_scatter") return {b, m};  // count is the input's: n blocks
    if (op == "all_to_all") return {b, m};
    return {b, 1.0};  // broadcast, reduce
}

// One call of `op` on every local rank (in a group when there are several).
void issue(const std::string& op, std::vector<Communicator>& cs, std::vector<Tensor<float>>& in, std::vector<Tensor<float>>& out) {
    auto one = [&](std::size_t k) {
        const Communicator& c = cs[k];
        if (op == "all_reduce") c.all_reduce(in[k]);
        else if (op == "all_gather") c.all_gather(in[k], out[k]);
        else if (op == "reduce_scatter") c.reduce_scatter(in[k], out[k]);
        else if (op == "broadcast") c.broadcast(in[k], 0);
        else if (op == "reduce") c.reduce(in[k], 0);
        else c.all_to_all(in[k], out[k]);
    };
    if (cs.size() == 1) return one(0);
    dist::group([&] {
        for (std::size_t k = 0; k < cs.size(); ++k) one(k);
    });
}

// Elements of rank k's result that differ from what rank-dependent inputs (rank r's element i:
// r + 1 + i % 3) must give.
std::int64_t wrong(const std::string& op, const Communicator& c, const Tensor<float>& in, const Tensor<float>& out, std::int64_t count) {
    const int n = c.size(), me = c.rank();
    auto x = [](int r, std::int64_t i) { return float(r + 1 + i % 3); };
    const std::vector<float> got = (op == "all_gather" || op == "reduce_scatter" || op == "all_to_all" ? out : in).to_vector();
    std::int64_t bad = 0;
    for (std::int64_t i = 0; i < std::int64_t(got.size()); ++i) {
        float want = 0;
        if (op == "all_reduce" || (op == "reduce" && me == 0))
            for (int r = 0; r < n; ++r) want += x(r, i);
        else if (op == "reduce") want = x(me, i);
        else if (op == "broadcast") want = x(0, i);
        else if (op == "all_gather") want = x(int(i / count), i % count);
        else if (op == "reduce_scatter")
            for (int r = 0; r < n; ++r) want += x(r, me * std::int64_t(got.size()) + i);
        else {  // all_to_all: block j from rank j's block `me`
            const std::int64_t block = count / n;
            want = x(int(i / block), me * block + i % block);
        }
        bad += got[std::size_t(i)] != want;
    }
    return bad;
}

}  // namespace

constexpr const char* kUsage =
    "usage: tessel-collectives-bench [-g GPUS] [-b MIN] [-e MAX] [-f FACTOR] [--iters N] [--warmup N]\n"
    "                                [--op all_reduce|all_gather|reduce_scatter|broadcast|reduce|all_to_all|all]\n"
    "                                [--json FILE]\n"
    "  sizes in bytes, with K, M, G suffixes (powers of 1024); default -b 8 -e 1G (4M on the sim) -f 2 --iters 20 --warmup 5;\n"
    "  a process per GPU: tessel-run -n N tessel-collectives-bench ...\n";

int main(int argc, char** argv) {
    for (int i = 1; i < argc; ++i)
        if (std::string(argv[i]) == "-h" || std::string(argv[i]) == "--help") {
            std::fputs(kUsage, stdout);
            return 0;
        }
    if (device_count() == 0) {
        std::printf("no usable CUDA device: skipped\n");
        return 77;
    }
    Options o;
    try {
        for (int i = 1; i < argc; ++i) {
            const std::string a = argv[i];
            auto value = [&] {
                require(i + 1 < argc, a, " needs a value");
                return std::string(argv[++i]);
            };
            auto integer = [&](std::uint64_t lo, std::uint64_t hi) { return env::parse_integer(a.c_str(), value(), lo, hi); };
            if (a == "-b") o.min_bytes = parse_size("-b", value());
            else if (a == "-e") o.max_bytes = parse_size("-e", value());
            else if (a == "-f") o.factor = std::int64_t(integer(2, 1 << 20));
            else if (a == "--iters") o.iters = int(integer(1, 1000000));
            else if (a == "--warmup") o.warmup = int(integer(0, 1000000));
            else if (a == "-g") o.gpus = int(integer(1, 1024));
            else if (a == "--json") o.json = value();
            else if (a == "--op") {
                const std::string v = value();
                o.ops = v == "all" ? Options{}.ops : std::vector<std::string>{v};  // the last --op wins
            } else fail("unknown option ", a, " (--help lists them)");
        }
        for (const auto& op : o.ops)
            require(op == "all_reduce" || op == "all_gather" || op == "reduce_scatter" || op == "broadcast" || op == "reduce" || op == "all_to_all",
                    "--op ", op, " is not a collective");
        // 1 GiB on a GPU as nccl-tests' usual sweep; the sim copies through the CPU (and, across
        // processes, through a socket), so its default stops at 4 MiB.
        if (o.max_bytes == 0) o.max_bytes = std::max(o.min_bytes, backend == Backend::sim ? std::int64_t(4 << 20) : (std::int64_t(1) << 30));
        require(o.min_bytes <= o.max_bytes, "-b ", o.min_bytes, " is larger than -e ", o.max_bytes);

        std::vector<Communicator> cs = ranks(o);
        const int n = cs.front().size();
        const bool printer = cs.front().rank() == 0;
        std::ofstream json_file;  // rank 0's, opened before the run, so that a path it cannot write fails at once
        if (printer && !o.json.empty()) {
            json_file.open(o.json);
            require(bool(json_file), "--json: cannot write ", o.json);
        }
        std::string json = "[";
        if (printer)
            std::printf("# tessel-collectives-bench: %d ranks (%zu in this process), float32, %d warm-up + %d timed calls per size, %s\n", n,
                        cs.size(), o.warmup, o.iters, backend == Backend::sim ? "the sim (CPU figures)" : "CUDA + NCCL");
        for (const std::string& op : o.ops) {
            if (printer) {
                std::printf("#\n# %s\n#%12s %12s %10s %10s %10s %8s\n", op.c_str(), "size (B)", "count (in)", "time (us)", "algbw GB/s", "busbw GB/s", "#wrong");
            }
            std::int64_t previous_count = 0;  // sizes below a float per block round up to one: not repeated
            for (std::int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= o.factor) {
                // Elements per rank's input: a multiple of n for the ops that split it in blocks; for
                // all_gather 1/n of the size, which is the gathered output's, as nccl-tests' sweep.
                std::int64_t count = std::max<std::int64_t>(1, bytes / std::int64_t(sizeof(float)));
                if (op == "reduce_scatter" || op == "all_to_all") count = std::max<std::int64_t>(n, count / n * n);
                if (op == "all_gather") count = std::max<std::int64_t>(1, count / n);
                if (count == previous_count) continue;
                previous_count = count;
                const std::int64_t out_count = op == "all_gather" ? count * n : op == "reduce_scatter" ? count / n : count;
                std::vector<Tensor<float>> in, out;
                for (const Communicator& c : cs) {
                    std::vector<float> v(static_cast<std::size_t>(count));
                    for (std::int64_t i = 0; i < count; ++i) v[std::size_t(i)] = float(c.rank() + 1 + i % 3);
                    in.push_back(from_host<float>(std::span<const float>(v), Shape{count}, {.device = c.device()}));
                    out.push_back(full<float>({out_count}, -77.0f, {.device = c.device()}));
                }
                issue(op, cs, in, out);
                std::int64_t bad = 0;
                for (std::size_t k = 0; k < cs.size(); ++k) bad += wrong(op, cs[k], in[k], out[k], count);
                for (int w = 0; w < o.warmup; ++w) issue(op, cs, in, out);
                std::vector<Event> start, stop;
                for (const Communicator& c : cs) {
                    start.emplace_back(true, c.device()), stop.emplace_back(true, c.device());
                    start.back().record(current_stream(c.device()).handle());
                }
                for (int it = 0; it < o.iters; ++it) issue(op, cs, in, out);
                double slowest_ms = 0;
                for (std::size_t k = 0; k < cs.size(); ++k) {
                    stop[k].record(current_stream(cs[k].device()).handle());
                    stop[k].synchronize();
                    slowest_ms = std::max(slowest_ms, double(start[k].elapsed_ms(stop[k])) / o.iters);
                }
                for (const Communicator& c : cs) c.check();
                // A rank per process: the slowest rank's time and every rank's wrong elements, everywhere.
                if (cs.size() == 1 && n > 1) {
                    const TensorOptions here{.device = cs.front().device()};
                    auto t = from_host<double>({slowest_ms}, Shape{1}, here), w = from_host<double>({double(bad)}, Shape{1}, here);
                    cs.front().all_reduce(t, ReduceOp::max);
                    cs.front().all_reduce(w, ReduceOp::sum);
                    slowest_ms = t.to_vector()[0], bad = std::int64_t(w.to_vector()[0]);
                }
                const auto [s, factor] = size_and_factor(op, count, n);
                const double us = slowest_ms * 1e3, algbw = s / (slowest_ms * 1e-3) / 1e9, busbw = algbw * factor;
                if (printer) {
                    std::printf(" %12lld %12lld %10.1f %10.3f %10.3f %8lld\n", static_cast<long long>(s), static_cast<long long>(count), us, algbw,
                                busbw, static_cast<long long>(bad));
                    json += std::string(json.size() > 1 ? "," : "") + "\n {\"op\": \"" + op + "\", \"bytes\": " + std::to_string(std::int64_t(s)) +
                            ", \"count\": " + std::to_string(count) + ", \"ranks\": " + std::to_string(n) + ", \"time_us\": " + std::to_string(us) +
                            ", \"algbw_gbs\": " + std::to_string(algbw) + ", \"busbw_gbs\": " + std::to_string(busbw) +
                            ", \"wrong\": " + std::to_string(bad) + "}";
                }
                if (bad) {
                    if (printer) std::printf("tessel-collectives-bench: %s gave %lld wrong elements\n", op.c_str(), static_cast<long long>(bad));
                    return 1;
                }
            }
        }
        if (printer && json_file.is_open()) {
            json_file << json << "\n]\n";
            require(bool(json_file.flush()), "--json: cannot write ", o.json);
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "tessel-collectives-bench: %s\n", e.what());
        return 1;
    }
    return 0;
}
