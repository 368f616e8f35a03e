// A SigV4-checking front for fauxqs, which checks no signatures itself.
//
// Every request has its AWS Signature Version 4 recomputed with the smithy
// signer (@smithy/signature-v4, the one the AWS SDK for JavaScript uses) and
// the known test credentials. A request that fails is answered the way AWS
// answers it (SQS JSON, SQS query or S3 XML error shape) and logged in one
// line on stderr; a request that passes is proxied unchanged to fauxqs, its
// body and the response streamed.
//
// Beyond the signature it checks what real AWS checks and a local emulator
// would otherwise let slip: the request date (15 minutes either way), the
// credential scope (region, service, date), that S3 requests sign host and
// every x-amz-* header, and, for S3 bodies, the declared
// x-amz-content-sha256, Content-MD5 and x-amz-checksum-{crc32,sha1,sha256}.
// Not checked: the per-chunk signatures of STREAMING-AWS4-HMAC-SHA256-PAYLOAD
// bodies (the seed signature is), SigV4a, and session tokens (any
// x-amz-security-token is accepted if it is signed).
//
// Unsigned paths: GET /_front/health (this front and fauxqs are up) and
// GET /_fauxqs/... (fauxqs's queue inspection). Neither can clash with S3:
// bucket names never start with "_". Two more for tests of ordering, which
// only a network can upset:
//   POST /_front/hold {"action":"ChangeMessageVisibilityBatch","ms":3000,"count":1}
//       the next `count` SQS calls of that action wait `ms` before going on
//       (a slow network: a call sent first can now arrive last); S3 calls
//       are named by their method: {"action":"S3 PUT",...} is a slow S3
//   GET /_front/visibility?since=<epoch ms>
//       every visibility change forwarded to fauxqs since then, in the order
//       it got them: [{"receipt","seconds","arrivedAt","heldMs"}]
// Two for tests of partial batch failures, which fauxqs never produces:
//   POST /_front/refuse {"action":"SendMessageBatch","match":"poison","code":"InvalidMessageContents",
//                        "message":"...","senderFault":true,"count":1}
//       the next `count` entries of SQS JSON batch calls of that action
//       (SendMessageBatch, DeleteMessageBatch, ChangeMessageVisibilityBatch)
//       whose MessageBody (Send) or ReceiptHandle or Id (the others) contains
//       `match` ("" matches any) are kept from fauxqs and answered as
//       Failed entries with that code; count 0 clears the rule, and a rule
//       with the same action and match replaces the earlier one
//   GET /_front/refused
//       every entry refused so far: [{"action","id","code","senderFault","at"}]
// And one for benchmarks, which count what a workload costs in requests:
//   GET /_front/calls
//       the requests forwarded to fauxqs since the front started, by SQS
//       action or S3 method: {"SendMessageBatch": 12, "S3 PUT": 3, ...}

import http from "node:http";
import { createHash, randomUUID, timingSafeEqual } from "node:crypto";
import { crc32 } from "node:zlib";
import { config, requireFromCache } from "./emulator-config.mjs";

const { SignatureV4, createScope, getCanonicalHeaders } = requireFromCache("@smithy/signature-v4");
const { Sha256 } = requireFromCache("@aws-crypto/sha256-js");

const ALGORITHM = "AWS4-HMAC-SHA256";
const MAX_SKEW_MS = 15 * 60 * 1000;
const MAX_PRESIGNED_EXPIRES = 7 * 24 * 3600;
// SQS bodies are read whole (their hash is part of the signature); SQS caps a
// request at 1 MiB of messages, so this leaves room for JSON overhead.
const MAX_BUFFERED_BODY = 4 * 1024 * 1024;
const S3_PAYLOAD_KEYWORDS = new Set([
	"UNSIGNED-PAYLOAD",
	"STREAMING-UNSIGNED-PAYLOAD-TRAILER",
	"STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
	"STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER",
]);
const QUERY_SERVICES = new Set(["sqs", "sns", "sts"]);
// Connection-level headers are the proxy's own business on each hop.
const HOP_BY_HOP = new Set(["connection", "keep-alive", "transfer-encoding", "upgrade", "expect", "proxy-connection"]);

const credentials = { accessKeyId: config.accessKeyId, secretAccessKey: config.secretAccessKey };
const signers = new Map();
// No socket cap: every worker's long poll holds an upstream connection.
const upstreamAgent = new http.Agent({ keepAlive: true });

function signerFor(service) {
	let signer = signers.get(service);
	if (!signer) {
		// S3 signs the path as sent; every other service URI-encodes it again.
		signer = new SignatureV4({
			credentials,
			region: config.region,
			service,
			sha256: Sha256,
			uriEscapePath: service !== "s3",
			applyChecksum: false,
		});
		signers.set(service, signer);
	}
	return signer;
}

/* ---- errors, in the shapes AWS uses ---- */

// How each kind of rejection looks to an SQS JSON client (coral __type plus
// the x-amzn-query-error header that awsQueryCompatible SDKs read the code
// from), to an SQS/SNS query client, and to an S3 client. Status and codes are
// those real SQS and S3 return, e.g. SQS answers a bad signature with 403,
// __type com.amazon.coral.service#InvalidSignatureException and
// x-amzn-query-error SignatureDoesNotMatch;Sender.
const ERROR_KINDS = {
	signature: {
		status: 403,
		type: "com.amazon.coral.service#InvalidSignatureException",
		code: "SignatureDoesNotMatch",
		s3: { status: 403, code: "SignatureDoesNotMatch" },
	},
	expired: {
		status: 403,
		type: "com.amazon.coral.service#InvalidSignatureException",
		code: "SignatureDoesNotMatch",
		s3: { status: 403, code: "RequestTimeTooSkewed" },
	},
	unknownKey: {
		status: 403,
		type: "com.amazon.coral.service#UnrecognizedClientException",
		code: "InvalidClientTokenId",
		s3: { status: 403, code: "InvalidAccessKeyId" },
	},
	missingAuth: {
		status: 403,
		type: "com.amazon.coral.service#MissingAuthenticationTokenException",
		code: "MissingAuthenticationToken",
		s3: { status: 403, code: "AccessDenied" },
	},
	malformed: {
		status: 400,
		type: "com.amazon.coral.service#IncompleteSignatureException",
		code: "IncompleteSignature",
		s3: { status: 400, code: "AuthorizationHeaderMalformed" },
	},
	tooLarge: {
		status: 413,
		type: "com.amazon.coral.service#RequestEntityTooLargeException",
		code: "RequestEntityTooLarge",
		s3: { status: 400, code: "EntityTooLarge" },
	},
	unavailable: {
		status: 503,
		type: "com.amazon.coral.availability#ServiceUnavailableException",
		code: "ServiceUnavailable",
		fault: "Receiver",
		s3: { status: 503, code: "ServiceUnavailable" },
	},
};

const SIGNATURE_MESSAGE = "The request signature we calculated does not match the signature you provided. " +
	"Check your AWS Secret Access Key and signing method. Consult the service documentation for details.";
const S3_SIGNATURE_MESSAGE = "The request signature we calculated does not match the signature you provided. " +
	"Check your key and signing method.";

// A rejection: kind names a row of ERROR_KINDS; s3 overrides the S3 code,
// status, message or extra <Error> fields where S3 says something else.
function rejection(kind, message, s3 = {}) {
	return { kind, message, s3 };
}

// An S3-only rejection (payload checks and the like).
function s3Rejection(status, code, message, fields = {}) {
	return { kind: "signature", message, s3: { status, code, message, fields } };
}

const XML_ENTITIES = { "<": "&lt;", ">": "&gt;", "&": "&amp;", "'": "&apos;", '"': "&quot;" };

function xmlEscape(text) {
	return String(text).replace(/[<>&'"]/g, (c) => XML_ENTITIES[c]);
}

function sendRejection(ctx, error) {
	const { req, res, protocol } = ctx;
	const row = ERROR_KINDS[error.kind];
	const requestId = randomUUID();
	let status, code, headers, body;

	if (protocol === "s3") {
		status = error.s3.status ?? row.s3.status;
		code = error.s3.code ?? row.s3.code;
		const fields = { ...(error.s3.fields ?? {}) };
		const parts = [`<Code>${xmlEscape(code)}</Code>`, `<Message>${xmlEscape(error.s3.message ?? error.message)}</Message>`];
		for (const [name, value] of Object.entries(fields))
			parts.push(`<${name}>${xmlEscape(value)}</${name}>`);
		parts.push(`<RequestId>${requestId}</RequestId>`, "<HostId>payflow-sigv4-front</HostId>");
		body = `<?xml version="1.0" encoding="UTF-8"?>\n<Error>${parts.join("")}</Error>`;
		headers = {
			"content-type": "application/xml",
			"x-amz-request-id": requestId.replaceAll("-", "").slice(0, 16).toUpperCase(),
			"x-amz-id-2": "payflow-sigv4-front",
		};
	} else if (protocol === "json") {
		status = row.status;
		code = row.code;
		body = JSON.stringify({ __type: row.type, message: error.message });
		headers = {
			"content-type": "application/x-amz-json-1.0",
			"x-amzn-requestid": requestId,
			"x-amzn-query-error": `${row.code};${row.fault ?? "Sender"}`,
		};
	} else {
		status = row.status;
		code = row.code;
		body = '<?xml version="1.0"?>\n<ErrorResponse xmlns="http://queue.amazonaws.com/doc/2012-11-05/">' +
			`<Error><Type>${row.fault ?? "Sender"}</Type><Code>${code}</Code>` +
			`<Message>${xmlEscape(error.message)}</Message><Detail/></Error>` +
			`<RequestId>${requestId}</RequestId></ErrorResponse>`;
		headers = { "content-type": "text/xml", "x-amzn-requestid": requestId };
	}

	const text = protocol === "s3" ? error.s3.message ?? error.message : error.message;
	const firstLine = String(text).split("\n")[0];
	console.error(`${new Date().toISOString()} sigv4-front: rejected ${status} ${code} ` +
		`${protocol} ${req.method} ${req.url.split("?")[0]} key=${ctx.accessKeyId ?? "-"}: ${firstLine}`);

	if (res.headersSent) {
		res.destroy();
		return;
	}
	const payload = req.method === "HEAD" ? "" : body;
	res.writeHead(status, { ...headers, "content-length": Buffer.byteLength(payload) });
	res.end(payload);
}

/* ---- reading the request ---- */

function splitUrl(url) {
	const q = url.indexOf("?");
	return q < 0 ? { rawPath: url, rawQuery: "" } : { rawPath: url.slice(0, q), rawQuery: url.slice(q + 1) };
}

function decodeComponent(text) {
	try {
		return decodeURIComponent(text);
	} catch {
		return text;
	}
}

// Query parameters decoded once; smithy re-encodes them the SigV4 way.
function parseQuery(rawQuery) {
	const query = {};
	for (const pair of rawQuery.split("&")) {
		if (pair === "")
			continue;
		const eq = pair.indexOf("=");
		const key = decodeComponent(eq < 0 ? pair : pair.slice(0, eq));
		const value = eq < 0 ? "" : decodeComponent(pair.slice(eq + 1));
		if (!Object.hasOwn(query, key))
			query[key] = value;
		else if (Array.isArray(query[key]))
			query[key].push(value);
		else
			query[key] = [query[key], value];
	}
	return query;
}

function queryParam(query, name) {
	const key = Object.keys(query).find((k) => k.toLowerCase() === name.toLowerCase());
	if (key === undefined)
		return undefined;
	return Array.isArray(query[key]) ? query[key][0] : query[key];
}

// Header values by lower-case name, repeated headers joined with a comma the
// way SigV4 canonicalises them (Node would join some with ", ").
function headerMap(req) {
	const map = new Map();
	const raw = req.rawHeaders;
	for (let i = 0; i < raw.length; i += 2) {
		const name = raw[i].toLowerCase();
		const value = raw[i + 1].trim();
		map.set(name, map.has(name) ? `${map.get(name)},${value}` : value);
	}
	return map;
}

// SQS JSON calls are recognised by their target header, query-protocol calls
// by a form body on POST; everything else is S3.
function classify(req, rawPath, headers) {
	const target = headers.get("x-amz-target") ?? "";
	const contentType = (headers.get("content-type") ?? "").toLowerCase();
	if (target.startsWith("AmazonSQS."))
		return "json";
	if (req.method === "POST" && rawPath === "/" && contentType.startsWith("application/x-amz-json-1.0"))
		return "json";
	if (req.method === "POST" && contentType.startsWith("application/x-www-form-urlencoded") &&
		(rawPath === "/" || /^\/\d{12}\/[^/]+$/.test(rawPath)))
		return "query";
	return "s3";
}

function readWholeBody(req, limit) {
	return new Promise((resolve, reject) => {
		const chunks = [];
		let size = 0;
		let over = false;
		req.on("data", (chunk) => {
			size += chunk.length;
			if (size > limit)
				over = true;
			if (!over)
				chunks.push(chunk);
		});
		req.on("end", () => resolve(over ? null : Buffer.concat(chunks)));
		req.on("error", reject);
	});
}

function parseAmzDate(text) {
	const m = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/.exec(text ?? "");
	if (!m)
		return null;
	const ms = Date.UTC(+m[1], +m[2] - 1, +m[3], +m[4], +m[5], +m[6]);
	return Number.isNaN(ms) ? null : new Date(ms);
}

function formatAmzDate(date) {
	return date.toISOString().replace(/[-:]/g, "").replace(/\.\d{3}/, "");
}

function sha256Hex(data) {
	return createHash("sha256").update(data).digest("hex");
}

function bytesHex(text) {
	return Array.from(Buffer.from(text, "utf8"), (b) => b.toString(16).padStart(2, "0")).join(" ");
}

/* ---- the signature ---- */

// What the client claims: from the Authorization header or, for presigned
// URLs, from the X-Amz-* query parameters.
function readClaim(ctx) {
	const { query, headers } = ctx;
	const authorization = headers.get("authorization");
	const presignedSignature = queryParam(query, "X-Amz-Signature");

	if (authorization === undefined && presignedSignature === undefined) {
		return {
			error: rejection("missingAuth", "Request is missing Authentication Token",
				{ message: "Access Denied" }),
		};
	}

	if (authorization === undefined) {
		const needed = ["X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires", "X-Amz-SignedHeaders"];
		if (needed.some((name) => queryParam(query, name) === undefined)) {
			return {
				error: rejection("malformed",
					"Query-string authentication version 4 requires the X-Amz-Algorithm, X-Amz-Credential, " +
					"X-Amz-Signature, X-Amz-Date, X-Amz-SignedHeaders, and X-Amz-Expires parameters.",
					{ code: "AuthorizationQueryParametersError" }),
			};
		}
		return {
			presigned: true,
			algorithm: queryParam(query, "X-Amz-Algorithm"),
			credential: queryParam(query, "X-Amz-Credential"),
			signedHeaders: queryParam(query, "X-Amz-SignedHeaders"),
			signature: presignedSignature,
			amzDate: queryParam(query, "X-Amz-Date"),
			expires: queryParam(query, "X-Amz-Expires"),
		};
	}

	const m = /^(\S+)\s+(.*)$/s.exec(authorization);
	const fields = {};
	for (const part of (m ? m[2] : "").split(",")) {
		const eq = part.indexOf("=");
		if (eq > 0)
			fields[part.slice(0, eq).trim()] = part.slice(eq + 1).trim();
	}
	if (m && m[1] !== ALGORITHM) {
		return {
			error: rejection("malformed", `Unsupported authorization type: ${m[1]}`, {
				code: "InvalidRequest",
				message: "The authorization mechanism you have provided is not supported. Please use AWS4-HMAC-SHA256.",
			}),
		};
	}
	const missing = ["Credential", "SignedHeaders", "Signature"].filter((name) => !fields[name]);
	if (!m || missing.length > 0) {
		const what = missing.map((name) => `'${name}'`).join(", ") || "its parameters";
		return {
			error: rejection("malformed",
				`Authorization header requires ${what}. Authorization=${authorization}`,
				{ message: `The authorization header is malformed; missing ${what}.` }),
		};
	}
	return {
		presigned: false,
		algorithm: m[1],
		credential: fields.Credential,
		signedHeaders: fields.SignedHeaders,
		signature: fields.Signature,
		amzDate: headers.get("x-amz-date"),
	};
}

// Checks the claim against the request. Returns { payloadHash } when the
// signature holds, { error } otherwise; body is the whole body for SQS and
// undefined for S3, whose payload is checked while it streams.
async function authenticate(ctx, body) {
	const { req, protocol, headers, query, rawPath } = ctx;
	const claim = readClaim(ctx);
	if (claim.error)
		return claim;
	const s3 = protocol === "s3";
	const scopeParts = claim.credential.split("/");
	const [accessKeyId, scopeDate, scopeRegion, scopeService, terminator] = scopeParts;
	ctx.accessKeyId = accessKeyId;

	if (claim.algorithm !== ALGORITHM) {
		return {
			error: rejection("malformed", `Unsupported algorithm ${claim.algorithm}`, {
				code: "AuthorizationQueryParametersError",
				message: "X-Amz-Algorithm only supports \"AWS4-HMAC-SHA256\"",
			}),
		};
	}
	if (scopeParts.length !== 5 || terminator !== "aws4_request") {
		return {
			error: rejection("malformed",
				`Credential should be scoped to a valid region, not '${scopeRegion ?? ""}'. ` +
				"Credential must have exactly 5 slash-delimited elements, e.g. keyid/date/region/service/term, " +
				`got '${claim.credential}'`,
				{ message: `The authorization header is malformed; the Credential is mal-formed; expecting "<YOUR-AKID>/YYYYMMDD/REGION/SERVICE/aws4_request".` }),
		};
	}
	if (accessKeyId !== config.accessKeyId) {
		return {
			error: rejection("unknownKey", "The security token included in the request is invalid.", {
				message: "The AWS Access Key Id you provided does not exist in our records.",
				fields: { AWSAccessKeyId: accessKeyId },
			}),
		};
	}

	const signedAt = parseAmzDate(claim.amzDate);
	if (!signedAt) {
		return {
			error: rejection("malformed",
				claim.amzDate === undefined ?
					"Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header; " +
					"this front supports X-Amz-Date only." :
					`Invalid X-Amz-Date '${claim.amzDate}': expected YYYYMMDD'T'HHMMSS'Z'.`,
				{ code: "AccessDenied", status: 403, message: "AWS authentication requires a valid Date or x-amz-date header" }),
		};
	}

	const now = Date.now();
	if (claim.presigned) {
		const expires = Number(claim.expires);
		if (!Number.isInteger(expires) || expires < 1 || expires > MAX_PRESIGNED_EXPIRES) {
			return {
				error: rejection("malformed", "X-Amz-Expires must be between 1 and 604800 seconds", {
					code: "AuthorizationQueryParametersError",
					message: "X-Amz-Expires must be less than a week (in seconds) that is 604800",
				}),
			};
		}
		if (now > signedAt.getTime() + expires * 1000) {
			return {
				error: rejection("expired", `Request has expired: signed ${claim.amzDate}, valid ${expires} s`, {
					code: "AccessDenied",
					message: "Request has expired",
					fields: {
						"X-Amz-Expires": expires,
						Expires: new Date(signedAt.getTime() + expires * 1000).toISOString(),
						ServerTime: new Date(now).toISOString(),
					},
				}),
			};
		}
		if (signedAt.getTime() - now > MAX_SKEW_MS) {
			return { error: rejection("expired", "Request is not valid yet", { code: "AccessDenied" }) };
		}
	} else if (Math.abs(now - signedAt.getTime()) > MAX_SKEW_MS) {
		const nowText = formatAmzDate(new Date(now));
		const message = signedAt.getTime() < now ?
			`Signature expired: ${claim.amzDate} is now earlier than ` +
			`${formatAmzDate(new Date(now - MAX_SKEW_MS))} (${nowText} - 15 min.)` :
			`Signature not yet current: ${claim.amzDate} is still later than ` +
			`${formatAmzDate(new Date(now + MAX_SKEW_MS))} (${nowText} + 15 min.)`;
		return {
			error: rejection("expired", message, {
				message: "The difference between the request time and the current time is too large.",
				fields: {
					RequestTime: claim.amzDate,
					ServerTime: new Date(now).toISOString(),
					MaxAllowedSkewMilliseconds: MAX_SKEW_MS,
				},
			}),
		};
	}

	// The expected scope comes from this endpoint, never from the request.
	const service = s3 ? "s3" : protocol === "json" ? "sqs" : QUERY_SERVICES.has(scopeService) ? scopeService : "sqs";
	const malformedScope = s3 && claim.presigned ? "AuthorizationQueryParametersError" : "AuthorizationHeaderMalformed";
	const s3Scope = claim.presigned ? "Error parsing the X-Amz-Credential parameter;" : "The authorization header is malformed;";
	if (scopeRegion !== config.region) {
		return {
			error: rejection("signature", `Credential should be scoped to a valid region, not '${scopeRegion}'. `, {
				code: malformedScope,
				status: 400,
				message: `${s3Scope} the region '${scopeRegion}' is wrong; expecting '${config.region}'`,
				fields: { Region: config.region },
			}),
		};
	}
	if (scopeService !== service) {
		return {
			error: rejection("signature", `Credential should be scoped to correct service: '${service}'. `, {
				code: malformedScope,
				status: 400,
				message: `${s3Scope} incorrect service "${scopeService}". This endpoint belongs to "${service}".`,
			}),
		};
	}
	const shortDate = claim.amzDate.slice(0, 8);
	if (scopeDate !== shortDate) {
		return {
			error: rejection("signature",
				"Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: " +
				`'${scopeDate}' != '${shortDate}', from '${claim.amzDate}'.`,
				{
					code: malformedScope,
					status: 400,
					message: `${s3Scope} Invalid credential date. Date is not the same as X-Amz-Date.`,
				}),
		};
	}

	const signedNames = claim.signedHeaders.split(";").map((name) => name.trim().toLowerCase()).filter(Boolean);
	const signedSet = new Set(signedNames);
	if (!signedSet.has("host")) {
		return {
			error: rejection("signature", "'Host' or ':authority' must be a 'SignedHeader' in the AWS Authorization.", {
				code: "AccessDenied",
				message: "There were headers present in the request which were not signed",
				fields: { HeadersNotSigned: "host" },
			}),
		};
	}
	if (s3) {
		// S3 refuses x-amz-* headers outside the signature: they carry
		// meaning (checksums, metadata, copy source) a replay could change.
		const unsigned = [...headers.keys()].filter((name) => name.startsWith("x-amz-") && !signedSet.has(name));
		if (unsigned.length > 0) {
			return {
				error: rejection("signature", `Unsigned headers: ${unsigned.join(", ")}`, {
					code: "AccessDenied",
					message: "There were headers present in the request which were not signed",
					fields: { HeadersNotSigned: unsigned.join(", ") },
				}),
			};
		}
	}
	const absent = signedNames.filter((name) => !headers.has(name));
	if (absent.length > 0) {
		return {
			error: rejection("signature", `${SIGNATURE_MESSAGE}\n\nSigned headers missing from the request: ${absent.join(", ")}`, {
				message: `${S3_SIGNATURE_MESSAGE} Signed headers missing from the request: ${absent.join(", ")}`,
			}),
		};
	}

	let payloadHash;
	if (s3 && claim.presigned) {
		payloadHash = "UNSIGNED-PAYLOAD";
	} else if (s3) {
		payloadHash = headers.get("x-amz-content-sha256");
		if (payloadHash === undefined) {
			return {
				error: s3Rejection(400, "InvalidRequest", "Missing required header for this request: x-amz-content-sha256"),
			};
		}
		if (!S3_PAYLOAD_KEYWORDS.has(payloadHash) && !/^[0-9a-f]{64}$/.test(payloadHash)) {
			return {
				error: s3Rejection(400, "InvalidArgument",
					"x-amz-content-sha256 must be UNSIGNED-PAYLOAD, STREAMING-UNSIGNED-PAYLOAD-TRAILER, " +
					"STREAMING-AWS4-HMAC-SHA256-PAYLOAD, STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER, " +
					"or a valid sha256 value.",
					{ ArgumentName: "x-amz-content-sha256", ArgumentValue: payloadHash }),
			};
		}
	} else {
		// SQS hashes what arrived, whatever a signed x-amz-content-sha256 says.
		payloadHash = sha256Hex(body);
	}

	const signedHeaderValues = {};
	for (const name of signedNames)
		signedHeaderValues[name] = headers.get(name);
	const signer = signerFor(service);
	const canonicalHeaders = getCanonicalHeaders({ headers: signedHeaderValues }, undefined, signedSet);
	const canonicalRequest = signer.createCanonicalRequest(
		{ method: req.method, path: rawPath, query }, canonicalHeaders, payloadHash);
	const scope = createScope(shortDate, config.region, service);
	const stringToSign = await signer.createStringToSign(claim.amzDate, scope, canonicalRequest, ALGORITHM);
	const expected = await signer.getSignature(claim.amzDate, scope,
		signer.getSigningKey(credentials, config.region, shortDate, service), canonicalRequest);

	const provided = Buffer.from(claim.signature ?? "", "utf8");
	const wanted = Buffer.from(expected, "utf8");
	if (provided.length !== wanted.length || !timingSafeEqual(provided, wanted)) {
		return {
			error: rejection("signature",
				`${SIGNATURE_MESSAGE}\n\nThe Canonical String for this request should have been\n'${canonicalRequest}'\n\n` +
				`The String-to-Sign should have been\n'${stringToSign}'\n`,
				{
					message: S3_SIGNATURE_MESSAGE,
					fields: {
						AWSAccessKeyId: accessKeyId,
						StringToSign: stringToSign,
						SignatureProvided: claim.signature ?? "",
						StringToSignBytes: bytesHex(stringToSign),
						CanonicalRequest: canonicalRequest,
						CanonicalRequestBytes: bytesHex(canonicalRequest),
					},
				}),
		};
	}
	return { payloadHash };
}

/* ---- S3 payload checks, run while the body streams ---- */

const CHECKSUM_HEADERS = [
	{ header: "x-amz-checksum-crc32", name: "CRC32", bytes: 4, start: () => crc32State() },
	{ header: "x-amz-checksum-sha1", name: "SHA1", bytes: 20, start: () => createHash("sha1") },
	{ header: "x-amz-checksum-sha256", name: "SHA256", bytes: 32, start: () => createHash("sha256") },
];

// zlib.crc32 with the update/digest interface of a crypto hash.
function crc32State() {
	let value = 0;
	return {
		update(chunk) {
			value = crc32(chunk, value);
		},
		digest() {
			const out = Buffer.alloc(4);
			out.writeUInt32BE(value >>> 0);
			return out;
		},
	};
}

function decodeBase64(text, bytes) {
	if (!/^[A-Za-z0-9+/]+={0,2}$/.test(text ?? ""))
		return null;
	const decoded = Buffer.from(text, "base64");
	return decoded.length === bytes ? decoded : null;
}

// The checks a body must pass, or { error } when a header is unusable.
function s3BodyChecks(headers, payloadHash) {
	const checks = [];
	const chunked = (headers.get("content-encoding") ?? "").includes("aws-chunked") || payloadHash.startsWith("STREAMING-");

	if (/^[0-9a-f]{64}$/.test(payloadHash)) {
		checks.push({
			hash: createHash("sha256"),
			verdict(digest) {
				const computed = digest.toString("hex");
				return computed === payloadHash ? null : s3Rejection(400, "XAmzContentSHA256Mismatch",
					"The provided 'x-amz-content-sha256' header does not match what was computed.",
					{ ClientComputedContentSHA256: payloadHash, S3ComputedContentSHA256: computed });
			},
		});
	}
	// With aws-chunked the body on the wire is framed, so its digests are not
	// those of the object; they travel in trailers this front does not read.
	if (chunked)
		return { checks };

	const contentMd5 = headers.get("content-md5");
	if (contentMd5 !== undefined) {
		const expected = decodeBase64(contentMd5, 16);
		if (!expected)
			return { error: s3Rejection(400, "InvalidDigest", "The Content-MD5 you specified was invalid.") };
		checks.push({
			hash: createHash("md5"),
			verdict: (digest) => digest.equals(expected) ? null :
				s3Rejection(400, "BadDigest", "The Content-MD5 you specified did not match what we received."),
		});
	}
	for (const algorithm of CHECKSUM_HEADERS) {
		const value = headers.get(algorithm.header);
		if (value === undefined)
			continue;
		const expected = decodeBase64(value, algorithm.bytes);
		if (!expected) {
			return {
				error: s3Rejection(400, "InvalidRequest", `Value for ${algorithm.header} header is invalid.`),
			};
		}
		checks.push({
			hash: algorithm.start(),
			verdict: (digest) => digest.equals(expected) ? null :
				s3Rejection(400, "BadDigest", `The ${algorithm.name} you specified did not match the calculated checksum.`),
		});
	}
	return { checks };
}

/* ---- proxying ---- */

// The request's headers minus the hop-by-hop ones; with a body read already,
// its Content-Length is that body's, which the front may have rewritten.
function forwardHeaders(req, body) {
	const out = [];
	const raw = req.rawHeaders;
	for (let i = 0; i < raw.length; i += 2) {
		const name = raw[i].toLowerCase();
		if (!HOP_BY_HOP.has(name) && !(body !== undefined && name === "content-length"))
			out.push(raw[i], raw[i + 1]);
	}
	if (body !== undefined)
		out.push("Content-Length", String(Buffer.byteLength(body)));
	return out;
}

// fauxqs's headers minus the hop-by-hop ones (and its Content-Length when
// the front rewrote the body, its own length then going in its place).
function responseHeaders(upstream, dropLength = false) {
	const out = [];
	const raw = upstream.rawHeaders;
	for (let i = 0; i < raw.length; i += 2) {
		const name = raw[i].toLowerCase();
		if (!HOP_BY_HOP.has(name) && !(dropLength && name === "content-length"))
			out.push(raw[i], raw[i + 1]);
	}
	return out;
}

// Sends the request on to fauxqs. With body, the body was read already; with
// checks, it is streamed and the last chunk held back until every check
// passed: fauxqs acts only on a complete body, so a request that fails a
// check never reaches it whole and leaves no trace. With transform, a 200
// answer is read whole and the client gets transform(answer) instead; any
// other answer streams as it came.
function forward(ctx, { body, checks = [], path, transform }) {
	const { req, res } = ctx;
	let failed = false;
	const upstream = http.request({
		host: config.host,
		port: config.backendPort,
		method: req.method,
		path: path ?? req.url,
		headers: forwardHeaders(req, body),
		agent: upstreamAgent,
	});
	upstream.on("response", (reply) => {
		// fauxqs compresses nothing; an encoded answer would not be ours to edit.
		if (transform && reply.statusCode === 200 && reply.headers["content-encoding"] === undefined) {
			readWholeBody(reply, Infinity).then((answer) => {
				const out = transform(answer);
				res.writeHead(reply.statusCode, reply.statusMessage,
					[...responseHeaders(reply, true), "Content-Length", String(out.length)]);
				res.end(out);
			}, () => res.destroy());
			return;
		}
		res.writeHead(reply.statusCode, reply.statusMessage, responseHeaders(reply));
		reply.pipe(res);
		reply.on("error", () => res.destroy());
	});
	upstream.on("error", (err) => {
		if (failed)
			return;
		failed = true;
		sendRejection(ctx, rejection("unavailable", `fauxqs is not answering: ${err.code ?? err.message}`,
			{ message: "Service is unable to handle request." }));
	});
	// A client that goes away (a long poll given up) ends the upstream call.
	res.on("close", () => {
		if (!res.writableFinished)
			upstream.destroy();
	});

	if (body !== undefined) {
		upstream.end(body);
		return;
	}

	let held = null;
	req.on("data", (chunk) => {
		for (const check of checks)
			check.hash.update(chunk);
		if (held && !upstream.write(held)) {
			req.pause();
			upstream.once("drain", () => req.resume());
		}
		held = chunk;
	});
	req.on("end", () => {
		for (const check of checks) {
			const error = check.verdict(check.hash.digest());
			if (error) {
				failed = true;
				upstream.destroy();
				sendRejection(ctx, error);
				return;
			}
		}
		upstream.end(held ?? undefined);
	});
	req.on("error", () => upstream.destroy());
}

function health(res) {
	const probe = http.get({ host: config.host, port: config.backendPort, path: "/health", agent: upstreamAgent }, (reply) => {
		reply.resume();
		const ok = reply.statusCode === 200;
		res.writeHead(ok ? 200 : 503, { "content-type": "application/json" });
		res.end(JSON.stringify({ status: ok ? "ok" : "backend unhealthy" }));
	});
	probe.on("error", (err) => {
		res.writeHead(503, { "content-type": "application/json" });
		res.end(JSON.stringify({ status: `backend unreachable: ${err.code ?? err.message}` }));
	});
}

const holds = new Map();			// action -> {ms, count}
const calls = new Map();			// SQS action or "S3 <method>" -> requests forwarded
const visibilityLog = [];			// the last 10,000 visibility changes
const refusals = [];				// {action, match, code, message, senderFault, count}, oldest first
const refusedLog = [];				// the last 10,000 entries refused

function readJson(req) {
	return readWholeBody(req, 65536).then((body) => JSON.parse(body?.toString() || "{}"));
}

function sendJson(res, status, value) {
	res.writeHead(status, { "content-type": "application/json" });
	res.end(JSON.stringify(value));
}

function sqsAction(ctx) {
	return (ctx.headers.get("x-amz-target") ?? "").replace(/^AmazonSQS\./, "");
}

function countCall(what) {
	calls.set(what, (calls.get(what) ?? 0) + 1);
}

// Holds the call if a test asked for it, and logs visibility changes as
// they go on to fauxqs.
// Waits as a hold on this action says (and spends one of its count);
// returns how long.
async function holdIfAsked(action) {
	const hold = holds.get(action);
	if (!hold || hold.count <= 0)
		return 0;
	hold.count--;
	await new Promise((resolve) => setTimeout(resolve, hold.ms));
	return hold.ms;
}

async function beforeForward(ctx, body) {
	const action = sqsAction(ctx);
	const heldMs = await holdIfAsked(action);
	if (action === "ChangeMessageVisibilityBatch" || action === "ChangeMessageVisibility") {
		let call = {};
		try {
			call = JSON.parse(body.toString());
		} catch {
			return;
		}
		for (const e of call.Entries ?? [call]) {
			visibilityLog.push({ receipt: e.ReceiptHandle, seconds: e.VisibilityTimeout, arrivedAt: Date.now(), heldMs });
			if (visibilityLog.length > 10000)
				visibilityLog.shift();
		}
	}
}

/* ---- refused batch entries, for tests of partial failures ---- */

// What a rule's match is looked for in, by batch action: the body a sender
// chose, or the receipt handle or entry id a deleter or extender has.
const REFUSABLE = {
	SendMessageBatch: (e) => [e.MessageBody],
	DeleteMessageBatch: (e) => [e.ReceiptHandle, e.Id],
	ChangeMessageVisibilityBatch: (e) => [e.ReceiptHandle, e.Id],
};

// A rule from the body of POST /_front/refuse, or { error }.
function refusalRule(value) {
	const { action, match, code, message = "refused by the test front", senderFault, count } = value ?? {};
	if (!Object.hasOwn(REFUSABLE, action))
		return { error: `action must be one of ${Object.keys(REFUSABLE).join(", ")}` };
	if (typeof match !== "string" || typeof code !== "string" || code === "" || typeof message !== "string" ||
		typeof senderFault !== "boolean" || !Number.isInteger(count) || count < 0)
		return { error: "expected {action, match, code, message?, senderFault: boolean, count: integer >= 0}" };
	return { rule: { action, match, code, message, senderFault, count } };
}

function setRefusal(rule) {
	const at = refusals.findIndex((r) => r.action === rule.action && r.match === rule.match);
	if (at >= 0)
		refusals.splice(at, 1);
	if (rule.count > 0)
		refusals.splice(at >= 0 ? at : refusals.length, 0, rule);
}

// The entries of an SQS JSON batch call that rules refuse, taken out of the
// body fauxqs gets: null when none is, else { body, failed, all } with the
// body to forward and the Failed entries to answer. A malformed batch (no
// entries, more than 10, ids not distinct) goes to fauxqs whole, to be
// refused as a whole the way SQS does, and spends no rule.
function refuseEntries(ctx, body) {
	const action = sqsAction(ctx);
	const fields = REFUSABLE[action];
	if (!fields || !refusals.some((r) => r.action === action))
		return null;
	let call;
	try {
		call = JSON.parse(body.toString());
	} catch {
		return null;
	}
	const entries = call?.Entries;
	if (!Array.isArray(entries) || entries.length === 0 || entries.length > 10 ||
		new Set(entries.map((e) => e?.Id)).size !== entries.length)
		return null;
	const kept = [];
	const failed = [];
	for (const entry of entries) {
		const texts = fields(entry ?? {}).filter((t) => typeof t === "string");
		const rule = refusals.find((r) => r.action === action && r.count > 0 &&
			(r.match === "" || texts.some((t) => t.includes(r.match))));
		if (!rule) {
			kept.push(entry);
			continue;
		}
		rule.count--;
		if (rule.count === 0)
			refusals.splice(refusals.indexOf(rule), 1);
		failed.push({ Id: entry.Id, SenderFault: rule.senderFault, Code: rule.code, Message: rule.message });
		refusedLog.push({ action, id: entry.Id, code: rule.code, senderFault: rule.senderFault, at: Date.now() });
		if (refusedLog.length > 10000)
			refusedLog.shift();
		console.error(`${new Date().toISOString()} sigv4-front: refused ${action} entry ${entry.Id} ` +
			`${rule.code} senderFault=${rule.senderFault} (rule match "${rule.match}", ${rule.count} left): ${rule.message}`);
	}
	if (failed.length === 0)
		return null;
	return { body: Buffer.from(JSON.stringify({ ...call, Entries: kept })), failed, all: kept.length === 0 };
}

// fauxqs's answer to the entries it got, with the refused ones added to
// Failed; anything but a JSON object (an error page) is left as it is.
function mergeFailed(answer, failed) {
	let value;
	try {
		value = JSON.parse(answer.toString());
	} catch {
		return answer;
	}
	if (value === null || typeof value !== "object" || Array.isArray(value))
		return answer;
	return Buffer.from(JSON.stringify({
		...value,
		Successful: value.Successful ?? [],
		Failed: [...(value.Failed ?? []), ...failed],
	}));
}

// The answer to a batch every entry of which was refused: fauxqs is not
// called, as it would refuse an empty batch. (Nor does this check that the
// queue exists, which SQS would.)
function answerAllRefused(res, failed) {
	const payload = JSON.stringify({ Successful: [], Failed: failed });
	res.writeHead(200, {
		"content-type": "application/x-amz-json-1.0",
		"x-amzn-requestid": randomUUID(),
		"content-length": Buffer.byteLength(payload),
	});
	res.end(payload);
}

async function handle(req, res) {
	const { rawPath, rawQuery } = splitUrl(req.url);
	if (req.method === "GET" && rawPath === "/_front/health")
		return health(res);
	if (req.method === "POST" && rawPath === "/_front/hold") {
		const { action, ms, count } = await readJson(req);
		if (typeof action !== "string" || !Number.isInteger(ms) || !Number.isInteger(count))
			return sendJson(res, 400, { error: "expected {action, ms, count}" });
		holds.set(action, { ms, count });
		return sendJson(res, 200, { action, ms, count });
	}
	if (req.method === "GET" && rawPath === "/_front/visibility") {
		const since = Number(queryParam(parseQuery(rawQuery), "since") ?? 0);
		return sendJson(res, 200, visibilityLog.filter((e) => e.arrivedAt >= since));
	}
	if (req.method === "POST" && rawPath === "/_front/refuse") {
		let value;
		try {
			value = await readJson(req);
		} catch {
			return sendJson(res, 400, { error: "body is not JSON" });
		}
		const { rule, error } = refusalRule(value);
		if (error)
			return sendJson(res, 400, { error });
		setRefusal(rule);
		return sendJson(res, 200, rule);
	}
	if (req.method === "GET" && rawPath === "/_front/refused")
		return sendJson(res, 200, refusedLog);
	if (req.method === "GET" && rawPath === "/_front/calls")
		return sendJson(res, 200, Object.fromEntries(calls));
	if (req.method === "GET" && rawPath.startsWith("/_fauxqs/"))
		return forward({ req, res, protocol: "json" }, {});

	const headers = headerMap(req);
	const ctx = { req, res, headers, rawPath, query: parseQuery(rawQuery), protocol: classify(req, rawPath, headers) };

	if (ctx.protocol !== "s3") {
		const body = await readWholeBody(req, MAX_BUFFERED_BODY);
		if (body === null)
			return sendRejection(ctx, rejection("tooLarge", `Request body larger than ${MAX_BUFFERED_BODY} bytes`));
		const outcome = await authenticate(ctx, body);
		if (outcome.error)
			return sendRejection(ctx, outcome.error);
		// fauxqs takes SQS JSON calls on "/" only; SQS also takes them on the
		// queue URL's path, so clients may post there.
		const path = ctx.protocol === "json" && rawPath !== "/" ? `/${rawQuery ? `?${rawQuery}` : ""}` : undefined;
		// Entries are refused as the call arrives, before any hold, so that
		// of several calls the first to arrive spends a rule; a refused
		// visibility change never reaches fauxqs, nor the visibility log.
		const refused = ctx.protocol === "json" ? refuseEntries(ctx, body) : null;
		if (ctx.protocol === "json")
			await beforeForward(ctx, refused?.body ?? body);
		// A call answered here in full counts too: SQS would have had it.
		countCall(ctx.protocol === "json" ? sqsAction(ctx) : "query");
		if (refused?.all)
			return answerAllRefused(res, refused.failed);
		if (refused)
			return forward(ctx, { body: refused.body, path, transform: (answer) => mergeFailed(answer, refused.failed) });
		return forward(ctx, { body, path });
	}

	const outcome = await authenticate(ctx, undefined);
	if (outcome.error)
		return sendRejection(ctx, outcome.error);
	const plan = s3BodyChecks(headers, outcome.payloadHash);
	if (plan.error)
		return sendRejection(ctx, plan.error);
	countCall(`S3 ${req.method}`);
	await holdIfAsked(`S3 ${req.method}`);
	return forward(ctx, { checks: plan.checks });
}

const server = http.createServer((req, res) => {
	handle(req, res).catch((err) => {
		console.error(`${new Date().toISOString()} sigv4-front: internal error on ${req.method} ${req.url}: ${err.stack ?? err}`);
		if (!res.headersSent) {
			res.writeHead(500, { "content-type": "text/plain" });
			res.end("sigv4-front internal error\n");
		} else {
			res.destroy();
		}
	});
});
// Long polls hold a request for up to 20 s; keep idle connections a bit
// longer than libcurl's and the SDK's reuse windows.
server.keepAliveTimeout = 65_000;
server.headersTimeout = 66_000;

server.listen(config.frontPort, config.host, () => {
	console.error(`sigv4-front: listening on http://${config.host}:${config.frontPort}, ` +
		`forwarding to http://${config.host}:${config.backendPort}, region ${config.region}, key ${config.accessKeyId}`);
});

let stopping = false;
function stop(signal) {
	if (stopping)
		return;
	stopping = true;
	console.error(`sigv4-front: ${signal}, closing`);
	server.close(() => process.exit(0));
	// Idle keep-alive connections would hold close() open; in-flight long
	// polls are cut too, as a real outage would.
	server.closeAllConnections();
	upstreamAgent.destroy();
}
process.on("SIGTERM", () => stop("SIGTERM"));
process.on("SIGINT", () => stop("SIGINT"));
