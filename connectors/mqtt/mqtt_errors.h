// What Paho MQTT reports about the sink's broker, in words an operator can act on
// (docs/adr/0315-broker-sink-health.md). Paho's asynchronous client gives a connect failure
// only as a return code (-1, "Failure", for any TCP or TLS failure) and a lost connection
// with no cause; these functions turn that, and what a plain TCP connect to the broker
// found right after, into "connection refused by 127.0.0.1:1883", "not authorised by …".
//
// `broker` is BrokerAddress::str() (host:port): no text here ever holds credentials.
// Pure functions; any thread.
#pragma once

#include <string>

#include "runtime/base/status.h"

namespace weir::connectors {

// A connect that failed with Paho return code `rc`: an MQTT 3.1.1 CONNACK code (1–5) or a
// Paho code (negative). `tcp`: the result of a TCP connect to the broker made after the
// failure (Transport::connect), which says what -1 does not; `tls`: the broker URL asks
// for TLS.
std::string mqtt_connect_failure(int rc, const std::string& broker, bool tls, const Status& tcp);

// A TCP connect's error (Transport::connect's message) as what happened.
std::string tcp_failure_words(const Status& tcp, const std::string& broker);

// A publish the broker did not confirm, with Paho's return code.
std::string mqtt_publish_failure(int rc, const std::string& broker);

// Paho's connection-lost callback, with its cause (usually empty).
std::string mqtt_connection_lost(const std::string& cause, const std::string& broker);

}  // namespace weir::connectors
