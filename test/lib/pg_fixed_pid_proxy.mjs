// A TCP proxy in front of PostgreSQL that reports one fixed backend PID to
// every client, as a reconnect that lands on a session with the PID of the
// one it lost would (a pooler, a server restarted in a fresh PID namespace,
// PID reuse). Everything is passed through unchanged except the PID in the
// server's BackendKeyData message; each session is still a real backend of
// its own.
//
//   node test/lib/pg_fixed_pid_proxy.mjs TARGET_HOST TARGET_PORT FIXED_PID
//
// Listens on 127.0.0.1 on a free port and prints {"listening":PORT}, then one
// line per session {"session":N,"backendPid":REAL,"reportedPid":FIXED}.
// Clients must connect with sslmode=disable gssencmode=disable: the proxy
// reads the server's messages from the first one on (no SSL or GSS reply byte).
import net from "node:net";

const [host, portText, pidText] = process.argv.slice(2);
const targetPort = Number(portText);
const fixedPid = Number(pidText);
if (!host || !Number.isInteger(targetPort) || !Number.isInteger(fixedPid)) {
	console.error("usage: node pg_fixed_pid_proxy.mjs TARGET_HOST TARGET_PORT FIXED_PID");
	process.exit(2);
}

let sessions = 0;

const server = net.createServer((client) => {
	const session = ++sessions;
	const upstream = net.connect(targetPort, host);
	let pending = Buffer.alloc(0);
	let startup = true; // until the first ReadyForQuery: messages are parsed

	const close = () => {
		client.destroy();
		upstream.destroy();
	};
	client.on("error", close);
	upstream.on("error", close);
	client.on("close", close);
	upstream.on("close", close);
	client.on("data", (chunk) => upstream.write(chunk));

	upstream.on("data", (chunk) => {
		if (!startup) {
			client.write(chunk);
			return;
		}
		pending = Buffer.concat([pending, chunk]);
		const out = [];
		// a message: one type byte, then its length (which counts itself)
		while (startup && pending.length >= 5) {
			const length = pending.readInt32BE(1);
			if (pending.length < 1 + length)
				break;
			const message = Buffer.from(pending.subarray(0, 1 + length));
			pending = pending.subarray(1 + length);
			const type = String.fromCharCode(message[0]);
			if (type === "K") {
				console.log(JSON.stringify({ session, backendPid: message.readInt32BE(5), reportedPid: fixedPid }));
				message.writeInt32BE(fixedPid, 5);
			}
			out.push(message);
			if (type === "Z" || type === "E")
				startup = false;
		}
		if (!startup) {
			out.push(pending);
			pending = Buffer.alloc(0);
		}
		if (out.length > 0)
			client.write(Buffer.concat(out));
	});
});

server.listen(0, "127.0.0.1", () => {
	console.log(JSON.stringify({ listening: server.address().port }));
});
for (const signal of ["SIGTERM", "SIGINT"])
	process.on(signal, () => process.exit(0));
