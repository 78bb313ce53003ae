// tessel-run: starts N processes of a program as the ranks of one job on this host, like torchrun's
// single-node mode. Each rank gets MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK and
// LOCAL_WORLD_SIZE (dist::Communicator::from_env reads them); its output lines come back prefixed
// with "[rank R] ". When a rank fails, the others have --grace seconds to notice (their collectives
// fail fast: NCCL's remote error, the watchdog's timeout) before they are terminated; the exit
// status is then the failed rank's; a rank that ignores SIGTERM gets SIGKILL after another grace
// period. SIGINT, SIGTERM and SIGHUP sent to tessel-run go to every rank, with the same escalation,
// and tessel-run exits as that signal; the ranks also get SIGTERM if tessel-run itself dies. On the
// sim each rank also gets TESSEL_SIM_DEVICES=N (unless set), so LOCAL_RANK names a simulated device
// of its own. docs/multi-gpu.md.
//
//   tessel-run -n N [--master-addr A] [--master-port P] [--grace SECONDS] [--] program [args...]
// Options as torchrun spells them too: --nproc-per-node / --nproc_per_node, --master_addr,
// --master_port, and --option=value. MASTER_ADDR is the job's own (127.0.0.1 unless --master-addr),
// never one inherited from the environment, which a cluster's job script may have set for another
// host (torchrun does the same).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <tessel/core/env.hpp>
#include <tessel/dist/socket.hpp>

namespace {

// More ranks than this on one host is a typo (torchrun has no limit; a GPU host has at most 16-72).
constexpr int max_ranks = 1024;

struct Rank {
    pid_t pid = -1;
    int out = -1;        // read end of its stdout+stderr pipe
    std::string partial;  // an unfinished line
    bool running = true;
    int status = 0;
};

constexpr const char* usage_line = "usage: tessel-run -n N [--master-addr A] [--master-port P] [--grace SECONDS] [--] program [args...]\n";

[[noreturn]] void usage(const char* why) {
    std::fprintf(stderr, "tessel-run: %s\n%s", why, usage_line);
    std::exit(2);
}

// A port no one listens on now on any interface, where rank 0's store will listen (bound, then
// released; rank 0 takes it a moment later). MASTER_ADDR must be an address of this host (every rank
// connects to the store there): one this host cannot listen on is refused here, before any rank starts.
int free_port(const std::string& master_addr) try {
    (void)tessel::dist::Listener(master_addr, 0);
    return tessel::dist::Listener("", 0).port();
} catch (const std::exception& e) {
    std::fprintf(stderr, "tessel-run: finding a free port: %s (--master-addr must name this host)\n", e.what());
    std::exit(1);
}

void emit(int rank, const std::string& line) {
    std::printf("[rank %d] %s\n", rank, line.c_str());
    std::fflush(stdout);
}

// Forwards the whole lines among what rank r wrote so far plus `n` more bytes; `last`: the rest too.
void forward(Rank& r, int index, const char* data, std::size_t n, bool last) {
    r.partial.append(data, n);
    for (std::size_t nl; (nl = r.partial.find('\n')) != std::string::npos;) {
        emit(index, r.partial.substr(0, nl));
        r.partial.erase(0, nl + 1);
    }
    if (last && !r.partial.empty()) emit(index, r.partial), r.partial.clear();
}

// Forwards what rank r wrote; false at end of stream.
bool drain(Rank& r, int index) {
    char buf[4096];
    const ssize_t k = ::read(r.out, buf, sizeof buf);
    forward(r, index, buf, std::size_t(std::max<ssize_t>(k, 0)), k <= 0);
    return k > 0;
}

// The signal asked of tessel-run (0: none yet); the handler also wakes poll through a pipe.
volatile sig_atomic_t received = 0;
int wake_pipe[2] = {-1, -1};
void on_signal(int sig) {
    if (!received) received = sig;
    const int saved = errno;
    const char b = 0;
    (void)!::write(wake_pipe[1], &b, 1);
    errno = saved;
}

std::string describe(int status) {
    if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
    if (WIFSIGNALED(status)) return std::string("was killed by signal ") + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
    return "ended";
}

}  // namespace

int main(int argc, char** argv) try {
    int n = 0, port = 0;
    double grace = 10;
    std::string master_addr = "127.0.0.1";
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; ++i) {
        std::string a = argv[i];
        if (a == "--") {
            ++i;
            break;
        }
        // --option=value, and torchrun's underscores (--nproc_per_node) read as dashes.
        std::optional<std::string> inline_value;
        if (const auto eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) inline_value = a.substr(eq + 1), a.resize(eq);
        if (a.rfind("--", 0) == 0) std::replace(a.begin() + 2, a.end(), '_', '-');
        auto value = [&]() -> std::string {
            if (inline_value) return *inline_value;
            if (i + 1 >= argc) usage(("missing value after " + a).c_str());
            return argv[++i];
        };
        if (a == "-n" || a == "--nproc-per-node") n = int(tessel::env::parse_integer("-n", value(), 1, max_ranks));
        else if (a == "--master-port") port = int(tessel::env::parse_integer("--master-port", value(), 1, 65535));
        else if (a == "--master-addr") {
            master_addr = value();
            if (master_addr.empty()) usage("--master-addr: an empty address");
        } else if (a == "--grace") grace = tessel::env::parse_decimal("--grace", value(), 0, 86400);
        else if (a == "-h" || a == "--help") {
            std::printf("tessel-run: starts N ranks of a program on this host, as torchrun's single-node mode\n%s", usage_line);
            return 0;
        } else usage(("unknown option " + std::string(argv[i])).c_str());
    }
    if (n < 1) usage("-n N: the number of ranks (at least 1)");
    if (i >= argc) usage("no program given");
    if (port == 0) port = free_port(master_addr);

    if (::pipe2(wake_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return std::perror("tessel-run: pipe"), 1;
    // The signals passed on to the ranks; one this process was started ignoring (nohup, a shell's
    // background job) stays ignored here and in the ranks, as it was before tessel-run.
    std::vector<int> forwarded;
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
        struct sigaction old {};
        if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
        struct sigaction sa {};
        sa.sa_handler = on_signal;
        sa.sa_flags = SA_RESTART;  // a forwarded line's write is not cut short by the signal
        ::sigemptyset(&sa.sa_mask);
        ::sigaction(sig, &sa, nullptr);
        forwarded.push_back(sig);
    }
    sigset_t forwarded_set;
    ::sigemptyset(&forwarded_set);
    for (int sig : forwarded) ::sigaddset(&forwarded_set, sig);

    std::vector<Rank> ranks(static_cast<std::size_t>(n));
    const pid_t parent = ::getpid();
    // Ends the ranks already started when a later one cannot be (no orphans left behind).
    auto abandon = [&](const char* what, int error) {
        std::fprintf(stderr, "%s: %s\n", what, std::strerror(error));
        for (auto& x : ranks)
            if (x.pid > 0) ::kill(x.pid, SIGKILL), ::waitpid(x.pid, nullptr, 0);
        return 1;
    };
    for (int r = 0; r < n; ++r) {
        int fds[2];
        if (::pipe2(fds, O_CLOEXEC) != 0) return abandon("tessel-run: pipe", errno);
        // Blocked across fork: a signal passed on before the child has reset its handlers would run
        // tessel-run's handler in the child and be lost; blocked, it stays pending until then.
        sigset_t before;
        ::sigprocmask(SIG_BLOCK, &forwarded_set, &before);
        const pid_t pid = ::fork();
        if (pid < 0) {
            const int error = errno;
            ::sigprocmask(SIG_SETMASK, &before, nullptr);
            ::close(fds[0]), ::close(fds[1]);
            return abandon("tessel-run: fork", error);
        }
        if (pid == 0) {
            // A rank outlives nothing: if tessel-run dies (even by SIGKILL), the rank gets SIGTERM.
            ::prctl(PR_SET_PDEATHSIG, SIGTERM);
            if (::getppid() != parent) std::_Exit(143);
            struct sigaction dfl {};
            dfl.sa_handler = SIG_DFL;
            for (int sig : forwarded) ::sigaction(sig, &dfl, nullptr);
            ::sigprocmask(SIG_SETMASK, &before, nullptr);  // a pending signal now acts as it would on the program
            ::dup2(fds[1], 1);
            ::dup2(fds[1], 2);
            ::setenv("MASTER_ADDR", master_addr.c_str(), 1);
            ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
            ::setenv("RANK", std::to_string(r).c_str(), 1);
            ::setenv("WORLD_SIZE", std::to_string(n).c_str(), 1);
            ::setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
            ::setenv("LOCAL_WORLD_SIZE", std::to_string(n).c_str(), 1);
#if defined(TESSEL_BACKEND_SIM)
            ::setenv("TESSEL_SIM_DEVICES", std::to_string(n).c_str(), 0);
#endif
            ::execvp(argv[i], argv + i);
            std::fprintf(stderr, "tessel-run: cannot run %s: %s\n", argv[i], std::strerror(errno));
            std::_Exit(127);
        }
        ::sigprocmask(SIG_SETMASK, &before, nullptr);
        ::close(fds[1]);
        ranks[std::size_t(r)].pid = pid;
        ranks[std::size_t(r)].out = fds[0];
    }

    using clock = std::chrono::steady_clock;
    const auto grace_period = std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(grace));
    int failed = -1;
    clock::time_point failed_at{}, terminated_at{};
    bool terminated = false, killed = false;
    int signalled = 0;  // the signal tessel-run got and passed on
    auto send_all = [&](int sig) {
        for (auto& x : ranks)
            if (x.running) ::kill(x.pid, sig);
    };
    for (;;) {
        std::vector<pollfd> p{{wake_pipe[0], POLLIN, 0}};
        std::vector<int> who{-1};
        for (int r = 0; r < n; ++r)
            if (ranks[std::size_t(r)].out >= 0) p.push_back({ranks[std::size_t(r)].out, POLLIN, 0}), who.push_back(r);
        ::poll(p.data(), p.size(), 100);  // also the tick of the exit and grace checks below
        char drop[64];
        while (::read(wake_pipe[0], drop, sizeof drop) > 0) {
        }
        // A signal first: with Ctrl-C the ranks die of it at the same moment, and their deaths must
        // not be taken for failures (tessel-run then ends by the signal, as the shell expects).
        if (received && !signalled) {
            signalled = received;
            std::fprintf(stderr, "tessel-run: got %s; passing it to the ranks\n", strsignal(signalled));
            send_all(signalled);
            terminated = true, terminated_at = clock::now();
        }
        for (std::size_t k = 1; k < p.size(); ++k)
            if (p[k].revents && !drain(ranks[std::size_t(who[k])], who[k]))
                ::close(ranks[std::size_t(who[k])].out), ranks[std::size_t(who[k])].out = -1;
        bool any_running = false;
        for (int r = 0; r < n; ++r) {
            Rank& x = ranks[std::size_t(r)];
            if (x.running && ::waitpid(x.pid, &x.status, WNOHANG) == x.pid) {
                x.running = false;
                const bool ok = WIFEXITED(x.status) && WEXITSTATUS(x.status) == 0;
                if (!ok && !signalled) {
                    std::fprintf(stderr, "tessel-run: rank %d (pid %d) %s\n", r, int(x.pid), describe(x.status).c_str());
                    if (failed < 0) failed = r, failed_at = clock::now();
                }
            }
            any_running |= x.running;
        }
        // Every rank has ended: what they wrote is in the pipes; read that much and stop (a process
        // a rank left behind may hold its pipe open, and write to it, for as long as it likes).
        if (!any_running) {
            for (std::size_t k = 1; k < p.size(); ++k) {
                Rank& x = ranks[std::size_t(who[k])];
                int buffered = 0;
                ::ioctl(x.out, FIONREAD, &buffered);
                std::string rest(std::size_t(std::max(buffered, 0)), '\0');
                const ssize_t got = buffered > 0 ? ::read(x.out, rest.data(), rest.size()) : 0;
                forward(x, who[k], rest.data(), std::size_t(std::max<ssize_t>(got, 0)), true);
            }
            break;
        }
        const auto now = clock::now();
        if (failed >= 0 && !terminated && any_running && now - failed_at > grace_period) {
            std::fprintf(stderr, "tessel-run: terminating the ranks still running %g s after rank %d failed\n", grace, failed);
            send_all(SIGTERM);
            terminated = true, terminated_at = now;
        }
        if (terminated && !killed && any_running && now - terminated_at > grace_period) {
            std::fprintf(stderr, "tessel-run: killing the ranks still running %g s after they were asked to stop\n", grace);
            send_all(SIGKILL);
            killed = true;
        }
    }
    if (signalled) {
        ::signal(signalled, SIG_DFL);
        ::raise(signalled);  // exit as the signal would have ended us (the shell sees 128 + signal)
        return 128 + signalled;
    }
    if (failed < 0) return 0;
    const int s = ranks[std::size_t(failed)].status;
    return WIFEXITED(s) ? WEXITSTATUS(s) : 128 + WTERMSIG(s);
} catch (const tessel::InvalidArgument& e) {
    usage(e.what());
}
