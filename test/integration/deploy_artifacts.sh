#!/bin/bash
# deploy/ checked against the code it deploys, without AWS: every JSON and
# YAML file parses; the CloudFormation templates reference only what they
# declare; the queues are the destinations the extension emits; each task
# definition gives the settings its program requires and names none it does
# not read (both as the built program prints them: --print-settings), keeps
# secrets in `secrets`,
# and stops no sooner than its drain; IAM is per process and per queue;
# the nested stacks get their parameters, services drain and scale on work
# per task slot, alarms cover every queue and gauge (deploy/check/check.mjs).
# Then the real tools: tasks.yaml is what deploy/check/tasks-to-cfn.mjs makes
# of deploy/ecs/*.json, cfn-lint passes every template with no error and no
# warning, cdk-nag's AwsSolutions rules leave no finding
# (deploy/check/nag.mjs, through aws-cdk-lib's CfnInclude, offline), and each
# task definition has the RegisterTaskDefinition shape of botocore's ECS
# model (deploy/check/taskdef_shape.py). Each check is shown failing on a
# broken copy; the task definitions render, the programs accept them and,
# when a test cluster is up, install.sql and the metrics publisher's SQL
# run against the extension.
#
# The npm packages (yaml, aws-cdk-lib, cdk-nag, constructs, pinned by
# deploy/check/package-lock.json) are installed once into a cache outside
# the tree, like test/emulator's.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
source test/lib/assert.sh
source test/lib/free_port.sh

cache=${PAYFLOW_CACHE_DIR:-$REPO/.cache}/deploy-check
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# ---- the checkers' dependencies
install_yaml() {
	mkdir -p "$cache"
	exec 9>"$cache/.install.lock"
	flock 9
	local want have
	want=$(sha256sum deploy/check/package-lock.json | cut -d' ' -f1)
	have=$(cat "$cache/.installed-lock.sha256" 2>/dev/null || true)
	if [ "$want" != "$have" ] || [ ! -f "$cache/node_modules/yaml/package.json" ]; then
		rm -f "$cache/.installed-lock.sha256"
		cp deploy/check/package.json deploy/check/package-lock.json "$cache/"
		npm ci --prefix "$cache" --ignore-scripts --no-audit --no-fund --loglevel=error >&2
		printf '%s\n' "$want" >"$cache/.installed-lock.sha256"
	fi
	exec 9>&-
}
install_yaml
export PAYFLOW_DEPLOY_CHECK_MODULES=$cache/node_modules
# check.mjs takes each program's settings from the program (--print-settings)
for b in payflow-relay payflow-worker payflow-api payflow-s3-sweep; do
	[ -x "workers/bin/$b" ] || make -s -C workers >/dev/null
done
export PAYFLOW_BIN_DIR=$REPO/workers/bin

# ---- the real tree passes
if node deploy/check/check.mjs "$REPO" >"$work/check.out" 2>&1; then
	echo "ok - deploy/check/check.mjs passes on the tree ($(grep -c '^ok' "$work/check.out") checks)"
else
	grep -v '^ok' "$work/check.out" | sed 's/^/    /'
	echo "not ok - deploy/check/check.mjs passes on the tree"
	PF_FAILURES=$((PF_FAILURES + 1))
fi

# ---- the real tools on the real tree
tool_passes() {	# tool_passes NAME COMMAND...: ok when it exits 0, else its output
	local name=$1
	shift
	if "$@" >"$work/tool.out" 2>&1; then
		echo "ok - $name"
	else
		sed 's/^/    /' "$work/tool.out" | head -n 40
		echo "not ok - $name"
		PF_FAILURES=$((PF_FAILURES + 1))
	fi
}
tool_passes "tasks.yaml is what tasks-to-cfn.mjs makes of deploy/ecs/*.json" node deploy/check/tasks-to-cfn.mjs "$REPO" --check
echo "# $(cfn-lint --version)"
# no error, no warning: cfn-lint exits 0 only then (a warning beside a resource is
# waived there, in its Metadata, with the reason in a comment)
tool_passes "cfn-lint: every template in deploy/aws, no error and no warning" cfn-lint deploy/aws/*.yaml
started=$SECONDS
tool_passes "cdk-nag AwsSolutions over every template (CfnInclude, offline): no finding left" node deploy/check/nag.mjs "$REPO"
grep '^ok' "$work/tool.out" | sed 's/^/    /'
echo "# cdk-nag took $((SECONDS - started)) s"
tool_passes "every task definition has the RegisterTaskDefinition shape (botocore's ECS model)" \
	python3 deploy/check/taskdef_shape.py deploy/ecs/*.json

# ---- and fails on broken copies, each naming what broke
# A copy of just what the checker reads.
copy_tree() {
	rm -rf "$work/tree"
	mkdir -p "$work/tree/extension/sql"
	cp -r deploy "$work/tree/"
	cp extension/sql/tables.sql "$work/tree/extension/sql/"
	mkdir -p "$work/tree/extension/sql/flavour-sql"
	cp extension/sql/flavour-sql/helpers.sql "$work/tree/extension/sql/flavour-sql/"
}
# broken NAME EXPECTED-FAILURE-PATTERN EDIT-COMMAND...: the edit, made in the
# copy, must make the checker fail with a "not ok" line matching the pattern.
broken() {
	local name=$1 pattern=$2
	shift 2
	copy_tree
	(cd "$work/tree" && "$@")
	if node deploy/check/check.mjs "$work/tree" >"$work/broken.out" 2>&1; then
		echo "not ok - broken copy ($name): the checker passed"
		PF_FAILURES=$((PF_FAILURES + 1))
	elif grep '^not ok' "$work/broken.out" >"$work/not-ok.out" && grep -- "$pattern" "$work/not-ok.out" >"$work/match.out"; then
		echo "ok - broken copy ($name) fails: $(head -c 150 "$work/match.out" | head -n 1)"
	else
		sed 's/^/    /' "$work/not-ok.out"
		echo "not ok - broken copy ($name): failed, but not on '$pattern'"
		PF_FAILURES=$((PF_FAILURES + 1))
	fi
}
jedit() {	# jedit FILE JS-EXPRESSION-ON-t: edit a JSON file in place
	node -e 'const fs=require("fs");const f=process.argv[1];const t=JSON.parse(fs.readFileSync(f,"utf8"));(new Function("t",process.argv[2]))(t);fs.writeFileSync(f,JSON.stringify(t,null,2))' "$1" "$2"
}
c0='t.containerDefinitions[0]'

broken "database URL moved to environment" "no secret-looking variable in environment" \
	jedit deploy/ecs/payflow-relay.json "$c0.secrets=[];$c0.environment.push({name:'PAYFLOW_DATABASE_URL',value:'postgres://u:p@db/x'})"
broken "password inside a value" "no credentials inside an environment value" \
	jedit deploy/ecs/payflow-worker-invoice.json "$c0.environment.push({name:'PAYFLOW_INVOICE_URL',value:'https://u:hunter2@invoices.example/'})"
broken "a setting the code does not read" "every PAYFLOW_\*/AWS_\* variable is one worker --role payment reads" \
	jedit deploy/ecs/payflow-worker-payment.json "$c0.environment.push({name:'PAYFLOW_LEGACY_TIMEOUT_SECONDS',value:'60'})"
broken "required setting missing" "every setting worker --role invoice requires is given" \
	jedit deploy/ecs/payflow-worker-invoice.json "$c0.environment=$c0.environment.filter(e=>e.name!=='PAYFLOW_INVOICE_URL')"
broken "ODBC string missing" "every setting worker --role payment requires is given" \
	jedit deploy/ecs/payflow-worker-payment.json "$c0.secrets=$c0.secrets.filter(e=>e.name!=='PAYFLOW_LEGACY_ODBC')"
broken "stopTimeout below the drain" "stopTimeout 60 >= PAYFLOW_DRAIN_SECONDS 100" \
	jedit deploy/ecs/payflow-worker-payment.json "$c0.stopTimeout=60"
broken "drain raised past what ECS allows" "stopTimeout within Fargate's 120 s" \
	jedit deploy/ecs/payflow-worker-payment.json "$c0.stopTimeout=300"
broken "worker on another role's queue" "PAYFLOW_QUEUE_URL is the invoice-requests queue's URL output" \
	jedit deploy/ecs/payflow-worker-invoice.json "$c0.environment.find(e=>e.name==='PAYFLOW_QUEUE_URL').value='\${PaymentRequestsQueueUrl}'"
broken "concurrency out of range" "values fit the settings' types and ranges" \
	jedit deploy/ecs/payflow-worker-webhook.json "$c0.environment.push({name:'PAYFLOW_CONCURRENCY',value:'0'})"
broken "api listening on loopback" "PAYFLOW_LISTEN reachable from outside the container" \
	jedit deploy/ecs/payflow-api.json "$c0.environment.find(e=>e.name==='PAYFLOW_LISTEN').value='127.0.0.1:8080'"
broken "webhook attempts beyond the DLQ threshold" "PAYFLOW_WEBHOOK_MAX_ATTEMPTS 20 <= the queues' MaxReceiveCount" \
	jedit deploy/ecs/payflow-worker-webhook.json "$c0.environment.find(e=>e.name==='PAYFLOW_WEBHOOK_MAX_ATTEMPTS').value='20'"
broken "malformed JSON" "payflow-relay.json parses as JSON" \
	sed -i 's/"family"/family/' deploy/ecs/payflow-relay.json
broken "short-form !Ref in a template" "queues.yaml parses as plain YAML" \
	sed -i '0,/Ref: MaxReceiveCount/s//!Ref MaxReceiveCount/' deploy/aws/queues.yaml
broken "queue renamed away from its destination" "PAYFLOW_QUEUE_URLS names exactly the destinations payflow.sql emits" \
	sed -i 's/invoice-requests=\${InvoiceRequestsQueue}/invoices=${InvoiceRequestsQueue}/' deploy/aws/queues.yaml
broken "the extension emits a new destination" "PAYFLOW_QUEUE_URLS names exactly the destinations payflow.sql emits" \
	sed -i "0,/('operation-events', 'the terminal events/s//('operation-failures', 'the terminal events/" extension/sql/tables.sql
broken "DLQ without SSE" "invoice-requests: SSE" \
	sed -i '/InvoiceRequestsDeadLetterQueue:/,/RedriveAllowPolicy/s/SqsManagedSseEnabled: true/SqsManagedSseEnabled: false/' deploy/aws/queues.yaml
broken "a typo in a Fn::GetAtt" "every Ref, Fn::GetAtt" \
	sed -i 's/Fn::GetAtt: \[PaymentRequestsDeadLetterQueue, Arn\]/Fn::GetAtt: [PaymentRequestDeadLetterQueue, Arn]/' deploy/aws/queues.yaml
broken "worker role widened to another queue" "payment worker consumes payment-requests only" \
	sed -i '/PaymentWorkerTaskRole:/,/ReadRequests/s/Ref: PaymentRequestsQueueArn/Ref: InvoiceRequestsQueueArn/' deploy/aws/iam.yaml
broken "a secret the execution role may not read" "payflow-worker-payment.json: its execution role reads exactly the secrets it names" \
	sed -i '/PaymentWorkerExecutionRole:/,/DecryptItsSecrets/{/Ref: LegacyOdbcSecretArn/d}' deploy/aws/iam.yaml
broken "the webhook's execution role may read the ODBC string" "webhook worker's execution role reads its own database URL and nothing else" \
	sed -i '/WebhookWorkerExecutionRole:/,/DecryptItsSecrets/s/- Ref: DatabaseUrlWebhookSecretArn/- Ref: DatabaseUrlWebhookSecretArn\n                  - Ref: LegacyOdbcSecretArn/' deploy/aws/iam.yaml
broken "two services share an execution role" "an execution role of its own" \
	jedit deploy/ecs/payflow-worker-invoice.json "t.executionRoleArn=t.executionRoleArn.replace('-invoice-exec','-webhook-exec')"
broken "a role name without the region" "carrying the region" \
	jedit deploy/ecs/payflow-relay.json "t.taskRoleArn=t.taskRoleArn.replace('\${Region}-','')"
broken "libpq not verifying the server" "PGSSLMODE=verify-full" \
	jedit deploy/ecs/payflow-api.json "$c0.environment.find(e=>e.name==='PGSSLMODE').value='require'"
broken "a DLQ without the TLS-only policy" "every queue and DLQ denies calls without TLS" \
	sed -i '/QueuesTlsOnlyPolicy:/,/PolicyDocument/{/Ref: OperationEventsDeadLetterQueue/d}' deploy/aws/queues.yaml
broken "a queue deleted with the stack" "DeletionPolicy and UpdateReplacePolicy Retain" \
	sed -i '0,/    DeletionPolicy: Retain/{//d}' deploy/aws/queues.yaml
broken "payload expiry below retention_failed + lifetime" "PayloadExpirationDays >=" \
	sed -i 's/^    MinValue: 32$/    MinValue: 30/' deploy/aws/queues.yaml
broken "a worker scaling on visible messages only" "payment worker scales on (visible + in flight)" \
	sed -i '/PaymentWorkerScalingOnWorkPerSlot:/,/ScalableTarget:/s/visible + inflight/visible/g' deploy/aws/services.yaml
broken "payment scaling past the step limit" "counts no more work than the step limit admits" \
	sed -i 's/IF(${PaymentStepLimit} > 0 AND visible + inflight > ${PaymentStepLimit}, ${PaymentStepLimit}, visible + inflight)/(visible + inflight)/' deploy/aws/services.yaml
broken "a deployment that stops old tasks first" "PaymentWorkerService starts new tasks before stopping old ones" \
	sed -i '/PaymentWorkerService:/,/DeploymentCircuitBreaker/s/MinimumHealthyPercent: 100/MinimumHealthyPercent: 0/' deploy/aws/services.yaml
broken "/metrics reachable through the load balancer" "/metrics answers 404 at the load balancer" \
	sed -i 's|Values: \[/metrics, /metrics/\*\]|Values: [/metric]|' deploy/aws/services.yaml
broken "the webhook worker reaching port 22" "the webhook worker may reach 443 and the database only" \
	python3 -c 'import sys; p = "deploy/aws/network.yaml"; s = open(p).read(); open(p, "w").write(s.replace(
		"  WebhookWorkerToDatabase:", "  WebhookWorkerToSsh:\n    Type: AWS::EC2::SecurityGroupEgress\n    Properties:\n      GroupId:\n"
		"        Fn::GetAtt: [WebhookWorkerSecurityGroup, GroupId]\n      IpProtocol: tcp\n      FromPort: 22\n      ToPort: 22\n"
		"      CidrIp: 10.0.0.0/8\n  WebhookWorkerToDatabase:"))'
broken "an alarm on a metric nobody publishes" "read metrics the metrics task publishes" \
	sed -i 's/MetricName: WebhookFailuresOpen/MetricName: WebhookFailuresOpened/' deploy/aws/observability.yaml
broken "a nested stack missing a parameter" "IamStack gets every parameter its template requires" \
	sed -i '/^  IamStack:/,/^  TasksStack:/{/^        LegacyOdbcSecretArn:/,+2d}' deploy/aws/payflow.yaml
broken "a parameter without a constraint naming it" "ConstraintDescription starts with its name" \
	sed -i 's/ConstraintDescription: "LegacyCidr: /ConstraintDescription: "/' deploy/aws/network.yaml
broken "a bucket whose listings show each request's MD5 (SSE-S3)" "bucket encrypted with SSE-KMS" \
	sed -i 's/SSEAlgorithm: aws:kms/SSEAlgorithm: AES256/' deploy/aws/queues.yaml
broken "the S3 sweeper may read payloads" "s3-sweep may only s3:ListBucket and s3:DeleteObject" \
	sed -i '/S3SweepTaskRole:/,/S3SweepScheduleRole:/s/Action: s3:DeleteObject/Action: [s3:DeleteObject, s3:GetObject]/' deploy/aws/iam.yaml
broken "the S3 sweeper deleting outside its prefixes" "s3-sweep deletes under payments/ and requests/ only" \
	sed -i '/S3SweepTaskRole:/,/S3SweepScheduleRole:/s|\${PayloadBucketArn}/requests/\*|${PayloadBucketArn}/*|' deploy/aws/iam.yaml
broken "the sweeper's schedule may run any task" "the schedule may only RunTask the sweeper's task definition" \
	sed -i 's|task-definition/payflow-\${Environment}-s3-sweep:\*|task-definition/*|' deploy/aws/iam.yaml
broken "the sweeper as a loop under a schedule" "payflow-s3-sweep runs one pass (--once)" \
	jedit deploy/ecs/payflow-s3-sweep.json "$c0.command=['payflow-s3-sweep']"
broken "no schedule for the sweeper" "one service or schedule per task definition" \
	sed -i '/^  S3SweepSchedule:/,/^Outputs:/{/^Outputs:/!d}' deploy/aws/services.yaml
# the facts come from the programs themselves: copies of them that print what
# the change would make them print (a relay that no longer reads a setting its
# task gives; a webhook worker that now requires one its task does not give)
mkdir -p "$work/bin-broken"
cp workers/bin/payflow-api workers/bin/payflow-s3-sweep "$work/bin-broken/"
cat >"$work/bin-broken/payflow-relay" <<-EOF
	#!/bin/sh
	"$REPO/workers/bin/payflow-relay" "\$@" | grep -v '"name":"PAYFLOW_RELAY_IN_FLIGHT"'
EOF
cat >"$work/bin-broken/payflow-worker" <<-EOF
	#!/bin/sh
	"$REPO/workers/bin/payflow-worker" "\$@" | sed 's/^\({"name":"PAYFLOW_DB_CONNECTIONS",.*"required":\)false/\1true/'
EOF
chmod +x "$work/bin-broken/payflow-relay" "$work/bin-broken/payflow-worker"
PAYFLOW_BIN_DIR=$work/bin-broken broken "the relay stops reading a setting its task gives" \
	"payflow-relay.json: every PAYFLOW_\*/AWS_\* variable is one relay reads" true
PAYFLOW_BIN_DIR=$work/bin-broken broken "a setting becomes required" \
	"payflow-worker-webhook.json: every setting worker --role webhook requires is given (PAYFLOW_DATABASE_URL, PAYFLOW_QUEUE_URL, PAYFLOW_DB_CONNECTIONS)" true
PAYFLOW_BIN_DIR=$work/no-programs broken "no programs to ask" "printed no settings" true

# ---- the real tools fail on broken copies too
# broken_tool NAME EXPECTED-OUTPUT-PATTERN CHECK-COMMAND -- EDIT-COMMAND...: the check
# command, run in the copy after the edit, must fail with output matching the pattern.
broken_tool() {
	local name=$1 pattern=$2
	shift 2
	local -a check=()
	while [ "$1" != -- ]; do check+=("$1"); shift; done
	shift
	copy_tree
	(cd "$work/tree" && "$@")
	if (cd "$work/tree" && "${check[@]}") >"$work/broken.out" 2>&1; then
		echo "not ok - broken copy ($name): ${check[0]} passed"
		PF_FAILURES=$((PF_FAILURES + 1))
	elif grep -- "$pattern" "$work/broken.out" >"$work/match.out"; then
		echo "ok - broken copy ($name) fails: $(head -n 1 "$work/match.out" | sed 's/^ *//' | head -c 150)"
	else
		sed 's/^/    /' "$work/broken.out" | head -n 20
		echo "not ok - broken copy ($name): failed, but not on '$pattern'"
		PF_FAILURES=$((PF_FAILURES + 1))
	fi
}
broken_tool "a task definition edited, tasks.yaml not regenerated" "tasks.yaml is what deploy/check/tasks-to-cfn.mjs makes" \
	node "$REPO/deploy/check/tasks-to-cfn.mjs" . --check -- \
	jedit deploy/ecs/payflow-relay.json "$c0.stopTimeout=50"
broken_tool "cfn-lint: a Fargate task of 3 GiB on 0.25 vCPU" "E3047\|E30" cfn-lint deploy/aws/tasks.yaml -- \
	sed -i '0,/      Memory: "512"/s//      Memory: "3072"/' deploy/aws/tasks.yaml
broken_tool "cfn-lint: a warning (an unused parameter)" "W2001" cfn-lint deploy/aws/network.yaml -- \
	sed -i 's/^Parameters:$/Parameters:\n  Unused:\n    Type: String\n    Default: x/' deploy/aws/network.yaml
broken_tool "cdk-nag: a suppression removed (wildcard object access)" "AwsSolutions-IAM5" \
	node "$REPO/deploy/check/nag.mjs" . iam.yaml -- \
	sed -i '/^  ApiTaskRole:/,/^    Properties:/{/^    Metadata:/,/^    Properties:/{/^    Properties:/!d}}' deploy/aws/iam.yaml
broken_tool "cdk-nag: a queue accepting plain HTTP" "AwsSolutions-SQS4" node "$REPO/deploy/check/nag.mjs" . queues.yaml -- \
	sed -i '/QueuesTlsOnlyPolicy:/,/PayloadBucket:/{/aws:SecureTransport/d;/Bool:/d;/Condition:/d}' deploy/aws/queues.yaml
broken_tool "cdk-nag: a suppression without a reason" "without a reason" node "$REPO/deploy/check/nag.mjs" . queues.yaml -- \
	sed -i '/id: AwsSolutions-S1/,/deletes by the lifecycle/{/reason:/,/deletes by the lifecycle/d}' deploy/aws/queues.yaml
broken_tool "RegisterTaskDefinition: a misspelt member" 'Unknown parameter in containerDefinitions\[0\]: "stopTimout"' \
	python3 "$REPO/deploy/check/taskdef_shape.py" deploy/ecs/payflow-api.json -- \
	jedit deploy/ecs/payflow-api.json "$c0.stopTimout=$c0.stopTimeout;delete $c0.stopTimeout"
broken_tool "RegisterTaskDefinition: a value outside an enum" "networkMode: 'bridged' is not one of" \
	python3 "$REPO/deploy/check/taskdef_shape.py" deploy/ecs/payflow-relay.json -- \
	jedit deploy/ecs/payflow-relay.json "t.networkMode='bridged'"
broken_tool "RegisterTaskDefinition: a number as a string" "Invalid type for parameter containerDefinitions\[0\].stopTimeout" \
	python3 "$REPO/deploy/check/taskdef_shape.py" deploy/ecs/payflow-worker-payment.json -- \
	jedit deploy/ecs/payflow-worker-payment.json "$c0.stopTimeout='120'"

# ---- the task definitions render (deploy/ecs/render.sh) into valid JSON with nothing left over
export AccountId=123456789012 Region=eu-west-1 Environment=prod ImageTag=1.0.0
export PayflowQueueUrls="payment-requests=https://sqs.eu-west-1.amazonaws.com/123456789012/payflow-prod-payment-requests"
for o in PaymentRequests PaymentCompleted InvoiceRequests OperationEvents; do
	export ${o}QueueUrl="https://sqs.eu-west-1.amazonaws.com/123456789012/payflow-prod-$o"
done
export PayloadBucketName=payflow-prod-payloads-123456789012-eu-west-1 InvoiceUrl=https://invoices.example/v1/invoices
export LegacySubmit="{CALL pay.submit(:idempotency_key, :details.amount, \"x\\y\")}" LegacyStatus="{CALL pay.status(:legacy_ref)}" LegacyLookup=
for s in DatabaseUrlRelay DatabaseUrlPayment DatabaseUrlPostprocess DatabaseUrlInvoice DatabaseUrlWebhook DatabaseUrlApi \
	DatabaseUrlMonitor DatabaseUrlS3Sweep LegacyOdbc InvoiceAuthorization PostprocessAuthorization; do
	export ${s}SecretArn="arn:aws:secretsmanager:eu-west-1:123456789012:secret:payflow/prod/$s-AbCdEf"
done
rendered_ok=1
for f in deploy/ecs/*.json; do
	if ! deploy/ecs/render.sh "$f" >"$work/rendered.json" 2>"$work/render.err" ||
		grep -q '\${' "$work/rendered.json" ||
		! node -e 'JSON.parse(require("fs").readFileSync(process.argv[1],"utf8"))' "$work/rendered.json"; then
		echo "    $f: $(cat "$work/render.err")"
		rendered_ok=0
	fi
done
pf_ok "every task definition renders to JSON without placeholders" test $rendered_ok = 1
pf_eq "a statement with quotes and a backslash survives rendering" "$LegacySubmit" \
	"$(deploy/ecs/render.sh deploy/ecs/payflow-worker-payment.json |
		node -e 'const t=JSON.parse(require("fs").readFileSync(0,"utf8"));console.log(t.containerDefinitions[0].environment.find(e=>e.name==="PAYFLOW_LEGACY_SUBMIT").value)')"
unset InvoiceUrl
if deploy/ecs/render.sh deploy/ecs/payflow-worker-invoice.json >/dev/null 2>"$work/render.err"; then
	pf_ok "rendering refuses a placeholder without a value" false
else
	pf_ok "rendering refuses a placeholder without a value, naming it" grep -q 'InvoiceUrl' "$work/render.err"
fi

# ---- the programs themselves accept what their task definitions give them
# Each built program runs with exactly its rendered environment, dummy
# values for its secrets and what ECS adds (container credentials), every
# address on loopback port 9 (nothing listens, nothing leaves the machine).
# A settings error exits 2 at once; a program still running after 3 s has
# loaded its settings and is retrying the database. Then SIGTERM.
if [ -x workers/bin/payflow-relay ] && [ -x workers/bin/payflow-worker ] && [ -x workers/bin/payflow-api ]; then
	dead=http://127.0.0.1:9
	export PayflowQueueUrls="payment-requests=$dead/1/a,payment-completed=$dead/1/b,invoice-requests=$dead/1/c,operation-events=$dead/1/d"
	for o in PaymentRequests PaymentCompleted InvoiceRequests OperationEvents; do
		export ${o}QueueUrl="$dead/1/$o"
	done
	export InvoiceUrl=https://127.0.0.1:9/v1/invoices
	api_port=$(pf_free_port)
	# run_task TASK-DEFINITION [NAME=value overrides...]: the program's pid in $!, its log in
	# $work/<RUN_NAME or the file's name>.log; at most 60 s, should a program never stop
	run_task() {
		local f=$1 name
		name=${RUN_NAME:-$(basename "$1" .json)}
		shift
		deploy/ecs/render.sh "$f" | node -e '
			const c = JSON.parse(require("fs").readFileSync(0, "utf8")).containerDefinitions[0];
			const dummy = { PAYFLOW_DATABASE_URL: "postgresql://payflow_edge:not-a-password@127.0.0.1:9/payflow?connect_timeout=1",
				PAYFLOW_LEGACY_ODBC: "Driver=none;Server=127.0.0.1;Port=9;PWD=not-a-password" };
			for (const e of c.environment) console.log(`${e.name}=${e.value}`);
			for (const s of c.secrets) console.log(`${s.name}=${dummy[s.name] || "dummy"}`);
			console.log(`COMMAND=${c.command.join(" ")}`);' >"$work/$name.env"
		local -a vars cmd
		mapfile -t vars < <(grep -v '^COMMAND=' "$work/$name.env")
		read -r -a cmd <<<"$(sed -n 's/^COMMAND=//p' "$work/$name.env")"
		timeout 60 env -i PATH=/usr/bin:/bin AWS_CONTAINER_CREDENTIALS_FULL_URI=$dead/credentials AWS_ENDPOINT_URL=$dead \
			"${vars[@]}" "$@" "workers/bin/${cmd[0]}" "${cmd[@]:1}" >"$work/$name.log" 2>&1 &
	}
	declare -A pids
	for f in deploy/ecs/payflow-relay.json deploy/ecs/payflow-worker-*.json deploy/ecs/payflow-api.json; do
		if [ "$f" = deploy/ecs/payflow-api.json ]; then
			run_task "$f" PAYFLOW_LISTEN=127.0.0.1:$api_port	# 8080 may be taken here; the value was checked above
		else
			run_task "$f"
		fi
		pids[$f]=$!
	done
	RUN_NAME=relay-without-queues run_task deploy/ecs/payflow-relay.json PAYFLOW_QUEUE_URLS=
	broken_pid=$!
	# the sweeper runs one pass (--once): against no database that pass fails
	# (exit 1) or is still retrying; a settings error would be exit 2
	run_task deploy/ecs/payflow-s3-sweep.json
	sweep_pid=$!
	sleep 3
	for f in "${!pids[@]}"; do
		if kill -0 "${pids[$f]}" 2>/dev/null; then
			echo "ok - $(basename "$f" .json) starts with its task definition's settings"
			kill "${pids[$f]}"
			wait "${pids[$f]}" 2>/dev/null || true
		else
			wait "${pids[$f]}" && rc=0 || rc=$?
			head -n 3 "$work/$(basename "$f" .json).log" | sed 's/^/    /'
			echo "not ok - $(basename "$f" .json) starts with its task definition's settings (exited $rc)"
			PF_FAILURES=$((PF_FAILURES + 1))
		fi
	done
	if kill -0 "$sweep_pid" 2>/dev/null; then
		kill "$sweep_pid"
		wait "$sweep_pid" 2>/dev/null || true
		rc=running
	else
		wait "$sweep_pid" && rc=0 || rc=$?
	fi
	pf_ok "payflow-s3-sweep accepts its task definition's settings (its pass against no database: $rc, not exit 2)" \
		test "$rc" != 2
	wait "$broken_pid" && rc=0 || rc=$?
	pf_eq "the relay without PAYFLOW_QUEUE_URLS exits 2 at once" 2 "$rc"
	pf_ok "... naming the setting" grep -q 'missing PAYFLOW_QUEUE_URLS' "$work/relay-without-queues.log"
	pf_ok "no dummy password in any program's log" bash -c "! grep -l 'not-a-password' $work/*.log"
else
	pf_skip "the programs with their settings" "workers/bin not built (make -C workers)"
fi

# ---- against the extension, when a test cluster is up (make check starts one)
if [ -n "${PGHOST:-}" ] && psql -XAtqc 'SELECT 1' >/dev/null 2>&1 &&
	[ "$(psql -XAtqc "SELECT count(*) FROM pg_extension WHERE extname IN ('payflow', 'pg_cron')")" = 2 ]; then
	# One transaction, rolled back: the roles and the cron job do not outlive the test.
	sql=$(node -e 'const t=JSON.parse(require("fs").readFileSync(process.argv[1],"utf8"));console.log(t.containerDefinitions[0].environment.find(e=>e.name==="METRICS_SQL").value.replaceAll("${Environment}","prod"))' deploy/ecs/payflow-metrics.json)
	out=$(psql -XAtq -v ON_ERROR_STOP=1 <<-EOF 2>&1
		SET client_min_messages = warning;
		BEGIN;
		\i deploy/sql/install.sql
		SET ROLE payflow_monitor;
		$sql;
		ROLLBACK;
	EOF
	) && rc=0 || rc=$?
	emf=$(printf '%s\n' "$out" | grep '"_aws"' || true)
	pf_eq "install.sql and the metrics query run as payflow_monitor" 0 "$rc"
	pf_ok "the metrics line is CloudWatch EMF with the alarmed metrics as numbers" node -e '
		const l = JSON.parse(process.argv[1]);
		const m = l._aws.CloudWatchMetrics[0];
		const names = m.Metrics.map((x) => x.Name);
		const want = ["OutboxOldestAgeSeconds", "DeadLettersOpen", "FailureRateLastHour"];
		process.exit(m.Namespace === "Payflow" && l.Environment === "prod" && Number.isInteger(l._aws.Timestamp) &&
			want.every((n) => names.includes(n)) && names.every((n) => typeof l[n] === "number") ? 0 : 1);' "$emf"
	pf_eq "install.sql stops PostgreSQL from logging the bind parameters of the api's and every edge program's login" \
		"payflow_api|2 payflow_edge_invoice|2 payflow_edge_payment|2 payflow_edge_postprocess|2 payflow_edge_relay|2 payflow_edge_s3_sweep|2 payflow_edge_webhook|2 payflow_edge|2" \
		"$(psql -XAtq -v ON_ERROR_STOP=1 -c 'SET client_min_messages = warning' -c 'BEGIN' -f deploy/sql/install.sql \
			-c "SELECT r.rolname || '|' || count(*) FROM pg_db_role_setting s JOIN pg_roles r ON r.oid = s.setrole,
					   unnest(s.setconfig) c
				 WHERE c IN ('log_parameter_max_length=0', 'log_parameter_max_length_on_error=0')
				 GROUP BY r.rolname ORDER BY 1" 2>/dev/null | grep '|' | paste -sd' ')"
	pf_eq "install.sql: payflow-api's login may call the admin API's functions (payflow_console), which still want an admin key" \
		"t|28000" \
		"$(psql -XAtq -v ON_ERROR_STOP=1 -c 'SET client_min_messages = warning' -c 'BEGIN' -f deploy/sql/install.sql \
			-c "SELECT pg_has_role('payflow_api', 'payflow_console', 'MEMBER')" -c 'SET ROLE payflow_api' \
			-c "DO \$\$ BEGIN PERFORM payflow.admin_whoami('pfa_' || repeat('0', 64)); EXCEPTION WHEN OTHERS THEN RAISE WARNING 'sqlstate=%', SQLSTATE; END \$\$" \
			2>&1 | sed -n 's/.*sqlstate=\([0-9A-Z]*\).*/\1/p; /^[tf]$/p' | paste -sd'|')"
	bound=$(psql -XAtq -v ON_ERROR_STOP=1 2>&1 <<-'EOF' | sed -n 's/.*sqlstate=\([0-9A-Z]*\).*/\1/p; /^run$/p' | paste -sd'|'
		SET client_min_messages = warning;
		BEGIN;
		\i deploy/sql/install.sql
		SELECT set_config('pf.op', payflow.submit('deploy-bound', '{"amount": 1}'), false) IS NOT NULL AS submitted;
		SET SESSION AUTHORIZATION payflow_edge_invoice;
		DO $$ BEGIN PERFORM payflow.claim_step(current_setting('pf.op'), 'PROCESS_PAYMENT', 'w');
		EXCEPTION WHEN OTHERS THEN RAISE WARNING 'sqlstate=%', SQLSTATE; END $$;
		RESET SESSION AUTHORIZATION;
		SET SESSION AUTHORIZATION payflow_edge_payment;
		SELECT payflow.claim_step(current_setting('pf.op'), 'PROCESS_PAYMENT', 'w') ->> 'action';
		RESET SESSION AUTHORIZATION;
		ROLLBACK;
	EOF
	)
	pf_eq "install.sql binds each step to its program's login: the invoice login may not claim PROCESS_PAYMENT (42501), the payment login may" \
		"42501|run" "$bound"
	pf_ok "payflow_monitor may not call anything else (payflow.purge is refused)" bash -c \
		"psql -XAtq -v ON_ERROR_STOP=1 -c 'BEGIN' -f deploy/sql/install.sql -c 'SET ROLE payflow_monitor' -c 'SELECT payflow.purge(1)' 2>&1 | grep -q 'permission denied'"
else
	pf_skip "install.sql and the metrics query" "no test cluster with payflow and pg_cron (PGHOST)"
fi

pf_done
