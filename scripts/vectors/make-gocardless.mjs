// Writes tests/vectors/gocardless.json: known-answer signature vectors whose verdicts come
// from GoCardless's own SDK (gocardless-nodejs's webhooks.parse), so hookd's Rust tests need
// no Node. Signatures are built from the documented formula (hex HMAC-SHA256 of the raw body
// with the endpoint's secret) and judged by the SDK; "parsed_ids" are the event ids parse gave.
import { createHmac } from "node:crypto";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const require = createRequire(import.meta.url);
const here = dirname(fileURLToPath(import.meta.url));
const outDir = join(here, "..", "..", "tests", "vectors");
const webhooks = require("gocardless-nodejs/webhooks");

const pkg = "gocardless-nodejs";
const version = JSON.parse(readFileSync(join(here, "node_modules", pkg, "package.json"), "utf8")).version;

const SECRET = "hookd-vectors-gocardless-secret";
const OTHER_SECRET = "hookd-vectors-gocardless-previous";

const sign = (secret, body) => createHmac("sha256", secret).update(body).digest("hex");

function judge(secret, body, signature) {
  try {
    const events = webhooks.parse(body, secret, signature);
    return { valid: true, parsed_ids: events.map((e) => e.id) };
  } catch (e) {
    return { valid: false, sdk_error: `${e.name}: ${e.message}` };
  }
}

function event(id, resource_type, action, links, cause) {
  return {
    id,
    created_at: "2024-06-12T10:32:47.123Z",
    resource_type,
    action,
    links,
    details: { origin: "gocardless", cause, description: `${resource_type} ${action}` },
    metadata: {},
  };
}

const confirmed = event("EV0023NBQ4K8W8", "payments", "confirmed",
  { payment: "PM00BQ2K6T9RXW" }, "payment_confirmed");
const batch = [
  event("EV0023NBQ5M1A2", "payments", "paid_out", { payment: "PM00BQ2K6T9RXW", payout: "PO000A1B2C3D4E" }, "payment_paid_out"),
  event("EV0023NBQ6P3B4", "refunds", "paid", { refund: "RF00C7D8E9F0G1", payment: "PM00BQ2K6T9RXW", mandate: "MD00H2J3K4L5M6" }, "refund_paid"),
  event("EV0023NBQ7R5C6", "payments", "charged_back", { payment: "PM00BQ3L7U0SYX" }, "payment_charged_back"),
];
const meta = { webhook_id: "WB00A1B2C3D4E5" };

const single = JSON.stringify({ events: [confirmed], meta });
const several = JSON.stringify({ events: batch, meta });
// As GoCardless's docs show bodies: indented, with non-ASCII text.
const pretty = JSON.stringify(
  { events: [event("EV0023NBQ8T7D8", "payments", "failed", { payment: "PM00BQ4M8V1TZY", customer: "CU00D5E6F7G8H9" }, "insufficient_funds")],
    meta: { webhook_id: "WB00A1B2C3D4E6" }, note: "Zahlung fehlgeschlagen – Ünïcode ✓" },
  null, 2);
const escaped = single.replace("payments confirmed", "payments confirmed \\u00e9\\u2713");

const good = sign(SECRET, single);
const flipped = (good[0] === "0" ? "1" : "0") + good.slice(1);

const specs = [
  ["payments_confirmed", SECRET, single, good],
  ["several_events", SECRET, several, sign(SECRET, several)],
  ["pretty_printed_unicode", SECRET, pretty, sign(SECRET, pretty)],
  ["escaped_unicode", SECRET, escaped, sign(SECRET, escaped)],
  ["tampered_body", SECRET, single.replace("PM00BQ2K6T9RXW", "PM00BQ2K6T9RXX"), good],
  ["trailing_newline_added", SECRET, single + "\n", good],
  ["signed_with_other_secret", SECRET, single, sign(OTHER_SECRET, single), OTHER_SECRET],
  ["flipped_digit", SECRET, single, flipped],
  ["truncated", SECRET, single, good.slice(0, 62)],
  ["empty_signature", SECRET, single, ""],
  ["prefixed_sha256", SECRET, single, `sha256=${good}`],
  ["base64_instead_of_hex", SECRET, single, Buffer.from(good, "hex").toString("base64")],
];

const quirks = [
  ["signature_uppercase", SECRET, single, good.toUpperCase()],
  ["signature_with_trailing_garbage", SECRET, single, `${good}zz`],
  ["signature_with_odd_trailing_digit", SECRET, single, `${good}0`],
  ["signature_leading_space", SECRET, single, ` ${good}`],
];

function build([name, secret, body, signature, signedWith]) {
  const verdict = judge(secret, body, signature);
  return {
    name,
    secret,
    body,
    signature,
    ...(signedWith ? { signed_with_secret: signedWith } : {}),
    ...verdict,
  };
}

const doc = {
  sdk: `${pkg}@${version}`,
  scheme: "gocardless",
  verified_with: "require('gocardless-nodejs/webhooks').parse(body, secret, signatureHeader)",
  cases: specs.map(build),
  quirks: quirks.map(build),
};
mkdirSync(outDir, { recursive: true });
writeFileSync(join(outDir, "gocardless.json"), JSON.stringify(doc, null, 2) + "\n");
console.log(`tests/vectors/gocardless.json: ${doc.cases.length} cases, ${doc.quirks.length} quirks`);
