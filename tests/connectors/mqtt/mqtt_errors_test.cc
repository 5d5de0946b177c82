// The MQTT sink's error words (connectors/mqtt/mqtt_errors.h,
// docs/adr/0315-broker-sink-health.md): Paho's codes and a TCP connect's result become what
// happened, naming the broker. The TCP cases use Transport::connect's real messages.
#include <catch2/catch.hpp>

#include "connectors/mqtt/mqtt_errors.h"
#include "connectors/mqtt/mqtt_transport.h"
#include "tests/support/support.h"

using weir::Status;
using weir::connectors::mqtt_connect_failure;
using weir::connectors::mqtt_connection_lost;
using weir::connectors::mqtt_publish_failure;
using weir::connectors::tcp_failure_words;

namespace {
const std::string kBroker = "127.0.0.1:1883";
}

TEST_CASE("mqtt errors: CONNACK codes in words", "[mqtt-errors]") {
  const Status ok = Status::ok();
  CHECK(mqtt_connect_failure(1, kBroker, false, ok) ==
        "broker 127.0.0.1:1883 refused the protocol version (MQTT 3.1.1)");
  CHECK(mqtt_connect_failure(2, kBroker, false, ok) == "broker 127.0.0.1:1883 rejected the client id");
  CHECK(mqtt_connect_failure(3, kBroker, false, ok) == "broker 127.0.0.1:1883 answered that it is unavailable");
  CHECK(mqtt_connect_failure(4, kBroker, false, ok) == "bad user name or password for broker 127.0.0.1:1883");
  CHECK(mqtt_connect_failure(5, kBroker, false, ok) == "not authorised by broker 127.0.0.1:1883");
}

TEST_CASE("mqtt errors: a refused TCP connect is named, not Failure (-1)", "[mqtt-errors]") {
  // A port nothing listens on: the real error of a real connect.
  weir::connectors::mqtt::BrokerAddress nobody{"127.0.0.1", weir::testing::free_port(), false, false};
  auto t = weir::connectors::mqtt::Transport::connect(nobody, nullptr, std::chrono::milliseconds(1000));
  REQUIRE_FALSE(t.is_ok());
  const std::string text = mqtt_connect_failure(-1, nobody.str(), false, t.status());
  CHECK(text == "connection refused by " + nobody.str());
  CHECK(text.find("Failure") == std::string::npos);
}

TEST_CASE("mqtt errors: the TCP side of a failed connect in words", "[mqtt-errors]") {
  CHECK(tcp_failure_words(Status::unavailable("cannot connect to 10.0.0.9:1883: connect timed out"), "10.0.0.9:1883") ==
        "no answer from 10.0.0.9:1883 (TCP connect timed out)");
  CHECK(tcp_failure_words(Status::unavailable("cannot connect to 10.0.0.9:1883: No route to host"), "10.0.0.9:1883") ==
        "10.0.0.9:1883 is unreachable (No route to host)");
  CHECK(tcp_failure_words(Status::unavailable("cannot resolve nohost: Name or service not known"), "nohost:1883") ==
        "cannot resolve nohost: Name or service not known");
}

TEST_CASE("mqtt errors: TCP gets through but the connect failed", "[mqtt-errors]") {
  CHECK(mqtt_connect_failure(-1, kBroker, false, Status::ok()) ==
        "broker 127.0.0.1:1883 closed the connection before accepting it (not an MQTT broker, or it refused us)");
  CHECK(mqtt_connect_failure(-1, "mq.example:8883", true, Status::ok()) ==
        "TLS handshake with broker mq.example:8883 failed (check its certificate and the CA)");
}

TEST_CASE("mqtt errors: lost connections, unconfirmed publishes and Paho's own codes", "[mqtt-errors]") {
  CHECK(mqtt_connection_lost("", kBroker) == "broker 127.0.0.1:1883 closed the connection (or the network dropped it)");
  CHECK(mqtt_connection_lost("keepalive timeout", kBroker) ==
        "lost the connection to broker 127.0.0.1:1883: keepalive timeout");
  CHECK(mqtt_publish_failure(-1, kBroker) ==
        "broker 127.0.0.1:1883 did not confirm the publish: the connection failed");
  CHECK(mqtt_publish_failure(-3, kBroker) ==
        "broker 127.0.0.1:1883 did not confirm the publish: not connected to broker 127.0.0.1:1883");
  CHECK(mqtt_connect_failure(-12, kBroker, false, Status::ok()) ==
        "too many publishes waiting for broker 127.0.0.1:1883");
  // Any other Paho code keeps its number and Paho's own text.
  CHECK(mqtt_connect_failure(-8, kBroker, false, Status::ok()).rfind("MQTT client error -8 (", 0) == 0);
}
