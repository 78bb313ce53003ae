// Collectives on tensors across devices, as torch.distributed over NCCL: a Communicator per rank,
// for now one process driving several local devices (Communicator::create_local, NCCL's
// ncclCommInitAll). all_reduce (sum, prod, max, min, avg), broadcast, reduce, all_gather,
// reduce_scatter, all_to_all, send/recv and barrier, queued on the caller's stream (by default the
// current stream of the rank's device), with the caching allocator told which stream uses each
// tensor. No hangs: a watchdog thread per communicator aborts it (ncclCommAbort) when a collective
// has not completed within CommOptions::timeout, and every later call, and check(), throws
// LibraryError naming the collective, the rank and the timeout; NCCL's asynchronous errors surface
// the same way. On CUDA it is NCCL; on the sim, NCCL's stand-in (sim/nccl.hpp), which also detects
// ranks that disagree on a collective's shape or type. One thread calling several ranks wraps the
// calls in dist::group() (ncclGroupStart/End), as NCCL requires. docs/multi-gpu.md.
#pragma once

#include <chrono>
#include <condition_variable>
#include <initializer_list>
#include <source_location>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "../lib/nccl.hpp"
#include "../stream/stream.hpp"
#include "../tensor/tensor.hpp"

#if defined(TESSEL_NCCL_AVAILABLE)
namespace tessel::dist {

// How a reduction combines the ranks' values.
enum class ReduceOp { sum, prod, max, min, avg };

struct CommOptions {
    std::chrono::milliseconds timeout = std::chrono::minutes(10);  // a collective still running after this aborts the communicator
};

// Runs f, which calls collectives of several ranks from this thread, as one NCCL group.
template <class F>
void group(F&& f) {
    nccl::check(nccl::api::ncclGroupStart(), "ncclGroupStart");
    try {
        f();
    } catch (...) {
        (void)nccl::api::ncclGroupEnd();
        throw;
    }
    nccl::check(nccl::api::ncclGroupEnd(), "ncclGroupEnd");
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
        require(options.timeout.count() > 0, "Communicator::create_local: the timeout must be positive");
        std::vector<nccl::api::ncclComm_t> comms(list.size());
        nccl::check(nccl::api::ncclCommInitAll(comms.data(), int(list.size()), list.data()), "ncclCommInitAll");
        std::vector<Communicator> out;
        for (std::size_t r = 0; r < comms.size(); ++r)
            out.push_back(Communicator(std::make_shared<State>(comms[r], int(r), int(comms.size()), devices[r], options)));
        return out;
    }

    int rank() const { return s_->rank; }
    int size() const { return s_->size; }
    Device device() const { return s_->device; }

    // t = op over the ranks' t, on every rank.
    template <Element T>
    void all_reduce(const Tensor<T>& t, ReduceOp op = ReduceOp::sum, std::optional<rt::stream_t> stream = std::nullopt) const {
        const DeviceGuard guard(device());  // a null stream is the default stream of this rank's device
        check_op<T>(op, "all_reduce");
        const Call c = begin("all_reduce", stream, {&t});
        nccl::check(nccl::api::ncclAllReduce(t.data(), t.data(), std::size_t(t.numel()), nccl::data_type<T>(), nccl_op(op), s_->comm, c.stream),
                    "ncclAllReduce", s_->comm);
        end(c, "all_reduce", {&t});
    }
    // t = root's t, on every rank.
    template <Element T>
    void broadcast(const Tensor<T>& t, int root, std::optional<rt::stream_t> stream = std::nullopt) const {
        const DeviceGuard guard(device());  // a null stream is the default stream of this rank's device
        check_rank(root, "broadcast", "root");
        const Call c = begin("broadcast", stream, {&t});
        nccl::check(nccl::api::ncclBroadcast(t.data(), t.data(), std::size_t(t.numel()), nccl::data_type<T>(), root, s_->comm, c.stream),
                    "ncclBroadcast", s_->comm);
        end(c, "broadcast", {&t});
    }
    // On the root, t = op over the ranks' t; the others' t is unchanged.
    template <Element T>
    void reduce(const Tensor<T>& t, int root, ReduceOp op = ReduceOp::sum, std::optional<rt::stream_t> stream = std::nullopt) const {
        const DeviceGuard guard(device());  // a null stream is the default stream of this rank's device
        check_rank(root, "reduce", "root");
        check_op<T>(op, "reduce");
        const Call c = begin("reduce", stream, {&t});
        nccl::check(nccl::api::ncclReduce(t.data(), t.data(), std::size_t(t.numel()), nccl::data_type<T>(), nccl_op(op), root, s_->comm,
                                          c.stream),
                    "ncclReduce", s_->comm);
        end(c, "reduce", {&t});
    }
    // out = every rank's in, concatenated in rank order (out has size() times in's elements).
    template <Element T>
    void all_gather(const Tensor<T>& in, const Tensor<T>& out, std::optional<rt::stream_t> stream = std::nullopt) const {
        const DeviceGuard guard(device());  // a null stream is the default stream of this rank's device
        require(out.defined() && in.defined() && out.numel() == in.numel() * size(), "all_gather: out must hold ", size(), " x ",
                in.defined() ? in.numel() : 0, " elements (one input per rank), not ", out.defined() ? out.numel() : 0);
        const Call c = begin("all_gather", stream, {&in, &out});
        nccl::check(nccl::api::ncclAllGather(in.data(), out.data(), std::size_t(in.numel()), nccl::data_type<T>(), s_->comm, c.stream),
                    "ncclAllGather", s_->comm);
        end(c, "all_gather", {&out});
    }
    // out = block rank() of (op over the ranks' in), in having size() times out's elements.
    template <Element T>
    void reduce_scatter(const Tensor<T>& in, const Tensor<T>& out, ReduceOp op = ReduceOp::sum,
                        std::optional<rt::stream_t> stream = std::nullopt) const {
        const DeviceGuard guard(device());  // a null stream is the default stream of this rank's device
        check_op<T>(op, "reduce_scatter");
        require(out.defined() && in.defined() && in.numel() == out.numel() * size(), "reduce_scatter: in must hold ", size(), " x ",
                out.defined() ? out.numel() : 0, " elements (a block per rank), not ", in.defined() ? in.numel() : 0);
        const Call c = begin("reduce_scatter", stream, {&in, &out});
        nccl::check(nccl::api::ncclReduceScatter(in.data(), out.data(), std::size_t(out.numel()), nccl::data_type<T>(), nccl_op(op), s_->comm,
                                                 c.stream),
                    "ncclReduceScatter", s_->comm);
        end(c, "reduce_scatter", {&out});
    }
    // Block j of out = block rank() of rank j's in (size() equal blocks each), as torch's
    // all_to_all_single: one send and one receive per peer in a group.
    template <Element T>
    void all_to_all(const Tensor<T>& in, const Tensor<T>& out, std::optional<rt::stream_t> stream = std::nullopt) const {
        const DeviceGuard guard(device());  // a null stream is the default stream of this rank's device
        require(in.defined() && out.defined() && in.numel() == out.numel() && in.numel() % size() == 0, "all_to_all: in and out must have the "
                "same number of elements, a multiple of the ", size(), " ranks (", in.defined() ? in.numel() : 0, " and ",
                out.defined() ? out.numel() : 0, ")");
        const Call c = begin("all_to_all", stream, {&in, &out});
        const std::size_t block = std::size_t(in.numel() / size());
        group([&] {
            for (int peer = 0; peer < size(); ++peer) {
                nccl::check(nccl::api::ncclSend(in.data() + block * std::size_t(peer), block, nccl::data_type<T>(), peer, s_->comm, c.stream),
                            "ncclSend", s_->comm);
                nccl::check(nccl::api::ncclRecv(out.data() + block * std::size_t(peer), block, nccl::data_type<T>(), peer, s_->comm, c.stream),
                            "ncclRecv", s_->comm);
            }
        });
        end(c, "all_to_all", {&out});
    }
    template <Element T>
    void send(const Tensor<T>& t, int peer, std::optional<rt::stream_t> stream = std::nullopt) const {
        const DeviceGuard guard(device());  // a null stream is the default stream of this rank's device
        check_rank(peer, "send", "peer");
        const Call c = begin("send", stream, {&t});
        nccl::check(nccl::api::ncclSend(t.data(), std::size_t(t.numel()), nccl::data_type<T>(), peer, s_->comm, c.stream), "ncclSend", s_->comm);
        end<T>(c, "send", {});
    }
    template <Element T>
    void recv(const Tensor<T>& t, int peer, std::optional<rt::stream_t> stream = std::nullopt) const {
        const DeviceGuard guard(device());  // a null stream is the default stream of this rank's device
        check_rank(peer, "recv", "peer");
        const Call c = begin("recv", stream, {&t});
        nccl::check(nccl::api::ncclRecv(t.data(), std::size_t(t.numel()), nccl::data_type<T>(), peer, s_->comm, c.stream), "ncclRecv", s_->comm);
        end(c, "recv", {&t});
    }
    // Every rank's stream waits here until all ranks arrive (an all_reduce of one element).
    void barrier(std::optional<rt::stream_t> stream = std::nullopt) const {
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
        State(nccl::api::ncclComm_t c, int r, int n, Device d, CommOptions o) : comm(c), rank(r), size(n), device(d), options(o) {
            watchdog = std::thread([this] { watch(); });
        }
        ~State() {
            {
                std::lock_guard lk(m);
                stopping = true;
            }
            cv.notify_all();
            watchdog.join();
            (void)nccl::api::ncclCommDestroy(comm);
        }
        void abort(const std::string& why) {
            {
                std::lock_guard lk(m);
                if (aborted) return;
                aborted = true;
                reason = why;
            }
            (void)nccl::api::ncclCommAbort(comm);
        }
        void check(std::source_location where = std::source_location::current()) {
            {
                std::lock_guard lk(m);
                if (aborted)
                    throw LibraryError("NCCL", 6, "ncclRemoteError (communicator aborted)",
                                       reason + " (rank " + std::to_string(rank) + " of " + std::to_string(size) + ", device " +
                                           std::to_string(device.index) + ")",
                                       where);
            }
            nccl::api::ncclResult_t r{};
            nccl::check(nccl::api::ncclCommGetAsyncError(comm, &r), "ncclCommGetAsyncError", comm);
            nccl::check(r, "an earlier collective (ncclCommGetAsyncError)", comm);
        }
        // The watchdog: every 20 ms, the pending collectives that completed are dropped; the first past
        // its deadline aborts the communicator.
        void watch() {
            std::unique_lock lk(m);
            while (!stopping) {
                cv.wait_for(lk, std::chrono::milliseconds(20));
                const auto now = std::chrono::steady_clock::now();
                for (auto it = pending.begin(); it != pending.end();) {
                    bool complete = true;
                    try {
                        complete = it->done.query();
                    } catch (const Error&) {  // it failed: check() reports how
                    }
                    if (complete) {
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
        Tensor<float> barrier_buffer;
        std::mutex m;  // the members below
        std::condition_variable cv;
        bool stopping = false, aborted = false;
        std::string reason;
        std::vector<Pending> pending;
        std::thread watchdog;
    };

    explicit Communicator(std::shared_ptr<State> s) : s_(std::move(s)) {}

    static nccl::api::ncclRedOp_t nccl_op(ReduceOp op) { return nccl::api::ncclRedOp_t(int(op)); }  // sum, prod, max, min, avg: NCCL's order

    template <class T>
    static void check_op(ReduceOp op, const char* call) {
        require(!(std::is_integral_v<T> && op == ReduceOp::avg), call, ": avg of integer tensors would truncate; reduce with sum and divide");
    }
    void check_rank(int r, const char* call, const char* what) const {
        require(r >= 0 && r < size(), call, ": ", what, " ", r, " is not a rank of this communicator (", size(), " ranks)");
    }

    struct Call {
        rt::stream_t stream;
    };
    // Checks the tensors (defined, contiguous, on this rank's device) and the stream, orders the
    // call after their last writes, and tells the caching allocator the stream uses them.
    template <class T>
    Call begin(const char* name, std::optional<rt::stream_t> stream, std::initializer_list<const Tensor<T>*> tensors) const {
        s_->check();
        for (const Tensor<T>* t : tensors) {
            require(t->defined(), name, ": an undefined (default-constructed) tensor");
            require(t->space() == MemorySpace::device, name, ": the tensor is in ", space_name(t->space()),
                    " memory; collectives take device memory on the rank's device");
            require(t->device() == device(), name, ": the tensor is on device ", t->device().index, ", rank ", rank(), " is device ",
                    device().index);
            require(t->is_contiguous(), name, ": the tensor (shape ", t->shape().to_string(), ", strides ", t->strides().to_string(),
                    ") is not contiguous; pass t.contiguous()");
        }
        const rt::stream_t s = stream ? *stream : current_stream(device()).handle();  // the caller holds a DeviceGuard
        if (stream && *stream)
            require(rt::stream_device(*stream) == device().index, name, ": the stream belongs to device ", rt::stream_device(*stream), ", rank ",
                    rank(), " is device ", device().index);
        for (const Tensor<T>* t : tensors) {
            ::tessel::detail::order_after_last_write(*t->storage(), s, device());
            (void)::tessel::detail::record_use(*t->storage(), s, device());  // device memory: the cache keeps it until the stream is done
        }
        return {s};
    }
    // Marks the written tensors and hands the call to the watchdog.
    template <class T>
    void end(const Call& c, const char* name, std::initializer_list<const Tensor<T>*> written) const {
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
