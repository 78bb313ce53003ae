// Settings of the caching device allocator, from TESSEL_ALLOC_CONF (read once) and set_memory_fraction.
//   TESSEL_ALLOC_CONF="max_split_size_mb:256,backend:native"
#pragma once

#include <cstddef>
#include <limits>
#include <string>

#include "../core/linkage.hpp"

#if TESSEL_DEFINE_RUNTIME
#include <cstdlib>
#include <sstream>

#include "../core/env.hpp"
#include "../core/error.hpp"
#endif

namespace tessel::memory {

// Which allocator serves device memory.
enum class Backend {
    native,  // tessel's caching allocator over cudaMalloc (the default)
    async,   // the driver's stream-ordered pools (cudaMallocAsync)
};

// The allocator's tunables (the defaults follow PyTorch's CUDACachingAllocator).
struct AllocatorConfig {
    // Blocks at least this large are never split for smaller requests, so big cached blocks are not
    // carved into slivers; unlimited by default.
    std::size_t max_split_size = std::numeric_limits<std::size_t>::max();
    Backend backend = Backend::native;

    static AllocatorConfig parse(const std::string& text);
    static const AllocatorConfig& from_env();
};

#if TESSEL_DEFINE_RUNTIME
TESSEL_API AllocatorConfig AllocatorConfig::parse(const std::string& text) {
    AllocatorConfig c;
    std::istringstream in(text);
    std::string item;
    while (std::getline(in, item, ',')) {
        if (item.empty()) continue;
        const auto colon = item.find(':');
        require(colon != std::string::npos, "TESSEL_ALLOC_CONF: '", item, "' is not key:value (e.g. max_split_size_mb:256)");
        const std::string key = item.substr(0, colon), value = item.substr(colon + 1);
        if (key == "max_split_size_mb") {
            // More than one 20 MiB large-pool segment (PyTorch: "must be > 20"): at 20 those segments
            // would count as oversize and be refused to the 1-10 MiB requests they are made for, so
            // each such request would take a new one. At most what the int64 statistics hold in bytes.
            c.max_split_size = std::size_t(env::parse_integer("TESSEL_ALLOC_CONF max_split_size_mb", value, 21,
                                                              std::numeric_limits<std::int64_t>::max() >> 20)) << 20;
        } else if (key == "backend") {
            if (value == "native") c.backend = Backend::native;
            else if (value == "async" || value == "cudaMallocAsync") c.backend = Backend::async;
            else fail<InvalidArgument>("TESSEL_ALLOC_CONF: backend must be native or async, not '", value, "'");
        } else {
            fail<InvalidArgument>("TESSEL_ALLOC_CONF: unknown key '", key, "' (known: max_split_size_mb, backend)");
        }
    }
    return c;
}

TESSEL_API const AllocatorConfig& AllocatorConfig::from_env() {
    static const AllocatorConfig c = [] {
        const char* v = std::getenv("TESSEL_ALLOC_CONF");
        return v ? parse(v) : AllocatorConfig{};
    }();
    return c;
}
#endif  // TESSEL_DEFINE_RUNTIME

}  // namespace tessel::memory
