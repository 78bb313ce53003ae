// The rendezvous store of a multi-process job, as torch.distributed's TCPStore: rank 0 serves a
// key-value table on MASTER_ADDR:MASTER_PORT, every rank (rank 0 included) is a client of it. It
// carries the few bytes a job needs before NCCL is up: the NCCL unique id rank 0 creates, and
// counters. get() waits for a key another rank has not set yet, up to the store's timeout, and then
// throws naming the key; a client retries its connection until the same timeout, since rank 0 may
// start last. One thread per client connection on the server (jobs have tens of ranks per store,
// not thousands).
#pragma once

#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "socket.hpp"

namespace tessel::dist {

// A key-value store shared by the ranks of a job; rank 0's instance also serves it.
class TcpStore {
public:
    // is_server: listen on port (0 picks a free port: port() says which) of every interface and
    // serve; every instance then connects to host:port as a client. (The server does not bind host,
    // MASTER_ADDR: as torch's TCPStore, since the host's own name may resolve here to a loopback
    // address, as Debian's 127.0.1.1, where the other hosts reach its network address.)
    TcpStore(const std::string& host, int port, bool is_server, std::chrono::milliseconds timeout) : timeout_(timeout) {
        if (is_server) {
            server_ = std::make_unique<Server>("", port);
            port = server_->listener.port();
        }
        port_ = port;
        try {
            client_ = connect_to(host, port, timeout);
        } catch (const NetworkError& e) {
            throw NetworkError(std::string("TcpStore: rank 0's store at ") + host + ":" + std::to_string(port) +
                               " did not answer: " + e.what() + "; is rank 0 running, and MASTER_ADDR/MASTER_PORT the same on every rank?");
        }
    }
    ~TcpStore() {
        client_.shutdown();
        client_.close();
    }
    TcpStore(const TcpStore&) = delete;
    TcpStore& operator=(const TcpStore&) = delete;

    int port() const { return port_; }

    void set(const std::string& key, const std::string& value) { request(Writer().put(char('S')).put_string(key).put_string(value), key); }
    // The value of key, waiting up to the timeout for another rank to set it.
    std::string get(const std::string& key) {
        std::string reply = request(Writer().put(char('G')).put_string(key).put(std::int64_t(timeout_.count())), key);
        Reader r(reply);
        if (r.get<char>() != 'V')
            throw NetworkError("TcpStore: key '" + key + "' was not set within " + std::to_string(timeout_.count()) +
                               " ms (a rank that has not started, or failed before setting it)");
        return r.get_string();
    }
    // Adds delta to the integer at key (0 if absent) and returns the new value.
    std::int64_t add(const std::string& key, std::int64_t delta) {
        std::string reply = request(Writer().put(char('A')).put_string(key).put(delta), key);
        Reader r(reply);
        if (r.get<char>() == 'E') throw NetworkError("TcpStore::add: " + r.get_string());
        return r.get<std::int64_t>();
    }

private:
    std::string request(const Writer& w, const std::string& key) {
        std::lock_guard lk(m_);
        std::string reply;
        client_.send_message(w.str());
        if (!client_.recv_message(reply))
            throw NetworkError("TcpStore: the connection to rank 0's store closed during a request for '" + key +
                               "' (rank 0 exited or failed)");
        return reply;
    }

    // The table and its connections: a thread accepts, a thread per connection answers.
    struct Server {
        Server(const std::string& host, int port) : listener(host, port) {
            acceptor = std::thread([this] { accept_loop(); });
        }
        ~Server() { stop(); }
        void stop() {
            if (!acceptor.joinable()) return;
            {
                std::lock_guard lk(m);
                stopping = true;
                for (auto& c : connections) c->shutdown();
            }
            cv.notify_all();
            listener.shutdown();
            acceptor.join();
            for (auto& t : threads) t.join();
        }
        void accept_loop() {
            for (;;) {
                Socket s = listener.accept();
                std::lock_guard lk(m);
                if (!s.valid() || stopping) return;
                auto c = std::make_shared<Socket>(std::move(s));
                connections.push_back(c);
                threads.emplace_back([this, c] { serve(*c); });
            }
        }
        void serve(const Socket& s) {
            try {
                serve_requests(s);
            } catch (const std::exception&) {  // a malformed request or a broken connection ends this client only
            }
        }
        void serve_requests(const Socket& s) {
            std::string msg;
            while (s.recv_message(msg)) {
                Reader r(msg);
                const char op = r.get<char>();
                const std::string key = r.get_string();
                Writer reply;
                std::unique_lock lk(m);
                if (op == 'S') {
                    table[key] = r.get_string();
                    cv.notify_all();
                    reply.put(char('K'));
                } else if (op == 'A') {
                    const std::string held = table.count(key) ? table[key] : "0";
                    std::int64_t v = 0;
                    const auto [end, error] = std::from_chars(held.data(), held.data() + held.size(), v);
                    if (error != std::errc() || end != held.data() + held.size() || __builtin_add_overflow(v, r.get<std::int64_t>(), &v)) {
                        reply.put(char('E')).put_string("key '" + key + "' holds '" + held.substr(0, 64) +
                                                         "', to which the increment cannot be added as a 64-bit integer");
                    } else {
                        table[key] = std::to_string(v);
                        cv.notify_all();
                        reply.put(char('K')).put(v);
                    }
                } else if (op == 'G') {
                    const auto wait = std::chrono::milliseconds(r.get<std::int64_t>());
                    cv.wait_for(lk, wait, [&] { return stopping || table.count(key) > 0; });
                    if (table.count(key)) reply.put(char('V')).put_string(table[key]);
                    else reply.put(char('T'));
                } else {
                    return;  // not a tessel client
                }
                lk.unlock();
                s.send_message(reply.str());
            }
        }

        Listener listener;
        std::thread acceptor;
        std::mutex m;  // the members below
        std::condition_variable cv;
        bool stopping = false;
        std::map<std::string, std::string> table;
        std::vector<std::shared_ptr<Socket>> connections;
        std::vector<std::thread> threads;
    };

    std::chrono::milliseconds timeout_;
    std::unique_ptr<Server> server_;
    int port_ = 0;
    std::mutex m_;  // one request at a time on the client connection
    Socket client_;
};

}  // namespace tessel::dist
