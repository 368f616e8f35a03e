// Turn the npm package's index.json back into AWS's directory layout, plus a
// config file with the credentials and scope the vectors were signed with.
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

const [indexPath, outDir] = process.argv.slice(2);
const suite = JSON.parse(readFileSync(indexPath, "utf8"));

mkdirSync(outDir, { recursive: true });
const c = suite.config;
writeFileSync(join(outDir, "config"),
	`region=${c.region}\nservice=${c.service}\naccessKeyId=${c.accessKeyId}\nsecretAccessKey=${c.secretAccessKey}\n`);

for (const t of suite.tests.all) {
	const dir = join(outDir, t.name);
	mkdirSync(dir, { recursive: true });
	for (const ext of ["req", "creq", "sts", "authz", "sreq"])
		writeFileSync(join(dir, `${t.name}.${ext}`), t[ext]);
}
