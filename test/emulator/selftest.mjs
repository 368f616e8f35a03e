// The checks behind selftest.sh, run against a stack it started and whose
// env.sh it sourced. A check leaves the queues it used empty, so the order
// does not matter; the last line reads "selftest: N passed, M failed".
//
// Usage: node selftest.mjs [all|restart]
//   restart: the short set run after a stop/start cycle.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { createHash, randomUUID } from "node:crypto";
import http from "node:http";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { crc32 } from "node:zlib";
import { accountId, requireFromCache } from "./emulator-config.mjs";

const sqsSdk = requireFromCache("@aws-sdk/client-sqs");
const s3Sdk = requireFromCache("@aws-sdk/client-s3");
const { SignatureV4 } = requireFromCache("@smithy/signature-v4");
const { Sha256 } = requireFromCache("@aws-crypto/sha256-js");

const here = dirname(fileURLToPath(import.meta.url));
const run = promisify(execFile);
const env = process.env;

const endpoint = env.AWS_ENDPOINT_URL;
const { hostname: host, port: portText } = new URL(endpoint);
const port = Number(portText);
const region = env.AWS_REGION;
const goodCredentials = { accessKeyId: env.AWS_ACCESS_KEY_ID, secretAccessKey: env.AWS_SECRET_ACCESS_KEY };
const wrongSecret = { ...goodCredentials, secretAccessKey: `${goodCredentials.secretAccessKey}-wrong` };
const bucket = env.PAYFLOW_S3_BUCKET;
const maxReceiveCount = Number(env.PAYFLOW_EMULATOR_MAX_RECEIVE_COUNT);

function urlMap(text) {
	return Object.fromEntries(text.split(",").map((pair) => {
		const eq = pair.indexOf("=");
		return [pair.slice(0, eq), pair.slice(eq + 1)];
	}));
}
const queues = urlMap(env.PAYFLOW_QUEUE_URLS);
const fifoQueues = urlMap(env.PAYFLOW_QUEUE_URLS_FIFO);
const dlqs = urlMap(env.PAYFLOW_DLQ_URLS);
const fifoDlqs = urlMap(env.PAYFLOW_DLQ_URLS_FIFO);

// One attempt only: the SDK retries signature errors as possible clock skew,
// which would only repeat each rejection.
function sqsClient(credentials = goodCredentials) {
	return new sqsSdk.SQSClient({ endpoint, region, credentials, maxAttempts: 1 });
}
function s3Client(credentials = goodCredentials) {
	return new s3Sdk.S3Client({ endpoint, region, credentials, forcePathStyle: true, maxAttempts: 1 });
}
const sqs = sqsClient();
const s3 = s3Client();

/* ---- helpers ---- */

async function receive(queueUrl, options = {}) {
	const { Messages = [] } = await sqs.send(new sqsSdk.ReceiveMessageCommand({
		QueueUrl: queueUrl,
		MaxNumberOfMessages: 10,
		WaitTimeSeconds: 2,
		MessageSystemAttributeNames: ["All"],
		MessageAttributeNames: ["All"],
		...options,
	}));
	return Messages;
}

async function depth(queueUrl) {
	const { Attributes } = await sqs.send(new sqsSdk.GetQueueAttributesCommand({
		QueueUrl: queueUrl,
		AttributeNames: ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesDelayed"],
	}));
	return Number(Attributes.ApproximateNumberOfMessages) +
		Number(Attributes.ApproximateNumberOfMessagesNotVisible) +
		Number(Attributes.ApproximateNumberOfMessagesDelayed ?? 0);
}

async function drain(queueUrl) {
	for (;;) {
		const messages = await receive(queueUrl, { WaitTimeSeconds: 0, VisibilityTimeout: 30 });
		if (messages.length === 0)
			return;
		for (const message of messages)
			await sqs.send(new sqsSdk.DeleteMessageCommand({ QueueUrl: queueUrl, ReceiptHandle: message.ReceiptHandle }));
	}
}

async function expectRejection(promise, name, status) {
	try {
		await promise;
	} catch (err) {
		assert.equal(err.name, name, `error name: ${err.message}`);
		assert.equal(err.$metadata?.httpStatusCode, status);
		return err;
	}
	assert.fail(`expected ${name}, the call succeeded`);
}

function sha256Hex(data) {
	return createHash("sha256").update(data).digest("hex");
}

function queryString(query) {
	return Object.entries(query)
		.map(([key, value]) => `${encodeURIComponent(key)}=${encodeURIComponent(value)}`)
		.join("&");
}

// A hand-made request: signed by smithy over `body` (with `credentials`, at
// `signingDate`), then sent with `sendBody` and `extraHeaders`, which the
// signature does not cover. This is how the checks forge what an SDK never
// sends.
async function rawRequest({
	service, method = "POST", path = "/", query = {}, headers = {}, body = "", sendBody = body,
	credentials = goodCredentials, signingDate = new Date(), signingRegion = region, sign = true, extraHeaders = {},
}) {
	let signed = { headers: { host: `${host}:${port}`, ...headers } };
	if (sign) {
		const signer = new SignatureV4({
			credentials, region: signingRegion, service, sha256: Sha256,
			uriEscapePath: service !== "s3", applyChecksum: service === "s3",
		});
		signed = await signer.sign({
			method, protocol: "http:", hostname: host, port, path, query, headers: signed.headers, body,
		}, { signingDate });
	}
	const search = queryString(query);
	return send({ method, path: search ? `${path}?${search}` : path, headers: { ...signed.headers, ...extraHeaders }, body: sendBody });
}

function send({ method, path, headers, body }) {
	return new Promise((resolve, reject) => {
		const req = http.request({ host, port, method, path, headers }, (res) => {
			const chunks = [];
			res.on("data", (chunk) => chunks.push(chunk));
			res.on("end", () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks).toString("utf8") }));
		});
		req.on("error", reject);
		req.end(body);
	});
}

function sqsJsonRequest(action, payload, options = {}) {
	return rawRequest({
		service: "sqs",
		headers: {
			"content-type": "application/x-amz-json-1.0",
			"x-amz-target": `AmazonSQS.${action}`,
		},
		body: JSON.stringify(payload),
		...options,
	});
}

// A call to one of the front's unsigned test endpoints, its answer parsed.
async function frontCall(method, path, value) {
	const answer = await send({
		method, path, headers: { "content-type": "application/json" }, body: value === undefined ? undefined : JSON.stringify(value),
	});
	return { status: answer.status, body: JSON.parse(answer.body) };
}

function xmlField(xml, name) {
	return new RegExp(`<${name}>([^<]*)</${name}>`).exec(xml)?.[1];
}

async function objectMissing(key) {
	await expectRejection(s3.send(new s3Sdk.HeadObjectCommand({ Bucket: bucket, Key: key })), "NotFound", 404);
}

/* ---- the checks ---- */

const checks = {};

checks["sqs: signed SendMessage/ReceiveMessage round trip through the front"] = async () => {
	const queueUrl = queues["payment-requests"];
	assert.equal(new URL(queueUrl).port, String(port), "queue URLs name the front's port");
	const body = JSON.stringify({ eventType: "PaymentRequested", eventId: randomUUID() });
	const sent = await sqs.send(new sqsSdk.SendMessageCommand({
		QueueUrl: queueUrl, MessageBody: body,
		MessageAttributes: { eventType: { DataType: "String", StringValue: "PaymentRequested" } },
	}));
	const [message, ...rest] = await receive(queueUrl, { VisibilityTimeout: 30 });
	assert.equal(rest.length, 0);
	assert.equal(message.MessageId, sent.MessageId);
	assert.equal(message.Body, body);
	assert.equal(message.MessageAttributes.eventType.StringValue, "PaymentRequested");
	assert.equal(message.Attributes.ApproximateReceiveCount, "1");
	await sqs.send(new sqsSdk.DeleteMessageCommand({ QueueUrl: queueUrl, ReceiptHandle: message.ReceiptHandle }));
	assert.equal(await depth(queueUrl), 0);
};

checks["sqs: FIFO keeps group order, dedupes by MessageDeduplicationId, shows both ids"] = async () => {
	const queueUrl = fifoQueues["payment-requests"];
	const group = `payment-${randomUUID()}`;
	const ids = [randomUUID(), randomUUID(), randomUUID()];
	const sentIds = [];
	for (const [i, dedup] of ids.entries()) {
		const sent = await sqs.send(new sqsSdk.SendMessageCommand({
			QueueUrl: queueUrl, MessageBody: `event ${i}`, MessageGroupId: group, MessageDeduplicationId: dedup,
		}));
		sentIds.push(sent.MessageId);
	}
	const again = await sqs.send(new sqsSdk.SendMessageCommand({
		QueueUrl: queueUrl, MessageBody: "event 0 again", MessageGroupId: group, MessageDeduplicationId: ids[0],
	}));
	assert.equal(again.MessageId, sentIds[0], "a repeated MessageDeduplicationId is not enqueued twice");
	for (const [i, dedup] of ids.entries()) {
		const messages = await receive(queueUrl, { VisibilityTimeout: 30 });
		assert.equal(messages.length, 1);
		const [message] = messages;
		assert.equal(message.Body, `event ${i}`);
		assert.equal(message.Attributes.MessageGroupId, group);
		assert.equal(message.Attributes.MessageDeduplicationId, dedup);
		await sqs.send(new sqsSdk.DeleteMessageCommand({ QueueUrl: queueUrl, ReceiptHandle: message.ReceiptHandle }));
	}
	assert.equal(await depth(queueUrl), 0);
};

checks["sqs: SendMessageBatch and ChangeMessageVisibility"] = async () => {
	const queueUrl = queues["invoice-requests"];
	const batch = await sqs.send(new sqsSdk.SendMessageBatchCommand({
		QueueUrl: queueUrl,
		Entries: ["a", "b", "c"].map((id) => ({ Id: id, MessageBody: `body ${id}` })),
	}));
	assert.equal(batch.Successful.length, 3);
	assert.equal(batch.Failed?.length ?? 0, 0);
	const first = await receive(queueUrl, { VisibilityTimeout: 30 });
	assert.equal(first.length, 3);
	await sqs.send(new sqsSdk.ChangeMessageVisibilityCommand({
		QueueUrl: queueUrl, ReceiptHandle: first[0].ReceiptHandle, VisibilityTimeout: 0,
	}));
	const second = await receive(queueUrl, { VisibilityTimeout: 30 });
	assert.equal(second.length, 1);
	assert.equal(second[0].MessageId, first[0].MessageId);
	assert.equal(second[0].Attributes.ApproximateReceiveCount, "2");
	await drain(queueUrl);
	for (const message of [...first.slice(1), ...second])
		await sqs.send(new sqsSdk.DeleteMessageCommand({ QueueUrl: queueUrl, ReceiptHandle: message.ReceiptHandle }));
	assert.equal(await depth(queueUrl), 0);
};

checks["sqs: /_front/refuse fails chosen SendMessageBatch entries, fauxqs gets the others"] = async () => {
	const queueUrl = queues["invoice-requests"];
	const bad = await frontCall("POST", "/_front/refuse", { action: "SendMessageBatch", match: "x", code: "X", senderFault: "yes", count: 1 });
	assert.equal(bad.status, 400);
	assert.match(bad.body.error, /senderFault/);
	const rule = { action: "SendMessageBatch", match: "refuse-me", code: "InvalidMessageContents", senderFault: true, count: 1 };
	const set = await frontCall("POST", "/_front/refuse", rule);
	assert.equal(set.status, 200);
	assert.deepEqual(set.body, { ...rule, message: "refused by the test front" });

	const since = Date.now();
	const ids = ["keep-1", "refused", "keep-2"].map((name) => `${name}-${randomUUID()}`);
	const entries = ids.map((id, i) => ({ Id: id, MessageBody: i === 1 ? `please refuse-me ${id}` : `body ${id}` }));
	const first = await sqs.send(new sqsSdk.SendMessageBatchCommand({ QueueUrl: queueUrl, Entries: entries }));
	assert.deepEqual(first.Successful.map((e) => e.Id).sort(), [ids[0], ids[2]].sort());
	assert.equal(first.Failed.length, 1);
	assert.equal(first.Failed[0].Id, ids[1]);
	assert.equal(first.Failed[0].Code, "InvalidMessageContents");
	assert.equal(first.Failed[0].SenderFault, true);
	assert.equal(first.Failed[0].Message, "refused by the test front");

	const got = await receive(queueUrl, { VisibilityTimeout: 30 });
	assert.deepEqual(got.map((m) => m.Body).sort(), [entries[0].MessageBody, entries[2].MessageBody].sort());
	assert.equal(await depth(queueUrl), 2, "the refused entry never reached fauxqs");
	for (const message of got)
		await sqs.send(new sqsSdk.DeleteMessageCommand({ QueueUrl: queueUrl, ReceiptHandle: message.ReceiptHandle }));

	const refused = await frontCall("GET", "/_front/refused");
	assert.equal(refused.status, 200);
	const logged = refused.body.filter((e) => e.id === ids[1]);
	assert.equal(logged.length, 1);
	assert.equal(logged[0].action, "SendMessageBatch");
	assert.equal(logged[0].code, "InvalidMessageContents");
	assert.equal(logged[0].senderFault, true);
	assert.ok(logged[0].at >= since);

	const again = await sqs.send(new sqsSdk.SendMessageBatchCommand({ QueueUrl: queueUrl, Entries: entries }));
	assert.equal(again.Successful.length, 3, "the rule's count is used up");
	assert.equal(again.Failed?.length ?? 0, 0);
	await drain(queueUrl);
	assert.equal(await depth(queueUrl), 0);
};

checks["sqs: /_front/refuse fails DeleteMessageBatch entries as InternalError, all of a batch too"] = async () => {
	const queueUrl = queues["invoice-requests"];
	const sent = await sqs.send(new sqsSdk.SendMessageBatchCommand({
		QueueUrl: queueUrl, Entries: ["a", "b"].map((id) => ({ Id: id, MessageBody: `delete me ${id}` })),
	}));
	assert.equal(sent.Successful.length, 2);
	const messages = await receive(queueUrl, { VisibilityTimeout: 30 });
	assert.equal(messages.length, 2);
	const stuck = `stuck-${randomUUID()}`;
	const entries = [{ Id: "gone", ReceiptHandle: messages[0].ReceiptHandle }, { Id: stuck, ReceiptHandle: messages[1].ReceiptHandle }];
	const rule = {
		action: "DeleteMessageBatch", match: stuck, code: "InternalError", message: "try again", senderFault: false, count: 2,
	};
	assert.equal((await frontCall("POST", "/_front/refuse", rule)).status, 200);

	const partly = await sqs.send(new sqsSdk.DeleteMessageBatchCommand({ QueueUrl: queueUrl, Entries: entries }));
	assert.deepEqual(partly.Successful.map((e) => e.Id), ["gone"]);
	assert.deepEqual(partly.Failed, [{ Id: stuck, SenderFault: false, Code: "InternalError", Message: "try again" }]);
	assert.equal(await depth(queueUrl), 1, "the refused delete left its message");

	// Every entry refused: the front answers without fauxqs, in the same shape.
	const raw = await sqsJsonRequest("DeleteMessageBatch", { QueueUrl: queueUrl, Entries: [entries[1]] });
	assert.equal(raw.status, 200, raw.body);
	assert.equal(raw.headers["content-type"], "application/x-amz-json-1.0");
	assert.deepEqual(JSON.parse(raw.body), {
		Successful: [], Failed: [{ Id: stuck, SenderFault: false, Code: "InternalError", Message: "try again" }],
	});
	assert.equal(await depth(queueUrl), 1);

	const last = await sqs.send(new sqsSdk.DeleteMessageBatchCommand({ QueueUrl: queueUrl, Entries: [entries[1]] }));
	assert.deepEqual(last.Successful.map((e) => e.Id), [stuck], "the rule's count is used up");
	assert.equal(await depth(queueUrl), 0);
	const logged = (await frontCall("GET", "/_front/refused")).body.filter((e) => e.id === stuck);
	assert.deepEqual(logged.map((e) => [e.action, e.code, e.senderFault]), Array(2).fill(["DeleteMessageBatch", "InternalError", false]));
};

checks["sqs: wrong secret is rejected with SignatureDoesNotMatch and enqueues nothing"] = async () => {
	const queueUrl = queues["payment-completed"];
	const err = await expectRejection(sqsClient(wrongSecret).send(new sqsSdk.SendMessageCommand({
		QueueUrl: queueUrl, MessageBody: "forged",
	})), "SignatureDoesNotMatch", 403);
	assert.match(err.message, /The Canonical String for this request should have been/);
	assert.equal(await depth(queueUrl), 0);

	// The wire shape, as a C client sees it.
	const raw = await sqsJsonRequest("SendMessage", { QueueUrl: queueUrl, MessageBody: "forged" }, { credentials: wrongSecret });
	assert.equal(raw.status, 403);
	assert.equal(raw.headers["content-type"], "application/x-amz-json-1.0");
	assert.equal(raw.headers["x-amzn-query-error"], "SignatureDoesNotMatch;Sender");
	const body = JSON.parse(raw.body);
	assert.equal(body.__type, "com.amazon.coral.service#InvalidSignatureException");
	assert.match(body.message, /^The request signature we calculated does not match/);
	assert.equal(await depth(queueUrl), 0);
};

checks["sqs: unknown access key is rejected with InvalidClientTokenId"] = async () => {
	await expectRejection(sqsClient({ accessKeyId: "AKIDNOBODY", secretAccessKey: "x" }).send(
		new sqsSdk.GetQueueUrlCommand({ QueueName: "payment-requests" })), "InvalidClientTokenId", 403);
	const raw = await sqsJsonRequest("ListQueues", {}, { credentials: { accessKeyId: "AKIDNOBODY", secretAccessKey: "x" } });
	assert.equal(raw.status, 403);
	assert.equal(raw.headers["x-amzn-query-error"], "InvalidClientTokenId;Sender");
	assert.equal(JSON.parse(raw.body).__type, "com.amazon.coral.service#UnrecognizedClientException");
};

checks["sqs: a body changed after signing, a stale date, a wrong region and no signature are rejected"] = async () => {
	const queueUrl = queues["payment-completed"];
	const signedBody = JSON.stringify({ QueueUrl: queueUrl, MessageBody: "amount=10" });
	const tampered = await sqsJsonRequest("SendMessage", null, {
		body: signedBody, sendBody: JSON.stringify({ QueueUrl: queueUrl, MessageBody: "amount=99" }),
	});
	assert.equal(tampered.status, 403);
	assert.equal(tampered.headers["x-amzn-query-error"], "SignatureDoesNotMatch;Sender");

	const stale = await sqsJsonRequest("SendMessage", { QueueUrl: queueUrl, MessageBody: "late" }, {
		signingDate: new Date(Date.now() - 20 * 60 * 1000),
	});
	assert.equal(stale.status, 403);
	assert.match(JSON.parse(stale.body).message, /^Signature expired: /);

	const elsewhere = await sqsJsonRequest("SendMessage", { QueueUrl: queueUrl, MessageBody: "x" }, { signingRegion: "eu-west-1" });
	assert.equal(elsewhere.status, 403);
	assert.match(JSON.parse(elsewhere.body).message, /scoped to a valid region/);

	const anonymous = await sqsJsonRequest("SendMessage", { QueueUrl: queueUrl, MessageBody: "x" }, { sign: false });
	assert.equal(anonymous.status, 403);
	assert.equal(anonymous.headers["x-amzn-query-error"], "MissingAuthenticationToken;Sender");
	assert.equal(await depth(queueUrl), 0);
};

checks["sqs: a call posted to the queue URL's path is accepted, as SQS does"] = async () => {
	const queueUrl = queues["payment-completed"];
	const sent = await sqsJsonRequest("SendMessage", { QueueUrl: queueUrl, MessageBody: "via queue path" }, {
		path: `/${accountId}/payment-completed`,
	});
	assert.equal(sent.status, 200, sent.body);
	await drain(queueUrl);
};

checks["s3: PutObject/GetObject/HeadObject round trip (SDK, default checksums)"] = async () => {
	const key = `payments/pay_${randomUUID()}/request.json`;
	const body = JSON.stringify({ amount: 1234, currency: "EUR" });
	await s3.send(new s3Sdk.PutObjectCommand({ Bucket: bucket, Key: key, Body: body, ContentType: "application/json" }));
	const got = await s3.send(new s3Sdk.GetObjectCommand({ Bucket: bucket, Key: key }));
	assert.equal(await got.Body.transformToString(), body);
	const head = await s3.send(new s3Sdk.HeadObjectCommand({ Bucket: bucket, Key: key }));
	assert.equal(head.ContentLength, Buffer.byteLength(body));
};

checks["s3: a tampered payload hash is rejected and writes nothing"] = async () => {
	const key = `payments/pay_${randomUUID()}/request.json`;
	const response = await rawRequest({
		service: "s3", method: "PUT", path: `/${bucket}/${key}`, body: "amount=10", sendBody: "amount=99",
	});
	assert.equal(response.status, 400, response.body);
	assert.equal(xmlField(response.body, "Code"), "XAmzContentSHA256Mismatch");
	assert.equal(xmlField(response.body, "ClientComputedContentSHA256"), sha256Hex("amount=10"));
	assert.equal(xmlField(response.body, "S3ComputedContentSHA256"), sha256Hex("amount=99"));
	await objectMissing(key);
};

checks["s3: a large body streams through; tampered, it writes nothing"] = async () => {
	const key = `payloads/${randomUUID()}.bin`;
	const big = Buffer.alloc(3 * 1024 * 1024 + 17, "x");
	const ok = await rawRequest({ service: "s3", method: "PUT", path: `/${bucket}/${key}`, body: big });
	assert.equal(ok.status, 200, ok.body);
	const got = await s3.send(new s3Sdk.GetObjectCommand({ Bucket: bucket, Key: key }));
	assert.ok(Buffer.from(await got.Body.transformToByteArray()).equals(big));

	const forgedKey = `payloads/${randomUUID()}.bin`;
	const forged = Buffer.from(big);
	forged[forged.length - 1] = 0x79;
	const bad = await rawRequest({ service: "s3", method: "PUT", path: `/${bucket}/${forgedKey}`, body: big, sendBody: forged });
	assert.equal(xmlField(bad.body, "Code"), "XAmzContentSHA256Mismatch");
	await objectMissing(forgedKey);
};

checks["s3: wrong secret, unsigned x-amz-* header, bad checksum and anonymous access are rejected"] = async () => {
	const key = `payments/${randomUUID()}`;
	await expectRejection(s3Client(wrongSecret).send(new s3Sdk.PutObjectCommand({ Bucket: bucket, Key: key, Body: "x" })),
		"SignatureDoesNotMatch", 403);
	const wrong = await rawRequest({ service: "s3", method: "PUT", path: `/${bucket}/${key}`, body: "x", credentials: wrongSecret });
	assert.equal(wrong.status, 403);
	assert.equal(wrong.headers["content-type"], "application/xml");
	assert.equal(xmlField(wrong.body, "Code"), "SignatureDoesNotMatch");
	assert.ok(xmlField(wrong.body, "CanonicalRequest"));

	const sneaky = await rawRequest({
		service: "s3", method: "PUT", path: `/${bucket}/${key}`, body: "x", extraHeaders: { "x-amz-meta-owner": "mallory" },
	});
	assert.equal(sneaky.status, 403);
	assert.equal(xmlField(sneaky.body, "HeadersNotSigned"), "x-amz-meta-owner");

	const badCrc = Buffer.alloc(4);
	badCrc.writeUInt32BE((crc32("x") + 1) >>> 0);
	const corrupt = await rawRequest({
		service: "s3", method: "PUT", path: `/${bucket}/${key}`, body: "x",
		headers: { "x-amz-checksum-crc32": badCrc.toString("base64") },
	});
	assert.equal(corrupt.status, 400);
	assert.equal(xmlField(corrupt.body, "Code"), "BadDigest");

	const anonymous = await rawRequest({ service: "s3", method: "GET", path: `/${bucket}/${key}`, sign: false });
	assert.equal(anonymous.status, 403);
	assert.equal(xmlField(anonymous.body, "Code"), "AccessDenied");
	await objectMissing(key);
};

checks["s3: UNSIGNED-PAYLOAD and presigned URLs are accepted; a forged or expired presigned URL is not"] = async () => {
	const key = `payloads/${randomUUID()}.txt`;
	const put = await rawRequest({
		service: "s3", method: "PUT", path: `/${bucket}/${key}`, body: "unsigned body",
		headers: { "x-amz-content-sha256": "UNSIGNED-PAYLOAD" },
	});
	assert.equal(put.status, 200, put.body);

	const signer = new SignatureV4({ credentials: goodCredentials, region, service: "s3", sha256: Sha256, uriEscapePath: false });
	// As the S3 presigner does: the payload hash is UNSIGNED-PAYLOAD, named
	// in a header that is neither signed nor moved into the query.
	const unsigned = new Set(["x-amz-content-sha256"]);
	const presign = (signingDate) => signer.presign({
		method: "GET", protocol: "http:", hostname: host, port, path: `/${bucket}/${key}`, query: {},
		headers: { host: `${host}:${port}`, "x-amz-content-sha256": "UNSIGNED-PAYLOAD" },
	}, { expiresIn: 300, signingDate, unsignableHeaders: unsigned, unhoistableHeaders: unsigned });
	const url = await presign(new Date());
	const got = await send({ method: "GET", path: `${url.path}?${queryString(url.query)}`, headers: {} });
	assert.equal(got.status, 200, got.body);
	assert.equal(got.body, "unsigned body");

	const forged = { ...url.query, "X-Amz-Signature": url.query["X-Amz-Signature"].replace(/.$/, (c) => (c === "0" ? "1" : "0")) };
	const refused = await send({ method: "GET", path: `${url.path}?${queryString(forged)}`, headers: {} });
	assert.equal(refused.status, 403);
	assert.equal(xmlField(refused.body, "Code"), "SignatureDoesNotMatch");

	const old = await presign(new Date(Date.now() - 3600 * 1000));
	const expired = await send({ method: "GET", path: `${old.path}?${queryString(old.query)}`, headers: {} });
	assert.equal(expired.status, 403);
	assert.equal(xmlField(expired.body, "Message"), "Request has expired");
};

checks["s3: ListObjectsV2 and DeleteObjects"] = async () => {
	const prefix = `list/${randomUUID()}/`;
	for (const name of ["a.json", "b.json"])
		await s3.send(new s3Sdk.PutObjectCommand({ Bucket: bucket, Key: `${prefix}${name}`, Body: name }));
	const listed = await s3.send(new s3Sdk.ListObjectsV2Command({ Bucket: bucket, Prefix: prefix }));
	assert.deepEqual(listed.Contents.map((o) => o.Key).sort(), [`${prefix}a.json`, `${prefix}b.json`]);
	const deleted = await s3.send(new s3Sdk.DeleteObjectsCommand({
		Bucket: bucket, Delete: { Objects: listed.Contents.map((o) => ({ Key: o.Key })) },
	}));
	assert.equal(deleted.Deleted.length, 2);
	const after = await s3.send(new s3Sdk.ListObjectsV2Command({ Bucket: bucket, Prefix: prefix }));
	assert.equal(after.KeyCount, 0);
};

// Received maxReceiveCount times and never deleted, a message must move to
// the queue's DLQ. selftest.sh gives the queues a 1 s visibility timeout so
// each receive is followed by a redelivery soon.
async function checkRedrive(queueUrl, dlqUrl, fifo) {
	const body = `poison ${randomUUID()}`;
	await sqs.send(new sqsSdk.SendMessageCommand({
		QueueUrl: queueUrl, MessageBody: body,
		...(fifo ? { MessageGroupId: "poison", MessageDeduplicationId: randomUUID() } : {}),
	}));
	let receipts = 0;
	let dead;
	for (let attempt = 0; attempt < maxReceiveCount + 5 && !dead; attempt++) {
		const messages = await receive(queueUrl, { WaitTimeSeconds: 3 });
		if (messages.length > 0) {
			assert.equal(messages[0].Body, body);
			receipts += 1;
			continue;
		}
		[dead] = await receive(dlqUrl, { WaitTimeSeconds: 1, VisibilityTimeout: 30 });
	}
	assert.ok(dead, "the message reached the DLQ");
	assert.equal(dead.Body, body);
	assert.equal(receipts, maxReceiveCount, "received maxReceiveCount times before the move");
	if (fifo)
		assert.equal(dead.Attributes.MessageGroupId, "poison");
	await sqs.send(new sqsSdk.DeleteMessageCommand({ QueueUrl: dlqUrl, ReceiptHandle: dead.ReceiptHandle }));
	assert.equal(await depth(queueUrl), 0);
}

checks["redrive: standard and FIFO messages land in their DLQ after maxReceiveCount receives"] = async () => {
	await Promise.all([
		checkRedrive(queues["operation-events"], dlqs["operation-events"], false),
		checkRedrive(fifoQueues["payment-completed"], fifoDlqs["payment-completed"], true),
	]);
};

checks["cli: sqs-read prints JSON lines with FIFO ids and --delete empties; sqs-count counts"] = async () => {
	const queueUrl = fifoQueues["operation-events"];
	for (const [i, group] of ["g1", "g2"].entries()) {
		await sqs.send(new sqsSdk.SendMessageCommand({
			QueueUrl: queueUrl, MessageBody: `done ${i}`, MessageGroupId: group, MessageDeduplicationId: `dedup-${i}`,
			MessageAttributes: { kind: { DataType: "String", StringValue: "OperationCompleted" } },
		}));
	}
	const counted = await run("node", [join(here, "sqs-count.mjs"), queueUrl]);
	assert.deepEqual(JSON.parse(counted.stdout), { queueUrl, visible: 2, notVisible: 0, delayed: 0 });

	const read = await run("node", [join(here, "sqs-read.mjs"), queueUrl, "--delete", "--idle", "1", "--visibility", "30"]);
	const lines = read.stdout.trim().split("\n").map((line) => JSON.parse(line));
	assert.deepEqual(lines.map((m) => m.body).sort(), ["done 0", "done 1"]);
	for (const line of lines) {
		assert.deepEqual(Object.keys(line), ["messageId", "body", "attributes", "messageAttributes"]);
		assert.equal(line.attributes.ApproximateReceiveCount, "1");
		assert.match(line.attributes.MessageGroupId, /^g[12]$/);
		assert.match(line.attributes.MessageDeduplicationId, /^dedup-[01]$/);
		assert.equal(line.messageAttributes.kind.StringValue, "OperationCompleted");
	}
	assert.equal(await depth(queueUrl), 0);

	const all = await run("node", [join(here, "sqs-count.mjs")]);
	const everyQueue = all.stdout.trim().split("\n").map((line) => JSON.parse(line).queueUrl);
	assert.equal(everyQueue.length, 16, "4 names x (standard, FIFO) x (queue, DLQ)");
};

// libcurl's own SigV4 (CURLOPT_AWS_SIGV4), which payflow's C workers may
// build on, must pass the front as the SDK's does.
checks["curl: requests signed by libcurl's --aws-sigv4 pass the front"] = async () => {
	try {
		await run("curl", ["--version"]);
	} catch {
		console.log("# curl not installed: libcurl cross-check skipped");
		return;
	}
	const user = `${goodCredentials.accessKeyId}:${goodCredentials.secretAccessKey}`;
	const queueUrl = queues["payment-requests"];
	const sent = await run("curl", [
		"-sS", "--fail-with-body", "--aws-sigv4", `aws:amz:${region}:sqs`, "--user", user,
		"-H", "Content-Type: application/x-amz-json-1.0", "-H", "X-Amz-Target: AmazonSQS.SendMessage",
		"--data", JSON.stringify({ QueueUrl: queueUrl, MessageBody: "from libcurl" }), `${endpoint}/`,
	]);
	const { MessageId } = JSON.parse(sent.stdout);
	const [message] = await receive(queueUrl, { VisibilityTimeout: 30 });
	assert.equal(message.MessageId, MessageId);
	assert.equal(message.Body, "from libcurl");
	await sqs.send(new sqsSdk.DeleteMessageCommand({ QueueUrl: queueUrl, ReceiptHandle: message.ReceiptHandle }));

	// S3 wants x-amz-content-sha256 on every request, and libcurl 7.88 adds
	// none: a C client sets it itself (as it must for real S3).
	const key = `payloads/${randomUUID()}.json`;
	const body = JSON.stringify({ from: "libcurl" });
	await run("curl", [
		"-sS", "--fail-with-body", "--aws-sigv4", `aws:amz:${region}:s3`, "--user", user,
		"-H", `x-amz-content-sha256: ${sha256Hex(body)}`, "-X", "PUT", "--data-binary", body, `${endpoint}/${bucket}/${key}`,
	]);
	const got = await run("curl", [
		"-sS", "--fail-with-body", "--aws-sigv4", `aws:amz:${region}:s3`, "--user", user,
		"-H", `x-amz-content-sha256: ${sha256Hex("")}`, `${endpoint}/${bucket}/${key}`,
	]);
	assert.equal(got.stdout, body);
	// curl sent it as a form, which fauxqs alone would have parsed as SNS.
	const head = await s3.send(new s3Sdk.HeadObjectCommand({ Bucket: bucket, Key: key }));
	assert.equal(head.ContentType, "application/x-www-form-urlencoded");
};

checks["restart: queues are back, at the same URLs, empty and working"] = async () => {
	for (const queueUrl of [...Object.values(queues), ...Object.values(fifoQueues), ...Object.values(dlqs), ...Object.values(fifoDlqs)])
		assert.equal(await depth(queueUrl), 0, queueUrl);
	const queueUrl = queues["payment-requests"];
	await sqs.send(new sqsSdk.SendMessageCommand({ QueueUrl: queueUrl, MessageBody: "after restart" }));
	const [message] = await receive(queueUrl, { VisibilityTimeout: 30 });
	assert.equal(message.Body, "after restart");
	await sqs.send(new sqsSdk.DeleteMessageCommand({ QueueUrl: queueUrl, ReceiptHandle: message.ReceiptHandle }));
	await s3.send(new s3Sdk.HeadBucketCommand({ Bucket: bucket }));
};

/* ---- runner ---- */

async function runCheck(name, check) {
	try {
		await check();
		console.log(`ok - ${name}`);
		return true;
	} catch (err) {
		console.log(`not ok - ${name}\n  ${String(err.stack ?? err).split("\n").join("\n  ")}`);
		return false;
	}
}

const mode = process.argv[2] ?? "all";
if (mode !== "all" && mode !== "restart") {
	console.error("usage: node selftest.mjs [all|restart]");
	process.exit(2);
}
const selected = Object.entries(checks).filter(([name]) => (mode === "restart") === name.startsWith("restart:"));
// The redrive check mostly waits for visibility timeouts, on queues no other
// check touches, so it runs alongside the others, which run one by one
// because several share a queue.
const waiting = selected.filter(([name]) => name.startsWith("redrive:"));
const sequential = selected.filter(([name]) => !name.startsWith("redrive:"));
const results = await Promise.all([
	Promise.all(waiting.map(([name, check]) => runCheck(name, check))),
	(async () => {
		const outcomes = [];
		for (const [name, check] of sequential)
			outcomes.push(await runCheck(name, check));
		return outcomes;
	})(),
]);
const outcomes = results.flat();
const passed = outcomes.filter(Boolean).length;
const failed = outcomes.length - passed;
console.log(`selftest: ${passed} passed, ${failed} failed`);
process.exitCode = failed === 0 && passed > 0 ? 0 : 1;
