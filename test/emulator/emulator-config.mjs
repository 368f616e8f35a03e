// Settings shared by the emulator's Node programs.
//
// The shell scripts (common.sh) resolve the same variables with the same
// defaults and export them, so a program started by start.sh and one started
// by hand after sourcing env.sh agree on ports, credentials and paths.
// The npm packages live in a cache outside the source tree (see install.sh),
// so they are loaded through requireFromCache / importFromCache instead of
// bare imports, which would look for a node_modules next to this file.

import { createRequire } from "node:module";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const env = process.env;

// The SDK warns on Node 20 that releases after January 2027 will need 22;
// ours are pinned, so the warning is noise in every test log.
env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= "true";

export const repoRoot = resolve(here, "../..");

export const cacheDir = env.PAYFLOW_EMULATOR_CACHE_DIR ||
	join(env.PAYFLOW_CACHE_DIR || join(repoRoot, ".cache"), "emulator");

// The AWS SDK and smithy packages ship CommonJS builds; require is the
// simplest way to reach them from a directory that is not an ancestor.
export const requireFromCache = createRequire(join(cacheDir, "package.json"));

// fauxqs is ESM-only and exports nothing but its entry point, so its files
// are imported by path.
export function importFromCache(relativePath) {
	return import(pathToFileURL(join(cacheDir, "node_modules", relativePath)).href);
}

function intFromEnv(name, fallback) {
	const raw = env[name];
	if (raw === undefined || raw === "")
		return fallback;
	const value = Number.parseInt(raw, 10);
	if (!Number.isInteger(value) || String(value) !== raw.trim())
		throw new Error(`${name} must be an integer, got '${raw}'`);
	return value;
}

export const config = Object.freeze({
	// Loopback only: the emulator accepts any well-signed request, so it must
	// never be reachable from another machine.
	host: "127.0.0.1",
	frontPort: intFromEnv("PAYFLOW_EMULATOR_PORT", 4570),
	backendPort: intFromEnv("PAYFLOW_EMULATOR_BACKEND_PORT", 4571),
	region: env.PAYFLOW_TEST_AWS_REGION || "us-east-1",
	accessKeyId: env.PAYFLOW_TEST_AWS_ACCESS_KEY_ID || "AKIDPAYFLOWTEST",
	secretAccessKey: env.PAYFLOW_TEST_AWS_SECRET_ACCESS_KEY || "payflow-test-secret",
	maxReceiveCount: intFromEnv("PAYFLOW_EMULATOR_MAX_RECEIVE_COUNT", 5),
	visibilityTimeout: intFromEnv("PAYFLOW_EMULATOR_VISIBILITY_TIMEOUT", 30),
	runDir: env.PAYFLOW_EMULATOR_RUN_DIR || join(repoRoot, ".cache", "run", "emulator"),
	logRequests: env.PAYFLOW_EMULATOR_LOG_REQUESTS === "1",
});

// fauxqs answers for this account only; queue URLs carry it in their path.
export const accountId = "000000000000";

// The queues of DESIGN.md §2, each with a FIFO twin and a DLQ per variant,
// and those of steps a test adds by SQL (PAYFLOW_EMULATOR_EXTRA_QUEUES, a
// comma-separated list of destination names, e.g. "risk-requests").
export const queueBaseNames = Object.freeze([
	"payment-requests",
	"payment-completed",
	"invoice-requests",
	"operation-events",
	...(env.PAYFLOW_EMULATOR_EXTRA_QUEUES || "").split(",").map((name) => name.trim()).filter(Boolean),
]);

export const bucketName = "payflow-payloads";

export function frontEndpoint() {
	return `http://${config.host}:${config.frontPort}`;
}

// Credentials for an SDK client run by hand or by a test: the standard AWS
// variables win (env.sh sets them), the test defaults fill in otherwise.
export function clientCredentials() {
	return {
		accessKeyId: env.AWS_ACCESS_KEY_ID || config.accessKeyId,
		secretAccessKey: env.AWS_SECRET_ACCESS_KEY || config.secretAccessKey,
		...(env.AWS_SESSION_TOKEN ? { sessionToken: env.AWS_SESSION_TOKEN } : {}),
	};
}

export function clientRegion() {
	return env.AWS_REGION || env.AWS_DEFAULT_REGION || config.region;
}
