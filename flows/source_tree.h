// A YAML or JSON document as a tree that remembers where every node came from, so
// schema errors can name file:line:column. YAML goes through yaml-cpp's event parser;
// JSON through a small strict parser of our own (yaml-cpp rejects JSON surrogate
// pairs and accepts trailing commas, and we want JSON errors to be JSON errors).
//
// `${NAME}` substitution is not done here: the schema layer does it per scalar, so a
// missing variable is reported at the scalar's position.
//
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "flows/flow.h"
#include "flows/text.h"

namespace weir::flows {

struct SrcNode {
  enum class Kind : uint8_t { kNull, kScalar, kSeq, kMap };
  Kind kind = Kind::kNull;
  // Scalar written quoted or as a block (YAML), or a JSON string: always a string.
  // A plain scalar is resolved by the YAML core schema (null, bool, int, float, string).
  bool quoted = false;
  bool block = false;          // YAML `|` or `>` scalar
  bool bad = false;            // already reported (a failed ${} substitution)
  int line = 0, column = 0;    // 1-based
  int offset = 0;              // byte offset of the node in the source
  std::string text;            // scalar text
  std::string written;         // scalar text as written, when `${NAME}` substitution changed it
  std::vector<SrcNode> items;  // seq: the items; map: the values
  std::vector<SrcNode> keys;   // map: the keys (scalars), parallel to items

  bool is_null() const { return kind == Kind::kNull; }
  bool is_scalar() const { return kind == Kind::kScalar; }
  bool is_seq() const { return kind == Kind::kSeq; }
  bool is_map() const { return kind == Kind::kMap; }
  // Map lookup by key text; nullptr when absent or not a map.
  const SrcNode* get(std::string_view key) const;
  // The key node of `key` (for messages about the key itself); nullptr when absent.
  const SrcNode* key_node(std::string_view key) const;
  // "null", "a string", "a number", "a list", "a mapping", ... for messages.
  std::string describe() const;
};

struct SourceDoc {
  bool ok = false;        // parsed and no diagnostics
  bool has_root = false;  // parsed (there may still be diagnostics, e.g. duplicate keys)
  SrcNode root;
  std::vector<Diagnostic> diagnostics;
};

// Limits against hostile input (checked, reported as diagnostics).
inline constexpr size_t kMaxSourceBytes = 8u << 20;
inline constexpr int kMaxSourceDepth = 128;
inline constexpr size_t kMaxSourceNodes = 1'000'000;  // after alias expansion

SourceDoc parse_yaml(std::string_view text, const std::string& file);
SourceDoc parse_json_source(std::string_view text, const std::string& file);
// .json → JSON; anything else → YAML.
SourceDoc parse_source(std::string_view text, const std::string& file);

// Replaces `${NAME}` / `${NAME:-default}` in every scalar value (not in keys). A
// missing variable is a diagnostic at the scalar's position.
void substitute_tree(SrcNode* n, const EnvLookup& env, const std::string& file, std::vector<Diagnostic>* diagnostics);

// The plain value of a node (tests, lookup defaults, timer payloads, JSON tables):
// quoted scalars are strings; plain scalars follow the YAML 1.2 core schema. Fails
// (with `*error` and `*where`) only on a number out of range.
bool to_plain_json(const SrcNode& n, Json* out, std::string* error, const SrcNode** where);

// The plain value of one plain scalar (core schema): null, bool, int, float or string.
Json resolve_plain_scalar(const std::string& text);

}  // namespace weir::flows
