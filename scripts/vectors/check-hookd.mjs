// Asks a provider's own SDK whether what `hookd sign` produced is what the provider sends.
//   node check-hookd.mjs <adyen|square|paddle|razorpay|checkout|gocardless|braintree> <secret> <body-file> <headers-file> [notification_url]
// headers-file is `hookd sign` output (one `Name: value` per line). For adyen, body-file is the
// body hookd signed (each item's additionalData.hmacSignature filled) and headers-file is not
// needed for the verdict (pass any file, or "-"); the same for braintree, whose body-file is the
// form `hookd sign` writes and whose secret is PUBLIC_KEY:PRIVATE_KEY. Exit 0 when the SDK accepts, 1 with one line
// saying why otherwise, 2 on bad usage.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);

function fail(reason) {
  console.error(`rejected: ${reason}`);
  process.exit(1);
}

function usage(reason) {
  console.error(`${reason}\nusage: node check-hookd.mjs <adyen|square|paddle|razorpay|checkout|gocardless|braintree> <secret> <body-file> <headers-file> [notification_url]`);
  process.exit(2);
}

function readText(path, what) {
  try {
    return readFileSync(path, "utf8");
  } catch (e) {
    usage(`cannot read ${what} ${path}: ${e.message}`);
  }
}

// `Name: value` lines; names compared case-insensitively, values kept byte for byte after ": ".
function readHeaders(path) {
  const headers = new Map();
  for (const line of readText(path, "headers file").split(/\r?\n/)) {
    if (line.trim() === "") continue;
    const colon = line.indexOf(":");
    if (colon <= 0) usage(`headers file: not a "Name: value" line: ${JSON.stringify(line)}`);
    headers.set(line.slice(0, colon).trim().toLowerCase(), line.slice(colon + 1).replace(/^ /, ""));
  }
  return headers;
}

function header(headers, name) {
  const value = headers.get(name.toLowerCase());
  if (value === undefined) fail(`no ${name} header in the headers file`);
  return value;
}

async function adyen(secret, bodyFile) {
  const { hmacValidator: HmacValidator } = require("@adyen/api-library");
  let notification;
  try {
    notification = JSON.parse(readText(bodyFile, "body file"));
  } catch (e) {
    fail(`body is not JSON: ${e.message}`);
  }
  const items = notification?.notificationItems;
  if (!Array.isArray(items) || items.length === 0) fail("body has no notificationItems");
  const validator = new HmacValidator();
  for (const [i, wrapper] of items.entries()) {
    const item = wrapper?.NotificationRequestItem;
    const which = `item ${i + 1} (pspReference ${item?.pspReference ?? "?"})`;
    if (!item) fail(`item ${i + 1} has no NotificationRequestItem`);
    let ok;
    try {
      ok = validator.validateHMAC(item, secret);
    } catch (e) {
      fail(`${which}: ${e.message}`);
    }
    if (!ok) fail(`${which}: hmacSignature is not HMAC-SHA256 of "${validator.getDataToSign(item)}" under the key`);
  }
  return `${items.length} item(s) accepted by HmacValidator.validateHMAC`;
}

async function square(secret, bodyFile, headersFile, notificationUrl) {
  const { WebhooksHelper } = require("square");
  if (!notificationUrl) usage("square needs the notification_url");
  const signature = header(readHeaders(headersFile), "x-square-hmacsha256-signature");
  const ok = await WebhooksHelper.verifySignature({
    requestBody: readText(bodyFile, "body file"),
    signatureHeader: signature,
    signatureKey: secret,
    notificationUrl,
  });
  if (!ok) fail(`x-square-hmacsha256-signature is not HMAC-SHA256(key, ${JSON.stringify(notificationUrl)} + body)`);
  return "accepted by WebhooksHelper.verifySignature";
}

async function paddle(secret, bodyFile, headersFile) {
  const { NodeRuntime, Webhooks } = require("@paddle/paddle-node-sdk");
  NodeRuntime.initialize();
  const signature = header(readHeaders(headersFile), "Paddle-Signature");
  const body = readText(bodyFile, "body file");
  let ok;
  try {
    ok = await new Webhooks().isSignatureValid(body, secret, signature);
  } catch (e) {
    fail(`Paddle-Signature ${JSON.stringify(signature)}: ${e.message}`);
  }
  if (!ok) {
    // The SDK answers only false; say which of its two checks failed.
    const ts = Number.parseInt(/(?:^|;)ts=([^;]*)/.exec(signature)?.[1] ?? "", 10);
    const age = Math.floor(Date.now() / 1000) - ts;
    if (age > 5) fail(`ts ${ts} is ${age} s old; the SDK allows 5 s (run right after hookd sign)`);
    fail("the last h1 is not hex HMAC-SHA256(secret, ts + ':' + body)");
  }
  return "accepted by Webhooks.isSignatureValid";
}

async function razorpay(secret, bodyFile, headersFile) {
  const { validateWebhookSignature } = require("razorpay/dist/utils/razorpay-utils");
  const headers = readHeaders(headersFile);
  const signature = header(headers, "X-Razorpay-Signature");
  header(headers, "x-razorpay-event-id");
  let ok;
  try {
    ok = validateWebhookSignature(readText(bodyFile, "body file"), signature, secret);
  } catch (e) {
    fail(e.message);
  }
  if (!ok) fail("X-Razorpay-Signature is not hex HMAC-SHA256(secret, body)");
  return "accepted by validateWebhookSignature";
}

// Checkout.com has no Node SDK that verifies webhooks: the documented formula, compared as text.
async function checkout(secret, bodyFile, headersFile) {
  const { createHmac } = await import("node:crypto");
  const signature = header(readHeaders(headersFile), "Cko-Signature");
  const expected = createHmac("sha256", secret).update(readText(bodyFile, "body file"), "utf8").digest("hex");
  if (signature !== expected) fail("Cko-Signature is not hex HMAC-SHA256(signature key, body)");
  return "matches the documented Cko-Signature formula (no SDK verifies it)";
}

async function gocardless(secret, bodyFile, headersFile) {
  const webhooks = require("gocardless-nodejs/webhooks");
  const signature = header(readHeaders(headersFile), "Webhook-Signature");
  let events;
  try {
    events = webhooks.parse(readFileSync(bodyFile), secret, signature);
  } catch (e) {
    fail(`Webhook-Signature is not hex HMAC-SHA256(secret, body): ${e.name}`);
  }
  return `${events.length} event(s) accepted by webhooks.parse`;
}

async function braintreeCheck(secret, bodyFile) {
  const braintree = require("braintree");
  const colon = secret.indexOf(":");
  if (colon <= 0) usage("braintree's secret is PUBLIC_KEY:PRIVATE_KEY");
  const form = new URLSearchParams(readText(bodyFile, "body file"));
  const signature = form.get("bt_signature");
  const payload = form.get("bt_payload");
  if (!signature || !payload) fail("the body is not a form of bt_signature and bt_payload");
  const gateway = new braintree.BraintreeGateway({
    environment: braintree.Environment.Sandbox,
    merchantId: "hookd",
    publicKey: secret.slice(0, colon),
    privateKey: secret.slice(colon + 1),
  });
  let notification;
  try {
    notification = await gateway.webhookNotification.parse(signature, payload);
  } catch (e) {
    fail(`webhookNotification.parse: ${e.message}`);
  }
  return `accepted by webhookNotification.parse (kind ${notification.kind}, timestamp ${new Date(notification.timestamp).toISOString()})`;
}

const [provider, secret, bodyFile, headersFile, notificationUrl] = process.argv.slice(2);
if (!provider || secret === undefined || !bodyFile || !headersFile) usage("missing arguments");
const checks = { adyen, square, paddle, razorpay, checkout, gocardless, braintree: braintreeCheck };
if (!checks[provider]) usage(`unknown provider ${JSON.stringify(provider)}`);
try {
  console.log(`ok: ${await checks[provider](secret, bodyFile, headersFile, notificationUrl)}`);
} catch (e) {
  fail(e.message);
}
