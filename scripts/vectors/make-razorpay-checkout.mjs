// Writes tests/vectors/{razorpay,checkout}.json: known-answer signature vectors for hookd's
// Rust tests. Razorpay's verdicts come from its own Node SDK
// (`validateWebhookSignature(body, signature, secret)` in `razorpay/dist/utils/razorpay-utils`).
// Checkout.com publishes no Node SDK that verifies webhooks, so its verdicts are computed here
// from the documented formula (hex HMAC-SHA256 of the raw body under the signature key),
// compared as text the way Razorpay's SDK does.
import { createHmac } from "node:crypto";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const require = createRequire(import.meta.url);
const here = dirname(fileURLToPath(import.meta.url));
const outDir = join(here, "..", "..", "tests", "vectors");
const { validateWebhookSignature } = require("razorpay/dist/utils/razorpay-utils");

const hexHmac = (secret, body) => createHmac("sha256", secret).update(body, "utf8").digest("hex");

function sdkName(pkg) {
  const version = JSON.parse(readFileSync(join(here, "node_modules", pkg, "package.json"), "utf8")).version;
  return `${pkg}@${version}`;
}

function write(name, doc) {
  mkdirSync(outDir, { recursive: true });
  writeFileSync(join(outDir, `${name}.json`), JSON.stringify(doc, null, 2) + "\n");
  console.log(`tests/vectors/${name}.json: ${doc.cases.length} cases, ${doc.quirks.length} quirks`);
}

function judge(fn) {
  try {
    return { valid: fn() === true };
  } catch (e) {
    return { valid: false, sdk_error: String(e.message ?? e) };
  }
}

// ------------------------------------------------------------------------------- razorpay

const RAZORPAY_SECRET = "hookd-vectors-razorpay-webhook-secret";
const RAZORPAY_OTHER = "another-razorpay-webhook-secret";

const captured = {
  entity: "event",
  account_id: "acc_BFQ7uQEaa7j2z7",
  event: "payment.captured",
  contains: ["payment"],
  payload: {
    payment: {
      entity: {
        id: "pay_DESlfW9H8K9uqM",
        entity: "payment",
        amount: 50000,
        currency: "INR",
        status: "captured",
        order_id: "order_DESlLckIVRkHWj",
        method: "upi",
        captured: true,
        description: "Abonnement — Café",
        email: "gaurav.kumar@example.com",
        contact: "+919876543210",
        customer_id: "cust_DitrYCFtCIokBO",
        notes: [],
        created_at: 1567674599,
      },
    },
  },
  created_at: 1567674606,
};
const refunded = {
  entity: "event",
  account_id: "acc_BFQ7uQEaa7j2z7",
  event: "refund.processed",
  contains: ["refund", "payment"],
  payload: {
    refund: {
      entity: {
        id: "rfnd_FP8QHiV938haTz",
        entity: "refund",
        amount: 20000,
        currency: "INR",
        payment_id: "pay_DESlfW9H8K9uqM",
        status: "processed",
        speed_processed: "normal",
        created_at: 1567675000,
      },
    },
    payment: { entity: { id: "pay_DESlfW9H8K9uqM", entity: "payment", amount: 50000, amount_refunded: 20000 } },
  },
  created_at: 1567675001,
};

function razorpayVectors() {
  const S = RAZORPAY_SECRET;
  const compact = JSON.stringify(captured);
  const pretty = JSON.stringify(refunded, null, 2) + "\n";
  const sdkCase = (name, description, { body, signature, secret = S, signedWith }) => {
    const c = { name, description, secret, body, signature };
    if (signedWith !== undefined && signedWith !== secret) c.signed_with_secret = signedWith;
    return { ...c, ...judge(() => validateWebhookSignature(body, signature, secret)) };
  };
  const cases = [
    sdkCase("payment_captured", "payment.captured, compact JSON with non-ASCII text", { body: compact, signature: hexHmac(S, compact) }),
    sdkCase("refund_processed_pretty", "refund.processed, pretty-printed with a final newline", { body: pretty, signature: hexHmac(S, pretty) }),
    sdkCase("wrong_secret", "signed with another webhook secret", {
      body: compact,
      signature: hexHmac(RAZORPAY_OTHER, compact),
      signedWith: RAZORPAY_OTHER,
    }),
    sdkCase("tampered_body", "amount changed after signing", {
      body: compact.replace('"amount":50000', '"amount":5000'),
      signature: hexHmac(S, compact),
    }),
    sdkCase("reserialised_body", "the same JSON re-serialised (spaces): the raw body is what is signed", {
      body: JSON.stringify(captured, null, 1),
      signature: hexHmac(S, compact),
    }),
    sdkCase("truncated_signature", "the signature without its last byte", { body: compact, signature: hexHmac(S, compact).slice(0, 62) }),
  ];
  const quirks = [
    sdkCase("signature_uppercase", "the signature in uppercase hex: the SDK compares text, so it rejects", {
      body: compact,
      signature: hexHmac(S, compact).toUpperCase(),
    }),
    sdkCase("signature_trailing_space", "a space after the signature: the SDK does not trim", {
      body: compact,
      signature: hexHmac(S, compact) + " ",
    }),
    sdkCase("empty_secret", "signed and checked with an empty secret: the SDK accepts it", {
      body: compact,
      signature: hexHmac("", compact),
      secret: "",
    }),
  ];
  write("razorpay", {
    sdk: sdkName("razorpay"),
    scheme: "X-Razorpay-Signature: hex(HMAC-SHA256(key = webhook secret as UTF-8, msg = raw body))",
    verified_with: "validateWebhookSignature(body, signature, secret) from razorpay/dist/utils/razorpay-utils",
    cases,
    quirks,
  });
}

// ------------------------------------------------------------------------------- checkout

const CHECKOUT_KEY = "hookd-vectors-checkout-signature-key";
const CHECKOUT_OTHER = "another-checkout-signature-key";

const checkoutCaptured = {
  id: "evt_az5sblvku4ge3dwpztvyizgcau",
  type: "payment_captured",
  version: "1.0.33",
  created_on: "2024-06-12T10:20:41.000Z",
  data: {
    id: "pay_mbabizu24mvu3mela5njyhpit4",
    action_id: "act_y3oqhf46pyzuxjbcn2giaqnb44",
    reference: "ORD-5023-4E89",
    amount: 6540,
    currency: "EUR",
    processed_on: "2024-06-12T10:20:40.000Z",
    response_code: "10000",
    response_summary: "Approved",
    customer: { id: "cus_udst2tfldj6upmye2reztkmm4i", email: "jürgen@example.com" },
  },
  _links: { self: { href: "https://api.checkout.com/workflows/events/evt_az5sblvku4ge3dwpztvyizgcau" } },
};

// Computed, not an SDK's verdict: valid when the header is exactly the lowercase hex hookd expects.
function checkoutVectors() {
  const K = CHECKOUT_KEY;
  const compact = JSON.stringify(checkoutCaptured);
  const pretty = JSON.stringify(checkoutCaptured, null, 2);
  const expected = (secret, body) => hexHmac(secret, body);
  const hand = (name, description, { body, signature, key = K, signedWith, valid }) => {
    const c = { name, description, key, body, signature, valid };
    if (signedWith !== undefined && signedWith !== key) c.signed_with_key = signedWith;
    return c;
  };
  const good = expected(K, compact);
  const cases = [
    hand("payment_captured", "payment_captured, compact JSON with non-ASCII text", { body: compact, signature: good, valid: true }),
    hand("pretty_printed", "the same event pretty-printed", { body: pretty, signature: expected(K, pretty), valid: true }),
    hand("wrong_key", "signed with another signature key", {
      body: compact,
      signature: expected(CHECKOUT_OTHER, compact),
      signedWith: CHECKOUT_OTHER,
      valid: false,
    }),
    hand("tampered_body", "amount changed after signing", { body: compact.replace('"amount":6540', '"amount":654'), signature: good, valid: false }),
    hand("reserialised_body", "the JSON re-serialised: the raw body is what is signed", { body: pretty, signature: good, valid: false }),
  ];
  write("checkout", {
    sdk: "none: Checkout.com publishes no Node SDK that verifies webhooks; computed with node:crypto",
    scheme: "Cko-Signature: hex(HMAC-SHA256(key = signature key as UTF-8, msg = raw body))",
    verified_with: "createHmac('sha256', key).update(body).digest('hex') === signature",
    cases,
    quirks: [],
  });
}

razorpayVectors();
checkoutVectors();
