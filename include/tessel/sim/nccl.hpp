// The sim's stand-in for the NCCL entry points tessel calls (lib/nccl.hpp), with NCCL's names, types
// and result codes, over the simulated devices of one process: communicators from ncclCommInitAll;
// collectives and point-to-point calls queued on the caller's stream like NCCL's kernels. Each rank's
// call arrives at a rendezvous (by the communicator's call sequence, as NCCL requires every rank to
// issue collectives in the same order) and waits there, on its stream, for the others; the last to
// arrive computes the result into every rank's buffers. What a GPU would get wrong silently the
// stand-in refuses: ranks that disagree on a collective's count, type, operation or root fail with
// ncclInvalidUsage naming both; a wait ends only when the others arrive or the communicator is
// aborted (ncclCommAbort, which tessel's watchdog calls on a timeout), and then fails naming the
// ranks that never came. A failure is the stream's error (as a kernel fault) and the communicator's
// asynchronous error (ncclCommGetAsyncError). Calls between ncclGroupStart and ncclGroupEnd are
// queued at the end as one task per stream that arrives at all of them before waiting for any, so
// a rank's send to itself, and send/recv pairs in any order within a group, complete as in NCCL.
// Reductions use NCCL's arithmetic in rank order (sim/nccl_reduce.hpp). One thread calling a
// collective of two ranks outside a group, which NCCL documents can deadlock, is refused.
#pragma once

#include <cstddef>

#include <driver_types.h>

#include "../core/linkage.hpp"

namespace tessel::sim::nccl {

enum ncclResult_t {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7
};
enum ncclRedOp_t { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 };
enum ncclDataType_t {
    ncclInt8 = 0,
    ncclUint8 = 1,
    ncclInt32 = 2,
    ncclUint32 = 3,
    ncclInt64 = 4,
    ncclUint64 = 5,
    ncclFloat16 = 6,
    ncclFloat32 = 7,
    ncclFloat64 = 8,
    ncclBfloat16 = 9,
    ncclFloat8e4m3 = 10,
    ncclFloat8e5m2 = 11
};
struct ncclComm;
using ncclComm_t = ncclComm*;

TESSEL_API ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist);

// One process per rank (sim/nccl_net.hpp): the id names a hub that ncclGetUniqueId starts in its
// process (a loopback TCP listener); every rank's ncclCommInitRank joins it.
struct ncclUniqueId {
    char internal[128];
};
struct ncclConfig_t {  // the fields of NCCL's that the stand-in reads
    std::size_t size = sizeof(ncclConfig_t);
    unsigned magic = 0xcafebeef;
    unsigned version = 0;
    int blocking = 1;  // 0: ncclCommInitRankConfig returns ncclInProgress; ncclCommGetAsyncError says when it joined
};
inline constexpr int ncclSplitNoColor = -1;  // NCCL_SPLIT_NOCOLOR
TESSEL_API ncclResult_t ncclGetUniqueId(ncclUniqueId* id);
TESSEL_API ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank);
TESSEL_API ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config);
TESSEL_API ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config);
TESSEL_API ncclResult_t ncclCommDestroy(ncclComm_t comm);
TESSEL_API ncclResult_t ncclCommAbort(ncclComm_t comm);
TESSEL_API ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* error);
// Communicators not yet destroyed or aborted (tests check none is leaked).
TESSEL_API std::size_t live_communicators();
TESSEL_API const char* ncclGetErrorString(ncclResult_t result);
TESSEL_API const char* ncclGetLastError(ncclComm_t comm);
TESSEL_API ncclResult_t ncclCommCount(const ncclComm_t comm, int* count);
TESSEL_API ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device);
TESSEL_API ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank);
TESSEL_API ncclResult_t ncclAllReduce(const void* send, void* recv, std::size_t count, ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,
                                      cudaStream_t stream);
TESSEL_API ncclResult_t ncclBroadcast(const void* send, void* recv, std::size_t count, ncclDataType_t type, int root, ncclComm_t comm,
                                      cudaStream_t stream);
TESSEL_API ncclResult_t ncclReduce(const void* send, void* recv, std::size_t count, ncclDataType_t type, ncclRedOp_t op, int root,
                                   ncclComm_t comm, cudaStream_t stream);
TESSEL_API ncclResult_t ncclAllGather(const void* send, void* recv, std::size_t sendcount, ncclDataType_t type, ncclComm_t comm,
                                      cudaStream_t stream);
TESSEL_API ncclResult_t ncclReduceScatter(const void* send, void* recv, std::size_t recvcount, ncclDataType_t type, ncclRedOp_t op,
                                          ncclComm_t comm, cudaStream_t stream);
TESSEL_API ncclResult_t ncclSend(const void* send, std::size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t stream);
TESSEL_API ncclResult_t ncclRecv(void* recv, std::size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t stream);
TESSEL_API ncclResult_t ncclGroupStart();
TESSEL_API ncclResult_t ncclGroupEnd();

}  // namespace tessel::sim::nccl

#if TESSEL_DEFINE_RUNTIME
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <tuple>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "nccl_reduce.hpp"
#include "runtime.hpp"

namespace tessel::sim::nccl {

namespace detail {

struct Remote;
enum class Kind { all_reduce, broadcast, reduce, all_gather, reduce_scatter, send, recv };
inline const char* kind_name(Kind k) {
    switch (k) {
        case Kind::all_reduce: return "ncclAllReduce";
        case Kind::broadcast: return "ncclBroadcast";
        case Kind::reduce: return "ncclReduce";
        case Kind::all_gather: return "ncclAllGather";
        case Kind::reduce_scatter: return "ncclReduceScatter";
        case Kind::send: return "ncclSend";
        case Kind::recv: return "ncclRecv";
    }
    return "?";
}
inline const char* type_name(ncclDataType_t t) {
    static const char* names[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64", "bfloat16", "float8e4m3",
                                  "float8e5m2"};
    return t >= 0 && t <= ncclFloat8e5m2 ? names[t] : "unknown type";
}
inline std::size_t type_bytes(ncclDataType_t t) {
    switch (t) {
        case ncclInt8:
        case ncclUint8:
        case ncclFloat8e4m3:
        case ncclFloat8e5m2: return 1;
        case ncclFloat16:
        case ncclBfloat16: return 2;
        case ncclInt32:
        case ncclUint32:
        case ncclFloat32: return 4;
        default: return 8;
    }
}

// One rank's part of a call.
struct Arrival {
    Kind kind;
    const void* send;
    void* recv;
    std::size_t count;  // per rank: allreduce/broadcast/reduce count, allgather sendcount, reducescatter recvcount, p2p count
    ncclDataType_t type;
    ncclRedOp_t op;
    int root;  // or the peer, for send/recv
};
struct Op {
    std::vector<std::optional<Arrival>> ranks;
    int arrived = 0, released = 0;
    bool done = false;
    ncclResult_t result = ncclSuccess;
    std::string error;
};

// The ranks of one ncclCommInitAll.
struct Clique {
    explicit Clique(int ranks) : n(ranks) {}
    int n;
    std::mutex m;
    std::condition_variable cv;
    bool aborted = false;
    std::string reason;                                             // why it was aborted, for the waiting ranks' errors
    std::map<std::uint64_t, Op> collectives;                        // by call sequence
    std::map<std::tuple<int, int, std::uint64_t>, Op> transfers;  // (from, to, k-th transfer between them)
    struct Callers {
        std::uint64_t thread = 0;  // thread_serial() of the first rank that called it outside a group
        int rank = -1, seen = 0;
    };
    std::map<std::uint64_t, Callers> callers;  // collectives by call sequence until every rank has called them
};

// Calls f(T{}) with the C++ type of an NCCL type.
template <class F>
void with_type(ncclDataType_t t, F&& f) {
    switch (t) {
        case ncclInt8: return f(std::int8_t{});
        case ncclUint8: return f(std::uint8_t{});
        case ncclInt32: return f(std::int32_t{});
        case ncclUint32: return f(std::uint32_t{});
        case ncclInt64: return f(std::int64_t{});
        case ncclUint64: return f(std::uint64_t{});
        case ncclFloat16: return f(__half{});
        case ncclFloat32: return f(float{});
        case ncclFloat64: return f(double{});
        case ncclBfloat16: return f(__nv_bfloat16{});
        case ncclFloat8e4m3: return f(__nv_fp8_e4m3{});
        case ncclFloat8e5m2: return f(__nv_fp8_e5m2{});
    }
}
static_assert(int(Reduction::avg) == ncclAvg && int(Reduction::min) == ncclMin && int(Reduction::sum) == ncclSum);
// Elements [first, first + count) of op over the ranks' send buffers, into out.
template <class T>
void reduce_range(const std::vector<std::optional<Arrival>>& r, std::size_t first, std::size_t count, T* out) {
    const Reduction op = Reduction(int(r[0]->op));
    const std::size_t n = r.size();
    for (std::size_t i = 0; i < count; ++i) {
        T acc = contribution(op, static_cast<const T*>(r[0]->send)[first + i], n);
        for (std::size_t k = 1; k < n; ++k) acc = combine(op == Reduction::avg ? Reduction::sum : op, acc, contribution(op, static_cast<const T*>(r[k]->send)[first + i], n));
        out[i] = finish(op, acc, n);
    }
}
// The reduction of `count` elements from element `first` of every send buffer, as bytes.
inline std::vector<unsigned char> reduce_bytes(const std::vector<std::optional<Arrival>>& r, std::size_t first, std::size_t count) {
    std::vector<unsigned char> out(count * type_bytes(r[0]->type));
    with_type(r[0]->type, [&](auto zero) {
        using T = decltype(zero);
        reduce_range<T>(r, first, count, reinterpret_cast<T*>(out.data()));
    });
    return out;
}

// The collective all ranks have arrived at, computed into their buffers; "" or the error.
inline std::string execute(std::vector<std::optional<Arrival>>& r) {
    const Arrival& a0 = *r[0];
    for (std::size_t k = 1; k < r.size(); ++k) {
        const Arrival& a = *r[k];
        if (a.kind != a0.kind || a.count != a0.count || a.type != a0.type ||
            (a.kind != Kind::broadcast && a.kind != Kind::all_gather && a.op != a0.op) ||
            ((a.kind == Kind::broadcast || a.kind == Kind::reduce) && a.root != a0.root))
            return std::string("ranks disagree: rank 0 called ") + kind_name(a0.kind) + " with " + std::to_string(a0.count) + " " +
                   type_name(a0.type) + " elements (op " + std::to_string(a0.op) + ", root " + std::to_string(a0.root) + "), rank " +
                   std::to_string(k) + " " + kind_name(a.kind) + " with " + std::to_string(a.count) + " " + type_name(a.type) +
                   " elements (op " + std::to_string(a.op) + ", root " + std::to_string(a.root) + ")";
    }
    const std::size_t n = r.size(), count = a0.count, bytes = count * type_bytes(a0.type);
    switch (a0.kind) {
        case Kind::all_reduce:
        case Kind::reduce: {
            const std::vector<unsigned char> v = reduce_bytes(r, 0, count);
            for (std::size_t k = 0; k < n; ++k)
                if (a0.kind == Kind::all_reduce || int(k) == a0.root) std::memcpy(r[k]->recv, v.data(), bytes);
            break;
        }
        case Kind::broadcast: {
            std::vector<unsigned char> data(bytes);
            std::memcpy(data.data(), r[std::size_t(a0.root)]->send, bytes);
            for (std::size_t k = 0; k < n; ++k) std::memcpy(r[k]->recv, data.data(), bytes);
            break;
        }
        case Kind::all_gather: {
            std::vector<unsigned char> data(bytes * n);
            for (std::size_t k = 0; k < n; ++k) std::memcpy(data.data() + k * bytes, r[k]->send, bytes);
            for (std::size_t k = 0; k < n; ++k) std::memcpy(r[k]->recv, data.data(), data.size());
            break;
        }
        case Kind::reduce_scatter: {
            const std::vector<unsigned char> v = reduce_bytes(r, 0, count * n);
            for (std::size_t k = 0; k < n; ++k) std::memcpy(r[k]->recv, v.data() + k * bytes, bytes);
            break;
        }
        case Kind::send:
        case Kind::recv: break;  // transfers are matched in transfer()
    }
    return {};
}

}  // namespace detail

struct ncclComm {
    std::shared_ptr<detail::Clique> clique;  // ncclCommInitAll's ranks of this process (on the hub: a remote clique)
    std::shared_ptr<detail::Remote> remote;  // ncclCommInitRank: the connection to the hub (sim/nccl_net.hpp)
    int rank = 0, n = 1, device = 0;
    bool blocking = true;                               // ncclConfig_t::blocking: a non-blocking one's split completes in the background
    std::uint64_t next_collective = 0;                  // host side: the call sequence
    std::map<std::tuple<int, int, bool>, std::uint64_t> next_transfer;  // (from, to, a send) -> next k: a rank's sends and receives count apart
    std::mutex m;                                       // the two below
    ncclResult_t async_error = ncclSuccess;
    std::string last_error;
};

namespace detail {

inline void record_error(ncclComm* c, ncclResult_t r, const std::string& what) {
    std::lock_guard lk(c->m);
    if (c->async_error == ncclSuccess) c->async_error = r, c->last_error = what;
}

// Live communicators (ncclCommDestroy drops one; calls still queued keep theirs alive).
inline std::mutex& registry_m() {
    static std::mutex m;
    return m;
}
inline std::map<ncclComm*, std::shared_ptr<ncclComm>>& registry() {
    static auto* r = new std::map<ncclComm*, std::shared_ptr<ncclComm>>();
    return *r;
}
inline std::shared_ptr<ncclComm> registry_find(ncclComm* c) {
    std::lock_guard lk(registry_m());
    auto it = registry().find(c);
    return it == registry().end() ? nullptr : it->second;
}

// One rank's call, ready to run on its stream.
struct Item {
    std::shared_ptr<ncclComm> comm;
    Arrival a;
    std::uint64_t seq;
    std::pair<int, int> pair;  // send/recv: (from, to)
    bool p2p;
};

// The op an item takes part in, and the party it is there (creating the op on first arrival).
// Caller holds the clique's lock.
inline Op& op_of(const Item& it, int& party, std::vector<int>& ranks) {
    Clique& q = *it.comm->clique;
    if (!it.p2p) {
        Op& op = q.collectives[it.seq];
        if (op.ranks.empty()) op.ranks.resize(std::size_t(q.n));
        party = it.comm->rank;
        ranks.resize(std::size_t(q.n));
        for (int i = 0; i < q.n; ++i) ranks[std::size_t(i)] = i;
        return op;
    }
    Op& op = q.transfers[{it.pair.first, it.pair.second, it.seq}];
    if (op.ranks.empty()) op.ranks.resize(2);
    party = it.a.kind == Kind::send ? 0 : 1;
    ranks = {it.pair.first, it.pair.second};
    return op;
}

// The work the last party to arrive does: the collective, or the transfer's copy.
inline std::string run(const Item& it, Op& op) {
    if (!it.p2p) return execute(op.ranks);
    const Arrival& s = *op.ranks[0];
    const Arrival& r = *op.ranks[1];
    if (s.count != r.count || s.type != r.type)
        return "rank " + std::to_string(it.pair.first) + " sends " + std::to_string(s.count) + " " + type_name(s.type) + " elements to rank " +
               std::to_string(it.pair.second) + ", which receives " + std::to_string(r.count) + " " + type_name(r.type) + " elements";
    std::memcpy(r.recv, s.send, s.count * type_bytes(s.type));
    return {};
}

// An item's arrival at its op; the last party to arrive runs it and wakes the others.
inline void arrive(const Item& it) {
    Clique& q = *it.comm->clique;
    std::lock_guard lk(q.m);
    int party = 0;
    std::vector<int> ranks;
    Op& op = op_of(it, party, ranks);
    op.ranks[std::size_t(party)] = it.a;
    if (++op.arrived == int(ranks.size())) {
        op.error = run(it, op);
        op.result = op.error.empty() ? ncclSuccess : ncclInvalidUsage;
        op.done = true;
        q.cv.notify_all();
    }
}

// Waits for an arrived item's op to complete or the clique to abort: "" or what went wrong (also
// recorded as the communicator's asynchronous error).
inline std::string await(const Item& it, ncclResult_t* result = nullptr) {
    ncclComm* c = it.comm.get();
    Clique& q = *c->clique;
    std::unique_lock lk(q.m);
    int party = 0;
    std::vector<int> ranks;
    Op& op = op_of(it, party, ranks);
    q.cv.wait(lk, [&] { return op.done || q.aborted; });
    const char* name = kind_name(it.a.kind);
    std::string what;
    if (!op.done) {
        std::string missing;
        for (std::size_t k = 0; k < op.ranks.size(); ++k)
            if (!op.ranks[k]) missing += (missing.empty() ? "" : ", ") + std::to_string(ranks[k]);
        what = std::string(name) + " on rank " + std::to_string(c->rank) + " aborted: " +
               (q.reason.empty() ? std::string("the communicator was aborted") : q.reason) + " while waiting for rank(s) " + missing +
               ", which never joined";
        record_error(c, ncclRemoteError, what);
        if (result) *result = ncclRemoteError;
    } else if (op.result != ncclSuccess) {
        what = std::string(name) + " on rank " + std::to_string(c->rank) + ": " + op.error;
        record_error(c, op.result, what);
        if (result) *result = op.result;
    }
    if (op.done && ++op.released == int(ranks.size())) {
        if (it.p2p) q.transfers.erase({it.pair.first, it.pair.second, it.seq});
        else q.collectives.erase(it.seq);
    }
    return what;
}

}  // namespace detail
}  // namespace tessel::sim::nccl

#define TESSEL_SIM_NCCL_NET_BODY
#include "nccl_net.hpp"  // ranks of other processes: the hub and its clients

namespace tessel::sim::nccl {
namespace detail {

// A stream's share of a group (or one call): every item arrives first, then each waits for its
// op, so a rank's sends and receives to itself, or to peers whose matching calls sit later on the
// same stream, complete as NCCL's grouped calls do. Items of communicators from ncclCommInitRank
// go to the hub in one connection first (sim/nccl_net.hpp). Runs on the stream's worker; throws
// the first failure, after every item has been released.
inline void run_items(const std::vector<Item>& items) {
    std::vector<const Item*> local, remote;
    for (const Item& it : items) (it.comm->remote ? remote : local).push_back(&it);
    RemoteCall call = remote_send(remote);
    for (const Item* it : local) arrive(*it);
    std::string first_error;
    for (const Item* it : local)
        if (std::string e = await(*it); first_error.empty()) first_error = std::move(e);
    if (std::string e = remote_finish(call); first_error.empty()) first_error = std::move(e);
    if (!first_error.empty()) throw std::runtime_error(first_error);
}

// Calls between ncclGroupStart and ncclGroupEnd on this thread, with their streams.
struct Group {
    int depth = 0;
    std::vector<std::pair<cudaStream_t, Item>> items;
};
inline Group& group() {
    static thread_local Group g;
    return g;
}

inline ncclResult_t queue_items(cudaStream_t stream, std::vector<Item> items) {
    const char* name = items.size() == 1 ? kind_name(items[0].a.kind) : "NCCL group";
    // As NCCL, a null stream is the default stream of the communicator's device, not the caller's.
    int caller = 0;
    (void)::tessel::sim::api::cudaGetDevice(&caller);
    (void)::tessel::sim::api::cudaSetDevice(items[0].comm->device);
    const cudaError_t queued = ::tessel::sim::api::enqueue_host_work(stream, [items = std::move(items)] { run_items(items); }, name);
    (void)::tessel::sim::api::cudaSetDevice(caller);
    return queued == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError;
}

// NCCL's documented deadlock: one thread calling a collective of two ranks of a clique outside a
// group (each call may wait on the host until the other ranks arrive). The sim could complete it;
// it says what a GPU would hang on instead: "" or the error, recorded on the communicator, with
// the clique aborted so the rank already waiting fails too.
// A number for the calling thread, never reused in the process (a joined thread's std::thread::id
// can come back for the next one, which would make a rank per thread in turn look like one thread).
inline std::uint64_t thread_serial() {
    static std::atomic<std::uint64_t> next{1};
    static thread_local const std::uint64_t mine = next.fetch_add(1, std::memory_order_relaxed);
    return mine;
}
inline std::string one_thread_misuse(ncclComm& c, std::uint64_t seq, Kind kind, bool grouped) {
    Clique& q = *c.clique;
    std::string why;
    {
        std::lock_guard lk(q.m);
        Clique::Callers& k = q.callers[seq];
        if (!grouped && k.rank >= 0 && k.thread == thread_serial())
            why = std::string(kind_name(kind)) + " of ranks " + std::to_string(k.rank) + " and " + std::to_string(c.rank) +
                  " was called from one thread outside ncclGroupStart/ncclGroupEnd: NCCL would deadlock (each call may wait for the "
                  "other ranks); one thread driving several ranks must group the calls (tessel::dist::group)";
        else if (!grouped && k.rank < 0)
            k.thread = thread_serial(), k.rank = c.rank;
        if (++k.seen == q.n) q.callers.erase(seq);
        if (!why.empty() && !q.aborted) q.aborted = true, q.reason = why;
    }
    if (why.empty()) return why;
    q.cv.notify_all();
    record_error(&c, ncclInvalidUsage, why);
    return why;
}

inline ncclResult_t enqueue(ncclComm* c, cudaStream_t stream, Arrival a) {
    std::shared_ptr<ncclComm> keep = c ? registry_find(c) : nullptr;  // a destroyed communicator's queued calls still run
    if (!keep) return ncclInvalidArgument;
    if (a.type < ncclInt8 || a.type > ncclFloat8e5m2 || a.op < ncclSum || a.op > ncclAvg) return ncclInvalidArgument;
    if (a.count > 0 && ((a.kind != Kind::recv && !a.send) || (a.kind != Kind::send && !a.recv))) return ncclInvalidArgument;
    const int n = c->n;
    if ((a.kind == Kind::broadcast || a.kind == Kind::reduce || a.kind == Kind::send || a.kind == Kind::recv) && (a.root < 0 || a.root >= n))
        return ncclInvalidArgument;
    {
        std::lock_guard lk(c->m);
        // As NCCL's ncclCommEnsureReady: a communicator whose initialisation or split is still in
        // progress takes no call (ncclInvalidArgument), and an error stays the answer.
        if (c->async_error != ncclSuccess) return c->async_error == ncclInProgress ? ncclInvalidArgument : c->async_error;
    }
    const bool p2p = a.kind == Kind::send || a.kind == Kind::recv;
    const auto pair = p2p ? std::make_pair(a.kind == Kind::send ? c->rank : a.root, a.kind == Kind::send ? a.root : c->rank) : std::make_pair(0, 0);
    const std::uint64_t seq = p2p ? c->next_transfer[{pair.first, pair.second, a.kind == Kind::send}]++ : c->next_collective++;
    if (!p2p && c->clique && !c->remote && one_thread_misuse(*c, seq, a.kind, group().depth > 0).size()) return ncclInvalidUsage;
    Item item{std::move(keep), a, seq, pair, p2p};
    if (group().depth > 0) {
        group().items.emplace_back(stream, std::move(item));
        return ncclSuccess;
    }
    return queue_items(stream, {std::move(item)});
}

}  // namespace detail

TESSEL_API ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
    if (!comms || ndev < 1) return ncclInvalidArgument;
    int devices = 0;
    if (::tessel::sim::api::cudaGetDeviceCount(&devices) != cudaSuccess) return ncclUnhandledCudaError;
    for (int i = 0; i < ndev; ++i) {
        const int d = devlist ? devlist[i] : i;
        if (d < 0 || d >= devices) return ncclInvalidArgument;
        for (int j = 0; j < i; ++j)
            if ((devlist ? devlist[j] : j) == d) return ncclInvalidUsage;  // NCCL: one rank per device
    }
    auto clique = std::make_shared<detail::Clique>(ndev);
    std::lock_guard lk(detail::registry_m());
    for (int i = 0; i < ndev; ++i) {
        auto c = std::make_shared<ncclComm>();
        c->clique = clique;
        c->rank = i;
        c->n = ndev;
        c->device = devlist ? devlist[i] : i;
        comms[i] = c.get();
        detail::registry()[c.get()] = c;
    }
    return ncclSuccess;
}

TESSEL_API ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    std::shared_ptr<ncclComm> keep = detail::registry_find(comm);
    if (!keep) return ncclInvalidArgument;
    {
        // As NCCL's: a communicator holding an error is not destroyed (the call returns the error;
        // NCCL leaves it allocated): such a one is for ncclCommAbort.
        std::lock_guard lk(keep->m);
        if (keep->async_error != ncclSuccess && keep->async_error != ncclInProgress) return keep->async_error;
    }
    if (keep->remote) detail::remote_leave(*keep);  // tells the hub this rank left
    std::lock_guard lk(detail::registry_m());
    detail::registry().erase(comm);
    return ncclSuccess;
}

// As NCCL's, abort also frees the communicator: the handle is invalid afterwards (calls queued
// before keep it alive until they end, with an error if they were waiting).
TESSEL_API ncclResult_t ncclCommAbort(ncclComm_t comm) {
    if (!comm) return ncclSuccess;
    std::shared_ptr<ncclComm> keep = detail::registry_find(comm);
    if (!keep) return ncclInvalidArgument;
    detail::record_error(comm, ncclRemoteError, "the communicator was aborted (ncclCommAbort)");
    if (keep->remote) {
        detail::remote_abort(*keep);  // wakes this rank's waits; the hub then fails the other ranks' waits
    } else {
        {
            std::lock_guard lk(comm->clique->m);
            comm->clique->aborted = true;
            if (comm->clique->reason.empty()) comm->clique->reason = "rank " + std::to_string(comm->rank) + " aborted the communicator";
        }
        comm->clique->cv.notify_all();
    }
    std::lock_guard lk(detail::registry_m());
    detail::registry().erase(comm);
    return ncclSuccess;
}

TESSEL_API std::size_t live_communicators() {
    std::lock_guard lk(detail::registry_m());
    return detail::registry().size();
}

TESSEL_API ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* error) {
    if (!comm || !error) return ncclInvalidArgument;
    std::lock_guard lk(comm->m);
    *error = comm->async_error;
    return ncclSuccess;
}

TESSEL_API const char* ncclGetErrorString(ncclResult_t result) {
    switch (result) {
        case ncclSuccess: return "no error";
        case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
        case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
        case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
        case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
        case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
        case ncclRemoteError: return "remote process exited or there was a network error";
        case ncclInProgress: return "NCCL operation in progress";
    }
    return "unknown result code";
}

TESSEL_API const char* ncclGetLastError(ncclComm_t comm) {
    if (!comm) return "";
    std::lock_guard lk(comm->m);
    return comm->last_error.c_str();  // stable until the next error, which replaces nothing (first error kept)
}

TESSEL_API ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
    if (!comm || !count) return ncclInvalidArgument;
    *count = comm->n;
    return ncclSuccess;
}
TESSEL_API ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
    if (!comm || !device) return ncclInvalidArgument;
    *device = comm->device;
    return ncclSuccess;
}
TESSEL_API ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
    if (!comm || !rank) return ncclInvalidArgument;
    *rank = comm->rank;
    return ncclSuccess;
}

TESSEL_API ncclResult_t ncclAllReduce(const void* send, void* recv, std::size_t count, ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,
                                      cudaStream_t stream) {
    return detail::enqueue(comm, stream, {detail::Kind::all_reduce, send, recv, count, type, op, 0});
}
TESSEL_API ncclResult_t ncclBroadcast(const void* send, void* recv, std::size_t count, ncclDataType_t type, int root, ncclComm_t comm,
                                      cudaStream_t stream) {
    // Only the root's send buffer is read; NCCL allows the others to pass none.
    return detail::enqueue(comm, stream, {detail::Kind::broadcast, send ? send : recv, recv, count, type, ncclSum, root});
}
TESSEL_API ncclResult_t ncclReduce(const void* send, void* recv, std::size_t count, ncclDataType_t type, ncclRedOp_t op, int root,
                                   ncclComm_t comm, cudaStream_t stream) {
    // recv matters on the root only.
    return detail::enqueue(comm, stream, {detail::Kind::reduce, send, recv ? recv : const_cast<void*>(send), count, type, op, root});
}
TESSEL_API ncclResult_t ncclAllGather(const void* send, void* recv, std::size_t sendcount, ncclDataType_t type, ncclComm_t comm,
                                      cudaStream_t stream) {
    return detail::enqueue(comm, stream, {detail::Kind::all_gather, send, recv, sendcount, type, ncclSum, 0});
}
TESSEL_API ncclResult_t ncclReduceScatter(const void* send, void* recv, std::size_t recvcount, ncclDataType_t type, ncclRedOp_t op,
                                          ncclComm_t comm, cudaStream_t stream) {
    return detail::enqueue(comm, stream, {detail::Kind::reduce_scatter, send, recv, recvcount, type, op, 0});
}
TESSEL_API ncclResult_t ncclSend(const void* send, std::size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t stream) {
    return detail::enqueue(comm, stream, {detail::Kind::send, send, nullptr, count, type, ncclSum, peer});
}
TESSEL_API ncclResult_t ncclRecv(void* recv, std::size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t stream) {
    return detail::enqueue(comm, stream, {detail::Kind::recv, nullptr, recv, count, type, ncclSum, peer});
}
TESSEL_API ncclResult_t ncclGroupStart() {
    ++detail::group().depth;
    return ncclSuccess;
}
// The group's calls, one task per stream (in the order the streams first appear), each running its
// calls' arrivals before any wait.
TESSEL_API ncclResult_t ncclGroupEnd() {
    detail::Group& g = detail::group();
    if (g.depth == 0) return ncclInvalidUsage;
    if (--g.depth > 0) return ncclSuccess;
    // By stream and device: a null stream is each device's own default stream.
    std::vector<std::pair<cudaStream_t, std::vector<detail::Item>>> by_stream;
    for (auto& [stream, item] : g.items) {
        const int device = item.comm->device;
        auto it = std::find_if(by_stream.begin(), by_stream.end(),
                               [&](const auto& e) { return e.first == stream && e.second.front().comm->device == device; });
        if (it == by_stream.end()) it = by_stream.insert(by_stream.end(), {stream, {}});
        it->second.push_back(std::move(item));
    }
    g.items.clear();
    ncclResult_t result = ncclSuccess;
    for (auto& [stream, items] : by_stream)
        if (const ncclResult_t r = detail::queue_items(stream, std::move(items)); r != ncclSuccess && result == ncclSuccess) result = r;
    return result;
}

}  // namespace tessel::sim::nccl
#endif  // TESSEL_DEFINE_RUNTIME
