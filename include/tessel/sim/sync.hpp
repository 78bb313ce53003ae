// The synchronisation rules of one simulated block: who waits at which barrier or warp collective,
// when a group is complete, what each participant receives, and the diagnostics for barriers that
// only part of a block reaches. Shared by the fiber executor and the OS-thread (TSan) executor.
#pragma once

#include "qualifiers.hpp"

#include <vector_types.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <source_location>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/context/detail/fcontext.hpp>

#include "fiber.hpp"
#include "tsan_order.hpp"

namespace tessel::sim {

// A kernel misbehaved in a way CUDA would hang on, corrupt, or leave undefined.
class KernelFault : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// Which synchronisation a thread is waiting at.
enum class SyncKind : std::uint8_t {
    syncthreads, syncthreads_count, syncthreads_and, syncthreads_or,  // block barriers
    syncwarp, shfl_idx, shfl_up, shfl_down, shfl_xor, ballot, all, any,  // warp collectives
    activemask,  // the lanes of the warp that reach this point together
    warp_matrix  // a .sync.aligned matrix instruction of the whole warp (mma.sync, ldmatrix): WarpMatrixOp
};

inline bool is_block_barrier(SyncKind k) { return k <= SyncKind::syncthreads_or; }

inline const char* sync_name(SyncKind k) {
    switch (k) {
        case SyncKind::syncthreads: return "__syncthreads";
        case SyncKind::syncthreads_count: return "__syncthreads_count";
        case SyncKind::syncthreads_and: return "__syncthreads_and";
        case SyncKind::syncthreads_or: return "__syncthreads_or";
        case SyncKind::syncwarp: return "__syncwarp";
        case SyncKind::shfl_idx: return "__shfl_sync";
        case SyncKind::shfl_up: return "__shfl_up_sync";
        case SyncKind::shfl_down: return "__shfl_down_sync";
        case SyncKind::shfl_xor: return "__shfl_xor_sync";
        case SyncKind::ballot: return "__ballot_sync";
        case SyncKind::all: return "__all_sync";
        case SyncKind::any: return "__any_sync";
        case SyncKind::activemask: return "__activemask";
        case SyncKind::warp_matrix: return "a warp-wide matrix instruction";
    }
    return "?";
}

enum class ThreadState : std::uint8_t { not_started, ready, running, waiting, exited };

// One lane's part of a warp-wide matrix instruction (sim/warp_matrix.hpp derives the operands of
// each instruction from it). The lane passes its address as the collective's value; once all 32
// lanes wait at the same instruction, `compute` runs once with every lane's record and writes each
// lane's results into its record. It throws std::invalid_argument on misuse (a misaligned or
// non-shared address), which the block reports as a fault at the instruction's source line.
struct WarpMatrixOp {
    const char* name = "";                       // the PTX spelling, for messages
    void (*compute)(WarpMatrixOp* const* lanes) = nullptr;  // lanes[0..31]
};

// A cp.async issued by one thread and not yet complete: its destination, and the source bytes as
// they were when it was issued (the sim completes the copy when a wait covers its group).
struct AsyncCopy {
    unsigned char* dst = nullptr;
    unsigned bytes = 0;
    unsigned char data[16]{};
};

// One CUDA thread of the block being simulated, and what it is waiting at.
struct SimThread {
    uint3 idx{};
    unsigned tid = 0, lane = 0, warp = 0;
    ThreadState state = ThreadState::not_started;
    // The pending synchronisation (valid while state == waiting).
    SyncKind kind = SyncKind::syncthreads;
    std::source_location site;
    unsigned mask = 0;
    int arg = 0, width = 32, pred = 0;
    std::uint64_t value = 0;
    std::uint64_t result = 0;  // what the collective hands back
    // cp.async state: copies issued and not complete (oldest first), and where each committed group
    // ends in that list (oldest first); copies after the last end belong to no group yet.
    std::vector<AsyncCopy> async_copies;
    std::vector<std::size_t> async_groups;
    // Fiber executor only.
    boost::context::detail::fcontext_t fctx = nullptr;
    FiberStack stack{};
    void* asan_fake = nullptr;
};

inline bool same_site(const std::source_location& a, const std::source_location& b) {
    return a.line() == b.line() && a.column() == b.column() && std::strcmp(a.file_name(), b.file_name()) == 0;
}

inline std::string site_text(const std::source_location& s) {
    return std::string(s.file_name()) + ":" + std::to_string(s.line());
}

// Told of each warp collective as its group completes, before any member's result is computed: the
// OS-thread executor orders the members for ThreadSanitizer there (tsan_order.hpp). A block barrier
// needs no word: every thread orders itself through the barrier's token.
class GroupObserver {
public:
    virtual void warp_group_complete(unsigned first_tid, unsigned lanes) = 0;

protected:
    ~GroupObserver() = default;
};

// The barrier bookkeeping of one block. Not thread-safe: the OS-thread executor holds its lock.
class BlockSync {
public:
    void observe(GroupObserver* o) { observer_ = o; }

    void reset(std::vector<SimThread>& threads, const std::string* kernel, uint3 block) {
        t_ = &threads;
        n_ = unsigned(threads.size());
        waiting_block_ = 0;
        waiting_warp_ = 0;
        exited_ = 0;
        kernel_ = kernel;
        block_ = block;
        // Lanes past the end of a partial last warp never exist; they count as exited from the start.
        gone_.assign((n_ + 31) / 32, 0u);
        if (n_ % 32) gone_.back() = ~((1u << (n_ % 32)) - 1u);
        waiting_lanes_.assign(gone_.size(), 0u);
        collective_lanes_.assign(gone_.size(), 0u);
        activemask_lanes_.assign(gone_.size(), 0u);
    }

    // "sim: kernel K, block (x,y,z)": the context every fault message starts with.
    std::string where() const {
        return concat("sim: kernel ", kernel_ ? *kernel_ : std::string("?"), ", block (", block_.x, ',', block_.y, ',', block_.z, ")");
    }

    unsigned exited() const { return exited_; }
    unsigned size() const { return n_; }

    // Thread `self` (its kind/site/mask/value fields filled in) arrives at a synchronisation.
    // Threads the arrival releases are appended to `released` (state set to ready).
    void arrive(SimThread& self, std::vector<unsigned>& released) {
        self.state = ThreadState::waiting;
        const unsigned bit = 1u << self.lane;
        waiting_lanes_[self.warp] |= bit;
        if (is_block_barrier(self.kind)) {
            ++waiting_block_;
            if (waiting_block_ + exited_ == n_) release_block(released);
        } else {
            ++waiting_warp_;
            if (self.kind == SyncKind::activemask) {
                activemask_lanes_[self.warp] |= bit;
            } else {
                collective_lanes_[self.warp] |= bit;
                check_warp_mask(self);
                if (self.kind == SyncKind::warp_matrix && gone_[self.warp] != 0) partial_warp(self);
                try_release_warp(self, released);
            }
        }
        if (waiting_warp_ != 0) try_release_activemask(self.warp, released);
    }

    // Thread `self` returned from the kernel. CUDA's warp collectives leave exited lanes out, so an
    // exit can complete a group that was waiting for this lane.
    void exit(SimThread& self, std::vector<unsigned>& released) {
        self.state = ThreadState::exited;
        ++exited_;
        gone_[self.warp] |= 1u << self.lane;
        if ((waiting_block_ | waiting_warp_) != 0) check_exit(self, released);  // rare: someone may wait for it
    }

private:
    [[gnu::noinline]] void check_exit(const SimThread& self, std::vector<unsigned>& released) {
        if (waiting_block_ > 0 && waiting_block_ + exited_ == n_) divergent_block_barrier();
        const unsigned base = self.warp * 32;
        for (unsigned l = 0; l < 32 && waiting_warp_ != 0; ++l) {
            SimThread* o = base + l < n_ ? &(*t_)[base + l] : nullptr;
            if (o && o->state == ThreadState::waiting && !is_block_barrier(o->kind) && o->kind != SyncKind::activemask &&
                (o->mask >> self.lane & 1u))
                try_release_warp(*o, released);
        }
        if (waiting_warp_ != 0) try_release_activemask(self.warp, released);
    }

public:
    // Nothing can run and not every thread has exited: describe who waits where, and throw.
    [[noreturn]] void deadlock() {
        std::ostringstream os;
        os << "no thread can proceed (a barrier or warp collective that part of the block never reaches):";
        unsigned i = 0;
        while (i < n_) {
            unsigned j = i + 1;
            while (j < n_ && same_wait((*t_)[i], (*t_)[j])) ++j;
            os << "\n    threads " << i;
            if (j - 1 > i) os << '-' << (j - 1);
            os << ": " << describe((*t_)[i]);
            i = j;
        }
        fault(os.str());
    }

    [[noreturn]] void fault(const std::string& what) const {
        throw KernelFault(where() + ": " + what);
    }

private:
    template <class... P>
    static std::string concat(const P&... p) {
        std::ostringstream os;
        (os << ... << p);
        return os.str();
    }
    static std::string hex(unsigned m) {
        std::ostringstream os;
        os << "0x" << std::hex << m;
        return os.str();
    }
    static bool same_wait(const SimThread& a, const SimThread& b) {
        if (a.state != b.state) return false;
        if (a.state != ThreadState::waiting) return true;
        return a.kind == b.kind && same_site(a.site, b.site) && (is_block_barrier(a.kind) || a.mask == b.mask);
    }
    static std::string describe(const SimThread& t) {
        switch (t.state) {
            case ThreadState::exited: return "exited";
            case ThreadState::not_started: return "not started";
            case ThreadState::ready:
            case ThreadState::running: return "running";
            case ThreadState::waiting: break;
        }
        std::string s = std::string("wait at ") + sync_name(t.kind);
        if (!is_block_barrier(t.kind)) s += "(mask " + hex(t.mask) + ")";
        return s + " " + site_text(t.site);
    }

    // A .aligned instruction needs all 32 lanes; some have exited (or the block's last warp is short).
    [[noreturn]] void partial_warp(const SimThread& self) const {
        const auto* op = reinterpret_cast<const WarpMatrixOp*>(self.value);
        fault(concat(op->name, " at ", site_text(self.site), " executed by a partial warp: warp ", self.warp, " has lanes ",
                     hex(gone_[self.warp]), " exited or absent (a .sync.aligned instruction must be executed by all 32 "
                     "lanes of the warp, under a condition every lane evaluates the same)"));
    }

    // All 32 lanes wait at a warp-wide matrix instruction: they must be at the same one.
    void run_warp_matrix(unsigned base) const {
        WarpMatrixOp* lanes[32];
        const SimThread& first = (*t_)[base];
        for (unsigned l = 0; l < 32; ++l) {
            const SimThread& o = (*t_)[base + l];
            if (!same_site(o.site, first.site))
                fault(concat("lanes of warp ", first.warp, " at different warp-wide matrix instructions: lane 0 at ",
                             reinterpret_cast<const WarpMatrixOp*>(first.value)->name, " ", site_text(first.site), ", lane ", l,
                             " at ", reinterpret_cast<const WarpMatrixOp*>(o.value)->name, " ", site_text(o.site)));
            lanes[l] = reinterpret_cast<WarpMatrixOp*>(o.value);
        }
        try {
            const tsan::AccessesVisible checked;  // the shared-memory reads made for the lanes are the kernel's
            lanes[0]->compute(lanes);
        } catch (const std::invalid_argument& e) {
            fault(concat(lanes[0]->name, " at ", site_text(first.site), ": ", e.what()));
        }
    }

    void check_warp_mask(const SimThread& self) const {
        if (!(self.mask >> self.lane & 1u))
            fault(concat(sync_name(self.kind), " at ", site_text(self.site), " called by thread ", self.tid, " (lane ",
                         self.lane, ") with mask ", hex(self.mask), " that does not include the calling lane"));
        if (self.kind == SyncKind::warp_matrix && self.mask != 0xffffffffu)
            fault(concat(reinterpret_cast<const WarpMatrixOp*>(self.value)->name, " at ", site_text(self.site),
                         " with mask ", hex(self.mask), ": the instruction is .aligned, all 32 lanes take part"));
        if (self.kind >= SyncKind::shfl_idx && self.kind <= SyncKind::shfl_xor &&
            (self.width < 1 || self.width > 32 || (self.width & (self.width - 1)) != 0))
            fault(concat(sync_name(self.kind), " at ", site_text(self.site), ": width ", self.width,
                         " is not a power of two between 1 and 32"));
    }

    void release_block(std::vector<unsigned>& released) {
        if (exited_ > 0) divergent_block_barrier();
        const SimThread& first = (*t_)[0];
        int count = 0;
        for (unsigned i = 0; i < n_; ++i) {
            const SimThread& o = (*t_)[i];
            if (o.kind != first.kind || !same_site(o.site, first.site))
                fault(concat("threads wait at different barriers: thread 0 at ", sync_name(first.kind), " ",
                             site_text(first.site), ", thread ", i, " at ", sync_name(o.kind), " ",
                             site_text(o.site)));
            count += o.pred != 0;
        }
        std::uint64_t r = 0;
        switch (first.kind) {
            case SyncKind::syncthreads_count: r = std::uint64_t(count); break;
            case SyncKind::syncthreads_and: r = count == int(n_); break;
            case SyncKind::syncthreads_or: r = count > 0; break;
            default: break;
        }
        for (unsigned i = 0; i < n_; ++i) {
            (*t_)[i].result = r;
            (*t_)[i].state = ThreadState::ready;
            released.push_back(i);
        }
        waiting_block_ = 0;
        std::fill(waiting_lanes_.begin(), waiting_lanes_.end(), 0u);  // every thread waited here
    }

    [[noreturn]] void divergent_block_barrier() const {
        const SimThread* w = nullptr;
        std::string exited;
        unsigned at_w = 0;
        for (unsigned i = 0; i < n_; ++i) {
            const SimThread& o = (*t_)[i];
            if (o.state == ThreadState::waiting && is_block_barrier(o.kind) && !w) w = &o;
            if (w && o.state == ThreadState::waiting && o.kind == w->kind && same_site(o.site, w->site)) ++at_w;
            if (o.state == ThreadState::exited && exited.size() < 60) exited += (exited.empty() ? "" : ",") + std::to_string(i);
        }
        fault(concat("divergent ", sync_name(w->kind), " at ", site_text(w->site), " (in ", w->site.function_name(),
                     "): ", at_w, " of ", n_, " threads wait there while ", exited_,
                     " exited without reaching it (e.g. threads ", exited, "); every thread of a block must reach the same barrier"));
    }

    // Releases the group `self` waits in once every lane of its mask that has not exited waits in the
    // same collective with the same mask (CUDA's rule: exited lanes are left out). The lane masks
    // answer "not yet" without reading the lanes: a warp's first 31 arrivals cost O(1), the last one
    // reads the 32 lanes once (the scan per arrival made warp collectives quadratic in the lanes).
    void try_release_warp(SimThread& self, std::vector<unsigned>& released) {
        const unsigned base = self.warp * 32;
        const unsigned group = self.mask & ~gone_[self.warp];
        if ((collective_lanes_[self.warp] & group) != group) return;
        const SyncKind kind = self.kind;
        const unsigned mask = self.mask;
        for (unsigned l = 0; l < 32; ++l) {
            if (!(group >> l & 1u)) continue;
            const SimThread& o = (*t_)[base + l];
            if (o.state != ThreadState::waiting || o.kind != kind || o.mask != mask) return;
        }
        if (observer_) observer_->warp_group_complete(base, group);
        if (kind == SyncKind::warp_matrix) {
            if (gone_[self.warp] != 0) partial_warp(self);  // a lane exited while the others waited
            run_warp_matrix(base);
        }
        for (unsigned l = 0; l < 32; ++l)
            if (group >> l & 1u) (*t_)[base + l].result = collective_result((*t_)[base + l], base, group);
        for (unsigned l = 0; l < 32; ++l) {
            if (!(group >> l & 1u)) continue;
            (*t_)[base + l].state = ThreadState::ready;
            released.push_back(base + l);
            --waiting_warp_;
        }
        collective_lanes_[self.warp] &= ~group;
        waiting_lanes_[self.warp] &= ~group;
    }

    // __activemask: once no live lane of the warp is still running, the lanes waiting at one
    // __activemask call site are the ones that arrived there together; each receives that set.
    void try_release_activemask(unsigned warp, std::vector<unsigned>& released) {
        const unsigned base = warp * 32;
        const unsigned arrived = activemask_lanes_[warp];
        if (arrived == 0 || (waiting_lanes_[warp] | gone_[warp]) != ~0u) return;
        for (unsigned l = 0; l < 32; ++l) {
            if (!(arrived >> l & 1u)) continue;
            SimThread& o = (*t_)[base + l];
            unsigned together = 0;
            for (unsigned k = 0; k < 32; ++k)
                if ((arrived >> k & 1u) && same_site((*t_)[base + k].site, o.site)) together |= 1u << k;
            o.result = together;
        }
        for (unsigned l = 0; l < 32; ++l) {
            if (!(arrived >> l & 1u)) continue;
            (*t_)[base + l].state = ThreadState::ready;
            released.push_back(base + l);
            --waiting_warp_;
        }
        activemask_lanes_[warp] = 0;
        waiting_lanes_[warp] &= ~arrived;
    }

    std::uint64_t collective_result(const SimThread& me, unsigned base, unsigned group) const {
        const unsigned l = me.lane, mask = group;
        const unsigned w = unsigned(me.width);
        auto from = [&](unsigned src) -> std::uint64_t {
            // Reading a lane that is not taking part (outside the mask, or exited) is undefined in CUDA;
            // the sim hands back all-one bits (NaN, -1) so the read shows.
            if (src >= 32 || !(mask >> src & 1u)) return ~std::uint64_t(0);
            return (*t_)[base + src].value;
        };
        switch (me.kind) {
            case SyncKind::shfl_idx: return from((l & ~(w - 1)) + (unsigned(me.arg) & (w - 1)));
            case SyncKind::shfl_up: return (l & (w - 1)) >= unsigned(me.arg) ? from(l - unsigned(me.arg)) : me.value;
            case SyncKind::shfl_down: return (l & (w - 1)) + unsigned(me.arg) < w ? from(l + unsigned(me.arg)) : me.value;
            case SyncKind::shfl_xor: {
                const unsigned src = l ^ unsigned(me.arg);
                return (src & ~(w - 1)) > (l & ~(w - 1)) ? me.value : from(src);
            }
            case SyncKind::ballot:
            case SyncKind::all:
            case SyncKind::any: {
                std::uint64_t bits = 0;
                for (unsigned i = 0; i < 32; ++i)
                    if ((mask >> i & 1u) && (*t_)[base + i].pred) bits |= 1ull << i;
                if (me.kind == SyncKind::ballot) return bits;
                if (me.kind == SyncKind::all) return bits == mask;
                return bits != 0;
            }
            default: return 0;
        }
    }

    std::vector<SimThread>* t_ = nullptr;
    GroupObserver* observer_ = nullptr;
    std::vector<unsigned> gone_;  // per warp: lanes exited or never present
    // Per warp, lanes whose state is `waiting`: at anything; at a warp collective other than
    // __activemask; at __activemask.
    std::vector<unsigned> waiting_lanes_, collective_lanes_, activemask_lanes_;
    unsigned n_ = 0, waiting_block_ = 0, waiting_warp_ = 0, exited_ = 0;
    const std::string* kernel_ = nullptr;  // the launch's name, in kernel_name()'s cache (never freed)
    uint3 block_{};
};

}  // namespace tessel::sim
