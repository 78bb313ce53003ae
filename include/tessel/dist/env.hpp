// The environment of one rank of a multi-process job, as torch.distributed's env:// reads it:
// MASTER_ADDR and MASTER_PORT (rank 0's store), RANK and WORLD_SIZE (this process among all),
// LOCAL_RANK and LOCAL_WORLD_SIZE (among the processes of this host; LOCAL_RANK picks the GPU).
// tessel-run, torchrun, or a cluster launcher set them. Anything missing or inconsistent is an
// InvalidArgument naming the variable and what was found, not a hang at the rendezvous.
#pragma once

#include <cerrno>
#include <cstdlib>
#include <string>

#include "../core/error.hpp"

namespace tessel::dist {

// Where this process stands in its job: read by Environment::from_env().
struct Environment {
    std::string master_addr = "127.0.0.1";
    int master_port = 0;
    int rank = 0, world_size = 1;
    int local_rank = 0, local_world_size = 1;

    static Environment from_env() {
        Environment e;
        const char* addr = std::getenv("MASTER_ADDR");
        e.master_addr = addr && *addr ? addr : "127.0.0.1";  // torchrun's default for one host
        e.master_port = int(integer("MASTER_PORT", true, 0));
        e.world_size = int(integer("WORLD_SIZE", true, 0));
        e.rank = int(integer("RANK", true, 0));
        e.local_rank = int(integer("LOCAL_RANK", false, e.rank));
        e.local_world_size = int(integer("LOCAL_WORLD_SIZE", false, e.world_size));
        require(e.master_port >= 1 && e.master_port <= 65535, "MASTER_PORT=", e.master_port, " is not a TCP port (1-65535)");
        require(e.world_size >= 1, "WORLD_SIZE=", e.world_size, " must be at least 1");
        require(e.rank >= 0 && e.rank < e.world_size, "RANK=", e.rank, " must be in [0, WORLD_SIZE=", e.world_size, ")");
        require(e.local_world_size >= 1 && e.local_world_size <= e.world_size, "LOCAL_WORLD_SIZE=", e.local_world_size,
                " must be in [1, WORLD_SIZE=", e.world_size, "]");
        require(e.local_rank >= 0 && e.local_rank < e.local_world_size, "LOCAL_RANK=", e.local_rank, " must be in [0, LOCAL_WORLD_SIZE=",
                e.local_world_size, ")");
        return e;
    }

private:
    static long long integer(const char* name, bool required, long long fallback) {
        const char* v = std::getenv(name);
        if (!v || !*v) {
            require(!required, name, " is not set: a multi-process job needs MASTER_PORT, RANK and WORLD_SIZE (MASTER_ADDR defaults "
                                     "to 127.0.0.1, LOCAL_RANK to RANK); "
                                     "start it with `tessel-run -n N program` (or torchrun), or set them");
            return fallback;
        }
        char* end = nullptr;
        errno = 0;
        const long long x = std::strtoll(v, &end, 10);
        require(errno == 0 && end && *end == '\0' && x >= -(1LL << 31) && x < (1LL << 31), name, "='", v, "' is not an integer");
        return x;
    }
};

}  // namespace tessel::dist
