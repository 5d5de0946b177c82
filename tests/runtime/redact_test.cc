// runtime/redact: the one definition of a URL fit for logs, errors and /status (the bus,
// the HTTP sink, the poll source, the NATS connectors all call it). Credentials never
// survive it; where the URL points does.
#include <catch2/catch.hpp>

#include "runtime/base/redact.h"

using weir::redact_url;
using weir::redact_urls;

TEST_CASE("redact_url keeps where a URL points", "[redact]") {
  CHECK(redact_url("nats://127.0.0.1:4222") == "nats://127.0.0.1:4222");
  CHECK(redact_url("https://example.com") == "https://example.com");
  CHECK(redact_url("http://example.com:8080/a/b") == "http://example.com:8080/a/b");
  CHECK(redact_url("http://[::1]:9/x") == "http://[::1]:9/x");
  CHECK(redact_url("127.0.0.1:4222") == "127.0.0.1:4222");  // cnats takes a bare host:port
  CHECK(redact_url("not a url") == "not a url");
  CHECK(redact_url("") == "");
}

TEST_CASE("redact_url masks userinfo and the query, drops the fragment", "[redact]") {
  CHECK(redact_url("nats://user:pass@127.0.0.1:4222") == "nats://***@127.0.0.1:4222");
  CHECK(redact_url("nats://s3cr3ttoken@n1:4222") == "nats://***@n1:4222");
  CHECK(redact_url("s3cr3ttoken@n1:4222") == "***@n1:4222");  // no scheme: still userinfo
  CHECK(redact_url("u:p@h/x?k=v") == "***@h/x?***");
  CHECK(redact_url("http://u:p@example.com:8080/a/b?x=1#f") == "http://***@example.com:8080/a/b?***");
  CHECK(redact_url("https://api.example/x?token=abc&page=2&flag") == "https://api.example/x?***");
  CHECK(redact_url("https://api.example/x#access_token=abc") == "https://api.example/x");
  CHECK(redact_url("https://api.example/x?") == "https://api.example/x");
  CHECK(redact_url("https://api.example/x#") == "https://api.example/x");
  CHECK(redact_url("http://u:p@h/a@b") == "http://***@h/a@b");  // an @ in the path is not userinfo
  CHECK(redact_url("http://u:p@h?q=a@b") == "http://***@h?***");
  // A comma is part of one URL (a query value here), never a list separator.
  CHECK(redact_url("https://h/x?ids=1,2&k=secret") == "https://h/x?***");
}

TEST_CASE("redact_urls redacts each URL of a NATS server list", "[redact]") {
  CHECK(redact_urls("nats://s3cr3ttoken@n1:4222,nats://u:p@n2:4222,nats://n3:4222") ==
        "nats://***@n1:4222,nats://***@n2:4222,nats://n3:4222");
  CHECK(redact_urls("nats://a:1,tok@b:2") == "nats://a:1,***@b:2");
  CHECK(redact_urls("nats://127.0.0.1:4222") == "nats://127.0.0.1:4222");
  CHECK(redact_urls("") == "");
}
