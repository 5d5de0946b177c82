// KeyOrder (runtime/flow/key_order.h): one event per key out at a time, the rest behind it
// in arrival order, keys independent.
#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

#include "runtime/flow/key_order.h"

using weir::KeyOrder;

TEST_CASE("key order: the first of a key goes, later ones wait and follow in order", "[key_order]") {
  KeyOrder<int> k;
  CHECK(k.admit("a", 1));
  CHECK(k.admit("b", 2));  // another key: not held by a
  CHECK_FALSE(k.admit("a", 3));
  CHECK_FALSE(k.admit("a", 4));
  CHECK(k.waiting() == 2);
  CHECK(k.keys() == 2);
  // The owner sent again (after a retry or the circuit) still goes.
  CHECK(k.admit("a", 1));
  CHECK(k.waiting() == 2);
  // Only the owner's release moves the key on.
  CHECK_FALSE(k.release("a", 3).has_value());
  CHECK(k.release("a", 1) == 3);
  CHECK(k.admit("a", 3));  // 3 owns it now
  CHECK(k.release("a", 3) == 4);
  CHECK_FALSE(k.release("a", 4).has_value());
  CHECK(k.keys() == 1);  // a is idle and forgotten
  CHECK(k.admit("a", 5));
  CHECK_FALSE(k.release("b", 9).has_value());
  CHECK_FALSE(k.release("c", 1).has_value());
}

TEST_CASE("key order: a stop takes what waits, the owners stay", "[key_order]") {
  KeyOrder<int> k;
  k.admit("a", 1);
  k.admit("a", 2);
  k.admit("b", 3);
  k.admit("b", 4);
  k.admit("b", 5);
  auto taken = k.take_waiting();
  std::sort(taken.begin(), taken.end());
  CHECK(taken == std::vector<int>{2, 4, 5});
  CHECK(k.waiting() == 0);
  CHECK_FALSE(k.release("a", 1).has_value());
  CHECK_FALSE(k.release("b", 3).has_value());
  CHECK(k.keys() == 0);
}
