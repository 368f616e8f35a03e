// A job queue beside payflow in make bench: 3-hop chains with no-op work.
//
//   node chain.mjs graphile-worker|pg-boss PORT
//   env PEER_DATABASE_URL (the cluster pipeline.sh runs payflow in),
//       PEER_SCHEMA (the queue's own schema, created here, dropped by the bench),
//       PEER_CACHE_DIR (install.sh's cache: the pinned packages)
//
// Installs the queue's schema, then answers on 127.0.0.1:PORT:
//   GET  /health                 200 once the schema is there
//   POST /burst?n=N&prefix=P     starts the queue's workers, enqueues N hop-1
//                                jobs (100 a statement, as pipeline.sh submits
//                                payflow's), each hop-1 handler enqueues its
//                                hop-2 job and each hop-2 handler its hop-3
//                                job; answers once every hop-3 job is done and
//                                its completion committed, then stops the
//                                workers: {"n", "seconds"} (first enqueue to
//                                last completion)
//   GET  /verify?prefix=P        the chains' jobs per hop and state, read in
//                                SQL (asked after the bench's CPU snapshot)
// Each burst has its own prefix. SIGTERM closes the pool and exits.
//
// Batching: each queue's documented knobs, set for throughput on a burst.
//
// graphile-worker 0.17 (https://worker.graphile.org/docs/performance#batching):
//   concurrentJobs 8           jobs run at once by the one worker pool (no-op
//                              handlers: more only waits on the pool)
//   maxPoolSize 10             its advice: 10 or concurrency + 2
//   localQueue.size 100        one "get jobs" statement locks 100 jobs for
//                              the pool instead of one statement per job
//   completeJobBatchDelay 0    completions of the same tick in one statement
//   failJobBatchDelay 0        (nothing fails here)
//   pollInterval 2000          the default: new jobs wake it through LISTEN/NOTIFY
//   jobs enqueued with addJobs (one statement per 100); batch jobs (an array
//   payload that later addJob calls with the same job key append to) are not
//   used: they would merge many operations into one job, and a payflow
//   operation is tracked one by one.
//
// pg-boss 10 (https://timgit.github.io/pg-boss/, work() options):
//   batchSize 100              one fetch and one complete statement per 100
//                              jobs; the handler gets the batch and enqueues
//                              the next hop's 100 jobs with one insert()
//   2 workers per hop queue    work() twice (10.x has no teamSize)
//   pollingIntervalSeconds 0.5 its minimum. pg-boss has no LISTEN: a worker
//                              sleeps out the interval after every fetch, so
//                              a handler that enqueued the next hop calls
//                              notifyWorker() on that hop's workers, and a
//                              worker that got a full batch notifies itself
//   supervise, schedule off    no maintenance or cron timer lands in a burst
//                              at random; monitorStateIntervalSeconds unset
//   jobs enqueued with insert() (one statement per 100).

import http from "node:http";
import { createRequire } from "node:module";
import { join } from "node:path";

const [system, portText] = process.argv.slice(2);
const port = Number(portText);
const databaseUrl = process.env.PEER_DATABASE_URL;
const schema = process.env.PEER_SCHEMA;
const cacheDir = process.env.PEER_CACHE_DIR;
if (!["graphile-worker", "pg-boss"].includes(system) || !port || !databaseUrl || !schema || !cacheDir) {
	console.error("usage: PEER_DATABASE_URL=... PEER_SCHEMA=... PEER_CACHE_DIR=... node chain.mjs graphile-worker|pg-boss PORT");
	process.exit(2);
}
const requireFromCache = createRequire(join(cacheDir, "package.json"));
const pg = requireFromCache("pg");

const CHUNK = 100;
const BURST_TIMEOUT_MS = 300_000;
const HOPS = ["hop1", "hop2", "hop3"];

// Waits until done() holds, asking every `ms`; false after the time-out.
async function until(done, ms, deadline) {
	while (!(await done())) {
		if (Date.now() > deadline)
			return false;
		await new Promise((resolve) => setTimeout(resolve, ms));
	}
	return true;
}

function chunks(n, prefix) {
	const out = [];
	for (let start = 1; start <= n; start += CHUNK) {
		const chunk = [];
		for (let i = start; i < Math.min(start + CHUNK, n + 1); i++)
			chunk.push({ p: prefix, n: i });
		out.push(chunk);
	}
	return out;
}

/* ---- graphile-worker ---- */

function graphileWorker() {
	const { run, runMigrations, makeWorkerUtils, Logger } = requireFromCache("graphile-worker");
	const pool = new pg.Pool({ connectionString: databaseUrl, max: 10 });
	const logger = new Logger(() => (level, message) => {
		if (level === "error")
			console.error(`graphile-worker: ${message}`);
	});
	const preset = {
		worker: {
			schema,
			concurrentJobs: 8,
			maxPoolSize: 10,
			pollInterval: 2000,
			localQueue: { size: 100 },
			completeJobBatchDelay: 0,
			failJobBatchDelay: 0,
		},
	};
	let utils;
	return {
		async setup() {
			await runMigrations({ pgPool: pool, logger, preset });
			utils = await makeWorkerUtils({ pgPool: pool, logger, preset });
		},
		async burst(n, prefix) {
			let finished = 0;
			const taskList = {
				hop1: async (payload, helpers) => { await helpers.addJob("hop2", payload); },
				hop2: async (payload, helpers) => { await helpers.addJob("hop3", payload); },
				hop3: async (payload) => { if (payload.p === prefix) finished++; },
			};
			const runner = await run({ pgPool: pool, logger, preset, taskList, noHandleSignals: true });
			const started = Date.now();
			for (const chunk of chunks(n, prefix))
				await utils.addJobs(chunk.map((payload) => ({ identifier: "hop1", payload })));
			const deadline = started + BURST_TIMEOUT_MS;
			// completed jobs are deleted; batched completions land a tick later
			const ok = await until(() => finished >= n, 5, deadline) &&
				await until(async () => (await pool.query(`SELECT count(*)::int AS c FROM "${schema}"._private_jobs`)).rows[0].c === 0, 10, deadline);
			const seconds = (Date.now() - started) / 1000;
			await runner.stop();
			return { n: ok ? finished : 0, seconds };
		},
		async verify() {
			const { rows } = await pool.query(`SELECT count(*)::int AS c FROM "${schema}"._private_jobs`);
			return { left: rows[0].c };
		},
		async close() {
			await utils?.release();
			await pool.end();
		},
	};
}

/* ---- pg-boss ---- */

function pgBoss() {
	const PgBoss = requireFromCache("pg-boss");
	const boss = new PgBoss({ connectionString: databaseUrl, schema, max: 10, supervise: false, schedule: false, migrate: true });
	boss.on("error", (err) => console.error(`pg-boss: ${err.message}`));
	const BATCH = 100;
	const WORKERS = 2;
	return {
		async setup() {
			await boss.start();
			for (const hop of HOPS)
				await boss.createQueue(hop);
		},
		async burst(n, prefix) {
			let finished = 0;
			const workers = new Map(HOPS.map((hop) => [hop, []]));
			const wake = (hop) => { for (const id of workers.get(hop)) boss.notifyWorker(id); };
			const handler = (hop, next) => async (jobs) => {
				if (next) {
					await boss.insert(jobs.map((job) => ({ name: next, data: job.data })));
					wake(next);
				} else {
					finished += jobs.filter((job) => job.data.p === prefix).length;
				}
				if (jobs.length === BATCH)
					wake(hop);
			};
			for (const [i, hop] of HOPS.entries()) {
				for (let w = 0; w < WORKERS; w++)
					workers.get(hop).push(await boss.work(hop, { batchSize: BATCH, pollingIntervalSeconds: 0.5 }, handler(hop, HOPS[i + 1])));
			}
			const started = Date.now();
			for (const chunk of chunks(n, prefix)) {
				await boss.insert(chunk.map((data) => ({ name: "hop1", data })));
				wake("hop1");
			}
			const deadline = started + BURST_TIMEOUT_MS;
			// complete() runs after the handler, not awaited by pg-boss
			const ok = await until(() => finished >= n, 5, deadline) &&
				await until(async () => (await boss.getDb().executeSql(
					`SELECT count(*)::int AS c FROM "${schema}".job WHERE name = 'hop3' AND state = 'completed' AND data->>'p' = $1`,
					[prefix])).rows[0].c >= n, 10, deadline);
			const seconds = (Date.now() - started) / 1000;
			for (const hop of HOPS)
				await boss.offWork(hop);
			return { n: ok ? finished : 0, seconds };
		},
		async verify(prefix) {
			const { rows } = await boss.getDb().executeSql(
				`SELECT name, state, count(*)::int AS c FROM "${schema}".job WHERE data->>'p' = $1 GROUP BY 1, 2 ORDER BY 1, 2`, [prefix]);
			return Object.fromEntries(rows.map((r) => [`${r.name} ${r.state}`, r.c]));
		},
		async close() {
			await boss.stop({ graceful: true, wait: true });
		},
	};
}

/* ---- the control server ---- */

const peer = system === "graphile-worker" ? graphileWorker() : pgBoss();
await peer.setup();

function send(res, status, value) {
	res.writeHead(status, { "content-type": "application/json" });
	res.end(JSON.stringify(value));
}

let busy = false;
const server = http.createServer(async (req, res) => {
	const url = new URL(req.url, "http://localhost");
	try {
		if (req.method === "GET" && url.pathname === "/health")
			return send(res, 200, { system });
		if (req.method === "POST" && url.pathname === "/burst") {
			const n = Number(url.searchParams.get("n"));
			const prefix = url.searchParams.get("prefix");
			if (!Number.isInteger(n) || n < 1 || !prefix)
				return send(res, 400, { error: "expected n and prefix" });
			if (busy)
				return send(res, 409, { error: "a burst is running" });
			busy = true;
			try {
				return send(res, 200, await peer.burst(n, prefix));
			} finally {
				busy = false;
			}
		}
		if (req.method === "GET" && url.pathname === "/verify")
			return send(res, 200, await peer.verify(url.searchParams.get("prefix")));
		send(res, 404, { error: "not found" });
	} catch (err) {
		console.error(`${system}: ${err.stack ?? err}`);
		send(res, 500, { error: String(err.message ?? err) });
	}
});
server.requestTimeout = 0;
server.listen(port, "127.0.0.1");

process.on("SIGTERM", async () => {
	server.close();
	await peer.close();
	process.exit(0);
});
