-- wrk script for test/bench/api.sh: POST /payments with a payment id unique
-- per run, thread and request (each request a new operation, as submit.sql
-- does with gen_random_uuid()), the details of test/bench/submit.sql.
-- Prints "rps p50_ms p99_ms non2xx requests" on one line at the end.
local threads = {}
local run = os.getenv("PAYFLOW_BENCH_RUN") or "run"
local key = os.getenv("PAYFLOW_BENCH_KEY")

function setup(thread)
	thread:set("tid", #threads + 1)
	table.insert(threads, thread)
end

local n = 0
function request()
	n = n + 1
	local body = string.format('{"paymentId":"wrk-%s-%d-%d","details":{"amount": 1250, "currency": "EUR", ' ..
		'"customer": "C-1", "reference": "invoice 2026-0001"}}', run, tid, n)
	return wrk.format("POST", "/payments",
		{["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. key}, body)
end

function done(summary, latency, requests)
	local seconds = summary.duration / 1e6
	io.write(string.format("%.1f %.3f %.3f %d %d\n", summary.requests / seconds,
		latency:percentile(50) / 1000, latency:percentile(99) / 1000,
		summary.errors.status, summary.requests))
end
