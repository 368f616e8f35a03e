// test/otel/tree.mjs SPANS_FILE TRACE_ID — one trace of the receiver's
// spans file (receiver.mjs) as a tree: service, span, duration, children
// indented under their parent in start order; a span whose parent is not in
// the file (the caller's) is a root.
import { readFileSync } from "node:fs";

const [file, traceId] = process.argv.slice(2);
const spans = readFileSync(file, "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l))
	.filter((s) => s.traceId === traceId);
const ids = new Set(spans.map((s) => s.spanId));
const children = new Map();
for (const s of spans) {
	const parent = ids.has(s.parentSpanId) ? s.parentSpanId : "";
	if (!children.has(parent)) children.set(parent, []);
	children.get(parent).push(s);
}
for (const list of children.values()) list.sort((a, b) => (BigInt(a.start) < BigInt(b.start) ? -1 : 1));
const t0 = spans.length ? spans.reduce((m, s) => (BigInt(s.start) < m ? BigInt(s.start) : m), BigInt(spans[0].start)) : 0n;
const width = Math.max(0, ...spans.map((s) => s.service.length));
function show(parent, depth) {
	for (const s of children.get(parent) ?? []) {
		const at = Number(BigInt(s.start) - t0) / 1e6;
		const mark = s.status === 2 ? "  ERROR" : "";
		const events = s.events.length ? `  (${s.events.length} event${s.events.length > 1 ? "s" : ""}: ${[...new Set(s.events)].join(", ")})` : "";
		console.log(`${s.service.padEnd(width)}  ${"  ".repeat(depth)}${s.name}  ${s.durationMs.toFixed(1)} ms  (+${at.toFixed(1)} ms)${mark}${events}`);
		show(s.spanId, depth + 1);
	}
}
console.log(`trace ${traceId}: ${spans.length} spans`);
show("", 0);
