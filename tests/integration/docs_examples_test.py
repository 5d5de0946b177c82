#!/usr/bin/env python3
"""Every curl example of the docs, run as written against a live weir (ADR 0316).

Extracts each `curl` command of the fenced code blocks of README.md, docs/*.md and
docs/recipes/*.md, and
  1. checks it statically: a curl that sends a body names its Content-Type (`curl -d`
     alone sends application/x-www-form-urlencoded, which weir decodes as a form,
     ADR 0308), every `@file` it uploads exists in the repository, and every relative
     link and repository path the pages name exists;
  2. starts weir on examples/flows/ and examples/recipes/ (embedded nats-server, free
     loopback ports) and weir-sink as the demo receiver, rewrites only the documented
     host:port (127.0.0.1:8080 http-in, :8081 admin, :9090 the demo sink) to the test's
     ports, runs each curl with bash from the repository's root, and checks the answer's
     status: 2xx, or the one an `<!-- example: status NNN (reason) -->` line before the
     block states. `<!-- example: skip (reason) -->` before a block leaves its curls out of
     the run (never out of the static checks). Assignments (`name=…`) earlier in the same
     block run before each curl, so a signature computed there is sent.

Usage: docs_examples_test.py SOURCE_DIR WEIR WEIR_SINK
       docs_examples_test.py --selftest   (the checks fail on the mistakes they exist for)
"""
import base64
import glob
import hashlib
import hmac
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

DOC_PORTS = {"8080": "http", "8081": "admin", "9090": "sink"}
MARKER = re.compile(r"^\s*<!--\s*example:\s*(skip|status\s+(\d{3}))\s*\(([^)]+)\)\s*-->\s*$")
BODY_OPTIONS = ("-d", "--data", "--data-binary", "--data-raw", "--data-urlencode", "-F", "--form", "-T",
                "--upload-file")
ASSIGNMENT = re.compile(r"^\s*(export\s+)?[A-Za-z_][A-Za-z0-9_]*=")
# A repository path named anywhere in a page (prose, code, commands): a top-level folder,
# then a path; an ADR may be cited by its number alone (docs/adr/0274).
REPO_PATH = re.compile(r"(?<![\w/.$~-])((?:examples|scripts|docs|tests|packaging|bench|flows|runtime|connectors"
                       r"|cluster|app)/[A-Za-z0-9_./*-]*[A-Za-z0-9_/*-])")
ADR_NUMBER = re.compile(r"docs/adr/\d{4}")


class Example:
    def __init__(self, page, line, text, pipeline, marker, setup):
        self.page, self.line, self.text = page, line, text  # text: the curl command alone
        self.pipeline = pipeline  # what runs: the curl with the pipe it is written in
        self.marker = marker  # None, ("skip", reason) or ("status", code, reason)
        self.setup = setup  # the block's assignments before this curl

    def where(self):
        return f"{self.page}:{self.line}"


def split_commands(line, seps=";&"):
    """Splits a shell line at the unquoted separators outside $(…) (by default ; & && ||,
    keeping pipelines whole) and drops an unquoted # comment."""
    parts, cur, quote, depth, i = [], "", None, 0, 0
    while i < len(line):
        c = line[i]
        if c == "$" and line[i + 1 : i + 2] == "(" and quote != "'":
            depth += 1
            cur += "$("
            i += 2
            continue
        if c == ")" and depth and quote != "'":
            depth -= 1
            cur += c
        elif quote:
            cur += c
            if c == "\\" and quote == '"' and i + 1 < len(line):
                cur += line[i + 1]
                i += 1
            elif c == quote:
                quote = None
        elif c in "'\"":
            quote, cur = c, cur + c
        elif c == "\\" and i + 1 < len(line):
            cur += line[i : i + 2]
            i += 1
        elif c == "#" and (not cur or cur[-1].isspace()):
            break
        elif c == "|" and line[i + 1 : i + 2] == "|" and not depth and "|" not in seps:
            parts.append(cur)
            cur = ""
            i += 1
        elif c in seps and not depth:
            parts.append(cur)
            cur = ""
        else:
            cur += c
        i += 1
    parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def logical_lines(block):
    """(first line number, text) of each shell line, backslash continuations joined."""
    out, start, cur = [], None, ""
    for number, text in block:
        if start is None:
            start = number
        if text.rstrip().endswith("\\"):
            cur += text.rstrip()[:-1] + " "
            continue
        out.append((start, cur + text))
        start, cur = None, ""
    if cur:
        out.append((start, cur))
    return out


def block_examples(page, block, marker):
    examples, setup = [], []
    for number, text in logical_lines(block):
        text = re.sub(r"^\s*\$ ", "", text)  # a transcript's prompt
        for command in split_commands(text):
            if ASSIGNMENT.match(command) and not command.split("=", 1)[1].startswith("("):
                setup.append(command)
            command = re.sub(r"^(for .* do|do|then|else)\s+", "", command)
            stages = split_commands(command, "|")
            if stages and stages[0].startswith("curl "):
                examples.append(Example(page, number, stages[0], command, marker, list(setup)))
    return examples


def extract(page, text):
    """Every curl example of a Markdown page's fenced blocks, with its marker."""
    examples, marker, block, fence = [], None, None, None
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if fence is not None:
            if stripped.startswith(fence):
                examples += block_examples(page, block, marker)
                fence, block, marker = None, None, None
            else:
                block.append((number, line))
            continue
        if stripped.startswith("```") or stripped.startswith("~~~"):
            fence, block = stripped[:3], []
            continue
        m = MARKER.match(line)
        if m:
            marker = ("skip", m.group(3)) if m.group(1) == "skip" else ("status", int(m.group(2)), m.group(3))
        elif stripped.startswith("<!--") and "example:" in stripped:
            raise SystemExit(f"{page}:{number}: unreadable example marker (write "
                             "`<!-- example: skip (reason) -->` or `<!-- example: status NNN (reason) -->`)")
    return examples


def curl_args(example):
    try:
        return shlex.split(example.text)
    except ValueError as e:
        return ["curl", f"<unparsable: {e}>"]


def static_problems(example, root):
    """What is wrong with an example without running it."""
    problems, args = [], curl_args(example)
    sends_body = any(a in BODY_OPTIONS or a.startswith(("--data", "--form")) for a in args)
    headers = [args[i + 1] for i, a in enumerate(args[:-1]) if a in ("-H", "--header")]
    has_type = any(h.lower().replace(" ", "").startswith("content-type:") for h in headers)
    if sends_body and not has_type and "--json" not in args:
        problems.append("sends a body without -H 'Content-Type: …' (curl -d sends a form type)")
    for i, a in enumerate(args[:-1]):
        value = args[i + 1]
        if (a in BODY_OPTIONS or a.startswith("--data")) and value.startswith("@") and value != "@-":
            if not os.path.exists(os.path.join(root, value[1:])):
                problems.append(f"uploads {value[1:]}, which is not in the repository")
    return problems


def pages(root):
    found = [os.path.join(root, "README.md")]
    found += sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    found += sorted(glob.glob(os.path.join(root, "docs", "recipes", "*.md")))
    return found


def path_problems(path, root, text):
    """Relative links and backticked repository paths that do not exist."""
    rel, here, problems = os.path.relpath(path, root), os.path.dirname(path), []
    for number, line in enumerate(text.splitlines(), 1):
        for target in re.findall(r"\]\(([^)\s]+)\)", line):
            target = target.split("#", 1)[0]
            if target and "://" not in target and not target.startswith("mailto:"):
                if not os.path.exists(os.path.join(here, target)):
                    problems.append(f"{rel}:{number}: link to {target}, which does not exist")
        for name in REPO_PATH.findall(line):
            pattern = name + "-*.md" if ADR_NUMBER.fullmatch(name) else name
            if not glob.glob(os.path.join(root, pattern)):
                problems.append(f"{rel}:{number}: names {name}, which is not in the repository")
    return problems


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rewrite(text, ports):
    """The documented 127.0.0.1:PORT replaced by the test's, nothing else."""

    def repl(m):
        return "127.0.0.1:" + str(ports[DOC_PORTS[m.group(1)]]) if m.group(1) in DOC_PORTS else m.group(0)

    return re.sub(r"127\.0\.0\.1:(\d+)", repl, text)


def runnable_problem(example):
    hosts = re.findall(r"https?://([^/\s'\"]+)", example.text)
    for host in hosts:
        m = re.fullmatch(r"127\.0\.0\.1:(\d+)", host)
        if not m or m.group(1) not in DOC_PORTS:
            return f"reaches {host}, which this test does not run; mark the block <!-- example: skip (why) -->"
    return None if hosts else "names no URL"


def run_example(example, root, ports, env, work):
    """Runs one curl with bash; returns (status code or None, output)."""
    headers = os.path.join(work, "headers")
    if os.path.exists(headers):
        os.remove(headers)
    # -D records the answer's status line without touching what the example prints.
    script = 'set -o pipefail\ncurl() { command curl -D "$WEIR_DOC_HEADERS" "$@"; }\n'
    script += "".join(rewrite(s, ports) + "\n" for s in example.setup)
    script += rewrite(example.pipeline, ports) + "\n"
    env = dict(env, WEIR_DOC_HEADERS=headers)
    p = subprocess.run(["bash", "-c", script], cwd=root, env=env, capture_output=True, text=True, timeout=30)
    output = (p.stdout + p.stderr).strip()
    if p.returncode != 0 or not os.path.exists(headers):
        return None, f"exited {p.returncode}: {output[:400]}"
    with open(headers, encoding="utf-8", errors="replace") as f:
        statuses = re.findall(r"^HTTP/[\d.]+ (\d{3})", f.read(), re.M)
    return (int(statuses[-1]) if statuses else None), output[:400]


def recipe_env(root, sink_url):
    """Values for the variables the example and recipe flows read: secrets made here."""
    env = {"SINK_URL": sink_url}
    for path in glob.glob(os.path.join(root, "examples", "recipes", "*.yaml")):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        # Every variable a `*_env:` key names (a secret, a token; `secrets_env` lists
        # several): a Standard Webhooks secret, which every scheme and token accepts.
        for names in re.findall(r"\b[a-z_]*_env:\s*\[?([A-Z][A-Z0-9_]*(?:\s*,\s*[A-Z][A-Z0-9_]*)*)", text):
            for name in re.split(r"\s*,\s*", names):
                env.setdefault(name, "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode())
        # An HTTP receiver's address (`${NAME:-http://…}`) is the demo receiver; other
        # variables keep their defaults.
        for name in re.findall(r"\$\{([A-Z][A-Z0-9_]*):-https?://[^}]*\}", text):
            env.setdefault(name, sink_url)
    return env


def signed_by(request, secret):
    """Whether a delivery's Standard Webhooks headers verify with secret (whsec_ + base64)."""
    h = {k.lower(): v for k, v in request.get("headers", {}).items()}
    if not all(k in h for k in ("webhook-id", "webhook-timestamp", "webhook-signature")):
        return False
    content = f"{h['webhook-id']}.{h['webhook-timestamp']}.{request['body']}".encode()
    mac = hmac.new(base64.b64decode(secret[len("whsec_"):]), content, hashlib.sha256).digest()
    want = "v1," + base64.b64encode(mac).decode()
    return any(hmac.compare_digest(want, sig) for sig in h["webhook-signature"].split(" "))


def recipe_deliveries(ports, env, seconds=30):
    """What the recipe pages say arrives: Stripe's event with its id header, the invoice
    signed with weir's own secret, GitHub's push with its event type as a header computed
    from the request metadata (docs/recipes/stripe.md, standard-webhooks.md, github.md)."""
    wanted = {
        "/stripe": lambda r: r["headers"].get("X-Stripe-Event-Id") == "evt_doc_1",
        "/invoices": lambda r: "inv_doc_1" in r["body"] and signed_by(r, env["ACCOUNTING_SIGNING_SECRET"]),
        "/github/push": lambda r: r["headers"].get("X-GitHub-Event") == "push" and "octo/hello" in r["body"],
    }
    deadline, missing = time.monotonic() + seconds, set(wanted)
    while missing and time.monotonic() < deadline:
        with urllib.request.urlopen(f"http://127.0.0.1:{ports['sink']}/requests", timeout=5) as r:
            requests = json.load(r)
        missing = {p for p in wanted if not any(q["path"] == p and wanted[p](q) for q in requests)}
        if missing:
            time.sleep(0.2)
    return [f"the recipe example's event never reached the receiver as the page says: {p}" for p in sorted(missing)]


def wait_ready(port, proc, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
                if r.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.2)
    return False


def stop(proc):
    if proc and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def start_weir(root, weir, sink, work, ports):
    flows = os.path.join(work, "flows")
    os.makedirs(flows)
    for path in glob.glob(os.path.join(root, "examples", "flows", "*")):
        shutil.copy(path, flows)
    for path in glob.glob(os.path.join(root, "examples", "recipes", "*.yaml")):
        shutil.copy(path, flows)
    sink_url = f"http://127.0.0.1:{ports['sink']}"
    env = dict(os.environ, **recipe_env(root, sink_url))
    receiver = subprocess.Popen([sink, "--listen", f"127.0.0.1:{ports['sink']}"], stdout=subprocess.DEVNULL)
    log = open(os.path.join(work, "weir.log"), "w")
    proc = subprocess.Popen(
        [weir, "run", "--flows", flows, "--data-dir", os.path.join(work, "data"), "--http",
         f"127.0.0.1:{ports['http']}", "--admin", f"127.0.0.1:{ports['admin']}"],
        env=env, stdout=log, stderr=subprocess.STDOUT)
    return receiver, proc, env


def run_all(root, weir, sink, examples):
    failures, ran = [], 0
    work = tempfile.mkdtemp(prefix="weir-docs-examples-")
    ports = {name: free_port() for name in ("http", "admin", "sink")}
    receiver = proc = None
    try:
        receiver, proc, env = start_weir(root, weir, sink, work, ports)
        if not wait_ready(ports["admin"], proc, 60):
            with open(os.path.join(work, "weir.log"), encoding="utf-8", errors="replace") as f:
                return [f"weir did not become ready on the example flows:\n{f.read()[-3000:]}"], 0
        for ex in examples:
            if ex.marker and ex.marker[0] == "skip":
                continue
            problem = runnable_problem(ex)
            if problem:
                failures.append(f"{ex.where()}: {problem}")
                continue
            status, output = run_example(ex, root, ports, env, work)
            ran += 1
            want = ex.marker[1] if ex.marker else None
            ok = status is not None and (status == want if want else 200 <= status < 300)
            print(f"{'ok  ' if ok else 'FAIL'} {ex.where()}: {status} {ex.text[:90]}")
            if not ok:
                failures.append(f"{ex.where()}: answered {status} (expected {want or '2xx'}): {ex.text}\n    {output}")
        if os.path.exists(os.path.join(root, "docs", "recipes", "standard-webhooks.md")):
            failures += recipe_deliveries(ports, env)
    finally:
        stop(proc)
        stop(receiver)
        shutil.rmtree(work, ignore_errors=True)
    return failures, ran


def collect(root):
    examples, problems = [], []
    for path in pages(root):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        rel = os.path.relpath(path, root)
        found = extract(rel, text)
        examples += found
        problems += path_problems(path, root, text)
        problems += [f"{ex.where()}: {p}: {ex.text}" for ex in found for p in static_problems(ex, root)]
    return examples, problems


def selftest():
    """The checks refuse what they exist to refuse."""
    page = ("Post one:\n\n```sh\ncurl -s -X POST http://127.0.0.1:8080/in/hook -d '{\"a\":1}'\n```\n"
            "<!-- example: status 501 (standalone) -->\n```sh\nsig=$(echo x | tr x y)\n"
            "curl -s -X POST http://127.0.0.1:8081/flows/a/promote -H 'Content-Type: application/json' \\\n"
            "  -d \"$sig\"; echo  # a comment with curl -d in it\n```\n"
            "<!-- example: skip (a remote) -->\n```sh\ncurl https://weir.example.com/in/x\n```\n")
    found = extract("page.md", page)
    assert len(found) == 3, [e.text for e in found]
    assert static_problems(found[0], "/") == [
        "sends a body without -H 'Content-Type: …' (curl -d sends a form type)"], static_problems(found[0], "/")
    assert static_problems(found[1], "/") == [], static_problems(found[1], "/")
    assert found[1].marker == ("status", 501, "standalone") and found[1].setup == ["sig=$(echo x | tr x y)"]
    assert found[1].line == 9 and found[1].text.endswith("-d \"$sig\""), found[1].text
    assert found[2].marker == ("skip", "a remote")
    assert runnable_problem(found[2]) is not None
    upload = extract("p.md", "```sh\ncurl -X PUT -H 'Content-Type: text/yaml' --data-binary @no/such.yaml "
                             "http://127.0.0.1:8081/flows/x\n```\n")
    assert static_problems(upload[0], "/nonexistent") == ["uploads no/such.yaml, which is not in the repository"]
    piped = extract("p.md", "```sh\nweir status; curl -s 'http://127.0.0.1:9090/a?b=1|2' | jq -c . || true  # x\n```\n")
    assert piped[0].text == "curl -s 'http://127.0.0.1:9090/a?b=1|2'", piped[0].text
    assert piped[0].pipeline == "curl -s 'http://127.0.0.1:9090/a?b=1|2' | jq -c .", piped[0].pipeline
    ports = {"http": 1, "admin": 2, "sink": 3}
    rewritten = rewrite("http://127.0.0.1:8081/x http://127.0.0.1:4222", ports)
    assert rewritten == "http://127.0.0.1:2/x http://127.0.0.1:4222", rewritten
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "p.md"), "w") as f:
            f.write("see [x](missing.md), `examples/flows/none.yaml`, weir test flows/orders.yaml, docs/adr/9999\n")
        assert len(path_problems(os.path.join(d, "p.md"), d, open(os.path.join(d, "p.md")).read())) == 4
    print("selftest: each check refuses its mistake")
    return 0


def main(argv):
    if argv[1:] == ["--selftest"]:
        return selftest()
    root, weir, sink = (os.path.abspath(a) for a in argv[1:4])
    examples, problems = collect(root)
    print(f"{len(examples)} curl examples in {len(pages(root))} pages")
    if len(examples) < 20:
        problems.append(f"only {len(examples)} curl examples found: is the extraction broken?")
    failures, ran = run_all(root, weir, sink, examples)
    skipped = sum(1 for e in examples if e.marker and e.marker[0] == "skip")
    print(f"ran {ran}, skipped {skipped} (marked in the pages)")
    for p in problems + failures:
        print("FAILED: " + p, file=sys.stderr)
    return 1 if problems or failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
