-- wrk script for bench/ingest-wrk.sh: POSTs ~300-byte JSON order events, each with a
-- unique id ("w<thread>-<n>"), so the sink can count unique deliveries and duplicates.
local threads = {}
local next_thread = 0

function setup(thread)
  next_thread = next_thread + 1
  thread:set("tid", next_thread)
  table.insert(threads, thread)
end

function init(args)
  n = 0
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
  pad = string.rep("x", 180)
end

function request()
  n = n + 1
  local body = string.format(
    '{"id":"w%d-%d","customer_id":"c%d","amount":"%d.50","currency":"EUR","channel":"web","items":[{"sku":"s-%d","qty":"2","price":"9.99"}],"note":"%s"}',
    tid, n, n % 1000, n % 250, n % 97, pad)
  return wrk.format(nil, nil, nil, body)
end

function done(summary, latency, requests)
  local errors = summary.errors
  io.write(string.format(
    'WRKJSON {"requests":%d,"duration_us":%d,"non2xx":%d,"connect":%d,"read":%d,"write":%d,"timeout":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d,"max_us":%d}\n',
    summary.requests, summary.duration, errors.status, errors.connect, errors.read, errors.write, errors.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end
