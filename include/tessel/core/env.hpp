// Strict parsing of tessel's environment variables (TESSEL_SIM_*, TESSEL_ALLOC_CONF) and of the
// tools' numeric arguments: a value is all digits (for sizes, one unit; for decimals, one point),
// inside its documented range, or an InvalidArgument that names the variable or flag, the text and
// the accepted range. Nothing wraps, nothing is silently clamped.
#pragma once

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "error.hpp"

namespace tessel::env {

namespace detail {
// The decimal digits of `text` as a number, or false if it is empty, holds anything else (signs,
// spaces, junk) or overflows 64 bits.
inline bool parse_digits(const std::string& text, std::uint64_t& out) {
    if (text.empty()) return false;
    std::uint64_t v = 0;
    for (char c : text) {
        if (c < '0' || c > '9') return false;
        const std::uint64_t digit = std::uint64_t(c - '0');
        if (v > (std::numeric_limits<std::uint64_t>::max() - digit) / 10) return false;
        v = v * 10 + digit;
    }
    out = v;
    return true;
}
}  // namespace detail

// An integer in [lo, hi] from `text`, the value of `variable`.
inline std::uint64_t parse_integer(const char* variable, const std::string& text, std::uint64_t lo, std::uint64_t hi) {
    std::uint64_t v = 0;
    if (!detail::parse_digits(text, v) || v < lo || v > hi)
        fail<InvalidArgument>(variable, "='", text, "' is not an integer between ", lo, " and ", hi);
    return v;
}

// A byte count such as "16GiB", "512MiB", "64K", "4096" in [lo, hi] bytes from `text`, the value of
// `variable`. Units (case-insensitive): B, K/KB/KiB, M/MB/MiB, G/GB/GiB, T/TB/TiB, all powers of 1024.
inline std::uint64_t parse_bytes(const char* variable, const std::string& text, std::uint64_t lo, std::uint64_t hi) {
    std::size_t digits = 0;
    while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
    std::string unit = text.substr(digits);
    for (auto& c : unit) c = char(std::tolower(static_cast<unsigned char>(c)));
    int shift = -1;
    if (unit.empty() || unit == "b") shift = 0;
    else if (unit == "k" || unit == "kb" || unit == "kib") shift = 10;
    else if (unit == "m" || unit == "mb" || unit == "mib") shift = 20;
    else if (unit == "g" || unit == "gb" || unit == "gib") shift = 30;
    else if (unit == "t" || unit == "tb" || unit == "tib") shift = 40;
    std::uint64_t v = 0;
    const bool ok = shift >= 0 && detail::parse_digits(text.substr(0, digits), v) && v <= (hi >> shift) && (v << shift) >= lo;
    if (!ok)
        fail<InvalidArgument>(variable, "='", text, "' is not a size between ", lo, " and ", hi,
                              " bytes (digits and an optional unit: B, KiB, MiB, GiB, TiB; e.g. 16GiB)");
    return v << shift;
}

// A decimal such as "0.5", "10" or "2." in [lo, hi] from `text`, the value of `variable` (seconds,
// factors): digits with at most one point, no sign, exponent, "inf" or "nan".
inline double parse_decimal(const char* variable, const std::string& text, double lo, double hi) {
    bool digits = false, point = false, ok = true;
    for (char c : text) {
        if (c >= '0' && c <= '9') digits = true;
        else if (c == '.' && !point) point = true;
        else ok = false;
    }
    double v = 0;  // the grammar is checked; from_chars rounds it correctly, whatever the locale
    if (ok && digits) (void)std::from_chars(text.data(), text.data() + text.size(), v);
    if (!ok || !digits || !std::isfinite(v) || v < lo || v > hi)
        fail<InvalidArgument>(variable, "='", text, "' is not a number between ", lo, " and ", hi);
    return v;
}

}  // namespace tessel::env
