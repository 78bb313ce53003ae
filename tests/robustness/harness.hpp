// The bad-input suite's table: each case is a class (shapes, views, streams, DLPack, environment,
// ...), a name, the exception type it must raise (or "defined": it must not raise and checks its own
// result), a fragment the message must contain, and a body. Cases register themselves from the
// cases_*.cu files; main.cu runs them, each in this process or, when it sets environment variables
// (read once per process) or would poison the process, in a child process of its own.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <tessel/core/error.hpp>

namespace robustness {

// What a case must do.
enum class Expect {
    invalid_argument,  // throw tessel::InvalidArgument
    unsupported,       // throw tessel::Unsupported
    out_of_memory,     // throw tessel::OutOfMemoryError
    cuda_error,        // throw tessel::CudaError (a runtime call the sim or the driver refused)
    defined,           // not throw; the body checks the result with expect()
};

// One bad input.
struct Case {
    std::string klass, name;
    Expect expect;
    std::string fragment;  // must occur in what(); empty for Expect::defined
    std::function<void()> body;
    std::vector<std::pair<std::string, std::string>> env;  // set in a child process that runs the body
    bool child = false;                                     // run in a child process even without env
};

inline std::vector<Case>& registry() {
    static std::vector<Case> cases;
    return cases;
}

// A defined-behaviour case's check failed.
struct Mismatch {
    std::string what;
};

// Fails the current case unless `ok` (for Expect::defined bodies).
inline void expect(bool ok, const std::string& what) {
    if (!ok) throw Mismatch{what};
}

struct Registrar {
    Registrar(Case c) { registry().push_back(std::move(c)); }  // NOLINT: implicit, for the macros
};

}  // namespace robustness

#define ROBUST_CAT2(a, b) a##b
#define ROBUST_CAT(a, b) ROBUST_CAT2(a, b)
// BAD("class", "name", Expect::invalid_argument, "message fragment") { body };
#define BAD(klass, name, expectation, fragment)                                                                      \
    static const ::robustness::Registrar ROBUST_CAT(robust_case_, __LINE__)                                         \
        = ::robustness::Case{klass, name, ::robustness::expectation, fragment, {}, {}, false} +                      \
          []()
// The same, run in a child process with the given environment: BAD_ENV("environment", "name",
// Expect::invalid_argument, "TESSEL_SIM_DEVICES", {{"TESSEL_SIM_DEVICES", "abc"}}) { body };
#define BAD_ENV(klass, name, expectation, fragment, ...)                                                             \
    static const ::robustness::Registrar ROBUST_CAT(robust_case_, __LINE__)                                         \
        = ::robustness::Case{klass, name, ::robustness::expectation, fragment, {}, __VA_ARGS__, true} +              \
          []()
// A case whose behaviour is defined (no exception); the body checks it with expect().
#define DEFINED(klass, name) BAD(klass, name, Expect::defined, "")

namespace robustness {
// Attaches the body that follows the macro (case + lambda).
template <class F>
Case operator+(Case c, F&& body) {
    c.body = std::forward<F>(body);
    return c;
}
}  // namespace robustness
