// tessel-info --memory-snapshot IN.json OUT.html: reads a snapshot a program wrote
// (memory::write_snapshot("snap.json")) and draws it (memory::snapshot_html). The reader is a small
// JSON parser for that one schema's shapes (objects, arrays, numbers, strings, booleans): RFC 8259's
// grammar, nesting at most 64 deep (the schema needs 4), and every field checked for its type and
// range, so a damaged or hostile file is an error naming the field, never a crash or a wrapped size.
#pragma once

#include <tessel/memory/snapshot_view.hpp>

#include <cctype>
#include <cstring>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace info {

struct Json {
    enum Kind { null, boolean, number, string, array, object } kind = null;
    double num = 0;
    std::string str;  // string; number's text (integers beyond a double's 53 bits stay exact)
    std::vector<Json> items;
    std::map<std::string, Json> fields;
    const Json& at(const std::string& key) const {
        auto it = fields.find(key);
        if (kind != object || it == fields.end()) throw std::runtime_error("snapshot JSON: missing \"" + key + "\"");
        return it->second;
    }
    // A non-negative integer no larger than max; `what` names the field in the error.
    std::uint64_t u64(const char* what, std::uint64_t max = ~std::uint64_t(0)) const {
        std::uint64_t v = 0;
        bool ok = kind == number && !str.empty();
        for (char c : str) {
            const unsigned d = unsigned(c - '0');
            if (d > 9 || v > max / 10 || max - v * 10 < d) ok = false;
            else v = v * 10 + d;
            if (!ok) break;
        }
        if (!ok) throw std::runtime_error("snapshot JSON: \"" + std::string(what) + "\" must be an integer from 0 to " + std::to_string(max));
        return v;
    }
    bool flag(const char* what) const {
        if (kind != boolean && kind != number) throw std::runtime_error("snapshot JSON: \"" + std::string(what) + "\" must be true or false");
        return kind == boolean ? num != 0 : u64(what, 1) != 0;
    }
    const std::vector<Json>& list(const char* what) const {
        if (kind != array) throw std::runtime_error("snapshot JSON: \"" + std::string(what) + "\" must be an array");
        return items;
    }
};

class JsonReader {
public:
    explicit JsonReader(std::string text) : t_(std::move(text)) {}
    Json parse() {
        Json v = value();
        space();
        if (i_ != t_.size()) fail("trailing text");
        return v;
    }

private:
    [[noreturn]] void fail(const char* what) const {
        throw std::runtime_error(std::string("snapshot JSON: ") + what + " at byte " + std::to_string(i_));
    }
    void space() {
        while (i_ < t_.size() && std::isspace(static_cast<unsigned char>(t_[i_]))) ++i_;
    }
    bool eat(char c) {
        space();
        if (i_ < t_.size() && t_[i_] == c) return ++i_, true;
        return false;
    }
    Json value(int depth = 0) {
        space();
        if (i_ >= t_.size()) fail("unexpected end");
        if (depth > 64) fail("nesting deeper than 64 levels");
        Json v;
        const char c = t_[i_];
        if (c == '{') {
            ++i_;
            v.kind = Json::object;
            if (eat('}')) return v;
            do {
                space();
                Json key = value(depth + 1);
                if (key.kind != Json::string || !eat(':')) fail("an object key was expected");
                v.fields[key.str] = value(depth + 1);
            } while (eat(','));
            if (!eat('}')) fail("'}' expected");
        } else if (c == '[') {
            ++i_;
            v.kind = Json::array;
            if (eat(']')) return v;
            do v.items.push_back(value(depth + 1));
            while (eat(','));
            if (!eat(']')) fail("']' expected");
        } else if (c == '"') {
            v.kind = Json::string;
            for (++i_; i_ < t_.size() && t_[i_] != '"'; ++i_) {
                if (static_cast<unsigned char>(t_[i_]) < 0x20) fail("a control character in a string");
                if (t_[i_] != '\\') {
                    v.str += t_[i_];
                    continue;
                }
                if (++i_ >= t_.size()) break;
                static constexpr char escapes[] = "\"\\/bfnrt", meanings[] = "\"\\/\b\f\n\r\t";
                const char* e = t_[i_] ? std::strchr(escapes, t_[i_]) : nullptr;
                if (!e) fail("an escape other than \\\" \\\\ \\/ \\b \\f \\n \\r \\t (\\u is not in this schema)");
                v.str += meanings[e - escapes];
            }
            if (i_++ >= t_.size()) fail("unterminated string");
        } else if (t_.compare(i_, 4, "true") == 0 || t_.compare(i_, 5, "false") == 0) {
            v.kind = Json::boolean;
            v.num = t_[i_] == 't';
            i_ += t_[i_] == 't' ? 4 : 5;
        } else if (t_.compare(i_, 4, "null") == 0) {
            i_ += 4;
        } else {
            // RFC 8259: -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?
            const std::size_t start = i_;
            auto digits = [&] {
                const std::size_t from = i_;
                while (i_ < t_.size() && std::isdigit(static_cast<unsigned char>(t_[i_]))) ++i_;
                return i_ - from;
            };
            if (i_ < t_.size() && t_[i_] == '-') ++i_;
            const std::size_t int_at = i_;
            if (digits() == 0 || (t_[int_at] == '0' && i_ - int_at > 1)) fail("a value was expected");
            if (i_ < t_.size() && t_[i_] == '.' && (++i_, digits() == 0)) fail("digits after '.' were expected");
            if (i_ < t_.size() && (t_[i_] == 'e' || t_[i_] == 'E')) {
                if (++i_ < t_.size() && (t_[i_] == '+' || t_[i_] == '-')) ++i_;
                if (digits() == 0) fail("an exponent was expected");
            }
            v.kind = Json::number;
            v.str = t_.substr(start, i_ - start);
            v.num = std::strtod(v.str.c_str(), nullptr);
        }
        return v;
    }
    std::string t_;
    std::size_t i_ = 0;
};

// The segments of a snapshot file.
inline std::vector<tessel::memory::SegmentInfo> read_snapshot(const std::string& path) {
    if (std::filesystem::is_directory(path)) throw std::runtime_error("--memory-snapshot: " + path + " is a directory, not a snapshot file");
    std::ifstream in(path);
    if (!in) throw std::runtime_error("--memory-snapshot: cannot read " + path);
    std::stringstream ss;
    ss << in.rdbuf();
    const Json root = JsonReader(ss.str()).parse();
    if (root.at("tessel_snapshot").u64("tessel_snapshot") != 1)
        throw std::runtime_error("--memory-snapshot: " + path + " is not a version 1 tessel snapshot");
    constexpr std::uint64_t max_bytes = std::uint64_t(1) << 50;  // a PiB: more is not a size a device has
    std::vector<tessel::memory::SegmentInfo> out;
    for (const Json& s : root.at("segments").list("segments")) {
        tessel::memory::SegmentInfo seg;
        seg.device = int(s.at("device").u64("device", 1 << 20));
        seg.address = std::uintptr_t(s.at("address").u64("address"));
        seg.total_size = s.at("total_size").u64("total_size", max_bytes);
        seg.allocated_size = s.at("allocated_size").u64("allocated_size", seg.total_size);
        seg.active_size = s.at("active_size").u64("active_size", seg.total_size);
        const Json& stream = s.at("stream");
        std::size_t hex_end = 0;
        std::uint64_t handle = 0;
        try {
            if (stream.kind == Json::string) handle = std::stoull(stream.str, &hex_end, 16);
        } catch (const std::exception&) {
            hex_end = 0;
        }
        if (stream.kind != Json::string || stream.str.empty() || hex_end != stream.str.size() || stream.str[0] == '-' || stream.str[0] == '+')
            throw std::runtime_error("snapshot JSON: \"stream\" must be a hexadecimal handle such as \"0x0\"");
        seg.stream = reinterpret_cast<cudaStream_t>(std::uintptr_t(handle));
        seg.small_pool = s.at("small_pool").flag("small_pool");
        std::uint64_t in_blocks = 0;
        for (const Json& b : s.at("blocks").list("blocks")) {
            if (b.kind != Json::array || b.items.size() != 4)
                throw std::runtime_error("--memory-snapshot: a block is [size, requested, allocated, active]");
            const std::uint64_t size = b.items[0].u64("block size", seg.total_size);
            if (size > seg.total_size - in_blocks)
                throw std::runtime_error("--memory-snapshot: the blocks of a segment add up to more than its total_size " +
                                         std::to_string(seg.total_size));
            seg.blocks.push_back({size, b.items[1].u64("block requested size", size), b.items[2].flag("block allocated"),
                                  b.items[3].flag("block active")});
            in_blocks += size;  // at most total_size: each size was checked against what is left
        }
        out.push_back(std::move(seg));
    }
    return out;
}

}  // namespace info
