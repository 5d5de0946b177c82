// OwnNaks (runtime/flow/own_naks.h, docs/adr/0225-poison-own-naks.md): the redeliveries a
// flow stage caused with its own naks, per input, kept after the input is acked (an ack
// lost with a connection brings it back) and bounded by forgetting the oldest input.
#include <catch2/catch.hpp>

#include "runtime/flow/own_naks.h"

using weir::OwnNaks;

TEST_CASE("own naks are counted per input", "[own-naks]") {
  OwnNaks own;
  CHECK(own.count(5) == 0);
  own.record(5);
  own.record(5);
  own.record(9);
  CHECK(own.count(5) == 2);
  CHECK(own.count(9) == 1);
  CHECK(own.count(7) == 0);
}

TEST_CASE("past its capacity the lowest sequence is forgotten, not the new one", "[own-naks]") {
  OwnNaks own(2);
  own.record(10);
  own.record(11);
  own.record(12);  // the input most likely to come back again is the newest
  CHECK(own.size() == 2);
  CHECK(own.count(10) == 0);
  CHECK(own.count(11) == 1);
  CHECK(own.count(12) == 1);
  own.record(11);  // known: nothing forgotten
  CHECK(own.count(11) == 2);
  CHECK(own.count(12) == 1);
}
