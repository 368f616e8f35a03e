// test/browser/openapi.mjs — payflow's OpenAPI document as a contract:
// the document is checked against the OpenAPI 3.1 schema
// (@seriousme/openapi-schema-validator), and any response (method, path,
// status, headers, body) is checked against it with ajv: its status must
// be documented for that operation, its body must match the schema, and
// the headers the document declares (Location, Retry-After) must be there.
import { readFileSync } from 'node:fs';
import { Validator } from '@seriousme/openapi-schema-validator';
import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';

const BASE = 'https://payflow.invalid/openapi.json';

function pointer(...parts) {
	return parts.map((p) => String(p).replaceAll('~', '~0').replaceAll('/', '~1')).join('/');
}

export async function loadContract(file) {
	const doc = JSON.parse(readFileSync(file, 'utf8'));
	const validator = new Validator();
	const result = await validator.validate(doc);
	const ajv = new Ajv2020({ strict: false, allErrors: true });
	addFormats(ajv);
	ajv.addSchema({ ...doc, $id: BASE });
	// templates as regular expressions, the literal ones first
	const templates = Object.keys(doc.paths).map((t) => ({
		template: t,
		re: new RegExp(`^${t.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace(/\{[^}]+\}/g, '[^/]+')}$`),
		literal: !t.includes('{'),
	})).sort((a, b) => Number(b.literal) - Number(a.literal));

	function resolve(obj) {
		let o = obj;
		while (o && o.$ref) {
			o = o.$ref.slice(2).split('/').reduce((acc, k) => acc[k.replaceAll('~1', '/').replaceAll('~0', '~')], doc);
		}
		return o;
	}

	const METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'];
	const operations = Object.values(doc.paths).flatMap((item) => METHODS.filter((m) => item[m]).map((m) => item[m]));
	// Statuses every operation documents: the answers to a request refused
	// before it is routed (a malformed head, a body too large to read, an
	// HTTP version not served), which any path, documented or not, may get.
	const anyRequest = Object.keys(operations[0]?.responses || {})
		.filter((s) => /^[45]\d\d$/.test(s) && operations.every((op) => op.responses[s]));
	const errorSchema = ajv.getSchema(`${BASE}#/components/schemas/Error`);

	// The schema of a response's media type, as ajv knows it (the response may itself be a $ref).
	function mediaPath(op, template, m, responseKey, type) {
		return op.responses[responseKey].$ref
			? `${op.responses[responseKey].$ref}/content/${pointer(type)}`
			: `#/${pointer('paths', template, m, 'responses', responseKey, 'content', type)}`;
	}

	// A body that must be JSON matching VALIDATE.
	function checkJson(where, validate, body) {
		let value;
		try {
			value = JSON.parse(body);
		} catch {
			return [`${where}: the body is not JSON`];
		}
		return validate(value) ? [] : [`${where}: ${ajv.errorsText(validate.errors, { dataVar: 'body' })}`];
	}

	// A request that names no operation of the document: 404 for a path the
	// document does not have, 405 with Allow naming the documented methods
	// for one it has, or a refusal before routing; the body is an Error.
	function unrouted(where, m, bare, status, headers, body) {
		const item = templates.find((t) => t.re.test(bare));
		if (anyRequest.includes(String(status))) return [];	// checked by the caller against an operation's answer
		if (!item) {
			if (status !== 404) return [`${where}: no operation in the document, and the answer is not 404`];
		} else {
			const documented = METHODS.filter((x) => doc.paths[item.template][x]).map((x) => x.toUpperCase());
			if (documented.includes('GET')) documented.push('HEAD');
			if (status !== 405) return [`${where}: ${m.toUpperCase()} is not documented for ${item.template} (${documented.join(', ')}), and the answer is not 405`];
			const allow = String(headers.allow || '').split(',').map((x) => x.trim()).filter(Boolean).sort();
			if (allow.join(',') !== documented.sort().join(',')) return [`${where}: Allow "${headers.allow || ''}" is not the documented methods of ${item.template} (${documented.join(', ')})`];
		}
		if (String(headers['content-type'] || '').split(';')[0].trim() !== 'application/json') return [`${where}: the error is not application/json`];
		return checkJson(where, errorSchema, body);
	}

	// Each complete event of a text/event-stream body against the schema the
	// document gives its event name (x-payflow-events of the media type);
	// as in the EventSource algorithm, a block without data is no event.
	function checkEvents(where, eventsPath, events, body) {
		const problems = [];
		const complete = body.slice(0, body.lastIndexOf('\n\n') + 1);
		for (const block of complete.split(/\n\n/)) {
			const fields = {};
			for (const line of block.split('\n')) {
				if (line === '' || line.startsWith(':')) continue;
				const i = line.indexOf(':');
				const name = i < 0 ? line : line.slice(0, i);
				const value = i < 0 ? '' : line.slice(i + 1).replace(/^ /, '');
				fields[name] = fields[name] === undefined ? value : `${fields[name]}\n${value}`;
			}
			if (fields.data === undefined) continue;	// no event: "retry:" alone, or only comments
			const name = fields.event ?? 'message';
			if (!events[name]) {
				problems.push(`${where}: event "${name}" is not documented`);
				continue;
			}
			const validate = ajv.getSchema(`${BASE}${eventsPath}/${pointer(name)}`);
			problems.push(...checkJson(`${where} event ${name}${fields.id ? ` id ${fields.id}` : ''}`, validate, fields.data ?? ''));
		}
		return problems;
	}

	// Problems of one response, [] when it matches the document.
	function check({ method, path, status, headers = {}, body = '' }) {
		const m = method.toLowerCase() === 'head' ? 'get' : method.toLowerCase();
		const bare = path.split('?')[0];
		const where = `${method} ${path} -> ${status}`;
		let found = templates.find((t) => t.re.test(bare) && doc.paths[t.template][m]);
		if (!found) {
			const problems = unrouted(where, m, bare, status, headers, body);
			if (problems.length || !anyRequest.includes(String(status))) return problems;
			// a refusal before routing: as every operation documents it (the first one's)
			const [template, item] = Object.entries(doc.paths).find(([, it]) => METHODS.some((x) => it[x]));
			found = { template, m: METHODS.find((x) => item[x]) };
		}
		const om = found.m || m;
		const op = doc.paths[found.template][om];
		const responseKey = op.responses[String(status)] ? String(status) : op.responses.default ? 'default' : null;
		if (!responseKey) return [`${where}: status ${status} is not documented for ${om.toUpperCase()} ${found.template}`];
		const response = resolve(op.responses[responseKey]);
		const problems = [];
		for (const name of Object.keys(response.headers || {})) {
			const h = resolve(response.headers[name]);
			const value = headers[name.toLowerCase()];
			if (value === undefined) {
				if (h.required) problems.push(`${where}: header ${name} is missing`);
				continue;
			}
			if (h.schema && !ajv.validate(h.schema, value)) problems.push(`${where}: header ${name}=${value} ${ajv.errorsText()}`);
		}
		if (method.toLowerCase() === 'head' || !response.content) return problems;
		const type = String(headers['content-type'] || '').split(';')[0].trim();
		const media = response.content[type];
		if (!media) return [...problems, `${where}: content type "${type}" is not documented`];
		const base = mediaPath(op, found.template, om, responseKey, type);
		if (type === 'text/event-stream' && media['x-payflow-events']) {
			return [...problems, ...checkEvents(where, `${base}/x-payflow-events`, media['x-payflow-events'], body)];
		}
		if (type !== 'application/json') return problems;
		return [...problems, ...checkJson(where, ajv.getSchema(`${BASE}${base}/schema`), body)];
	}

	return { doc, valid: result.valid, documentErrors: result.errors, check };
}
