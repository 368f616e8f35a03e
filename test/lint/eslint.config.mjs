// make lint (test/lint.sh): eslint's recommended rules over payflow's
// JavaScript — the console that runs in the browser and the Node programs
// of the tests, fixtures and deploy checks.  Installed from
// test/lint/package-lock.json into .cache/lint.
import js from "@eslint/js";
import globals from "globals";

export default [
	{ ignores: ["**/vendor/**", "**/node_modules/**", ".cache/**"] },
	js.configs.recommended,
	{
		files: ["workers/console/**/*.js"],
		languageOptions: { sourceType: "script", globals: { ...globals.browser } },
	},
	{
		files: ["**/*.mjs"],
		languageOptions: { sourceType: "module", globals: { ...globals.node } },
	},
	{
		rules: {
			// an unused catch binding or a leading "_" says "deliberately unused"
			"no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_", caughtErrors: "none" }],
		},
	},
];
