// The reference flow: lookup, set, map with an array map and
// sum, filter and branch to three sinks; a generator of varied events (some with type
// errors); and a hand-written computation of what the flow must output. Used by
// reference_test.cc (through Flow::run) and runtime_test.cc (through the weir binary).
#pragma once

#include <cmath>
#include <random>
#include <string>

#include "flows/flow.h"

namespace weir::flows::reference {

// `sinks`: the `to:` section; empty → nats sinks (enough for Flow::run).
inline std::string flow_text(const std::string& source = "http: { path: /in }", const std::string& sinks = "") {
  std::string rows;
  for (int i = 0; i < 50; ++i) {
    const char* tier = i % 7 == 0 ? "gold" : i % 3 == 0 ? "silver" : "bronze";
    rows += "      - { id: c" + std::to_string(i) + ", tier: " + tier + ", discount: " + std::to_string(i % 4 * 5) +
            " }\n";
  }
  return "flow: ref\n"
         "from: { " +
         source +
         " }\n"
         "tables:\n"
         "  customers:\n"
         "    key: id\n"
         "    rows:\n" +
         rows +
         "steps:\n"
         "  - lookup: { table: customers, key: this.customer_id, as: customer, default: { tier: bronze, discount: 0 } "
         "}\n"
         "  - set:\n"
         "      amount: number(this.amount)\n"
         "      discount: this.customer.discount\n"
         "  - map:\n"
         "      id: this.id\n"
         "      tier: this.customer.tier\n"
         "      amount: this.amount\n"
         "      discount: this.discount\n"
         "      lines: \"this.items.map(i => {sku: i.sku, qty: int(i.qty), total: int(i.qty) * number(i.price)})\"\n"
         "      total: this.items.map(i => int(i.qty) * number(i.price)).sum()\n"
         "  - set:\n"
         "      net: round(this.total * (100 - this.discount) / 100, 2)\n"
         "  - filter: this.total > 0\n"
         "  - branch:\n"
         "      - when: this.net >= 100\n"
         "        steps: [ { set: { big: true } } ]\n"
         "        to: big\n"
         "      - when: this.tier == \"gold\"\n"
         "        to: vip\n"
         "      - to: small\n"
         "to:\n" +
         (sinks.empty() ? "  big: { nats: { subject: big } }\n"
                          "  vip: { nats: { subject: vip } }\n"
                          "  small: { nats: { subject: small } }\n"
                        : sinks);
}

struct Expected {
  Outcome::Kind kind = Outcome::Kind::kEmit;
  std::string sink;
  Json event;
  int error_step = -1;
  std::string error_message;  // a part of the message
};

// Plain decimal text → number, as the reference understands it.
inline bool parse_decimal(const Json& v, double* out, bool* is_int) {
  if (v.is_number()) {
    *out = v.get<double>();
    *is_int = v.is_number_integer();
    return true;
  }
  if (!v.is_string()) return false;
  const std::string& s = v.get_ref<const std::string&>();
  size_t i = !s.empty() && s[0] == '-' ? 1 : 0;
  size_t digits = 0, dots = 0;
  for (size_t k = i; k < s.size(); ++k) {
    if (s[k] == '.') ++dots;
    else if (s[k] >= '0' && s[k] <= '9') ++digits;
    else return false;
  }
  if (digits == 0 || dots > 1) return false;
  *out = std::stod(s);
  *is_int = dots == 0;
  return true;
}

inline Json number_of(double d, bool is_int) { return is_int ? Json(static_cast<int64_t>(d)) : Json(d); }

inline Expected compute(const Json& in) {
  Expected x;
  auto tier_of = [](int i) { return i % 7 == 0 ? "gold" : i % 3 == 0 ? "silver" : "bronze"; };
  std::string tier = "bronze";
  int discount = 0;
  if (in.contains("customer_id") && in["customer_id"].is_string()) {
    const std::string& c = in["customer_id"].get_ref<const std::string&>();
    int n = std::stoi(c.substr(1));
    if (n < 50) {
      tier = tier_of(n);
      discount = n % 4 * 5;
    }
  }
  double amount;
  bool amount_int;
  if (!parse_decimal(in["amount"], &amount, &amount_int)) {
    x.kind = Outcome::Kind::kError;
    x.error_step = 1;
    x.error_message = "number(this.amount): cannot convert";
    return x;
  }
  Json lines = Json::array();
  double total = 0;
  bool total_int = true;
  for (const auto& item : in["items"]) {
    double q, p;
    bool qi, pi;
    if (!parse_decimal(item["qty"], &q, &qi) || !parse_decimal(item["price"], &p, &pi)) {
      x.kind = Outcome::Kind::kError;
      x.error_step = 2;
      x.error_message = "cannot convert";
      return x;
    }
    auto qty = static_cast<int64_t>(std::trunc(q));
    double line = static_cast<double>(qty) * p;
    lines.push_back({{"sku", item["sku"]}, {"qty", qty}, {"total", number_of(line, pi)}});
    total += line;
    total_int = total_int && pi;
  }
  double net = std::round(total * (100 - discount) / 100 * 100) / 100;
  if (!(total > 0)) {
    x.kind = Outcome::Kind::kDropped;
    return x;
  }
  x.event = {{"id", in["id"]},
             {"tier", tier},
             {"amount", number_of(amount, amount_int)},
             {"discount", discount},
             {"lines", lines},
             {"total", number_of(total, total_int)},
             {"net", net}};
  if (net >= 100) {
    x.sink = "big";
    x.event["big"] = true;
  } else if (tier == "gold") {
    x.sink = "vip";
  } else {
    x.sink = "small";
  }
  return x;
}

inline Json random_event(std::mt19937& rng, int i, const std::string& id_prefix = "e") {
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  Json ev = {{"id", id_prefix + std::to_string(i)}};
  if (pick(50) != 0) ev["customer_id"] = "c" + std::to_string(pick(60));
  static const char* kAmounts[] = {"123.45", "0.99", "1000", "7", "250.00"};
  if (pick(33) == 0) ev["amount"] = "12,5";
  else if (pick(10) == 0) ev["amount"] = 50;
  else ev["amount"] = kAmounts[pick(5)];
  ev["items"] = Json::array();
  int n = pick(5);
  static const char* kQty[] = {"1", "2", "3", "10", "2.7"};
  static const char* kPrice[] = {"10.50", "3", "0.99", "199.99", "0"};
  for (int k = 0; k < n; ++k) {
    Json item = {{"sku", "s" + std::to_string(pick(9))}};
    item["qty"] = pick(60) == 0 ? Json("x") : pick(8) == 0 ? Json(2) : Json(kQty[pick(5)]);
    item["price"] = pick(60) == 0 ? Json("n/a") : pick(8) == 0 ? Json(5) : Json(kPrice[pick(5)]);
    ev["items"].push_back(item);
  }
  ev["noise"] = {{"ignored", pick(100)}};
  return ev;
}

}  // namespace weir::flows::reference
