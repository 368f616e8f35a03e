// deploy/check/tasks-to-cfn.mjs — writes deploy/aws/tasks.yaml from deploy/ecs/*.json.
//
//   node deploy/check/tasks-to-cfn.mjs [repository root] [--check]
//
// The task definitions are written once, in deploy/ecs/*.json, in the shape
// of ECS's RegisterTaskDefinition (what `aws ecs register-task-definition`
// and render.sh take, and what test/integration/deploy_image.sh runs in the
// image). The stack needs them as AWS::ECS::TaskDefinition resources: this
// turns each file into one (camelCase keys → CloudFormation's PascalCase,
// every ${Placeholder} string → Fn::Sub, the placeholders → parameters of
// the nested stack), adds the log group each one names, and outputs what
// services.yaml needs. tasks.yaml is committed so the templates deploy as
// they are; --check (deploy_artifacts.sh) fails when it differs from what
// this would write, so the two copies cannot drift.
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const args = process.argv.slice(2);
const checkOnly = args.includes('--check');
const root = path.resolve(args.find((a) => !a.startsWith('--')) ||
	path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '..'));
const modules = path.resolve(process.env.PAYFLOW_DEPLOY_CHECK_MODULES || path.join(root, 'deploy', 'check', 'node_modules'));
const YAML = createRequire(path.join(modules, 'noop.js'))('yaml');

// Placeholders that are CloudFormation pseudo parameters, not stack parameters.
const PSEUDO = { AccountId: 'AWS::AccountId', Region: 'AWS::Region' };
// Keys whose members are data (names chosen by Docker or the user), kept as they are.
const VERBATIM = new Set(['options', 'dockerLabels']);
// Parameter constraints by placeholder name: a bad value fails the stack naming it.
function parameterFor(name) {
	const p = { Type: 'String' };
	const rule = (pattern, what) => Object.assign(p, { AllowedPattern: pattern, ConstraintDescription: `${name}: ${what}` });
	if (name === 'Environment')
		rule('^[a-z][a-z0-9-]{0,11}$', "1 to 12 characters, lower-case letters, digits and '-', starting with a letter");
	else if (name === 'ImageTag')
		rule('^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$', 'an image tag (letters, digits, _ . -; at most 128)');
	else if (name.endsWith('SecretArn'))
		rule('^arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:[0-9]{12}:secret:.+$', 'the full ARN of a Secrets Manager secret');
	else if (name.endsWith('QueueUrl') || name === 'InvoiceUrl')
		rule('^https://[^\\s]+$', 'an https:// URL');
	else if (name === 'PayflowQueueUrls')
		rule('^[a-z0-9-]+=https://[^,\\s]+(,[a-z0-9-]+=https://[^,\\s]+)*$', 'destination=https://queue-url pairs, comma-separated');
	else if (name === 'PayloadBucketName')
		rule('^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$', 'an S3 bucket name');
	else if (name === 'LegacyLookup')
		Object.assign(p, { Default: '', Description: 'PAYFLOW_LEGACY_LOOKUP; may be empty' });
	else
		rule('^.+$', 'must not be empty');
	return p;
}

const pascal = (k) => k[0].toUpperCase() + k.slice(1);
const placeholders = new Set();
function subst(text) {
	let out = text.replace(/\$\{([A-Za-z][A-Za-z0-9]*)\}/g, (m, n) => {
		if (PSEUDO[n]) return `\${${PSEUDO[n]}}`;
		placeholders.add(n);
		return m;
	});
	out = out.replace(/^arn:aws:/, 'arn:${AWS::Partition}:').replace(/\.amazonaws\.com\b/g, '.${AWS::URLSuffix}');
	return out === text && !/\$\{/.test(out) ? text : { 'Fn::Sub': out };
}
function convert(node, verbatim = false) {
	if (Array.isArray(node)) return node.map((n) => convert(n));
	if (typeof node === 'string') return subst(node);
	if (!node || typeof node !== 'object') return node;
	const out = {};
	for (const [k, v] of Object.entries(node))
		out[verbatim ? k : pascal(k)] = VERBATIM.has(k) ? convert(v, true) : convert(v);
	return out;
}
// payflow-worker-payment.json → WorkerPayment
const logicalName = (file) => path.basename(file, '.json').replace(/^payflow-/, '').split('-').map(pascal).join('');

const ecsDir = path.join(root, 'deploy', 'ecs');
const files = fs.readdirSync(ecsDir).filter((f) => f.endsWith('.json')).sort();
const resources = {};
const outputs = {};
for (const f of files) {
	const td = JSON.parse(fs.readFileSync(path.join(ecsDir, f), 'utf8'));
	const name = logicalName(f);
	const c = td.containerDefinitions[0];
	const group = c.logConfiguration.options['awslogs-group'];
	resources[`${name}LogGroup`] = {
		Type: 'AWS::Logs::LogGroup',
		DeletionPolicy: 'Retain',
		UpdateReplacePolicy: 'Retain',
		Properties: { LogGroupName: subst(group), RetentionInDays: { Ref: 'LogRetentionDays' } },
	};
	resources[`${name}TaskDefinition`] = {
		Type: 'AWS::ECS::TaskDefinition',
		DependsOn: `${name}LogGroup`,
		// cdk-nag reads these next to the resource (deploy/check/nag.mjs)
		Metadata: {
			cdk_nag: {
				rules_to_suppress: [{
					id: 'AwsSolutions-ECS2',
					reason: 'environment holds the non-secret settings only; every secret comes from Secrets Manager through secrets (checked by deploy/check/check.mjs)',
				}],
			},
		},
		Properties: convert(td),
	};
	outputs[`${name}TaskDefinitionArn`] = { Value: { Ref: `${name}TaskDefinition` } };
	outputs[`${name}ContainerName`] = { Value: c.name };
	const concurrency = (c.environment || []).find((e) => e.name === 'PAYFLOW_CONCURRENCY');
	if (concurrency)
		outputs[`${name}Concurrency`] = { Description: 'PAYFLOW_CONCURRENCY: messages one task holds (autoscaling divides by it)', Value: concurrency.value };
	const port = (c.portMappings || [])[0];
	if (port)
		outputs[`${name}ContainerPort`] = { Value: String(port.containerPort) };
}
const parameters = {};
for (const n of [...placeholders].sort()) parameters[n] = parameterFor(n);
parameters.LogRetentionDays = {
	Type: 'Number', Default: 30,
	AllowedValues: [1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1827, 3653],
	ConstraintDescription: 'LogRetentionDays: one of the retention periods CloudWatch Logs offers (1, 3, 5, 7, 14, 30, ... days)',
};
const template = {
	AWSTemplateFormatVersion: '2010-09-09',
	Description: 'payflow task definitions and their log groups (generated from deploy/ecs/*.json by deploy/check/tasks-to-cfn.mjs)',
	Parameters: parameters,
	Resources: resources,
	Outputs: outputs,
};
const header = '# GENERATED by deploy/check/tasks-to-cfn.mjs from deploy/ecs/*.json: edit those, then run\n' +
	'#   node deploy/check/tasks-to-cfn.mjs\n' +
	'# (test/integration/deploy_artifacts.sh fails while this file differs from what it writes).\n' +
	'# A nested stack of payflow.yaml: one log group (kept when the stack goes) and one\n' +
	'# task definition per file; each ${Placeholder} of the files is a parameter here.\n';
const text = header + YAML.stringify(template, { lineWidth: 0, aliasDuplicateObjects: false })
	.replace(/^AWSTemplateFormatVersion: .*$/m, 'AWSTemplateFormatVersion: "2010-09-09"');
const target = path.join(root, 'deploy', 'aws', 'tasks.yaml');
if (checkOnly) {
	const now = fs.existsSync(target) ? fs.readFileSync(target, 'utf8') : '';
	if (now !== text) {
		console.log('not ok - deploy/aws/tasks.yaml is what deploy/check/tasks-to-cfn.mjs makes of deploy/ecs/*.json (run it)');
		process.exit(1);
	}
	console.log('ok - deploy/aws/tasks.yaml is what deploy/check/tasks-to-cfn.mjs makes of deploy/ecs/*.json');
} else {
	fs.writeFileSync(target, text);
	console.log(`wrote ${path.relative(root, target)}: ${files.length} task definitions`);
}
