#!/bin/bash
# A message whose body holds U+0000 reaches the payment worker like any other
# bad message: received whole (its real length, its MD5 checked), logged as
# unreadable, left to the redrive policy and recorded in payflow.dead_letters
# on its last receive; payments received beside it go through.
#
# SQS (and fauxqs) refuse U+0000 at SendMessage (InvalidMessageContents), so
# the body is sent through the emulator the way such a message arrives in
# practice: published to an SNS topic whose subscription delivers raw
# messages to the queue, which checks nothing. Before the fix the whole
# ReceiveMessage answer was unreadable (jansson refuses \u0000 unless told
# otherwise) and the bodies were measured with strlen: the message, and any
# received with it, went to the DLQ unrecorded.
#
# Uses the running cluster and its own emulator (ports 4688/4689).
set -euo pipefail
source "$(dirname "$0")/worker_common.bash"

wk_init worker-nul 4688 4689 2
P=nul-$WK_RUN

# publish_raw: an event-looking body holding U+0000, through SNS raw delivery
publish_raw() {
	node --input-type=module -e '
import { clientCredentials, clientRegion, requireFromCache } from "./test/emulator/emulator-config.mjs";
const { SNSClient, CreateTopicCommand, SubscribeCommand, PublishCommand } = requireFromCache("@aws-sdk/client-sns");
const { SQSClient, GetQueueAttributesCommand } = requireFromCache("@aws-sdk/client-sqs");
const [queueUrl, prefix] = process.argv.slice(1);
const endpoint = new URL(queueUrl).origin;
const options = { region: clientRegion(), credentials: clientCredentials(), endpoint };
const sns = new SNSClient(options);
const sqs = new SQSClient(options);
const topic = await sns.send(new CreateTopicCommand({ Name: "payflow-raw-" + prefix }));
const arn = (await sqs.send(new GetQueueAttributesCommand({ QueueUrl: queueUrl, AttributeNames: ["QueueArn"] }))).Attributes.QueueArn;
await sns.send(new SubscribeCommand({ TopicArn: topic.TopicArn, Protocol: "sqs", Endpoint: arn,
	Attributes: { RawMessageDelivery: "true" } }));
await sns.send(new PublishCommand({ TopicArn: topic.TopicArn,
	// the character itself, not the six-character escape JSON.stringify would write
	Message: "{\"eventType\":\"PaymentRequested\",\"eventVersion\":1,\"note\":\"" + prefix + "-a\u0000b\"}" }));
' "$PAYFLOW_QUEUE_URL" "$P"
}

pf_ok "a body with U+0000 is published to the payment queue (SNS raw delivery)" publish_raw
op=$(wk_submit "$P-1")
wk_start_relay
wk_start_worker w1

dead_letters() {
	q -c "SELECT count(*) FROM payflow.dead_letters
		   WHERE queue = 'payment-requests' AND message_body LIKE '%$P-a%' AND error->>'messageId' IS NOT NULL"
}
recorded() { [ "$(dead_letters)" = 1 ]; }

pf_ok "the payment beside it completes" wk_wait_status "$op" PAYMENT_COMPLETED 60
pf_ok "the worker logs it as a bad message, left to the redrive policy" \
	pf_wait_for 30 grep -q "message left to the queue's redrive policy" "$WK_DIR/w1.log"
pf_ok "on its last receive (2) it is recorded in payflow.dead_letters" pf_wait_for 60 recorded
pf_ok "no receive failed on an unreadable answer" bash -c "! grep -q 'unparsable JSON' '$WK_DIR/w1.log'"
pf_ok "no body was refused for its MD5" bash -c "! grep -q 'MD5OfBody' '$WK_DIR/w1.log'"
wk_invariants "$op"
q -c "DELETE FROM payflow.dead_letters WHERE message_body LIKE '%$P-a%'" >/dev/null
pf_done
