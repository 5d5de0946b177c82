// Per-key order for a sink with `order_by` (docs/adr/0310-per-key-order.md): of the events
// that share a key, one is out at a time — its key's owner, sent, retried, or held for the
// sink's circuit — and the later ones wait behind it in the order they came (a sink's
// consumer hands its messages over in stream order). Keys are independent: a failing
// event holds its key only.
//
// Not thread-safe: the sink stage calls it under its own mutex.
#pragma once

#include <cstddef>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace weir {

template <class T>
class KeyOrder {
 public:
  // True when `item` may go now: its key has no owner (it becomes the owner) or it is the
  // owner (sent again after a wait). Otherwise it waits behind the owner and false.
  bool admit(const std::string& key, const T& item) {
    auto [it, fresh] = keys_.try_emplace(key);
    Key& k = it->second;
    if (fresh) {
      k.owner = item;
      return true;
    }
    if (k.owner == item) return true;
    k.behind.push_back(item);
    ++waiting_;
    return false;
  }

  // `item`, the owner of `key`, is done (delivered, dead-lettered or handed back): the next
  // of the key, now its owner, or nothing (the key is idle and forgotten). Nothing when
  // `item` is not the owner.
  std::optional<T> release(const std::string& key, const T& item) {
    auto it = keys_.find(key);
    if (it == keys_.end() || !(it->second.owner == item)) return std::nullopt;
    Key& k = it->second;
    if (k.behind.empty()) {
      keys_.erase(it);
      return std::nullopt;
    }
    k.owner = std::move(k.behind.front());
    k.behind.pop_front();
    --waiting_;
    return k.owner;
  }

  // Everything waiting behind an owner (a stop hands them back); the owners stay.
  std::vector<T> take_waiting() {
    std::vector<T> out;
    out.reserve(waiting_);
    for (auto& [key, k] : keys_) {
      for (auto& item : k.behind) out.push_back(std::move(item));
      k.behind.clear();
    }
    waiting_ = 0;
    return out;
  }

  size_t waiting() const { return waiting_; }   // behind an owner
  size_t keys() const { return keys_.size(); }  // with an owner

 private:
  struct Key {
    T owner{};
    std::deque<T> behind;
  };
  std::unordered_map<std::string, Key> keys_;
  size_t waiting_ = 0;
};

}  // namespace weir
