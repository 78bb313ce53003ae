// tessel-info --memory-snapshot IN.json OUT.html: reads a snapshot a program wrote
// (memory::write_snapshot("snap.json")) and draws it (memory::snapshot_html). The reader is a small
// JSON parser for that one schema's shapes (objects, arrays, numbers, strings, booleans).
#pragma once

#include <tessel/memory/snapshot_view.hpp>

#include <cctype>
#include <cstring>
#include <cstdint>
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
    std::uint64_t u64() const {
        if (kind == boolean) return num != 0;
        if (kind != number) throw std::runtime_error("snapshot JSON: a number was expected");
        return std::stoull(str);
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
    Json value() {
        space();
        if (i_ >= t_.size()) fail("unexpected end");
        Json v;
        const char c = t_[i_];
        if (c == '{') {
            ++i_;
            v.kind = Json::object;
            if (eat('}')) return v;
            do {
                space();
                Json key = value();
                if (key.kind != Json::string || !eat(':')) fail("an object key was expected");
                v.fields[key.str] = value();
            } while (eat(','));
            if (!eat('}')) fail("'}' expected");
        } else if (c == '[') {
            ++i_;
            v.kind = Json::array;
            if (eat(']')) return v;
            do v.items.push_back(value());
            while (eat(','));
            if (!eat(']')) fail("']' expected");
        } else if (c == '"') {
            v.kind = Json::string;
            for (++i_; i_ < t_.size() && t_[i_] != '"'; ++i_) {
                if (t_[i_] == '\\' && i_ + 1 < t_.size()) ++i_;
                v.str += t_[i_];
            }
            if (i_++ >= t_.size()) fail("unterminated string");
        } else if (t_.compare(i_, 4, "true") == 0 || t_.compare(i_, 5, "false") == 0) {
            v.kind = Json::boolean;
            v.num = t_[i_] == 't';
            i_ += t_[i_] == 't' ? 4 : 5;
        } else if (t_.compare(i_, 4, "null") == 0) {
            i_ += 4;
        } else {
            const std::size_t start = i_;
            while (i_ < t_.size() && (std::isdigit(static_cast<unsigned char>(t_[i_])) || std::strchr("+-.eE", t_[i_]))) ++i_;
            if (start == i_) fail("a value was expected");
            v.kind = Json::number;
            v.str = t_.substr(start, i_ - start);
            v.num = std::stod(v.str);
        }
        return v;
    }
    std::string t_;
    std::size_t i_ = 0;
};

// The segments of a snapshot file.
inline std::vector<tessel::memory::SegmentInfo> read_snapshot(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw std::runtime_error("--memory-snapshot: cannot read " + path);
    std::stringstream ss;
    ss << in.rdbuf();
    const Json root = JsonReader(ss.str()).parse();
    if (root.at("tessel_snapshot").u64() != 1) throw std::runtime_error("--memory-snapshot: " + path + " is not a version 1 tessel snapshot");
    std::vector<tessel::memory::SegmentInfo> out;
    for (const Json& s : root.at("segments").items) {
        tessel::memory::SegmentInfo seg;
        seg.device = int(s.at("device").u64());
        seg.address = std::uintptr_t(s.at("address").u64());
        seg.total_size = s.at("total_size").u64();
        seg.allocated_size = s.at("allocated_size").u64();
        seg.active_size = s.at("active_size").u64();
        seg.stream = reinterpret_cast<cudaStream_t>(std::uintptr_t(std::stoull(s.at("stream").str, nullptr, 16)));
        seg.small_pool = s.at("small_pool").u64() != 0;
        for (const Json& b : s.at("blocks").items) {
            if (b.items.size() != 4) throw std::runtime_error("--memory-snapshot: a block is [size, requested, allocated, active]");
            seg.blocks.push_back({b.items[0].u64(), b.items[1].u64(), b.items[2].u64() != 0, b.items[3].u64() != 0});
        }
        out.push_back(std::move(seg));
    }
    return out;
}

}  // namespace info
