-- wrk script for bench/ingest-wrk.sh: POSTs ~300-byte JSON order events, each with a
-- unique id ("<prefix>w<thread>-<n>") in the body and as Idempotency-Key, so the 202's {"id"}
-- is that id and the sink counts unique deliveries and duplicates by it. The prefix comes
-- from $WRK_ID_PREFIX: each repetition needs its own, or JetStream's duplicate window
-- (2 minutes) takes a repeated id as a re-send, answers it 202 and stores nothing new. Every 2xx answer's
-- id is kept; done() writes them, one per line, to the file named by $WRK_ACKED_IDS (loss
-- is then the set difference with the sink's ids), and prints a WRKJSON line with the
-- counts per status.
local threads = {}
local next_thread = 0

function setup(thread)
  next_thread = next_thread + 1
  thread:set("tid", next_thread)
  table.insert(threads, thread)
end

function init(args)
  n = 0
  prefix = os.getenv("WRK_ID_PREFIX") or ""
  acked = {}
  statuses = {}
  wrk.method = "POST"
  pad = string.rep("x", 180)
end

function request()
  n = n + 1
  local id = string.format("%sw%d-%d", prefix, tid, n)
  local body = string.format(
    '{"id":"%s","customer_id":"c%d","amount":"%d.50","currency":"EUR","channel":"web","items":[{"sku":"s-%d","qty":"2","price":"9.99"}],"note":"%s"}',
    id, n % 1000, n % 250, n % 97, pad)
  return wrk.format(nil, nil, {["Content-Type"] = "application/json", ["Idempotency-Key"] = id}, body)
end

function response(status, headers, body)
  local k = tostring(status)
  statuses[k] = (statuses[k] or 0) + 1
  if status >= 200 and status < 300 then
    local id = body and body:match('"id"%s*:%s*"([^"]+)"')
    if id then acked[#acked + 1] = id end
  end
end

function done(summary, latency, requests)
  local errors = summary.errors
  local counts = {}
  local path = os.getenv("WRK_ACKED_IDS")
  local f = path and io.open(path, "w")
  for _, t in ipairs(threads) do
    if f then
      for _, id in ipairs(t:get("acked")) do f:write(id, "\n") end
    end
    for k, v in pairs(t:get("statuses")) do counts[k] = (counts[k] or 0) + v end
  end
  if f then f:close() end
  local parts = {}
  for k, v in pairs(counts) do parts[#parts + 1] = string.format('"%s":%d', k, v) end
  io.write(string.format(
    'WRKJSON {"requests":%d,"duration_us":%d,"non2xx":%d,"connect":%d,"read":%d,"write":%d,"timeout":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d,"max_us":%d,"statuses":{%s}}\n',
    summary.requests, summary.duration, errors.status, errors.connect, errors.read, errors.write, errors.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max, table.concat(parts, ",")))
end
