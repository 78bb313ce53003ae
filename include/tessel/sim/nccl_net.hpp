// The sim's NCCL stand-in across processes (included by sim/nccl.hpp's definitions): ranks from
// ncclCommInitRank, one per thread or per process, as torch.distributed and tessel-run start them.
//  - ncclGetUniqueId starts a hub in its process: a loopback TCP listener whose port and a fresh
//    nonce make the id. Each rank's ncclCommInitRank opens a membership connection to it and is
//    ready when all ranks have joined (or, non-blocking, says ncclInProgress until then).
//  - A stream's calls go to the hub in one connection: each item with its send buffer's bytes. The
//    hub runs them through the same rendezvous as ranks of one process (sim/nccl.hpp: arrive,
//    await, the "ranks disagree" checks) on its own copies, and answers each with the bytes of the
//    rank's receive buffer, or the error.
//  - A rank whose membership connection drops without a goodbye (its process died, or it called
//    ncclCommAbort) aborts its clique: the other ranks' waits end with an error naming it, as NCCL
//    reports ncclRemoteError, instead of hanging until their watchdogs fire.
//  - ncclCommSplit is a rendezvous on the membership connections; the hub hands each colour a new
//    clique, ranks ordered by (key, old rank). A non-blocking parent splits on a thread of its own,
//    as NCCL: ncclInProgress, *newcomm NULL until the child joined, then written.
// The hub does no device work: it runs in threads of rank 0's process and touches only its copies.
// Not a header of its own: sim/nccl.hpp includes it in the middle of its definitions. Included
// alone (the header check), it includes nccl.hpp, which then includes it at that place.
#if !defined(TESSEL_SIM_NCCL_NET_BODY)
#include "nccl.hpp"
#elif !defined(TESSEL_SIM_NCCL_NET_DONE)
#define TESSEL_SIM_NCCL_NET_DONE
#include <atomic>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "../dist/socket.hpp"

namespace tessel::sim::nccl::detail {

using ::tessel::dist::NetworkError;
using ::tessel::dist::Reader;
using ::tessel::dist::Socket;
using ::tessel::dist::Writer;

inline constexpr char id_magic[] = "tessel-sim-nccl-1";

inline void write_id(ncclUniqueId& id, int port, std::uint64_t nonce) {
    std::memset(id.internal, 0, sizeof id.internal);
    std::memcpy(id.internal, id_magic, sizeof id_magic);
    std::memcpy(id.internal + 32, &port, sizeof port);
    std::memcpy(id.internal + 40, &nonce, sizeof nonce);
}
inline bool read_id(const ncclUniqueId& id, int& port, std::uint64_t& nonce) {
    if (std::memcmp(id.internal, id_magic, sizeof id_magic) != 0) return false;
    std::memcpy(&port, id.internal + 32, sizeof port);
    std::memcpy(&nonce, id.internal + 40, sizeof nonce);
    return port > 0 && port < 65536;
}
inline std::uint64_t new_nonce() {
    static std::atomic<std::uint64_t> counter{0};
    static const std::uint64_t base = (std::uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
    return base + (++counter) * 0x9e3779b97f4a7c15ull;
}

// Bytes of a rank's send and receive buffers for a call.
inline std::size_t send_bytes(const Arrival& a, int rank, int n) {
    const std::size_t b = a.count * type_bytes(a.type);
    switch (a.kind) {
        case Kind::broadcast: return rank == a.root ? b : 0;
        case Kind::reduce_scatter: return b * std::size_t(n);
        case Kind::recv: return 0;
        default: return b;
    }
}
inline std::size_t recv_bytes(const Arrival& a, int n) {
    const std::size_t b = a.count * type_bytes(a.type);
    switch (a.kind) {
        case Kind::all_gather: return b * std::size_t(n);
        case Kind::send: return 0;
        default: return b;
    }
}

// ---- the hub (in the process that called ncclGetUniqueId) ----

// One communicator's ranks, as the hub sees them.
struct HubClique {
    explicit HubClique(int ranks)
        : q(std::make_shared<Clique>(ranks)), n(ranks), proxies(std::size_t(ranks)), members(std::size_t(ranks)), joined(std::size_t(ranks)),
          left(std::size_t(ranks)) {
        for (int r = 0; r < ranks; ++r) {
            auto c = std::make_shared<ncclComm>();
            c->clique = q, c->rank = r, c->n = ranks;
            proxies[std::size_t(r)] = std::move(c);
        }
    }
    struct Split {
        std::vector<std::optional<std::pair<int, int>>> asks;  // (colour, key) by rank
        int arrived = 0, released = 0;
        bool done = false;
        std::vector<std::string> replies;
    };
    std::shared_ptr<Clique> q;
    int n;
    std::vector<std::shared_ptr<ncclComm>> proxies;  // rank r's items run as these
    // Below: under the hub's lock.
    std::vector<std::shared_ptr<Socket>> members;
    std::vector<char> joined, left;
    int joined_count = 0, left_count = 0;
    bool ready = false;
    std::string failure;
    std::map<std::uint64_t, Split> splits;
};

class Hub {
public:
    Hub() : listener_("127.0.0.1", 0) {
        acceptor_ = std::thread([this] { accept_loop(); });
    }
    // At exit: every wait fails with its clique's reason (a lost rank's, if one was lost first) and
    // is still answered, since connections are shut for reading only.
    ~Hub() {
        {
            std::lock_guard lk(m_);
            stopping_ = true;
            for (auto& [nonce, h] : cliques_) fail(*h, "the process that called ncclGetUniqueId (the hub's) is exiting");
            for (auto& c : connections_) ::shutdown(c.socket->fd(), SHUT_RD);
        }
        listener_.shutdown();
        acceptor_.join();
        for (auto& c : connections_) c.thread.join();
    }
    int port() const { return listener_.port(); }

private:
    // A thread per connection; every stream task of every rank opens one, so the threads that have
    // finished are joined and their sockets closed as new ones come.
    void accept_loop() {
        for (;;) {
            Socket s = listener_.accept();
            std::lock_guard lk(m_);
            if (!s.valid() || stopping_) return;
            for (auto it = connections_.begin(); it != connections_.end();) {
                if (it->finished->load()) {
                    it->thread.join();
                    it = connections_.erase(it);
                } else {
                    ++it;
                }
            }
            auto c = std::make_shared<Socket>(std::move(s));
            auto finished = std::make_shared<std::atomic<bool>>(false);
            std::thread t([this, c, finished] {
                try {
                    serve(c);
                } catch (const std::exception&) {  // a broken connection or a malformed message ends that connection only
                }
                finished->store(true);
            });
            connections_.push_back(Connection{c, std::move(t), finished});
        }
    }
    void serve(const std::shared_ptr<Socket>& s) {
        std::string msg;
        if (!s->recv_message(msg)) return;
        Reader r(msg);
        const char kind = r.get<char>();
        if (kind == 'M') member(s, r);
        else if (kind == 'C') call(*s, r);
    }

    // Caller holds m_. Aborts the clique's waits and tells ranks still waiting to join.
    void fail(HubClique& h, const std::string& why) {
        if (h.failure.empty()) h.failure = why;
        {
            std::lock_guard lk(h.q->m);
            h.q->aborted = true;
            if (h.q->reason.empty()) h.q->reason = why;
        }
        h.q->cv.notify_all();
        if (!h.ready)
            for (auto& m : h.members)
                if (m) try {
                        m->send_message(Writer().put(char('E')).put_string(why).str());
                    } catch (const NetworkError&) {
                    }
        cv_.notify_all();
    }

    // A rank's membership connection: join, then splits, until goodbye or the connection drops.
    void member(const std::shared_ptr<Socket>& s, Reader& r) {
        const auto nonce = r.get<std::uint64_t>();
        const int rank = r.get<int>(), n = r.get<int>();
        std::shared_ptr<HubClique> h;
        {
            std::lock_guard lk(m_);
            auto& slot = cliques_[nonce];
            if (!slot) slot = std::make_shared<HubClique>(n);
            h = slot;
            std::string error;
            if (h->n != n)
                error = "rank " + std::to_string(rank) + " says the communicator has " + std::to_string(n) + " ranks, an earlier rank said " +
                        std::to_string(h->n);
            else if (rank < 0 || rank >= n)
                error = "rank " + std::to_string(rank) + " is not in [0, " + std::to_string(n) + ")";
            else if (h->joined[std::size_t(rank)])
                error = "rank " + std::to_string(rank) + " joined twice (two processes with the same RANK?)";
            else if (!h->failure.empty())
                error = h->failure;
            if (!error.empty()) {
                s->send_message(Writer().put(char('E')).put_string(error).str());
                return;
            }
            h->joined[std::size_t(rank)] = 1;
            h->members[std::size_t(rank)] = s;
            if (++h->joined_count == n) {
                h->ready = true;
                for (auto& m : h->members) m->send_message(Writer().put(char('R')).str());
            }
        }
        for (;;) {
            std::string msg;
            const bool got = s->recv_message(msg);
            std::unique_lock lk(m_);
            if (!got || msg.empty() || msg[0] == 'B') {
                h->left[std::size_t(rank)] = 1;
                if (!got && h->failure.empty())
                    fail(*h, "rank " + std::to_string(rank) + "'s process exited or it aborted its communicator");
                if (auto it = cliques_.find(nonce); ++h->left_count == n && it != cliques_.end() && it->second == h) cliques_.erase(it);
                return;
            }
            Reader q(msg);
            (void)q.get<char>();  // 'S': a split
            const auto seq = q.get<std::uint64_t>();
            const int colour = q.get<int>(), key = q.get<int>();
            auto& sp = h->splits[seq];
            if (sp.asks.empty()) sp.asks.resize(std::size_t(n)), sp.replies.resize(std::size_t(n));
            sp.asks[std::size_t(rank)] = std::make_pair(colour, key);
            if (++sp.arrived == n) {
                std::map<int, std::vector<std::pair<int, int>>> by_colour;  // colour -> (key, rank)
                for (int k = 0; k < n; ++k)
                    if (sp.asks[std::size_t(k)]->first != ncclSplitNoColor)
                        by_colour[sp.asks[std::size_t(k)]->first].push_back({sp.asks[std::size_t(k)]->second, k});
                for (int k = 0; k < n; ++k) sp.replies[std::size_t(k)] = Writer().put(char('N')).str();
                for (auto& [c, ranks] : by_colour) {
                    std::sort(ranks.begin(), ranks.end());
                    const std::uint64_t child = new_nonce();
                    for (std::size_t i = 0; i < ranks.size(); ++i)
                        sp.replies[std::size_t(ranks[i].second)] = Writer().put(char('K')).put(child).put(int(i)).put(int(ranks.size())).str();
                }
                sp.done = true;
                cv_.notify_all();
            }
            cv_.wait(lk, [&] { return sp.done || !h->failure.empty(); });
            const std::string reply = sp.done ? sp.replies[std::size_t(rank)] : Writer().put(char('E')).put_string(h->failure).str();
            if (sp.done && ++sp.released == n) h->splits.erase(seq);
            lk.unlock();
            s->send_message(reply);
        }
    }

    // A stream's calls from one rank: arrive at all, then answer each as it completes.
    void call(const Socket& s, Reader& r) {
        const auto nonce = r.get<std::uint64_t>();
        const int rank = r.get<int>();
        const auto count = std::size_t(r.get<std::uint64_t>());
        std::shared_ptr<HubClique> h;
        {
            std::lock_guard lk(m_);
            auto it = cliques_.find(nonce);
            if (it != cliques_.end() && rank >= 0 && rank < it->second->n && it->second->joined[std::size_t(rank)]) h = it->second;
        }
        if (!h) {
            for (std::size_t i = 0; i < count; ++i)
                s.send_message(Writer().put(std::uint64_t(i)).put(int(ncclInvalidUsage)).put_string("rank " + std::to_string(rank) +
                    " is not a member of this communicator at the hub (it was destroyed, or never joined)").put_bytes(nullptr, 0).str());
            return;
        }
        std::vector<std::vector<unsigned char>> send(count), recv(count);
        std::vector<Item> items;
        for (std::size_t i = 0; i < count; ++i) {
            Arrival a{};
            a.kind = Kind(r.get<int>());
            a.count = std::size_t(r.get<std::uint64_t>());
            a.type = ncclDataType_t(r.get<int>());
            a.op = ncclRedOp_t(r.get<int>());
            a.root = r.get<int>();
            const auto seq = r.get<std::uint64_t>();
            const int from = r.get<int>(), to = r.get<int>();
            const bool p2p = r.get<char>() != 0;
            const std::string bytes = r.get_string();
            send[i].assign(bytes.begin(), bytes.end());
            recv[i].resize(recv_bytes(a, h->n));
            a.recv = recv[i].data();
            a.send = send[i].empty() ? a.recv : send[i].data();  // broadcast: only the root sends
            items.push_back(Item{h->proxies[std::size_t(rank)], a, seq, {from, to}, p2p});
        }
        for (const Item& it : items) arrive(it);
        for (std::size_t i = 0; i < count; ++i) {
            ncclResult_t result = ncclSuccess;
            const std::string error = await(items[i], &result);
            const Arrival& a = items[i].a;
            const bool has_data = error.empty() && !(a.kind == Kind::reduce && a.root != rank);  // NCCL leaves a non-root's reduce output alone
            Writer w;
            w.put(std::uint64_t(i)).put(int(result)).put_string(error);
            w.put_bytes(recv[i].data(), has_data ? recv[i].size() : 0);
            s.send_message(w.str());
        }
    }

    dist::Listener listener_;
    std::thread acceptor_;
    std::mutex m_;  // the members below and every HubClique's membership fields
    std::condition_variable cv_;
    bool stopping_ = false;
    std::map<std::uint64_t, std::shared_ptr<HubClique>> cliques_;
    struct Connection {
        std::shared_ptr<Socket> socket;
        std::thread thread;
        std::shared_ptr<std::atomic<bool>> finished;
    };
    std::list<Connection> connections_;
};

inline Hub& hub() {
    static Hub h;  // started by the first ncclGetUniqueId of the process
    return h;
}

// ---- a rank's side ----

// The connection of a communicator from ncclCommInitRank to its hub.
struct Remote {
    int port = 0;
    std::uint64_t nonce = 0;
    Socket member;               // joined, then splits; its drop tells the hub this rank is gone
    std::mutex m;                // the members below
    std::set<int> active;        // descriptors of call connections waiting for answers (abort shuts them down)
    bool aborted = false, left = false;
    std::thread joiner;          // non-blocking initialisation
    std::thread splitter;        // a non-blocking communicator's ncclCommSplit in progress
    std::mutex split_m;          // one split at a time on the membership connection
    std::uint64_t next_split = 0;
};

inline void set_error(ncclComm& c, ncclResult_t r, const std::string& what) {
    std::lock_guard lk(c.m);
    if (c.async_error == ncclSuccess || c.async_error == ncclInProgress) c.async_error = r, c.last_error = what;
}

// Joins the hub: connect, say who we are, wait until every rank has (or the hub says why not).
inline void remote_join(ncclComm& c) {
    Remote& r = *c.remote;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    Socket s;
    while (!s.valid()) {
        {
            std::lock_guard lk(r.m);
            if (r.aborted) return set_error(c, ncclRemoteError, "ncclCommInitRank: aborted before joining the hub");
        }
        try {
            s = dist::connect_to("127.0.0.1", r.port, std::chrono::seconds(1));
        } catch (const NetworkError& e) {
            if (std::chrono::steady_clock::now() > deadline)
                return set_error(c, ncclSystemError, std::string("ncclCommInitRank: the hub in the process that called ncclGetUniqueId "
                                                                 "did not answer: ") + e.what());
        }
    }
    {
        std::lock_guard lk(r.m);
        if (r.aborted) return set_error(c, ncclRemoteError, "ncclCommInitRank: aborted before joining the hub");
        r.member = std::move(s);
    }
    std::string reply;
    try {
        r.member.send_message(Writer().put(char('M')).put(r.nonce).put(c.rank).put(c.n).put(c.device).str());
        if (!r.member.recv_message(reply) || reply.empty())
            return set_error(c, ncclRemoteError, "ncclCommInitRank: the hub closed the connection before all ranks joined (aborted, or "
                                                 "the process that called ncclGetUniqueId exited)");
    } catch (const NetworkError& e) {
        return set_error(c, ncclSystemError, std::string("ncclCommInitRank: ") + e.what());
    }
    Reader q(reply);
    if (q.get<char>() == 'R') {
        std::lock_guard lk(c.m);
        if (c.async_error == ncclInProgress) c.async_error = ncclSuccess;
        return;
    }
    set_error(c, ncclInvalidUsage, "ncclCommInitRank on rank " + std::to_string(c.rank) + ": " + q.get_string());
}

// Calls of one stream for one hub, sent and waiting for answers.
struct RemoteCall {
    struct Part {
        std::shared_ptr<Remote> remote;
        Socket s;
        std::vector<const Item*> items;
        std::string error;  // set when the calls could not be sent
    };
    std::vector<Part> parts;
};

inline RemoteCall remote_send(const std::vector<const Item*>& items) {
    RemoteCall call;
    for (const Item* it : items) {
        auto p = std::find_if(call.parts.begin(), call.parts.end(), [&](const RemoteCall::Part& x) { return x.remote == it->comm->remote; });
        if (p == call.parts.end()) p = call.parts.insert(call.parts.end(), RemoteCall::Part{it->comm->remote, {}, {}, {}});
        p->items.push_back(it);
    }
    for (RemoteCall::Part& p : call.parts) {
        const ncclComm& c = *p.items.front()->comm;
        try {
            p.s = dist::connect_to("127.0.0.1", p.remote->port, std::chrono::seconds(10));
            {
                std::lock_guard lk(p.remote->m);
                if (p.remote->aborted) throw NetworkError("the communicator was aborted");
                p.remote->active.insert(p.s.fd());
            }
            Writer w;
            w.put(char('C')).put(p.remote->nonce).put(c.rank).put(std::uint64_t(p.items.size()));
            for (const Item* it : p.items) {
                const Arrival& a = it->a;
                w.put(int(a.kind)).put(std::uint64_t(a.count)).put(int(a.type)).put(int(a.op)).put(a.root).put(it->seq);
                w.put(it->pair.first).put(it->pair.second).put(char(it->p2p));
                w.put_bytes(a.send, send_bytes(a, c.rank, c.n));
            }
            p.s.send_message(w.str());
        } catch (const NetworkError& e) {
            p.error = std::string(e.what());
        }
    }
    return call;
}

inline std::string remote_finish(RemoteCall& call) {
    std::string first;
    for (RemoteCall::Part& p : call.parts) {
        std::vector<char> answered(p.items.size());
        if (p.error.empty()) {
            for (std::size_t k = 0; k < p.items.size(); ++k) {
                std::string msg;
                if (!p.s.recv_message(msg)) break;
                Reader r(msg);
                const auto i = std::size_t(r.get<std::uint64_t>());
                const auto result = ncclResult_t(r.get<int>());
                const std::string error = r.get_string();
                const std::string data = r.get_string();
                if (i >= p.items.size()) break;
                answered[i] = 1;
                const Item& it = *p.items[i];
                if (!data.empty()) std::memcpy(it.a.recv, data.data(), data.size());
                if (result != ncclSuccess) {
                    set_error(*it.comm, result, error);
                    if (first.empty()) first = error;
                }
            }
        }
        {
            std::lock_guard lk(p.remote->m);
            p.remote->active.erase(p.s.fd());
        }
        for (std::size_t i = 0; i < p.items.size(); ++i) {
            if (answered[i]) continue;
            const Item& it = *p.items[i];
            const std::string what = std::string(kind_name(it.a.kind)) + " on rank " + std::to_string(it.comm->rank) + ": " +
                                     (p.error.empty() ? "the connection to the hub closed before the answer (the communicator was aborted, "
                                                        "or the process that called ncclGetUniqueId exited)"
                                                      : "could not reach the hub: " + p.error);
            set_error(*it.comm, ncclRemoteError, what);
            if (first.empty()) first = what;
        }
    }
    return first;
}

// Wakes every wait of this rank; the hub sees the membership connection drop and fails the others.
inline void remote_abort(ncclComm& c) {
    Remote& r = *c.remote;
    std::vector<std::thread> background;  // taken under the lock (a split may be starting one), joined outside it
    {
        std::lock_guard lk(r.m);
        r.aborted = true;
        for (int fd : r.active) ::shutdown(fd, SHUT_RDWR);
        r.member.shutdown();
        for (std::thread* t : {&r.joiner, &r.splitter})
            if (t->joinable() && t->get_id() != std::this_thread::get_id()) background.push_back(std::move(*t));
    }
    for (std::thread& t : background) t.join();
}

// A goodbye on the membership connection: this rank left on purpose.
inline void remote_leave(ncclComm& c) {
    Remote& r = *c.remote;
    std::vector<std::thread> background;
    {
        std::lock_guard lk(r.m);
        if (r.joiner.joinable() || r.splitter.joinable()) {
            std::lock_guard lc(c.m);
            if (c.async_error == ncclInProgress) r.aborted = true, r.member.shutdown();  // destroyed while still joining or splitting
        }
        for (std::thread* t : {&r.joiner, &r.splitter})
            if (t->joinable()) background.push_back(std::move(*t));
    }
    for (std::thread& t : background) t.join();
    std::lock_guard lk(r.m);
    if (r.left || !r.member.valid()) return;
    r.left = true;
    try {
        r.member.send_message(Writer().put(char('B')).str());
    } catch (const NetworkError&) {
    }
    r.member.close();
}

inline ncclResult_t init_rank(ncclComm_t* out, int nranks, int port, std::uint64_t nonce, int rank, bool blocking) {
    int device = 0;
    (void)::tessel::sim::api::cudaGetDevice(&device);
    auto c = std::make_shared<ncclComm>();
    c->rank = rank, c->n = nranks, c->device = device, c->blocking = blocking;
    c->remote = std::make_shared<Remote>();
    c->remote->port = port, c->remote->nonce = nonce;
    {
        std::lock_guard lk(registry_m());
        registry()[c.get()] = c;
    }
    *out = c.get();
    if (blocking) {
        remote_join(*c);
        std::lock_guard lk(c->m);
        return c->async_error;
    }
    {
        std::lock_guard lk(c->m);
        c->async_error = ncclInProgress;
    }
    c->remote->joiner = std::thread([raw = c.get()] { remote_join(*raw); });  // joined by destroy or abort, before the comm goes
    return ncclInProgress;
}

// The split's rendezvous at the hub on the membership connection: ncclSuccess with `joins` false
// (no colour) or the child's nonce, rank and size; or the error, recorded on the parent.
struct SplitAnswer {
    ncclResult_t result = ncclSuccess;
    bool joins = false;
    std::uint64_t nonce = 0;
    int rank = 0, n = 0;
};
inline SplitAnswer split_rendezvous(ncclComm& parent, int color, int key) {
    Remote& r = *parent.remote;
    std::string reply;
    {
        std::lock_guard lk(r.split_m);
        try {
            r.member.send_message(Writer().put(char('S')).put(r.next_split++).put(color).put(key).str());
            if (!r.member.recv_message(reply) || reply.empty()) reply = "E";
        } catch (const dist::NetworkError&) {
            reply = "E";
        }
    }
    Reader q(reply);
    const char kind = q.get<char>();
    if (kind == 'N') return {};
    if (kind != 'K') {
        set_error(parent, ncclRemoteError, "ncclCommSplit: " + (reply.size() > 1 ? q.get_string() : std::string("the hub connection closed")));
        return {ncclRemoteError};
    }
    SplitAnswer a{ncclSuccess, true, q.get<std::uint64_t>()};
    a.rank = q.get<int>(), a.n = q.get<int>();
    return a;
}

// A blocking parent's split: the rendezvous, then the child's initialisation (blocking or not, by
// the child's config).
inline ncclResult_t split_now(ncclComm& parent, int color, int key, ncclComm_t* newcomm, bool child_blocking) {
    const SplitAnswer a = split_rendezvous(parent, color, key);
    *newcomm = nullptr;
    if (a.result != ncclSuccess || !a.joins) return a.result;
    return init_rank(newcomm, a.n, parent.remote->port, a.nonce, a.rank, child_blocking);
}

// A non-blocking parent's split, on its own thread as NCCL's asynchronous job: the rendezvous and
// the child's initialisation (which ends early if the parent is aborted or destroyed), then the
// child into *newcomm, and only then the parent's ncclInProgress cleared (under its lock, which
// ncclCommGetAsyncError takes: the caller that sees it cleared sees *newcomm).
inline void split_in_background(ncclComm& parent, int color, int key, ncclComm_t* newcomm, bool child_blocking) {
    (void)::tessel::sim::api::cudaSetDevice(parent.device);  // the child is on the parent's device
    const SplitAnswer a = split_rendezvous(parent, color, key);
    ncclComm_t child = nullptr;
    if (a.result == ncclSuccess && a.joins) {
        ncclResult_t r = init_rank(&child, a.n, parent.remote->port, a.nonce, a.rank, false);
        for (; r == ncclInProgress; (void)ncclCommGetAsyncError(child, &r)) {
            {
                std::lock_guard lk(parent.remote->m);
                if (parent.remote->aborted) break;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        if (r != ncclSuccess) {
            set_error(parent, r == ncclInProgress ? ncclRemoteError : r,
                      std::string("ncclCommSplit: the new communicator did not join (") + ncclGetLastError(child) + ")");
            (void)ncclCommAbort(child);
            child = nullptr;
        } else {
            child->blocking = child_blocking;
        }
    }
    if (child) *newcomm = child;
    std::lock_guard lk(parent.m);
    if (parent.async_error == ncclInProgress) parent.async_error = ncclSuccess;
}

}  // namespace tessel::sim::nccl::detail

namespace tessel::sim::nccl {

TESSEL_API ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
    if (!id) return ncclInvalidArgument;
    try {
        detail::write_id(*id, detail::hub().port(), detail::new_nonce());
    } catch (const dist::NetworkError&) {
        return ncclSystemError;
    }
    return ncclSuccess;
}

TESSEL_API ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config) {
    int port = 0;
    std::uint64_t nonce = 0;
    if (!comm || nranks < 1 || rank < 0 || rank >= nranks || !detail::read_id(id, port, nonce)) return ncclInvalidArgument;
    return detail::init_rank(comm, nranks, port, nonce, rank, !config || config->blocking != 0);
}

TESSEL_API ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
    return ncclCommInitRankConfig(comm, nranks, id, rank, nullptr);
}

TESSEL_API ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
    std::shared_ptr<ncclComm> keep = detail::registry_find(comm);
    if (!keep || !newcomm || (color < 0 && color != ncclSplitNoColor)) return ncclInvalidArgument;
    if (!keep->remote) {
        detail::set_error(*keep, ncclInvalidUsage, "the sim's ncclCommSplit takes communicators from ncclCommInitRank (a rank per thread or "
                                                   "process), not from ncclCommInitAll");
        return ncclInvalidUsage;
    }
    const bool child_blocking = !config || config->blocking != 0;
    if (keep->blocking) return detail::split_now(*keep, color, key, newcomm, child_blocking);
    {
        // As NCCL (init.cc, group.cc): *newcomm stays NULL and the parent reports ncclInProgress
        // until the split completed; then the child is written to *newcomm from the background.
        std::lock_guard lk(keep->m);
        if (keep->async_error != ncclSuccess) return keep->async_error == ncclInProgress ? ncclInvalidArgument : keep->async_error;
        keep->async_error = ncclInProgress;
    }
    *newcomm = nullptr;
    detail::Remote& r = *keep->remote;
    std::thread previous;  // the previous split's thread, already done (its comm settled)
    {
        std::lock_guard lk(r.m);
        previous = std::move(r.splitter);
    }
    if (previous.joinable()) previous.join();
    std::lock_guard lk(r.m);  // an abort on another thread takes the thread under this lock
    if (r.aborted) {
        std::lock_guard lc(keep->m);
        if (keep->async_error == ncclInProgress) keep->async_error = ncclInvalidUsage;
        return ncclInvalidUsage;
    }
    r.splitter = std::thread([raw = keep.get(), color, key, newcomm, child_blocking] {
        detail::split_in_background(*raw, color, key, newcomm, child_blocking);
    });  // joined by destroy or abort, before the comm goes
    return ncclInProgress;
}

}  // namespace tessel::sim::nccl
#endif
