// Prints the approximate message counts of SQS queues, one JSON line each:
//   {"queueUrl":…,"visible":N,"notVisible":N,"delayed":N}
// (ApproximateNumberOfMessages, …NotVisible, …Delayed). In fauxqs the counts
// are exact; on real SQS they lag.
//
// Usage: node sqs-count.mjs [QUEUE_URL...]
//   Without URLs, every queue the endpoint lists (AWS_ENDPOINT_URL, else the
//   front's default address).
// Credentials and region come from AWS_* (env.sh) or the test defaults.

import {
	clientCredentials, clientRegion, frontEndpoint, requireFromCache,
} from "./emulator-config.mjs";

const { SQSClient, GetQueueAttributesCommand, ListQueuesCommand } = requireFromCache("@aws-sdk/client-sqs");

// A reader piped into head must stop quietly when head has had enough.
process.stdout.on("error", (err) => {
	if (err.code !== "EPIPE")
		throw err;
	process.exit(0);
});

const clients = new Map();
function clientFor(endpoint) {
	if (!clients.has(endpoint))
		clients.set(endpoint, new SQSClient({ endpoint, region: clientRegion(), credentials: clientCredentials() }));
	return clients.get(endpoint);
}

let queueUrls = process.argv.slice(2);
if (queueUrls.some((arg) => arg.startsWith("-"))) {
	console.error("usage: node sqs-count.mjs [QUEUE_URL...]");
	process.exit(2);
}
if (queueUrls.length === 0) {
	const listing = await clientFor(process.env.AWS_ENDPOINT_URL || frontEndpoint()).send(new ListQueuesCommand({}));
	queueUrls = (listing.QueueUrls ?? []).sort();
}

for (const queueUrl of queueUrls) {
	const { Attributes } = await clientFor(new URL(queueUrl).origin).send(new GetQueueAttributesCommand({
		QueueUrl: queueUrl,
		AttributeNames: [
			"ApproximateNumberOfMessages",
			"ApproximateNumberOfMessagesNotVisible",
			"ApproximateNumberOfMessagesDelayed",
		],
	}));
	process.stdout.write(JSON.stringify({
		queueUrl,
		visible: Number(Attributes.ApproximateNumberOfMessages),
		notVisible: Number(Attributes.ApproximateNumberOfMessagesNotVisible),
		delayed: Number(Attributes.ApproximateNumberOfMessagesDelayed ?? 0),
	}) + "\n");
}
