// Data-parallel gradient averaging, one process per GPU: each rank holds its own "gradients",
// all_reduce(avg) makes them equal everywhere, and every rank checks the result against the mean
// it can compute itself. Start it like torchrun:
//   tessel-run -n 4 ./allreduce            (one host; on the sim, 4 simulated devices)
//   MASTER_ADDR=node0 MASTER_PORT=29500 RANK=.. WORLD_SIZE=.. LOCAL_RANK=.. ./allreduce   (several hosts)
#include <tessel/dist/communicator.hpp>
#include <tessel/tessel.hpp>

#include <chrono>
#include <cstdio>
#include <span>
#include <vector>

int main() try {
    if (tessel::device_count() == 0) {
        std::printf("no usable CUDA device: skipped\n");
        return 77;
    }
    using namespace tessel;
    dist::Communicator comm = dist::Communicator::from_env({.timeout = std::chrono::seconds(120)});
    const std::int64_t n = 1 << 20;
    // Rank r's gradients: r + i % 7, so the mean over ranks is (size-1)/2 + i % 7.
    std::vector<float> host(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) host[std::size_t(i)] = float(comm.rank() + i % 7);
    auto grads = from_host<float>(std::span<const float>(host), Shape{n}, {.device = comm.device()});
    const auto t0 = std::chrono::steady_clock::now();
    comm.all_reduce(grads, dist::ReduceOp::avg);
    const auto got = grads.to_vector();  // waits for the all_reduce
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::int64_t wrong = 0;
    for (std::int64_t i = 0; i < n; ++i)
        if (got[std::size_t(i)] != float(i % 7) + float(comm.size() - 1) / 2) ++wrong;
    std::printf("rank %d of %d (device %d): all_reduce(avg) of %lld floats in %.2f ms, %lld wrong\n", comm.rank(), comm.size(),
                comm.device().index, static_cast<long long>(n), ms, static_cast<long long>(wrong));
    return wrong == 0 ? 0 : 1;
} catch (const std::exception& e) {  // a bad environment (RANK, MASTER_PORT, ...), a rank that failed
    std::fprintf(stderr, "allreduce: %s\n", e.what());
    return 1;
}
