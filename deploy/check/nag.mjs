// deploy/check/nag.mjs — cdk-nag's AwsSolutions rules over deploy/aws/*.yaml, offline.
//
//   node deploy/check/nag.mjs [repository root] [template...]   (PAYFLOW_DEPLOY_CHECK_MODULES=<dir>/node_modules)
//
// Each template is loaded into an empty CDK app with aws-cdk-lib's CfnInclude
// (parameters, conditions and the nested templates' resources as written),
// the app is synthesised in memory (nothing is deployed, no AWS account or
// credentials are asked for), and cdk-nag's AwsSolutionsChecks runs over
// every resource. A finding is fixed in the template, or suppressed beside
// its resource with a reason:
//
//   Metadata:
//     cdk_nag:
//       rules_to_suppress:
//         - id: AwsSolutions-IAM5
//           reason: why this is right here
//           applies_to: ["Resource::..."]    (optional: only these findings)
//
// One line per template, "ok - ..." or "not ok - ..." with each finding
// (rule, resource, what cdk-nag says); exit status 1 when any is left.
import fs from 'node:fs';
import path from 'node:path';
import os from 'node:os';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const args = process.argv.slice(2);
const root = path.resolve(args[0] || path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '..'));
const modules = path.resolve(process.env.PAYFLOW_DEPLOY_CHECK_MODULES || path.join(root, 'deploy', 'check', 'node_modules'));
const require = createRequire(path.join(modules, 'noop.js'));
const cdk = require('aws-cdk-lib');
const { CfnInclude } = require('aws-cdk-lib/cloudformation-include');
const { AwsSolutionsChecks } = require('cdk-nag');
const YAML = require('yaml');

const dir = path.join(root, 'deploy', 'aws');
const files = args.length > 1 ? args.slice(1) : fs.readdirSync(dir).filter((f) => /\.ya?ml$/.test(f)).sort();
let failed = 0;
for (const file of files) {
	const outdir = fs.mkdtempSync(path.join(os.tmpdir(), 'payflow-nag-'));
	const findings = [];
	try {
		const app = new cdk.App({ outdir, context: { 'aws:cdk:disable-version-reporting': true } });
		const stack = new cdk.Stack(app, path.basename(file, path.extname(file)).replace(/[^A-Za-z0-9]/g, ''), {
			synthesizer: new cdk.DefaultStackSynthesizer({ generateBootstrapVersionRule: false }),
		});
		const template = new CfnInclude(stack, 'Template', { templateFile: path.join(dir, file) });
		// the suppressions written beside each resource become cdk-nag acknowledgements
		const doc = template.template?.Resources ? template.template : null;
		for (const [id, r] of Object.entries((doc || YAML.parse(fs.readFileSync(path.join(dir, file), 'utf8'))).Resources || {}))
			for (const s of r.Metadata?.cdk_nag?.rules_to_suppress || []) {
				if (!s.reason || s.reason.trim().length < 20) throw new Error(`${id}: suppression of ${s.id} without a reason`);
				const ids = s.applies_to ? s.applies_to.map((a) => `${s.id}[${a}]`) : [s.id];
				for (const one of ids) cdk.Validations.of(template.getResource(id)).acknowledge({ id: `AwsSolutions::${one}`, reason: s.reason });
			}
		cdk.Validations.of(app).addPlugins(new AwsSolutionsChecks(app, { verbose: true }));
		const quiet = console.error;
		console.error = () => {};	// CDK prints each finding; the report below lists them once
		try {
			app.synth();
		} catch (e) {
			if (!/[Vv]alidation/.test(e.message)) throw e;
		} finally {
			console.error = quiet;
		}
		const report = path.join(outdir, 'validation-report.json');
		if (fs.existsSync(report)) {
			const r = JSON.parse(fs.readFileSync(report, 'utf8'));
			for (const plugin of (r.pluginReports || []).filter((x) => x.pluginName === 'AwsSolutions'))
				for (const v of plugin.violations || [])
					for (const res of v.violatingResources || v.violatingConstructs || [])
						findings.push(`${v.ruleName}: ${(res.constructPath || '').replace(/^[^/]+\/Template\//, '')}: ${String(v.description).split('. ')[0]}`);
		}
		} catch (e) {
		findings.push(`could not be loaded: ${e.message.split('\n')[0]}`);
	} finally {
		if (!process.env.NAG_KEEP) fs.rmSync(outdir, { recursive: true, force: true });
	}
	if (findings.length) {
		failed++;
		console.log(`not ok - cdk-nag AwsSolutions: deploy/aws/${file}: ${findings.length} finding(s)`);
		for (const f of findings) console.log(`    ${f}`);
	} else {
		console.log(`ok - cdk-nag AwsSolutions: deploy/aws/${file}: no finding left (suppressions carry their reason)`);
	}
}
process.exit(failed ? 1 : 0);
