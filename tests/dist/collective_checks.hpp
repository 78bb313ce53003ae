// Every collective and point-to-point call of one rank, checked against host references computed
// for all ranks: the rank's own view, so ranks in threads of one process and ranks in processes of
// their own (tests/dist/dist_worker.cu under tessel-run) run the same checks. Rank r's data are
// small integers distinct per rank and element (never zero: prod is not trivial), so every
// reduction but avg is exact in float and int32 (avg: NCCL premultiplies by 1/n, so within
// avg_tolerance of the mean); outputs are poisoned first so an unwritten element fails.
// Returns "" or what differed.
#pragma once

#include <tessel/dist/communicator.hpp>
#include <tessel/tessel.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

namespace tessel_test {

template <class T>
std::vector<T> rank_values(int rank, std::int64_t n, int salt = 0) {
    std::vector<T> v(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) v[std::size_t(i)] = T(1 + (i * 7 + rank * 3 + salt) % 5);
    return v;
}

// avg's relative error bound on positive data, in any order of the ranks: NCCL multiplies each
// rank's value by 1/n rounded to T (one rounding) and rounds the product (another), then adds the n
// products in an order of its algorithm's (n - 1 roundings, each relative to a partial sum no larger
// than the total on positive data): (n + 1) unit roundoffs, plus one for the second-order terms.
template <class T>
double avg_tolerance(int n) {
    return double(n + 2) * double(std::numeric_limits<T>::epsilon()) / 2;
}

template <class T>
std::string check_every_collective(const tessel::dist::Communicator& c, std::int64_t count = 1003) {
    using tessel::dist::ReduceOp;
    const int n = c.size(), me = c.rank();
    const tessel::TensorOptions here{.device = c.device()};
    auto on = [&](const std::vector<T>& v) { return tessel::from_host<T>(std::span<const T>(v), tessel::Shape{std::int64_t(v.size())}, here); };
    auto poisoned = [&](std::int64_t k) { return tessel::full<T>({k}, T(-77), here); };
    std::ostringstream errors;
    auto expect = [&](const char* what, const std::vector<T>& got, const std::vector<double>& want, double relative = 0.0) {
        for (std::size_t i = 0; i < want.size(); ++i)
            if (i >= got.size() || !(std::abs(double(got[i]) - want[i]) <= relative * std::abs(want[i]))) {
                errors << what << " on rank " << me << " of " << n << ": element " << i << " is "
                       << (i < got.size() ? double(got[i]) : -1.0) << ", want " << want[i] << "\n";
                return;
            }
    };
    auto as_double = [](const std::vector<T>& v) { return std::vector<double>(v.begin(), v.end()); };

    for (ReduceOp op : {ReduceOp::sum, ReduceOp::prod, ReduceOp::max, ReduceOp::min, ReduceOp::avg}) {
        if (std::is_integral_v<T> && op == ReduceOp::avg) continue;
        auto t = on(rank_values<T>(me, count, int(op)));
        c.all_reduce(t, op);
        std::vector<double> want(static_cast<std::size_t>(count));
        for (std::int64_t i = 0; i < count; ++i) {
            double acc = double(rank_values<T>(0, count, int(op))[std::size_t(i)]);
            for (int r = 1; r < n; ++r) {
                const double v = double(rank_values<T>(r, count, int(op))[std::size_t(i)]);
                acc = op == ReduceOp::prod ? acc * v : op == ReduceOp::max ? std::max(acc, v) : op == ReduceOp::min ? std::min(acc, v) : acc + v;
            }
            want[std::size_t(i)] = op == ReduceOp::avg ? acc / n : acc;
        }
        // avg is the exact mean up to avg_tolerance; the other ops are exact on these data.
        expect(("all_reduce op " + std::to_string(int(op))).c_str(), t.to_vector(), want, op == ReduceOp::avg ? avg_tolerance<T>(n) : 0.0);
    }
    {
        auto b = on(rank_values<T>(me, count, 11));
        c.broadcast(b, n - 1);
        expect("broadcast from the last rank", b.to_vector(), as_double(rank_values<T>(n - 1, count, 11)));
        auto red = on(rank_values<T>(me, count, 12));
        const int root = n / 2;
        c.reduce(red, root);
        std::vector<double> want = as_double(rank_values<T>(me, count, 12));  // non-roots: unchanged
        if (me == root) {
            std::fill(want.begin(), want.end(), 0.0);
            for (int r = 0; r < n; ++r)
                for (std::int64_t i = 0; i < count; ++i) want[std::size_t(i)] += double(rank_values<T>(r, count, 12)[std::size_t(i)]);
        }
        expect("reduce onto rank n/2", red.to_vector(), want);
    }
    {
        auto in = on(rank_values<T>(me, count, 13));
        auto gathered = poisoned(count * n);
        c.all_gather(in, gathered);
        std::vector<double> all;
        for (int r = 0; r < n; ++r) {
            const auto v = rank_values<T>(r, count, 13);
            all.insert(all.end(), v.begin(), v.end());
        }
        expect("all_gather", gathered.to_vector(), all);

        auto scatter_in = on(rank_values<T>(me, count * n, 14));
        auto scattered = poisoned(count);
        c.reduce_scatter(scatter_in, scattered);
        std::vector<double> block(static_cast<std::size_t>(count), 0.0);
        for (int r = 0; r < n; ++r)
            for (std::int64_t i = 0; i < count; ++i) block[std::size_t(i)] += double(rank_values<T>(r, count * n, 14)[std::size_t(me * count + i)]);
        expect("reduce_scatter", scattered.to_vector(), block);

        auto a2a_in = on(rank_values<T>(me, 5 * n, 15));
        auto a2a_out = poisoned(5 * n);
        c.all_to_all(a2a_in, a2a_out);
        std::vector<double> exchanged;
        for (int q = 0; q < n; ++q) {
            const auto v = rank_values<T>(q, 5 * n, 15);
            exchanged.insert(exchanged.end(), v.begin() + 5 * me, v.begin() + 5 * me + 5);
        }
        expect("all_to_all", a2a_out.to_vector(), exchanged);
    }
    {
        // A ring: send to the next rank, receive from the previous, in one group (NCCL would
        // deadlock on a ring of ungrouped sends).
        auto out = on(rank_values<T>(me, 37, 16));
        auto in = poisoned(37);
        tessel::dist::group([&] {
            c.send(out, (me + 1) % n);
            c.recv(in, (me + n - 1) % n);
        });
        expect("send/recv ring", in.to_vector(), as_double(rank_values<T>((me + n - 1) % n, 37, 16)));
    }
    c.barrier();
    tessel::current_stream(c.device()).synchronize();
    c.check();
    return errors.str();
}

}  // namespace tessel_test
