// NVML readings (lib/nvml.hpp) and the Monitor (monitor/monitor.hpp). On the sim: the stand-in's
// readings against the simulated devices and its documented model (memory from the allocator,
// utilisation from the streams' busy time, power and temperature from utilisation), the sampler's
// ring buffer and its clean stop, every policy fired by an injected reading (once per violation,
// again after it cleared), the leak watch, and bad options. On a GPU: NVML's readings are present
// and plausible, and the monitor samples them.
#include <tessel/monitor/monitor.hpp>
#include <tessel/tessel.hpp>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <thread>

#include "../support/device_array.hpp"

using tessel::Device;
using tessel::monitor::Alert;
using tessel::monitor::AlertKind;
using tessel::monitor::Monitor;
using tessel::monitor::Policy;

namespace {

#if defined(TESSEL_BACKEND_SIM)
// Keeps a stream of its own busy for `ms` with fills of a 16 MiB buffer, double-buffered: a batch
// is queued while the previous one runs, so the stream does not wait for the host (whose thread a
// loaded CI machine may not schedule at once).
void keep_busy(int ms) {
    const tessel::Stream s = tessel::Stream::create();
    tessel::Tensor<float> x = tessel::empty<float>({4 << 20}, {.stream = s.handle()});
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    std::optional<tessel::Event> previous;
    while (std::chrono::steady_clock::now() < end) {
        for (int i = 0; i < 16; ++i) tessel::rt::memset_async(x.data(), i, std::size_t(x.numel()) * sizeof(float), s.handle());
        tessel::Event queued;
        queued.record(s);
        if (previous) previous->synchronize();
        previous = std::move(queued);
    }
    s.synchronize();
}
#endif

}  // namespace

TEST_CASE("NVML readings: memory, processes, utilisation, power, temperature, clocks", "[monitor]") {
    if (tessel::device_count() == 0) return;
    if (!tessel::nvml::available()) {
        WARN("NVML unavailable: " << tessel::nvml::unavailable_reason());
        CHECK(!tessel::nvml::unavailable_reason().empty());
        CHECK(!tessel::nvml::read(Device{0}).temperature_c);  // absent, not an abort
        return;
    }
    const auto props = tessel::properties(Device{0});
    const tessel::Tensor<float> held = tessel::empty<float>({16 << 20});  // 64 MiB
    const tessel::nvml::DeviceReading r = tessel::nvml::read(Device{0});
    REQUIRE(r.memory_total_bytes);
    REQUIRE(r.memory_used_bytes);
    CHECK(*r.memory_used_bytes >= std::uint64_t(64) << 20);
    CHECK(*r.memory_used_bytes <= *r.memory_total_bytes);
    REQUIRE(r.temperature_c);
    REQUIRE(r.power_w);
    REQUIRE(r.sm_clock_mhz);
    CHECK(*r.sm_clock_mhz <= r.sm_clock_max_mhz.value_or(*r.sm_clock_mhz));
    REQUIRE(r.clock_event_reasons);
    // This process holds device memory, so NVML lists it.
    const auto procs = tessel::nvml::processes(Device{0});
    const auto me = std::find_if(procs.begin(), procs.end(), [](const auto& p) { return p.pid == unsigned(::getpid()); });
#if defined(TESSEL_BACKEND_SIM)
    REQUIRE(me != procs.end());
    CHECK(me->memory_bytes == *r.memory_used_bytes);  // every simulated byte is this process's
    CHECK(*r.memory_total_bytes == props.total_memory);
    // memory.used/free/reserved as nvidia-smi's (NVML's _v2 reading): the driver's reserve apart.
    // The older entry point counts it in used; a _v2 call with another struct version is refused.
    REQUIRE(r.memory_reserved_bytes);
    REQUIRE(r.memory_free_bytes);
    CHECK(*r.memory_reserved_bytes == *r.memory_total_bytes / 256);
    CHECK(*r.memory_used_bytes + *r.memory_free_bytes + *r.memory_reserved_bytes == *r.memory_total_bytes);
    {
        const auto& api = tessel::nvml::api();
        tessel::nvml::abi::nvmlDevice_t h = nullptr;
        REQUIRE(api.handle_by_index(0, &h) == tessel::nvml::abi::NVML_SUCCESS);
        tessel::nvml::abi::nvmlMemory_t v1{};
        REQUIRE(api.memory_info(h, &v1) == tessel::nvml::abi::NVML_SUCCESS);
        CHECK(v1.used == *r.memory_used_bytes + *r.memory_reserved_bytes);
        CHECK(v1.free == *r.memory_free_bytes);
        tessel::nvml::abi::nvmlMemory_v2_t v2{};
        v2.version = 1u << 24 | unsigned(sizeof v2);
        CHECK(api.memory_info_v2(h, &v2) == tessel::nvml::abi::NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    }
    CHECK(!r.pcie_generation);  // integrated: NVML_ERROR_NOT_SUPPORTED, so absent
    // The model: busy streams read as utilisation, power follows it, the temperature stays in range.
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
    (void)tessel::nvml::read(Device{0});  // opens a utilisation window
    keep_busy(300);
    const tessel::nvml::DeviceReading busy = tessel::nvml::read(Device{0});
    REQUIRE(busy.gpu_utilization_pct);
    CHECK(*busy.gpu_utilization_pct >= 50);
    CHECK(std::abs(*busy.power_w - (70 + 6.3 * *busy.gpu_utilization_pct)) <= 6.3);
    CHECK(*busy.power_limit_w == 700);
    CHECK(*busy.temperature_c >= 30);
    CHECK(*busy.temperature_c <= 72);
    CHECK((*busy.clock_event_reasons & tessel::nvml::gpu_idle) == 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(120));
    (void)tessel::nvml::read(Device{0});
    std::this_thread::sleep_for(std::chrono::milliseconds(120));
    const tessel::nvml::DeviceReading idle = tessel::nvml::read(Device{0});
    CHECK(*idle.gpu_utilization_pct < 5);
    CHECK((*idle.clock_event_reasons & tessel::nvml::gpu_idle) != 0);
    CHECK(tessel::nvml::clock_reason_names(tessel::nvml::gpu_idle | tessel::nvml::hw_thermal) ==
          std::vector<std::string>{"idle", "hardware thermal slowdown"});
#else
    if (me == procs.end()) WARN("NVML does not list this process (a container without the host's PID namespace?)");
    CHECK(*r.memory_total_bytes >= props.total_memory);
    CHECK(*r.temperature_c > 0);
    CHECK(*r.temperature_c < 120);
    CHECK(*r.power_w > 0);
    INFO("device 0: " << *r.temperature_c << " C, " << *r.power_w << " W, SM " << *r.sm_clock_mhz << " MHz");
#endif
}

#if defined(TESSEL_BACKEND_SIM)
TEST_CASE("A process's utilisation is its newest NVML sample, however many the driver holds", "[monitor]") {
    namespace sn = tessel::sim::nvml;
    const auto keep = tessel::zeros<float>({1 << 16});  // this process holds device memory, so NVML lists it
    auto mine = [] {
        const auto procs = tessel::nvml::processes(Device{0});
        const auto me = std::find_if(procs.begin(), procs.end(), [](const auto& p) { return p.pid == unsigned(::getpid()); });
        REQUIRE(me != procs.end());
        return *me;
    };
    sn::inject(0, {.utilization_pct = 10u});
    for (int i = 0; i < 20; ++i) {  // more samples than the first buffer holds; the sim returns them newest first
        (void)mine();
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    sn::inject(0, {.utilization_pct = 77u});
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    const auto p = mine();
    REQUIRE(p.sm_utilization_pct);
    CHECK(*p.sm_utilization_pct == 77);
    CHECK(p.memory_utilization_pct == 77u);
    sn::clear_injections();
}
#endif

TEST_CASE("Monitor samples on its thread into a ring buffer, summarises, and stops cleanly", "[monitor]") {
    if (tessel::device_count() == 0) return;
    Monitor m({.period = std::chrono::milliseconds(10), .history = 4});
    CHECK(!m.running());
    m.start();
    m.start();  // idempotent
    CHECK(m.running());
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    m.stop();
    m.stop();
    CHECK(!m.running());
    for (Device d : m.options().devices) {
        const auto h = m.history(d);
        CHECK(h.size() == 4);  // full, the oldest dropped
        for (std::size_t i = 1; i < h.size(); ++i) CHECK(h[i - 1].nvml.time <= h[i].nvml.time);
        const auto s = m.summary(d);
        CHECK(s.samples == 4);
        CHECK(s.allocated_bytes.count == 4);
        if (tessel::nvml::available()) {
            CHECK(s.temperature_c.count == 4);
            CHECK(s.temperature_c.min <= s.temperature_c.mean);
            CHECK(s.temperature_c.mean <= s.temperature_c.max);
        }
    }
    // A restarted monitor goes on filling the same history.
    const auto before = m.latest(Device{0});
    m.start();
    std::this_thread::sleep_for(std::chrono::milliseconds(40));
    m.stop();
    CHECK(m.latest(Device{0})->nvml.time > before->nvml.time);
}

#if defined(TESSEL_BACKEND_SIM)
TEST_CASE("Monitor policies fire once per violation on injected readings", "[monitor]") {
    namespace sn = tessel::sim::nvml;
    sn::clear_injections();
    Monitor m({.period = std::chrono::milliseconds(1000), .devices = {Device{0}}});
    std::vector<Alert> got;
    std::mutex got_m;
    auto keep = [&](const Alert& a) {
        std::lock_guard lk(got_m);
        got.push_back(a);
    };
    m.add_policy(Policy::temperature_above(85, keep));
    m.add_policy(Policy::power_above(650, keep));
    m.add_policy(Policy::throttling(keep));
    m.add_policy(Policy::ecc_uncorrected(keep));
    m.add_policy(Policy::xid(keep));
    m.add_policy(Policy::xid(keep, 48));  // only XID 48
    auto kinds = [&] {
        std::lock_guard lk(got_m);
        std::vector<AlertKind> k;
        for (const Alert& a : got) k.push_back(a.kind);
        got.clear();
        return k;
    };
    m.sample_now();  // healthy: nothing, and the ECC baseline (0)
    CHECK(kinds().empty());
    sn::inject(0, {.temperature_c = 90u});
    m.sample_now();
    {
        const auto a = m.alerts();
        REQUIRE(!a.empty());
        CHECK(a.back().message == "temperature 90 C on device 0, above 85 C");
        CHECK(a.back().value == 90);
        CHECK(a.back().threshold == 85);
    }
    CHECK(kinds() == std::vector<AlertKind>{AlertKind::temperature});
    m.sample_now();  // still above: no second alert
    CHECK(kinds().empty());
    sn::inject(0, {.temperature_c = 60u});
    m.sample_now();
    sn::inject(0, {.temperature_c = 95u});
    m.sample_now();  // above again after clearing: a new alert
    CHECK(kinds() == std::vector<AlertKind>{AlertKind::temperature});

    sn::inject(0, {.power_mw = 690000u, .clocks_event_reasons = 0x40ull | 0x1ull, .ecc_uncorrected = 2ull});
    m.sample_now();
    CHECK(kinds() == std::vector<AlertKind>{AlertKind::power, AlertKind::throttling, AlertKind::ecc_uncorrected});
    const auto alerts = m.alerts();
    CHECK_THAT(alerts[alerts.size() - 2].message, Catch::Contains("hardware thermal slowdown") && !Catch::Contains("idle"));
    CHECK(alerts.back().message == "2 uncorrected ECC error(s) on device 0 since monitoring began: the memory is failing");

    sn::inject_xid(0, 79);
    m.sample_now();
    CHECK(kinds() == std::vector<AlertKind>{AlertKind::xid});  // the any-XID policy, not the XID 48 one
    CHECK(m.alerts().back().message == "XID 79 on device 0");
    sn::inject_xid(0, 48);
    m.sample_now();
    CHECK(kinds() == std::vector<AlertKind>{AlertKind::xid, AlertKind::xid});

    // Memory in use above a fraction: any allocation crosses a tiny one.
    Monitor mem({.devices = {Device{0}}});
    mem.add_policy(Policy::memory_fraction_above(1e-6, keep));
    const tessel::Tensor<float> held = tessel::empty<float>({1 << 20});
    mem.sample_now();
    CHECK(kinds() == std::vector<AlertKind>{AlertKind::memory_fraction});

    // Throttling for any reason but idling: a mask with the top bits set (it went through a double,
    // and 2^64 converted back missed every bit).
    sn::clear_injections();
    Monitor any({.devices = {Device{0}}});
    any.add_policy(Policy::throttling(keep, ~std::uint64_t(tessel::nvml::gpu_idle)));
    any.sample_now();
    (void)kinds();
    sn::inject(0, {.clocks_event_reasons = 0x20ull});  // software thermal slowdown
    any.sample_now();
    CHECK(kinds() == std::vector<AlertKind>{AlertKind::throttling});
    sn::clear_injections();
}

// A GPU that falls off the bus: NVML answers NVML_ERROR_GPU_IS_LOST for its handle and every call.
// The reading says so (and why) instead of reading as a device that reports nothing, and the
// device_lost policy fires once per loss.
TEST_CASE("A lost GPU reads as lost, not as absent, and the device_lost policy fires once", "[monitor]") {
    namespace sn = tessel::sim::nvml;
    sn::clear_injections();
    Monitor m({.devices = {Device{0}}});
    std::vector<Alert> got;
    std::mutex got_m;
    m.add_policy(Policy::device_lost([&](const Alert& a) {
        std::lock_guard lk(got_m);
        got.push_back(a);
    }));
    auto count = [&] {
        std::lock_guard lk(got_m);
        return got.size();
    };
    const auto healthy = tessel::nvml::read(Device{0});
    CHECK_FALSE(healthy.lost);
    CHECK(healthy.error.empty());
    CHECK(healthy.temperature_c.has_value());
    m.sample_now();
    CHECK(count() == 0);

    sn::inject(0, {.lost = true});
    const auto lost = tessel::nvml::read(Device{0});
    CHECK(lost.lost);
    CHECK(lost.error == "nvmlDeviceGetTemperature: GPU is lost (15)");  // the handle, found before, is kept
    CHECK_FALSE(lost.temperature_c.has_value());
    CHECK_FALSE(lost.memory_used_bytes.has_value());
    m.sample_now();
    REQUIRE(count() == 1);
    CHECK(got[0].kind == AlertKind::device_lost);
    CHECK(got[0].device == 0);
    CHECK_THAT(got[0].message, Catch::StartsWith("device 0 is lost (nvmlDeviceGetTemperature: GPU is lost (15)): it has fallen off the bus"));
    m.sample_now();  // still lost: no second alert
    CHECK(count() == 1);

    sn::inject(0, {.lost = false});
    const auto back = tessel::nvml::read(Device{0});
    CHECK_FALSE(back.lost);
    CHECK(back.error.empty());
    CHECK(back.temperature_c.has_value());
    m.sample_now();
    CHECK(count() == 1);
    sn::inject(0, {.lost = true});
    m.sample_now();  // lost again: a new alert
    CHECK(count() == 2);
    sn::clear_injections();
}

TEST_CASE("NVML's own numbering reads the same GPUs, a lost one as lost", "[monitor]") {
    namespace sn = tessel::sim::nvml;
    sn::clear_injections();
    REQUIRE(tessel::nvml::device_count() == unsigned(tessel::device_count()));  // the sim numbers both alike
    const tessel::nvml::Index first{0};
    CHECK(tessel::nvml::name(first) == tessel::properties(Device{0}).name);
    tessel::Tensor<float> x = tessel::empty<float>({1 << 20});
    const auto by_cuda = tessel::nvml::read(Device{0});
    const auto by_nvml = tessel::nvml::read(first);
    CHECK(by_nvml.device == 0);
    CHECK(by_nvml.memory_used_bytes == by_cuda.memory_used_bytes);
    CHECK(by_nvml.memory_total_bytes == by_cuda.memory_total_bytes);
    const auto id = tessel::nvml::identity(Device{0});
    REQUIRE(id.uuid.has_value());
    CHECK(id.uuid->size() == 40);  // "GPU-" and a UUID's 36 characters, as nvidia-smi writes it
    CHECK(id.uuid->rfind("GPU-", 0) == 0);
    CHECK(id.pci_bus_id == "00000000:00:00.0");
    CHECK(tessel::nvml::identity(first).uuid == id.uuid);
    if (tessel::device_count() > 1) CHECK(tessel::nvml::identity(tessel::nvml::Index{1}).uuid != id.uuid);  // each its own
    CHECK(tessel::nvml::driver_version() == "sim");
    REQUIRE(tessel::nvml::processes(first).size() == 1);
    CHECK(tessel::nvml::processes(first)[0].pid == tessel::nvml::processes(Device{0})[0].pid);

    sn::inject(0, {.lost = true});
    const auto lost = tessel::nvml::read(first);
    CHECK(lost.lost);
    CHECK(lost.error == "nvmlDeviceGetHandleByIndex_v2: GPU is lost (15)");  // found afresh each time: the handle is refused
    CHECK_FALSE(lost.temperature_c.has_value());
    CHECK_FALSE(tessel::nvml::name(first).has_value());
    CHECK_FALSE(tessel::nvml::identity(first).uuid.has_value());
    CHECK(tessel::nvml::processes(first).empty());
    CHECK(tessel::nvml::device_count() == unsigned(tessel::device_count()));  // a lost GPU is still counted
    sn::clear_injections();
    CHECK_FALSE(tessel::nvml::read(tessel::nvml::Index{unsigned(tessel::device_count())}).error.empty());  // no such GPU: said
}
#endif

TEST_CASE("The leak watch fires when the allocator grows across N checkpoints with no drop", "[monitor]") {
    if (tessel::device_count() == 0) return;
    Monitor m({.devices = {Device{0}}});
    int fired = 0;
    m.add_policy(Policy::allocator_growth(3, [&](const Alert& a) {
        ++fired;
        CHECK_THAT(a.message, Catch::Contains("grew at each of the last 3 checkpoints"));
    }));
    std::vector<tessel::Tensor<float>> leak;
    m.checkpoint();
    for (int step = 0; step < 3; ++step) {
        CHECK(fired == 0);
        leak.push_back(tessel::empty<float>({1 << 18}));  // 1 MiB more each step
        m.checkpoint();
    }
    CHECK(fired == 1);  // three increases in a row
    leak.push_back(tessel::empty<float>({1 << 18}));
    m.checkpoint();
    CHECK(fired == 1);  // still growing: the same violation
    leak.clear();
    m.checkpoint();  // a drop clears it
    for (int step = 0; step < 3; ++step) {
        leak.push_back(tessel::empty<float>({1 << 18}));
        m.checkpoint();
    }
    CHECK(fired == 2);
}

TEST_CASE("What a callback throws on the monitor's thread is kept and rethrown by stop()", "[monitor]") {
    if (tessel::device_count() == 0) return;
    using tessel::testing::message;
    std::atomic<int> calls{0};
    Monitor m({.period = std::chrono::milliseconds(2), .devices = {Device{0}}});
    // Below 0 C never holds and 0 C always does: the policy fires at the first sample.
    m.add_policy(Policy::temperature_above(0, [&](const Alert&) {
        ++calls;
        throw std::runtime_error("a callback failed");
    }));
    m.start();
    while (calls.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    while (m.history(Device{0}).size() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // it kept sampling
    CHECK_THROWS_WITH(m.stop(), Catch::Contains("a callback failed"));
    CHECK(!m.running());
    m.stop();  // the failure was handed over once

    // stop() from a callback: an error on that thread, handed to the stop() of the caller.
    Monitor self({.period = std::chrono::milliseconds(2), .devices = {Device{0}}});
    self.add_policy(Policy::temperature_above(0, [&](const Alert&) { self.stop(); }));
    self.start();
    while (self.history(Device{0}).size() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    CHECK_THAT(message([&] { self.stop(); }), Catch::Contains("Monitor::stop: called on the monitor's own thread"));
}

TEST_CASE("A throwing callback keeps no other policy's callback from running, and a new run forgets the old failure", "[monitor]") {
    if (tessel::device_count() == 0) return;
    // Both policies hold at every sample (0 C, 0 W): each fires once, at the first sample, where the
    // temperature's callback throws before the power's would run.
    std::atomic<int> power_calls{0};
    Monitor m({.period = std::chrono::milliseconds(2), .devices = {Device{0}}});
    m.add_policy(Policy::temperature_above(0, [](const Alert&) { throw std::runtime_error("the first run's failure"); }));
    m.add_policy(Policy::power_above(0, [&](const Alert&) { ++power_calls; }));
    m.start();
    while (m.history(Device{0}).size() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    m.halt();  // the failure is kept
    CHECK(power_calls.load() == 1);
    // A second run whose callbacks no longer fire (both policies still active): its stop() has
    // nothing to report.
    m.start();
    while (m.history(Device{0}).size() < 6) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    CHECK_NOTHROW(m.stop());
}

TEST_CASE("A callback may ask whether the monitor runs while another thread stops it", "[monitor]") {
    if (tessel::device_count() == 0) return;
    std::atomic<bool> in_callback{false}, asked{false};
    Monitor m({.period = std::chrono::milliseconds(2), .devices = {Device{0}}});
    m.add_policy(Policy::temperature_above(0, [&](const Alert&) {
        in_callback = true;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));  // stop() is waiting for this thread now
        asked = m.running();
    }));
    m.start();
    while (!in_callback.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const auto t0 = std::chrono::steady_clock::now();
    m.stop();  // joined the callback's thread: no deadlock with running()
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
    CHECK(asked.load());  // still running while its callback ran
    CHECK_FALSE(m.running());
}

TEST_CASE("Monitor refuses bad options with a message naming them", "[monitor]") {
    if (tessel::device_count() == 0) return;
    using tessel::testing::message;
    CHECK_THAT(message([] { Monitor m({.period = std::chrono::milliseconds(0)}); }), Catch::Contains("period must be positive"));
    CHECK_THAT(message([] { Monitor m({.devices = {Device{tessel::device_count()}}}); }), Catch::Contains("does not exist"));
    CHECK_THAT(message([] {
                   Monitor m;
                   m.add_policy(Policy::temperature_above(80, nullptr));
               }),
               Catch::Contains("temperature policy needs a callback"));
    CHECK_THAT(message([] {
                   Monitor m;
                   m.add_policy(Policy::allocator_growth(0, [](const Alert&) {}));
               }),
               Catch::Contains("the leak watch needs 1 to 1023 checkpoints, not 0"));
    CHECK_THAT(message([] {  // 1024 checkpoints are kept: a policy over 1024 could never fire
                   Monitor m;
                   m.add_policy(Policy::allocator_growth(1024, [](const Alert&) {}));
               }),
               Catch::Contains("not 1024"));
    CHECK_THAT(message([] { Monitor m({.period = std::chrono::milliseconds::max()}); }), Catch::Contains("at most a day"));
    CHECK_THAT(message([] { Monitor m({.devices = {Device{0}, Device{0}}}); }), Catch::Contains("device 0 is listed twice"));
}
