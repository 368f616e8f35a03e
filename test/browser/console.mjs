/* global document -- used inside page.evaluate(), which runs in the browser */
// test/browser/console.mjs — the operator console in Debian's chromium
// (headless, through playwright-core), against a real payflow-api and
// PostgreSQL.  Run by test/integration/console_browser.sh:
//
//   node console.mjs BASE_URL OUT_DIR   (JSON on stdin: keys and operation ids)
//
// Prints TAP lines; every /admin/ and /openapi.json response the page gets
// is validated against the OpenAPI document; a page error, a CSP
// violation or an alert() (markup that ran) fails the run.  Worker steps
// are taken through payflow's SQL functions (psql, as a worker would).
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { chromium } from 'playwright-core';
import { loadContract } from './openapi.mjs';

const [base, out] = process.argv.slice(2);
const ctx = JSON.parse(readFileSync(0, 'utf8'));
const contract = await loadContract(ctx.openapi);
let failures = 0;
let n = 0;
const ok = (cond, name, detail = '') => {
	n++;
	if (!cond) failures++;
	console.log(`${cond ? 'ok' : 'not ok'} - ${name}${!cond && detail ? ` (${detail})` : ''}`);
};
const sql = (text) => execFileSync('psql', ['-XAtq', '-v', 'ON_ERROR_STOP=1', '-c', text], { encoding: 'utf8' }).trim();

const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', headless: true,
	args: ['--no-sandbox', '--disable-dev-shm-usage'] });
const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
const problems = [];
const contractProblems = [];
const pending = [];
page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
page.on('console', (m) => { if (/Content Security Policy|Refused to/i.test(m.text())) problems.push(`CSP: ${m.text()}`); });
page.on('dialog', async (d) => { problems.push(`a ${d.type()} dialog opened: ${d.message()}`); await d.dismiss(); });
page.on('response', (res) => {
	const url = new URL(res.url());
	if (!url.pathname.startsWith('/admin/') && url.pathname !== '/openapi.json') return;
	pending.push((async () => {
		const body = await res.text().catch(() => '');
		contractProblems.push(...contract.check({ method: res.request().method(), path: url.pathname + url.search,
			status: res.status(), headers: res.headers(), body }));
	})());
});
const shot = (name) => page.screenshot({ path: `${out}/${name}.png`, fullPage: true });

try {
	// ---- a tenant key cannot open the console, nor call the admin API
	await page.goto(`${base}/console/`);
	const keyField = page.getByLabel('API key');
	ok(await keyField.isVisible(), 'the sign-in form has a field labelled "API key"');
	await keyField.fill(ctx.tenantKey);
	await page.getByRole('button', { name: 'Sign in' }).click();
	const refusal = page.getByRole('alert');
	await refusal.waitFor();
	ok(/tenant API key/.test(await refusal.innerText()), 'a tenant key is refused with what it means', await refusal.innerText());
	ok(!(await page.getByRole('navigation', { name: 'Sections' }).isVisible()), '... and the console stays closed');
	ok(await keyField.evaluate((e) => e === document.activeElement), '... with the focus back on the key field');
	await shot('sign-in-refused');
	const direct = await page.request.get(`${base}/admin/operations`, { headers: { Authorization: `Bearer ${ctx.tenantKey}` } });
	ok(direct.status() === 403, 'the admin API answers a tenant key 403', String(direct.status()));
	contractProblems.push(...contract.check({ method: 'GET', path: '/admin/operations', status: direct.status(),
		headers: direct.headers(), body: await direct.text() }));

	// ---- sign in; the overview refreshes live
	await keyField.fill(ctx.adminKey);
	await page.getByRole('button', { name: 'Sign in' }).click();
	await page.getByRole('heading', { name: 'Overview' }).waitFor();
	ok(true, 'an admin key opens the overview');
	// the hour's and the day's charts come from two requests: wait for all four
	await page.waitForFunction(() => document.querySelectorAll('.chart canvas').length >= 4, null, { timeout: 20000 })
		.catch(() => {});
	ok((await page.locator('.chart canvas').count()) >= 4, 'four uPlot charts are drawn', String(await page.locator('.chart canvas').count()));
	await page.locator('.card[data-status="FAILED"]').first().waitFor({ timeout: 20000 }).catch(() => {});
	ok(await page.locator('.card[data-status="FAILED"]').count() >= 1, 'operations per status show the FAILED ones');
	await page.waitForFunction(() => Number(document.querySelector('[data-refreshes]')?.getAttribute('data-refreshes')) >= 2, null, { timeout: 15000 });
	ok(true, 'the overview refreshed itself');
	const breakerRow = page.locator('tr[data-step="CREATE_INVOICE"][data-breaker="CLOSED"][data-held="0"]');
	await breakerRow.first().waitFor({ timeout: 20000 }).catch(() => {});
	ok(await breakerRow.count() === 1, 'the overview shows the step with a limit and a circuit breaker: its state, none waiting');
	ok(await page.locator(`tr[data-tenant="${ctx.tenant}"][data-full="false"]`).count() === 1,
		'the overview shows the tenant\'s quota of open operations');
	await shot('overview');

	// ---- the list, filtered, then the FAILED operation
	await page.getByRole('link', { name: 'Operations' }).click();
	await page.getByLabel('Status').selectOption('FAILED');
	await page.getByLabel('Tenant').fill(ctx.tenant);
	await page.getByRole('button', { name: 'Filter' }).click();
	const link = page.getByRole('link', { name: ctx.failedOp });
	await link.waitFor();
	const row = page.getByRole('row').filter({ has: link });
	ok((await row.innerText()).includes(ctx.paymentId), 'the list shows the payment id with its markup as text', await row.innerText());
	await shot('operations');
	await link.click();
	await page.getByRole('heading', { name: `Operation ${ctx.failedOp}` }).waitFor();
	const timeline = page.getByRole('list', { name: 'Timeline' });
	await timeline.getByText('declined', { exact: false }).first().waitFor();
	const text = await timeline.innerText();
	ok(text.includes('attempt 1: RETRY_WAIT') && text.includes('timeout: no answer'), 'the timeline shows the first attempt and its error', text);
	ok(text.includes('attempt 2: FAILED') && text.includes(ctx.errorMessage), 'the timeline shows the failed attempt with its error, as text', text);
	ok(text.includes('worker-b'), 'the timeline names the worker of each attempt');
	ok(await page.locator('main script, main img').count() === 0, 'no markup of the payment id or the error became elements');
	ok(!(await page.content()).includes('secret-details'), 'the page shows no payment details');
	ok(await page.locator('[data-testid="operation-status"]').innerText() === 'FAILED', 'the operation is FAILED');
	ok(/^[0-9a-f]{32}$/.test(await page.locator('[data-testid="trace-id"]').innerText()),
		'the page names the operation\'s trace id (W3C)', await page.locator('[data-testid="trace-id"]').innerText());
	await shot('operation-failed');

	// ---- Replay, confirmed; a worker takes the steps; the page reaches COMPLETED
	await page.getByRole('button', { name: 'Replay' }).click();
	const dialog = page.getByRole('dialog');
	await dialog.waitFor({ timeout: 10000 }).catch(() => {});
	ok(await dialog.isVisible(), 'Replay asks for confirmation');
	await dialog.getByRole('button', { name: 'Confirm' }).click();
	await page.locator('[data-testid="operation-status"]', { hasText: 'PENDING' }).waitFor({ timeout: 10000 });
	ok(true, 'replayed: the operation is PENDING again');
	for (let i = 0; i < 3; i++) {
		sql(`SELECT payflow.claim_step(o.id, o.current_step, 'browser-worker')->>'action',
					payflow.complete_step(o.id, o.current_step, 'browser-worker', '{}')->>'status'
			   FROM payflow.operations o WHERE o.id = '${ctx.failedOp}'`);
	}
	await page.locator('[data-testid="operation-status"]', { hasText: 'COMPLETED' }).waitFor({ timeout: 15000 });
	ok(true, 'the page shows it reach COMPLETED');
	ok((await timeline.innerText()).includes(`by admin:${ctx.adminName}`), 'the replay is shown with the key\'s name as actor');
	await shot('operation-completed');

	// ---- Cancel after a worker started: the SQLSTATE's meaning, not a stack
	await page.goto(`${base}/console/operations/${ctx.pendingOp}`);
	await page.getByRole('button', { name: 'Cancel' }).waitFor();
	sql(`SELECT payflow.claim_step('${ctx.pendingOp}', 'PROCESS_PAYMENT', 'browser-worker')`);
	await page.getByRole('button', { name: 'Cancel' }).click();
	await page.getByRole('dialog').getByRole('button', { name: 'Confirm' }).click();
	const cancelError = page.getByRole('alert');
	await cancelError.waitFor();
	const said = await cancelError.innerText();
	ok(said.includes('A worker has already started this operation') && said.includes('PF001'), 'a cancel after a worker started shows what PF001 means', said);
	ok(!/at [a-z_]+ \(|Traceback|PL\/pgSQL/.test(said), '... and no stack or SQL');
	ok(sql(`SELECT status FROM payflow.operations WHERE id = '${ctx.pendingOp}'`) === 'PAYMENT_PROCESSING', '... and nothing changed');
	await shot('cancel-refused');

	// ---- a dead letter, replayed from its list
	await page.getByRole('link', { name: 'Dead letters' }).click();
	const replayOne = page.getByRole('button', { name: `Replay #${ctx.deadLetter}` });
	await replayOne.waitFor();
	await shot('dead-letters');
	await replayOne.click();
	await page.getByRole('dialog').getByRole('button', { name: 'Confirm' }).click();
	await replayOne.waitFor({ state: 'detached', timeout: 10000 });
	ok(true, 'the replayed dead letter leaves the open list');
	ok(sql(`SELECT status FROM payflow.operations WHERE id = '${ctx.deadLetterOp}'`) === 'PENDING', 'its operation runs again');
	await page.getByRole('link', { name: 'Webhook failures' }).click();
	await page.getByRole('heading', { name: 'Webhook failures' }).waitFor();
	await page.getByText(/open\.|Nothing open\./).waitFor();
	ok(true, 'the webhook failures page loads');
	await shot('webhook-failures');
	await page.getByRole('link', { name: 'Stuck' }).click();
	await page.getByRole('heading', { name: 'Stuck' }).waitFor();

	// ---- keyboard: the skip link and the navigation are reachable
	await page.keyboard.press('Tab');
	ok(await page.evaluate(() => document.activeElement?.textContent) === 'Skip to content', 'Tab reaches the skip link first');
} catch (e) {
	ok(false, 'the console run', e.stack || String(e));
	await shot('failure').catch(() => {});
}
await Promise.all(pending);
await browser.close();
ok(problems.length === 0, 'no page error, CSP violation or dialog', problems.join(' | '));
ok(contractProblems.length === 0, `every admin response the page got matches the OpenAPI document`, contractProblems.join(' | '));
console.log(`# ${n} checks, ${failures} failed`);
process.exit(failures ? 1 : 0);
