// The caching allocator's snapshot (memory::snapshot()) as files: JSON a later tool can read (as
// torch.cuda.memory._dump_snapshot writes one) and a self-contained HTML page a person can open: per
// device, every segment as an SVG bar of its blocks (allocated, with the part lost to rounding;
// freed but still in use by a stream; cached free), the totals, and how fragmented the cache is.
// write_snapshot(path) writes the current snapshot, HTML or JSON by the file's extension;
// `tessel-info --memory-snapshot IN.json OUT.html` draws a JSON one.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "../core/error.hpp"
#include "allocator.hpp"

namespace tessel::memory {

// The snapshot as JSON: {"tessel_snapshot": 1, "segments": [{"device", "address", "total_size",
// "allocated_size", "active_size", "stream", "small_pool", "blocks": [[size, requested, allocated,
// active], ...]}, ...]}.
inline std::string snapshot_json(const std::vector<SegmentInfo>& segments) {
    std::ostringstream o;
    o << "{\"tessel_snapshot\": 1, \"segments\": [";
    for (std::size_t i = 0; i < segments.size(); ++i) {
        const SegmentInfo& s = segments[i];
        o << (i ? ",\n  " : "\n  ") << "{\"device\": " << s.device << ", \"address\": " << s.address << ", \"total_size\": " << s.total_size
          << ", \"allocated_size\": " << s.allocated_size << ", \"active_size\": " << s.active_size << ", \"stream\": \""
          << static_cast<const void*>(s.stream) << "\", \"small_pool\": " << (s.small_pool ? "true" : "false") << ", \"blocks\": [";
        for (std::size_t j = 0; j < s.blocks.size(); ++j) {
            const BlockInfo& b = s.blocks[j];
            o << (j ? ", " : "") << '[' << b.size << ", " << b.requested << ", " << int(b.allocated) << ", " << int(b.active) << ']';
        }
        o << "]}";
    }
    o << "\n]}\n";
    return o.str();
}

namespace detail {
inline std::string mib(double bytes) {
    char b[32];
    std::snprintf(b, sizeof b, "%.2f MiB", bytes / (1 << 20));
    return b;
}
inline std::string escape_html(const std::string& s) {
    std::string r;
    for (char c : s) r += c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '&' ? "&amp;" : c == '"' ? "&quot;" : std::string(1, c);
    return r;
}
}  // namespace detail

// One HTML page picturing `segments` (see the header comment); `title` heads it.
inline std::string snapshot_html(const std::vector<SegmentInfo>& segments, const std::string& title = "tessel memory snapshot") {
    using detail::mib;
    std::map<int, std::vector<const SegmentInfo*>> by_device;
    for (const SegmentInfo& s : segments) by_device[s.device].push_back(&s);
    std::ostringstream o;
    o << "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>" << detail::escape_html(title) << "</title>\n<style>"
      << "body{font-family:sans-serif;margin:20px;color:#222}table{border-collapse:collapse}td,th{padding:2px 10px;text-align:right}"
      << "th{text-align:left}.seg{font:12px monospace;margin:6px 0 1px}.key span{display:inline-block;width:14px;height:14px;"
      << "vertical-align:middle;margin:0 4px 0 14px;border:1px solid #888}</style></head><body>\n<h1>" << detail::escape_html(title)
      << "</h1>\n<p class=\"key\">blocks:<span style=\"background:#3367d6\"></span>allocated (requested)"
      << "<span style=\"background:#9ab8f0\"></span>allocated (rounding)<span style=\"background:#f29d38\"></span>freed, still used by a "
         "stream<span style=\"background:#e8e8e8\"></span>cached, free</p>\n";
    if (segments.empty()) o << "<p>No segments: the caching allocator holds no device memory.</p>\n";
    constexpr double width = 960;
    for (const auto& [device, segs] : by_device) {
        std::size_t reserved = 0, allocated = 0, requested = 0, pending = 0, free_bytes = 0, largest_free = 0, blocks = 0, largest_segment = 0;
        for (const SegmentInfo* s : segs) {
            reserved += s->total_size;
            largest_segment = std::max(largest_segment, s->total_size);
            for (const BlockInfo& b : s->blocks) {
                ++blocks;
                if (b.allocated) allocated += b.size, requested += b.requested;
                else if (b.active) pending += b.size;
                else free_bytes += b.size, largest_free = std::max(largest_free, b.size);
            }
        }
        const double fragmentation = free_bytes ? 1.0 - double(largest_free) / double(free_bytes) : 0.0;
        o << "<h2>device " << device << "</h2>\n<table>"
          << "<tr><th>segments</th><td>" << segs.size() << " (" << blocks << " blocks)</td></tr>"
          << "<tr><th>reserved from the driver</th><td>" << mib(double(reserved)) << "</td></tr>"
          << "<tr><th>allocated</th><td>" << mib(double(allocated)) << " (requested " << mib(double(requested)) << ", rounding "
          << mib(double(allocated - requested)) << ")</td></tr>"
          << "<tr><th>freed, still used by a stream</th><td>" << mib(double(pending)) << "</td></tr>"
          << "<tr><th>cached, free</th><td>" << mib(double(free_bytes)) << " (largest block " << mib(double(largest_free)) << ")</td></tr>"
          << "<tr><th>fragmentation of the free cache</th><td>" << std::to_string(int(100 * fragmentation + 0.5))
          << " % (1 - largest free block / free bytes)</td></tr></table>\n";
        std::vector<const SegmentInfo*> sorted = segs;
        std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->address < b->address; });
        for (const SegmentInfo* s : sorted) {
            char addr[32];
            std::snprintf(addr, sizeof addr, "0x%llx", static_cast<unsigned long long>(s->address));
            const double w = std::max(8.0, width * double(s->total_size) / double(std::max<std::size_t>(largest_segment, 1)));
            o << "<div class=\"seg\">" << addr << "  " << mib(double(s->total_size)) << "  " << (s->small_pool ? "small pool" : "large pool")
              << "  stream " << static_cast<const void*>(s->stream) << "  allocated " << mib(double(s->allocated_size)) << "</div>\n"
              << "<svg width=\"" << int(w) + 2 << "\" height=\"22\"><rect x=\"0.5\" y=\"0.5\" width=\"" << int(w) + 1
              << "\" height=\"21\" fill=\"none\" stroke=\"#888\"/>";
            double x = 1;
            for (const BlockInfo& b : s->blocks) {
                const double bw = w * double(b.size) / double(std::max<std::size_t>(s->total_size, 1));
                const char* fill = b.allocated ? "#9ab8f0" : b.active ? "#f29d38" : "#e8e8e8";
                const std::string state = b.allocated ? "allocated" : b.active ? "freed, still used by a stream" : "cached, free";
                o << "<g><title>" << state << ": " << b.size << " bytes" << (b.allocated ? ", requested " + std::to_string(b.requested) : "")
                  << "</title><rect x=\"" << x << "\" y=\"1\" width=\"" << bw << "\" height=\"20\" fill=\"" << fill
                  << "\" stroke=\"#fff\" stroke-width=\"0.5\"/>";
                if (b.allocated && b.size)
                    o << "<rect x=\"" << x << "\" y=\"1\" width=\"" << bw * double(b.requested) / double(b.size)
                      << "\" height=\"20\" fill=\"#3367d6\"/>";
                o << "</g>";
                x += bw;
            }
            o << "</svg>\n";
        }
    }
    o << "</body></html>\n";
    return o.str();
}

// Writes the allocators' snapshot now to `path`: HTML for .html/.htm, else JSON.
inline void write_snapshot(const std::string& path) {
    const std::vector<SegmentInfo> segments = snapshot();
    const bool html = path.size() >= 5 && (path.ends_with(".html") || path.ends_with(".htm"));
    std::ofstream out(path);
    require(bool(out), "write_snapshot: cannot open '", path, "' for writing");
    out << (html ? snapshot_html(segments) : snapshot_json(segments));
    out.flush();
    require(bool(out), "write_snapshot: writing '", path, "' failed");
}

}  // namespace tessel::memory
