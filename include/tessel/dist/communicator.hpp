// Collectives on tensors across devices, as torch.distributed over NCCL: a Communicator per rank.
// Ranks come from one process driving several local devices (create_local: ncclCommInitAll), from
// one process (or thread) per device initialised from the environment as torch's env:// does
// (from_env: MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE/LOCAL_RANK, rank 0's TcpStore handing out the
// NCCL unique id; tessel-run starts such jobs), from a shared id (create), or by split. NCCL's
// initialisation is non-blocking and polled against CommOptions::timeout. all_reduce (sum, prod,
// max, min, avg), broadcast, reduce, all_gather, reduce_scatter, all_to_all, send/recv and barrier
// are queued on the caller's stream (by default the current stream of the rank's device), with the
// caching allocator told which stream uses each tensor. No hangs: a watchdog thread per
// communicator aborts it (ncclCommAbort) when a call has not completed within the timeout, and
// every later call, and check(), throws LibraryError naming the call, the rank and the timeout;
// NCCL's asynchronous errors surface the same way; CommOptions::debug_checks (TESSEL_DIST_DEBUG=1)
// exchanges a header before each collective so ranks that disagree fail instead of hanging. On
// CUDA it is NCCL; on the sim, NCCL's stand-in (sim/nccl.hpp, across processes sim/nccl_net.hpp).
// One thread calling several ranks wraps the calls in dist::group() (ncclGroupStart/End), as NCCL
// requires. docs/multi-gpu.md.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <source_location>
#include <span>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "../lib/nccl.hpp"
#include "../core/env.hpp"
#include "env.hpp"
#include "store.hpp"
#include "../stream/stream.hpp"
#include "../tensor/tensor.hpp"

#if defined(TESSEL_NCCL_AVAILABLE)
namespace tessel::dist {

// How a reduction combines the ranks' values.
enum class ReduceOp { sum, prod, max, min, avg };

// How a communicator waits and checks.
struct CommOptions {
    std::chrono::milliseconds timeout = std::chrono::minutes(10);  // a collective (or the initialisation) still running after this aborts
    // Before each collective the ranks exchange what they are about to call (an all_gather of a
    // 32-byte header and a host wait) and throw InvalidArgument naming the ranks that disagree,
    // where NCCL would hang or corrupt memory. Off by default; TESSEL_DIST_DEBUG=1 turns it on.
    bool debug_checks = env_flag("TESSEL_DIST_DEBUG");

    // 0 or 1 (unset: 0), parsed strictly like every TESSEL_* variable.
    static bool env_flag(const char* name) {
        const char* v = std::getenv(name);
        return v && env::parse_integer(name, v, 0, 1) == 1;
    }
};

using UniqueId = nccl::api::ncclUniqueId;  // what rank 0 creates and every rank passes to Communicator::create

// The longest CommOptions::timeout: steady_clock::now() + timeout must not overflow (the Monitor's
// period has the same bound).
inline constexpr std::chrono::milliseconds max_timeout = std::chrono::hours(24);

namespace detail {
// How deep this thread is in dist::group: the calls made there run only at the group's end.
inline int& group_depth() {
    static thread_local int depth = 0;
    return depth;
}
// NCCL takes fp8 in a collective only when every rank's device is sm_90 or later
// (ncclInvalidArgument otherwise, from its enqueue: for every collective up to NCCL 2.27, for
// reductions after); tessel says so first, for this rank's device `cc` (major * 10 + minor).
// all_to_all and send/recv are point-to-point and take fp8 anywhere.
inline void check_fp8_collective(const char* call, int cc, int device) {
    require(cc >= 90, call, ": NCCL takes fp8 in collectives only on devices of compute capability 9.0 or later; device ", device,
            " is ", cc / 10, ".", cc % 10, " (convert to half or bfloat16 for the collective)");
}
// The ends of the calls made inside dist::group on this thread (their tensors marked written, their
// completion handed to the watchdog): NCCL enqueues a group's work only at its end, so an event
// recorded at the call would complete before the work. The argument: settle the communicator first
// (a non-blocking one's group end answered ncclInProgress).
inline std::vector<std::function<void(bool)>>& deferred_ends() {
    static thread_local std::vector<std::function<void(bool)>> ends;
    return ends;
}
// For each call issued inside dist::group on this thread, what aborts its communicator: if the
// group's body throws, NCCL still runs the calls issued so far at the group's end and cannot take
// them back, so their communicators are aborted (as torch marks a process group failed) rather than
// left to pair those calls with the ranks' next ones or hang.
inline std::vector<std::function<void(const std::string&)>>& group_aborts() {
    static thread_local std::vector<std::function<void(const std::string&)>> aborts;
    return aborts;
}
// Whether [a, a + a_bytes) and [b, b + b_bytes) share a byte.
inline bool overlap(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
    const auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
    return a_bytes > 0 && b_bytes > 0 && x < y + b_bytes && y < x + a_bytes;
}
}  // namespace detail

// Runs f, which calls collectives of several ranks from this thread, as one NCCL group.
template <class F>
void group(F&& f) {
    nccl::check(nccl::api::ncclGroupStart(), "ncclGroupStart");
    ++detail::group_depth();
    try {
        f();
    } catch (...) {
        const bool outermost = --detail::group_depth() == 0;
        (void)nccl::api::ncclGroupEnd();
        if (outermost) {
            detail::deferred_ends().clear();
            std::string what = "an exception";
            try {
                throw;
            } catch (const std::exception& e) {
                what = e.what();
            } catch (...) {
            }
            const auto aborts = std::exchange(detail::group_aborts(), {});
            for (const auto& abort : aborts)
                abort("the dist::group it was issued in threw before its end (" + what + "); NCCL runs a group's issued calls at "
                      "its end and cannot take them back, so the communicator was aborted: make a new one");
        }
        throw;
    }
    const bool outermost = --detail::group_depth() == 0;
    const auto r = nccl::api::ncclGroupEnd();
    std::vector<std::function<void(bool)>> ends;
    if (outermost) ends.swap(detail::deferred_ends()), detail::group_aborts().clear();
    // ncclInProgress: non-blocking communicators finish the group in the background; each end
    // waits for its communicator to settle before it records the completion event.
    if (int(r) != nccl::in_progress) nccl::check(r, "ncclGroupEnd");
    for (auto& end : ends) end(int(r) == nccl::in_progress);
}

// One rank of a communicator. Copies share the rank (the last one destroys it).
class Communicator {
public:
    // One communicator per device of `devices` (default: every device), ranks in that order.
    static std::vector<Communicator> create_local(std::vector<Device> devices = {}, CommOptions options = {}) {
        if (devices.empty())
            for (int i = 0; i < device_count(); ++i) devices.push_back(Device{i});
        require(!devices.empty(), "Communicator::create_local: no devices");
        std::vector<int> list;
        for (Device d : devices) {
            require(d.index >= 0 && d.index < device_count(), "Communicator::create_local: device ", d.index, " does not exist (",
                    device_count(), " devices)");
            for (int seen : list)
                require(seen != d.index, "Communicator::create_local: device ", d.index, " is listed twice; NCCL takes one rank per device");
            list.push_back(d.index);
        }
        check_timeout("Communicator::create_local", options.timeout);
        std::vector<nccl::api::ncclComm_t> comms(list.size());
        nccl::check(nccl::api::ncclCommInitAll(comms.data(), int(list.size()), list.data()), "ncclCommInitAll");
        std::vector<Communicator> out;
        for (std::size_t r = 0; r < comms.size(); ++r)
            out.push_back(Communicator(std::make_shared<State>(comms[r], int(r), int(comms.size()), devices[r], options)));
        for (auto& c : out) c.s_->one_thread_group = out.size() > 1;
        return out;
    }

    // This process's rank of a job started by tessel-run, torchrun or a cluster launcher: reads
    // MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK (dist/env.hpp), takes device LOCAL_RANK,
    // meets the other ranks at rank 0's TcpStore, which hands out rank 0's NCCL unique id, and
    // joins them; a rank missing past options.timeout is an error, not a hang.
    static Communicator from_env(CommOptions options = {}) {
        const Environment env = Environment::from_env();
        require(env.local_rank < device_count(), "Communicator::from_env: LOCAL_RANK=", env.local_rank, " but this process sees ",
                device_count(), " device(s); start at most one process per GPU");
        check_timeout("Communicator::from_env", options.timeout);
        auto store = std::make_shared<TcpStore>(env.master_addr, env.master_port, env.rank == 0, options.timeout);
        UniqueId id{};
        const std::string key = "tessel/nccl_unique_id";
        if (env.rank == 0) {
            id = unique_id();
            store->set(key, std::string(reinterpret_cast<const char*>(&id), sizeof id));
        } else {
            const std::string v = store->get(key);
            require(v.size() == sizeof id, "Communicator::from_env: the store's NCCL id has ", v.size(), " bytes, not ", sizeof id,
                    " (ranks built against different NCCL versions?)");
            std::memcpy(&id, v.data(), sizeof id);
        }
        Communicator c = create(env.rank, env.world_size, id, Device{env.local_rank}, options);
        c.s_->store = std::move(store);
        return c;
    }

    // A new NCCL unique id: create it on one rank and give it to every rank's create().
    static UniqueId unique_id() {
        UniqueId id{};
        nccl::check(nccl::api::ncclGetUniqueId(&id), "ncclGetUniqueId");
        return id;
    }

    // Rank `rank` of `size` ranks that share `id`, on `device`: NCCL's non-blocking
    // initialisation, polled until every rank has joined or options.timeout has passed.
    static Communicator create(int rank, int size, const UniqueId& id, Device device, CommOptions options = {}) {
        require(size >= 1 && rank >= 0 && rank < size, "Communicator::create: rank ", rank, " is not in [0, ", size, ")");
        require(device.index >= 0 && device.index < device_count(), "Communicator::create: device ", device.index, " does not exist (",
                device_count(), " devices)");
        check_timeout("Communicator::create", options.timeout);
        const DeviceGuard guard(device);
        nccl::api::ncclComm_t comm = nullptr;
        auto config = nccl::config(false);
        const auto r = nccl::api::ncclCommInitRankConfig(&comm, size, id, rank, &config);
        const std::string what = "ncclCommInitRankConfig (rank " + std::to_string(rank) + " of " + std::to_string(size) + ")";
        finish_init(comm, r, what, options.timeout);
        return Communicator(std::make_shared<State>(comm, rank, size, device, options));
    }

    // The ranks that pass the same colour form a new communicator, ordered by key (then by rank
    // here), as NCCL's ncclCommSplit and torch's new_group; a negative colour takes no part and
    // gets nullopt. Every rank of this communicator must call it, each from its own thread or process.
    std::optional<Communicator> split(int colour, int key) const {
        require(!s_->one_thread_group, "split: the communicators of create_local() are driven by one thread; split needs every rank to call "
                                       "it at the same time, from its own thread or process (Communicator::create or from_env)");
        s_->check();
        const DeviceGuard guard(device());
        // This communicator is non-blocking, so NCCL writes the child from its own thread when the
        // split completes (NULL until then, the parent reporting ncclInProgress): the location
        // belongs to the State, which outlives that thread, and is read once the parent settled.
        nccl::api::ncclComm_t& slot = s_->split_child;
        slot = nullptr;
        auto config = nccl::config(false);
        const auto r = nccl::api::ncclCommSplit(s_->comm, colour < 0 ? nccl::split_no_color : colour, key, &slot, &config);
        if (int(r) != nccl::in_progress) nccl::check(r, "ncclCommSplit", s_->comm);
        else s_->check("ncclCommSplit");  // waits until the parent settles; a timeout aborts it
        const nccl::api::ncclComm_t child = std::exchange(slot, nullptr);
        if (!child) return std::nullopt;
        finish_init(child, nccl::api::ncclResult_t(nccl::in_progress), "ncclCommSplit", s_->options.timeout);
        int n = 0, rank = 0;
        nccl::check(nccl::api::ncclCommCount(child, &n), "ncclCommCount", child);
        nccl::check(nccl::api::ncclCommUserRank(child, &rank), "ncclCommUserRank", child);
        return Communicator(std::make_shared<State>(child, rank, n, device(), s_->options));
    }

    int rank() const { return s_->rank; }
    int size() const { return s_->size; }
    Device device() const { return s_->device; }

    // t = op over the ranks' t, on every rank.
    template <Element T>
    void all_reduce(const Tensor<T>& t, ReduceOp op = ReduceOp::sum, std::optional<StreamArg> stream = std::nullopt) const {
        check_op<T>(op, "all_reduce");
        run<T>(Header{1, int(op), t.numel()}, "all_reduce", "ncclAllReduce", stream, {&t}, {&t}, [&](rt::stream_t s) {
            return nccl::api::ncclAllReduce(t.data(), t.data(), std::size_t(t.numel()), nccl::data_type<T>(), nccl_op<T>(op), s_->comm, s);
        });
    }
    // t = root's t, on every rank.
    template <Element T>
    void broadcast(const Tensor<T>& t, int root, std::optional<StreamArg> stream = std::nullopt) const {
        check_rank(root, "broadcast", "root");
        check_fp8<T>("broadcast", t.numel());
        run<T>(Header{2, root, t.numel()}, "broadcast", "ncclBroadcast", stream, {&t}, {&t}, [&](rt::stream_t s) {
            return nccl::api::ncclBroadcast(t.data(), t.data(), std::size_t(t.numel()), nccl::data_type<T>(), root, s_->comm, s);
        });
    }
    // On the root, t = op over the ranks' t; the others' t is unchanged.
    template <Element T>
    void reduce(const Tensor<T>& t, int root, ReduceOp op = ReduceOp::sum, std::optional<StreamArg> stream = std::nullopt) const {
        check_rank(root, "reduce", "root");
        check_op<T>(op, "reduce");
        run<T>(Header{3, root * 8 + int(op), t.numel()}, "reduce", "ncclReduce", stream, {&t}, {&t}, [&](rt::stream_t s) {
            return nccl::api::ncclReduce(t.data(), t.data(), std::size_t(t.numel()), nccl::data_type<T>(), nccl_op<T>(op), root, s_->comm, s);
        });
    }
    // out = every rank's in, concatenated in rank order (out has size() times in's elements).
    template <Element T>
    void all_gather(const Tensor<T>& in, const Tensor<T>& out, std::optional<StreamArg> stream = std::nullopt) const {
        require(out.defined() && in.defined() && out.numel() == in.numel() * size(), "all_gather: out must hold ", size(), " x ",
                in.defined() ? in.numel() : 0, " elements (one input per rank), not ", out.defined() ? out.numel() : 0);
        check_in_place("all_gather", out, in, rank() * in.numel(), "in = block rank() of out");
        check_fp8<T>("all_gather", in.numel());
        run<T>(Header{4, 0, in.numel()}, "all_gather", "ncclAllGather", stream, {&in, &out}, {&out}, [&](rt::stream_t s) {
            return nccl::api::ncclAllGather(in.data(), out.data(), std::size_t(in.numel()), nccl::data_type<T>(), s_->comm, s);
        });
    }
    // out = block rank() of (op over the ranks' in), in having size() times out's elements.
    template <Element T>
    void reduce_scatter(const Tensor<T>& in, const Tensor<T>& out, ReduceOp op = ReduceOp::sum,
                        std::optional<StreamArg> stream = std::nullopt) const {
        check_op<T>(op, "reduce_scatter");
        require(out.defined() && in.defined() && in.numel() == out.numel() * size(), "reduce_scatter: in must hold ", size(), " x ",
                out.defined() ? out.numel() : 0, " elements (a block per rank), not ", in.defined() ? in.numel() : 0);
        check_in_place("reduce_scatter", in, out, rank() * out.numel(), "out = block rank() of in");
        run<T>(Header{5, int(op), out.numel()}, "reduce_scatter", "ncclReduceScatter", stream, {&in, &out}, {&out}, [&](rt::stream_t s) {
            return nccl::api::ncclReduceScatter(in.data(), out.data(), std::size_t(out.numel()), nccl::data_type<T>(), nccl_op<T>(op), s_->comm, s);
        });
    }
    // Block j of out = block rank() of rank j's in (size() equal blocks each), as torch's
    // all_to_all_single: one send and one receive per peer in a group.
    template <Element T>
    void all_to_all(const Tensor<T>& in, const Tensor<T>& out, std::optional<StreamArg> stream = std::nullopt) const {
        require(in.defined() && out.defined() && in.numel() == out.numel() && in.numel() % size() == 0, "all_to_all: in and out must have the "
                "same number of elements, a multiple of the ", size(), " ranks (", in.defined() ? in.numel() : 0, " and ",
                out.defined() ? out.numel() : 0, ")");
        check_in_place("all_to_all", in, out, std::nullopt, "");
        const std::size_t block = std::size_t(in.numel() / size());
        run<T>(Header{6, 0, in.numel()}, "all_to_all", "ncclSend/ncclRecv group", stream, {&in, &out}, {&out}, [&](rt::stream_t s) {
            nccl::check(nccl::api::ncclGroupStart(), "ncclGroupStart");
            auto r = nccl::api::ncclResult_t(0);
            for (int peer = 0; peer < size() && r == nccl::api::ncclResult_t(0); ++peer) {
                r = nccl::api::ncclSend(in.data() + block * std::size_t(peer), block, nccl::data_type<T>(), peer, s_->comm, s);
                if (r == nccl::api::ncclResult_t(0))
                    r = nccl::api::ncclRecv(out.data() + block * std::size_t(peer), block, nccl::data_type<T>(), peer, s_->comm, s);
            }
            const auto end = nccl::api::ncclGroupEnd();
            return r != nccl::api::ncclResult_t(0) ? r : end;
        });
    }
    template <Element T>
    void send(const Tensor<T>& t, int peer, std::optional<StreamArg> stream = std::nullopt) const {
        check_peer(peer, "send");
        run<T>(std::nullopt, "send", "ncclSend", stream, {&t}, {}, [&](rt::stream_t s) {
            return nccl::api::ncclSend(t.data(), std::size_t(t.numel()), nccl::data_type<T>(), peer, s_->comm, s);
        });
    }
    template <Element T>
    void recv(const Tensor<T>& t, int peer, std::optional<StreamArg> stream = std::nullopt) const {
        check_peer(peer, "recv");
        run<T>(std::nullopt, "recv", "ncclRecv", stream, {&t}, {&t}, [&](rt::stream_t s) {
            return nccl::api::ncclRecv(t.data(), std::size_t(t.numel()), nccl::data_type<T>(), peer, s_->comm, s);
        });
    }
    // Every rank's stream waits here until all ranks arrive (an all_reduce of one element).
    void barrier(std::optional<StreamArg> stream = std::nullopt) const {
        if (!s_->barrier_buffer.defined()) s_->barrier_buffer = zeros<float>({1}, TensorOptions{.device = device()});
        all_reduce(s_->barrier_buffer, ReduceOp::sum, stream);
    }

    // Aborts the communicator: calls waiting for other ranks end with an error; later calls throw.
    void abort() const { s_->abort("abort() was called"); }
    // Throws LibraryError if the communicator was aborted or NCCL reports an asynchronous error.
    void check() const { s_->check(); }

private:
    struct Pending {
        std::string name;
        Event done;
        std::chrono::steady_clock::time_point deadline;
    };
    struct State {
        State(nccl::api::ncclComm_t c, int r, int n, Device d, CommOptions o)
            : comm(c), rank(r), size(n), device(d), options(o), compute_capability(capability_of(d)) {
            watchdog = std::thread([this] { watch(); });
        }
        // Work still pending (a rank that never joined) would never end: ncclCommDestroy's finalize
        // waits for it on a GPU (the sim's event destruction, too). It gets until its deadline, up to
        // CommOptions::timeout, and then the communicator is aborted, which ends it. (torch's
        // ~ProcessGroupNCCL aborts at once; waiting first lets work that is merely slow finish.)
        ~State() {
            {
                std::lock_guard lk(m);
                stopping = true;
            }
            cv.notify_all();
            watchdog.join();
            if (!aborted && !drain()) abort("destroyed with a collective pending");
            pending.clear();
            if (aborted) return;  // ncclCommAbort already freed it
            // A communicator that holds an error (a failed call, a peer lost) is aborted: NCCL's
            // destroy returns that error at once, leaking the communicator and leaving this thread
            // inside the group it opened.
            nccl::api::ncclResult_t r{};
            const bool failed = nccl::api::ncclCommGetAsyncError(comm, &r) != nccl::api::ncclResult_t(0) ||
                                (int(r) != 0 && int(r) != nccl::in_progress);
            if (failed) (void)nccl::api::ncclCommAbort(comm);
            else (void)nccl::api::ncclCommDestroy(comm);
        }
        // Whether every pending call completed (or failed) by its deadline; the watchdog has stopped.
        bool drain() {
            return std::all_of(pending.begin(), pending.end(), [](Pending& p) { return wait(p); });
        }
        // Whether p completed (or failed) by its deadline, polled every millisecond.
        static bool wait(Pending& p) {
            while (!complete(p)) {
                if (std::chrono::steady_clock::now() > p.deadline) return false;
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
            }
            return true;
        }
        static bool complete(Pending& p) {
            try {
                return p.done.query();
            } catch (const Error&) {  // it failed: done
                return true;
            }
        }
        static int capability_of(Device d) {  // major * 10 + minor; 0 if it cannot be read
            int major = 0, minor = 0;
            if (rt::api::cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d.index) != cudaSuccess ||
                rt::api::cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, d.index) != cudaSuccess)
                return 0;
            return major * 10 + minor;
        }
        void abort(const std::string& why) {
            std::lock_guard calls(nccl_calls);  // no ncclCommGetAsyncError in flight on another thread
            {
                std::lock_guard lk(m);
                if (aborted) return;
                aborted = true;
                reason = why;
            }
            (void)nccl::api::ncclCommAbort(comm);
        }
        bool is_aborted() {
            std::lock_guard lk(m);
            return aborted;
        }
        // ncclCommGetAsyncError, unless the watchdog aborted (and so freed) the communicator: false then.
        bool async_error(nccl::api::ncclResult_t& r) {
            std::lock_guard calls(nccl_calls);
            if (is_aborted()) return false;
            nccl::check(nccl::api::ncclCommGetAsyncError(comm, &r), "ncclCommGetAsyncError", comm);
            return true;
        }
        // `pending`: what may still be in progress on a non-blocking communicator, for the timeout's message.
        void check(const char* pending = "a group of calls", std::source_location where = std::source_location::current()) {
            {
                std::lock_guard lk(m);
                if (aborted)
                    throw LibraryError("NCCL", 6, "ncclRemoteError (communicator aborted)",
                                       reason + " (rank " + std::to_string(rank) + " of " + std::to_string(size) + ", device " +
                                           std::to_string(device.index) + ")",
                                       where);
            }
            nccl::api::ncclResult_t r{};
            if (!async_error(r)) return check(pending, where);  // aborted meanwhile: its error
            // A non-blocking communicator's last group may still be under way: NCCL takes no new
            // call until it settles.
            for (const auto deadline = std::chrono::steady_clock::now() + options.timeout; int(r) == nccl::in_progress;) {
                if (std::chrono::steady_clock::now() > deadline) {
                    abort(std::string(pending) + " was still in progress after " + std::to_string(options.timeout.count()) + " ms");
                    return check(pending, where);
                }
                std::this_thread::sleep_for(std::chrono::microseconds(200));
                if (!async_error(r)) return check(pending, where);
            }
            nccl::check(r, (std::string(pending) + " or an earlier call (ncclCommGetAsyncError)").c_str(), comm);
        }
        // The watchdog: every 20 ms, the pending collectives that completed are dropped; the first past
        // its deadline aborts the communicator.
        void watch() {
            std::unique_lock lk(m);
            while (!stopping) {
                cv.wait_for(lk, std::chrono::milliseconds(20));
                const auto now = std::chrono::steady_clock::now();
                for (auto it = pending.begin(); it != pending.end();) {
                    if (complete(*it)) {  // done, or failed: check() reports how
                        it = pending.erase(it);
                    } else if (now > it->deadline && !aborted) {
                        const std::string why = it->name + " did not complete within " + std::to_string(options.timeout.count()) +
                                                " ms (a rank that never joined, or a hang); the watchdog aborted the communicator";
                        lk.unlock();
                        abort(why);
                        lk.lock();
                        it = pending.erase(it);
                    } else {
                        ++it;
                    }
                }
            }
        }

        nccl::api::ncclComm_t comm;
        int rank, size;
        Device device;
        CommOptions options;
        int compute_capability;                  // of the device: NCCL reduces fp8 from 9.0
        nccl::api::ncclComm_t split_child = nullptr;  // where a non-blocking split writes the child, from NCCL's thread
        Tensor<float> barrier_buffer;
        std::shared_ptr<TcpStore> store;  // from_env: rank 0 serves it for the job's life
        bool one_thread_group = false;    // create_local with several ranks: split would deadlock
        std::mutex nccl_calls;  // abort against this thread's polling: NCCL calls on one communicator are not thread-safe
        std::mutex m;  // the members below
        std::condition_variable cv;
        bool stopping = false, aborted = false;
        std::string reason;
        std::vector<Pending> pending;
        std::thread watchdog;
    };

    explicit Communicator(std::shared_ptr<State> s) : s_(std::move(s)) {}

    // sum, prod, max, min, avg: NCCL's order. bool travels as int8, so sum and prod become max and
    // min there (logical or and and, as torch maps them): a byte of 2 would not be a bool.
    template <class T>
    static nccl::api::ncclRedOp_t nccl_op(ReduceOp op) {
        if constexpr (std::is_same_v<T, bool>) {
            if (op == ReduceOp::sum) op = ReduceOp::max;
            else if (op == ReduceOp::prod) op = ReduceOp::min;
        }
        return nccl::api::ncclRedOp_t(int(op));
    }

    template <class T>
    void check_op(ReduceOp op, const char* call) const {
        require(!(std::is_integral_v<T> && op == ReduceOp::avg), call, ": avg of integer tensors would truncate; reduce with sum and divide");
        check_fp8<T>(call, 1);
    }
    // NCCL checks fp8 before anything but an empty call.
    template <class T>
    void check_fp8(const char* call, std::int64_t count) const {
        if constexpr (std::is_same_v<T, __nv_fp8_e4m3> || std::is_same_v<T, __nv_fp8_e5m2>)
            if (count > 0) detail::check_fp8_collective(call, s_->compute_capability, device().index);
    }
    void check_rank(int r, const char* call, const char* what) const {
        require(r >= 0 && r < size(), call, ": ", what, " ", r, " is not a rank of this communicator (", size(), " ranks)");
    }
    // A send or receive to this rank itself completes only with its counterpart in the same group;
    // alone it would wait for itself until the watchdog fires.
    void check_peer(int peer, const char* call) const {
        check_rank(peer, call, "peer");
        require(peer != rank() || detail::group_depth() > 0, call, ": peer ", peer, " is this rank; a send to itself needs its recv in the "
                "same dist::group (torch: the destination should not be the same as the rank of the current process)");
    }
    // NCCL's in-place layouts only: `part` may start exactly `offset` elements into `whole`; any
    // other overlap is refused, since the result would depend on NCCL's schedule (all_to_all has no
    // in-place form: a rank's receive would overwrite what it still has to send). Tensors that are
    // not contiguous are left to begin(), which refuses them.
    template <class T>
    static void check_in_place(const char* call, const Tensor<T>& whole, const Tensor<T>& part, std::optional<std::int64_t> offset,
                               const char* layout) {
        if (!whole.is_contiguous() || !part.is_contiguous()) return;
        if (!detail::overlap(whole.data(), std::size_t(whole.numel()) * sizeof(T), part.data(), std::size_t(part.numel()) * sizeof(T))) return;
        if (offset && part.data() == whole.data() + *offset) return;
        if (!offset) fail(call, ": in and out overlap; NCCL has no in-place ", call, " (a rank's receive would overwrite what it still has to "
                          "send): pass tensors that do not share memory");
        fail(call, ": in and out overlap, and not in NCCL's in-place layout (", layout, ", ", *offset,
             " elements in); pass that layout or tensors that do not share memory");
    }
    static void check_timeout(const char* call, std::chrono::milliseconds t) {
        require(t.count() > 0 && t <= max_timeout, call, ": the timeout must be positive and at most a day (", max_timeout.count(),
                " ms); it is ", t.count(), " ms");
    }

    struct Call {
        rt::stream_t stream;
    };
    // What a rank is about to call, for the debug exchange: kind, operation/root, element count.
    struct Header {
        std::int64_t kind, arg, count;
    };

    // A collective or point-to-point call: checks, ordering and the allocator's stream use
    // (begin), the debug exchange, the NCCL call `issue(stream)`, its result (a non-blocking
    // communicator's ncclInProgress is waited out), the written tensors and the watchdog (end).
    template <class T, class F>
    void run(std::optional<Header> header, const char* name, const char* nccl_call, std::optional<StreamArg> stream,
             std::initializer_list<const Tensor<T>*> used, std::initializer_list<const Tensor<T>*> written, F&& issue) const {
        const DeviceGuard guard(device());  // a null stream is the default stream of this rank's device
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE < 22400
        // ncclFloat8e4m3 and ncclFloat8e5m2 (10, 11) came with NCCL 2.24; an older one refuses them
        // as an invalid argument.
        if constexpr (std::is_same_v<T, __nv_fp8_e4m3> || std::is_same_v<T, __nv_fp8_e5m2>)
            fail<Unsupported>(name, ": this build's NCCL (", NCCL_MAJOR, ".", NCCL_MINOR,
                              ") has no fp8 types (NCCL 2.24 added them); convert to half or bfloat16 for the collective");
#endif
        // Inside dist::group the exchange's all_gather would run only at the group's end, after its
        // result is needed here: the group's calls go unchecked (the sim still names disagreeing ranks).
        if (header && s_->options.debug_checks && detail::group_depth() == 0) {
            s_->check();  // an aborted communicator's reason first: its handle is freed
            exchange_headers(*header, int(nccl::data_type<T>()), name);
        }
        const Call c = begin(name, stream, used);
        settle(locked_call([&] { return issue(c.stream); }), nccl_call);
        if (detail::group_depth() == 0) return end(c, name, std::span<const Tensor<T>* const>(written.begin(), written.size()));
        detail::group_aborts().push_back([state = s_, call = std::string(name)](const std::string& why) {
            state->abort(call + " on rank " + std::to_string(state->rank) + ": " + why);
        });
        std::vector<Tensor<T>> kept;  // the caller's tensors need not outlive the group's body
        for (const Tensor<T>* t : written) kept.push_back(*t);
        detail::deferred_ends().push_back([self = *this, c, name = std::string(name), kept = std::move(kept)](bool settle_first) {
            if (settle_first) self.s_->check("ncclGroupEnd");
            std::vector<const Tensor<T>*> w;
            for (const Tensor<T>& t : kept) w.push_back(&t);
            self.end(c, name.c_str(), std::span<const Tensor<T>* const>(w));
        });
    }

    // An NCCL call on this communicator, never at once with the watchdog's abort (which frees it):
    // after an abort it is not made, and the abort's reason is thrown.
    template <class F>
    nccl::api::ncclResult_t locked_call(F&& call) const {
        std::unique_lock calls(s_->nccl_calls);
        if (!s_->is_aborted()) return call();
        calls.unlock();
        s_->check();  // throws the abort's reason
        return call();  // not reached
    }
    // A call's result; ncclInProgress (non-blocking communicators) is polled until it settles. An
    // error is read from the communicator unless an abort freed it meanwhile (then its reason).
    void settle(nccl::api::ncclResult_t r, const char* call) const {
        if (int(r) == nccl::in_progress) return s_->check(call);  // waits it out, throws on its error or timeout
        if (r == nccl::api::ncclResult_t(0)) return;
        {
            std::lock_guard calls(s_->nccl_calls);
            if (!s_->is_aborted()) nccl::check(r, call, s_->comm);
        }
        s_->check(call);
    }

    // A new communicator's initialisation (non-blocking) until it joined; on failure or timeout it
    // is aborted and the error names the call.
    static void finish_init(nccl::api::ncclComm_t comm, nccl::api::ncclResult_t r, const std::string& what, std::chrono::milliseconds timeout) {
        const auto deadline = std::chrono::steady_clock::now() + timeout;
        while (int(r) == nccl::in_progress && comm) {
            if (std::chrono::steady_clock::now() > deadline) {
                (void)nccl::api::ncclCommAbort(comm);
                throw LibraryError("NCCL", nccl::in_progress, "ncclInProgress (initialisation timed out)",
                                   what + ": not every rank joined within " + std::to_string(timeout.count()) +
                                       " ms (a rank that never started or failed first, or ranks given different ids)",
                                   std::source_location::current());
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
            if (nccl::api::ncclCommGetAsyncError(comm, &r) != nccl::api::ncclResult_t(0)) break;
        }
        if (r != nccl::api::ncclResult_t(0)) {
            try {
                nccl::check(r, what.c_str(), comm);
            } catch (...) {
                if (comm) (void)nccl::api::ncclCommAbort(comm);
                throw;
            }
        }
    }

    // The debug exchange: every rank's header, gathered; any difference throws on every rank.
    void exchange_headers(const Header& h, int dtype, const char* name) const {
        static const char* kinds[] = {"?", "all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "all_to_all"};
        const std::vector<std::int64_t> mine{h.kind, h.arg, h.count, dtype};
        const auto in = from_host<std::int64_t>(std::span<const std::int64_t>(mine), Shape{4}, TensorOptions{.device = device()});
        const auto out = empty<std::int64_t>({4 * std::int64_t(size())}, TensorOptions{.device = device()});
        const rt::stream_t s = current_stream(device()).handle();
        const std::string what = std::string("the debug exchange (TESSEL_DIST_DEBUG) before ") + name + " on rank " + std::to_string(rank());
        settle(locked_call([&] { return nccl::api::ncclAllGather(in.data(), out.data(), 4, nccl::data_type<std::int64_t>(), s_->comm, s); }),
               what.c_str());
        // Waited for under the communicator's timeout, as a collective is by the watchdog: a rank that
        // never comes to the exchange aborts the communicator instead of blocking here for ever.
        Pending exchanged{what, Event(false, device()), std::chrono::steady_clock::now() + s_->options.timeout};
        exchanged.done.record(s);
        if (!State::wait(exchanged)) {
            s_->abort(what + " did not complete within " + std::to_string(s_->options.timeout.count()) +
                      " ms (a rank that never called it, or a hang); the communicator was aborted");
            s_->check(what.c_str());
        }
        const std::vector<std::int64_t> all = out.to_vector();
        auto describe = [&](int r) {
            const std::int64_t* x = all.data() + 4 * r;
            return "rank " + std::to_string(r) + " calls " + kinds[x[0] >= 1 && x[0] <= 6 ? x[0] : 0] + " of " + std::to_string(x[2]) +
                   " elements of NCCL type " + std::to_string(x[3]) + " (operation/root code " + std::to_string(x[1]) + ")";
        };
        for (int r = 1; r < size(); ++r)
            if (!std::equal(all.begin(), all.begin() + 4, all.begin() + 4 * r))
                fail(name, ": the ranks disagree (TESSEL_DIST_DEBUG): ", describe(0), ", ", describe(r),
                     "; every rank must issue the same collectives in the same order with the same sizes");
    }
    // Checks the tensors (defined, contiguous, on this rank's device) and the stream, orders the
    // call after their last writes, and tells the caching allocator the stream uses them.
    template <class T>
    Call begin(const char* name, std::optional<StreamArg> stream, std::initializer_list<const Tensor<T>*> tensors) const {
        s_->check();
        for (const Tensor<T>* t : tensors) {
            require(t->defined(), name, ": an undefined (default-constructed) tensor");
            require(t->space() == MemorySpace::device, name, ": the tensor is in ", space_name(t->space()),
                    " memory; collectives take device memory on the rank's device");
            require(t->device() == device(), name, ": the tensor is on device ", t->device().index, ", rank ", rank(), " is device ",
                    device().index);
            require(t->is_contiguous(), name, ": the tensor (shape ", t->shape(), ", strides ", t->strides(),
                    ") is not contiguous; pass t.contiguous()");
        }
        if (stream && stream->device())
            require(*stream->device() == device(), name, ": the stream belongs to device ", stream->device()->index, ", rank ", rank(),
                    " is device ", device().index);
        const rt::stream_t s = stream ? stream->handle() : current_stream(device()).handle();  // the caller holds a DeviceGuard
        if (stream && stream->handle()) {
            const int stream_device = rt::stream_device(stream->handle());
            require(stream_device == device().index, name, ": the stream belongs to device ", stream_device, ", rank ", rank(), " is device ",
                    device().index);
        }
        for (const Tensor<T>* t : tensors) {
            ::tessel::detail::order_after_last_write(*t->storage(), s, device());
            (void)::tessel::detail::record_use(*t->storage(), s, device());  // device memory: the cache keeps it until the stream is done
        }
        return {s};
    }
    // Marks the written tensors and hands the call to the watchdog.
    template <class T>
    void end(const Call& c, const char* name, std::span<const Tensor<T>* const> written) const {
        for (const Tensor<T>* t : written) t->storage()->note_write(c.stream, device());
        Pending p{std::string(name) + " on rank " + std::to_string(rank()), Event(false, device()),
                  std::chrono::steady_clock::now() + s_->options.timeout};
        p.done.record(c.stream);
        std::lock_guard lk(s_->m);
        s_->pending.push_back(std::move(p));
    }

    std::shared_ptr<State> s_;
};

}  // namespace tessel::dist
#endif
