// Writes tests/vectors/braintree.json: Braintree notifications signed by the `braintree`
// SDK's own webhookTesting.sampleNotification(kind, id), and variants of them, each with the
// verdict of gateway.webhookNotification.parse(bt_signature, bt_payload) and, when it
// accepts, what the SDK read from the notification (kind, timestamp, subject id).
import { createHash, createHmac } from "node:crypto";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const require = createRequire(import.meta.url);
const here = dirname(fileURLToPath(import.meta.url));
const outDir = join(here, "..", "..", "tests", "vectors");
const braintree = require("braintree");

const PUBLIC = "hookdpublickey01";
const PRIVATE = "0123456789abcdef0123456789abcdef";
const OTHER_PUBLIC = "otherpublickey02";
const OTHER_PRIVATE = "fedcba9876543210fedcba9876543210";

function gateway(publicKey, privateKey) {
  return new braintree.BraintreeGateway({
    environment: braintree.Environment.Sandbox,
    merchantId: "hookd_merchant",
    publicKey,
    privateKey,
  });
}

// The documented formula: hex(HMAC-SHA1(key = SHA1(private key), msg = bt_payload)).
function sign(privateKey, payload) {
  const key = createHash("sha1").update(privateKey).digest();
  return createHmac("sha1", key).update(payload).digest("hex");
}

// The form Braintree posts.
function form(signature, payload) {
  return new URLSearchParams({ bt_signature: signature, bt_payload: payload }).toString();
}

// Ruby's Base64.encode64, as Braintree's gateway writes bt_payload: lines of 60 and a final \n.
function encode64(text) {
  const flat = Buffer.from(text).toString("base64");
  return flat.match(/.{1,60}/g).join("\n") + "\n";
}

function subjectId(notification) {
  for (const name of ["transaction", "dispute", "subscription", "disbursement"]) {
    if (notification[name]?.id !== undefined) return notification[name].id;
  }
  return "";
}

async function testCase(name, description, { publicKey = PUBLIC, privateKey = PRIVATE, signature, payload }) {
  const verdict = { name, description, public_key: publicKey, private_key: privateKey, bt_signature: signature, bt_payload: payload };
  verdict.body = form(signature, payload);
  try {
    const notification = await gateway(publicKey, privateKey).webhookNotification.parse(signature, payload);
    verdict.valid = true;
    verdict.sdk = {
      kind: notification.kind,
      timestamp_unix: Math.floor(new Date(notification.timestamp).getTime() / 1000),
      subject_id: subjectId(notification),
    };
  } catch (e) {
    verdict.valid = false;
    verdict.sdk_error = String(e.message ?? e);
  }
  return verdict;
}

const sample = (kind, id) => gateway(PUBLIC, PRIVATE).webhookTesting.sampleNotification(kind, id);
const xmlOf = (payload) => Buffer.from(payload.replace(/\n/g, ""), "base64").toString("utf8");

const cases = [];
const quirks = [];
const { Kind } = braintree.WebhookNotification;
for (const [kind, id] of [
  [Kind.TransactionSettled, "settled1"],
  [Kind.TransactionSettlementDeclined, "declined1"],
  [Kind.DisputeOpened, "dispute1"],
  [Kind.Check, "ignored"],
  [Kind.SubscriptionCanceled, "sub1"],
]) {
  const { bt_signature: signature, bt_payload: payload } = sample(kind, id);
  cases.push(await testCase(`sample_${kind}`, `sampleNotification(${kind}, ${id}) as the SDK signs it`, { signature, payload }));
}

const { bt_signature: signature, bt_payload: payload } = sample(Kind.TransactionSettled, "txn42");
const tag = signature.split("|")[1];
const tampered = Buffer.from(xmlOf(payload).replace("<amount>100</amount>", "<amount>1</amount>")).toString("base64") + "\n";
cases.push(await testCase("tampered_amount", "the XML's amount changed, the signature kept", { signature, payload: tampered }));
cases.push(await testCase("other_private_key", "signed with another private key under the same public key", {
  signature: `${PUBLIC}|${sign(OTHER_PRIVATE, payload)}`,
  payload,
}));
cases.push(await testCase("unknown_public_key", "the only pair names a public key the verifier does not hold", {
  publicKey: OTHER_PUBLIC,
  privateKey: PRIVATE,
  signature,
  payload,
}));
cases.push(await testCase("second_of_two_pairs", "two API keys: the verifier's pair comes second", {
  signature: `${OTHER_PUBLIC}|${sign(OTHER_PRIVATE, payload)}&${signature}`,
  payload,
}));
cases.push(await testCase("ruby_line_breaks", "bt_payload in lines of 60 (Ruby's encode64), signed as sent", (() => {
  const broken = encode64(xmlOf(payload));
  return { signature: `${PUBLIC}|${sign(PRIVATE, broken)}`, payload: broken };
})()));
cases.push(await testCase("trailing_newline_dropped", "the SDK signed payload + \\n; the \\n was lost on the way", {
  signature,
  payload: payload.replace(/\n$/, ""),
}));
cases.push(await testCase("signature_truncated", "the hex signature lost its last digit", {
  signature: `${PUBLIC}|${tag.slice(0, -1)}`,
  payload,
}));

quirks.push(await testCase("uppercase_hex", "the signature in uppercase hex: the SDK compares text, so it rejects", {
  signature: `${PUBLIC}|${tag.toUpperCase()}`,
  payload,
}));
quirks.push(await testCase("crlf_payload", "bt_payload with \\r\\n line ends: characters the SDK refuses", {
  signature: `${PUBLIC}|${sign(PRIVATE, payload.replace(/\n/g, "\r\n"))}`,
  payload: payload.replace(/\n/g, "\r\n"),
}));
quirks.push(await testCase("same_public_key_twice", "two pairs name the verifier's public key, the right one second: the SDK reads the first only", {
  signature: `${PUBLIC}|${sign(OTHER_PRIVATE, payload)}&${signature}`,
  payload,
}));

const version = JSON.parse(readFileSync(join(here, "node_modules", "braintree", "package.json"), "utf8")).version;
mkdirSync(outDir, { recursive: true });
writeFileSync(
  join(outDir, "braintree.json"),
  JSON.stringify(
    {
      sdk: `braintree@${version}`,
      scheme: "form bt_signature=<public_key|hex(HMAC-SHA1(key = SHA1(private_key), msg = bt_payload))>[&...], bt_payload=<base64 XML>",
      verified_with: "await new BraintreeGateway({environment: Sandbox, merchantId, publicKey, privateKey}).webhookNotification.parse(bt_signature, bt_payload)",
      cases,
      quirks,
    },
    null,
    2,
  ) + "\n",
);
console.log(`tests/vectors/braintree.json: ${cases.length} cases, ${quirks.length} quirks`);
