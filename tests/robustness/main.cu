// Runs the bad-input table (harness.hpp): every case must raise its exception type with its message
// fragment (or, for defined behaviour, pass its own checks), must not leak device memory, and must
// leave the allocator consistent. Cases with environment variables run in child processes.
//   robustness                 every case; exit 1 if any fails (77: CUDA build without a GPU)
//   robustness --list          the cases, by class
//   robustness --only SUBSTR   the cases whose "class/name" contains SUBSTR
//   robustness --child N       (internal) case N in this process, for the parent
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <typeinfo>

#include <tessel/lib/cublas.hpp>
#include <tessel/tessel.hpp>

#include "harness.hpp"

extern char** environ;

namespace {
using robustness::Case;
using robustness::Expect;

const char* expect_name(Expect e) {
    switch (e) {
        case Expect::invalid_argument: return "InvalidArgument";
        case Expect::unsupported: return "Unsupported";
        case Expect::out_of_memory: return "OutOfMemoryError";
        case Expect::cuda_error: return "CudaError";
        case Expect::defined: return "no exception";
    }
    return "?";
}

// The exception type a body raised, as a name matching expect_name.
template <class E>
const char* kind_of(const E& e) {
    if (dynamic_cast<const tessel::InvalidArgument*>(&e)) return "InvalidArgument";
    if (dynamic_cast<const tessel::Unsupported*>(&e)) return "Unsupported";
    if (dynamic_cast<const tessel::OutOfMemoryError*>(&e)) return "OutOfMemoryError";
    if (dynamic_cast<const tessel::CudaError*>(&e)) return "CudaError";
    if (dynamic_cast<const tessel::Error*>(&e)) return "tessel::Error (another kind)";
    return nullptr;
}

// Runs one case here; returns an empty string when it behaved, else what went wrong.
std::string run_here(const Case& c) {
    bool has_device = tessel::device_count() > 0;
    std::int64_t before = 0;
    std::string outcome;
    try {
        try {
            before = has_device ? tessel::memory::allocated() : 0;
        } catch (...) {  // a bad TESSEL_ALLOC_CONF surfaces at the first use of the allocator: the body's to see
            has_device = false;
        }
        c.body();
        if (c.expect != Expect::defined) outcome = std::string("returned normally; expected ") + expect_name(c.expect);
    } catch (const robustness::Mismatch& m) {
        outcome = "check failed: " + m.what;
    } catch (const std::exception& e) {
        const char* kind = kind_of(e);
        const std::string what = e.what();
        if (!kind) outcome = std::string("threw a non-tessel exception ") + typeid(e).name() + ": " + what;
        else if (c.expect == Expect::defined) outcome = std::string("threw ") + kind + ": " + what;
        else if (std::strcmp(kind, expect_name(c.expect)) != 0)
            outcome = std::string("threw ") + kind + " instead of " + expect_name(c.expect) + ": " + what;
        else if (what.find(c.fragment) == std::string::npos)
            outcome = "message lacks \"" + c.fragment + "\": " + what;
    } catch (...) {
        outcome = "threw something that is not a std::exception";
    }
    if (has_device) {
        try {
            tessel::rt::device_synchronize();
        } catch (const std::exception& e) {  // a fault the case queued surfaces here
            if (outcome.empty()) outcome = std::string("left a pending device error: ") + e.what();
        }
        // cuBLAS workspaces are kept per (handle, stream) by design (lib/cublas.hpp), like PyTorch's:
        // given back here, so that a leak is what remains.
        tessel::cublas::release_workspaces();
        const std::int64_t after = tessel::memory::allocated();
        if (after != before && outcome.empty())
            outcome = "leaked device memory: " + std::to_string(after - before) + " bytes still allocated";
        for (const std::string& v : tessel::memory::check_invariants())
            if (outcome.empty()) outcome = "allocator inconsistent afterwards: " + v;
    }
    return outcome;
}

// Runs case `index` in a child process with its environment; returns what went wrong, or "".
std::string run_in_child(const char* self, std::size_t index, const Case& c) {
    std::vector<std::string> env_text;
    for (char** e = environ; *e; ++e) {
        const std::string kv = *e;
        bool overridden = false;
        for (const auto& [k, v] : c.env) overridden = overridden || kv.rfind(k + "=", 0) == 0;
        if (!overridden) env_text.push_back(kv);
    }
    for (const auto& [k, v] : c.env) env_text.push_back(k + "=" + v);
    std::vector<char*> envp;
    for (auto& s : env_text) envp.push_back(s.data());
    envp.push_back(nullptr);
    const std::string index_text = std::to_string(index);
    int pipe_fd[2];
    if (::pipe(pipe_fd) != 0) return "pipe() failed";
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, pipe_fd[1], 1);
    posix_spawn_file_actions_adddup2(&actions, pipe_fd[1], 2);
    posix_spawn_file_actions_addclose(&actions, pipe_fd[0]);
    const char* argv[] = {self, "--child", index_text.c_str(), nullptr};
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, self, &actions, nullptr, const_cast<char* const*>(argv), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    ::close(pipe_fd[1]);
    std::string output;
    char buf[4096];
    for (ssize_t n; (n = ::read(pipe_fd[0], buf, sizeof buf)) > 0;) output.append(buf, std::size_t(n));
    ::close(pipe_fd[0]);
    if (rc != 0) return "posix_spawn failed: " + std::string(std::strerror(rc));
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (WIFSIGNALED(status)) return "the child process died of signal " + std::to_string(WTERMSIG(status)) + ":\n" + output;
    if (WEXITSTATUS(status) != 0) return output.empty() ? "the child process exited " + std::to_string(WEXITSTATUS(status)) : output;
    return {};
}
}  // namespace

int main(int argc, char** argv) {
    auto& cases = robustness::registry();
    if (argc == 3 && std::strcmp(argv[1], "--child") == 0) {
        const std::string why = run_here(cases.at(std::stoul(argv[2])));
        if (!why.empty()) std::printf("%s\n", why.c_str());
        return why.empty() ? 0 : 1;
    }
    if (tessel::backend == tessel::Backend::cuda && !tessel::is_available()) {
        std::printf("SKIPPED: %s\n", tessel::unavailable_reason().c_str());
        return 77;
    }
    std::string only;
    bool list = false;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--list") == 0) list = true;
        else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) only = argv[++i];
    }
    std::map<std::string, int> per_class;
    int failed = 0, ran = 0, in_children = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < cases.size(); ++i) {
        const Case& c = cases[i];
        const std::string label = c.klass + "/" + c.name;
        if (!only.empty() && label.find(only) == std::string::npos) continue;
        if (list) {
            std::printf("%-14s %-60s %s\n", c.klass.c_str(), c.name.c_str(), expect_name(c.expect));
            continue;
        }
        const bool child = c.child || !c.env.empty();
        const std::string why = child ? run_in_child(argv[0], i, c) : run_here(c);
        ++ran;
        in_children += child;
        ++per_class[c.klass];
        if (!why.empty()) {
            ++failed;
            std::printf("FAILED %s (expected %s%s%s)\n  %s\n", label.c_str(), expect_name(c.expect),
                        c.fragment.empty() ? "" : " with \"", c.fragment.empty() ? "" : (c.fragment + "\"").c_str(), why.c_str());
        }
    }
    if (list) return 0;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("robustness: %d cases in %zu classes (%d in child processes), %d failed, %.1f s\n", ran, per_class.size(),
                in_children, failed, seconds);
    for (const auto& [k, n] : per_class) std::printf("  %-14s %d\n", k.c_str(), n);
    return failed == 0 ? 0 : 1;
}
