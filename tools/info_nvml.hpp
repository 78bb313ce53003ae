// tessel-info's NVML side: --query (nvidia-smi's field names) in csv or json, --processes, and
// --prometheus (the text exposition format, written atomically for node-exporter's textfile
// collector). Readings come from tessel::nvml (the sim's stand-in on the sim).
#pragma once

#include <tessel/lib/nvml.hpp>
#include <tessel/runtime/device.hpp>

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace info {

// A GPU as tessel-info lists it: CUDA's device `index` when CUDA sees any; otherwise NVML's GPU
// `index` (NVML's numbering), so that a node where CUDA finds nothing — the only GPU lost before
// this process started, a driver that cannot run this runtime — still shows NVML's readings and
// which GPU is lost, as nvidia-smi does.
struct Gpu {
    int index = 0;
    std::optional<tessel::DeviceProperties> properties;  // CUDA's; absent from NVML alone, or when CUDA cannot read them
    std::optional<std::string> name;  // CUDA's, else NVML's; absent when neither can say (a lost GPU)
    tessel::nvml::DeviceReading reading;
    tessel::nvml::Identity id;
    std::string unnamed = "unknown";  // what tables and labels say without a name
    std::string label() const { return name.value_or(unnamed); }
};

// Whether tessel-info lists NVML's GPUs (CUDA sees none, NVML sees some).
inline bool nvml_only() { return !tessel::is_available() && tessel::nvml::device_count().value_or(0) > 0; }

// Said beside NVML's GPUs when CUDA_VISIBLE_DEVICES is set: it hides GPUs from CUDA, not from NVML.
inline const char* hidden_note() {
    return std::getenv("CUDA_VISIBLE_DEVICES") ? " (CUDA_VISIBLE_DEVICES hides GPUs from CUDA, not from NVML)" : "";
}

// Every GPU, read now (CUDA's devices, else NVML's).
inline std::vector<Gpu> gpus() {
    std::vector<Gpu> out;
    if (nvml_only()) {
        const unsigned n = tessel::nvml::device_count().value_or(0);  // read once: the count may fail later
        for (unsigned i = 0; i < n; ++i) {
            const tessel::nvml::Index at{i};
            out.push_back({int(i), std::nullopt, tessel::nvml::name(at), tessel::nvml::read(at), tessel::nvml::identity(at)});
        }
        return out;
    }
    for (int i = 0; i < tessel::device_count(); ++i) {
        Gpu g{i, std::nullopt, std::nullopt, tessel::nvml::read(tessel::Device{i}), tessel::nvml::identity(tessel::Device{i})};
        try {  // a GPU that fell off the bus may fail CUDA's property query: its readings still show
            g.properties = tessel::properties(tessel::Device{i});
            g.name = g.properties->name;
        } catch (const std::exception&) {  // then its name is unknown too (NVML's numbering may differ)
            g.unnamed = "unknown (CUDA cannot read its properties)";
        }
        out.push_back(std::move(g));
    }
    return out;
}

// One queryable field: nvidia-smi's name, its unit in csv headers and values ("" for none), its
// value for a GPU (empty: [N/A]), and whether that value is text (a JSON string: "560.35.03" is no
// JSON number) rather than a number.
struct Field {
    const char* name;
    const char* unit;
    std::function<std::optional<std::string>(const Gpu&)> value;
    bool text = false;
};
inline constexpr bool text = true;

inline std::string number(double v, int decimals) {
    char b[64];
    std::snprintf(b, sizeof b, "%.*f", decimals, v);
    return b;
}
inline std::string number_as(const char* format, unsigned v) {
    char b[64];
    std::snprintf(b, sizeof b, format, v);
    return b;
}
template <class T>
std::optional<std::string> as_text(const std::optional<T>& v, double scale = 1, int decimals = 0) {
    if (!v || !std::isfinite(double(*v) * scale)) return std::nullopt;  // [N/A] (and JSON null), never "nan"
    return number(double(*v) * scale, decimals);
}

inline const std::vector<Field>& fields() {
    constexpr double MiB = 1.0 / (1 << 20);
    static const std::vector<Field> f = {
        {"index", "", [](const Gpu& g) { return std::optional<std::string>(std::to_string(g.index)); }},
        {"name", "", [](const Gpu& g) { return g.name; }, text},
        {"compute_cap", "", [](const Gpu& g) { return g.properties ? std::optional<std::string>(g.properties->compute_capability()) : std::nullopt; }, text},
        {"uuid", "", [](const Gpu& g) { return g.id.uuid; }, text},
        {"pci.bus_id", "", [](const Gpu& g) { return g.id.pci_bus_id; }, text},
        {"driver_version", "", [](const Gpu& g) { return g.reading.lost ? std::nullopt : tessel::nvml::driver_version(); }, text},
        {"memory.total", "MiB", [=](const Gpu& g) { return as_text(g.reading.memory_total_bytes, MiB); }},
        {"memory.used", "MiB", [=](const Gpu& g) { return as_text(g.reading.memory_used_bytes, MiB); }},
        {"memory.free", "MiB", [=](const Gpu& g) { return as_text(g.reading.memory_free_bytes, MiB); }},
        {"memory.reserved", "MiB", [=](const Gpu& g) { return as_text(g.reading.memory_reserved_bytes, MiB); }},
        {"temperature.gpu", "", [](const Gpu& g) { return as_text(g.reading.temperature_c); }},
        {"power.draw", "W", [](const Gpu& g) { return as_text(g.reading.power_w, 1, 2); }},
        {"power.limit", "W", [](const Gpu& g) { return as_text(g.reading.power_limit_w, 1, 2); }},
        {"utilization.gpu", "%", [](const Gpu& g) { return as_text(g.reading.gpu_utilization_pct); }},
        {"utilization.memory", "%", [](const Gpu& g) { return as_text(g.reading.memory_utilization_pct); }},
        {"clocks.sm", "MHz", [](const Gpu& g) { return as_text(g.reading.sm_clock_mhz); }},
        {"clocks.mem", "MHz", [](const Gpu& g) { return as_text(g.reading.memory_clock_mhz); }},
        {"clocks.max.sm", "MHz", [](const Gpu& g) { return as_text(g.reading.sm_clock_max_mhz); }},
        {"clocks.max.mem", "MHz", [](const Gpu& g) { return as_text(g.reading.memory_clock_max_mhz); }},
        {"clocks_event_reasons.active", "",
         [](const Gpu& g) {
             const auto& r = g.reading;
             if (!r.clock_event_reasons) return std::optional<std::string>();
             char b[32];
             std::snprintf(b, sizeof b, "0x%016llx", static_cast<unsigned long long>(*r.clock_event_reasons));
             return std::optional<std::string>(b);
         }, text},
        {"clocks_event_reasons.names", "",
         [](const Gpu& g) {
             const auto& r = g.reading;
             if (!r.clock_event_reasons) return std::optional<std::string>();
             std::string s;
             for (const auto& n : tessel::nvml::clock_reason_names(*r.clock_event_reasons)) s += (s.empty() ? "" : "; ") + n;
             return std::optional<std::string>(s.empty() ? "none" : s);
         }, text},
        {"ecc.errors.corrected.volatile.total", "", [](const Gpu& g) { return as_text(g.reading.ecc_corrected); }},
        {"ecc.errors.uncorrected.volatile.total", "", [](const Gpu& g) { return as_text(g.reading.ecc_uncorrected); }},
        {"pcie.link.gen.current", "", [](const Gpu& g) { return as_text(g.reading.pcie_generation); }},
        {"pcie.link.width.current", "", [](const Gpu& g) { return as_text(g.reading.pcie_width); }},
    };
    return f;
}

// The fields named in a comma-separated list; throws naming an unknown one and listing the known.
inline std::vector<const Field*> parse_fields(const std::string& list) {
    if (list.empty()) throw std::invalid_argument("--query: no fields given");
    std::vector<const Field*> out;
    for (std::size_t at = 0; at <= list.size();) {
        std::size_t comma = list.find(',', at);
        if (comma == std::string::npos) comma = list.size();
        std::string name = list.substr(at, comma - at);
        at = comma + 1;
        name.erase(0, name.find_first_not_of(' '));
        name.erase(name.find_last_not_of(' ') + 1);
        // nvidia-smi's other spellings of the same fields (--help-query-gpu), and the names its
        // clock event reasons had before driver 535.
        static const std::pair<const char*, const char*> aliases[] = {
            {"gpu_name", "name"}, {"gpu_uuid", "uuid"}, {"gpu_bus_id", "pci.bus_id"}, {"clocks.current.sm", "clocks.sm"},
            {"clocks.current.memory", "clocks.mem"}, {"clocks.max.memory", "clocks.max.mem"},
            {"clocks_throttle_reasons.active", "clocks_event_reasons.active"}};
        for (const auto& [alias, canonical] : aliases)
            if (name == alias) name = canonical;
        const Field* hit = nullptr;
        for (const Field& f : fields())
            if (name == f.name) hit = &f;
        if (!hit) {
            std::string known;
            for (const Field& f : fields()) known += std::string(known.empty() ? "" : ", ") + f.name;
            throw std::invalid_argument("--query: unknown field '" + name + "'; fields: " + known);
        }
        out.push_back(hit);
    }
    return out;
}

struct Format {
    bool json = false, header = true, units = true;
};
// --format=csv[,noheader][,nounits] | json
inline Format parse_format(const std::string& text) {
    Format f;
    if (text.empty() || text.back() == ',') throw std::invalid_argument("--format: '" + text + "' is not csv[,noheader][,nounits] or json");
    std::stringstream ss(text);
    bool first = true;
    for (std::string w; std::getline(ss, w, ','); first = false) {
        if (first && (w == "csv" || w == "json")) f.json = w == "json";
        else if (!first && w == "noheader") f.header = false;
        else if (!first && w == "nounits") f.units = false;
        else throw std::invalid_argument("--format: '" + text + "' is not csv[,noheader][,nounits] or json");
    }
    return f;
}

// s as the inside of a JSON string: quotes, backslashes and control characters escaped (RFC 8259).
inline std::string json_escape(const std::string& s) {
    std::string r;
    for (char c : s) {
        const auto u = static_cast<unsigned char>(c);
        if (c == '"' || c == '\\') r += '\\', r += c;
        else if (c == '\n') r += "\\n";
        else if (c == '\t') r += "\\t";
        else if (c == '\r') r += "\\r";
        else if (u < 0x20) r += number_as("\\u%04x", u);
        else r += c;
    }
    return r;
}
inline std::string json_string(const std::string& s) { return "\"" + json_escape(s) + "\""; }

// s as one CSV field: as it is (nvidia-smi's output), or quoted when it holds the separator, a quote
// or a line break (RFC 4180), so that a CSV reader sees the header's number of columns.
inline std::string csv_field(const std::string& s) {
    if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
    std::string r = "\"";
    for (char c : s) r += c == '"' ? std::string("\"\"") : std::string(1, c);
    return r + "\"";
}

// One sample per call: a csv line per device (the header first if asked), or one JSON array of an
// object per device on one line (so that --watch writes JSON Lines).
inline void print_query(const std::vector<const Field*>& fs, const Format& fmt) {
    if (fmt.json) std::printf("[");
    else if (fmt.header) {
        // nvidia-smi keeps the units in the header with nounits: only the values lose them.
        std::string h;
        for (const Field* f : fs) h += std::string(h.empty() ? "" : ", ") + f->name + (*f->unit ? std::string(" [") + f->unit + "]" : "");
        std::printf("%s\n", h.c_str());
    }
    bool first = true;
    for (const Gpu& g : gpus()) {
        std::string line;
        for (const Field* f : fs) {
            const std::optional<std::string> v = f->value(g);
            if (fmt.json) {
                line += std::string(line.empty() ? "" : ", ") + json_string(f->name) + ": " + (!v ? "null" : f->text ? json_string(*v) : *v);
            } else {
                // nvidia-smi's words for a value it cannot read from a GPU that fell off the bus.
                line += std::string(line.empty() ? "" : ", ") +
                        (v ? csv_field(*v + (fmt.units && *f->unit ? std::string(" ") + f->unit : "")) : g.reading.lost ? "[GPU is lost]" : "[N/A]");
            }
        }
        if (fmt.json) std::printf("%s{%s}", first ? "" : ", ", line.c_str());
        else std::printf("%s\n", line.c_str());
        first = false;
    }
    if (fmt.json) std::printf("]\n");
    std::fflush(stdout);
}

// NVML's readings as a table, a row per GPU (with its name when `names`), and a line under each
// GPU that is lost or whose reading failed.
inline void print_readings(const std::vector<Gpu>& gpus, bool names) {
    std::printf("%-3s ", "idx");
    if (names) std::printf("%-32s %-16s ", "name", "bus id");
    std::printf("%6s %17s %6s %21s  %s\n", "temp", "power / limit", "util", "memory used / total", "clock reasons");
    for (const Gpu& g : gpus) {
        const tessel::nvml::DeviceReading& r = g.reading;
        std::string reasons;
        for (const auto& n : tessel::nvml::clock_reason_names(r.clock_event_reasons.value_or(0))) reasons += (reasons.empty() ? "" : ", ") + n;
        std::printf("%-3d ", g.index);
        if (names) std::printf("%-32.32s %-16s ", g.label().c_str(), g.id.pci_bus_id.value_or("unknown").c_str());
        std::printf("%4s C %7s / %5s W %5s%% %9s / %7s MiB  %s\n", as_text(r.temperature_c).value_or("n/a").c_str(), as_text(r.power_w).value_or("n/a").c_str(),
                    as_text(r.power_limit_w).value_or("n/a").c_str(), as_text(r.gpu_utilization_pct).value_or("n/a").c_str(),
                    as_text(r.memory_used_bytes, 1.0 / (1 << 20)).value_or("n/a").c_str(),
                    as_text(r.memory_total_bytes, 1.0 / (1 << 20)).value_or("n/a").c_str(), reasons.empty() ? "-" : reasons.c_str());
        if (r.lost) std::printf("    device %d is lost (%s): reset the GPU or reboot the node\n", g.index, r.error.c_str());
        else if (!r.error.empty()) std::printf("    device %d: NVML failed: %s\n", g.index, r.error.c_str());
    }
}

// nvidia-smi's process table: every compute process on every device.
inline void print_processes() {
    std::printf("%-4s %-8s %12s %6s %6s\n", "gpu", "pid", "memory", "sm", "mem");
    int rows = 0;
    const bool by_nvml = nvml_only();
    const int n = by_nvml ? int(tessel::nvml::device_count().value_or(0)) : tessel::device_count();
    for (int i = 0; i < n; ++i)
        for (const auto& p : by_nvml ? tessel::nvml::processes(tessel::nvml::Index{unsigned(i)}) : tessel::nvml::processes(tessel::Device{i})) {
            const std::string memory = p.memory_bytes ? number(double(*p.memory_bytes) / (1 << 20), 0) + " MiB" : "N/A";
            std::printf("%-4d %-8u %12s %6s %6s\n", i, p.pid, memory.c_str(),
                        p.sm_utilization_pct ? (std::to_string(*p.sm_utilization_pct) + "%").c_str() : "-",
                        p.memory_utilization_pct ? (std::to_string(*p.memory_utilization_pct) + "%").c_str() : "-");
            ++rows;
        }
    if (!rows) std::printf("(no compute processes%s)\n", tessel::nvml::available() ? "" : ": NVML unavailable");
}

// The Prometheus text exposition format: one gauge family per reading, labelled by GPU.
inline std::string prometheus_text() {
    std::ostringstream o;
    struct Metric {
        const char* name;
        const char* help;
        std::function<std::optional<double>(const tessel::nvml::DeviceReading&)> value;
    };
    const Metric metrics[] = {
        {"tessel_gpu_temperature_celsius", "GPU temperature.", [](const auto& r) { return r.temperature_c ? std::optional<double>(*r.temperature_c) : std::nullopt; }},
        {"tessel_gpu_power_watts", "Power draw.", [](const auto& r) { return r.power_w; }},
        {"tessel_gpu_power_limit_watts", "Enforced power limit.", [](const auto& r) { return r.power_limit_w; }},
        {"tessel_gpu_utilization_ratio", "Share of the last sample period a kernel ran.",
         [](const auto& r) { return r.gpu_utilization_pct ? std::optional<double>(*r.gpu_utilization_pct / 100.0) : std::nullopt; }},
        {"tessel_gpu_memory_used_bytes", "Device memory in use (all processes).",
         [](const auto& r) { return r.memory_used_bytes ? std::optional<double>(double(*r.memory_used_bytes)) : std::nullopt; }},
        {"tessel_gpu_memory_total_bytes", "Device memory.",
         [](const auto& r) { return r.memory_total_bytes ? std::optional<double>(double(*r.memory_total_bytes)) : std::nullopt; }},
        {"tessel_gpu_sm_clock_hertz", "SM clock.", [](const auto& r) { return r.sm_clock_mhz ? std::optional<double>(*r.sm_clock_mhz * 1e6) : std::nullopt; }},
        {"tessel_gpu_memory_clock_hertz", "Memory clock.",
         [](const auto& r) { return r.memory_clock_mhz ? std::optional<double>(*r.memory_clock_mhz * 1e6) : std::nullopt; }},
        {"tessel_gpu_clock_event_reasons", "Why the clocks are held down (NVML's clock event reason bits).",
         [](const auto& r) { return r.clock_event_reasons ? std::optional<double>(double(*r.clock_event_reasons)) : std::nullopt; }},
        {"tessel_gpu_ecc_uncorrected_errors", "Uncorrected ECC errors since the driver loaded.",
         [](const auto& r) { return r.ecc_uncorrected ? std::optional<double>(double(*r.ecc_uncorrected)) : std::nullopt; }},
        {"tessel_gpu_lost", "1 when NVML says the GPU is lost (fallen off the bus), else 0.",
         [](const auto& r) { return tessel::nvml::available() ? std::optional<double>(r.lost ? 1 : 0) : std::nullopt; }},
    };
    // A GPU CUDA cannot read, or cannot see at all, still has its gauges (tessel_gpu_lost above
    // all), labelled with what NVML or CUDA could say of it.
    std::vector<std::pair<std::string, tessel::nvml::DeviceReading>> devices;
    for (Gpu& g : gpus()) {
        std::string escaped;
        for (char c : g.label()) escaped += c == '\n' ? std::string("\\n") : c == '"' || c == '\\' ? std::string("\\") + c : std::string(1, c);
        devices.emplace_back("{gpu=\"" + std::to_string(g.index) + "\",name=\"" + escaped + "\"}", std::move(g.reading));
    }
    // The two counts side by side: fewer CUDA devices than NVML GPUs is a GPU CUDA cannot use (lost
    // before the process began, or hidden by CUDA_VISIBLE_DEVICES).
    o << "# HELP tessel_cuda_devices Devices the CUDA runtime can use.\n# TYPE tessel_cuda_devices gauge\ntessel_cuda_devices "
      << tessel::device_count() << '\n';
    if (const auto n = tessel::nvml::device_count())
        o << "# HELP tessel_nvml_devices GPUs NVML lists (a lost one included).\n# TYPE tessel_nvml_devices gauge\ntessel_nvml_devices "
          << *n << '\n';
    for (const Metric& m : metrics) {
        o << "# HELP " << m.name << ' ' << m.help << "\n# TYPE " << m.name << " gauge\n";
        for (const auto& [labels, r] : devices)
            if (const auto v = m.value(r)) o << m.name << labels << ' ' << number(*v, *v == double(std::int64_t(*v)) ? 0 : 3) << '\n';
    }
    return o.str();
}

// Writes the exposition to `path` atomically (a temporary in the same directory, then rename), as
// the textfile collector requires; "-" writes to stdout. A symbolic link's target is replaced, not
// the link; a path that is not a regular file (a pipe, a terminal) is written in place.
inline void write_prometheus(const std::string& path) {
    namespace fs = std::filesystem;
    const std::string text = prometheus_text();
    if (path == "-") {
        std::fputs(text.c_str(), stdout);
        return;
    }
    std::error_code ec;
    const fs::file_status st = fs::status(path, ec);  // follows links
    if (fs::exists(st) && !fs::is_regular_file(st)) {
        if (fs::is_directory(st)) throw std::runtime_error("--prometheus: " + path + " is a directory");
        std::FILE* f = std::fopen(path.c_str(), "w");
        int error = f ? 0 : errno;
        if (f && std::fputs(text.c_str(), f) < 0) error = errno ? errno : EIO;
        if (f && std::fclose(f) != 0 && !error) error = errno ? errno : EIO;
        if (error) throw std::runtime_error("--prometheus: cannot write " + path + ": " + std::strerror(error));
        return;
    }
    fs::path target = path;  // the file a chain of links ends at (it may not exist yet)
    for (int hops = 0; fs::is_symlink(fs::symlink_status(target, ec)); ++hops) {
        if (hops == 40) throw std::runtime_error("--prometheus: " + path + ": too many levels of symbolic links");
        const fs::path next = fs::read_symlink(target, ec);
        target = next.is_absolute() ? next : target.parent_path() / next;
    }
    const std::string tmp = target.string() + ".tmp." + std::to_string(::getpid());
    std::FILE* f = std::fopen(tmp.c_str(), "w");
    if (!f) {  // the temporary file beside FILE, named too: its folder is what must be writable
        const std::string reason = std::strerror(errno);
        throw std::runtime_error("--prometheus: cannot write " + path + " (its temporary file " + tmp + ": " + reason + ")");
    }
    const bool ok = std::fputs(text.c_str(), f) >= 0;
    if (std::fclose(f) != 0 || !ok || std::rename(tmp.c_str(), target.string().c_str()) != 0) {
        const std::string reason = std::strerror(errno);
        std::remove(tmp.c_str());
        throw std::runtime_error("--prometheus: cannot write " + path + ": " + reason);
    }
}

}  // namespace info
