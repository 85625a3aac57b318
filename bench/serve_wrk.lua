-- wrk script for bench/serve.py: every request POSTs the same Open Inference Protocol request with
-- binary tensors (the body file's first KILN_WRK_HEADER_LENGTH bytes are its JSON header).
-- KILN_WRK_RATE > 0 paces each connection with exponential gaps so that all KILN_WRK_CONNECTIONS
-- together send that many requests per second (Poisson arrivals while responses are short next to
-- the gaps: the open-loop run); 0 sends the next request as soon as the answer arrives.
-- done() prints one JSON line with the counts and latency percentiles in microseconds.
local body_file = assert(os.getenv("KILN_WRK_BODY"), "KILN_WRK_BODY names the request body file")
local file = assert(io.open(body_file, "rb"))
wrk.method = "POST"
wrk.body = file:read("*a")
file:close()
wrk.headers["Content-Type"] = "application/octet-stream"
wrk.headers["Inference-Header-Content-Length"] = assert(os.getenv("KILN_WRK_HEADER_LENGTH"))

local rate = tonumber(os.getenv("KILN_WRK_RATE") or "0")
local connections = tonumber(os.getenv("KILN_WRK_CONNECTIONS") or "1")

function init(args)
  math.randomseed(os.time() + tonumber(tostring({}):match("0x(%x+)"), 16) % 100000)
end

function delay()
  if rate <= 0 then return 0 end
  local mean_ms = connections * 1000 / rate
  return -math.log(1 - math.random()) * mean_ms
end

function done(summary, latency, requests)
  local errors = summary.errors
  io.write(string.format(
    '{"requests": %d, "duration_us": %d, "connect_errors": %d, "read_errors": %d, "write_errors": %d, ' ..
    '"status_errors": %d, "timeouts": %d, "mean_us": %.1f, "p50_us": %d, "p90_us": %d, "p99_us": %d, "max_us": %d}\n',
    summary.requests, summary.duration, errors.connect, errors.read, errors.write, errors.status, errors.timeout,
    latency.mean, latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end
