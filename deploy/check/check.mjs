// deploy/check/check.mjs — checks deploy/ against the code it deploys, without AWS.
//
//   node deploy/check/check.mjs [repository root]       (the npm package yaml must be resolvable:
//                                                         PAYFLOW_DEPLOY_CHECK_MODULES=<dir>/node_modules)
//
// The facts come from the sources, not from a copy kept here:
//   - the settings the programs read, their types, ranges and which program
//     requires them: the settings table of workers/src/lib/config.c (and any
//     other getenv() in workers/src), the program bits of config.h;
//   - the destinations the extension emits: extension/sql/payflow.sql;
//   - the worker's drain grace: workers/src/worker/loop.c.
// Rules that config.c states in code (check_combinations) are restated
// below, each next to the check that uses it.
//
// One line per check, "ok - ..." or "not ok - ...", exit status 1 when any failed.
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

// Split "a, "b,c", f(x, y), d" at top-level commas.
function splitTopLevel(s) {
	const parts = [];
	let depth = 0, quote = false, cur = '';
	for (let i = 0; i < s.length; i++) {
		const c = s[i];
		if (quote) {
			cur += c;
			if (c === '\\') cur += s[++i];
			else if (c === '"') quote = false;
		} else if (c === '"') { quote = true; cur += c; }
		else if (c === '(') { depth++; cur += c; }
		else if (c === ')') { depth--; cur += c; }
		else if (c === ',' && depth === 0) { parts.push(cur.trim()); cur = ''; }
		else cur += c;
	}
	if (cur.trim()) parts.push(cur.trim());
	return parts;
}
const cString = (t) => (t === 'NULL' ? null : JSON.parse(t));

function programBits() {
	const bits = {};
	for (const m of read('workers/include/payflow/config.h').matchAll(/#define\s+(PF_PROGRAM_\w+)\s+(0x[0-9A-Fa-f]+|\([^)]*\))/g))
		bits[m[1]] = m[2];
	const value = (name) => {
		const v = bits[name];
		if (v === undefined) throw new Error(`config.h has no ${name}`);
		if (v.startsWith('0x')) return parseInt(v, 16);
		return v.replace(/[()]/g, '').split('|').map((x) => value(x.trim())).reduce((a, b) => a | b, 0);
	};
	return value;
}
const bit = programBits();

function settingsTable() {
	const src = read('workers/src/lib/config.c');
	const macros = { NONE: 0, RELAY: bit('PF_PROGRAM_RELAY'), WORKER: bit('PF_PROGRAM_WORKER') };
	const table = new Map();
	const body = src.slice(src.indexOf('static const setting settings[]'));
	for (const m of body.slice(0, body.indexOf('};')).matchAll(/^\s*\{("[A-Z0-9_]+".*)\},\s*$/gm)) {
		const f = splitTopLevel(m[1]);
		const req = f[3].split('|').map((t) => t.trim()).reduce((a, t) => a | (t in macros ? macros[t] : bit(t)), 0);
		const s = {
			name: cString(f[0]), type: f[1], required: req, def: cString(f[4]), secret: f[5] === 'true',
			choices: cString(f[6]), min: Number(f[7]), max: Number(f[8]), alias: cString(f[9]),
		};
		table.set(s.name, s);
		if (s.alias) table.set(s.alias, s);
	}
	return table;
}
const settings = settingsTable();
ok(`config.c: the settings table was read (${settings.size} names)`, settings.size > 20 && settings.has('PAYFLOW_DATABASE_URL'));

// Names read with getenv() outside the table (PAYFLOW_CONFIG_FILE, ...).
const getenvNames = new Set();
for (const f of listFiles('workers/src', /\.c$/))
	for (const m of fs.readFileSync(f, 'utf8').matchAll(/getenv\("([A-Z0-9_]+)"\)|#define\s+\w+_VAR\s+"([A-Z0-9_]+)"/g))
		getenvNames.add(m[1] || m[2]);
const knownVariable = (name) => settings.has(name) || getenvNames.has(name);

// Destinations: in payflow.sql a destination literal directly follows the
// event type it carries (the step_definitions rows, the _emit calls, the
// outbox inserts): 'PaymentRequested', 'payment-requests'.
const payflowSql = read('extension/sql/payflow.sql');
const emitted = new Set([...payflowSql.matchAll(/'[A-Za-z]+'\s*,\s*'([a-z0-9]+(?:-[a-z0-9]+)+)'/g)].map((m) => m[1]));
ok(`payflow.sql: destinations found (${[...emitted].sort().join(', ')})`, emitted.size >= 1);

// The worker's exit after PAYFLOW_DRAIN_SECONDS: cancelled calls get
// ABANDON_GRACE_MS, deletes and visibility changes in flight FLUSH_WAIT_MS.
const loopC = read('workers/src/worker/loop.c');
const constMs = (name) => Number((loopC.match(new RegExp(`#define\\s+${name}\\s+(\\d+)`)) || [])[1]);
const workerExitMarginS = Math.ceil((constMs('ABANDON_GRACE_MS') + constMs('FLUSH_WAIT_MS')) / 1000);
ok(`loop.c: the worker's exit margin after the drain was read (${workerExitMarginS} s)`, workerExitMarginS > 0);

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
	const visibilityDefault = Number(settings.get('PAYFLOW_VISIBILITY_TIMEOUT').def);
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

// Which queue each worker role consumes (DESIGN §2; the webhook role reads operation-events).
const roleDestination = { payment: 'payment-requests', postprocess: 'payment-completed',
	invoice: 'invoice-requests', webhook: 'operation-events' };
const secretLooking = /SECRET|PASSWORD|PASSWD|TOKEN|DATABASE_URL|ODBC|ACCESS_KEY|PRIVATE/;
const FARGATE_MAX_STOP = 120;
// where deploy/docker/Dockerfile puts the database server's CA bundle
const DB_CA_BUNDLE = (read('deploy/docker/Dockerfile').match(/^ENV PGSSLROOTCERT=(\S+)/m) || [])[1];

function programOf(c) {
	const cmd = c.command || [];
	const prog = path.basename(cmd[0] || '');
	if (prog === 'payflow-relay') return { name: 'relay', bits: bit('PF_PROGRAM_RELAY'), margin: 5 };
	if (prog === 'payflow-api') return { name: 'api', bits: bit('PF_PROGRAM_API'), margin: 5 };
	if (prog === 'payflow-worker') {
		const i = cmd.indexOf('--role');
		const role = i >= 0 ? cmd[i + 1] : (cmd.find((a) => a.startsWith('--role=')) || '').slice(7);
		const b = `PF_PROGRAM_${role.toUpperCase()}`;
		let roleBit = 0;
		try { roleBit = bit(b); } catch { /* unknown role: reported below */ }
		return { name: `worker --role ${role}`, role, roleBit, bits: bit('PF_PROGRAM_WORKER') | roleBit, margin: workerExitMarginS };
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
		const value = (n) => (env.has(n) ? env.get(n) : settings.get(n)?.def ?? null);

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

		const names = [...env.keys(), ...sec.keys()];
		const unknown = names.filter((n) => /^(PAYFLOW|AWS)_/.test(n) && !knownVariable(n));
		ok(`${tag}: every PAYFLOW_*/AWS_* variable is one the C code reads`, unknown.length === 0, unknown.join(', '));
		if (prog.role !== undefined)
			ok(`${tag}: role ${prog.role} exists in config.h`, prog.roleBit !== 0);

		// what config.c requires of this program
		const required = [...new Set([...settings.values()])].filter((s) => s.required & prog.bits).map((s) => s.name);
		const missing = required.filter((n) => !given(n));
		ok(`${tag}: every setting ${prog.name} requires is given (${required.join(', ')})`, missing.length === 0, missing.join(', '));

		// literal values within the table's types and ranges
		const badValues = [];
		for (const [n, v] of env) {
			const s = settings.get(n);
			if (!s || isPlaceholder(v) || v === '') continue;
			if (s.type === 'T_INT' && !(/^-?\d+$/.test(v) && Number(v) >= s.min && Number(v) <= s.max)) badValues.push(`${n}=${v}`);
			if (s.type === 'T_ENUM' && !s.choices.split('|').includes(v.toLowerCase())) badValues.push(`${n}=${v}`);
			if (s.type === 'T_URL' && !/^https?:\/\/[^/:\s]/.test(v)) badValues.push(`${n}=${v}`);
			if (s.type === 'T_HOST_PORT' && !/:\d+$/.test(v)) badValues.push(`${n}=${v}`);
		}
		ok(`${tag}: values fit config.c's types and ranges`, badValues.length === 0, badValues.join(', '));

		// check_combinations() in config.c
		const usesAws = (prog.bits & bit('PF_PROGRAM_USES_AWS')) !== 0 || value('PAYFLOW_STORE') === 's3';
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
for (const p of ['relay', 'api', ...Object.keys(roleDestination).map((r) => `worker --role ${r}`)])
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
	const objectStatements = (res) => statements(res).filter((st) => [].concat(st.Action).some((a) => /^s3:(Get|Put)Object$/.test(a)));
	const allPrefixed = [...roleNames.values()].every((r) => objectStatements(r).flatMap((st) => [].concat(st.Resource))
		.every((x) => /^\$\{PayloadBucketArn\}\/[a-z]+\/\*$/.test(x?.['Fn::Sub'] || '')));
	ok('iam.yaml: object access only under a prefix (payments/*, requests/*)', allPrefixed);
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
	const steps = [...payflowSql.matchAll(/\('(PROCESS_PAYMENT|POST_PROCESS|CREATE_INVOICE)'/g)].map((m) => m[1]);
	const stepCount = new Set(steps).size;
	const callS = Number(settings.get('PAYFLOW_LEGACY_TIMEOUT').def);
	const lifetimeS = stepCount * maxAttempts * (callS + settingS('retry_max_delay'));
	const stuckS = Number(alarms.Parameters.OperationStuckThresholdSeconds.Default);
	const retentionFailedDays = settingS('retention_failed') / 86400;
	const floorDays = Number(queues.Parameters.PayloadExpirationDays.MinValue);
	ok(`lifetime: ${stepCount} steps x ${maxAttempts} attempts x (${callS} s call + ${settingS('retry_max_delay')} s retry) = ${lifetimeS} s <= the stuck alarm (${stuckS} s)`,
		stepCount === 3 && lifetimeS > 0 && lifetimeS <= stuckS);
	ok(`queues.yaml: PayloadExpirationDays >= ${floorDays} >= retention_failed (${retentionFailedDays} d) + the stuck alarm rounded up to days, + 1`,
		floorDays >= retentionFailedDays + Math.ceil(stuckS / 86400) + 1 && Number(queues.Parameters.PayloadExpirationDays.Default) >= floorDays);

	// services: one per task definition, deployments that drain, autoscaling on work per slot
	const svc = Object.entries(services.Resources).filter(([, r]) => r.Type === 'AWS::ECS::Service');
	const tasksOutputs = Object.keys(tasksTemplate.Outputs);
	const servicesStack = stack.Resources.ServicesStack?.Properties?.Parameters || {};
	const served = svc.map(([, r]) => servicesStack[r.Properties.TaskDefinition.Ref]?.['Fn::GetAtt']?.[1]?.replace('Outputs.', '')).sort();
	ok('services.yaml: one service per task definition of tasks.yaml',
		served.join() === tasksOutputs.filter((o) => o.endsWith('TaskDefinitionArn')).sort().join(), served.join());
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
			/\(visible \+ inflight\) \/ \(.*tasks.* \* \$\{\w+Concurrency\}\)/.test(expr) &&
			passed?.[0] === 'TasksStack' && tasksOutputs.includes(passed?.[1]?.replace('Outputs.', '')), expr);
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
	for (const g of ['OutboxOldestAgeSeconds', 'OutboxBacklog', 'DeadLettersOpen', 'WebhookFailuresOpen', 'OperationsOldestAgeSeconds'])
		ok(`observability.yaml: an alarm on ${g}`, gauges.includes(g));
	const belowDesired = A.filter((a) => (a.Properties.Metrics || []).some((m) => m.MetricStat?.Metric?.MetricName === 'DesiredTaskCount'))
		.map((a) => a.Properties.Metrics[0].MetricStat.Metric.Dimensions[1].Value.Ref).sort();
	ok('observability.yaml: a tasks-below-desired alarm per service', belowDesired.join() ===
		svc.map(([k]) => `${k}Name`).sort().join(), belowDesired.join());
	ok('observability.yaml: target and load balancer 5xx alarms', ['HTTPCode_Target_5XX_Count', 'HTTPCode_ELB_5XX_Count']
		.every((m) => A.some((a) => a.Properties.MetricName === m)));
}

if (failures) {
	console.log(`${failures} check(s) failed`);
	process.exit(1);
}
console.log('deploy/: all checks passed');
