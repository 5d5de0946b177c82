#include "connectors/mqtt/mqtt_errors.h"

#include <cerrno>
#include <cstring>
#include <string_view>

#include <mqtt/exception.h>

namespace weir::connectors {
namespace {

bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

// Paho's own codes (MQTTAsync.h) that can reach the sink.
std::string paho_code_words(int rc, const std::string& broker) {
  switch (rc) {
    case -3: return "not connected to broker " + broker;
    case -4: return "too many publishes in flight to broker " + broker;
    case -12: return "too many publishes waiting for broker " + broker;
    default: return "MQTT client error " + std::to_string(rc) + " (" + ::mqtt::exception::error_str(rc) + ")";
  }
}

}  // namespace

std::string tcp_failure_words(const Status& tcp, const std::string& broker) {
  const std::string& m = tcp.message();
  if (ends_with(m, std::strerror(ECONNREFUSED))) return "connection refused by " + broker;
  if (ends_with(m, "connect timed out")) return "no answer from " + broker + " (TCP connect timed out)";
  if (ends_with(m, std::strerror(EHOSTUNREACH)) || ends_with(m, std::strerror(ENETUNREACH))) {
    return broker + " is unreachable (" + m.substr(m.rfind(": ") + 2) + ")";
  }
  return m;  // "cannot resolve host: …" and the rest say it already
}

std::string mqtt_connect_failure(int rc, const std::string& broker, bool tls, const Status& tcp) {
  switch (rc) {
    case 1: return "broker " + broker + " refused the protocol version (MQTT 3.1.1)";
    case 2: return "broker " + broker + " rejected the client id";
    case 3: return "broker " + broker + " answered that it is unavailable";
    case 4: return "bad user name or password for broker " + broker;
    case 5: return "not authorised by broker " + broker;
    default: break;
  }
  if (rc != -1) return paho_code_words(rc, broker);
  if (!tcp) return tcp_failure_words(tcp, broker);
  // TCP gets through: what failed is above it.
  if (tls) return "TLS handshake with broker " + broker + " failed (check its certificate and the CA)";
  return "broker " + broker + " closed the connection before accepting it (not an MQTT broker, or it refused us)";
}

std::string mqtt_publish_failure(int rc, const std::string& broker) {
  if (rc == -1) return "broker " + broker + " did not confirm the publish: the connection failed";
  return "broker " + broker + " did not confirm the publish: " + paho_code_words(rc, broker);
}

std::string mqtt_connection_lost(const std::string& cause, const std::string& broker) {
  if (cause.empty()) return "broker " + broker + " closed the connection (or the network dropped it)";
  return "lost the connection to broker " + broker + ": " + cause;
}

}  // namespace weir::connectors
