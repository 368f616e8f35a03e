// Creates payflow's queues and bucket through the SigV4 front, with properly
// signed SDK calls (so every start exercises the front), then writes the
// env file that tests and workers source.
//
// fauxqs keeps everything in memory: start.sh runs this after every start,
// and every step is idempotent so a run against a live emulator changes
// nothing but attributes that differ from the settings.
//
// Queues, per name in DESIGN.md §2: <name> and <name>.fifo, each with its own
// DLQ (<name>-dlq, <name>-dlq.fifo) named by a RedrivePolicy.

import { mkdirSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import {
	bucketName, config, frontEndpoint, queueBaseNames, requireFromCache,
} from "./emulator-config.mjs";

const {
	SQSClient, CreateQueueCommand, GetQueueAttributesCommand, GetQueueUrlCommand, SetQueueAttributesCommand,
} = requireFromCache("@aws-sdk/client-sqs");
const { S3Client, CreateBucketCommand } = requireFromCache("@aws-sdk/client-s3");

const clientConfig = {
	endpoint: frontEndpoint(),
	region: config.region,
	credentials: { accessKeyId: config.accessKeyId, secretAccessKey: config.secretAccessKey },
	maxAttempts: 3,
};
const sqs = new SQSClient(clientConfig);
const s3 = new S3Client({ ...clientConfig, forcePathStyle: true });

// CreateQueue returns the existing queue when the attributes match and fails
// with QueueNameExists when they differ; then the settings win.
async function ensureQueue(name, attributes) {
	try {
		const created = await sqs.send(new CreateQueueCommand({ QueueName: name, Attributes: attributes }));
		return created.QueueUrl;
	} catch (err) {
		if (err.name !== "QueueNameExists")
			throw err;
	}
	const { QueueUrl } = await sqs.send(new GetQueueUrlCommand({ QueueName: name }));
	// FifoQueue is fixed at creation; SetQueueAttributes refuses it.
	const settable = Object.fromEntries(Object.entries(attributes).filter(([key]) => key !== "FifoQueue"));
	await sqs.send(new SetQueueAttributesCommand({ QueueUrl, Attributes: settable }));
	return QueueUrl;
}

async function queueArn(queueUrl) {
	const { Attributes } = await sqs.send(new GetQueueAttributesCommand({
		QueueUrl: queueUrl, AttributeNames: ["QueueArn"],
	}));
	return Attributes.QueueArn;
}

async function ensureQueuePair(baseName, fifo) {
	const suffix = fifo ? ".fifo" : "";
	const common = { VisibilityTimeout: String(config.visibilityTimeout) };
	if (fifo) {
		// Deduplication by the MessageDeduplicationId payflow sets (the
		// eventId), never by content: two events may carry equal bodies.
		Object.assign(common, { FifoQueue: "true", ContentBasedDeduplication: "false" });
	}
	const dlqUrl = await ensureQueue(`${baseName}-dlq${suffix}`, common);
	const redrivePolicy = JSON.stringify({
		deadLetterTargetArn: await queueArn(dlqUrl),
		maxReceiveCount: config.maxReceiveCount,
	});
	const url = await ensureQueue(`${baseName}${suffix}`, { ...common, RedrivePolicy: redrivePolicy });
	return { url, dlqUrl };
}

async function ensureBucket(name) {
	try {
		await s3.send(new CreateBucketCommand({ Bucket: name }));
	} catch (err) {
		if (err.name !== "BucketAlreadyOwnedByYou")
			throw err;
	}
}

function shellQuote(value) {
	return `'${String(value).replaceAll("'", "'\\''")}'`;
}

function pairs(entries) {
	return entries.map(([name, url]) => `${name}=${url}`).join(",");
}

const standard = [];
const fifo = [];
const standardDlq = [];
const fifoDlq = [];
for (const name of queueBaseNames) {
	const [plain, twin] = await Promise.all([ensureQueuePair(name, false), ensureQueuePair(name, true)]);
	standard.push([name, plain.url]);
	standardDlq.push([name, plain.dlqUrl]);
	fifo.push([name, twin.url]);
	fifoDlq.push([name, twin.dlqUrl]);
}
await ensureBucket(bucketName);

// Destination names stay the plain ones in every list (the relay maps an
// outbox destination to a URL), whichever queue variant the URL is.
const variables = [
	["AWS_ENDPOINT_URL", frontEndpoint()],
	["AWS_REGION", config.region],
	["AWS_ACCESS_KEY_ID", config.accessKeyId],
	["AWS_SECRET_ACCESS_KEY", config.secretAccessKey],
	["PAYFLOW_QUEUE_URLS", pairs(standard)],
	["PAYFLOW_QUEUE_URLS_FIFO", pairs(fifo)],
	["PAYFLOW_DLQ_URLS", pairs(standardDlq)],
	["PAYFLOW_DLQ_URLS_FIFO", pairs(fifoDlq)],
	["PAYFLOW_S3_BUCKET", bucketName],
	["PAYFLOW_EMULATOR_MAX_RECEIVE_COUNT", config.maxReceiveCount],
];
const text = "# Written by test/emulator/start.sh: the local SQS/S3 stack behind the SigV4 front.\n" +
	variables.map(([name, value]) => `export ${name}=${shellQuote(value)}`).join("\n") + "\n";

// Written whole then renamed, so a reader never sources half a file.
mkdirSync(config.runDir, { recursive: true });
const envFile = join(config.runDir, "env.sh");
writeFileSync(`${envFile}.tmp`, text);
renameSync(`${envFile}.tmp`, envFile);
process.stdout.write(text);
