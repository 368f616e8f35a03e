// test/browser/openapi-check.mjs DOCUMENT [EXCHANGES_DIR]
// Checks the OpenAPI document, then every recorded exchange of a test:
// EXCHANGES_DIR/*.x, four lines each (method, path with query, the file of
// the answer's head as curl -D writes it, the file of its body), written by
// api_record (test/integration/api_common.bash) and api_abuse.sh's raw
// sockets. The status is the head's last status line (after a 100
// Continue); an exchange with no answer (a refused or dropped connection)
// is counted, not checked. Prints one line per problem and exits 1 when
// there is any.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadContract } from './openapi.mjs';

const [docFile, dir] = process.argv.slice(2);
const contract = await loadContract(docFile);
let problems = 0;
if (!contract.valid) {
	console.log(`the document is not valid OpenAPI 3.1: ${JSON.stringify(contract.documentErrors)}`);
	problems++;
}

// The last head in a curl -D file: its status and headers (names in lower case).
function parseHead(text) {
	const heads = text.split(/\r?\n\r?\n/).filter((h) => /^HTTP\/\S+ \d{3}/.test(h));
	if (heads.length === 0) return null;
	const [statusLine, ...lines] = heads[heads.length - 1].split(/\r?\n/);
	const headers = {};
	for (const line of lines) {
		const i = line.indexOf(':');
		if (i > 0) headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
	}
	return { status: Number(statusLine.split(' ')[1]), headers };
}

let checked = 0;
let unanswered = 0;
if (dir) {
	for (const f of readdirSync(dir).filter((n) => n.endsWith('.x')).sort()) {
		const [method, path, headFile, bodyFile] = readFileSync(join(dir, f), 'utf8').split('\n');
		const head = existsSync(headFile) ? parseHead(readFileSync(headFile, 'latin1')) : null;
		if (!head) {
			unanswered++;
			continue;
		}
		const body = existsSync(bodyFile) ? readFileSync(bodyFile, 'utf8') : '';
		for (const p of contract.check({ method, path, status: head.status, headers: head.headers, body })) {
			console.log(p);
			problems++;
		}
		checked++;
	}
}
console.log(`openapi: document ${contract.valid ? 'valid' : 'INVALID'}, ${checked} answers checked` +
	`${unanswered ? ` (${unanswered} requests got none)` : ''}, ${problems} problems`);
process.exit(problems ? 1 : 0);
