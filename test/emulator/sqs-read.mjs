// An independent SQS reader for tests: the AWS SDK for JavaScript, not
// payflow's C client, receives from a queue and prints one JSON line per
// message:
//   {"messageId":…,"body":…,"attributes":{…},"messageAttributes":{…}}
// attributes holds the system attributes (ApproximateReceiveCount,
// SentTimestamp, and MessageGroupId, MessageDeduplicationId, SequenceNumber
// on FIFO queues).
//
// Usage: node sqs-read.mjs QUEUE_URL [--max N] [--idle SECONDS] [--delete]
//                          [--visibility SECONDS]
//   --max N           stop after N messages (default: no limit)
//   --idle SECONDS    stop once nothing arrived for this long (default 3)
//   --delete          delete each message after printing it
//   --visibility S    visibility timeout for the receives (default: the
//                     queue's); without --delete the messages reappear
//                     after it, each is printed once per run
//
// Without --delete a FIFO queue shows only the head of each message group:
// SQS (and fauxqs) hold back a group while one of its messages is in flight.
// Credentials and region come from AWS_* (env.sh) or the test defaults; the
// endpoint is the queue URL's origin.

import { parseArgs } from "node:util";
import { clientCredentials, clientRegion, requireFromCache } from "./emulator-config.mjs";

const { SQSClient, ReceiveMessageCommand, DeleteMessageCommand } = requireFromCache("@aws-sdk/client-sqs");

// A reader piped into head must stop quietly when head has had enough.
process.stdout.on("error", (err) => {
	if (err.code !== "EPIPE")
		throw err;
	process.exit(0);
});

function usage(message) {
	console.error(`sqs-read: ${message}\nusage: node sqs-read.mjs QUEUE_URL [--max N] [--idle SECONDS] [--delete] [--visibility SECONDS]`);
	process.exit(2);
}

function nonNegativeInt(name, raw, fallback) {
	if (raw === undefined)
		return fallback;
	if (!/^\d+$/.test(raw))
		usage(`${name} must be a non-negative integer, got '${raw}'`);
	return Number(raw);
}

let parsed;
try {
	parsed = parseArgs({
		allowPositionals: true,
		options: {
			max: { type: "string" },
			idle: { type: "string" },
			delete: { type: "boolean", default: false },
			visibility: { type: "string" },
		},
	});
} catch (err) {
	usage(err.message);
}
const { values, positionals } = parsed;
if (positionals.length !== 1)
	usage("exactly one queue URL is needed");
const queueUrl = positionals[0];
const max = nonNegativeInt("--max", values.max, Infinity);
const idleMs = nonNegativeInt("--idle", values.idle, 3) * 1000;
const visibility = nonNegativeInt("--visibility", values.visibility, undefined);

const sqs = new SQSClient({
	endpoint: new URL(queueUrl).origin,
	region: clientRegion(),
	credentials: clientCredentials(),
});

const printed = new Set();
let lastArrival = Date.now();
while (printed.size < max && Date.now() - lastArrival < idleMs) {
	// Short long-polls keep the idle limit close to what was asked.
	const waitSeconds = Math.max(0, Math.min(1, Math.floor((idleMs - (Date.now() - lastArrival)) / 1000)));
	const { Messages = [] } = await sqs.send(new ReceiveMessageCommand({
		QueueUrl: queueUrl,
		MaxNumberOfMessages: Math.min(10, max - printed.size),
		WaitTimeSeconds: waitSeconds,
		MessageSystemAttributeNames: ["All"],
		MessageAttributeNames: ["All"],
		...(visibility !== undefined ? { VisibilityTimeout: visibility } : {}),
	}));
	for (const message of Messages) {
		if (printed.has(message.MessageId) || printed.size >= max)
			continue;
		printed.add(message.MessageId);
		lastArrival = Date.now();
		process.stdout.write(JSON.stringify({
			messageId: message.MessageId,
			body: message.Body,
			attributes: message.Attributes ?? {},
			messageAttributes: message.MessageAttributes ?? {},
		}) + "\n");
		if (values.delete)
			await sqs.send(new DeleteMessageCommand({ QueueUrl: queueUrl, ReceiptHandle: message.ReceiptHandle }));
	}
	if (Messages.length === 0 && waitSeconds === 0)
		await new Promise((resolve) => setTimeout(resolve, 100));
}
