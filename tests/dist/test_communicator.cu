// dist::Communicator against host references: every collective and point-to-point call on 1, 2,
// 3 and 4 ranks of one process (the sim's devices: ctest tests.sim-dist runs these with 4 simulated
// devices; a GPU runs the 1-rank case in the main suite), integer-valued data of odd length so each
// reduction but avg is exact (avg within its bound), outputs poisoned first; then what must fail: a
// rank that never joins (the watchdog aborts after the timeout and the error names the collective),
// ranks that disagree on a collective's size (the sim's stand-in names both), and bad arguments;
// then NCCL's arithmetic (tolerances that hold for any order of the ranks; on the sim, whose order
// is fixed, the exact per-step result too) and the misuse NCCL would hang or corrupt memory on.
#include <tessel/dist/communicator.hpp>
#include <tessel/tessel.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <future>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "../support/device_array.hpp"
#include "collective_checks.hpp"

using tessel::Device;
using tessel::Tensor;
using tessel::dist::Communicator;
using tessel::dist::ReduceOp;

namespace {

constexpr std::int64_t count = 1003;

// Waits for a stream whose queued work may or may not have failed (an aborted NCCL call's kernel).
void try_synchronize(const tessel::Stream& s) {
    try {
        s.synchronize();
    } catch (const tessel::Error&) {
    }
}

// Rank r's data (tests/dist/collective_checks.hpp): small integers, distinct per rank and element.
template <class T>
std::vector<T> values(int rank, std::int64_t n, int salt = 0) {
    return tessel_test::rank_values<T>(rank, n, salt);
}
template <class T>
Tensor<T> on(const std::vector<T>& v, Device d) {
    return tessel::from_host<T>(std::span<const T>(v), tessel::Shape{std::int64_t(v.size())}, tessel::TensorOptions{.device = d});
}
template <class T>
Tensor<T> poisoned(std::int64_t n, Device d) {
    return tessel::full<T>({n}, T(-77), tessel::TensorOptions{.device = d});
}
std::vector<Device> first(int n) {
    std::vector<Device> d;
    for (int i = 0; i < n; ++i) d.push_back(Device{i});
    return d;
}
void sync_all(const std::vector<Communicator>& comms) {
    for (const auto& c : comms) tessel::current_stream(c.device()).synchronize();
}

template <class T>
void check_collectives(int n) {
    INFO(n << " ranks, " << (std::is_same_v<T, float> ? "float" : "int32"));
    const std::vector<Communicator> comms = Communicator::create_local(first(n));
    REQUIRE(int(comms.size()) == n);
    for (int r = 0; r < n; ++r) {
        CHECK(comms[std::size_t(r)].rank() == r);
        CHECK(comms[std::size_t(r)].size() == n);
        CHECK(comms[std::size_t(r)].device().index == r);
    }
    // all_reduce with every op.
    std::vector<std::vector<T>> data;
    for (int r = 0; r < n; ++r) data.push_back(values<T>(r, count));
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::prod, ReduceOp::max, ReduceOp::min, ReduceOp::avg}) {
        if (std::is_integral_v<T> && op == ReduceOp::avg) continue;  // floating point only
        std::vector<Tensor<T>> t;
        for (int r = 0; r < n; ++r) t.push_back(on(values<T>(r, count), Device{r}));
        tessel::dist::group([&] {
            for (int r = 0; r < n; ++r) comms[std::size_t(r)].all_reduce(t[std::size_t(r)], op);
        });
        std::vector<double> want(count);
        for (std::int64_t i = 0; i < count; ++i) {
            double acc = double(data[0][std::size_t(i)]);
            for (int r = 1; r < n; ++r) {
                const double v = double(data[std::size_t(r)][std::size_t(i)]);
                acc = op == ReduceOp::prod ? acc * v : op == ReduceOp::max ? std::max(acc, v) : op == ReduceOp::min ? std::min(acc, v) : acc + v;
            }
            if (op == ReduceOp::avg) acc /= n;  // the mean: NCCL premultiplies by 1/n, within avg_tolerance of it
            want[std::size_t(i)] = acc;
        }
        const double tolerance = op == ReduceOp::avg ? tessel_test::avg_tolerance<T>(n) : 0.0;
        for (int r = 0; r < n; ++r) {
            const auto got = t[std::size_t(r)].to_vector();
            INFO("all_reduce op " << int(op) << " on rank " << r);
            for (std::int64_t i = 0; i < count; ++i)
                REQUIRE(std::abs(double(got[std::size_t(i)]) - want[std::size_t(i)]) <= tolerance * std::abs(want[std::size_t(i)]));
        }
    }
    // broadcast from the last rank; reduce (sum) onto rank 0, the others unchanged.
    {
        std::vector<Tensor<T>> b, red;
        for (int r = 0; r < n; ++r) b.push_back(on(values<T>(r, count, 1), Device{r})), red.push_back(on(values<T>(r, count, 2), Device{r}));
        tessel::dist::group([&] {
            for (int r = 0; r < n; ++r) comms[std::size_t(r)].broadcast(b[std::size_t(r)], n - 1);
        });
        tessel::dist::group([&] {
            for (int r = 0; r < n; ++r) comms[std::size_t(r)].reduce(red[std::size_t(r)], 0);
        });
        for (int r = 0; r < n; ++r) CHECK(b[std::size_t(r)].to_vector() == values<T>(n - 1, count, 1));
        std::vector<T> sum(count, T(0));
        for (int r = 0; r < n; ++r) {
            const auto v = values<T>(r, count, 2);
            for (std::int64_t i = 0; i < count; ++i) sum[std::size_t(i)] = T(sum[std::size_t(i)] + v[std::size_t(i)]);
        }
        CHECK(red[0].to_vector() == sum);
        for (int r = 1; r < n; ++r) CHECK(red[std::size_t(r)].to_vector() == values<T>(r, count, 2));
    }
    // all_gather, reduce_scatter, all_to_all.
    {
        std::vector<Tensor<T>> in, gathered, scatter_in, scattered, a2a_in, a2a_out;
        for (int r = 0; r < n; ++r) {
            const Device d{r};
            in.push_back(on(values<T>(r, count, 3), d));
            gathered.push_back(poisoned<T>(count * n, d));
            scatter_in.push_back(on(values<T>(r, count * n, 4), d));
            scattered.push_back(poisoned<T>(count, d));
            a2a_in.push_back(on(values<T>(r, 5 * n, 5), d));
            a2a_out.push_back(poisoned<T>(5 * n, d));
        }
        tessel::dist::group([&] {
            for (int r = 0; r < n; ++r) {
                const auto& c = comms[std::size_t(r)];
                c.all_gather(in[std::size_t(r)], gathered[std::size_t(r)]);
                c.reduce_scatter(scatter_in[std::size_t(r)], scattered[std::size_t(r)]);
                c.all_to_all(a2a_in[std::size_t(r)], a2a_out[std::size_t(r)]);
            }
        });
        std::vector<T> all;
        for (int r = 0; r < n; ++r) {
            const auto v = values<T>(r, count, 3);
            all.insert(all.end(), v.begin(), v.end());
        }
        std::vector<std::vector<T>> scatter_data;
        for (int q = 0; q < n; ++q) scatter_data.push_back(values<T>(q, count * n, 4));
        for (int r = 0; r < n; ++r) {
            CHECK(gathered[std::size_t(r)].to_vector() == all);
            std::vector<T> block(count, T(0));
            for (int q = 0; q < n; ++q)
                for (std::int64_t i = 0; i < count; ++i)
                    block[std::size_t(i)] = T(block[std::size_t(i)] + scatter_data[std::size_t(q)][std::size_t(r * count + i)]);
            CHECK(scattered[std::size_t(r)].to_vector() == block);
            std::vector<T> exchanged;
            for (int q = 0; q < n; ++q) {
                const auto v = values<T>(q, 5 * n, 5);
                exchanged.insert(exchanged.end(), v.begin() + 5 * r, v.begin() + 5 * r + 5);
            }
            CHECK(a2a_out[std::size_t(r)].to_vector() == exchanged);
        }
    }
    // A ring of sends and receives, then a barrier.
    {
        std::vector<Tensor<T>> out, got;
        for (int r = 0; r < n; ++r) out.push_back(on(values<T>(r, 17, 6), Device{r})), got.push_back(poisoned<T>(17, Device{r}));
        tessel::dist::group([&] {
            for (int r = 0; r < n; ++r) {
                comms[std::size_t(r)].send(out[std::size_t(r)], (r + 1) % n);
                comms[std::size_t(r)].recv(got[std::size_t(r)], (r + n - 1) % n);
            }
        });
        tessel::dist::group([&] {
            for (const auto& c : comms) c.barrier();
        });
        sync_all(comms);
        for (int r = 0; r < n; ++r) CHECK(got[std::size_t(r)].to_vector() == values<T>((r + n - 1) % n, 17, 6));
    }
    for (const auto& c : comms) c.check();
}

}  // namespace

TEST_CASE("collectives on one rank", "[dist]") {
    if (tessel::device_count() == 0) return;
    check_collectives<float>(1);
    check_collectives<std::int32_t>(1);
}

TEST_CASE("every collective on 1 to 4 ranks matches the host reference", "[.dist4]") {
    REQUIRE(tessel::device_count() >= 4);
    for (int n = 1; n <= 4; ++n) {
        check_collectives<float>(n);
        check_collectives<std::int32_t>(n);
    }
}

TEST_CASE("a rank that never joins: the watchdog aborts, and the error names the collective", "[.dist4]") {
    REQUIRE(tessel::device_count() >= 2);
    const auto comms = Communicator::create_local(first(2), {.timeout = std::chrono::milliseconds(200)});
    const tessel::Stream s0 = tessel::Stream::create({}, Device{0});
    const Tensor<float> t = on(values<float>(0, count), Device{0});
    const auto start = std::chrono::steady_clock::now();
    comms[0].all_reduce(t, ReduceOp::sum, s0.handle());  // rank 1 never calls it
    std::string stream_error;
    try {
        s0.synchronize();
    } catch (const tessel::Error& e) {
        stream_error = e.what();
    }
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    CHECK(waited >= 0.2);
    CHECK(waited < 5);  // aborted, not hung
    if (!stream_error.empty()) CHECK_THAT(stream_error, Catch::Contains("rank(s) 1, which never joined"));
    std::string error;
    try {
        comms[0].check();
    } catch (const tessel::LibraryError& e) {
        error = e.what();
    }
    CHECK_THAT(error, Catch::Contains("all_reduce on rank 0 did not complete within 200 ms") && Catch::Contains("rank 0 of 2, device 0"));
    CHECK_THROWS_AS(comms[0].all_reduce(t), tessel::LibraryError);  // every later call too
}

TEST_CASE("ranks that disagree on a collective's size fail, naming both", "[.dist4]") {
    REQUIRE(tessel::device_count() >= 2);
#if defined(TESSEL_BACKEND_SIM)
    const std::size_t live = tessel::sim::nccl::live_communicators();
#endif
    {
    const auto comms = Communicator::create_local(first(2));
    std::vector<tessel::Stream> streams = {tessel::Stream::create({}, Device{0}), tessel::Stream::create({}, Device{1})};
    const Tensor<float> a = on(values<float>(0, 12), Device{0}), b = on(values<float>(1, 10), Device{1});
    tessel::dist::group([&] {  // one thread, two ranks: a group, as NCCL requires
        comms[0].all_reduce(a, ReduceOp::sum, streams[0].handle());
        comms[1].all_reduce(b, ReduceOp::sum, streams[1].handle());
    });
    for (auto& s : streams) {
        try {
            s.synchronize();
        } catch (const tessel::Error&) {
        }
    }
    for (const auto& c : comms) {
        std::string error;
        try {
            c.check();
        } catch (const tessel::LibraryError& e) {
            error = e.what();
        }
        CHECK_THAT(error, Catch::Contains("ranks disagree: rank 0 called ncclAllReduce with 12 float32 elements") &&
                              Catch::Contains("rank 1 ncclAllReduce with 10 float32 elements"));
    }
    }
#if defined(TESSEL_BACKEND_SIM)
    // Communicators that hold an error are aborted, not destroyed: NCCL's destroy would refuse them
    // (and leak them), as the stand-in's does.
    CHECK(tessel::sim::nccl::live_communicators() == live);
#endif
}

TEST_CASE("collectives refuse bad arguments with a message naming them", "[dist]") {
    if (tessel::device_count() == 0) return;
    using tessel::testing::message;
    const auto comms = Communicator::create_local({Device{0}});
    const auto& c = comms[0];
    CHECK_THAT(message([&] { (void)Communicator::create_local({Device{0}, Device{0}}); }), Catch::Contains("device 0 is listed twice"));
    CHECK_THAT(message([&] { (void)Communicator::create_local({Device{tessel::device_count()}}); }), Catch::Contains("does not exist"));
    const Tensor<float> m = tessel::zeros<float>({4, 6});
    CHECK_THAT(message([&] { c.all_reduce(m.transpose(0, 1)); }), Catch::Contains("is not contiguous"));
    CHECK_THAT(message([&] { c.all_reduce(tessel::zeros<float>({4}, {.space = tessel::MemorySpace::host})); }),
               Catch::Contains("collectives take device memory"));
    CHECK_THAT(message([&] { c.broadcast(m, 1); }), Catch::Contains("root 1 is not a rank of this communicator (1 ranks)"));
    CHECK_THAT(message([&] { c.all_gather(m, tessel::zeros<float>({23})); }), Catch::Contains("out must hold 1 x 24 elements"));
    CHECK_THAT(message([&] { c.send(m, -1); }), Catch::Contains("peer -1 is not a rank"));
    tessel::current_stream(Device{0}).synchronize();
    c.check();
}

// ---- one rank per thread or process: the rendezvous store, the environment, create() and split ----

TEST_CASE("TcpStore: set, get and add across clients; get and connect time out naming the key and the address", "[dist]") {
    using tessel::dist::TcpStore;
    const auto wait = std::chrono::milliseconds(300);
    TcpStore server("127.0.0.1", 0, true, std::chrono::seconds(10));
    REQUIRE(server.port() > 0);
    std::vector<std::string> got(3);
    std::vector<std::int64_t> counts(3);
    std::vector<std::thread> clients;
    for (int r = 0; r < 3; ++r)
        clients.emplace_back([&, r] {
            TcpStore client("127.0.0.1", server.port(), false, std::chrono::seconds(10));
            got[std::size_t(r)] = client.get("id");  // set below, after the clients started waiting
            counts[std::size_t(r)] = client.add("joined", 1);
        });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    server.set("id", std::string("\0binary\xff", 8));
    for (auto& t : clients) t.join();
    for (const auto& g : got) CHECK(g == std::string("\0binary\xff", 8));
    std::sort(counts.begin(), counts.end());
    CHECK(counts == std::vector<std::int64_t>{1, 2, 3});
    CHECK(server.add("joined", 0) == 3);
    // add() on a key holding text, or past int64: an error for that call; the store serves on.
    server.set("text", "abc");
    CHECK_THROWS_WITH(server.add("text", 1), Catch::Contains("key 'text' holds 'abc'"));
    CHECK(server.add("big", std::numeric_limits<std::int64_t>::max()) == std::numeric_limits<std::int64_t>::max());
    CHECK_THROWS_WITH(server.add("big", 1), Catch::Contains("cannot be added as a 64-bit integer"));
    CHECK(server.add("joined", 0) == 3);

    TcpStore impatient("127.0.0.1", server.port(), false, wait);
    CHECK_THROWS_WITH(impatient.get("never-set"), Catch::Contains("'never-set' was not set within 300 ms"));
    // Nothing listens on the port a closed store had: the error names the address and says what to check.
    int closed_port = 0;
    {
        TcpStore gone("127.0.0.1", 0, true, wait);
        closed_port = gone.port();
    }
    CHECK_THROWS_WITH(TcpStore("127.0.0.1", closed_port, false, wait),
                      Catch::Contains("127.0.0.1:" + std::to_string(closed_port)) && Catch::Contains("is rank 0 running"));
}

TEST_CASE("TcpStore: a connect to a host that does not answer gives up at the timeout", "[dist]") {
    // A listener whose accept queue is full drops further connection requests, as a host behind a
    // firewall does: a blocking connect would wait for the kernel's retries (minutes).
    tessel::dist::Listener full("127.0.0.1", 0);
    std::vector<tessel::dist::Socket> queued;
    for (int i = 0; i < 64; ++i) {  // fill the queue (128 deep) without accepting; later ones stall
        tessel::dist::Socket s(::socket(AF_INET, SOCK_STREAM, 0));
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(std::uint16_t(full.port()));
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        ::fcntl(s.fd(), F_SETFL, O_NONBLOCK);
        (void)::connect(s.fd(), reinterpret_cast<const sockaddr*>(&a), sizeof a);
        queued.push_back(std::move(s));
    }
    for (int i = 0; i < 200; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        try {
            // Queued (the kernel completes the handshake for the accept queue): it stays there after
            // the client closes, one more toward a full queue.
            tessel::dist::TcpStore client("127.0.0.1", full.port(), false, std::chrono::milliseconds(300));
            continue;
        } catch (const tessel::dist::NetworkError& e) {
            CHECK_THAT(e.what(), Catch::Contains("did not answer") && Catch::Contains("within 300 ms"));
        }
        CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(3));
        return;
    }
    WARN("this kernel never dropped a connection request to a full accept queue: the case was not exercised");
}

TEST_CASE("TcpStore: the serving rank reaches its store on the address MASTER_ADDR names, IPv4 or IPv6", "[dist]") {
    using tessel::dist::TcpStore;
    // 127.0.0.2 stands for a host's network address: a listener bound there is not reachable at
    // 127.0.0.1 (the serving rank used to dial that, and a two-host job never met).
    std::vector<std::string> hosts{"127.0.0.2", "localhost"};
    try {
        tessel::dist::Listener probe("::1", 0);
        hosts.push_back("::1");
    } catch (const tessel::dist::NetworkError& e) {
        WARN("no IPv6 loopback here, its case is left out: " << e.what());
    }
    for (const std::string& host : hosts) {
        INFO("MASTER_ADDR=" << host);
        TcpStore server(host, 0, true, std::chrono::seconds(2));
        TcpStore client(host, server.port(), false, std::chrono::seconds(2));
        server.set("id", "x");
        CHECK(client.get("id") == "x");
        CHECK(server.add("n", 2) == 2);
        // It listens on every interface, as torch's: another host reaches it at this host's network
        // address even where MASTER_ADDR resolves here to a loopback one (Debian's 127.0.1.1).
        TcpStore elsewhere("127.0.0.3", server.port(), false, std::chrono::seconds(2));
        CHECK(elsewhere.get("id") == "x");
    }
}

namespace {
// Sets the job variables for one test and restores the process's environment afterwards.
struct JobEnv {
    explicit JobEnv(std::vector<std::pair<const char*, const char*>> vars) {
        for (const char* k : {"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"}) {
            const char* v = std::getenv(k);
            saved.emplace_back(k, v ? std::optional<std::string>(v) : std::nullopt);
            ::unsetenv(k);
        }
        for (auto [k, v] : vars) ::setenv(k, v, 1);
    }
    ~JobEnv() {
        for (auto& [k, v] : saved)
            if (v) ::setenv(k, v->c_str(), 1);
            else ::unsetenv(k);
    }
    std::vector<std::pair<const char*, std::optional<std::string>>> saved;
};
}  // namespace

TEST_CASE("from_env names the variable that is missing or wrong", "[dist]") {
    using Catch::Contains;
    {
        JobEnv env({{"RANK", "0"}, {"WORLD_SIZE", "2"}});
        CHECK_THROWS_AS(Communicator::from_env(), tessel::InvalidArgument);
        CHECK_THROWS_WITH(Communicator::from_env(), Contains("MASTER_PORT is not set") && Contains("tessel-run -n N"));
    }
    {
        JobEnv env({{"MASTER_PORT", "29500"}, {"RANK", "2"}, {"WORLD_SIZE", "2"}});
        CHECK_THROWS_WITH(Communicator::from_env(), Contains("RANK=2 must be in [0, WORLD_SIZE=2)"));
    }
    {
        JobEnv env({{"MASTER_PORT", "29500"}, {"RANK", "one"}, {"WORLD_SIZE", "2"}});
        CHECK_THROWS_WITH(Communicator::from_env(), Contains("RANK='one' is not an integer"));
    }
    {
        JobEnv env({{"MASTER_PORT", "70000"}, {"RANK", "0"}, {"WORLD_SIZE", "1"}});
        CHECK_THROWS_WITH(Communicator::from_env(), Contains("MASTER_PORT=70000 is not a TCP port"));
    }
    {
        JobEnv env({{"MASTER_PORT", "29500"}, {"RANK", "0"}});
        CHECK_THROWS_WITH(Communicator::from_env(), Contains("WORLD_SIZE is not set"));
    }
    {
        const std::string beyond = std::to_string(tessel::device_count());
        JobEnv env({{"MASTER_PORT", "29500"}, {"RANK", "0"}, {"WORLD_SIZE", "64"}, {"LOCAL_RANK", beyond.c_str()}});
        CHECK_THROWS_WITH(Communicator::from_env(), Contains("LOCAL_RANK=" + beyond + " but this process sees"));
    }
}

namespace {
// n ranks, a thread each, sharing one id; f(rank's communicator) returns "" or what went wrong.
template <class F>
std::vector<std::string> in_threads(int n, F f, tessel::dist::CommOptions options = {}) {
    const auto id = Communicator::unique_id();
    std::vector<std::string> out(static_cast<std::size_t>(n));
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r)
        threads.emplace_back([&, r] {
            try {
                tessel::DeviceGuard guard(Device{r});
                Communicator c = Communicator::create(r, n, id, Device{r}, options);
                out[std::size_t(r)] = f(c);
            } catch (const std::exception& e) {
                out[std::size_t(r)] = std::string("threw: ") + e.what();
            }
        });
    for (auto& t : threads) t.join();
    return out;
}
}  // namespace

TEST_CASE("create(): a rank per thread from one id, every collective on 1 to 4 ranks, and split", "[.dist4]") {
    for (int n = 1; n <= 4; ++n) {
        INFO(n << " ranks");
        const auto results = in_threads(n, [](const Communicator& c) {
            std::string e = tessel_test::check_every_collective<float>(c, 301) + tessel_test::check_every_collective<std::int32_t>(c, 77);
            auto half = c.split(c.rank() % 2, -c.rank());  // keys reverse the order within each half
            if (!half) return e + "split: no communicator\n";
            const int size = (c.size() + 1 - c.rank() % 2) / 2;
            if (half->size() != size || half->rank() != size - 1 - c.rank() / 2) e += "split: rank " + std::to_string(half->rank()) + " of " +
                                                                                      std::to_string(half->size()) + "\n";
            return e + tessel_test::check_every_collective<float>(*half, 19);
        });
        for (int r = 0; r < n; ++r) CHECK(results[std::size_t(r)] == "");
    }
    // A negative colour takes no part.
    const auto results = in_threads(3, [](const Communicator& c) {
        auto sub = c.split(c.rank() == 1 ? -1 : 0, c.rank());
        if (c.rank() == 1) return std::string(sub ? "rank 1 got a communicator" : "");
        return sub && sub->size() == 2 ? tessel_test::check_every_collective<float>(*sub, 5) : std::string("no communicator of 2");
    });
    for (const auto& r : results) CHECK(r == "");
}

TEST_CASE("a rank per thread: one that aborts fails the others at once; one that never comes times out; the debug exchange", "[.dist4]") {
    using Catch::Contains;
    // Rank 2 aborts instead of joining the all_reduce: the others fail fast, naming it, long before the 60 s timeout.
    const auto t0 = std::chrono::steady_clock::now();
    auto results = in_threads(3, [](const Communicator& c) -> std::string {
        if (c.rank() == 2) {
            c.abort();
            return "";
        }
        auto t = tessel::ones<float>({100}, {.device = c.device()});
        try {
            c.all_reduce(t);
            tessel::current_stream(c.device()).synchronize();
            c.check();
        } catch (const tessel::Error& e) {
            return e.what();
        }
        return "no error";
    }, {.timeout = std::chrono::seconds(60)});
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20));
    for (int r : {0, 1}) CHECK_THAT(results[std::size_t(r)], Contains("rank 2") && Contains("ncclAllReduce"));
    // Only rank 0 of 2 ever calls create(): it times out, naming the call.
    const auto id = Communicator::unique_id();
    CHECK_THROWS_WITH(Communicator::create(0, 2, id, Device{0}, {.timeout = std::chrono::milliseconds(300)}),
                      Contains("not every rank joined within 300 ms") && Contains("rank 0 of 2"));
    // Ranks disagreeing on a size, with the debug exchange on: both throw InvalidArgument naming both calls.
    results = in_threads(2, [](const Communicator& c) -> std::string {
        auto t = tessel::zeros<float>({c.rank() == 1 ? 11 : 10}, {.device = c.device()});
        try {
            c.all_reduce(t);
        } catch (const tessel::InvalidArgument& e) {
            return e.what();
        }
        return "no error";
    }, {.timeout = std::chrono::seconds(60), .debug_checks = true});
    for (const auto& r : results)
        CHECK_THAT(r, Contains("all_reduce: the ranks disagree") && Contains("rank 0 calls all_reduce of 10 elements") &&
                          Contains("rank 1 calls all_reduce of 11 elements"));
}

TEST_CASE("the debug exchange waits under the timeout: a rank that never calls aborts the communicator", "[.dist4]") {
    using Catch::Contains;
    const auto t0 = std::chrono::steady_clock::now();
    const auto results = in_threads(2, [](const Communicator& c) -> std::string {
        if (c.rank() == 1) {  // never calls; stays a member until rank 0 has given up
            std::this_thread::sleep_for(std::chrono::seconds(2));
            return "";
        }
        auto t = tessel::ones<float>({8}, {.device = c.device()});
        std::string what = "no error";
        try {
            c.all_reduce(t);
        } catch (const tessel::Error& e) {
            what = e.what();
        }
        try {  // the aborted exchange's failure, which the sim reports on the stream (NCCL's kernels just end)
            tessel::current_stream(c.device()).synchronize();
        } catch (const tessel::Error&) {
        }
        return what;
    }, {.timeout = std::chrono::milliseconds(300), .debug_checks = true});
    CHECK_THAT(results[0], Contains("the debug exchange (TESSEL_DIST_DEBUG) before all_reduce on rank 0 did not complete within 300 ms"));
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
}

TEST_CASE("a dist::group whose body throws aborts the communicators whose calls it had issued", "[.dist4]") {
    using Catch::Contains;
    // Rank 0's all_reduce is issued; rank 1's is refused (a tensor of another device). NCCL runs rank
    // 0's at the group's end with no counterpart: its communicator is aborted, so the next call
    // throws instead of pairing with it, and the stream does not hang.
    const auto comms = Communicator::create_local(first(2), {.timeout = std::chrono::seconds(60)});
    const auto a0 = tessel::ones<float>({8}, {.device = Device{0}});
    const auto wrong = tessel::ones<float>({8}, {.device = Device{0}});
    CHECK_THROWS_WITH(tessel::dist::group([&] {
        comms[0].all_reduce(a0);
        comms[1].all_reduce(wrong);
    }), Contains("the tensor is on device 0, rank 1 is device 1"));
    const auto t0 = std::chrono::steady_clock::now();
    try {  // the aborted call ends (the sim reports its failure on the stream; NCCL's kernels just end)
        tessel::current_stream(Device{0}).synchronize();
    } catch (const tessel::Error&) {
    }
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
    CHECK_THROWS_WITH(comms[0].all_reduce(a0), Contains("communicator aborted") && Contains("all_reduce on rank 0") &&
                                                   Contains("the dist::group it was issued in threw before its end") &&
                                                   Contains("the tensor is on device 0, rank 1 is device 1"));
}

// ---- NCCL's semantics the sim's stand-in follows, and the misuse tessel refuses ----

namespace {
template <class T>
double to_double(T v) {
    if constexpr (std::is_arithmetic_v<T>) return double(v);
    else return double(float(v));
}
template <class T>
T from_double(double v) {
    if constexpr (std::is_arithmetic_v<T>) return T(v);
    else return T(float(v));
}
// all_reduce(op) of rank r's data[r] over the ranks of create_local (one group): every rank's result.
template <class T>
std::vector<std::vector<T>> all_reduce_local(const std::vector<Communicator>& comms, const std::vector<std::vector<double>>& data, ReduceOp op) {
    std::vector<Tensor<T>> t;
    for (std::size_t r = 0; r < comms.size(); ++r) {
        std::vector<T> v;
        for (double x : data[r]) v.push_back(from_double<T>(x));
        t.push_back(on(v, comms[r].device()));
    }
    tessel::dist::group([&] {
        for (std::size_t r = 0; r < comms.size(); ++r) comms[r].all_reduce(t[r], op);
    });
    std::vector<std::vector<T>> out;
    for (const auto& x : t) out.push_back(x.to_vector());
    return out;
}

// A sum of 16-bit or fp8 values on 3 ranks: within the bound of n - 1 roundings to T in any order
// (NCCL's depends on its algorithm), |error| <= (n - 1) u sum|x| with u T's unit roundoff (fp8:
// NCCL adds in half and rounds to fp8, u of both). Element 0 is big + 1 + 1 with big + 1 a tie
// that rounds to even (big): on the sim, which adds in rank order rounding at every step as NCCL
// does, it is big; rounding the exact sum once would give big + 2.
template <class T>
void check_low_precision_sum(const std::vector<Communicator>& comms, double big, double u, const char* name) {
    INFO(name);
    const int n = 3;
    std::vector<std::vector<double>> data(n);
    for (int r = 0; r < n; ++r) {
        data[std::size_t(r)].push_back(r == 0 ? big : 1.0);
        for (int i = 1; i < 16; ++i) data[std::size_t(r)].push_back(0.25 * double(1 + (i * 7 + r * 3) % 5) * (i % 3 == 0 ? -1 : 1));
    }
    const auto got = all_reduce_local<T>(comms, data, ReduceOp::sum);
    for (int r = 0; r < n; ++r)
        for (std::size_t i = 0; i < data[0].size(); ++i) {
            double exact = 0, magnitude = 0;
            for (int q = 0; q < n; ++q) exact += data[std::size_t(q)][i], magnitude += std::abs(data[std::size_t(q)][i]);
            INFO("rank " << r << " element " << i);
            CHECK(std::abs(to_double(got[std::size_t(r)][i]) - exact) <= (n - 1) * u * magnitude);
        }
    if (tessel::backend == tessel::Backend::sim)
        for (int r = 0; r < n; ++r) CHECK(to_double(got[std::size_t(r)][0]) == big);
}
}  // namespace

TEST_CASE("avg, 16-bit and fp8 sums round as NCCL does: per step in the element type, avg premultiplied", "[.dist4]") {
    REQUIRE(tessel::device_count() >= 3);
    const auto comms = Communicator::create_local(first(3));
    check_low_precision_sum<__half>(comms, 2048, std::ldexp(1.0, -11), "float16");
    check_low_precision_sum<__nv_bfloat16>(comms, 256, std::ldexp(1.0, -8), "bfloat16");
    check_low_precision_sum<__nv_fp8_e4m3>(comms, 16, std::ldexp(1.0, -4) + std::ldexp(1.0, -11), "fp8 e4m3");
    check_low_precision_sum<__nv_fp8_e5m2>(comms, 8, std::ldexp(1.0, -3) + std::ldexp(1.0, -11), "fp8 e5m2");
    // avg of float on 3 ranks: within avg_tolerance of the mean (NCCL multiplies by float(1/3)
    // first); on the sim, element 0 is the premultiplied sum in rank order, which the mean rounded
    // once is not: 1, 2 and 4 give 7/3 rounded to 2.33333325 but fl(fl(1 s) + fl(2 s)) + fl(4 s) =
    // 2.33333349 with s = fl(1/3).
    std::vector<std::vector<double>> data{{1, 5, 0.1}, {2, 7, 0.2}, {4, 9, 0.7}};
    const auto got = all_reduce_local<float>(comms, data, ReduceOp::avg);
    for (int r = 0; r < 3; ++r) {
        for (std::size_t i = 0; i < data[0].size(); ++i) {
            const double mean = (double(float(data[0][i])) + double(float(data[1][i])) + double(float(data[2][i]))) / 3;
            CHECK(std::abs(double(got[std::size_t(r)][i]) - mean) <= tessel_test::avg_tolerance<float>(3) * std::abs(mean));
        }
        if (tessel::backend == tessel::Backend::sim) {
            const float s = float(1.0 / 3);
            CHECK(got[std::size_t(r)][0] == (1.0f * s + 2.0f * s) + 4.0f * s);
            CHECK(got[std::size_t(r)][0] != float(7.0 / 3));
        }
    }
}

TEST_CASE("max and min ignore a NaN as fmax/fmin do (NCCL), on every rank's side", "[.dist4]") {
    REQUIRE(tessel::device_count() >= 2);
    const auto comms = Communicator::create_local(first(2));
    const double nan = std::numeric_limits<double>::quiet_NaN();
    // Elements: NaN on rank 0 only, on rank 1 only, on both, on neither.
    const std::vector<std::vector<double>> data{{nan, 2, nan, 3}, {1, nan, nan, -1}};
    auto check = [&](auto zero, const char* name) {
        using T = decltype(zero);
        INFO(name);
        for (ReduceOp op : {ReduceOp::max, ReduceOp::min}) {
            const auto got = all_reduce_local<T>(comms, data, op);
            for (int r = 0; r < 2; ++r) {
                INFO((op == ReduceOp::max ? "max" : "min") << " on rank " << r);
                CHECK(to_double(got[std::size_t(r)][0]) == 1);
                CHECK(to_double(got[std::size_t(r)][1]) == 2);
                CHECK(std::isnan(to_double(got[std::size_t(r)][2])));
                CHECK(to_double(got[std::size_t(r)][3]) == (op == ReduceOp::max ? 3 : -1));
            }
        }
    };
    check(float{}, "float32");
    check(double{}, "float64");
    check(__half{}, "float16");
    check(__nv_bfloat16{}, "bfloat16");
}

TEST_CASE("integer reductions are exact beyond 2^53 and wrap on overflow, as NCCL computes in the element type", "[.dist4]") {
    REQUIRE(tessel::device_count() >= 3);
    const auto comms = Communicator::create_local(first(3));
    const std::int64_t big = std::int64_t(1) << 53;
    // Rank r: 2^53 + 1 + r (not doubles), INT64_MAX - r (the sum wraps), -r * 2^61 (a product too).
    auto int64_data = [&](int r) { return std::vector<std::int64_t>{big + 1 + r, std::numeric_limits<std::int64_t>::max() - r, -(std::int64_t(r + 1) << 61)}; };
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::prod, ReduceOp::max, ReduceOp::min}) {
        std::vector<Tensor<std::int64_t>> t;
        for (int r = 0; r < 3; ++r) t.push_back(on(int64_data(r), Device{r}));
        tessel::dist::group([&] {
            for (int r = 0; r < 3; ++r) comms[std::size_t(r)].all_reduce(t[std::size_t(r)], op);
        });
        for (std::size_t i = 0; i < 3; ++i) {
            // The reference: exact in 128 bits, then wrapped to 64 as two's complement.
            __int128 acc = int64_data(0)[i];
            for (int r = 1; r < 3; ++r) {
                const __int128 v = int64_data(r)[i];
                acc = op == ReduceOp::sum ? acc + v : op == ReduceOp::max ? std::max(acc, v) : op == ReduceOp::min ? std::min(acc, v)
                                                                                              : __int128(std::uint64_t(acc) * std::uint64_t(v));
            }
            const auto want = std::int64_t(std::uint64_t(acc));
            for (int r = 0; r < 3; ++r) {
                INFO("int64 op " << int(op) << " element " << i << " rank " << r);
                CHECK(t[std::size_t(r)].to_vector()[i] == want);
            }
        }
    }
    // int32: INT32_MAX + 1 + 1 wraps to INT32_MIN + 1; 50000^2 * 3 wraps modulo 2^32.
    std::vector<Tensor<std::int32_t>> s, p;
    for (int r = 0; r < 3; ++r) {
        s.push_back(on(std::vector<std::int32_t>{r == 0 ? std::numeric_limits<std::int32_t>::max() : 1}, Device{r}));
        p.push_back(on(std::vector<std::int32_t>{r == 2 ? 3 : 50000}, Device{r}));
    }
    tessel::dist::group([&] {
        for (int r = 0; r < 3; ++r) comms[std::size_t(r)].all_reduce(s[std::size_t(r)], ReduceOp::sum);
    });
    tessel::dist::group([&] {
        for (int r = 0; r < 3; ++r) comms[std::size_t(r)].all_reduce(p[std::size_t(r)], ReduceOp::prod);
    });
    const std::int64_t product = std::int64_t(50000) * 50000 * 3;
    for (int r = 0; r < 3; ++r) {
        CHECK(s[std::size_t(r)].to_vector()[0] == std::numeric_limits<std::int32_t>::min() + 1);
        CHECK(p[std::size_t(r)].to_vector()[0] == std::int32_t(std::uint32_t(std::uint64_t(product))));
    }
}

TEST_CASE("fp8 collectives need sm_90, as NCCL's; all_to_all and send/recv of fp8 run anywhere", "[dist]") {
    using tessel::testing::message;
    CHECK_THAT(message([] { tessel::dist::detail::check_fp8_collective("all_reduce", 80, 1); }),
               Catch::Contains("all_reduce: NCCL takes fp8 in collectives only on devices of compute capability 9.0 or later; device 1 is 8.0"));
    CHECK_THROWS_AS(tessel::dist::detail::check_fp8_collective("all_gather", 89, 0), tessel::InvalidArgument);
    CHECK_NOTHROW(tessel::dist::detail::check_fp8_collective("reduce", 90, 0));
    CHECK_NOTHROW(tessel::dist::detail::check_fp8_collective("reduce", 120, 0));
    if (tessel::device_count() == 0) return;
    const auto comms = Communicator::create_local({Device{0}});
    const auto t = on(std::vector<__nv_fp8_e4m3>(5, __nv_fp8_e4m3(1.5f)), Device{0});
    const auto gathered = tessel::empty<__nv_fp8_e4m3>({5}, {.device = Device{0}});
    comms[0].all_to_all(t, gathered);  // point-to-point: any device
    CHECK(float(gathered.to_vector()[4]) == 1.5f);
    const auto props = tessel::properties(Device{0});
    if (props.major * 10 + props.minor >= 90) {
        comms[0].all_reduce(t, ReduceOp::max);
        CHECK(float(t.to_vector()[2]) == 1.5f);
        comms[0].broadcast(t, 0);
        comms[0].all_gather(t, gathered);
        CHECK(float(gathered.to_vector()[0]) == 1.5f);
    } else {
        CHECK_THROWS_AS(comms[0].all_reduce(t), tessel::InvalidArgument);
        CHECK_THROWS_AS(comms[0].reduce_scatter(t, gathered), tessel::InvalidArgument);
        CHECK_THROWS_AS(comms[0].broadcast(t, 0), tessel::InvalidArgument);
        CHECK_THROWS_AS(comms[0].all_gather(t, gathered), tessel::InvalidArgument);
        const auto none = tessel::empty<__nv_fp8_e4m3>({0}, {.device = Device{0}});
        comms[0].broadcast(none, 0);  // NCCL returns before its check for an empty call
    }
    comms[0].check();
}

TEST_CASE("a group whose counterpart never comes times out like a single call (the watchdog sees grouped work)", "[.dist4]") {
    REQUIRE(tessel::device_count() >= 2);
    auto comms = Communicator::create_local(first(2), {.timeout = std::chrono::milliseconds(300)});
    const tessel::Stream s0 = tessel::Stream::create({}, Device{0});  // its error stays with it
    const auto t = tessel::full<float>({4}, 1.f, {.device = Device{0}});
    const auto start = std::chrono::steady_clock::now();
    tessel::dist::group([&] { comms[0].send(t, 1, s0.handle()); });  // rank 1 never receives
    // Without the group's ends the watchdog had no event for the send: nothing ever failed.
    std::string what;
    while (what.empty() && std::chrono::steady_clock::now() - start < std::chrono::seconds(20)) {
        try {
            comms[0].check();
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        } catch (const tessel::Error& e) {
            what = e.what();
        }
    }
    CHECK_THAT(what, Catch::Contains("send on rank 0 did not complete within 300 ms"));
    // The sim reports the aborted send as the stream's error; NCCL's kernel just ends (its docs say
    // only that an abort ends uncompleted operations): either way the stream is done.
    if (tessel::backend == tessel::Backend::sim) CHECK_THROWS_AS(s0.synchronize(), tessel::Error);
    else try_synchronize(s0);
}

TEST_CASE("a timeout must be positive and at most a day: milliseconds::max() is refused, naming it", "[dist]") {
    if (tessel::device_count() == 0) return;
    using tessel::testing::message;
    const auto forever = std::chrono::milliseconds::max();
    CHECK_THAT(message([&] { (void)Communicator::create_local({Device{0}}, {.timeout = forever}); }),
               Catch::Contains("Communicator::create_local: the timeout must be positive and at most a day (86400000 ms); it is " +
                               std::to_string(forever.count()) + " ms"));
    CHECK_THROWS_AS(Communicator::create(0, 1, Communicator::unique_id(), Device{0}, {.timeout = std::chrono::hours(25)}), tessel::InvalidArgument);
    CHECK_THROWS_AS(Communicator::create_local({Device{0}}, {.timeout = std::chrono::milliseconds(-1)}), tessel::InvalidArgument);
    const auto day = Communicator::create_local({Device{0}}, {.timeout = std::chrono::hours(24)});  // the bound itself is fine
    auto t = tessel::ones<float>({3}, {.device = Device{0}});
    day[0].all_reduce(t);
    CHECK(t.to_vector() == std::vector<float>{1, 1, 1});
    day[0].check();
}

TEST_CASE("overlapping in and out: all_to_all refuses any overlap, all_gather and reduce_scatter all but NCCL's in-place layout", "[dist]") {
    if (tessel::device_count() == 0) return;
    using tessel::testing::message;
    const auto comms = Communicator::create_local({Device{0}});
    const auto& c = comms[0];
    auto buf = on(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}, Device{0});
    CHECK_THAT(message([&] { c.all_to_all(buf, buf); }), Catch::Contains("all_to_all: in and out overlap; NCCL has no in-place all_to_all"));
    CHECK_THROWS_AS(c.all_to_all(buf.narrow(0, 0, 4), buf.narrow(0, 2, 4)), tessel::InvalidArgument);
    CHECK_THAT(message([&] { c.all_gather(buf.narrow(0, 1, 4), buf.narrow(0, 0, 4)); }),
               Catch::Contains("all_gather: in and out overlap, and not in NCCL's in-place layout (in = block rank() of out, 0 elements in)"));
    CHECK_THAT(message([&] { c.reduce_scatter(buf.narrow(0, 2, 4), buf.narrow(0, 3, 4)); }),
               Catch::Contains("reduce_scatter: in and out overlap, and not in NCCL's in-place layout"));
    // In place (rank 0: block 0) and apart: fine.
    c.all_gather(buf.narrow(0, 0, 4), buf.narrow(0, 0, 4));
    c.reduce_scatter(buf.narrow(0, 4, 4), buf.narrow(0, 4, 4));
    c.all_to_all(buf.narrow(0, 0, 4), buf.narrow(0, 4, 4));
    CHECK(buf.to_vector() == std::vector<float>{1, 2, 3, 4, 1, 2, 3, 4});
    c.check();
}

TEST_CASE("in-place all_gather and reduce_scatter on 3 ranks, NCCL's layouts", "[.dist4]") {
    REQUIRE(tessel::device_count() >= 3);
    const int n = 3;
    const auto comms = Communicator::create_local(first(n));
    std::vector<Tensor<float>> gather, scatter;
    for (int r = 0; r < n; ++r) {
        gather.push_back(tessel::full<float>({4 * n}, -77.0f, {.device = Device{r}}));
        scatter.push_back(on(values<float>(r, 4 * n, 8), Device{r}));
        gather.back().narrow(0, 4 * r, 4).copy_(on(values<float>(r, 4, 9), Device{r}));
    }
    tessel::dist::group([&] {
        for (int r = 0; r < n; ++r) {
            const auto& c = comms[std::size_t(r)];
            c.all_gather(gather[std::size_t(r)].narrow(0, 4 * r, 4), gather[std::size_t(r)]);
            c.reduce_scatter(scatter[std::size_t(r)], scatter[std::size_t(r)].narrow(0, 4 * r, 4));
        }
    });
    for (int r = 0; r < n; ++r) {
        std::vector<float> all;
        for (int q = 0; q < n; ++q) {
            const auto v = values<float>(q, 4, 9);
            all.insert(all.end(), v.begin(), v.end());
        }
        CHECK(gather[std::size_t(r)].to_vector() == all);
        const auto got = scatter[std::size_t(r)].to_vector();
        for (int i = 0; i < 4; ++i) {
            double sum = 0;
            for (int q = 0; q < n; ++q) sum += values<float>(q, 4 * n, 8)[std::size_t(4 * r + i)];
            CHECK(double(got[std::size_t(4 * r + i)]) == sum);
        }
    }
}

TEST_CASE("a send or recv to itself outside a group is refused; inside one it completes", "[dist]") {
    if (tessel::device_count() == 0) return;
    using tessel::testing::message;
    const auto comms = Communicator::create_local({Device{0}}, {.timeout = std::chrono::milliseconds(300)});
    const auto& c = comms[0];
    auto out = on(values<float>(0, 9), Device{0});
    auto in = poisoned<float>(9, Device{0});
    CHECK_THAT(message([&] { c.send(out, 0); }), Catch::Contains("send: peer 0 is this rank; a send to itself needs its recv in the same dist::group"));
    CHECK_THROWS_AS(c.recv(in, 0), tessel::InvalidArgument);
    tessel::dist::group([&] {
        c.send(out, 0);
        c.recv(in, 0);
    });
    CHECK(in.to_vector() == values<float>(0, 9));
    c.check();
}

TEST_CASE("destroying a communicator with a collective pending ends within the timeout", "[.dist4]") {
    REQUIRE(tessel::device_count() >= 2);
    const tessel::Stream s0 = tessel::Stream::create({}, Device{0});
    const Tensor<float> t = on(values<float>(0, count), Device{0});
    auto done = std::make_shared<std::promise<void>>();
    auto finished = done->get_future();
    const auto start = std::chrono::steady_clock::now();
    std::thread([&, done] {
        {
            const auto comms = Communicator::create_local(first(2), {.timeout = std::chrono::milliseconds(300)});
            comms[0].all_reduce(t, ReduceOp::sum, s0.handle());  // rank 1 never calls it; the communicators go at once
        }
        done->set_value();
    }).detach();  // detached: a hang fails the check below instead of blocking the test run
    REQUIRE(finished.wait_for(std::chrono::seconds(20)) == std::future_status::ready);
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
    if (tessel::backend == tessel::Backend::sim) CHECK_THROWS_AS(s0.synchronize(), tessel::Error);  // the sim: the aborted collective is the stream's error
    else try_synchronize(s0);                                                         // NCCL: its kernel ends
}

TEST_CASE("TESSEL_DIST_DEBUG with one thread driving every rank in dist::group: the documented pattern works", "[.dist4]") {
    REQUIRE(tessel::device_count() >= 2);
    const auto comms = Communicator::create_local(first(2), {.debug_checks = true});
    std::vector<Tensor<float>> t{on(values<float>(0, count), Device{0}), on(values<float>(1, count), Device{1})};
    for (int round = 0; round < 3; ++round)
        tessel::dist::group([&] {
            for (const auto& c : comms) c.all_reduce(t[std::size_t(c.rank())]);
        });
    std::vector<float> want(count);
    for (std::int64_t i = 0; i < count; ++i)
        want[std::size_t(i)] = float(4 * (double(values<float>(0, count)[std::size_t(i)]) + double(values<float>(1, count)[std::size_t(i)])));
    for (const auto& x : t) CHECK(x.to_vector() == want);
    // Outside a group, the exchange still runs: a rank per thread that disagree fail (covered above too).
    for (const auto& c : comms) c.check();
}

TEST_CASE("the sim refuses one thread calling several ranks' collectives outside a group, naming dist::group", "[.dist4]") {
    REQUIRE(tessel::device_count() >= 2);
    if (tessel::backend != tessel::Backend::sim) return;  // NCCL would deadlock instead
    const auto comms = Communicator::create_local(first(2), {.timeout = std::chrono::seconds(60)});
    std::vector<tessel::Stream> streams = {tessel::Stream::create({}, Device{0}), tessel::Stream::create({}, Device{1})};
    const Tensor<float> a = on(values<float>(0, 12), Device{0}), b = on(values<float>(1, 12), Device{1});
    const auto start = std::chrono::steady_clock::now();
    comms[0].all_reduce(a, ReduceOp::sum, streams[0].handle());
    CHECK_THROWS_WITH(comms[1].all_reduce(b, ReduceOp::sum, streams[1].handle()),
                      Catch::Contains("ncclAllReduce of ranks 0 and 1 was called from one thread outside ncclGroupStart/ncclGroupEnd") &&
                          Catch::Contains("tessel::dist::group"));
    CHECK_THROWS_WITH(streams[0].synchronize(), Catch::Contains("tessel::dist::group"));  // rank 0's wait fails too, at once
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
}

TEST_CASE("ncclCommSplit of a non-blocking communicator: the child arrives once the parent settles", "[dist]") {
    if (tessel::device_count() == 0) return;
    namespace api = tessel::nccl::api;
    const tessel::DeviceGuard guard(Device{0});
    const auto id = Communicator::unique_id();
    api::ncclComm_t parent = nullptr;
    auto config = tessel::nccl::config(false);
    auto r = api::ncclCommInitRankConfig(&parent, 1, id, 0, &config);
    auto settle = [](api::ncclComm_t c, api::ncclResult_t r) {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        while (int(r) == tessel::nccl::in_progress && std::chrono::steady_clock::now() < deadline) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
            REQUIRE(api::ncclCommGetAsyncError(c, &r) == api::ncclResult_t(0));
        }
        return r;
    };
    REQUIRE(settle(parent, r) == api::ncclResult_t(0));
    auto child = std::make_unique<api::ncclComm_t>(nullptr);  // NCCL writes it from its own thread: not a stack slot that may be gone
    r = api::ncclCommSplit(parent, 0, 0, child.get(), &config);
    REQUIRE((r == api::ncclResult_t(0) || int(r) == tessel::nccl::in_progress));
    if (tessel::backend == tessel::Backend::sim) CHECK(int(r) == tessel::nccl::in_progress);  // the sim always completes in the background
    REQUIRE(settle(parent, r) == api::ncclResult_t(0));
    REQUIRE(*child != nullptr);
    REQUIRE(settle(*child, api::ncclResult_t(tessel::nccl::in_progress)) == api::ncclResult_t(0));
    int n = 0;
    CHECK(api::ncclCommCount(*child, &n) == api::ncclResult_t(0));
    CHECK(n == 1);
    CHECK(api::ncclCommDestroy(*child) == api::ncclResult_t(0));
    CHECK(api::ncclCommDestroy(parent) == api::ncclResult_t(0));
}

TEST_CASE("bool all_reduce: sum is a logical or and prod a logical and, as torch's; every byte stays 0 or 1", "[.dist4]") {
    // NCCL has no bool: it travels as int8, whose sum of three trues would be a byte of 3 (read
    // back as a bool, undefined behaviour that UBSan reports). Rank r holds bit r of the element's index.
    const auto results = in_threads(3, [](const Communicator& c) {
        std::vector<std::uint8_t> bits(8);
        for (int e = 0; e < 8; ++e) bits[std::size_t(e)] = std::uint8_t((e >> c.rank()) & 1);
        std::string wrong;
        for (const ReduceOp op : {ReduceOp::sum, ReduceOp::prod, ReduceOp::max, ReduceOp::min}) {
            const Tensor<std::uint8_t> raw = on(bits, c.device());
            const Tensor<bool> t(raw.storage(), raw.layout());  // the same bytes as bools
            c.all_reduce(t, op);
            const auto got = raw.to_vector();
            for (int e = 0; e < 8; ++e) {
                const bool any = e != 0, all = e == 7;
                const std::uint8_t want = (op == ReduceOp::sum || op == ReduceOp::max) ? any : all;
                if (got[std::size_t(e)] != want)
                    wrong += "op " + std::to_string(int(op)) + " element " + std::to_string(e) + ": byte " + std::to_string(int(got[std::size_t(e)])) + "\n";
            }
        }
        return wrong;
    });
    for (const auto& r : results) CHECK(r == "");
}
