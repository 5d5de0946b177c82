// StateStore (runtime/flow/state_store.h) against a real nats-server: the bucket is created
// once, reads see another instance's writes, puts are compare-and-set against what this
// store last saw, and a put whose outcome was unknown (server down) is settled by reading.
#include "runtime/flow/state_store.h"

#include <catch2/catch.hpp>

#include <nats/nats.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "tests/support/nats_conn.h"
#include "tests/support/support.h"

using weir::StateStore;
using weir::StateStoreOptions;
using weir::Status;
using weir::testing::NatsServer;
using weir::testing::wait_until;
using namespace std::chrono_literals;

namespace {

// One connection per simulated weir instance, reconnecting forever like the Bus's.
using Conn = weir::cluster::testing::NatsConn;

std::unique_ptr<StateStore> open_store(const Conn& c, std::chrono::milliseconds timeout = 2000ms) {
  StateStoreOptions o;
  o.timeout = timeout;
  auto s = StateStore::open(c.get(), o);
  if (!s) throw std::runtime_error("open state store: " + s.status().str());
  return std::move(s.value());
}

}  // namespace

TEST_CASE("state store: values are shared by instances - puts are compare-and-set", "[integration][state]") {
  NatsServer nats;
  Conn ca(nats.url()), cb(nats.url());
  auto a = open_store(ca);
  auto b = open_store(cb);  // the bucket exists now: opened as it is
  CHECK(a->bucket() == "weir_state");

  auto missing = a->get("poll.f.k1");
  REQUIRE(missing);
  CHECK_FALSE(missing.value());
  REQUIRE(a->put("poll.f.k1", "one"));
  REQUIRE(a->put("poll.f.k1", "two"));  // its own write is the revision it knows

  // Another instance reads the latest write at once (a failover resumes from it).
  auto seen = b->get("poll.f.k1");
  REQUIRE(seen);
  REQUIRE(seen.value());
  CHECK(*seen.value() == "two");
  REQUIRE(b->put("poll.f.k1", "three"));

  // `a` has not seen b's write: its put is refused and writes nothing.
  Status stale = a->put("poll.f.k1", "rewind");
  CHECK(stale.code() == Status::Code::kConflict);
  CHECK(*b->get("poll.f.k1").value() == "three");
  CHECK(a->put("poll.f.k1", "rewind").code() == Status::Code::kConflict);  // until it reads again
  REQUIRE(*a->get("poll.f.k1").value() == "three");
  REQUIRE(a->put("poll.f.k1", "four"));
  CHECK(*b->get("poll.f.k1").value() == "four");

  // A key never read here is only created when absent.
  REQUIRE(b->put("poll.f.k2", "x"));
  CHECK(a->put("poll.f.k2", "y").code() == Status::Code::kConflict);
  CHECK(*a->get("poll.f.k2").value() == "x");
}

TEST_CASE("state store: bad keys are refused with a clear error", "[integration][state]") {
  NatsServer nats;
  Conn c(nats.url());
  auto s = open_store(c);
  for (const char* bad : {"", ".a", "a.", "a..b", "a b", "a*", "a>", "ä"}) {
    INFO(bad);
    CHECK(s->put(bad, "v").code() == Status::Code::kInvalid);
    CHECK(s->get(bad).status().code() == Status::Code::kInvalid);
  }
  CHECK(s->put("poll.flow-1.ab_CD/ef=", "v"));
}

TEST_CASE("state store: a put that failed with the server down is settled after it returns", "[integration][state]") {
  NatsServer nats;
  Conn c(nats.url());
  auto s = open_store(c, 500ms);
  REQUIRE(s->put("poll.f.k", "v1"));
  nats.kill();
  Status down = s->put("poll.f.k", "v2");
  REQUIRE_FALSE(down);
  CHECK(down.code() != Status::Code::kConflict);
  nats.start();  // same store and port; the connection reconnects
  // Whether or not v2 landed later (cnats sends what it buffered while reconnecting), the
  // next put reads the key, finds v1 or its own v2, and goes ahead.
  REQUIRE(wait_until([&] { return static_cast<bool>(s->put("poll.f.k", "v3")); }, 20s, 100ms));
  Conn other(nats.url());
  auto t = open_store(other);
  CHECK(*t->get("poll.f.k").value() == "v3");
}

TEST_CASE("state store: open refuses bad options", "[integration][state]") {
  NatsServer nats;
  Conn c(nats.url());
  StateStoreOptions o;
  o.bucket = "bad.name";
  CHECK(StateStore::open(c.get(), o).status().code() == Status::Code::kInvalid);
  o = {};
  o.replicas = 0;
  CHECK(StateStore::open(c.get(), o).status().code() == Status::Code::kInvalid);
  CHECK(StateStore::open(nullptr).status().code() == Status::Code::kInvalid);
}

TEST_CASE("state store: opened on its own thread, it answers once open, or with why it could not open",
          "[integration][state]") {
  NatsServer nats;
  Conn c(nats.url());
  {
    weir::DeferredStateStore deferred(c.get(), StateStoreOptions{});
    // The first call waits for the open; the values are the bucket's, shared with a store
    // opened the ordinary way.
    REQUIRE(deferred.put("poll.f.k", "v1"));
    CHECK(deferred.wait());
    auto other = open_store(c);
    CHECK(*other->get("poll.f.k").value() == "v1");
    CHECK(other->put("poll.f.k", "v2"));
    CHECK(*deferred.get("poll.f.k").value() == "v2");
  }
  StateStoreOptions bad;
  bad.bucket = "bad.name";
  weir::DeferredStateStore failed(c.get(), bad);
  CHECK(failed.wait().code() == Status::Code::kInvalid);
  CHECK(failed.get("poll.f.k").status().code() == Status::Code::kInvalid);
  CHECK(failed.put("poll.f.k", "v").code() == Status::Code::kInvalid);
}
