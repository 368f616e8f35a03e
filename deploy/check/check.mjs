// deploy/check/check.mjs — checks deploy/ against the code it deploys, without AWS.
//
//   node deploy/check/check.mjs [repository root]       (the npm package yaml must be resolvable:
//                                                         PAYFLOW_DEPLOY_CHECK_MODULES=<dir>/node_modules)
//
// The facts come from the code, not from a copy kept here:
//   - the settings each program (each worker role) reads, their types, ranges,
//     defaults, whether secret and whether the program requires them: the
//     programs' own `--print-settings` output (the built programs in
//     PAYFLOW_BIN_DIR, else <root>/workers/bin);
//   - the destinations the extension knows (payflow.destinations' seed): extension/sql/tables.sql;
//   - the worker's exit margin after the drain: its --print-settings first line (exitMarginSeconds).
// Rules that workers/src/lib/config_rules.c states in code are restated
// below, each next to the check that uses it.
//
// One line per check, "ok - ..." or "not ok - ...", exit status 1 when any failed.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const root = path.resolve(process.argv[2] || path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '..'));
const modules = path.resolve(process.env.PAYFLOW_DEPLOY_CHECK_MODULES || path.join(root, 'deploy', 'check', 'node_modules'));
let YAML;
try {
	YAML = createRequire(path.join(modules, 'noop.js'))('yaml');
} catch {
	console.error(`check.mjs: the npm package yaml is not in ${modules}; install it with ` +
		'`npm ci --prefix deploy/check` or run test/integration/deploy_artifacts.sh');
	process.exit(2);
}

let failures = 0;
function ok(what, pass, why = '') {
	console.log(`${pass ? 'ok' : 'not ok'} - ${what}${!pass && why ? ` (${why})` : ''}`);
	if (!pass) failures++;
	return pass;
}
const read = (rel) => fs.readFileSync(path.join(root, rel), 'utf8');
const listFiles = (dir, re) => {
	const out = [];
	const walk = (d) => {
		for (const e of fs.readdirSync(d, { withFileTypes: true })) {
			if (e.name === 'node_modules') continue;
			const p = path.join(d, e.name);
			if (e.isDirectory()) walk(p);
			else if (re.test(e.name)) out.push(p);
		}
	};
	walk(path.join(root, dir));
	return out.sort();
};
const rel = (p) => path.relative(root, p);
const placeholderRe = /\$\{([A-Za-z][A-Za-z0-9]*)\}/g;
const isPlaceholder = (v) => typeof v === 'string' && /^\$\{[A-Za-z][A-Za-z0-9]*\}$/.test(v);

// ---------------------------------------------------------------- the code's facts

// Which queue each worker role consumes (DESIGN §2; the webhook role reads operation-events).
const roleDestination = { payment: 'payment-requests', postprocess: 'payment-completed',
	invoice: 'invoice-requests', webhook: 'operation-events' };

// What each program reads, from the program itself: `<program> --print-settings`
// prints its settings as JSON lines (the format: workers/src/lib/config_print.c),
// a first line about the program, then one line per setting it reads. The
// programs are the built ones: PAYFLOW_BIN_DIR, else <root>/workers/bin.
const binDir = path.resolve(process.env.PAYFLOW_BIN_DIR || path.join(root, 'workers', 'bin'));
const printed = new Map();	// "payflow-worker --role invoice" -> { ok, why, program, settings: Map }
function programSettings(program, args = []) {
	const key = [program, ...args].join(' ');
	if (printed.has(key)) return printed.get(key);
	const run = spawnSync(path.join(binDir, program), [...args, '--print-settings'], { encoding: 'utf8', env: {} });
	const out = { ok: false, why: '', program: null, settings: new Map() };
	if (run.error || run.status !== 0) {
		out.why = run.error ? run.error.message : `exit ${run.status}: ${(run.stderr || '').split('\n')[0]}`;
	} else {
		try {
			const lines = run.stdout.split('\n').filter(Boolean).map((l) => JSON.parse(l));
			out.program = lines[0];
			for (const s of lines.slice(1)) {
				out.settings.set(s.name, s);
				if (s.alias) out.settings.set(s.alias, s);
			}
			out.ok = out.program?.format === 'payflow-settings/1' && out.settings.size > 0;
			if (!out.ok) out.why = `not payflow-settings/1 output: ${lines[0] && JSON.stringify(lines[0])}`;
		} catch (e) {
			out.why = `not JSON lines: ${e.message}`;
		}
	}
	printed.set(key, out);
	return out;
}
const programsRun = [['payflow-relay'], ['payflow-api'], ['payflow-s3-sweep'],
	...Object.keys(roleDestination).map((r) => ['payflow-worker', ['--role', r]])];
// every setting of every program, for facts that do not depend on the program (defaults)
const settings = new Map();
for (const [program, args] of programsRun) {
	const p = programSettings(program, args);
	ok(`${[program, ...(args || [])].join(' ')} --print-settings: its settings were read (${p.settings.size} names)`,
		p.ok && p.settings.has('PAYFLOW_DATABASE_URL'), p.why);
	for (const [n, s] of p.settings) settings.set(n, s);
}
if (!settings.has('PAYFLOW_DATABASE_URL')) {
	console.log(`not ok - the programs in ${binDir} printed no settings: build them (make -C workers) or set PAYFLOW_BIN_DIR`);
	process.exit(1);
}

// Destinations: the queues the database knows are the rows of
// payflow.destinations, seeded in tables.sql (add_destination adds more
// at run time, each needing its queue here too); the steps are the seeded
// rows of pipeline version 1 in payflow.step_definitions (tables.sql).
const payflowSql = read('extension/sql/tables.sql');
const seed = (table) => (payflowSql.match(new RegExp(`INSERT INTO payflow\\.${table}\\b[^;]*;`)) || [''])[0];
const emitted = new Set([...seed('destinations').matchAll(/\(\s*'([a-z0-9]+(?:-[a-z0-9]+)+)'\s*,/g)].map((m) => m[1]));
ok(`payflow.sql: destinations found (${[...emitted].sort().join(', ')})`, emitted.size >= 1);

// The worker's exit after PAYFLOW_DRAIN_SECONDS (cancelled calls' grace,
// deletes and visibility changes in flight), as the worker prints it.
const workerExitMarginS = Number(programSettings('payflow-worker', ['--role', 'payment']).program?.exitMarginSeconds);
ok(`payflow-worker --print-settings: the exit margin after the drain was read (${workerExitMarginS} s)`,
	workerExitMarginS > 0);

// ---------------------------------------------------------------- every file parses

const json = new Map();
for (const f of listFiles('deploy', /\.json$/)) {
	try {
		json.set(rel(f), JSON.parse(fs.readFileSync(f, 'utf8')));
		ok(`${rel(f)} parses as JSON`, true);
	} catch (e) {
		ok(`${rel(f)} parses as JSON`, false, e.message);
	}
}
const templates = new Map();
for (const f of listFiles('deploy', /\.ya?ml$/)) {
	const doc = YAML.parseDocument(fs.readFileSync(f, 'utf8'), { uniqueKeys: true, prettyErrors: true });
	const problems = [...doc.errors, ...doc.warnings].map((e) => e.message.split('\n')[0]);
	// an unresolved !Ref or !Sub arrives as a warning: the templates use the long form
	if (ok(`${rel(f)} parses as plain YAML (long-form intrinsics, unique keys)`, problems.length === 0, problems.join('; ')))
		templates.set(path.basename(f), doc.toJS());
}

// ---------------------------------------------------------------- CloudFormation references

const pseudo = new Set(['AWS::AccountId', 'AWS::Region', 'AWS::Partition', 'AWS::StackName', 'AWS::StackId',
	'AWS::NoValue', 'AWS::URLSuffix', 'AWS::NotificationARNs']);
function checkReferences(name, t) {
	const params = new Set(Object.keys(t.Parameters || {}));
	const resources = new Set(Object.keys(t.Resources || {}));
	const conditions = new Set(Object.keys(t.Conditions || {}));
	const bad = [];
	const known = (n, vars) => params.has(n) || resources.has(n) || pseudo.has(n) || (vars && n in vars);
	const walk = (node) => {
		if (Array.isArray(node)) return node.forEach(walk);
		if (!node || typeof node !== 'object') return;
		for (const [k, v] of Object.entries(node)) {
			if (k === 'Ref' && !known(v)) bad.push(`Ref ${v}`);
			if (k === 'Fn::GetAtt') {
				const target = Array.isArray(v) ? v[0] : String(v).split('.')[0];
				if (!resources.has(target)) bad.push(`Fn::GetAtt ${target}`);
			}
			if (k === 'Fn::Sub') {
				const [text, vars] = Array.isArray(v) ? v : [v, {}];
				for (const m of String(text).matchAll(/\$\{([^!}][^}]*)\}/g))
					if (!known(m[1].split('.')[0], vars)) bad.push(`\${${m[1]}} in Fn::Sub`);
			}
			if (k === 'Fn::If' && !conditions.has(v[0])) bad.push(`condition ${v[0]}`);
			if (k === 'Condition' && typeof v === 'string' && !conditions.has(v)) bad.push(`condition ${v}`);
			walk(v);
		}
	};
	walk(t.Resources);
	walk(t.Outputs);
	walk(t.Conditions);
	ok(`${name}: a CloudFormation template (version, resources)`, t.AWSTemplateFormatVersion === '2010-09-09' &&
		resources.size > 0);
	ok(`${name}: every Ref, Fn::GetAtt, Fn::Sub variable and condition names something declared`, bad.length === 0,
		[...new Set(bad)].join(', '));
}
for (const [name, t] of templates) checkReferences(name, t);

// ---------------------------------------------------------------- queues.yaml

const queues = templates.get('queues.yaml');
const queueDestinations = new Map();	// destination -> queue resource name
if (ok('deploy/aws/queues.yaml exists and parses', !!queues)) {
	const R = queues.Resources;
	const urls = queues.Outputs?.PayflowQueueUrls?.Value?.['Fn::Sub'];
	// the relay's format (pf_queue_map_parse): destination=url pairs, comma-separated
	const pairs = typeof urls === 'string' ? urls.split(',').map((p) => p.split('=')) : [];
	ok('queues.yaml: output PayflowQueueUrls is destination=${Queue} pairs, comma-separated',
		pairs.length > 0 && pairs.every(([d, u]) => /^[A-Za-z0-9._-]+$/.test(d) && /^\$\{[A-Za-z0-9]+\}$/.test(u)), urls);
	for (const [d, u] of pairs) queueDestinations.set(d, u.slice(2, -1));
	ok('queues.yaml: PAYFLOW_QUEUE_URLS names exactly the destinations payflow.sql emits',
		[...queueDestinations.keys()].sort().join() === [...emitted].sort().join(),
		`output: ${[...queueDestinations.keys()].sort()}; payflow.sql: ${[...emitted].sort()}`);
	const visibilityDefault = Number(settings.get('PAYFLOW_VISIBILITY_TIMEOUT').default);
	for (const [dest, res] of queueDestinations) {
		const q = R[res];
		if (!ok(`queues.yaml: ${dest} is an SQS queue`, q?.Type === 'AWS::SQS::Queue', res)) continue;
		const p = q.Properties;
		const nameTpl = [].concat(p.QueueName?.['Fn::Sub'] ?? '')[0];
		ok(`queues.yaml: ${dest}: the queue's name ends in the destination`, new RegExp(`-${dest}(\\$\\{Suffix\\})?$`).test(nameTpl), nameTpl);
		const dlqName = p.RedrivePolicy?.deadLetterTargetArn?.['Fn::GetAtt']?.[0];
		ok(`queues.yaml: ${dest}: a redrive policy to its own DLQ, maxReceiveCount a parameter`,
			R[dlqName]?.Type === 'AWS::SQS::Queue' && dlqName !== res && p.RedrivePolicy.maxReceiveCount?.Ref in queues.Parameters);
		ok(`queues.yaml: ${dest}: SSE (SqsManagedSseEnabled) on the queue and its DLQ`,
			p.SqsManagedSseEnabled === true && R[dlqName]?.Properties?.SqsManagedSseEnabled === true);
		const vis = p.VisibilityTimeout?.Ref ? Number(queues.Parameters[p.VisibilityTimeout.Ref].Default) : Number(p.VisibilityTimeout);
		ok(`queues.yaml: ${dest}: visibility timeout = the worker default (${visibilityDefault} s)`, vis === visibilityDefault, String(vis));
		ok(`queues.yaml: ${dest}: message retention set`, p.MessageRetentionPeriod !== undefined);
		ok(`queues.yaml: ${dest}: FIFO only through the QueueType condition`,
			JSON.stringify(p.FifoQueue) === JSON.stringify({ 'Fn::If': ['IsFifo', true, { Ref: 'AWS::NoValue' }] }) &&
			JSON.stringify(R[dlqName]?.Properties?.FifoQueue) === JSON.stringify(p.FifoQueue));
	}
	const buckets = Object.values(R).filter((r) => r.Type === 'AWS::S3::Bucket');
	if (ok('queues.yaml: one claim-check bucket', buckets.length === 1)) {
		const b = buckets[0].Properties;
		ok('queues.yaml: bucket encrypted', !!b.BucketEncryption?.ServerSideEncryptionConfiguration?.[0]?.ServerSideEncryptionByDefault?.SSEAlgorithm);
		// an SSE-S3 object's ETag, which any listing shows, is the MD5 of the request in it
		ok('queues.yaml: bucket encrypted with SSE-KMS, so no ETag is an MD5 of a request',
			/^aws:kms(:dsse)?$/.test(b.BucketEncryption?.ServerSideEncryptionConfiguration?.[0]?.ServerSideEncryptionByDefault?.SSEAlgorithm || ''));
		const pab = b.PublicAccessBlockConfiguration || {};
		ok('queues.yaml: bucket blocks every kind of public access',
			['BlockPublicAcls', 'BlockPublicPolicy', 'IgnorePublicAcls', 'RestrictPublicBuckets'].every((k) => pab[k] === true));
		ok('queues.yaml: bucket versioning off', !b.VersioningConfiguration || b.VersioningConfiguration.Status !== 'Enabled');
		const rules = b.LifecycleConfiguration?.Rules || [];
		const expires = (prefix) => rules.some((r) => r.Status === 'Enabled' && r.Prefix === prefix && r.ExpirationInDays !== undefined);
		ok('queues.yaml: payloads expire (payments/ and requests/)', expires('payments/') && expires('requests/'));
	}
}

// ---------------------------------------------------------------- task definitions

const iam = templates.get('iam.yaml');
const tasksTemplate = templates.get('tasks.yaml');
const logGroups = new Set(Object.values(tasksTemplate?.Resources || {})
	.filter((r) => r.Type === 'AWS::Logs::LogGroup').map((r) => r.Properties.LogGroupName['Fn::Sub'] ?? r.Properties.LogGroupName));
// iam.yaml's role names, written as the task definitions write them (${Region}, not ${AWS::Region})
const roleNames = new Map(Object.entries(iam?.Resources || {})
	.filter(([, r]) => r.Type === 'AWS::IAM::Role').map(([k, r]) => [r.Properties.RoleName['Fn::Sub'].replace('${AWS::Region}', '${Region}'), k]));
const roleStatements = (res) => (iam?.Resources?.[res]?.Properties?.Policies || [])
	.flatMap((p) => p.PolicyDocument.Statement).filter((st) => st && st.Effect);
// per execution role: the iam.yaml parameters whose secrets it may read, and the log groups it may write
const readableSecrets = (res) => new Set(roleStatements(res)
	.filter((st) => [].concat(st.Action).includes('secretsmanager:GetSecretValue'))
	.flatMap((st) => [].concat(st.Resource)).map((r) => r?.Ref).filter(Boolean));
const writableLogGroups = (res) => roleStatements(res).filter((st) => [].concat(st.Action).includes('logs:PutLogEvents'))
	.flatMap((st) => [].concat(st.Resource)).map((r) => String(r?.['Fn::Sub'] ?? r)
		.replace(/^arn:\$\{AWS::Partition\}:logs:\$\{AWS::Region\}:\$\{AWS::AccountId\}:log-group:/, '').replace(/:\*$/, ''));
const executionRoles = new Map();	// execution role -> task definition file
const readme = fs.existsSync(path.join(root, 'deploy/README.md')) ? read('deploy/README.md') : '';
const documented = new Set([...readme.matchAll(placeholderRe)].map((m) => m[1]));

const secretLooking = /SECRET|PASSWORD|PASSWD|TOKEN|DATABASE_URL|ODBC|ACCESS_KEY|PRIVATE/;
const FARGATE_MAX_STOP = 120;
// where deploy/docker/Dockerfile puts the database server's CA bundle
const DB_CA_BUNDLE = (read('deploy/docker/Dockerfile').match(/^ENV PGSSLROOTCERT=(\S+)/m) || [])[1];

function programOf(c) {
	const cmd = c.command || [];
	const prog = path.basename(cmd[0] || '');
	if (prog === 'payflow-relay') return { name: 'relay', printed: programSettings(prog), margin: 5 };
	if (prog === 'payflow-api') return { name: 'api', printed: programSettings(prog), margin: 5 };
	if (prog === 'payflow-s3-sweep') return { name: 's3-sweep', printed: programSettings(prog), margin: 5 };
	if (prog === 'payflow-worker') {
		const i = cmd.indexOf('--role');
		const role = i >= 0 ? cmd[i + 1] : (cmd.find((a) => a.startsWith('--role=')) || '').slice(7);
		return { name: `worker --role ${role}`, role, printed: programSettings(prog, ['--role', role]), margin: workerExitMarginS };
	}
	return null;
}

const taskFiles = [...json.keys()].filter((f) => f.startsWith('deploy/ecs/'));
ok('deploy/ecs: task definitions found', taskFiles.length > 0);
const programsSeen = new Set();
for (const file of taskFiles) {
	const td = json.get(file);
	const tag = path.basename(file);
	ok(`${tag}: Fargate-ready (awsvpc, cpu, memory, execution role)`, td.networkMode === 'awsvpc' &&
		(td.requiresCompatibilities || []).includes('FARGATE') && !!td.cpu && !!td.memory && !!td.executionRoleArn);
	const roleOf = (arn) => roleNames.get(String(arn).replace(/^arn:aws:iam::\$\{AccountId\}:role\//, ''));
	for (const arn of [td.executionRoleArn, td.taskRoleArn].filter(Boolean))
		ok(`${tag}: role ${arn.split('/').pop()} is made by iam.yaml, its name carrying the region`,
			!!roleOf(arn) && arn.includes('${Region}'), arn);
	const execRole = roleOf(td.executionRoleArn);
	ok(`${tag}: an execution role of its own (no other task definition names it)`,
		!!execRole && !executionRoles.has(execRole), executionRoles.get(execRole));
	executionRoles.set(execRole, tag);
	for (const ph of new Set([...JSON.stringify(td).matchAll(placeholderRe)].map((m) => m[1])))
		ok(`${tag}: placeholder \${${ph}} is documented in deploy/README.md`, documented.has(ph));

	for (const c of td.containerDefinitions || []) {
		const env = new Map((c.environment || []).map((e) => [e.name, e.value]));
		const sec = new Map((c.secrets || []).map((e) => [e.name, e.valueFrom]));
		const given = (n) => (env.has(n) && env.get(n) !== '') || sec.has(n);
		const value = (n) => (env.has(n) ? env.get(n) : settings.get(n)?.default ?? null);

		// secrets stay in secrets
		const leaked = [...env.keys()].filter((n) => secretLooking.test(n) || settings.get(n)?.secret);
		ok(`${tag}: no secret-looking variable in environment`, leaked.length === 0, leaked.join(', '));
		const inlined = [...env.entries()].filter(([, v]) => /:\/\/[^/\s:@]+:[^/\s@]+@|(^|;)\s*(PWD|Password)\s*=/i.test(v));
		ok(`${tag}: no credentials inside an environment value`, inlined.length === 0, inlined.map(([n]) => n).join(', '));
		ok(`${tag}: secrets come from Secrets Manager or SSM ARNs`, [...sec.values()].every((v) =>
			isPlaceholder(v) || /^arn:aws[a-z-]*:(secretsmanager|ssm):/.test(v)));
		const named = [...sec.values()].filter(isPlaceholder).map((v) => v.slice(2, -1)).sort();
		const readable = [...readableSecrets(execRole)].sort();
		ok(`${tag}: its execution role reads exactly the secrets it names (iam.yaml parameters of the same name)`,
			named.join() === readable.join(), `names ${named}; may read ${readable}`);
		const group = c.logConfiguration?.options?.['awslogs-group'];
		ok(`${tag}: awslogs logging to a log group of tasks.yaml that its execution role may write, and no other`,
			c.logConfiguration?.logDriver === 'awslogs' && logGroups.has(group) &&
			writableLogGroups(execRole).join() === group, `${group}; role writes ${writableLogGroups(execRole)}`);
		ok(`${tag}: libpq verifies the database server (PGSSLMODE=verify-full, PGSSLROOTCERT the image's CA bundle)`,
			env.get('PGSSLMODE') === 'verify-full' && env.get('PGSSLROOTCERT') === DB_CA_BUNDLE, `${env.get('PGSSLMODE')} ${env.get('PGSSLROOTCERT')}`);

		const prog = programOf(c);
		if (!prog) continue;	// not a payflow program (the metrics publisher)
		programsSeen.add(prog.name);

		const reads = prog.printed.settings;
		if (prog.role !== undefined)
			ok(`${tag}: role ${prog.role} exists (payflow-worker --role ${prog.role} --print-settings)`, prog.printed.ok, prog.printed.why);
		const names = [...env.keys(), ...sec.keys()];
		const unknown = names.filter((n) => /^(PAYFLOW|AWS)_/.test(n) && !reads.has(n));
		ok(`${tag}: every PAYFLOW_*/AWS_* variable is one ${prog.name} reads (--print-settings)`, unknown.length === 0, unknown.join(', '));

		// what the program requires (its --print-settings "required")
		const required = [...new Set([...reads.values()])].filter((s) => s.required).map((s) => s.name);
		const missing = required.filter((n) => !given(n));
		ok(`${tag}: every setting ${prog.name} requires is given (${required.join(', ')})`, missing.length === 0, missing.join(', '));

		// literal values within the table's types and ranges
		const badValues = [];
		for (const [n, v] of env) {
			const s = reads.get(n);
			if (!s || isPlaceholder(v) || v === '') continue;
			if (s.type === 'integer' && !(/^-?\d+$/.test(v) && Number(v) >= s.min && Number(v) <= s.max)) badValues.push(`${n}=${v}`);
			if (s.type === 'enum' && !s.choices.includes(v.toLowerCase())) badValues.push(`${n}=${v}`);
			if (s.type === 'url' && !/^https?:\/\/[^/:\s]/.test(v)) badValues.push(`${n}=${v}`);
			if (s.type === 'host:port' && !/:\d+$/.test(v)) badValues.push(`${n}=${v}`);
		}
		ok(`${tag}: values fit the settings' types and ranges (--print-settings)`, badValues.length === 0, badValues.join(', '));

		// workers/src/lib/config_rules.c
		const usesAws = prog.printed.program?.callsAws === true || value('PAYFLOW_STORE') === 's3';
		if (value('PAYFLOW_STORE') === 's3')
			ok(`${tag}: PAYFLOW_STORE=s3 comes with PAYFLOW_S3_BUCKET`, given('PAYFLOW_S3_BUCKET'));
		if (usesAws) {
			ok(`${tag}: AWS_REGION given (the program calls AWS)`, given('AWS_REGION') || given('AWS_DEFAULT_REGION'));
			ok(`${tag}: a task role, for ECS's container credentials`, !!td.taskRoleArn);
		}
		if (prog.role === 'postprocess')
			ok(`${tag}: exactly one post-processing hook`, given('PAYFLOW_POSTPROCESS_FUNCTION') !== given('PAYFLOW_POSTPROCESS_URL'));
		if (prog.role === 'payment') {
			const mode = value('PAYFLOW_LEGACY_MODE');
			const need = mode === 'submit-poll' ? ['PAYFLOW_LEGACY_SUBMIT', 'PAYFLOW_LEGACY_STATUS'] : ['PAYFLOW_LEGACY_CALL'];
			ok(`${tag}: the statements of legacy mode ${mode} are given`, need.every(given), need.filter((n) => !given(n)).join(', '));
		}

		// the worker reads its own queue
		if (prog.role !== undefined) {
			const url = env.get('PAYFLOW_QUEUE_URL') || '';
			const output = url.replace(/^\$\{(.*)\}$/, '$1');
			const res = queues?.Outputs?.[output]?.Value?.Ref;
			ok(`${tag}: PAYFLOW_QUEUE_URL is the ${roleDestination[prog.role]} queue's URL output`,
				!!res && queueDestinations.get(roleDestination[prog.role]) === res, url);
			const vis = Number(value('PAYFLOW_VISIBILITY_TIMEOUT'));
			const queueVis = Number(queues?.Parameters?.VisibilityTimeoutSeconds?.Default);
			ok(`${tag}: PAYFLOW_VISIBILITY_TIMEOUT = the queues' VisibilityTimeout (${queueVis})`, vis === queueVis, String(vis));
		}
		// the webhook worker's last attempt must come before the DLQ takes the message (role_webhook.c)
		if (prog.role === 'webhook') {
			const dlqAfter = Number(queues?.Parameters?.MaxReceiveCount?.Default);
			const attempts = Number(value('PAYFLOW_WEBHOOK_MAX_ATTEMPTS'));
			ok(`${tag}: PAYFLOW_WEBHOOK_MAX_ATTEMPTS ${attempts} <= the queues' MaxReceiveCount ${dlqAfter}`, attempts <= dlqAfter);
		}
		if (prog.name === 'relay')
			ok(`${tag}: PAYFLOW_QUEUE_URLS is queues.yaml's PayflowQueueUrls output`,
				env.get('PAYFLOW_QUEUE_URLS') === '${PayflowQueueUrls}' && !!queues?.Outputs?.PayflowQueueUrls);

		// stopping: SIGTERM, then PAYFLOW_DRAIN_SECONDS, then the program's own exit margin, then ECS's SIGKILL
		const drain = Number(value('PAYFLOW_DRAIN_SECONDS'));
		const stop = Number(c.stopTimeout);
		ok(`${tag}: stopTimeout ${c.stopTimeout} >= PAYFLOW_DRAIN_SECONDS ${drain} + ${prog.margin} s exit margin`,
			Number.isInteger(stop) && stop >= drain + prog.margin);
		ok(`${tag}: stopTimeout within Fargate's ${FARGATE_MAX_STOP} s`, stop <= FARGATE_MAX_STOP);
		ok(`${tag}: runs under an init process (signals forwarded)`, c.linuxParameters?.initProcessEnabled === true);

		// a scheduled pass (services.yaml's S3SweepSchedule), not a loop that a schedule would pile up
		if (prog.name === 's3-sweep')
			ok(`${tag}: payflow-s3-sweep runs one pass (--once) and exits`, (c.command || []).includes('--once'), (c.command || []).join(' '));

		if (prog.name === 'api') {
			const listen = value('PAYFLOW_LISTEN') || '';
			const port = Number(listen.split(':').pop());
			ok(`${tag}: PAYFLOW_LISTEN reachable from outside the container (${listen})`, /^(0\.0\.0\.0|\[::\]):\d+$/.test(listen));
			ok(`${tag}: the container port is PAYFLOW_LISTEN's`, (c.portMappings || []).some((p) => p.containerPort === port));
			ok(`${tag}: health check on /healthz at that port`,
				(c.healthCheck?.command || []).some((a) => a.includes(`:${port}/healthz`)));
		}
	}
}
for (const p of ['relay', 'api', 's3-sweep', ...Object.keys(roleDestination).map((r) => `worker --role ${r}`)])
	ok(`deploy/ecs: a task definition runs ${p}`, programsSeen.has(p));

// ---------------------------------------------------------------- iam.yaml: least privilege

if (ok('deploy/aws/iam.yaml exists and parses', !!iam)) {
	const statements = roleStatements;
	const queueRefs = (st) => [].concat(st.Resource).map((r) => r?.Ref).filter((r) => /QueueArn$/.test(r || ''));
	const wide = [];
	for (const [roleName, res] of roleNames)
		for (const st of statements(res)) {
			const actions = [].concat(st.Action);
			if (actions.some((a) => a === '*' || a.endsWith(':*'))) wide.push(`${roleName}: ${actions}`);
			if (st.Resource === '*' && !actions.every((a) => a === 'ecr:GetAuthorizationToken')) wide.push(`${roleName}: Resource *`);
		}
	ok('iam.yaml: no wildcard actions, no Resource "*" (but ecr:GetAuthorizationToken)', wide.length === 0, wide.join('; '));

	const outputOf = (dest) => {
		const res = queueDestinations.get(dest);
		return Object.entries(queues?.Outputs || {}).find(([k, o]) => k.endsWith('QueueArn') &&
			o.Value?.['Fn::GetAtt']?.[0] === res)?.[0];
	};
	const role = (name) => roleNames.get(`payflow-\${Environment}-\${Region}-${name}-task`);
	const relaySqs = statements(role('relay')).filter((st) => [].concat(st.Action).some((a) => a.startsWith('sqs:')));
	const relayQueues = relaySqs.flatMap(queueRefs).sort();
	ok('iam.yaml: relay may only sqs:SendMessage, on the four queues',
		relaySqs.every((st) => [].concat(st.Action).join() === 'sqs:SendMessage') &&
		relayQueues.join() === [...queueDestinations.keys()].map(outputOf).sort().join(), relayQueues.join());
	for (const [r, dest] of Object.entries(roleDestination)) {
		const sqs = statements(role(r)).filter((st) => [].concat(st.Action).some((a) => a.startsWith('sqs:')));
		const targets = sqs.flatMap(queueRefs);
		const actions = new Set(sqs.flatMap((st) => [].concat(st.Action)));
		ok(`iam.yaml: ${r} worker consumes ${dest} only`, targets.length > 0 && targets.every((t) => t === outputOf(dest)), targets.join());
		ok(`iam.yaml: ${r} worker has exactly Receive/Delete/ChangeMessageVisibility/GetQueueAttributes`,
			[...actions].sort().join() === 'sqs:ChangeMessageVisibility,sqs:DeleteMessage,sqs:GetQueueAttributes,sqs:ReceiveMessage');
		const protection = statements(role(r)).filter((st) => [].concat(st.Action).some((a) => /TaskProtection$/.test(a)));
		ok(`iam.yaml: ${r} worker may set and read its tasks' scale-in protection, in its cluster only`,
			protection.length === 1 && [].concat(protection[0].Action).sort().join() === 'ecs:GetTaskProtection,ecs:UpdateTaskProtection' &&
			/:task\/payflow-\$\{Environment\}\/\*$/.test(protection[0].Resource?.['Fn::Sub'] || ''));
	}
	const apiActions = statements(role('api')).flatMap((st) => [].concat(st.Action));
	ok('iam.yaml: api may only s3:PutObject', apiActions.join() === 's3:PutObject', apiActions.join());
	const objectStatements = (res) => statements(res).filter((st) => [].concat(st.Action).some((a) => /^s3:(Get|Put|Delete)Object$/.test(a)));
	const allPrefixed = [...roleNames.values()].every((r) => objectStatements(r).flatMap((st) => [].concat(st.Resource))
		.every((x) => /^\$\{PayloadBucketArn\}\/[a-z]+\/\*$/.test(x?.['Fn::Sub'] || '')));
	ok('iam.yaml: object access only under a prefix (payments/*, requests/*)', allPrefixed);
	// the S3 sweeper lists and deletes, and reads nothing (issue 26, L3)
	const sweep = statements(role('s3-sweep'));
	const sweepActions = sweep.flatMap((st) => [].concat(st.Action)).sort();
	const sweepList = sweep.find((st) => [].concat(st.Action).join() === 's3:ListBucket');
	const sweepDelete = sweep.find((st) => [].concat(st.Action).join() === 's3:DeleteObject');
	ok('iam.yaml: s3-sweep may only s3:ListBucket and s3:DeleteObject (no s3:GetObject: it never reads a payload)',
		sweepActions.join() === 's3:DeleteObject,s3:ListBucket', sweepActions.join());
	ok('iam.yaml: s3-sweep lists payments/ and requests/ only (s3:prefix condition)',
		sweepList?.Resource?.Ref === 'PayloadBucketArn' &&
		[].concat(sweepList?.Condition?.StringLike?.['s3:prefix'] || []).sort().join() === 'payments/*,requests/*',
		JSON.stringify(sweepList?.Condition));
	ok('iam.yaml: s3-sweep deletes under payments/ and requests/ only',
		[].concat(sweepDelete?.Resource || []).map((r) => r?.['Fn::Sub']).sort().join() ===
			'${PayloadBucketArn}/payments/*,${PayloadBucketArn}/requests/*');
	const schedule = iam.Resources.S3SweepScheduleRole;
	const schedStatements = statements('S3SweepScheduleRole');
	const runTask = schedStatements.find((st) => [].concat(st.Action).join() === 'ecs:RunTask');
	const passRole = schedStatements.find((st) => [].concat(st.Action).join() === 'iam:PassRole');
	ok('iam.yaml: the sweeper\'s schedule role is assumed by EventBridge Scheduler only',
		schedule?.Properties?.AssumeRolePolicyDocument?.Statement?.every((st) => st.Principal?.Service === 'scheduler.amazonaws.com'));
	ok('iam.yaml: the schedule may only RunTask the sweeper\'s task definition, in this environment\'s cluster',
		schedStatements.length === 2 && /:task-definition\/payflow-\$\{Environment\}-s3-sweep:\*$/.test(runTask?.Resource?.['Fn::Sub'] || '') &&
		/:cluster\/payflow-\$\{Environment\}$/.test(runTask?.Condition?.ArnEquals?.['ecs:cluster']?.['Fn::Sub'] || ''),
		JSON.stringify(runTask));
	ok('iam.yaml: the schedule may pass the sweeper\'s two roles only, to ECS tasks',
		[].concat(passRole?.Resource || []).map((r) => r?.['Fn::GetAtt']?.[0]).sort().join() === 'S3SweepExecutionRole,S3SweepTaskRole' &&
		passRole?.Condition?.StringEquals?.['iam:PassedToService'] === 'ecs-tasks.amazonaws.com', JSON.stringify(passRole));
	const webhookSecrets = [...readableSecrets(roleNames.get('payflow-${Environment}-${Region}-webhook-exec'))];
	ok('iam.yaml: the webhook worker\'s execution role reads its own database URL and nothing else',
		webhookSecrets.join() === 'DatabaseUrlWebhookSecretArn', webhookSecrets.join());
}


// ---------------------------------------------------------------- the stack: payflow.yaml and its nested stacks

const stack = templates.get('payflow.yaml');
const services = templates.get('services.yaml');
const network = templates.get('network.yaml');
const alarms = templates.get('observability.yaml');
if (ok('deploy/aws/payflow.yaml and its nested templates parse', !!stack && !!services && !!network && !!alarms && !!tasksTemplate)) {
	const nested = Object.entries(stack.Resources).filter(([, r]) => r.Type === 'AWS::CloudFormation::Stack');
	for (const [name, r] of nested) {
		const t = templates.get(r.Properties.TemplateURL);
		if (!ok(`payflow.yaml: ${name} is a template of deploy/aws (${r.Properties.TemplateURL})`, !!t)) continue;
		const given = r.Properties.Parameters || {};
		const needed = Object.entries(t.Parameters || {}).filter(([, d]) => d.Default === undefined).map(([k]) => k);
		const missing = needed.filter((k) => !(k in given));
		const unknown = Object.keys(given).filter((k) => !(k in t.Parameters));
		ok(`payflow.yaml: ${name} gets every parameter its template requires, and no other`,
			missing.length + unknown.length === 0, `missing ${missing}; unknown ${unknown}`);
		// a root parameter handed on unchanged must be declared as the nested template declares it
		for (const [k, v] of Object.entries(given)) {
			if (!v?.Ref || !(v.Ref in (stack.Parameters || {}))) continue;
			const rule = (d) => JSON.stringify(['Type', 'AllowedPattern', 'AllowedValues', 'MinValue', 'MaxValue'].map((x) => d[x]));
			const mine = rule(stack.Parameters[v.Ref]), theirs = rule(t.Parameters[k]);
			if (v.Ref === k)
				ok(`payflow.yaml: parameter ${k} is declared as ${r.Properties.TemplateURL} declares it`,
					mine === theirs, `${mine} vs ${theirs}`);
		}
	}
	const everyParameterConstrained = [...templates].flatMap(([f, t]) => Object.entries(t.Parameters || {})
		.filter(([, d]) => d.Type === 'String' && d.AllowedPattern === undefined && d.AllowedValues === undefined && d.Default === undefined)
		.map(([k]) => `${f}:${k}`));
	ok('templates: every required String parameter has an AllowedPattern or AllowedValues', everyParameterConstrained.length === 0,
		everyParameterConstrained.join(', '));
	const unnamed = [...templates].flatMap(([f, t]) => Object.entries(t.Parameters || {})
		.filter(([k, d]) => (d.AllowedPattern || d.AllowedValues || d.MinValue !== undefined) && !String(d.ConstraintDescription || '').startsWith(`${k}:`))
		.map(([k]) => `${f}:${k}`));
	ok('templates: every constrained parameter\'s ConstraintDescription starts with its name', unnamed.length === 0, unnamed.join(', '));

	// data survives the stack: queues, bucket, log groups, secrets, the repository
	const unkept = [...templates].flatMap(([f, t]) => Object.entries(t.Resources || {})
		.filter(([, r]) => ['AWS::SQS::Queue', 'AWS::S3::Bucket', 'AWS::Logs::LogGroup', 'AWS::SecretsManager::Secret', 'AWS::ECR::Repository'].includes(r.Type) &&
			!(r.DeletionPolicy === 'Retain' && r.UpdateReplacePolicy === 'Retain')).map(([k]) => `${f}:${k}`));
	ok('templates: queues, bucket, log groups, secrets and the repository have DeletionPolicy and UpdateReplacePolicy Retain',
		unkept.length === 0, unkept.join(', '));

	// TLS only on every queue and DLQ
	const R = queues.Resources;
	const allQueues = Object.entries(R).filter(([, r]) => r.Type === 'AWS::SQS::Queue').map(([k]) => k).sort();
	const tlsCovered = new Set(Object.values(R).filter((r) => r.Type === 'AWS::SQS::QueuePolicy' &&
		r.Properties.PolicyDocument.Statement.some((st) => st.Effect === 'Deny' && st.Principal === '*' &&
			st.Condition?.Bool?.['aws:SecureTransport'] === 'false'))
		.flatMap((r) => r.Properties.Queues.map((q) => q.Ref)));
	ok('queues.yaml: every queue and DLQ denies calls without TLS (aws:SecureTransport)',
		allQueues.every((q) => tlsCovered.has(q)), allQueues.filter((q) => !tlsCovered.has(q)).join(', '));

	// payload expiry >= retention_failed + the longest an operation lives
	const helpers = read('extension/sql/flavour-sql/helpers.sql');
	const settingS = (n) => Number((helpers.match(new RegExp(`\\('${n}', 'integer', 's', '(\\d+)'`)) || [])[1]);
	const maxAttempts = Number((helpers.match(/\('max_attempts', 'integer', [^,]+, '(\d+)'/) || [])[1]);
	const steps = [...seed('step_definitions').matchAll(/\(\s*1\s*,\s*'([A-Z][A-Z0-9_]*)'\s*,\s*\d+\s*,/g)].map((m) => m[1]);
	const stepCount = new Set(steps).size;
	const callS = Number(settings.get('PAYFLOW_LEGACY_TIMEOUT').default);
	const lifetimeS = stepCount * maxAttempts * (callS + settingS('retry_max_delay'));
	const stuckS = Number(alarms.Parameters.OperationStuckThresholdSeconds.Default);
	const retentionFailedDays = settingS('retention_failed') / 86400;
	const floorDays = Number(queues.Parameters.PayloadExpirationDays.MinValue);
	ok(`lifetime: ${stepCount} steps x ${maxAttempts} attempts x (${callS} s call + ${settingS('retry_max_delay')} s retry) = ${lifetimeS} s <= the stuck alarm (${stuckS} s)`,
		stepCount === 3 && lifetimeS > 0 && lifetimeS <= stuckS);
	ok(`queues.yaml: PayloadExpirationDays >= ${floorDays} >= retention_failed (${retentionFailedDays} d) + the stuck alarm rounded up to days, + 1`,
		floorDays >= retentionFailedDays + Math.ceil(stuckS / 86400) + 1 && Number(queues.Parameters.PayloadExpirationDays.Default) >= floorDays);

	// services: one per task definition (or a schedule), deployments that drain, autoscaling on work per slot
	const svc = Object.entries(services.Resources).filter(([, r]) => r.Type === 'AWS::ECS::Service');
	const schedules = Object.entries(services.Resources).filter(([, r]) => r.Type === 'AWS::Scheduler::Schedule');
	const tasksOutputs = Object.keys(tasksTemplate.Outputs);
	const servicesStack = stack.Resources.ServicesStack?.Properties?.Parameters || {};
	const outputOfParam = (p) => servicesStack[p]?.['Fn::GetAtt']?.[1]?.replace('Outputs.', '');
	const served = [...svc.map(([, r]) => outputOfParam(r.Properties.TaskDefinition.Ref)),
		...schedules.map(([, r]) => outputOfParam(r.Properties.Target?.EcsParameters?.TaskDefinitionArn?.Ref))].sort();
	ok('services.yaml: one service or schedule per task definition of tasks.yaml',
		served.join() === tasksOutputs.filter((o) => o.endsWith('TaskDefinitionArn')).sort().join(), served.join());
	// the S3 sweeper: a pass per tick, started by its own role, in the private subnets (issue 26, L3)
	const sweepSchedule = services.Resources.S3SweepSchedule?.Properties;
	ok('services.yaml: a schedule runs the s3-sweep task definition in the cluster',
		outputOfParam(sweepSchedule?.Target?.EcsParameters?.TaskDefinitionArn?.Ref) === 'S3SweepTaskDefinitionArn' &&
		sweepSchedule?.Target?.Arn?.['Fn::GetAtt']?.[0] === 'Cluster' && sweepSchedule?.State === 'ENABLED' &&
		sweepSchedule?.Target?.EcsParameters?.LaunchType === 'FARGATE');
	ok('services.yaml: the sweeper\'s schedule starts it with iam.yaml\'s schedule role',
		servicesStack[sweepSchedule?.Target?.RoleArn?.Ref]?.['Fn::GetAtt']?.join() === 'IamStack,Outputs.S3SweepScheduleRoleArn');
	ok('services.yaml: the sweeper runs in private subnets without a public address, in its own security group',
		sweepSchedule?.Target?.EcsParameters?.NetworkConfiguration?.AwsvpcConfiguration?.AssignPublicIp === 'DISABLED' &&
		servicesStack[sweepSchedule?.Target?.EcsParameters?.NetworkConfiguration?.AwsvpcConfiguration?.SecurityGroups?.[0]?.Ref]
			?.['Fn::GetAtt']?.join() === 'NetworkStack,Outputs.S3SweepSecurityGroupId');
	for (const [name, r] of svc) {
		const d = r.Properties.DeploymentConfiguration || {};
		ok(`services.yaml: ${name} starts new tasks before stopping old ones, and rolls back a failed deployment`,
			d.MinimumHealthyPercent === 100 && d.MaximumPercent === 200 && d.DeploymentCircuitBreaker?.Enable === true &&
			d.DeploymentCircuitBreaker?.Rollback === true);
		ok(`services.yaml: ${name} in private subnets without a public address`,
			r.Properties.NetworkConfiguration?.AwsvpcConfiguration?.AssignPublicIp === 'DISABLED');
	}
	ok('services.yaml: the cluster has Container Insights', (services.Resources.Cluster?.Properties?.ClusterSettings || [])
		.some((x) => x.Name === 'containerInsights' && ['enabled', 'enhanced'].includes(x.Value)));
	const policies = Object.values(services.Resources).filter((r) => r.Type === 'AWS::ApplicationAutoScaling::ScalingPolicy');
	for (const [r, dest] of Object.entries(roleDestination)) {
		const res = `${r[0].toUpperCase()}${r.slice(1)}Worker`;
		const pol = policies.find((x) => x.Properties.ScalingTargetId?.Ref === `${res}ScalableTarget`);
		const m = pol?.Properties?.TargetTrackingScalingPolicyConfiguration?.CustomizedMetricSpecification?.Metrics || [];
		const names = m.map((x) => x.MetricStat?.Metric?.MetricName).filter(Boolean).sort().join();
		const expr = m.find((x) => x.ReturnData)?.Expression?.['Fn::Sub'] || '';
		const concurrencyParam = (expr.match(/\$\{(\w+Concurrency)\}/) || [])[1];
		const passed = servicesStack[concurrencyParam]?.['Fn::GetAtt'];
		ok(`services.yaml: ${r} worker scales on (visible + in flight) / (running tasks x its PAYFLOW_CONCURRENCY)`,
			names === 'ApproximateNumberOfMessagesNotVisible,ApproximateNumberOfMessagesVisible,RunningTaskCount' &&
			/(\(visible \+ inflight\)|IF\(\$\{(\w+StepLimit)\} > 0 AND visible \+ inflight > \$\{\2\}, \$\{\2\}, visible \+ inflight\)) \/ \(.*tasks.* \* \$\{\w+Concurrency\}\)/.test(expr) &&
			passed?.[0] === 'TasksStack' && tasksOutputs.includes(passed?.[1]?.replace('Outputs.', '')), expr);
		if (r === 'payment')
			ok('services.yaml: the payment worker counts no more work than the step limit admits (PaymentStepLimit, from payflow.yaml)',
				expr.includes('${PaymentStepLimit}') && servicesStack.PaymentStepLimit?.Ref === 'PaymentStepLimit', expr);
		const queueParam = m.find((x) => x.Id === 'visible')?.MetricStat?.Metric?.Dimensions?.[0]?.Value?.Ref;
		ok(`payflow.yaml: the ${r} worker's scaling reads the ${dest} queue`,
			servicesStack[queueParam]?.['Fn::GetAtt']?.[1] === `Outputs.${queueDestinations.get(dest)?.replace(/Queue$/, '')}QueueName`,
			JSON.stringify(servicesStack[queueParam]));
	}
	const lb = services.Resources;
	ok('services.yaml: the load balancer listens on HTTPS only, TLS 1.2 or later', Object.values(lb)
		.filter((x) => x.Type === 'AWS::ElasticLoadBalancingV2::Listener').every((x) => x.Properties.Protocol === 'HTTPS' &&
			/TLS13|TLS-1-2/.test(x.Properties.SslPolicy)));
	ok('services.yaml: the target group checks /readyz', lb.ApiTargetGroup?.Properties?.HealthCheckPath === '/readyz');
	ok('services.yaml: /metrics answers 404 at the load balancer', Object.values(lb).some((x) =>
		x.Type === 'AWS::ElasticLoadBalancingV2::ListenerRule' && x.Properties.Conditions.some((c) =>
			(c.PathPatternConfig?.Values || []).includes('/metrics')) && x.Properties.Actions[0].Type === 'fixed-response'));

	// network: the webhook worker reaches 443 and the database, nothing else
	const N = network.Resources;
	const egressOf = (sg) => [...(N[sg]?.Properties?.SecurityGroupEgress || []).map((e) => `${e.FromPort}-${e.CidrIp}`),
		...Object.values(N).filter((x) => x.Type === 'AWS::EC2::SecurityGroupEgress' && x.Properties.GroupId?.['Fn::GetAtt']?.[0] === sg)
			.map((x) => `${x.Properties.FromPort?.Ref || x.Properties.FromPort}-${x.Properties.DestinationSecurityGroupId?.Ref || x.Properties.CidrIp?.Ref || x.Properties.CidrIp}`)];
	ok('network.yaml: the webhook worker may reach 443 and the database only',
		egressOf('WebhookWorkerSecurityGroup').sort().join() === '443-0.0.0.0/0,DatabasePort-DatabaseSecurityGroupId',
		egressOf('WebhookWorkerSecurityGroup').join());
	ok('network.yaml: the S3 sweeper may reach 443 and the database only',
		egressOf('S3SweepSecurityGroup').sort().join() === '443-0.0.0.0/0,DatabasePort-DatabaseSecurityGroupId',
		egressOf('S3SweepSecurityGroup').join());
	ok('network.yaml: only the payment worker reaches the legacy DBMS', Object.keys(N).filter((k) =>
		N[k].Type === 'AWS::EC2::SecurityGroupEgress' && N[k].Properties.CidrIp?.Ref === 'LegacyCidr').join() === 'PaymentWorkerToLegacy');

	// alarms: every source queue, every DLQ, payflow's gauges as published, tasks, the load balancer
	const A = Object.values(alarms.Resources).filter((x) => x.Type === 'AWS::CloudWatch::Alarm');
	const onQueue = (metric, param) => A.some((a) => a.Properties.MetricName === metric && a.Properties.Dimensions?.[0]?.Value?.Ref === param);
	for (const q of ['PaymentRequests', 'PaymentCompleted', 'InvoiceRequests', 'OperationEvents'])
		ok(`observability.yaml: ${q}: oldest-message age, backlog and DLQ alarms`, onQueue('ApproximateAgeOfOldestMessage', `${q}QueueName`) &&
			onQueue('ApproximateNumberOfMessagesVisible', `${q}QueueName`) && onQueue('ApproximateNumberOfMessagesVisible', `${q}DeadLetterQueueName`));
	const metricsTd = json.get('deploy/ecs/payflow-metrics.json');
	const sql = metricsTd?.containerDefinitions?.[0]?.environment?.find((e) => e.name === 'METRICS_SQL')?.value || '';
	const published = new Set([...sql.matchAll(/json_build_object\('Name', '(\w+)'/g)].map((m) => m[1]));
	const gauges = A.filter((a) => a.Properties.Namespace === 'Payflow').map((a) => a.Properties.MetricName);
	ok(`observability.yaml: the Payflow alarms read metrics the metrics task publishes (${gauges.join(', ')})`,
		gauges.length > 0 && gauges.every((g) => published.has(g)), gauges.filter((g) => !published.has(g)).join(', '));
	for (const g of ['OutboxOldestAgeSeconds', 'OutboxBacklog', 'DeadLettersOpen', 'WebhookFailuresOpen', 'OperationsOldestAgeSeconds', 'BreakersOpen'])
		ok(`observability.yaml: an alarm on ${g}`, gauges.includes(g));
	const belowDesired = A.filter((a) => (a.Properties.Metrics || []).some((m) => m.MetricStat?.Metric?.MetricName === 'DesiredTaskCount'))
		.map((a) => a.Properties.Metrics[0].MetricStat.Metric.Dimensions[1].Value.Ref).sort();
	ok('observability.yaml: a tasks-below-desired alarm per service', belowDesired.join() ===
		svc.map(([k]) => `${k}Name`).sort().join(), belowDesired.join());
	const sweepFilter = Object.entries(alarms.Resources).find(([, x]) => x.Type === 'AWS::Logs::MetricFilter' &&
		x.Properties.LogGroupName?.['Fn::Sub'] === json.get('deploy/ecs/payflow-s3-sweep.json')?.containerDefinitions?.[0]
			?.logConfiguration?.options?.['awslogs-group'] && /"pass done"/.test(x.Properties.FilterPattern));
	const sweepMetric = sweepFilter?.[1]?.Properties?.MetricTransformations?.[0];
	ok('observability.yaml: an alarm when payflow-s3-sweep logs no "pass done" (a metric filter on its log group)',
		!!sweepMetric && A.some((a) => a.Properties.Namespace === sweepMetric.MetricNamespace &&
			a.Properties.MetricName === sweepMetric.MetricName && a.Properties.TreatMissingData === 'breaching'));
	ok('observability.yaml: target and load balancer 5xx alarms', ['HTTPCode_Target_5XX_Count', 'HTTPCode_ELB_5XX_Count']
		.every((m) => A.some((a) => a.Properties.MetricName === m)));
}

if (failures) {
	console.log(`${failures} check(s) failed`);
	process.exit(1);
}
console.log('deploy/: all checks passed');
