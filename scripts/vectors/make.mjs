// Writes tests/vectors/{adyen,square,paddle}.json: known-answer signature vectors whose
// verdicts come from each provider's own SDK, so hookd's Rust tests need no Node.
// Signatures for Square and Paddle are built from the documented formula and kept only
// as "valid" when the SDK accepts them (both SDKs compare the whole string with ===, so an
// accepted signature is exactly the one the SDK computes).
import { createHmac } from "node:crypto";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const require = createRequire(import.meta.url);
const here = dirname(fileURLToPath(import.meta.url));
const outDir = join(here, "..", "..", "tests", "vectors");

const { hmacValidator: HmacValidator } = require("@adyen/api-library");
const { WebhooksHelper } = require("square");
const { WebhooksHelper: LegacyWebhooksHelper } = require("square/legacy");
const { NodeRuntime, Webhooks } = require("@paddle/paddle-node-sdk");

function sdkName(pkg) {
  const version = JSON.parse(readFileSync(join(here, "node_modules", pkg, "package.json"), "utf8")).version;
  return `${pkg}@${version}`;
}

function write(name, doc) {
  mkdirSync(outDir, { recursive: true });
  writeFileSync(join(outDir, `${name}.json`), JSON.stringify(doc, null, 2) + "\n");
  console.log(`tests/vectors/${name}.json: ${doc.cases.length} cases, ${doc.quirks.length} quirks`);
}

// Runs an SDK verdict; an SDK that throws has rejected the input, and we keep its words.
async function judge(fn) {
  try {
    return { valid: (await fn()) === true };
  } catch (e) {
    return { valid: false, sdk_error: String(e.message ?? e) };
  }
}

// ---------------------------------------------------------------------------------- adyen

const ADYEN_KEY = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056";
const ADYEN_OTHER_KEY = "9A1F3E6C2B7D4F8E0A5C3D1B6E9F2A4C7D0B3E5F8A1C4D7E0B2F5A8C1D4E7F03";
const adyen = new HmacValidator();

const authorisation = {
  additionalData: { authCode: "065696", cardSummary: "1111", expiryDate: "03/2030" },
  amount: { currency: "EUR", value: 1000 },
  eventCode: "AUTHORISATION",
  eventDate: "2024-06-12T10:32:47+02:00",
  merchantAccountCode: "HookdShopECOM",
  merchantReference: "order-20240612-0001",
  operations: ["CANCEL", "CAPTURE", "REFUND"],
  paymentMethod: "visa",
  pspReference: "8535296650153317",
  success: "true",
};
const authorisationRefused = {
  additionalData: { cardSummary: "0008", expiryDate: "03/2030" },
  amount: { currency: "USD", value: 2599 },
  eventCode: "AUTHORISATION",
  eventDate: "2024-06-12T10:40:03+02:00",
  merchantAccountCode: "HookdShopECOM",
  merchantReference: "order-20240612-0002",
  paymentMethod: "mc",
  pspReference: "8815296650441822",
  reason: "Refused",
  success: "false",
};
const capture = {
  additionalData: {},
  amount: { currency: "EUR", value: 1000 },
  eventCode: "CAPTURE",
  eventDate: "2024-06-12T11:02:15+02:00",
  merchantAccountCode: "HookdShopECOM",
  merchantReference: "order-20240612-0001",
  originalReference: "8535296650153317",
  paymentMethod: "visa",
  pspReference: "8825296652031941",
  success: "true",
};
const refund = {
  additionalData: {},
  amount: { currency: "EUR", value: 500 },
  eventCode: "REFUND",
  eventDate: "2024-06-14T09:15:00+02:00",
  merchantAccountCode: "HookdShopECOM",
  merchantReference: "refund-20240614-0001",
  originalReference: "8535296650153317",
  paymentMethod: "visa",
  pspReference: "8835296838271104",
  success: "true",
};
const chargeback = {
  additionalData: {
    chargebackReasonCode: "10.4",
    chargebackSchemeCode: "visa",
    defensePeriodEndsAt: "2024-07-10T00:00:00+02:00",
    disputeStatus: "Undefended",
  },
  amount: { currency: "EUR", value: 1000 },
  eventCode: "CHARGEBACK",
  eventDate: "2024-06-20T14:21:09+02:00",
  merchantAccountCode: "HookdShopECOM",
  merchantReference: "order-20240612-0001",
  originalReference: "8535296650153317",
  paymentMethod: "visa",
  pspReference: "9915296931104528",
  reason: "Other Fraud-Card Absent Environment",
  success: "true",
};
// REPORT_AVAILABLE carries neither originalReference nor a merchantReference of its own.
const reportAvailable = {
  additionalData: {},
  amount: { currency: "EUR", value: 0 },
  eventCode: "REPORT_AVAILABLE",
  eventDate: "2024-06-13T02:00:12+02:00",
  merchantAccountCode: "HookdShopECOM",
  pspReference: "settlement_detail_report_batch_117.csv",
  reason: "https://ca-test.adyen.com/reports/download/MerchantAccount/HookdShopECOM/settlement_detail_report_batch_117.csv",
  success: "true",
};
const nonAscii = {
  additionalData: {},
  amount: { currency: "JPY", value: 12800 },
  eventCode: "AUTHORISATION",
  eventDate: "2024-06-15T18:05:44+09:00",
  merchantAccountCode: "HookdShopECOM",
  merchantReference: "Bestellung-Müller-№42-東京-€",
  paymentMethod: "jcb",
  pspReference: "8845296947532210",
  success: "true",
};

const clone = (v) => JSON.parse(JSON.stringify(v));

function adyenSign(item, key) {
  const signed = clone(item);
  signed.additionalData = { ...(signed.additionalData ?? {}), hmacSignature: adyen.calculateHmac(signed, key) };
  return signed;
}

function adyenBody(items) {
  return JSON.stringify({ live: "false", notificationItems: items.map((i) => ({ NotificationRequestItem: i })) });
}

function withoutSignature(item) {
  const copy = clone(item);
  if (copy.additionalData) delete copy.additionalData.hmacSignature;
  return copy;
}

// One case: the body as sent, each item judged by HmacValidator.validateHMAC with `key`.
async function adyenCase(name, description, key, items, extra = {}) {
  const body = extra.bodyText ?? adyenBody(items);
  const parsed = JSON.parse(body).notificationItems.map((n) => n.NotificationRequestItem);
  const verdicts = [];
  for (const item of parsed) {
    const v = await judge(() => adyen.validateHMAC(item, key));
    let expected;
    try {
      expected = adyen.calculateHmac(withoutSignature(item), key);
    } catch (e) {
      expected = null;
      v.sdk_error ??= String(e.message);
    }
    verdicts.push({
      psp_reference: item.pspReference ?? null,
      signing_string: expected === null ? null : adyen.getDataToSign(withoutSignature(item)),
      signature_in_body: item.additionalData?.hmacSignature ?? null,
      expected_signature: expected,
      ...v,
    });
  }
  const c = { name, description, key, body };
  if (extra.unsigned) c.unsigned_body = adyenBody(items.map(withoutSignature));
  if (extra.signedWith) c.signed_with_key = extra.signedWith;
  c.items = verdicts;
  c.valid = verdicts.every((v) => v.valid);
  return c;
}

async function adyenVectors() {
  const K = ADYEN_KEY;
  const s = (i) => adyenSign(i, K);
  const cases = [];
  const ok = (name, description, items) => adyenCase(name, description, K, items.map(s), { unsigned: true });
  {
    // The worked example of Adyen's HMAC documentation, with the key it uses (ADYEN_KEY):
    // the SDK must reproduce the signature the docs print.
    const docs = {
      additionalData: {},
      amount: { currency: "EUR", value: 1130 },
      eventCode: "AUTHORISATION",
      eventDate: "2014-08-06T13:39:03+02:00",
      merchantAccountCode: "TestMerchant",
      merchantReference: "TestPayment-1407325143704",
      paymentMethod: "visa",
      pspReference: "7914073381342284",
      success: "true",
    };
    const c = await ok("docs_example", "the example of Adyen's HMAC docs (expected coqCmt/...)", [docs]);
    if (c.items[0].expected_signature !== "coqCmt/IZ4E3CzPvMY8zTjQVL5hYJUiBRg8UU+iCWo0=") throw new Error("SDK disagrees with Adyen's docs");
    cases.push(c);
  }
  cases.push(await ok("authorisation_success", "AUTHORISATION, success true", [authorisation]));
  cases.push(await ok("authorisation_refused", "AUTHORISATION, success false (Refused)", [authorisationRefused]));
  cases.push(await ok("capture", "CAPTURE with originalReference", [capture]));
  cases.push(await ok("refund", "partial REFUND", [refund]));
  cases.push(await ok("chargeback", "CHARGEBACK with dispute additionalData", [chargeback]));
  cases.push(await ok("multi_item", "three items in one notification, each signed on its own", [authorisation, capture, refund]));
  cases.push(
    await ok("missing_references", "REPORT_AVAILABLE: no originalReference, no merchantReference (both sign as empty)", [reportAvailable]),
  );
  cases.push(await ok("non_ascii_reference", "merchantReference with non-ASCII (UTF-8 bytes are signed)", [nonAscii]));
  cases.push(
    await adyenCase(
      "non_ascii_escaped",
      "same item, body spells the non-ASCII characters as \\u escapes: the decoded value is signed, not the JSON text",
      K,
      [s(nonAscii)],
      { bodyText: adyenBody([s(nonAscii)]).replace(/[\u0080-\uffff]/g, (ch) => "\\u" + ch.charCodeAt(0).toString(16).padStart(4, "0")) },
    ),
  );

  // Each signed field changed once after signing the CAPTURE item.
  const tamper = {
    pspReference: (i) => (i.pspReference = "8825296652031942"),
    originalReference: (i) => (i.originalReference = "8535296650153318"),
    merchantAccountCode: (i) => (i.merchantAccountCode = "HookdShopPOS"),
    merchantReference: (i) => (i.merchantReference = "order-20240612-0009"),
    value: (i) => (i.amount.value = 100000),
    currency: (i) => (i.amount.currency = "USD"),
    eventCode: (i) => (i.eventCode = "REFUND"),
    success: (i) => (i.success = "false"),
  };
  for (const [field, change] of Object.entries(tamper)) {
    const item = s(capture);
    change(item);
    cases.push(await adyenCase(`tampered_${field}`, `CAPTURE signed, then ${field} changed`, K, [item]));
  }
  {
    const item = s(capture);
    item.eventDate = "2024-06-13T11:02:15+02:00";
    item.paymentMethod = "mc";
    cases.push(await adyenCase("unsigned_fields_changed", "eventDate and paymentMethod are not signed: still valid", K, [item]));
  }
  {
    const items = [s(authorisation), s(capture), s(refund)];
    items[1].amount.value = 1;
    cases.push(await adyenCase("multi_item_one_tampered", "second of three items tampered: only it fails", K, items));
  }
  {
    const items = [s(authorisation), s(capture)];
    [items[0].additionalData.hmacSignature, items[1].additionalData.hmacSignature] = [
      items[1].additionalData.hmacSignature,
      items[0].additionalData.hmacSignature,
    ];
    cases.push(await adyenCase("signatures_swapped", "two items carry each other's hmacSignature", K, items));
  }
  cases.push(
    await adyenCase("wrong_key", "signed with another HMAC key than the one verifying", K, [adyenSign(authorisation, ADYEN_OTHER_KEY)], {
      signedWith: ADYEN_OTHER_KEY,
    }),
  );
  cases.push(
    await adyenCase("lowercase_key", "the same key written in lowercase hex decodes to the same bytes", K.toLowerCase(), [s(authorisation)]),
  );
  {
    const item = s(authorisation);
    delete item.additionalData.hmacSignature;
    cases.push(await adyenCase("signature_missing", "no hmacSignature in additionalData (the SDK throws)", K, [item]));
  }
  {
    const item = s(authorisation);
    item.additionalData.hmacSignature = "";
    cases.push(await adyenCase("signature_empty", "hmacSignature is the empty string (the SDK throws)", K, [item]));
  }

  // Shapes the docs do not send, kept apart: what the SDK does with them is informative,
  // not necessarily what hookd must do.
  const quirks = [];
  {
    const item = clone(authorisation);
    item.success = true;
    quirks.push(
      await adyenCase("success_boolean", "success as a JSON boolean: the SDK signs the text \"true\"", K, [s(item)], { unsigned: true }),
    );
  }
  {
    const item = clone(authorisation);
    item.amount.value = "1000";
    quirks.push(await adyenCase("value_string", "amount.value as a string: signs the same as the number", K, [s(item)]));
  }
  {
    const item = clone(authorisation);
    item.merchantReference = null;
    item.originalReference = null;
    quirks.push(await adyenCase("references_null", "references as JSON null: the SDK signs them as empty, like missing", K, [s(item)]));
  }
  {
    const item = clone(authorisation);
    item.merchantReference = "order:0001";
    quirks.push(await adyenCase("colon_in_field", "a ':' inside a signed field is not escaped by the SDK", K, [s(item)]));
  }
  {
    const item = s(authorisation);
    delete item.amount;
    quirks.push(await adyenCase("amount_missing", "no amount object: the SDK throws reading amount.value", K, [item]));
  }
  {
    const item = s(authorisation);
    item.additionalData.hmacSignature = item.additionalData.hmacSignature.replace(/=+$/, "");
    quirks.push(await adyenCase("signature_unpadded", "base64 signature without '=' padding: the SDK decodes leniently", K, [item]));
  }
  {
    const item = s(authorisation);
    item.additionalData.hmacSignature = item.additionalData.hmacSignature.replace(/\+/g, "-").replace(/\//g, "_");
    quirks.push(await adyenCase("signature_urlsafe", "base64url alphabet in the signature: Node's decoder accepts it", K, [item]));
  }
  {
    const item = s(authorisation);
    item.additionalData.hmacSignature = item.additionalData.hmacSignature + "!!";
    quirks.push(await adyenCase("signature_trailing_junk", "non-base64 characters after the signature are skipped by Node's decoder", K, [item]));
  }
  {
    const item = adyenSign(authorisation, "zz" + K.slice(2));
    quirks.push(
      await adyenCase("key_not_hex", "a key that is not hex: Buffer.from(key, 'hex') stops at the first bad pair (here: empty key)", "zz" + K.slice(2), [item]),
    );
  }

  write("adyen", {
    sdk: sdkName("@adyen/api-library"),
    scheme:
      "per item: additionalData.hmacSignature = base64(HMAC-SHA256(key = hex-decoded key, msg = pspReference:originalReference:merchantAccountCode:merchantReference:amount.value:amount.currency:eventCode:success)); missing fields are empty",
    verified_with: "new HmacValidator().validateHMAC(notificationRequestItem, hexKey); expected_signature from calculateHmac(item, hexKey)",
    cases,
    quirks,
  });
}

// --------------------------------------------------------------------------------- square

const SQUARE_KEY = "asdf1234ZpX9vQ0hLw7mKj3R";
const SQUARE_OTHER_KEY = "Qm8tYv3nR5sL2wK9pX1cZ7bF";
const SQUARE_URL = "https://hooks.example.com/hooks/square";

const squarePaymentUpdated = {
  merchant_id: "6SSW7HV8K2ST5",
  type: "payment.updated",
  event_id: "6a8f5f28-54a1-4eb0-a98a-3111513fd4fc",
  created_at: "2024-06-12T21:27:34.308Z",
  data: {
    type: "payment",
    id: "hYy9pRFVxpDsO1FB05SunFWUe9JZY",
    object: {
      payment: {
        amount_money: { amount: 1500, currency: "USD" },
        approved_money: { amount: 1500, currency: "USD" },
        card_details: {
          avs_status: "AVS_ACCEPTED",
          card: {
            bin: "540988",
            card_brand: "MASTERCARD",
            card_type: "CREDIT",
            exp_month: 11,
            exp_year: 2026,
            fingerprint: "sq-1-Tvruf3vPQxlvI6n0IcKYfBukrcv6IqWr8UyBdViWXU2yzGn5VMJvrsHMKpINMhPmVg",
            last_4: "9029",
            prepaid_type: "NOT_PREPAID",
          },
          card_payment_timeline: { authorized_at: "2024-06-12T21:27:33.795Z", captured_at: "2024-06-12T21:27:34.262Z" },
          cvv_status: "CVV_ACCEPTED",
          entry_method: "KEYED",
          statement_description: "SQ *DEFAULT TEST ACCOUNT",
          status: "CAPTURED",
        },
        created_at: "2024-06-12T21:27:30.792Z",
        delay_action: "CANCEL",
        delay_duration: "PT168H",
        delayed_until: "2024-06-19T21:27:30.792Z",
        id: "hYy9pRFVxpDsO1FB05SunFWUe9JZY",
        location_id: "NAQ1FHV6ZJ8YV",
        order_id: "CAISENgvlJ6jLWAzERDzjyHVybY",
        receipt_number: "hYy9",
        receipt_url: "https://squareupsandbox.com/receipt/preview/hYy9pRFVxpDsO1FB05SunFWUe9JZY",
        risk_evaluation: { created_at: "2024-06-12T21:27:31.025Z", risk_level: "NORMAL" },
        source_type: "CARD",
        status: "COMPLETED",
        total_money: { amount: 1500, currency: "USD" },
        updated_at: "2024-06-12T21:27:34.308Z",
        version: 4,
        version_token: "Pbjj5TCP9PEYFpfNIdm8kA6Lz8Y5gKnuT7ngd4vcHyA6o",
      },
    },
  },
};
const squareRefundCreated = {
  merchant_id: "6SSW7HV8K2ST5",
  type: "refund.created",
  event_id: "9a1c0fb2-8d44-4b6f-9d0e-5c3b1e7f2a86",
  created_at: "2024-06-14T16:43:02.144Z",
  data: {
    type: "refund",
    id: "hYy9pRFVxpDsO1FB05SunFWUe9JZY_KlWP8IC1557ddwc9QWTKrCVU6m0JXDz15R2Qym5eQfR",
    object: {
      refund: {
        amount_money: { amount: 500, currency: "USD" },
        created_at: "2024-06-14T16:43:01.775Z",
        id: "hYy9pRFVxpDsO1FB05SunFWUe9JZY_KlWP8IC1557ddwc9QWTKrCVU6m0JXDz15R2Qym5eQfR",
        location_id: "NAQ1FHV6ZJ8YV",
        order_id: "lkL7vtUDe4Ep8TQ3h1DBeVRz8CeZY",
        payment_id: "hYy9pRFVxpDsO1FB05SunFWUe9JZY",
        reason: "Returned item — wrong size",
        status: "PENDING",
        updated_at: "2024-06-14T16:43:01.775Z",
        version: 1,
      },
    },
  },
};

const squareSig = (key, url, body) => createHmac("sha256", key).update(url + body, "utf8").digest("base64");

async function squareCase(name, description, { key, url, body, signature, signedUrl, signedKey }) {
  const v = await judge(() =>
    WebhooksHelper.verifySignature({ requestBody: body, signatureHeader: signature, signatureKey: key, notificationUrl: url }),
  );
  const legacy = await judge(() => LegacyWebhooksHelper.isValidWebhookEventSignature(body, signature, key, url));
  if (legacy.valid !== v.valid) throw new Error(`${name}: square and square/legacy disagree`);
  const c = { name, description, signature_key: key, notification_url: url, body, signature };
  if (signedUrl !== undefined && signedUrl !== url) c.signed_url = signedUrl;
  if (signedKey !== undefined && signedKey !== key) c.signed_with_key = signedKey;
  return { ...c, ...v };
}

async function squareVectors() {
  const K = SQUARE_KEY;
  const U = SQUARE_URL;
  const paymentBody = JSON.stringify(squarePaymentUpdated);
  const refundBody = JSON.stringify(squareRefundCreated);
  const signed = (name, description, body, url = U, verifyUrl = url, key = K, verifyKey = key) =>
    squareCase(name, description, {
      key: verifyKey,
      url: verifyUrl,
      body,
      signature: squareSig(key, url, body),
      signedUrl: url,
      signedKey: key,
    });
  const cases = [];
  cases.push(await signed("payment_updated", "payment.updated, compact JSON as Square sends it", paymentBody));
  cases.push(await signed("refund_created", "refund.created (non-ASCII in reason)", refundBody));
  cases.push(
    await signed("pretty_body", "the same event pretty-printed: the raw bytes are signed", JSON.stringify(squarePaymentUpdated, null, 2)),
  );
  const withQuery = `${U}?source=square&env=sandbox`;
  cases.push(await signed("url_with_query", "notification URL with a query string: signed over the whole URL", paymentBody, withQuery));
  cases.push(
    await signed("url_query_dropped", "signed over the URL with its query, verified with the URL without it", paymentBody, withQuery, U),
  );
  cases.push(await signed("url_trailing_slash", "URL differs only by a trailing slash", paymentBody, U, `${U}/`));
  cases.push(await signed("wrong_url", "verified with another host's URL", paymentBody, U, "https://other.example.com/hooks/square"));
  cases.push(await signed("http_vs_https", "signed for https, verified with http", paymentBody, U, U.replace("https:", "http:")));
  cases.push(
    await squareCase("tampered_body", "amount changed after signing", {
      key: K,
      url: U,
      body: paymentBody.replace('"amount":1500', '"amount":1'),
      signature: squareSig(K, U, paymentBody),
    }),
  );
  cases.push(
    await squareCase("body_trailing_newline", "a newline appended after signing", {
      key: K,
      url: U,
      body: paymentBody + "\n",
      signature: squareSig(K, U, paymentBody),
    }),
  );
  cases.push(await signed("wrong_key", "signed with another signature key", paymentBody, U, U, SQUARE_OTHER_KEY, K));

  const quirks = [];
  {
    const sig = squareSig(K, U, paymentBody);
    quirks.push(
      await squareCase("signature_unpadded", "base64 without '=' padding: the SDK compares strings, so it rejects", {
        key: K,
        url: U,
        body: paymentBody,
        signature: sig.replace(/=+$/, ""),
      }),
    );
    quirks.push(
      await squareCase("signature_trailing_space", "a trailing space in the header value is not trimmed by the SDK", {
        key: K,
        url: U,
        body: paymentBody,
        signature: sig + " ",
      }),
    );
    quirks.push(
      await squareCase("empty_key", "an empty signature key: the SDK throws", { key: "", url: U, body: paymentBody, signature: sig }),
    );
  }

  write("square", {
    sdk: `${sdkName("square")} (verdicts also checked against square/legacy WebhooksHelper.isValidWebhookEventSignature)`,
    scheme:
      "x-square-hmacsha256-signature = base64(HMAC-SHA256(key = signature key as UTF-8, msg = notification_url + raw body)); the URL is used verbatim, query included",
    verified_with: "await WebhooksHelper.verifySignature({ requestBody, signatureHeader, signatureKey, notificationUrl })",
    cases,
    quirks,
  });
}

// --------------------------------------------------------------------------------- paddle

const PADDLE_SECRET = "pdl_ntfset_01j0gx4q9w3b2m8k7r5t6y1zva_Xk3mP9qL2vR8sT4wY6zB1nC5dF7gH0jK";
const PADDLE_OLD_SECRET = "pdl_ntfset_01hz7c2d5e8f1g4h6j9k3m0n2p_Aa1Bb2Cc3Dd4Ee5Ff6Gg7Hh8Ii9Jj0Kk";

const paddleTransactionCompleted = {
  event_id: "evt_01j0gy6f1x8a2b3c4d5e6f7g8h",
  event_type: "transaction.completed",
  occurred_at: "2024-06-12T10:18:49.621022Z",
  notification_id: "ntf_01j0gy6f4k9m2n3p4q5r6s7t8v",
  data: {
    id: "txn_01j0gy4a7b8c9d0e1f2g3h4j5k",
    items: [
      {
        price: {
          id: "pri_01gsz8x8sawmvhz1pv30nge1ke",
          name: "Monthly (per seat)",
          type: "standard",
          status: "active",
          quantity: { maximum: 999, minimum: 1 },
          tax_mode: "account_setting",
          product_id: "pro_01gsz4t5hdjse780zja8vvr7jg",
          unit_price: { amount: "3000", currency_code: "USD" },
          description: "Monthly",
          trial_period: null,
          billing_cycle: { interval: "month", frequency: 1 },
        },
        quantity: 10,
        proration: null,
      },
    ],
    origin: "web",
    status: "completed",
    details: {
      tax_rates_used: [
        { tax_rate: "0.16", totals: { tax: "4800", total: "34800", discount: "0", subtotal: "30000" } },
      ],
      totals: {
        fee: "2105",
        tax: "4800",
        total: "34800",
        credit: "0",
        balance: "0",
        discount: "0",
        earnings: "27895",
        subtotal: "30000",
        grand_total: "34800",
        currency_code: "USD",
        credit_to_balance: "0",
      },
      line_items: [
        {
          id: "txnitm_01j0gy4a9c0d1e2f3g4h5j6k7m",
          totals: { tax: "4800", total: "34800", discount: "0", subtotal: "30000" },
          item_id: null,
          product: { id: "pro_01gsz4t5hdjse780zja8vvr7jg", name: "AeroEdit Pro", status: "active" },
          price_id: "pri_01gsz8x8sawmvhz1pv30nge1ke",
          quantity: 10,
          tax_rate: "0.16",
          unit_totals: { tax: "480", total: "3480", discount: "0", subtotal: "3000" },
        },
      ],
    },
    checkout: { url: "https://aeroedit.com/pay?_ptxn=txn_01j0gy4a7b8c9d0e1f2g3h4j5k" },
    payments: [
      {
        amount: "34800",
        status: "captured",
        created_at: "2024-06-12T10:18:40.394166Z",
        error_code: null,
        captured_at: "2024-06-12T10:18:47.635628Z",
        method_details: { card: { type: "visa", last4: "3184", expiry_year: 2027, expiry_month: 1, cardholder_name: "Sam Miller" }, type: "card" },
        payment_method_id: "paymtd_01j0gy5f3g4h5j6k7m8n9p0q1r",
        payment_attempt_id: "5f8c1d2e-3a4b-4c5d-8e6f-7a8b9c0d1e2f",
        stored_payment_method_id: "7b1c2d3e-4f5a-4b6c-9d7e-8f9a0b1c2d3e",
      },
    ],
    billed_at: "2024-06-12T10:18:47.635628Z",
    address_id: "add_01j0gy3c5d6e7f8g9h0j1k2m3n",
    created_at: "2024-06-12T10:18:21.014955Z",
    invoice_id: "inv_01j0gy6e2f3g4h5j6k7m8n9p0q",
    updated_at: "2024-06-12T10:18:49.201231Z",
    business_id: null,
    custom_data: null,
    customer_id: "ctm_01j0gy3b4c5d6e7f8g9h0j1k2m",
    discount_id: null,
    currency_code: "USD",
    billing_period: { ends_at: "2024-07-12T10:18:47.635628Z", starts_at: "2024-06-12T10:18:47.635628Z" },
    invoice_number: "325-10566",
    billing_details: null,
    collection_mode: "automatic",
    subscription_id: "sub_01j0gy6e5f6g7h8j9k0m1n2p3q",
  },
};
const paddleAdjustmentCreated = {
  event_id: "evt_01j0m2k7d8e9f0g1h2j3k4m5n6",
  event_type: "adjustment.created",
  occurred_at: "2024-06-14T08:02:11.348177Z",
  notification_id: "ntf_01j0m2k7g1h2j3k4m5n6p7q8r9",
  data: {
    id: "adj_01j0m2k5a6b7c8d9e0f1g2h3j4",
    items: [
      {
        id: "adjitm_01j0m2k5c8d9e0f1g2h3j4k5m6",
        type: "partial",
        amount: "17400",
        reason: "Kunde hat 5 Plätze zurückgegeben",
        item_id: "txnitm_01j0gy4a9c0d1e2f3g4h5j6k7m",
        totals: { tax: "2400", total: "17400", subtotal: "15000" },
        proration: null,
      },
    ],
    action: "refund",
    type: "partial",
    reason: "Kunde hat 5 Plätze zurückgegeben",
    status: "pending_approval",
    totals: { fee: "0", tax: "2400", total: "17400", earnings: "0", subtotal: "15000", currency_code: "USD" },
    created_at: "2024-06-14T08:02:10.914537Z",
    updated_at: "2024-06-14T08:02:10.914537Z",
    customer_id: "ctm_01j0gy3b4c5d6e7f8g9h0j1k2m",
    currency_code: "USD",
    payout_totals: { fee: "0", tax: "2400", total: "17400", earnings: "0", subtotal: "15000", currency_code: "USD" },
    transaction_id: "txn_01j0gy4a7b8c9d0e1f2g3h4j5k",
    subscription_id: "sub_01j0gy6e5f6g7h8j9k0m1n2p3q",
    credit_applied_to_balance: null,
  },
};

const paddleH1 = (secret, ts, body) => createHmac("sha256", secret).update(`${ts}:${body}`, "utf8").digest("hex");

async function paddleVectors() {
  NodeRuntime.initialize();
  const webhooks = new Webhooks();
  const S = PADDLE_SECRET;
  const txnBody = JSON.stringify(paddleTransactionCompleted);
  const adjBody = JSON.stringify(paddleAdjustmentCreated);

  async function paddleCase(name, description, { secret, body, ts, header, signedWith, unmarshal = false }) {
    const now = Math.floor(Date.now() / 1000);
    const v = await judge(() => webhooks.isSignatureValid(body, secret, header));
    const c = { name, description, secret, body, ts, header, now };
    if (signedWith !== undefined && signedWith !== secret) c.signed_with_secret = signedWith;
    if (unmarshal && v.valid) {
      // unmarshal parses the body and types the event: a second witness that the SDK accepts it.
      const event = await webhooks.unmarshal(body, secret, header);
      c.unmarshal = { eventId: event.eventId, eventType: event.eventType };
    }
    return { ...c, ...v };
  }
  const fresh = () => Math.floor(Date.now() / 1000);
  const signed = (name, description, body, secret = S, verifySecret = secret, opts = {}) => {
    const ts = fresh();
    return paddleCase(name, description, {
      secret: verifySecret,
      body,
      ts,
      header: `ts=${ts};h1=${paddleH1(secret, ts, body)}`,
      signedWith: secret,
      ...opts,
    });
  };

  const cases = [];
  cases.push(await signed("transaction_completed", "transaction.completed, compact JSON", txnBody, S, S, { unmarshal: true }));
  cases.push(await signed("adjustment_created", "adjustment.created (non-ASCII in reason)", adjBody, S, S, { unmarshal: true }));
  {
    const ts = fresh();
    const good = paddleH1(S, ts, txnBody);
    const old = paddleH1(PADDLE_OLD_SECRET, ts, txnBody);
    cases.push(
      await paddleCase("two_h1_valid_last", "rotation: h1 for an old secret, then h1 for the current one", {
        secret: S,
        body: txnBody,
        ts,
        header: `ts=${ts};h1=${old};h1=${good}`,
      }),
    );
    cases.push(
      await paddleCase("two_h1_valid_first", "rotation: h1 for the current secret, then h1 for an old one (the SDK reads only the last h1)", {
        secret: S,
        body: txnBody,
        ts,
        header: `ts=${ts};h1=${good};h1=${old}`,
      }),
    );
    cases.push(
      await paddleCase("tampered_body", "total changed after signing", {
        secret: S,
        body: txnBody.replace('"grand_total":"34800"', '"grand_total":"100"'),
        ts,
        header: `ts=${ts};h1=${good}`,
      }),
    );
    cases.push(
      await paddleCase("tampered_ts", "ts in the header changed by one second after signing", {
        secret: S,
        body: txnBody,
        ts: ts + 1,
        header: `ts=${ts + 1};h1=${good}`,
      }),
    );
  }
  cases.push(await signed("wrong_secret", "signed with another notification secret", txnBody, PADDLE_OLD_SECRET, S));
  {
    const ts = fresh() - 60;
    cases.push(
      await paddleCase("too_old", "correct h1, ts 60 s before now: the SDK allows 5 s", {
        secret: S,
        body: txnBody,
        ts,
        header: `ts=${ts};h1=${paddleH1(S, ts, txnBody)}`,
      }),
    );
  }
  {
    const ts = fresh();
    cases.push(
      await paddleCase("h1_missing", "header with ts only (the SDK throws)", { secret: S, body: txnBody, ts, header: `ts=${ts}` }),
    );
  }

  const quirks = [];
  {
    const ts = fresh() + 3600;
    quirks.push(
      await paddleCase("future_ts", "correct h1, ts an hour ahead of now: the SDK checks only the past side", {
        secret: S,
        body: txnBody,
        ts,
        header: `ts=${ts};h1=${paddleH1(S, ts, txnBody)}`,
      }),
    );
  }
  {
    const ts = fresh();
    const h1 = paddleH1(S, ts, txnBody);
    const header = (name, description, value) => paddleCase(name, description, { secret: S, body: txnBody, ts, header: value });
    quirks.push(await header("h1_uppercase", "h1 in uppercase hex: the SDK compares strings, so it rejects", `ts=${ts};h1=${h1.toUpperCase()}`));
    quirks.push(
      await header("space_after_semicolon", "'ts=..; h1=..': the SDK does not trim, ' h1' is no key, it throws", `ts=${ts}; h1=${h1}`),
    );
    quirks.push(await header("h1_before_ts", "h1 first, ts second: the SDK accepts any order", `h1=${h1};ts=${ts}`));
    quirks.push(await header("unknown_part", "an unknown part (h2=...) is ignored", `ts=${ts};h1=${h1};h2=0000`));
  }

  write("paddle", {
    sdk: sdkName("@paddle/paddle-node-sdk"),
    scheme: "Paddle-Signature: ts=<unix seconds>;h1=<hex(HMAC-SHA256(key = secret as UTF-8, msg = ts + ':' + raw body))>",
    verified_with:
      "NodeRuntime.initialize(); await new Webhooks().isSignatureValid(body, secret, header) (same check as unmarshal(body, secret, header)); judged at `now` (unix seconds)",
    cases,
    quirks,
  });
}

await adyenVectors();
await squareVectors();
await paddleVectors();
