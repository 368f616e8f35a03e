// fauxqs, the in-memory SQS/S3 emulator, as the back end behind sigv4-front.
//
// fauxqs's own CLI listens on every interface and names queues
// http://sqs.<region>.localhost:<port>/..., a host name libcurl resolves but
// glibc does not. Building the app here instead lets us
//   - listen on the loopback address only;
//   - make queue URLs http://<Host header>/000000000000/<name>: requests reach
//     fauxqs through the front with their Host header untouched (it is signed),
//     so queue URLs name the front's address, the one clients must use;
//   - find a queue by account and name whatever host its URL was written with
//     (fauxqs matches the whole URL; real SQS does not care about the host).

import { accountId, config, importFromCache } from "./emulator-config.mjs";

const { buildApp } = await importFromCache("fauxqs/dist/app.js");
const { SqsStore } = await importFromCache("fauxqs/dist/sqs/sqsStore.js");
const { SnsStore } = await importFromCache("fauxqs/dist/sns/snsStore.js");
const { S3Store } = await importFromCache("fauxqs/dist/s3/s3Store.js");

const sqsStore = new SqsStore();
// An empty host makes SqsStore.buildQueueUrl use the request's Host header.
sqsStore.host = "";

const queueByUrl = sqsStore.getQueue.bind(sqsStore);
const deleteQueueByUrl = sqsStore.deleteQueue.bind(sqsStore);

function queueByAccountAndName(queueUrl) {
	let path;
	try {
		path = new URL(queueUrl).pathname;
	} catch {
		return undefined;
	}
	const parts = path.split("/");
	if (parts.length !== 3 || parts[1] !== accountId)
		return undefined;
	return sqsStore.getQueueByName(decodeURIComponent(parts[2]));
}

sqsStore.getQueue = (queueUrl) => queueByUrl(queueUrl) ?? queueByAccountAndName(queueUrl);
sqsStore.deleteQueue = (queueUrl) => {
	const queue = sqsStore.getQueue(queueUrl);
	return queue ? deleteQueueByUrl(queue.url) : false;
};

const app = buildApp({
	logger: config.logRequests,
	defaultRegion: config.region,
	stores: { sqsStore, snsStore: new SnsStore(), s3Store: new S3Store() },
});

// fauxqs picks a body parser by content type alone, so an S3 object sent as
// application/x-www-form-urlencoded or application/x-amz-json-1.0 (libcurl's
// default for a request with a body is the former) is parsed as an SNS or SQS
// call and the PUT fails with 500. SQS and SNS calls only ever go to "/":
// elsewhere the body is read raw and the object keeps its content type.
const RPC_CONTENT_TYPES = /^application\/(x-www-form-urlencoded|x-amz-json-1\.0)\b/i;
const s3ContentTypes = new WeakMap();
app.addHook("onRequest", async (request) => {
	const type = request.headers["content-type"];
	if (type && RPC_CONTENT_TYPES.test(type) && request.url.split("?")[0] !== "/") {
		s3ContentTypes.set(request.raw, type);
		request.headers["content-type"] = "application/octet-stream";
	}
});
app.addHook("preHandler", async (request) => {
	const type = s3ContentTypes.get(request.raw);
	if (type !== undefined)
		request.headers["content-type"] = type;
});

await app.listen({ host: config.host, port: config.backendPort });
console.error(`fauxqs: listening on http://${config.host}:${config.backendPort}`);

let stopping = false;
async function stop(signal) {
	if (stopping)
		return;
	stopping = true;
	console.error(`fauxqs: ${signal}, closing`);
	// forceCloseConnections is on in fauxqs, so close() does not wait for
	// long polls to time out.
	await app.close();
	process.exit(0);
}
process.on("SIGTERM", () => stop("SIGTERM"));
process.on("SIGINT", () => stop("SIGINT"));
