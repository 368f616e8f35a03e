// A stand-in for the ECS container-credentials endpoint
// (AWS_CONTAINER_CREDENTIALS_FULL_URI) that turns slow: each client (told
// apart by its Authorization token) gets its first answer at once, and every
// later request is held open without an answer, as a hung agent would, until
// the client gives up or POST /_answer says to answer again.
//
//   node test/lib/slow_credentials.mjs ACCESS_KEY_ID SECRET_ACCESS_KEY LIFETIME_S
//
// Answers carry the given key (the emulator's) and expire LIFETIME_S seconds
// from now. Listens on 127.0.0.1 on a free port and prints {"listening":PORT}.
//
//   GET  /creds      the credentials (or held)
//   GET  /_state     {"<token>": {"answered": n, "open": [{"id","openedAt"}], "closed": [{"id","openedAt","closedAt"}]}}
//   POST /_answer    answer the held requests now, and every later one at once
import http from "node:http";

const [accessKeyId, secretAccessKey, lifetimeText] = process.argv.slice(2);
const lifetime = Number(lifetimeText);
if (!accessKeyId || !secretAccessKey || !Number.isFinite(lifetime)) {
	console.error("usage: node slow_credentials.mjs ACCESS_KEY_ID SECRET_ACCESS_KEY LIFETIME_S");
	process.exit(2);
}

const clients = new Map();
const held = new Set();
let answering = false;
let nextId = 1;

function client(token) {
	if (!clients.has(token))
		clients.set(token, { answered: 0, open: new Map(), closed: [] });
	return clients.get(token);
}

function answer(res, c) {
	c.answered++;
	const body = JSON.stringify({
		AccessKeyId: accessKeyId,
		SecretAccessKey: secretAccessKey,
		Token: `token-${c.answered}-${Date.now()}`,
		Expiration: new Date(Date.now() + lifetime * 1000).toISOString(),
	});
	res.writeHead(200, { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(body) });
	res.end(body);
}

const server = http.createServer((req, res) => {
	if (req.method === "GET" && req.url === "/_state") {
		const state = {};
		for (const [token, c] of clients)
			state[token] = { answered: c.answered, open: [...c.open.values()], closed: c.closed };
		res.writeHead(200, { "Content-Type": "application/json" });
		res.end(JSON.stringify(state));
		return;
	}
	if (req.method === "POST" && req.url === "/_answer") {
		answering = true;
		for (const h of held)
			h();
		held.clear();
		res.writeHead(204);
		res.end();
		return;
	}
	if (req.method !== "GET" || req.url !== "/creds") {
		res.writeHead(404);
		res.end();
		return;
	}
	const c = client(req.headers.authorization ?? "");
	if (c.answered === 0 || answering) {
		answer(res, c);
		return;
	}
	const entry = { id: nextId++, openedAt: Date.now() };
	c.open.set(entry.id, entry);
	const release = () => {
		if (!c.open.delete(entry.id))
			return;
		answer(res, c);
		c.closed.push({ ...entry, closedAt: Date.now(), answered: true });
	};
	held.add(release);
	res.on("close", () => {
		held.delete(release);
		if (c.open.delete(entry.id))
			c.closed.push({ ...entry, closedAt: Date.now(), answered: false });
	});
});

server.listen(0, "127.0.0.1", () => console.log(JSON.stringify({ listening: server.address().port })));
for (const signal of ["SIGTERM", "SIGINT"])
	process.on(signal, () => process.exit(0));
