// test/otel/receiver.mjs — a local OTLP/HTTP receiver for payflow's tests.
//
//   node test/otel/receiver.mjs PORT SPANS_FILE [count-only]
//
// POST /v1/traces with Content-Type application/json: the body is decoded
// with OpenTelemetry's own protobuf definitions (the generated code that
// @opentelemetry/otlp-transformer ships), as a collector would: OTLP/JSON's
// hex trace and span ids become the proto's bytes, the message is built
// (fromObject), checked (verify), encoded and decoded again; a member the
// proto does not know, an id of the wrong length, a kind or a time that
// does not decode is a 400 and an "invalid" line in SPANS_FILE. Each valid
// span becomes one JSON line of SPANS_FILE: {service, traceId, spanId,
// parentSpanId, name, kind, start, end, status, attributes, events, links}.
//
// POST /_mode {"mode": "ok" | "hang" | "refuse"}: from then on, answer
// normally, never answer (a hung collector), or answer 503 at once.
// GET /_stats: {"requests", "spans", "invalid"}.
//
// count-only (make bench): no decoding and no file, the spans only counted
// (a collector's cost is not payflow's, and on a 2-core machine the
// decoding would take CPU from the processes measured).
import { createServer } from "node:http";
import { appendFileSync } from "node:fs";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const root = require("@opentelemetry/otlp-transformer/build/src/generated/root");
const Request = root.opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest;

const [port, spansFile, how] = process.argv.slice(2);
const countOnly = how === "count-only";
let mode = "ok";
const stats = { requests: 0, spans: 0, invalid: 0 };

const hexToBase64 = (hex) => Buffer.from(hex, "hex").toString("base64");
const isHex = (s, bytes) => typeof s === "string" && s.length === 2 * bytes && /^[0-9a-f]+$/.test(s);

// OTLP/JSON differs from proto3's JSON mapping in one way: trace and span
// ids are hex, not base64 (the OTLP specification). Convert them, checking
// their length, before the proto's own code reads the message.
function idsToProto(request) {
	for (const rs of request.resourceSpans ?? [])
		for (const ss of rs.scopeSpans ?? [])
			for (const span of ss.spans ?? []) {
				if (!isHex(span.traceId, 16)) throw new Error(`traceId ${span.traceId} is not 16 bytes of hex`);
				if (!isHex(span.spanId, 8)) throw new Error(`spanId ${span.spanId} is not 8 bytes of hex`);
				span.traceId = hexToBase64(span.traceId);
				span.spanId = hexToBase64(span.spanId);
				if (span.parentSpanId !== undefined && span.parentSpanId !== "") {
					if (!isHex(span.parentSpanId, 8)) throw new Error(`parentSpanId ${span.parentSpanId} is not 8 bytes of hex`);
					span.parentSpanId = hexToBase64(span.parentSpanId);
				}
				for (const link of span.links ?? []) {
					if (!isHex(link.traceId, 16) || !isHex(link.spanId, 8)) throw new Error("a link's ids are not hex of 16 and 8 bytes");
					link.traceId = hexToBase64(link.traceId);
					link.spanId = hexToBase64(link.spanId);
				}
			}
	return request;
}

const isDefault = (v) => v === undefined || v === null || v === "" || v === 0 || v === "0" || v === false ||
	(Array.isArray(v) && v.length === 0);

// Every member that was sent with a value survives the proto's decoding:
// a name the proto does not know (a typo) would not.
function unknownMembers(sent, decoded, path) {
	const missing = [];
	if (Array.isArray(sent)) {
		sent.forEach((v, i) => missing.push(...unknownMembers(v, decoded?.[i], `${path}[${i}]`)));
	} else if (sent !== null && typeof sent === "object") {
		for (const [k, v] of Object.entries(sent)) {
			if (isDefault(v)) continue;
			if (decoded === undefined || decoded === null || !(k in decoded)) missing.push(`${path}.${k}`);
			else missing.push(...unknownMembers(v, decoded[k], `${path}.${k}`));
		}
	}
	return missing;
}

function decode(text) {
	const sent = idsToProto(JSON.parse(text));
	// fromObject reads proto3's JSON forms (64-bit integers as strings);
	// verify then checks the message it made
	const message = Request.fromObject(sent);
	const problem = Request.verify(message);
	if (problem) throw new Error(`not an ExportTraceServiceRequest: ${problem}`);
	const wire = Request.encode(message).finish();
	const decoded = Request.toObject(Request.decode(wire), { longs: String, enums: Number, bytes: String });
	const missing = unknownMembers(sent, decoded, "request");
	if (missing.length > 0) throw new Error(`members the proto does not know: ${missing.slice(0, 5).join(", ")}`);
	return decoded;
}

const b64ToHex = (b) => (b ? Buffer.from(b, "base64").toString("hex") : "");
const flat = (attrs) => Object.fromEntries((attrs ?? []).map((a) => {
	const v = a.value ?? {};
	return [a.key, v.stringValue ?? v.intValue ?? v.boolValue ?? v.doubleValue ?? null];
}));

function record(decoded) {
	let n = 0;
	for (const rs of decoded.resourceSpans ?? []) {
		const resource = flat(rs.resource?.attributes);
		for (const ss of rs.scopeSpans ?? [])
			for (const s of ss.spans ?? []) {
				const start = BigInt(s.startTimeUnixNano ?? "0");
				const end = BigInt(s.endTimeUnixNano ?? "0");
				if (!s.name || !(s.kind >= 1 && s.kind <= 5) || start === 0n || end < start)
					throw new Error(`span ${s.name ?? "?"}: a name, a kind of 1 to 5, and start <= end are required`);
				appendFileSync(spansFile, `${JSON.stringify({
					service: resource["service.name"], resource, traceId: b64ToHex(s.traceId), spanId: b64ToHex(s.spanId),
					parentSpanId: b64ToHex(s.parentSpanId), name: s.name, kind: s.kind,
					start: start.toString(), end: end.toString(), durationMs: Number(end - start) / 1e6,
					status: s.status?.code ?? 0, traceState: s.traceState ?? "",
					attributes: flat(s.attributes), events: (s.events ?? []).map((e) => e.name),
					links: (s.links ?? []).map((l) => ({ traceId: b64ToHex(l.traceId), spanId: b64ToHex(l.spanId) })),
				})}\n`);
				n++;
			}
	}
	return n;
}

createServer((req, res) => {
	const chunks = [];
	req.on("data", (c) => chunks.push(c));
	req.on("end", () => {
		const body = Buffer.concat(chunks).toString("utf8");
		if (req.method === "POST" && req.url === "/_mode") {
			mode = JSON.parse(body).mode;
			res.writeHead(200).end("{}");
			return;
		}
		if (req.method === "GET" && req.url === "/_stats") {
			res.writeHead(200, { "Content-Type": "application/json" }).end(JSON.stringify({ mode, ...stats }));
			return;
		}
		if (req.method !== "POST" || req.url !== "/v1/traces") {
			res.writeHead(404).end();
			return;
		}
		stats.requests++;
		if (mode === "hang") return; // never answered: the exporter's time-out ends it
		if (mode === "refuse") {
			res.writeHead(503, { "Content-Type": "application/json" }).end("{}");
			return;
		}
		if (countOnly) {
			stats.spans += (body.match(/"startTimeUnixNano"/g) ?? []).length;
			res.writeHead(200, { "Content-Type": "application/json" }).end("{}");
			return;
		}
		try {
			if (!/^application\/json\b/.test(req.headers["content-type"] ?? ""))
				throw new Error(`Content-Type ${req.headers["content-type"]}, not application/json`);
			stats.spans += record(decode(body));
			res.writeHead(200, { "Content-Type": "application/json" }).end("{}");
		} catch (e) {
			stats.invalid++;
			appendFileSync(spansFile, `${JSON.stringify({ invalid: e.message })}\n`);
			res.writeHead(400, { "Content-Type": "application/json" }).end(JSON.stringify({ message: e.message }));
		}
	});
}).listen(Number(port), "127.0.0.1", () => console.log(`otlp receiver on ${port}`));
