// tessel error model: every failure reaches the user as one of these types, with what went wrong
// and where. CUDA, library and launch failures are checked through the TESSEL_CHECK_* family below.
#pragma once

#include <source_location>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace tessel {

// Base of every exception tessel throws.
class Error : public std::runtime_error {
public:
    explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// A CUDA runtime call (or the sim's equivalent) returned an error code.
class CudaError : public Error {
public:
    CudaError(int code, std::string name, std::string message, std::string expression,
              std::source_location where)
        : Error(format(code, name, message, expression, where)),
          code_(code), name_(std::move(name)), message_(std::move(message)),
          expression_(std::move(expression)), file_(where.file_name()), line_(where.line()) {}

    int code() const noexcept { return code_; }
    const std::string& name() const noexcept { return name_; }          // e.g. "cudaErrorInvalidValue"
    const std::string& message() const noexcept { return message_; }    // the runtime's description
    const std::string& expression() const noexcept { return expression_; }
    const char* file() const noexcept { return file_; }
    unsigned line() const noexcept { return line_; }

private:
    static std::string format(int code, const std::string& name, const std::string& message,
                              const std::string& expression, std::source_location where) {
        std::ostringstream os;
        os << "CUDA error " << name << " (" << code << "): " << message << "\n  in " << expression
           << "\n  at " << where.file_name() << ':' << where.line();
        return os.str();
    }
    int code_;
    std::string name_, message_, expression_;
    const char* file_;
    unsigned line_;
};

// A vendor library (cuBLAS, cuBLASLt, cuDNN, NCCL) returned a non-success status.
class LibraryError : public Error {
public:
    LibraryError(std::string library, int status, std::string status_name, std::string expression,
                 std::source_location where)
        : Error(library + " error " + status_name + " (" + std::to_string(status) + ")\n  in " +
                expression + "\n  at " + where.file_name() + ':' + std::to_string(where.line())),
          library_(std::move(library)), status_(status), status_name_(std::move(status_name)) {}
    const std::string& library() const noexcept { return library_; }
    int status() const noexcept { return status_; }
    const std::string& status_name() const noexcept { return status_name_; }

private:
    std::string library_;
    int status_;
    std::string status_name_;
};

// An allocation could not be satisfied even after freeing cached memory.
class OutOfMemoryError : public Error {
public:
    explicit OutOfMemoryError(const std::string& what) : Error(what) {}
};

// The caller passed something wrong: a shape, dtype, device, stream or size mismatch.
class InvalidArgument : public Error {
public:
    explicit InvalidArgument(const std::string& what) : Error(what) {}
};

// The request is valid but this device, build or backend cannot do it.
class Unsupported : public Error {
public:
    explicit Unsupported(const std::string& what) : Error(what) {}
};

namespace detail {
// Builds a message from streamable parts: fail<InvalidArgument>("shape ", a, " vs ", b).
template <class... Parts>
std::string concat(const Parts&... parts) {
    std::ostringstream os;
    (os << ... << parts);
    return os.str();
}
}  // namespace detail

// Throws E with the concatenation of the parts as its message.
template <class E = InvalidArgument, class... Parts>
[[noreturn]] void fail(const Parts&... parts) {
    throw E(detail::concat(parts...));
}

// Throws InvalidArgument with the parts as message unless cond holds.
template <class... Parts>
void require(bool cond, const Parts&... parts) {
    if (!cond) fail<InvalidArgument>(parts...);
}

}  // namespace tessel
