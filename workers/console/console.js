// payflow's operator console: one page, routed in the browser, over the
// admin API (/admin/…, an admin key as Bearer token).  Everything shown is
// set as text (textContent, never HTML), so a payment id or an error that
// holds markup is shown as written and never runs.  The key lives in
// sessionStorage: gone with the tab, never in a cookie, so no other site
// can make the browser act with it.

const KEY_ITEM = 'payflow.adminKey';
const main = document.getElementById('main');
const nav = document.getElementById('nav');
const live = document.getElementById('status');
let timers = [];

// What the API's error codes mean to an operator.
const MEANINGS = {
	PF001: 'A worker has already started this operation, so it can no longer be cancelled.',
	PF003: 'There is no such operation.',
	PF006: 'The operation has already ended.',
	PF009: 'This can only be done to a FAILED operation or an open dead letter (it may have been replayed already).',
	P0002: 'There is no such item.',
	unauthorized: 'The key is not a valid admin key (it may have been revoked).',
	forbidden: 'This is a tenant API key: only an admin key (pfa_…) can open the console.',
	invalid_parameter: 'A filter has a value that cannot be used.',
	unavailable: 'The database is unavailable; try again shortly.',
};

// ---- DOM helpers: text only

function el(tag, attrs = {}, ...children) {
	const node = document.createElement(tag);
	for (const [name, value] of Object.entries(attrs)) {
		if (value === undefined || value === null || value === false) continue;
		if (name.startsWith('on')) node.addEventListener(name.slice(2), value);
		else node.setAttribute(name, value === true ? '' : String(value));
	}
	for (const child of children.flat()) {
		if (child === undefined || child === null || child === false) continue;
		node.append(child instanceof Node ? child : document.createTextNode(String(child)));
	}
	return node;
}

function whenText(iso) {
	if (!iso) return '';
	const d = new Date(iso);
	return Number.isNaN(d.getTime()) ? String(iso) : d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}

function errorText(error) {
	if (!error || typeof error !== 'object') return '';
	return [error.code, error.message].filter((x) => typeof x === 'string' && x !== '').join(': ');
}

function announce(text) {
	live.textContent = text;
}

function page(title, ...children) {
	clearTimers();
	main.replaceChildren(el('h1', {}, title), ...children);
	document.title = `${title} · payflow console`;
	for (const a of nav.querySelectorAll('a')) {
		const here = a.getAttribute('href') === location.pathname
			|| (a.getAttribute('href') !== '/console/' && location.pathname.startsWith(a.getAttribute('href') + '/'));
		if (here) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
	}
	main.focus();
}

function clearTimers() {
	for (const t of timers) clearInterval(t);
	timers = [];
}

function every(ms, fn) {
	timers.push(setInterval(fn, ms));
}

// ---- the admin API

class ApiError extends Error {
	constructor(status, body) {
		const e = body && body.error ? body.error : {};
		super(e.message || `HTTP ${status}`);
		this.status = status;
		this.code = e.code || String(status);
		this.parameter = e.parameter;
	}
}

async function api(path, { method = 'GET', body, key = sessionStorage.getItem(KEY_ITEM) } = {}) {
	const headers = { Authorization: `Bearer ${key || ''}` };
	if (body !== undefined) headers['Content-Type'] = 'application/json';
	const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
	let doc = null;
	try { doc = await res.json(); } catch { doc = null; }
	if (!res.ok) {
		const err = new ApiError(res.status, doc);
		if ((res.status === 401 || res.status === 403) && path !== '/admin/whoami') signOut(err);
		throw err;
	}
	return doc;
}

function errorBox(err) {
	const meaning = MEANINGS[err.code];
	return el('div', { class: 'error', role: 'alert' },
		meaning ? el('p', {}, meaning) : null,
		el('p', {}, err.parameter ? `${err.parameter}: ` : '', err.message, ` (${err.code})`));
}

function confirmDialog(title, text) {
	const dialog = document.getElementById('confirm');
	document.getElementById('confirm-title').textContent = title;
	document.getElementById('confirm-text').textContent = text;
	const opener = document.activeElement;
	return new Promise((resolve) => {
		dialog.addEventListener('close', () => {
			if (opener && opener.focus) opener.focus();
			resolve(dialog.returnValue === 'ok');
		}, { once: true });
		dialog.returnValue = '';
		dialog.showModal();
		document.getElementById('confirm-ok').focus();
	});
}

// ---- sign-in

function signOut(err) {
	sessionStorage.removeItem(KEY_ITEM);
	nav.hidden = true;
	signIn(err);
}

function signIn(err) {
	nav.hidden = true;
	const input = el('input', { id: 'api-key', name: 'api-key', type: 'password', autocomplete: 'off', required: true,
		spellcheck: 'false', 'aria-describedby': 'api-key-help' });
	const message = el('div', { 'aria-live': 'assertive' }, err ? errorBox(err) : null);
	const form = el('form', { class: 'signin', onsubmit: async (event) => {
		event.preventDefault();
		const key = input.value.trim();
		try {
			await api('/admin/whoami', { key });
			sessionStorage.setItem(KEY_ITEM, key);
			input.value = '';
			nav.hidden = false;
			route();
		} catch (e) {
			message.replaceChildren(errorBox(e));
			input.focus();
		}
	} },
	el('label', { for: 'api-key' }, 'API key'),
	input,
	el('p', { id: 'api-key-help', class: 'note' }, 'An admin key (pfa_…) made with payflow.create_admin_key(). It is kept in this tab only.'),
	el('button', { type: 'submit' }, 'Sign in'),
	message);
	page('Sign in', form);
	input.focus();
}

// ---- overview: operations per status, throughput and failure rate

function overview() {
	const cards = el('div', { class: 'cards', role: 'group', 'aria-label': 'Operations per status' });
	const updated = el('p', { class: 'note' });
	const hourChart = el('div', { class: 'chart', role: 'img', 'aria-label': 'Operations ended per minute over the last hour' });
	const dayChart = el('div', { class: 'chart', role: 'img', 'aria-label': 'Operations ended per 15 minutes over the last day' });
	const failHour = el('div', { class: 'chart', role: 'img', 'aria-label': 'Failure rate per minute over the last hour' });
	const failDay = el('div', { class: 'chart', role: 'img', 'aria-label': 'Failure rate per 15 minutes over the last day' });
	const tables = el('div');
	const problem = el('div');
	page('Overview', problem, el('h2', {}, 'Operations per status'), cards, updated,
		el('h2', {}, 'Throughput and failure rate'),
		el('div', { class: 'charts' },
			el('figure', {}, el('figcaption', {}, 'Last hour: operations ended per minute'), hourChart),
			el('figure', {}, el('figcaption', {}, 'Last hour: failure rate'), failHour),
			el('figure', {}, el('figcaption', {}, 'Last day: operations ended per 15 minutes'), dayChart),
			el('figure', {}, el('figcaption', {}, 'Last day: failure rate'), failDay)),
		tables);
	const plots = {};

	function draw(target, span, doc, kind) {
		const xs = doc.buckets.map((b) => Date.parse(b.at) / 1000);
		let series;
		let data;
		if (kind === 'throughput') {
			series = [{}, { label: 'completed', stroke: '#116329', width: 2 }, { label: 'failed', stroke: '#a40e26', width: 2 },
				{ label: 'cancelled', stroke: '#57606a', width: 1 }];
			data = [xs, doc.buckets.map((b) => b.completed), doc.buckets.map((b) => b.failed), doc.buckets.map((b) => b.cancelled)];
		} else {
			series = [{}, { label: 'failure rate %', stroke: '#a40e26', width: 2 }];
			data = [xs, doc.buckets.map((b) => (b.completed + b.failed ? (100 * b.failed) / (b.completed + b.failed) : 0))];
		}
		const key = `${span}-${kind}`;
		target.setAttribute('data-points', String(xs.length));
		target.setAttribute('data-updated', doc.buckets.length ? doc.buckets[doc.buckets.length - 1].at : '');
		if (plots[key] && plots[key].series.length === series.length) {
			plots[key].setData(data);
			return;
		}
		if (typeof globalThis.uPlot !== 'function') return;
		target.replaceChildren();
		plots[key] = new globalThis.uPlot({ width: Math.max(target.clientWidth - 16, 320), height: 200, series,
			scales: kind === 'rate' ? { y: { range: [0, 100] } } : {} }, data, target);
	}

	function statusCards(now) {
		const active = now.operations || {};
		const finished = now.finishedLastHour || {};
		const items = [];
		for (const [status, v] of Object.entries(active)) items.push([status, v.count, 'now']);
		for (const [status, n] of Object.entries(finished)) items.push([status, n, 'ended in the last hour']);
		if (!items.length) items.push(['no operations', 0, 'in flight or ended in the last hour']);
		cards.replaceChildren(...items.map(([status, n, what]) => el('div', { class: 'card', 'data-status': status },
			el('div', { class: 'n' }, n), el('div', {}, status), el('div', { class: 'note' }, what))));
		tables.replaceChildren(
			el('h2', {}, 'Queues and failures'),
			el('table', {}, el('tbody', {},
				el('tr', {}, el('th', { scope: 'row' }, 'Outbox backlog'), el('td', { class: 'num' }, now.outbox ? now.outbox.backlog : 0)),
				el('tr', {}, el('th', { scope: 'row' }, 'Failure rate, last hour'), el('td', { class: 'num' }, `${((now.failureRateLastHour || 0) * 100).toFixed(1)} %`)),
				el('tr', {}, el('th', { scope: 'row' }, 'Open dead letters'), el('td', { class: 'num' }, now.deadLetters ? now.deadLetters.open : 0)),
				el('tr', {}, el('th', { scope: 'row' }, 'Open webhook failures'), el('td', { class: 'num' }, now.webhookFailures ? now.webhookFailures.open : 0)))),
			...guardedSteps(now.steps || {}), ...quotas(now.tenantQuotas || []));
	}

	// The tenants with a quota of open operations (set_tenant_quota): past it, POST /payments answers 429.
	function quotas(list) {
		if (!list.length) return [];
		return [el('h2', {}, 'Tenant quotas'),
			el('table', { 'aria-label': 'Tenant quotas' },
				el('thead', {}, el('tr', {}, ['Tenant', 'Open', 'Quota', 'Counted'].map((h) => el('th', { scope: 'col' }, h)))),
				el('tbody', {}, ...list.map((q) => el('tr', { 'data-tenant': q.tenant, 'data-full': String(q.openNow >= q.maxOpen) },
					el('td', {}, q.tenant), el('td', { class: q.openNow >= q.maxOpen ? 'num step-error' : 'num' }, q.openNow),
					el('td', { class: 'num' }, q.maxOpen), el('td', {}, whenText(q.countedAt))))))];
	}

	// The steps under a limit or a circuit breaker (set_step_limit, set_step_breaker):
	// what runs against the limit, what waits for a slot of it (held in the
	// database: step_dispatch.sql), and the breaker's state since when.
	function guardedSteps(steps) {
		const rows = Object.entries(steps).filter(([, v]) => v.limit || v.breaker);
		if (!rows.length) return [];
		return [el('h2', {}, 'Step limits and breakers'),
			el('table', { 'aria-label': 'Step limits and breakers' },
				el('thead', {}, el('tr', {}, ['Step', 'Running', 'Limit', 'Waiting', 'Breaker', 'Since', 'Opened'].map((h) => el('th', { scope: 'col' }, h)))),
				el('tbody', {}, ...rows.map(([step, v]) => el('tr', { 'data-step': step, 'data-breaker': v.breaker ? v.breaker.state : '',
					'data-held': v.limit ? String(v.limit.held ?? 0) : '' },
					el('td', {}, step), el('td', { class: 'num' }, v.running ?? 0),
					el('td', { class: 'num' }, v.limit ? String(v.limit.maxRunning) : ''),
					el('td', { class: 'num' }, v.limit ? String(v.limit.held ?? 0) : ''),
					el('td', { class: v.breaker && v.breaker.state !== 'CLOSED' ? 'step-error' : '' }, v.breaker ? v.breaker.state : ''),
					el('td', {}, v.breaker ? whenText(v.breaker.changedAt) : ''),
					el('td', { class: 'num' }, v.breaker ? String(v.breaker.openedTotal) : '')))))];
	}

	async function refresh(withDay) {
		try {
			const hour = await api('/admin/metrics?window=hour');
			statusCards(hour.now);
			draw(hourChart, 'hour', hour, 'throughput');
			draw(failHour, 'hour', hour, 'rate');
			if (withDay) {
				const day = await api('/admin/metrics?window=day');
				draw(dayChart, 'day', day, 'throughput');
				draw(failDay, 'day', day, 'rate');
			}
			problem.replaceChildren();
			updated.textContent = `Updated ${whenText(new Date().toISOString())}; refreshes every 5 seconds.`;
			updated.setAttribute('data-refreshes', String(Number(updated.getAttribute('data-refreshes') || 0) + 1));
		} catch (e) {
			problem.replaceChildren(errorBox(e));
		}
	}
	refresh(true);
	let ticks = 0;
	every(5000, () => refresh(++ticks % 12 === 0));
}

// ---- operations list

const STATUSES = ['', 'PENDING', 'PAYMENT_PROCESSING', 'PAYMENT_COMPLETED', 'POST_PROCESSING', 'INVOICE_PENDING',
	'COMPLETED', 'FAILED', 'CANCELLED'];
const STEPS = ['', 'PROCESS_PAYMENT', 'POST_PROCESS', 'CREATE_INVOICE'];

function field(id, label, control) {
	control.id = id;
	control.name = id;
	return el('div', {}, el('label', { for: id }, label), control);
}

function operationLink(id) {
	return el('a', { href: `/console/operations/${encodeURIComponent(id)}`, class: 'mono' }, id);
}

function operationsList() {
	const params = new URLSearchParams(location.search);
	const select = (options, value) => el('select', {}, options.map((o) => el('option', { value: o, selected: o === value }, o || 'any')));
	const text = (value, placeholder) => el('input', { type: 'text', value: value || '', placeholder });
	const form = el('form', { class: 'filters', role: 'search', 'aria-label': 'Filter operations', onsubmit: (event) => {
		event.preventDefault();
		const q = new URLSearchParams();
		for (const [k, v] of new FormData(form)) if (v) q.set(k, String(v));
		navigate(`/console/operations${q.toString() ? `?${q}` : ''}`);
	} },
	field('status', 'Status', select(STATUSES, params.get('status'))),
	field('tenant', 'Tenant', text(params.get('tenant'))),
	field('paymentId', 'Payment id', text(params.get('paymentId'))),
	field('createdFrom', 'Created from', text(params.get('createdFrom'), '2025-01-31T00:00:00Z')),
	field('createdTo', 'Created before', text(params.get('createdTo'), '2025-02-01')),
	field('step', 'Step', select(STEPS, params.get('step'))),
	field('errorCode', 'Error code', text(params.get('errorCode'))),
	el('div', {}, el('button', { type: 'submit' }, 'Filter')));
	const body = el('tbody');
	const table = el('table', { 'aria-label': 'Operations' }, el('thead', {}, el('tr', {},
		['Operation', 'Payment id', 'Tenant', 'Status', 'Step', 'Error', 'Created'].map((h) => el('th', { scope: 'col' }, h)))), body);
	const more = el('div');
	const problem = el('div');
	page('Operations', form, problem, table, more);

	async function load(after) {
		const q = new URLSearchParams(params);
		q.set('limit', '50');
		if (after) q.set('after', after);
		try {
			const doc = await api(`/admin/operations?${q}`);
			for (const o of doc.items) {
				body.append(el('tr', {},
					el('td', {}, operationLink(o.operationId)),
					el('td', { class: 'mono' }, o.paymentId),
					el('td', {}, o.tenant),
					el('td', { class: `status-${o.status}` }, o.status),
					el('td', {}, o.currentStep),
					el('td', {}, errorText(o.error)),
					el('td', {}, whenText(o.createdAt))));
			}
			more.replaceChildren(...[
				el('p', { class: 'note' }, `${body.children.length} shown; ${doc.scanned} operations read for this page.`),
				doc.next ? el('button', { type: 'button', class: 'secondary', onclick: () => load(doc.next) }, 'Load more') : null,
			].filter(Boolean));
			announce(`${body.children.length} operations shown`);
		} catch (e) {
			problem.replaceChildren(errorBox(e));
		}
	}
	load(null);
}

// ---- one operation: summary, actions, timeline

function operationPage(id) {
	const summary = el('dl', { class: 'summary' });
	const actions = el('div', { class: 'actions' });
	const problem = el('div', { 'aria-live': 'assertive' });
	const timeline = el('ol', { class: 'timeline', 'aria-label': 'Timeline' });
	const steps = el('tbody');
	const events = el('tbody');
	const payloads = el('tbody');
	page(`Operation ${id}`, problem, summary, actions,
		el('h2', {}, 'Timeline'), timeline,
		el('h2', {}, 'Steps'), el('table', { 'aria-label': 'Steps' }, el('thead', {}, el('tr', {},
			['Step', 'Status', 'Attempt', 'Worker', 'Last error', 'Next attempt'].map((h) => el('th', { scope: 'col' }, h)))), steps),
		el('h2', {}, 'Events'), el('table', { 'aria-label': 'Events' }, el('thead', {}, el('tr', {},
			['Event', 'Destination', 'SQS message id', 'Published'].map((h) => el('th', { scope: 'col' }, h)))), events),
		el('h2', {}, 'Payload references'), el('p', { class: 'note' }, 'References and checksums only: the console never shows payment details.'),
		el('table', { 'aria-label': 'Payload references' }, el('thead', {}, el('tr', {},
			['Key', 'Checksum', 'Bytes'].map((h) => el('th', { scope: 'col' }, h)))), payloads));
	let last = '';

	async function act(kind) {
		const replay = kind === 'replay';
		const ok = await confirmDialog(replay ? 'Replay this operation?' : 'Cancel this operation?',
			replay ? `Operation ${id} runs again from its failed step, with the same idempotency key.`
				: `Operation ${id} will be CANCELLED and no worker will run it.`);
		if (!ok) return;
		try {
			const doc = await api(`/admin/operations/${encodeURIComponent(id)}/${kind}`, { method: 'POST', body: {} });
			announce(replay ? `Replayed: now ${doc.status}` : `Cancelled: now ${doc.status}`);
			problem.replaceChildren();
			await refresh();
		} catch (e) {
			problem.replaceChildren(errorBox(e));
		}
	}

	function render(o) {
		summary.replaceChildren(...[
			['Status', el('span', { class: `status-${o.status}`, 'data-testid': 'operation-status' }, o.status)],
			['Payment id', el('span', { class: 'mono' }, o.paymentId)],
			['Tenant', o.tenant], ['Current step', o.currentStep], ['Error', errorText(o.error)],
			['Correlation id', o.correlationId || ''], ['Idempotency key', el('span', { class: 'mono' }, o.idempotencyKey)],
			['Trace id', el('span', { class: 'mono', 'data-testid': 'trace-id' }, o.traceId || '')],
			['Created', whenText(o.createdAt)], ['Updated', whenText(o.updatedAt)], ['Ended', whenText(o.completedAt)],
		].flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, v)]));
		actions.replaceChildren(...[
			o.actions.replay ? el('button', { type: 'button', class: 'danger', onclick: () => act('replay') }, 'Replay') : null,
			o.actions.cancel ? el('button', { type: 'button', class: 'danger', onclick: () => act('cancel') }, 'Cancel') : null,
		].filter(Boolean));
		const items = [
			...o.transitions.map((t) => ({ at: t.at, order: 0, cls: t.to === 'FAILED' ? 'failed' : t.to === 'COMPLETED' ? 'ok' : '',
				parts: [el('strong', {}, `${t.from || '—'} → ${t.to}`), ` ${t.reason || ''}`, el('span', { class: 'note' }, ` by ${t.actor}`)] })),
			...o.attempts.map((a) => ({ at: a.finishedAt, order: 1, cls: a.error ? 'failed' : a.outcome === 'SUCCEEDED' ? 'ok' : '',
				parts: [el('strong', {}, `${a.step} attempt ${a.attempt}: ${a.outcome}`),
					el('span', { class: 'note' }, ` on ${a.worker || 'unknown worker'}, started ${whenText(a.startedAt)}`),
					a.error ? el('div', { class: 'step-error' }, errorText(a.error)) : null] })),
		].sort((x, y) => (x.at < y.at ? -1 : x.at > y.at ? 1 : x.order - y.order));
		timeline.replaceChildren(...items.map((i) => el('li', { class: i.cls }, el('span', { class: 'when' }, whenText(i.at)), ...i.parts)));
		steps.replaceChildren(...o.steps.map((s) => el('tr', {},
			el('td', {}, s.step), el('td', {}, s.status), el('td', { class: 'num' }, s.attempt), el('td', {}, s.worker || ''),
			el('td', { class: 'step-error' }, errorText(s.lastError)), el('td', {}, whenText(s.nextAttemptAt)))));
		events.replaceChildren(...o.events.map((e) => el('tr', {},
			el('td', {}, e.eventType), el('td', {}, e.destination), el('td', { class: 'mono' }, e.messageId || 'not yet published'),
			el('td', {}, whenText(e.publishedAt)))));
		payloads.replaceChildren(...o.payloads.map((p) => el('tr', {},
			el('td', { class: 'mono' }, p.key), el('td', { class: 'mono' }, p.checksum), el('td', { class: 'num' }, p.size))));
	}

	async function refresh() {
		try {
			const o = await api(`/admin/operations/${encodeURIComponent(id)}`);
			const text = JSON.stringify(o);
			if (text !== last) {
				last = text;
				render(o);
				announce(`Operation ${o.status}`);
			}
		} catch (e) {
			problem.replaceChildren(errorBox(e));
		}
	}
	refresh();
	every(2000, refresh);
}

// ---- dead letters and webhook failures, with replay of one or many

function replayList(title, path, columns, row) {
	const body = el('tbody');
	const problem = el('div', { 'aria-live': 'assertive' });
	const note = el('p', { class: 'note' });
	const replaySelected = el('button', { type: 'button', onclick: () => replay([...body.querySelectorAll('input:checked')].map((c) => Number(c.value))) }, 'Replay selected');
	page(title, problem, el('div', { class: 'actions' }, replaySelected), note,
		el('table', { 'aria-label': title }, el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, el('span', { class: 'visually-hidden' }, 'Select')),
			columns.map((h) => el('th', { scope: 'col' }, h)), el('th', { scope: 'col' }, 'Action'))), body));

	async function replay(ids) {
		if (!ids.length) {
			problem.replaceChildren(el('div', { class: 'error', role: 'alert' }, 'Select at least one row to replay.'));
			return;
		}
		if (!(await confirmDialog(`Replay ${ids.length === 1 ? 'this item' : `${ids.length} items`}?`,
			'Each is sent again; the ones that cannot be replayed are reported one by one.'))) return;
		try {
			const doc = await api(`${path}/replay`, { method: 'POST', body: { ids } });
			const failed = doc.results.filter((r) => !r.replayed);
			problem.replaceChildren(...failed.map((r) => errorBox({ code: r.code, message: `#${r.id}: ${r.message}` })));
			announce(`${doc.results.length - failed.length} replayed, ${failed.length} not`);
			await load();
		} catch (e) {
			problem.replaceChildren(errorBox(e));
		}
	}

	async function load() {
		try {
			const doc = await api(`${path}?open=true&limit=200`);
			body.replaceChildren(...doc.items.map((item) => el('tr', {},
				el('td', {}, el('input', { type: 'checkbox', value: item.id, 'aria-label': `Select #${item.id}` })),
				row(item).map((cell) => el('td', {}, cell)),
				el('td', {}, el('button', { type: 'button', class: 'secondary', 'aria-label': `Replay #${item.id}`, onclick: () => replay([item.id]) }, 'Replay')))));
			note.textContent = doc.items.length ? `${doc.items.length} open.` : 'Nothing open.';
		} catch (e) {
			problem.replaceChildren(errorBox(e));
		}
	}
	load();
}

function deadLetters() {
	replayList('Dead letters', '/admin/dead-letters', ['#', 'Operation', 'Step', 'Source', 'Error', 'Attempts', 'Created', 'Trace'], (d) => [
		String(d.id), d.operationId ? operationLink(d.operationId) : d.queue || '', d.step || '', d.source,
		el('span', { class: 'step-error' }, errorText(d.error)), String(d.attempts ?? ''), whenText(d.createdAt),
		el('span', { class: 'mono' }, d.traceId || '')]);
}

function webhookFailures() {
	replayList('Webhook failures', '/admin/webhook-failures', ['#', 'Operation', 'Event', 'Tenant', 'URL', 'Error', 'Attempts', 'Last failure'], (w) => [
		String(w.id), operationLink(w.operationId), w.eventType || '', w.tenant, el('span', { class: 'mono' }, w.url),
		el('span', { class: 'step-error' }, errorText(w.error)), String(w.attempts), whenText(w.updatedAt)]);
}

function stuck() {
	const body = el('tbody');
	const problem = el('div');
	const note = el('p', { class: 'note' });
	page('Stuck', note, problem, el('table', { 'aria-label': 'Stuck steps' }, el('thead', {}, el('tr', {},
		['Operation', 'Step', 'Why', 'Since', 'Worker', 'Operation status'].map((h) => el('th', { scope: 'col' }, h)))), body));
	api('/admin/stuck').then((doc) => {
		note.textContent = `Steps past their lease, PENDING for more than ${doc.stuckAfterSeconds} s, or retries over a minute late. The scheduler re-drives them; these have not moved yet.`;
		body.replaceChildren(...doc.items.map((s) => el('tr', {}, el('td', {}, operationLink(s.operationId)), el('td', {}, s.step),
			el('td', {}, s.reason), el('td', {}, whenText(s.since)), el('td', {}, s.worker || ''), el('td', {}, s.operationStatus))));
	}, (e) => problem.replaceChildren(errorBox(e)));
}

// ---- routing

function navigate(href) {
	history.pushState(null, '', href);
	route();
}

function route() {
	if (!sessionStorage.getItem(KEY_ITEM)) {
		signIn();
		return;
	}
	nav.hidden = false;
	const path = location.pathname.replace(/\/+$/, '') || '/console';
	const op = path.match(/^\/console\/operations\/([^/]+)$/);
	if (op) operationPage(decodeURIComponent(op[1]));
	else if (path === '/console/operations') operationsList();
	else if (path === '/console/dead-letters') deadLetters();
	else if (path === '/console/webhook-failures') webhookFailures();
	else if (path === '/console/stuck') stuck();
	else overview();
}

document.addEventListener('click', (event) => {
	const a = event.target.closest && event.target.closest('a[href^="/console"]');
	if (!a || event.ctrlKey || event.metaKey || event.shiftKey || event.button !== 0) return;
	event.preventDefault();
	navigate(a.getAttribute('href'));
});
window.addEventListener('popstate', route);
document.getElementById('sign-out').addEventListener('click', () => signOut());
route();
