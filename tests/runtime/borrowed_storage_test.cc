// Start-up creations refused for storage that is only borrowed (ADR 0290): a sizing probe
// (Bus::plan_stream_sizes) reserves most of the server's storage for a moment, and a KV
// bucket, the dead-letter stream or another instance's plan made meanwhile was refused and
// start-up failed. A stream that reserves all of a small server stands in for the probe:
// held for a moment, everything waits for it and then succeeds; held for good, each call
// reports the shortage with its usual message within the bounded wait.
#include <catch2/catch.hpp>
#include <nats/nats.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include "runtime/base/log.h"
#include "runtime/nats/bus.h"
#include "runtime/nats/nats_kv.h"
#include "runtime/nats/nats_status.h"
#include "tests/support/nats_conn.h"
#include "tests/support/support.h"

using namespace std::chrono_literals;
using weir::Bus;
using weir::BusOptions;
using weir::NatsKv;
using weir::NatsKvOptions;
using weir::Status;
using weir::cluster::testing::NatsConn;
using weir::testing::NatsServer;

namespace {

constexpr int64_t kStore = 64LL << 20;

// A stream reserving `bytes` of the server's file storage, like a probe; deleted by drop().
class Hog {
 public:
  Hog(natsConnection* nc, int64_t bytes) {
    REQUIRE(natsConnection_JetStream(&js_, nc, nullptr) == NATS_OK);
    jsStreamConfig cfg;
    jsStreamConfig_Init(&cfg);
    cfg.Name = "hog";
    const char* subjects[] = {"hog.x"};
    cfg.Subjects = subjects;
    cfg.SubjectsLen = 1;
    cfg.Storage = js_FileStorage;
    cfg.MaxBytes = bytes;
    jsStreamInfo* si = nullptr;
    REQUIRE(js_AddStream(&si, js_, &cfg, nullptr, nullptr) == NATS_OK);
    jsStreamInfo_Destroy(si);
  }
  ~Hog() { jsCtx_Destroy(js_); }
  Hog(const Hog&) = delete;
  Hog& operator=(const Hog&) = delete;
  void drop() { REQUIRE(js_DeleteStream(js_, "hog", nullptr, nullptr) == NATS_OK); }

 private:
  jsCtx* js_ = nullptr;
};

std::unique_ptr<Bus> connect(const NatsServer& nats) {
  BusOptions o;
  o.url = nats.url();
  o.name = "borrowed-storage-test";
  o.stream_max_bytes = 1LL << 30;  // more than the server has: the plan probes
  auto bus = Bus::connect(o);
  REQUIRE(bus);
  return std::move(bus.value());
}

NatsKvOptions state_bucket() {
  NatsKvOptions o;
  o.bucket = "weir_state";
  return o;
}

// The three start-up calls that met a probe, each on its own thread and, like two
// instances, on two Bus connections.
struct Startup {
  std::future<Status> bucket, dlq, plan;
  Startup(natsConnection* nc, Bus& one, Bus& two) {
    bucket = std::async(std::launch::async, [nc] {
      auto kv = NatsKv::open(nc, state_bucket());
      return kv ? Status::ok() : kv.status();
    });
    dlq = std::async(std::launch::async, [&one] { return one.ensure_dlq_stream(0ms, 0); });
    plan = std::async(std::launch::async, [&two] { return two.plan_stream_sizes({"weir_a", "weir_b"}); });
  }
  bool any_done() const {
    for (const auto* f : {&bucket, &dlq, &plan}) {
      if (f->wait_for(0s) == std::future_status::ready) return true;
    }
    return false;
  }
};

// A small server, two Bus connections (two instances) and the whole store taken by a Hog.
struct Taken {
  NatsServer nats{"", kStore};
  NatsConn conn{nats.url()};
  std::unique_ptr<Bus> one = connect(nats);
  std::unique_ptr<Bus> two = connect(nats);
  Hog hog{conn.get(), kStore};
};

}  // namespace

TEST_CASE("storage a probe holds for a moment is waited for: state bucket, dead-letter stream and plan succeed",
          "[integration][storage]") {
  Taken t;
  Startup startup(t.conn.get(), *t.one, *t.two);
  // The probe's moment: long enough for every call to be refused at least once (each
  // makes its first request at once), short against the bounded wait.
  std::this_thread::sleep_for(300ms);
  CHECK_FALSE(startup.any_done());  // none reported the borrowed storage as missing
  t.hog.drop();
  Status bucket = startup.bucket.get(), dlq = startup.dlq.get(), plan = startup.plan.get();
  CHECK(bucket.str() == "ok");
  CHECK(dlq.str() == "ok");
  CHECK(plan.str() == "ok");
  // The plan measured the storage once the probe was gone: a share of 64 MiB over 2 + 1.
  CHECK(t.two->stream_max_bytes() == (21LL << 20));
}

TEST_CASE("storage that stays taken is reported by each start-up call within the bounded wait",
          "[integration][storage]") {
  Taken t;
  const auto start = std::chrono::steady_clock::now();
  Startup startup(t.conn.get(), *t.one, *t.two);
  Status bucket = startup.bucket.get(), dlq = startup.dlq.get(), plan = startup.plan.get();
  const auto took = std::chrono::steady_clock::now() - start;
  INFO(bucket.str() << "\n" << dlq.str() << "\n" << plan.str());
  CHECK(bucket.message().find("insufficient") != std::string::npos);
  CHECK(dlq.message().find("max_file_store") != std::string::npos);
  CHECK(plan.message().find("too small for weir") != std::string::npos);
  CHECK(took >= weir::kBorrowedStorageWait);
  CHECK(took < weir::kBorrowedStorageWait + 5s);
}
