// One rank of a multi-process test job, started by tessel-run (ctest's dist.* entries):
//   dist_worker collectives   every collective on float and int32 (tests/dist/collective_checks.hpp),
//                             a split into even and odd ranks with an all_reduce in each half, and
//                             the debug exchange catching ranks that disagree on a size
//   dist_worker die           rank 1 exits right after joining; the others' next all_reduce must
//                             fail, naming the lost rank, well within the 60 s timeout
// Exit status 0 when the rank saw what it should; 77 (skipped) without a usable device.
#include <tessel/dist/communicator.hpp>
#include <tessel/tessel.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "collective_checks.hpp"

using tessel::dist::Communicator;

namespace {

int collectives() {
    Communicator c = Communicator::from_env({.timeout = std::chrono::seconds(60)});
    std::string errors = tessel_test::check_every_collective<float>(c) + tessel_test::check_every_collective<std::int32_t>(c, 517);
    // Even and odd ranks apart: rank r's value r, summed within its half.
    if (auto half = c.split(c.rank() % 2, c.rank())) {
        auto t = tessel::full<std::int32_t>({3}, c.rank(), {.device = c.device()});
        half->all_reduce(t);
        int want = 0;
        for (int r = c.rank() % 2; r < c.size(); r += 2) want += r;
        const int expected_size = (c.size() + 1 - c.rank() % 2) / 2;
        if (half->size() != expected_size || half->rank() != c.rank() / 2 || t.to_vector()[2] != want)
            errors += "split: rank " + std::to_string(c.rank()) + " is rank " + std::to_string(half->rank()) + " of " +
                      std::to_string(half->size()) + " with sum " + std::to_string(t.to_vector()[2]) + ", want rank " +
                      std::to_string(c.rank() / 2) + " of " + std::to_string(expected_size) + " with " + std::to_string(want) + "\n";
    } else {
        errors += "split: rank " + std::to_string(c.rank()) + " got no communicator\n";
    }
    if (c.size() > 1) {
        // Ranks that disagree on a size: the debug exchange throws on every rank before NCCL sees it.
        Communicator checked = Communicator::create(c.rank(), c.size(), [&] {
            auto id = c.rank() == 0 ? Communicator::unique_id() : tessel::dist::UniqueId{};
            auto t = tessel::empty<std::uint8_t>({std::int64_t(sizeof id)}, {.device = c.device()});
            if (c.rank() == 0) t.copy_(tessel::from_host<std::uint8_t>(std::span(reinterpret_cast<const std::uint8_t*>(&id), sizeof id),
                                                                       {std::int64_t(sizeof id)}, {.device = c.device()}));
            c.broadcast(t, 0);
            const auto bytes = t.to_vector();
            std::memcpy(&id, bytes.data(), sizeof id);
            return id;
        }(), c.device(), {.timeout = std::chrono::seconds(60), .debug_checks = true});
        auto t = tessel::zeros<float>({c.rank() == 1 ? 11 : 10}, {.device = c.device()});
        try {
            checked.all_reduce(t);
            errors += "debug exchange: rank " + std::to_string(c.rank()) + " ran an all_reduce whose size rank 1 disagreed with\n";
        } catch (const tessel::InvalidArgument& e) {
            if (std::string(e.what()).find("disagree") == std::string::npos) errors += std::string("debug exchange: ") + e.what() + "\n";
        }
    }
    if (!errors.empty()) {
        std::printf("%s", errors.c_str());
        return 1;
    }
    std::printf("rank %d of %d on device %d: every collective matches the host reference\n", c.rank(), c.size(), c.device().index);
    return 0;
}

int die() {
    Communicator c = Communicator::from_env({.timeout = std::chrono::seconds(60)});
    if (c.rank() == 1) {
        std::printf("rank 1: exiting without a word\n");
        std::fflush(stdout);
        std::_Exit(3);
    }
    const auto t0 = std::chrono::steady_clock::now();
    auto t = tessel::ones<float>({1000}, {.device = c.device()});
    try {
        c.all_reduce(t);
        tessel::current_stream(c.device()).synchronize();
        c.check();
    } catch (const tessel::Error& e) {
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::string what = e.what();
        std::replace(what.begin(), what.end(), '\n', ' ');  // one line, for the log's grep
        std::printf("rank %d: the all_reduce failed after %.2f s: %s\n", c.rank(), s, what.c_str());
        std::fflush(stdout);
        // Rank 0's process holds the job's store and (on the sim) the NCCL hub: as in a real job, it
        // stays up a moment so the other survivors hear why, not only that rank 0 went away.
        if (c.rank() == 0) std::this_thread::sleep_for(std::chrono::seconds(1));
        return s < 30 ? 0 : 1;
    }
    std::printf("rank %d: the all_reduce completed without rank 1 (element 0: %g, %d ranks)\n", c.rank(), double(t.to_vector()[0]), c.size());
    return 1;
}

}  // namespace

int main(int argc, char** argv) {
    if (tessel::device_count() == 0) {
        std::printf("no usable device: skipped\n");
        return 77;
    }
    const std::string mode = argc > 1 ? argv[1] : "";
    try {
        if (mode == "collectives") return collectives();
        if (mode == "die") return die();
    } catch (const std::exception& e) {
        std::printf("rank failed: %s\n", e.what());
        return 1;
    }
    std::printf("usage: dist_worker collectives|die\n");
    return 2;
}
