// Sends messages straight to payflow's queues, past the relay: the soak
// runner's duplicated and poison messages.  Reads one JSON object a line on
// stdin, {"destination": "payment-requests", "body": "<text>", ...}, maps
// the destination through PAYFLOW_QUEUE_URLS (as the relay does) and sends
// the body as it is.  Prints "eventId<TAB>operationId<TAB>destination" for
// each message sent (the fields of the input line, empty when absent) and
// exits 1 if any send failed.
//
// Usage: node test/soak/sqs-send.mjs < lines      (env: env.sh of the emulator)

import { createInterface } from "node:readline";
import { pathToFileURL } from "node:url";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const emulator = await import(pathToFileURL(join(here, "../emulator/emulator-config.mjs")).href);
const { SQSClient, SendMessageCommand } = emulator.requireFromCache("@aws-sdk/client-sqs");

const routes = Object.fromEntries((process.env.PAYFLOW_QUEUE_URLS ?? "").split(",")
	.filter((pair) => pair.includes("=")).map((pair) => [pair.slice(0, pair.indexOf("=")), pair.slice(pair.indexOf("=") + 1)]));
const sqs = new SQSClient({
	endpoint: process.env.AWS_ENDPOINT_URL || emulator.frontEndpoint(),
	region: emulator.clientRegion(),
	credentials: emulator.clientCredentials(),
	maxAttempts: 2,
});

let failed = 0;
for await (const line of createInterface({ input: process.stdin })) {
	if (line.trim() === "")
		continue;
	const message = JSON.parse(line);
	const queueUrl = message.queueUrl ?? routes[message.destination];
	if (!queueUrl) {
		console.error(`sqs-send: no queue URL for destination '${message.destination}'`);
		failed++;
		continue;
	}
	try {
		await sqs.send(new SendMessageCommand({ QueueUrl: queueUrl, MessageBody: message.body }));
		console.log(`${message.eventId ?? ""}\t${message.operationId ?? ""}\t${message.destination ?? queueUrl}`);
	} catch (err) {
		console.error(`sqs-send: ${queueUrl}: ${err.name}: ${err.message}`);
		failed++;
	}
}
process.exit(failed ? 1 : 0);
