// TCP sockets for the rendezvous (dist/store.hpp) and the sim's NCCL stand-in across processes
// (sim/nccl_net.hpp): a connection that owns its descriptor, connect-with-retry until a deadline
// (rank 0 may start after the others, as with torchrun), a listener on a given or an ephemeral port,
// and length-prefixed messages. POSIX (Linux) only. Failures throw NetworkError naming the peer and
// what the system said; a peer that closed the connection reads as `false`, not an exception, so
// callers can say which rank went away.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/error.hpp"

namespace tessel::dist {

// A connection or listener could not be made, or broke mid-message.
class NetworkError : public Error {
public:
    explicit NetworkError(const std::string& what) : Error(what) {}
};

// A TCP socket descriptor, closed on destruction.
class Socket {
public:
    Socket() = default;
    explicit Socket(int fd) : fd_(fd) {}
    Socket(Socket&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
    Socket& operator=(Socket&& o) noexcept {
        if (this != &o) close(), fd_ = std::exchange(o.fd_, -1);
        return *this;
    }
    Socket(const Socket&) = delete;
    Socket& operator=(const Socket&) = delete;
    ~Socket() { close(); }

    int fd() const { return fd_; }
    bool valid() const { return fd_ >= 0; }
    void close() {
        if (fd_ >= 0) ::close(fd_), fd_ = -1;
    }
    // Wakes a thread blocked on this socket in another thread (its recv returns end of stream).
    void shutdown() const {
        if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
    }

    void send_all(const void* data, std::size_t n) const {
        const char* p = static_cast<const char*>(data);
        while (n > 0) {
            const ssize_t k = ::send(fd_, p, n, MSG_NOSIGNAL);
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) throw NetworkError(std::string("send failed: ") + std::strerror(errno));
            p += k, n -= std::size_t(k);
        }
    }
    // false when the peer closed the connection (or it was shut down) before n bytes came.
    bool recv_all(void* data, std::size_t n) const {
        char* p = static_cast<char*>(data);
        while (n > 0) {
            const ssize_t k = ::recv(fd_, p, n, 0);
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) return false;
            p += k, n -= std::size_t(k);
        }
        return true;
    }
    // Waits until the socket is readable (data or end of stream); false on timeout.
    bool wait_readable(std::chrono::milliseconds timeout) const {
        pollfd p{fd_, POLLIN, 0};
        for (;;) {
            const int r = ::poll(&p, 1, int(std::min<long long>(timeout.count(), 1 << 30)));
            if (r < 0 && errno == EINTR) continue;
            return r > 0;
        }
    }

    // Messages: a 64-bit length, then the bytes.
    void send_message(const std::string& m) const {
        const std::uint64_t n = m.size();
        send_all(&n, sizeof n);
        send_all(m.data(), m.size());
    }
    bool recv_message(std::string& m) const {
        std::uint64_t n = 0;
        if (!recv_all(&n, sizeof n)) return false;
        if (n > (std::uint64_t(1) << 40)) throw NetworkError("a message of " + std::to_string(n) + " bytes: not a tessel peer");
        m.resize(std::size_t(n));
        return recv_all(m.data(), m.size());
    }

private:
    int fd_ = -1;
};

namespace detail {
inline void set_nodelay(int fd) {
    const int one = 1;
    (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}
// connect() that gives up at `deadline`: non-blocking, then polled for the rest of the time (a
// blocking connect to a host that drops SYNs waits the kernel's two minutes of retries). 0 on
// success, else the error (ETIMEDOUT at the deadline).
inline int connect_until(int fd, const sockaddr* addr, socklen_t len, std::chrono::steady_clock::time_point deadline) {
    const int flags = ::fcntl(fd, F_GETFL, 0);
    if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) return errno;
    int error = 0;
    if (::connect(fd, addr, len) != 0) {
        if (errno != EINPROGRESS) return errno;
        for (;;) {
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
            if (left <= 0) return ETIMEDOUT;
            pollfd p{fd, POLLOUT, 0};
            const int k = ::poll(&p, 1, int(std::min<long long>(left, 1000)));
            if (k < 0 && errno != EINTR) return errno;
            if (k > 0) break;
        }
        socklen_t size = sizeof error;
        if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) != 0) return errno;
        if (error != 0) return error;
    }
    return ::fcntl(fd, F_SETFL, flags) < 0 ? errno : 0;  // blocking again, as the messages expect
}
}  // namespace detail

// Connects to host:port, retrying every 50 ms until `timeout` (the listener may not be up yet).
inline Socket connect_to(const std::string& host, int port, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::string last = "no attempt";
    for (;;) {
        addrinfo hints{};
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        addrinfo* res = nullptr;
        const int g = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
        if (g != 0) {
            last = std::string("cannot resolve the address: ") + ::gai_strerror(g);
        } else {
            for (addrinfo* a = res; a; a = a->ai_next) {
                Socket s(::socket(a->ai_family, a->ai_socktype, a->ai_protocol));
                if (!s.valid()) continue;
                const int error = detail::connect_until(s.fd(), a->ai_addr, a->ai_addrlen, deadline);
                if (error == 0) {
                    ::freeaddrinfo(res);
                    detail::set_nodelay(s.fd());
                    return s;
                }
                last = std::strerror(error);
            }
            ::freeaddrinfo(res);
        }
        if (std::chrono::steady_clock::now() >= deadline)
            throw NetworkError("could not connect to " + host + ":" + std::to_string(port) + " within " + std::to_string(timeout.count()) +
                               " ms (" + last + ")");
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
}

// A listening socket on host:port (port 0: an ephemeral port; port() says which). host may name an
// IPv4 or IPv6 address or a host name (its first IPv4 address that binds, else its first IPv6 one:
// the other ranks may have no IPv6 route); empty listens on every interface, IPv6 and IPv4 alike
// (one dual-stack socket on ::, as torch's TCPStore server), or every IPv4 one where IPv6 is off.
class Listener {
public:
    Listener(const std::string& host, int port) {
        if (host.empty() && listen_dual_stack(port)) {
            describe();
            return;
        }
        addrinfo hints{};
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        hints.ai_flags = AI_PASSIVE;
        addrinfo* res = nullptr;
        const int g = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), std::to_string(port).c_str(), &hints, &res);
        if (g != 0) throw NetworkError("cannot listen on " + host + ":" + std::to_string(port) + ": " + ::gai_strerror(g));
        std::string last = "no address";
        for (int pass = 0; pass < 2; ++pass)  // IPv4 addresses first, then the others
            for (addrinfo* a = res; a && !s_.valid(); a = a->ai_next) {
                if ((a->ai_family == AF_INET) != (pass == 0)) continue;
                Socket s(::socket(a->ai_family, a->ai_socktype, a->ai_protocol));
                if (!s.valid()) continue;
                const int one = 1;
                (void)::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
                if (::bind(s.fd(), a->ai_addr, a->ai_addrlen) == 0 && ::listen(s.fd(), 128) == 0) s_ = std::move(s);
                else last = std::strerror(errno);
            }
        ::freeaddrinfo(res);
        if (!s_.valid())
            throw NetworkError("cannot listen on " + host + ":" + std::to_string(port) + " (" + last +
                               (port ? "; is another job using this port? choose another MASTER_PORT)" : ")"));
        describe();
    }
    int port() const { return port_; }
    // The numeric address this listener is bound to, as a client on this host connects to it
    // (the loopback address for a wildcard bind).
    const std::string& address() const { return address_; }
    // The next connection; an invalid Socket once shutdown() was called.
    Socket accept() const {
        for (;;) {
            const int fd = ::accept(s_.fd(), nullptr, nullptr);
            if (fd >= 0) {
                detail::set_nodelay(fd);
                return Socket(fd);
            }
            if (errno == EINTR || errno == ECONNABORTED) continue;
            return Socket();
        }
    }
    // Wakes accept() in another thread; it then returns an invalid Socket.
    void shutdown() const { ::shutdown(s_.fd(), SHUT_RDWR); }

private:
    // A dual-stack wildcard listener on port; false (nothing held) where IPv6 sockets are unavailable.
    bool listen_dual_stack(int port) {
        Socket s(::socket(AF_INET6, SOCK_STREAM, 0));
        if (!s.valid()) return false;
        const int one = 1, zero = 0;
        (void)::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (::setsockopt(s.fd(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero) != 0) return false;
        sockaddr_in6 a{};
        a.sin6_family = AF_INET6;
        a.sin6_addr = in6addr_any;
        a.sin6_port = htons(std::uint16_t(port));
        if (::bind(s.fd(), reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) {
            if (errno == EADDRINUSE)
                throw NetworkError("cannot listen on port " + std::to_string(port) + " (" + std::strerror(errno) +
                                   "; is another job using this port? choose another MASTER_PORT)");
            return false;
        }
        if (::listen(s.fd(), 128) != 0) return false;
        s_ = std::move(s);
        return true;
    }
    // port_ and address_ from the bound socket.
    void describe() {
        sockaddr_storage addr{};
        socklen_t len = sizeof addr;
        ::getsockname(s_.fd(), reinterpret_cast<sockaddr*>(&addr), &len);
        char numeric[NI_MAXHOST] = {}, service[NI_MAXSERV] = {};
        ::getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, numeric, sizeof numeric, service, sizeof service,
                      NI_NUMERICHOST | NI_NUMERICSERV);
        port_ = std::atoi(service);
        address_ = numeric;
        // A wildcard address is not one to connect to; the loopback reaches it (IPv4's: a dual-stack
        // socket takes IPv4 too, and a host may have no IPv6 loopback).
        if (address_ == "0.0.0.0" || address_ == "::") address_ = "127.0.0.1";
    }
    Socket s_;
    int port_ = 0;
    std::string address_;
};

// Little-endian-agnostic (same-machine or same-architecture) message building and parsing.
class Writer {
public:
    template <class T>
    Writer& put(const T& v) {
        static_assert(std::is_trivially_copyable_v<T>);
        const auto* p = reinterpret_cast<const char*>(&v);
        s_.append(p, sizeof v);
        return *this;
    }
    Writer& put_string(const std::string& v) {
        put(std::uint64_t(v.size()));
        s_.append(v);
        return *this;
    }
    Writer& put_bytes(const void* p, std::size_t n) {
        put(std::uint64_t(n));
        s_.append(static_cast<const char*>(p), n);
        return *this;
    }
    const std::string& str() const { return s_; }

private:
    std::string s_;
};

class Reader {
public:
    explicit Reader(const std::string& s) : s_(s) {}
    template <class T>
    T get() {
        static_assert(std::is_trivially_copyable_v<T>);
        need(sizeof(T));
        T v;
        std::memcpy(&v, s_.data() + at_, sizeof v);
        at_ += sizeof v;
        return v;
    }
    std::string get_string() {
        const auto n = std::size_t(get<std::uint64_t>());
        need(n);
        std::string v = s_.substr(at_, n);
        at_ += n;
        return v;
    }

private:
    void need(std::size_t n) const {
        if (at_ + n > s_.size()) throw NetworkError("a truncated message from a peer");
    }
    const std::string& s_;
    std::size_t at_ = 0;
};

}  // namespace tessel::dist
