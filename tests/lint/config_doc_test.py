#!/usr/bin/env python3
"""docs/configuration.md names every key the loader accepts.

Reads the key sets of every `check_keys(node, "section", {...})` call in
runtime/base/config.cc (the loader refuses any other key) and fails for each key the page
does not name in backticks: `section.key` in full (`http.max_body`), or a top-level key
alone (`data_dir`). A key of a nested mapping (`http.tls.cert_file`) may be named by its
last part in its own section of the page (`cert_file`). CTest `config_doc` (label lint).

  tests/lint/config_doc_test.py [ROOT]     # ROOT: the tree to check (default: this one)
"""
import os
import re
import sys

root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
loader = open(os.path.join(root, "runtime/base/config.cc"), encoding="utf-8").read()
page = open(os.path.join(root, "docs/configuration.md"), encoding="utf-8").read()

named = set(re.findall(r"`([^`\n]+)`", page))
calls = re.findall(r'check_keys\(\s*\w+\s*,\s*"([^"]*)"\s*,\s*\{([^}]*)\}', loader)
if not calls:
    print("config_doc: no check_keys(...) calls found in runtime/base/config.cc")
    sys.exit(2)

missing = []
count = 0
for section, body in calls:
    for key in re.findall(r'"([^"]+)"', body):
        count += 1
        full = f"{section}.{key}" if section else key
        nested = section.count(".") >= 1
        if full in named or (nested and key in named):
            continue
        missing.append(full)

if missing:
    for key in missing:
        print(f"docs/configuration.md: `{key}` is accepted by runtime/base/config.cc but not named on the page")
    print(f"config_doc: {len(missing)} of {count} keys undocumented")
    sys.exit(1)
print(f"config_doc: docs/configuration.md names all {count} keys of runtime/base/config.cc")
