// A webhook receiver for tests/integration/signing_test.cc that checks each request's
// signatures with the reference implementations, not with weir's code: the
// `standardwebhooks` package (Webhook.verify) and `@octokit/webhooks-methods` (verify).
//
//   node receiver.mjs '{"standard": ["whsec_..."], "github": "secret", "fail_first": true}'
//
// Listens on 127.0.0.1, port 0, and prints "listening <port>". Every POST is recorded with
// its headers, its body, and per verifier whether the body as received verifies and
// whether the same headers with one body byte changed are refused. With fail_first the
// first request of each webhook-id (or body) is answered 503, later ones 200.
// GET /requests answers the records as a JSON array.
import http from "node:http";
import { Webhook } from "standardwebhooks";
import { verify as verifyGithub } from "@octokit/webhooks-methods";

const config = JSON.parse(process.argv[2] ?? "{}");
const records = [];
const seen = new Set();

function standardVerdict(secret, body, headers) {
  try {
    new Webhook(secret).verify(body, headers);
    return { ok: true };
  } catch (e) {
    return { ok: false, error: String(e.message ?? e) };
  }
}

function tamper(body) {
  // One byte changed in the middle: the JSON stays the same length.
  if (body.length === 0) return "x";
  const i = Math.floor(body.length / 2);
  const c = body[i] === "a" ? "b" : "a";
  return body.slice(0, i) + c + body.slice(i + 1);
}

async function check(body, headers) {
  const out = {};
  if (config.standard) {
    out.standard = config.standard.map((s) => standardVerdict(s, body, headers));
    out.standard_tampered = config.standard.map((s) => standardVerdict(s, tamper(body), headers));
  }
  if (config.github) {
    const sig = headers["x-hub-signature-256"] ?? "";
    out.github = await verifyGithub(config.github, body, sig).catch(() => false);
    out.github_tampered = await verifyGithub(config.github, tamper(body), sig).catch(() => false);
  }
  return out;
}

const server = http.createServer((req, res) => {
  if (req.method === "GET" && req.url === "/requests") {
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify(records));
    return;
  }
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", async () => {
    const body = Buffer.concat(chunks).toString("utf8");
    const key = req.headers["webhook-id"] ?? body;
    let status = 200;
    if (config.fail_first && !seen.has(key)) status = 503;
    seen.add(key);
    const verdicts = await check(body, req.headers);
    records.push({ at_ms: Date.now(), path: req.url, status, headers: req.headers, body, verdicts });
    res.writeHead(status, { "content-type": "text/plain" });
    res.end(status === 200 ? "ok" : "try again");
  });
});

server.listen(0, "127.0.0.1", () => {
  console.log(`listening ${server.address().port}`);
});
process.on("SIGTERM", () => server.close(() => process.exit(0)));
